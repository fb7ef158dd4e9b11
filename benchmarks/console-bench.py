#!/usr/bin/python3
"""console-bench: figures for labvm-console (the browser <-> VMI console bridge).

    benchmarks/console-bench.py [--runs N] [--mb MB] [--keys N] [--conns N]
                                [--only throughput,latency,rss]

Runs against a stack that is up (tests/stack up, make demo-up): reads the
LABVM_* variables of its env file (source it first, or pass --env FILE).
Prints one line per figure and a JSON summary at the end (--json FILE too).

throughput  MB/s of console output (`head -c MB | tr | fold` in the guest,
            pty and all) received through the bridge (its own port, and
            through the front end) and directly from the simulator's console
            subresource (wss, plain.kubevirt.io, admin token); the ratio
            bridge/direct. Medians over --runs, runs interleaved.
latency     keystroke round trip: one byte to `cat` in the guest, until the
            tty's echo comes back; p50/p99 through the bridge and direct, and
            the difference (the bridge's added latency).
rss         VmRSS of a private labvm-console (same labvm.conf, own port) with
            --conns idle consoles open:
            (a) "shared": --conns browsers sharing the consoles of as many
                real simulator labs as the capacity allows;
            (b) "separate": --conns browsers, each with its own upstream, to a
                minimal stand-in KubeVirt console endpoint started here (TLS,
                plain.kubevirt.io, a prompt and an echo; the simulator cannot
                host 1,000 guests on one machine), sessions as database rows
                of a private environment.
Nothing here is a test: the machine's 2 cores are shared with everything else.
"""
import argparse
import asyncio
import base64
import json
import os
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
import labvm_ticket as lt  # noqa: E402

import psycopg2  # noqa: E402
import websockets  # noqa: E402

PROTO = "labvm-console.v1"
KPROTO = "plain.kubevirt.io"
E = os.environ


def log(msg):
    print(msg, flush=True)


def load_env(path):
    with open(path) as f:
        for line in f:
            k, _, v = line.strip().partition("=")
            if k and v:
                E.setdefault(k, v.strip("'\""))


# --------------------------------------------------------------- the API
def auth(user):
    pw = E.get("LABVM_PASSWORD", "labvm")
    return "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()


def api(method, path, user, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(E["LABVM_URL"] + path, data=data, method=method,
                                 headers={"Authorization": auth(user)})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read())
        except ValueError:
            return e.code, None


def start_lab(user, timeout=300):
    st, s = api("GET", "/api/sessions/current", user)
    if st == 200:
        api("DELETE", f"/api/sessions/{s['id']}", user)
    st, s = api("POST", "/api/sessions", user, {"lesson": "linux-basics"})
    if st != 201:
        return None, f"{st} {s}"
    deadline = time.monotonic() + timeout
    while s.get("state") == "starting" and time.monotonic() < deadline:
        time.sleep(0.5)
        st, s = api("GET", f"/api/sessions/{s['id']}", user)
    if s.get("state") != "ready":
        api("DELETE", f"/api/sessions/{s['id']}", user)
        return None, f"not ready: {s.get('state')} {s.get('error')}"
    return s, None


# ------------------------------------------------------------ connections
class Conn:
    def __init__(self, ws):
        self.ws = ws
        self.buf = bytearray()

    async def until(self, needle, timeout):
        end = time.monotonic() + timeout
        while needle not in self.buf:
            m = await asyncio.wait_for(self.ws.recv(), max(0.01, end - time.monotonic()))
            if isinstance(m, bytes):
                self.buf += m

    async def close(self):
        await self.ws.close()


async def open_bridge(sid, user, vm, key, base):
    url = f"{base}/console/{sid}?ticket={lt.make(key, sid, user, vm)}"
    ws = await websockets.connect(url, subprotocols=[PROTO], ping_interval=None, max_size=None,
                                  extra_headers={"Authorization": auth(user)}, open_timeout=30,
                                  close_timeout=2)
    while True:
        m = await asyncio.wait_for(ws.recv(), 30)
        if isinstance(m, str) and json.loads(m).get("state") == "open":
            return Conn(ws)
        if isinstance(m, str) and json.loads(m).get("type") == "closed":
            raise RuntimeError(f"bridge refused: {m}")


