#!/usr/bin/python3
# timeout: 360
"""labvm on an API server at an IPv6 literal that offers h2 (a stack of this
suite's own: state STATE/t146, ports LABVM_PORT_BASE+200, the simulator on
[::1] with a certificate for ::1 and kubernetes.default.svc, --k8s-version
1.35, ALPN h2,http/1.1 as kube-apiserver offers it).

Proven: with kube_api = https://[::1]:PORT a VM lab starts (REST), its event
stream is driven (watch), its console relays (labvm-console, libwebsockets);
a Pod lab's terminal (exec through labvm-console) and grading (exec from
labvm.fcgi) work under 1.35's exec authorization; every TLS connection of
labvm's chose http/1.1 (none h2: the simulator counts per kind of first
request); the grader's client works with the long form [0:0:0:0:0:0:0:1]
too, which libwebsockets 4.1.6 by itself cuts to "0"; and a server whose
certificate (from the cluster's CA) does not name ::1 is refused by the
console and the grader alike (libwebsockets 4.1.6 alone checked no name for
"::1", cut to "")."""
import asyncio
import atexit
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import labstack  # noqa: E402
from tap import T  # noqa: E402

t = T()
SRC = labstack.SRC
BASE = int(os.environ.get("LABVM_PORT_BASE", "18000")) + 200
STATE = os.path.join(os.environ.get("LABVM_STATE") or os.path.join(SRC, ".check"), "t146")
TOOL = os.path.join(os.environ.get("LABVM_BIN") or os.path.join(SRC, "build", "bin"), "..",
                    "tests", "tool_podexec")

stack = labstack.Stack(STATE, port_base=BASE, frontend="lighttpd", capacity=4,
                       kube_host="::1", kube_args=["--k8s-version", "1.35"])
stack.down()
atexit.register(stack.down)
ENV = {}
from labclient import Api, Kube  # noqa: E402
from labconsole import Console, PrivateBridge  # noqa: E402


@t.test(name="the stack comes up with kube_api https://[::1]:PORT: /api/healthz reaches the "
             "cluster")
def up():
    env = stack.up()
    ENV.update(env)
    os.environ.update(env)       # Api, Kube, Console, PrivateBridge: this suite's stack
    from labtest import reset_world
    reset_world()                # a run before left session rows in this state folder
    r = Api("student398").request("GET", "/api/healthz")
    t.eq((r.status, r.json), (200, {"db": "ok", "cluster": "ok"}), "healthz", r)


if not ENV:
    t.done()
kube = Kube()
loop = asyncio.new_event_loop()
run = loop.run_until_complete
S = {}
KPORT = stack.ports["kube"]


def own_conf(name, **over):
    path = os.path.join(STATE, f"{name}.conf")
    with open(ENV["LABVM_CONF"]) as f:
        lines = [ln for ln in f if ln.split("=", 1)[0].strip() not in over]
    with open(path, "w") as f:
        f.writelines(lines)
        for k, v in over.items():
            f.write(f"{k} = {v}\n")
    return path


def tool(conf, pod, cmd):
    r = subprocess.run([TOOL, pod, "lab", cmd], env=dict(os.environ, LABVM_CONF=conf),
                       capture_output=True, text=True, timeout=60)
    try:
        return json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"rc": -1, "msg": f"tool: {r.returncode} {r.stdout} {r.stderr}"}


async def relays(url, user, marker, base=None):
    c = await Console.open(base or ENV["LABVM_URL"], url, user)
    if not await c.opened(20):
        await c.close()
        return False, c
    await c.send(f"echo {marker[:3]}''{marker[3:]}\r".encode())
    ok = await c.until(lambda x: marker.encode() in x.out, 15)
    await c.close()
    return ok, c


@t.test(name="kube_api https://[::1]:PORT: a VM lab starts, its stream is driven, its console "
             "relays")
def vm_lab():
    t.eq(ENV["LABVM_KUBE_URL"], f"https://[::1]:{KPORT}", "the simulator's URL is [::1]")
    from sse import Stream, events_path
    api = Api("student398")
    r = api.start("linux-basics")
    t.require(r.status == 201, f"start: {r}")
    evs = Stream(events_path(r.json["id"]), "student398", timeout=90).all()
    t.eq(evs[-1].json["state"] if evs else None, "ready", "the stream ends at ready")
    S["vm"] = (api, r.json["id"])
    ok, c = run(relays(api.ticket(r.json["id"]).json["url"], "student398", "v6-console"))
    t.ok(ok, "the console relays (labvm-console to [::1])", c.ctl)