async def open_direct(vm):
    ctx = ssl.create_default_context(cafile=E["LABVM_KUBE_CA"])
    with open(E["LABVM_KUBE_ADMIN_TOKEN_FILE"]) as f:
        token = f.read().strip()
    ns = E.get("LABVM_NAMESPACE", "labs")
    url = (E["LABVM_KUBE_URL"].replace("https://", "wss://") +
           f"/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{vm}/console")
    ws = await websockets.connect(url, subprotocols=[KPROTO], ssl=ctx, ping_interval=None,
                                  max_size=None, extra_headers={"Authorization": f"Bearer {token}"},
                                  open_timeout=30, close_timeout=2)
    return Conn(ws)


async def fresh_prompt(c):
    c.buf.clear()
    await c.ws.send(b"\x03\r")
    await asyncio.sleep(0.3)
    c.buf.clear()
    await c.ws.send(b"echo PROMPT-$((40+2))\r")
    await c.until(b"PROMPT-42\r\n", 15)
    await asyncio.sleep(0.2)


async def throughput_once(c, mb):
    await fresh_prompt(c)
    c.buf.clear()
    cmd = (f"head -c {mb * 1000 * 1000} /dev/zero | tr '\\0' x | fold -w 99; "
           "echo DONE-$((40+2))\r").encode()
    t0 = time.monotonic()
    await c.ws.send(cmd)
    n = 0
    tail = b""
    while b"DONE-42\r\n" not in tail:
        m = await asyncio.wait_for(c.ws.recv(), 300)
        if isinstance(m, bytes):
            n += len(m)
            tail = (tail + m)[-64:]
    dt = time.monotonic() - t0
    return n / dt / 1e6, n


async def latency_once(c, keys):
    await fresh_prompt(c)
    await c.ws.send(b"stty -icanon; cat >/dev/null\r")
    await asyncio.sleep(0.5)
    while True:  # drain
        try:
            await asyncio.wait_for(c.ws.recv(), 0.2)
        except asyncio.TimeoutError:
            break
    rtts = []
    for i in range(keys):
        ch = b"abcdefghijklmnopqrstuvwxyz"[i % 26:i % 26 + 1]
        t0 = time.monotonic()
        await c.ws.send(ch)
        got = b""
        while ch not in got:
            m = await asyncio.wait_for(c.ws.recv(), 10)
            if isinstance(m, bytes):
                got += m
        rtts.append((time.monotonic() - t0) * 1000)
        await asyncio.sleep(0.005)
    await c.ws.send(b"\x03")
    await c.ws.send(b"stty icanon\r")
    return rtts


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


# ----------------------------------------------------------- private bridge
def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_bridge(tmp, overrides):
    port = free_port()
    conf = os.path.join(tmp, f"bridge-{port}.conf")
    keys = dict(overrides, console_listen=f"127.0.0.1:{port}", log_level="warn")
    with open(E["LABVM_CONF"]) as f, open(conf, "w") as out:
        for line in f:
            if line.split("=")[0].strip() not in keys:
                out.write(line)
        for k, v in keys.items():
            out.write(f"{k} = {v}\n")
    exe = os.path.join(E.get("LABVM_BIN", os.path.join(HERE, "..", "build", "bin")),
                       "labvm-console")
    logf = open(os.path.join(tmp, f"bridge-{port}.log"), "wb")
    p = subprocess.Popen([exe], env=dict(E, LABVM_CONF=conf), stdout=logf, stderr=logf)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            if p.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"private bridge did not start; see {tmp}")
            time.sleep(0.05)
    return p, f"ws://127.0.0.1:{port}"


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if p.returncode != 0:
        log(f"  private bridge exited with status {p.returncode} (log: {p.args[0]} in the tmp folder)")