@t.test(name="a Pod lab under 1.35's exec authorization: its terminal and its grading")
def pod_lab():
    api = Api("student399")
    s = api.wait_state(api.start("k8s-pod-intro").json["id"], ("ready", "failed"), 90)
    t.require(s["state"] == "ready", f"ready: {s.get('error')}")
    S["pod"] = s["vms"][0]["name"]
    ok, c = run(relays(api.ticket(s["id"]).json["url"], "student399", "v6-terminal"))
    t.ok(ok, "the terminal relays (exec from labvm-console)", c.ctl)
    g = api.grade(s["id"])
    t.eq((g.status, [x.get("exit_code") for x in (g.json or {}).get("steps", [])]),
         (200, [1, 2]), "grading by exec from labvm.fcgi", g)


@t.test(name="every request of labvm's came on a connection that chose http/1.1 although h2 was "
             "offered: REST, watch, console, exec")
def alpn():
    st = kube.request("GET", "/_sim/stats").json["alpn"]
    t.diag(f"requests by ALPN and kind: {st}")
    t.eq(st.get("h2", {}), {}, "no client chose h2")
    h1 = {}
    for proto in ("http/1.1", "none"):
        for k, n in st.get(proto, {}).items():
            h1[k] = h1.get(k, 0) + n
    for kind in ("rest", "watch", "console", "exec"):
        t.ok(h1.get(kind, 0) >= 1, f"{kind}: on HTTP/1.1", h1)


@t.test(name="the grader's client on the long form https://[0:0:0:0:0:0:0:1]:PORT")
def long_form():
    t.require(S.get("pod"), "the Pod lab of the test before")
    conf = own_conf("longform", kube_api=f"https://[0:0:0:0:0:0:0:1]:{KPORT}")
    r = tool(conf, S["pod"], "echo long''form")
    t.eq((r.get("rc"), r.get("exit_code"), r.get("out")), (0, 0, "longform\n"),
         "exec works (lws 4.1.6 alone checked the name \"0\")", r.get("msg"))


class RogueTls:
    """[::1]:port with a certificate from the cluster's CA that names only
    kubernetes.default.svc (no IP ::1), relaying to the simulator: a client
    that checks the name refuses it."""

    def __init__(self):
        d = tempfile.mkdtemp(prefix="t146-")
        pki = os.path.join(STATE, "kubesim", "pki")
        key, csr, crt, ext = (os.path.join(d, n) for n in ("k.pem", "c.csr", "c.pem", "ext"))
        with open(ext, "w") as f:
            f.write("subjectAltName=DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n")
        subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", csr,
                        "-subj", "/CN=not-this-server"], check=True, capture_output=True)
        subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", os.path.join(pki, "ca.crt"),
                        "-CAkey", os.path.join(pki, "ca.key"), "-CAcreateserial", "-out", crt,
                        "-days", "1", "-extfile", ext], check=True, capture_output=True)
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(crt, key)
        self.up = ssl.create_default_context(cafile=ENV["LABVM_KUBE_CA"])
        self.srv = socket.socket(socket.AF_INET6)
        self.srv.bind(("::1", 0))
        self.srv.listen(16)
        self.port = self.srv.getsockname()[1]
        self.accepted = self.refused = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            c.settimeout(10)
            try:
                c = self.ctx.wrap_socket(c, server_side=True)
            except (ssl.SSLError, OSError):
                self.refused += 1
                continue
            self.accepted += 1
            u = self.up.wrap_socket(socket.create_connection(("::1", KPORT)),
                                    server_hostname="::1")
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.close()
            except OSError:
                pass


@t.test(name="a server whose certificate does not name ::1 is refused by the grader's client "
             "and by the console")
def wrong_name():
    t.require(S.get("pod") and S.get("vm"), "the labs of the tests before")
    rogue = RogueTls()
    api_url = f"https://[::1]:{rogue.port}"
    r = tool(own_conf("rogue", kube_api=api_url), S["pod"], "echo should-not-run")
    t.ok(r.get("rc") != 0 and "should-not-run" not in (r.get("out") or ""),
         "the grader's exec is refused", r)
    br = PrivateBridge("t146-rogue", kube_api=api_url)
    try:
        api, sid = S["vm"]
        ok, c = run(relays(api.ticket(sid).json["url"], "student398", "rogue-console",
                           base=br.base))
        t.ok(not ok and "open" not in c.states(), "the console is refused", c.ctl)
    finally:
        br.close()
    t.eq(rogue.accepted, 0, "no handshake with the wrong certificate completed")
    t.ok(rogue.refused >= 2, "both clients refused it at the handshake", rogue.refused)


for name in ("vm",):
    if S.get(name):
        S[name][0].end(S[name][1])
t.done()