FAKE = r'''
import asyncio, ssl, sys, websockets
async def h(ws, path):
    if "/console" not in path or ws.subprotocol != "plain.kubevirt.io":
        await ws.close(1008, "no"); return
    await ws.send(b"\r\nbench login: root (automatic login)\r\nroot@bench:~# ")
    async for m in ws:
        if isinstance(m, bytes):
            await ws.send(m)
async def main():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[2], sys.argv[3])
    async with websockets.serve(h, "127.0.0.1", int(sys.argv[1]), ssl=ctx,
                                subprotocols=["plain.kubevirt.io"], ping_interval=None,
                                max_size=None, backlog=2048):
        print("ready", flush=True)
        await asyncio.Future()
asyncio.run(main())
'''


def fake_kubevirt(tmp):
    """A TLS stand-in for the console subresource, and the CA that signs it."""
    ca_key, ca, key, csr, crt = (os.path.join(tmp, n) for n in
                                 ("ca.key", "ca.crt", "srv.key", "srv.csr", "srv.crt"))
    ext = os.path.join(tmp, "ext.cnf")
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)  # noqa: E731
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key,
        "-out", ca, "-days", "1", "-subj", "/CN=console-bench-ca")
    run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
        "-subj", "/CN=127.0.0.1")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
        "-out", crt, "-days", "1", "-extfile", ext)
    port = free_port()
    script = os.path.join(tmp, "fake.py")
    with open(script, "w") as f:
        f.write(FAKE)
    p = subprocess.Popen([sys.executable, script, str(port), crt, key], stdout=subprocess.PIPE,
                         stderr=open(os.path.join(tmp, "fake.log"), "wb"))
    if p.stdout.readline().strip() != b"ready":
        raise RuntimeError("fake console endpoint did not start")
    return p, port, ca


async def open_many(specs, base, key, batch=50):
    conns = []
    for i in range(0, len(specs), batch):
        conns += await asyncio.gather(*(open_bridge(sid, user, vm, key, base)
                                        for sid, user, vm in specs[i:i + batch]))
    return conns


async def close_many(conns):
    await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)


# -------------------------------------------------------------- benchmarks
def bridge_pid():
    try:
        with open(os.path.join(E["LABVM_STATE"], "pids", "console")) as f:
            pid = int(f.read())
        os.kill(pid, 0)
        return pid
    except (KeyError, OSError, ValueError):
        return None


def cpu_s(pid):
    """user+system CPU seconds of a process (and its threads)."""
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def bench_throughput_latency(a, labs, key, res):
    s = labs[0]
    sid, vm, user = s["id"], s["vms"][0]["name"], s["user"]
    bridge = E["LABVM_CONSOLE_URL"]
    front = E["LABVM_URL"].replace("http://", "ws://")
    want = set(a.only)
    tp = {"direct": [], "bridge": [], "front end": []}
    pid = bridge_pid()
    cpu = []  # bridge CPU seconds per MB relayed
    lat = {"direct": [], "bridge": []}
    for r in range(a.runs):
        for how in ("direct", "bridge", "front end"):
            if "throughput" not in want:
                break
            c = await (open_direct(vm) if how == "direct" else
                       open_bridge(sid, user, vm, key, bridge if how == "bridge" else front))
            c0 = cpu_s(pid)
            mbs, n = await throughput_once(c, a.mb)
            if how == "bridge" and pid:
                cpu.append((cpu_s(pid) - c0) / (n / 1e6))
            await c.close()
            tp[how].append(mbs)
            log(f"  throughput run {r + 1} {how:9s}: {mbs:7.2f} MB/s ({n / 1e6:.1f} MB)")
            await asyncio.sleep(0.5)
        for how in ("direct", "bridge"):
            if "latency" not in want:
                break
            c = await (open_direct(vm) if how == "direct" else open_bridge(sid, user, vm, key,
                                                                           bridge))
            x = await latency_once(c, a.keys)
            await c.close()
            lat[how] += x
            log(f"  latency run {r + 1} {how:6s}: p50 {pct(x, 50):.3f} ms p99 {pct(x, 99):.3f} ms")
            await asyncio.sleep(0.5)
    if "throughput" in want:
        d = statistics.median(tp["direct"])
        b = statistics.median(tp["bridge"])
        f = statistics.median(tp["front end"])
        res["throughput_MBps"] = {"direct": d, "bridge": b, "lighttpd+bridge": f,
                                  "ratio_bridge": b / d, "ratio_front_end": f / d,
                                  "runs": a.runs, "MB": a.mb}
        if cpu:
            ms = statistics.median(cpu) * 1000
            res["throughput_MBps"]["bridge_cpu_ms_per_MB"] = ms
            log(f"bridge CPU while relaying: {ms:.1f} ms per MB (median), i.e. one core "
                f"would relay about {1000 / ms if ms else float('inf'):.0f} MB/s")
        log(f"throughput (median of {a.runs}): direct {d:.2f} MB/s, bridge {b:.2f} MB/s "
            f"(ratio {b / d:.2f}), lighttpd+bridge {f:.2f} MB/s (ratio {f / d:.2f})")
    if "latency" in want:
        out = {}
        for how in ("direct", "bridge"):
            out[how] = {"p50_ms": pct(lat[how], 50), "p99_ms": pct(lat[how], 99),
                        "n": len(lat[how])}
        out["added_p50_ms"] = out["bridge"]["p50_ms"] - out["direct"]["p50_ms"]
        out["added_p99_ms"] = out["bridge"]["p99_ms"] - out["direct"]["p99_ms"]
        res["keystroke_rtt"] = out
        log(f"keystroke RTT ({len(lat['bridge'])} keys): direct p50 {out['direct']['p50_ms']:.3f} "
            f"p99 {out['direct']['p99_ms']:.3f} ms; bridge p50 {out['bridge']['p50_ms']:.3f} "
            f"p99 {out['bridge']['p99_ms']:.3f} ms; added p50 {out['added_p50_ms']:.3f} "
            f"p99 {out['added_p99_ms']:.3f} ms")


async def bench_rss_shared(a, labs, key, tmp, res):
    p, base = start_bridge(tmp, {"console_max_per_session": str(a.conns), "console_linger_s": "5"})
    try:
        await asyncio.sleep(0.5)
        base_rss = rss_kib(p.pid)
        specs = [(s["id"], s["user"], s["vms"][0]["name"]) for s in labs]
        # one browser per lab: as many separate simulator upstreams as there are labs
        first = await open_many(specs, base, key, batch=10)
        await asyncio.sleep(3)
        r1 = rss_kib(p.pid)
        res["rss_sim_separate"] = {"browsers": len(first), "upstreams": len(labs),
                                   "rss_idle_kib": base_rss, "rss_kib": r1,
                                   "per_console_kib": (r1 - base_rss) / len(first)}
        log(f"rss sim separate: {len(first)} browsers on {len(labs)} simulator consoles: "
            f"{r1 / 1024:.1f} MiB (idle bridge {base_rss / 1024:.1f} MiB, "
            f"{(r1 - base_rss) / len(first):.1f} KiB per console)")
        more = [specs[i % len(specs)] for i in range(len(first), a.conns)]
        t0 = time.monotonic()
        conns = first + await open_many(more, base, key)
        took = time.monotonic() - t0
        await asyncio.sleep(3)
        r = rss_kib(p.pid)
        res["rss_shared"] = {"browsers": len(conns), "upstreams": len(labs),
                             "rss_idle_kib": base_rss, "rss_kib": r,
                             "per_browser_kib": (r - base_rss) / len(conns), "open_s": took}
        log(f"rss shared: {len(conns)} browsers on {len(labs)} simulator consoles: "
            f"{r / 1024:.1f} MiB (idle bridge {base_rss / 1024:.1f} MiB, "
            f"{(r - base_rss) / len(conns):.1f} KiB per browser; opened in {took:.1f} s)")
        await close_many(conns)
    finally:
        stop(p)


async def bench_rss_separate(a, key, tmp, res):
    env_name = "bench-console"
    fake, port, ca = fake_kubevirt(tmp)
    rows = []
    db = psycopg2.connect(E["LABVM_DATABASE"])
    db.autocommit = True
    try:
        with db.cursor() as cur:
            cur.execute("DELETE FROM sessions WHERE environment = %s", (env_name,))
            for i in range(a.conns):
                sid = str(uuid.uuid4())
                rows.append((sid, f"bench-console-{i}", f"bench-c-{i}"))
            args = b",".join(cur.mogrify("(%s,%s,'bench','vm',%s,'ready',now()+interval '1 hour')",
                                         (sid, u, env_name)) for sid, u, _ in rows)
            cur.execute(b"INSERT INTO sessions (id,user_name,lesson,runtime,environment,state,"
                        b"expires_at) VALUES " + args)
            args = b",".join(cur.mogrify("(%s,%s,'none','none')", (sid, vm)) for sid, _, vm in rows)
            cur.execute(b"INSERT INTO session_vms (session_id,vm_name,secret_name,agent_token) "
                        b"VALUES " + args)
        p, base = start_bridge(tmp, {"environment": env_name, "kube_api": f"https://127.0.0.1:{port}",
                                     "kube_ca_file": ca, "console_linger_s": "5"})
        try:
            await asyncio.sleep(0.5)
            base_rss = rss_kib(p.pid)
            t0 = time.monotonic()
            conns = await open_many(rows, base, key)
            took = time.monotonic() - t0
            await asyncio.sleep(3)
            r = rss_kib(p.pid)
            # still alive and relaying: one keystroke on a few of them
            for c in conns[:: max(1, len(conns) // 10)]:
                await c.ws.send(b"k")
                await c.until(b"k", 10)
            res["rss_separate"] = {"browsers": len(conns), "upstreams": len(conns),
                                   "rss_idle_kib": base_rss, "rss_kib": r,
                                   "per_console_kib": (r - base_rss) / len(conns),
                                   "open_s": took}
            log(f"rss separate: {len(conns)} browsers, {len(conns)} upstreams (TLS) to a stand-in "
                f"endpoint: {r / 1024:.1f} MiB (idle bridge {base_rss / 1024:.1f} MiB, "
                f"{(r - base_rss) / len(conns):.1f} KiB per console; opened in {took:.1f} s)")
            await close_many(conns)
        finally:
            stop(p)
    finally:
        with db.cursor() as cur:
            cur.execute("DELETE FROM sessions WHERE environment = %s", (env_name,))
        db.close()
        fake.terminate()
        fake.wait()


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--env", help="stack env file (default: the LABVM_* environment)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mb", type=int, default=20, help="MB of output per throughput run")
    ap.add_argument("--keys", type=int, default=200, help="keystrokes per latency run")
    ap.add_argument("--conns", type=int, default=1000)
    ap.add_argument("--labs", type=int, default=4, help="simulator labs for the shared RSS case")
    ap.add_argument("--first-user", type=int, default=171,
                    help="labs belong to studentN, studentN+1, ... (N <= 200 - labs)")
    ap.add_argument("--only", default="throughput,latency,rss")
    ap.add_argument("--json", help="also write the summary here")
    a = ap.parse_args()
    a.only = a.only.split(",")
    if "rss" in a.only:
        a.only += ["rss-shared", "rss-separate"]
    if a.env:
        load_env(a.env)
    key = lt.load_key(conf=E["LABVM_CONF"])
    res = {}
    labs = []
    tmp = tempfile.mkdtemp(prefix="console-bench-")
    try:
        if {"throughput", "latency", "rss-shared"} & set(a.only):
            n = a.labs if "rss-shared" in a.only else 1
            for i in range(n):
                user = f"student{a.first_user + i}"
                s, err = start_lab(user)
                if not s:
                    log(f"lab {i + 1} for {user}: {err} (continuing with {len(labs)})")
                    break
                s["user"] = user
                labs.append(s)
            if not labs:
                raise SystemExit("no lab could be started")
            log(f"{len(labs)} lab(s) ready")
        if {"throughput", "latency"} & set(a.only):
            await bench_throughput_latency(a, labs, key, res)
        if "rss-shared" in a.only:
            await bench_rss_shared(a, labs, key, tmp, res)
        if "rss-separate" in a.only:
            await bench_rss_separate(a, key, tmp, res)
    finally:
        for s in labs:
            api("DELETE", f"/api/sessions/{s['id']}", s["user"])
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(res, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    asyncio.run(main())
