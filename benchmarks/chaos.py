#!/usr/bin/python3
"""benchmarks/chaos.py: labvm under faults, beside hostile students (what `make chaos` runs).

    benchmarks/chaos.py [--window S] [--pairs N] [--gap S] [--duration S]
                        [--students N] [--capacity C] [--no-hostile] [--no-faults] [--keep]

A stack of its own in .chaos/ (tests/stack's parts: PostgreSQL, the simulator,
labvm-console, lighttpd and Apache in front of labvm.fcgi, the reaper every
15 s), ports LABVM_PORT_BASE + 300. A class of --students (default 10)
starts labs, polls them, opens the console, grades, polls a little more and
ends, over both front ends, for the whole run. The run is cut into windows
of --window seconds (default 35), in --pairs (default 2) pairs, one quiet
window and one hostile window each, ordered ABBA (quiet, hostile, hostile,
quiet, ...) so a drift of the shared machine's load hits both alike; --gap
seconds (default 8, not measured) separate the windows. Every window has
the same faults, drawn from the same seed for both windows of a pair:

  - the simulator fails (500/503/429) or delays (0.1-2.5 s) 5-20 % of every
    verb, rules redrawn every 10 s,
  - a labvm.fcgi process is SIGKILLed every 15 s (lighttpd / spawn-fcgi
    restart it),
  - labvm-console is restarted at 15 s, PostgreSQL at 25 s (then every 40 /
    60 s in longer windows).

In a hostile window benchmarks/hostile.py (a process of its own) adds
hostile students, all at once: a silent agent and a garbage agent (each
replaced from inside its guest, as root: tests/lib/agentrec.py) with
tty-size and grade storms on their own sessions over both front ends,
event streams hoarded beyond stream_max_per_user with a huge Last-Event-ID,
crafted headers (Forwarded with an unclosed quote naming another student,
X-Forwarded-For, Authorization replays, oversize headers) against /api/ and
/console/ with a leaked ticket of another student's, and starts of lessons
whose setup fails with multi-byte text and bytes that are not UTF-8. The
hostile students' sessions (four seats, on top of --capacity) exist in the
quiet windows too, idle: the two kinds of window differ only in what the
hostile students do. The default rates (--tty-rate 40, --grade-rate 20
requests/s in all) are several times what took every worker before the
bounds of issue #26 (about 11 tty-size requests/s); far higher rates
measure the shared machine's CPU rather than labvm's bounds.

Then the faults stop, everyone ends their session, and after the orphan
grace two reaper passes run. Printed: the class's requests by answer, the
other students' (the class's) latency of status reads (GET
/api/sessions/{id}), of starts (POST -> 201) and of press -> ready, per
mode: pooled p50/p95/p99 and the median over windows of each window's p99,
and the ratio hostile / quiet of those medians; the hostile students'
answers by kind; hangs; the largest VM count sampled against the capacity;
seats leaked (lab VMs left in the cluster with no active session); sessions
stuck in `starting`; cluster objects left after the reaper passes. Exit 1
when a hang, a VM count above capacity, a leaked seat, a stuck session, an
object left or a hostile breach (another student's session seen, ended or
opened) is not 0, or a ratio is above 2. --no-hostile: quiet windows only
(no ratio). Figures also in .chaos/chaos-result.json.
"""
import argparse
import asyncio
import base64
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SRC, "tests", "lib"))

import websockets  # noqa: E402

from guestproc import listener_pid  # noqa: E402
from labclient import Api, Db, Kube, wait_until  # noqa: E402
from labstack import Stack  # noqa: E402
from benchstats import pct  # noqa: E402

PREFIX = "labvm.io"
DEADLINE_S = 150          # a request not answered in this long has hung
LESSONS = ["linux-basics", "test-slow-setup"]
VERBS = ["create", "get", "list", "delete", "patch"]
# the hostile students (the class is student300...)
SILENT, GARBAGE, HOARDER, SETUPFAIL = "student390", "student391", "student392", "student393"
HOSTILE_SEATS = 4         # silent, garbage, hoarder held; setupfail's starts come and go
# a ready lab whose grade has a short deadline (test-hold's grader, no wait in
# setup, an hour long): a frozen agent holds a worker for 6 s per grade, so a
# hostile window's last grade is over before the gap after it is
HOLD_LESSON = "chaos-hold"
STUCK_LESSON = "test-long-setup"   # starting for 600 s

# conf: short cluster timeouts so that the orphan grace (its minimum follows
# them) is short enough to wait for at the end
CONF = {"kube_timeout_ms": "3000", "capacity_lock_timeout_ms": "2000", "orphan_grace_s": "40",
        "db_idle_tx_timeout_s": "15", "start_rate_max": "0"}
KINDS = ["virtualmachines", "virtualmachineinstances", "pods", "secrets", "datavolumes",
         "persistentvolumeclaims", "network-attachment-definitions"]


class ChaosStack(Stack):
    def write_conf(self):
        super().write_conf()
        with open(self.conf) as f:
            lines = [ln for ln in f if ln.split("=", 1)[0].strip() not in CONF]
        lines += [f"{k} = {v}\n" for k, v in CONF.items()]
        with open(self.conf, "w") as f:
            f.writelines(lines)
        with open(os.path.join(SRC, "tests", "lessons", "test-hold.json")) as f:
            les = json.load(f)
        les.update(id=HOLD_LESSON, title="chaos: a ready lab, grade deadline 6 s", minutes=60,
                   setup="#!/bin/sh\necho ready\n")
        with open(os.path.join(self.path("lessons"), HOLD_LESSON + ".json"), "w") as f:
            json.dump(les, f)


class Phase:
    """Which window the run is in: (index, "quiet" | "hostile" | "gap")."""

    def __init__(self):
        self.lock = threading.Lock()
        self.now = (-1, "gap")

    def set(self, w, mode):
        with self.lock:
            self.now = (w, mode)

    def at(self):
        with self.lock:
            return self.now


class Figures:
    def __init__(self):
        self.lock = threading.Lock()
        self.answers = {}   # "GET session 200" -> n
        self.lat = []
        self.hangs = []
        self.samples = []   # (kind, window, mode, seconds, status)
        self.events = {"fcgi_killed": 0, "pg_restarts": 0, "bridge_restarts": 0,
                       "fault_rules": 0, "samples": 0, "sample_errors": 0, "consoles_open": 0,
                       "consoles_refused": 0, "grades_200": 0, "ready": 0}
        self.max_vms = 0
        self.slow = []      # status reads over 300 ms: (ms, mode, front end, Server-Timing)

    def req(self, what, status, dt):
        with self.lock:
            k = f"{what} {status}"
            self.answers[k] = self.answers.get(k, 0) + 1
            self.lat.append(dt)

    def sample(self, kind, wm, dt, status):
        with self.lock:
            self.samples.append((kind, wm[0], wm[1], dt, status))

    def ev(self, k, n=1):
        with self.lock:
            self.events[k] = self.events.get(k, 0) + n


def timed(fig, what, fn):
    """(answer or None, seconds, status text)."""
    t0 = time.monotonic()
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001 (a refused, reset or malformed answer)
        dt = time.monotonic() - t0
        st = "hang" if dt >= DEADLINE_S - 1 else type(e).__name__
        if st == "hang":
            fig.hangs.append((what, dt))
        fig.req(what, st, dt)
        return None, dt, st
    dt = time.monotonic() - t0
    err = (r.json or {}).get("error") if isinstance(r.json, dict) else None
    st = f"{r.status} {err}" if err else r.status
    fig.req(what, st, dt)
    return r, dt, str(st)


async def console_once(base, url, user):
    cred = base64.b64encode(f"{user}:labvm".encode()).decode()
    try:
        ws = await websockets.connect(base.replace("http://", "ws://") + url,
                                      subprotocols=["labvm-console.v1"],
                                      extra_headers={"Authorization": f"Basic {cred}"},
                                      open_timeout=15, close_timeout=2)
    except Exception:  # noqa: BLE001
        return "refused"
    try:
        while True:
            m = await asyncio.wait_for(ws.recv(), 15)
            if isinstance(m, str) and '"open"' in m:
                await ws.send(b"echo chaos\r")
                await ws.close()
                return "open"
    except Exception:  # noqa: BLE001
        return "refused"


def student(user, bases, stop, fig, phase):
    """One of the class: the other students whose figures count."""
    rnd = random.Random(user)

    def status(api, sid):
        wm = phase.at()
        g, dt, st = timed(fig, "get", lambda: api.get(sid))
        fig.sample("status", wm, dt, st)
        if dt > 0.3 and g is not None:
            fig.slow.append((round(dt * 1000), wm[1], base, g.header("Server-Timing")))
        return g

    while not stop.is_set():
        base = rnd.choice(bases)
        api = Api(user, base=base, timeout=DEADLINE_S)
        wm = phase.at()
        t_press = time.monotonic()
        r, dt, _ = timed(fig, "start", lambda: api.start(rnd.choice(LESSONS)))
        sid = None
        if r is not None and r.status == 201:
            sid = r.json["id"]
            fig.sample("start", wm, dt, "201")
        elif r is not None and r.status == 409 and (r.json or {}).get("session"):
            sid = r.json["session"]["id"]
            t_press = None
        if not sid:
            time.sleep(rnd.uniform(0.5, 2))
            continue
        state, t_end = "starting", time.monotonic() + 120
        while state == "starting" and not stop.is_set() and time.monotonic() < t_end:
            g = status(api, sid)
            if g is not None and g.status == 200:
                state = g.json["state"]
                if state == "ready" and t_press is not None:
                    fig.sample("ready", wm, time.monotonic() - t_press, "ready")
            if state == "starting":
                time.sleep(0.5)
        if state == "ready":
            fig.ev("ready")
            tk, _, _ = timed(fig, "ticket", lambda: api.ticket(sid))
            if tk is not None and tk.status == 200:
                res = asyncio.run(console_once(base, tk.json["url"], user))
                fig.ev("consoles_open" if res == "open" else "consoles_refused")
            gr, _, _ = timed(fig, "grade", lambda: api.grade(sid))
            if gr is not None and gr.status == 200:
                fig.ev("grades_200")
            # working in the lab: the page looks at the session now and then
            t_work = time.monotonic() + rnd.uniform(0, 3)
            while time.monotonic() < t_work and not stop.is_set():
                status(api, sid)
                time.sleep(0.5)
        for _ in range(20):
            e, _, _ = timed(fig, "end", lambda: api.end(sid))
            if e is not None and e.status in (200, 404):
                break
            time.sleep(1)
        api.close()


# ------------------------------------------------------------------- faults

def fcgi_pids(st):
    exe = os.path.join(st.bindir, "labvm.fcgi")
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{d}/exe") != exe:
                continue
            with open(f"/proc/{d}/environ", "rb") as f:
                if f"LABVM_CONF={st.conf}".encode() not in f.read().split(b"\0"):
                    continue
            out.append(int(d))
        except OSError:
            continue
    return out


def window_faults(st, kube, seed, length, stop, fig):
    """One window's faults, the same for every window of the same seed: the
    simulator's rules redrawn every 10 s, a labvm.fcgi SIGKILLed every 15 s,
    labvm-console restarted at 15 s (+40 s), PostgreSQL at 25 s (+60 s)."""
    rnd = random.Random(seed)
    plan = [(t, "rules") for t in range(0, int(length), 10)]
    plan += [(t, "kill") for t in range(5, int(length), 15)]
    plan += [(t, "bridge") for t in range(15, int(length), 40)]
    plan += [(t, "pg") for t in range(25, int(length), 60)]
    plan.sort()
    t0 = time.monotonic()
    for at, what in plan:
        if stop.wait(max(0.0, t0 + at - time.monotonic())):
            break
        try:
            if what == "rules":
                kube.clear_faults()
                for v in VERBS:
                    p = rnd.uniform(0.05, 0.20)
                    if rnd.random() < 0.5:
                        kube.fault(verb=v, probability=p, code=rnd.choice([500, 503, 429]))
                    else:
                        kube.fault(verb=v, probability=p, delay_ms=rnd.randint(100, 2500))
                    fig.ev("fault_rules")
            elif what == "kill":
                pids = sorted(fcgi_pids(st))
                k = rnd.randrange(1 << 30)
                if pids:
                    os.kill(pids[k % len(pids)], signal.SIGKILL)
                    fig.ev("fcgi_killed")
            elif what == "bridge":
                st.stop("console")
                st.console_up()
                fig.ev("bridge_restarts")
            elif what == "pg":
                st.pg_down()
                time.sleep(1)
                st.pg_up()
                fig.ev("pg_restarts")
        except Exception as e:  # noqa: BLE001
            print(f"chaos: fault {what}: {e}", flush=True)


def cpu_groups(st, extra=None):
    """CPU seconds so far (user + system, with the children each has waited
    for) of the stack's parts and the two load generators, by process group
    (every service is a group of its own; PostgreSQL: the postmaster and its
    children). A killed labvm.fcgi's time moves to the parent that reaps it."""
    tick = os.sysconf("SC_CLK_TCK")
    lead = {}
    for name in ("lighttpd", "apache", "apache-fcgi", "console", "kubesim", "reaper"):
        pid = st.running(name)
        if pid:
            lead[pid] = "labvm.fcgi + front ends" if name in ("lighttpd", "apache",
                                                               "apache-fcgi") else name
    for pid, name in (extra or {}).items():
        lead[pid] = name
    try:
        with open(st.path("pg", "data", "postmaster.pid")) as f:
            pg = int(f.readline())
    except (OSError, ValueError):
        pg = None
    out = {"class (chaos.py)": sum(os.times()[:4])}
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                f_ = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ppid, pgrp = int(f_[1]), int(f_[2])
        name = lead.get(pgrp) or ("postgres" if pg and (int(d) == pg or ppid == pg) else None)
        if name:
            out[name] = out.get(name, 0) + sum(int(x) for x in f_[11:15]) / tick
    return out


def sampler(kube, stop, fig):
    while not stop.wait(0.5):
        try:
            n = len(kube.lab_vms())
        except Exception:  # noqa: BLE001
            fig.ev("sample_errors")
            continue
        fig.ev("samples")
        with fig.lock:
            fig.max_vms = max(fig.max_vms, n)


# ------------------------------------------------------ the hostile students

def hostile_agent(kube, vm, ip, mode):
    """What a student who is root does in their guest: stop the agent and put
    a listener of their own on its port (tests/lib/agentrec.py: silent, or
    garbage)."""
    rec = os.path.join(SRC, "tests", "lib", "agentrec.py")
    # ([/]: the pattern does not match this shell's own command line)
    kube.guest_exec(vm, "pkill -f '[/]opt/labvm/agent.py'; sleep 0.3; "
                        f"setsid nohup /usr/bin/python3 -I {rec} --mode {mode} "
                        "--log /tmp/hostile-agent.jsonl </dev/null >/dev/null 2>&1 &")
    wait_until(lambda: listener_pid(ip, name=b"agentrec"), 30, 0.1,
               f"the {mode} stand-in listening on {ip}")


def ensure_hostile(kube, db, base, have, deadline_s=120):
    """The hostile students' sessions, as the windows expect them: silent and
    garbage ready with their agents replaced, hoarder starting. Started again
    when one ended (faults can fail a start). Returns the spec's parts."""
    want = {SILENT: ("silent", HOLD_LESSON, "ready"), GARBAGE: ("garbage", HOLD_LESSON, "ready"),
            HOARDER: (None, STUCK_LESSON, "starting")}
    t_end = time.monotonic() + deadline_s
    for user, (mode, lesson, state) in want.items():
        api = Api(user, base=base, timeout=60)
        while time.monotonic() < t_end:
            try:
                cur = api.current()
                if cur.status == 200 and cur.json["id"] == have.get(user, {}).get("sid") and \
                        cur.json["state"] == state:
                    break
                if cur.status == 200:
                    api.end(cur.json["id"])
                r = api.start(lesson)
                if r.status != 201:
                    time.sleep(1)
                    continue
                sid = r.json["id"]
                if state == "ready":
                    s = api.wait_state(sid, ("ready", "failed"), 90, 0.3)
                    if s["state"] != "ready":
                        continue
                    ip = db.one("SELECT ip FROM session_vms WHERE session_id = %s", sid)[0]
                    hostile_agent(kube, s["vms"][0]["name"], ip, mode)
                have[user] = {"user": user, "sid": sid}
                break
            except Exception as e:  # noqa: BLE001 (faults are off in the gaps; a slow machine)
                print(f"chaos: preparing {user}: {e}", flush=True)
                time.sleep(1)
        else:
            print(f"chaos: {user} not prepared in time", flush=True)
            have.pop(user, None)
        api.close()
    return [u for u in want if u not in have]


def run_hostile(st, spec, seconds, a, w, only=None):
    out = st.path(f"hostile-{w}.json")
    sp = st.path(f"hostile-{w}.spec.json")
    with open(sp, "w") as f:
        json.dump(spec, f)
    if os.path.exists(out):
        os.unlink(out)
    argv = ["nice", "-n", str(a.hostile_nice)] if a.hostile_nice else []
    argv += [sys.executable, os.path.join(HERE, "hostile.py"), "--spec", sp, "--duration",
            str(seconds), "--out", out, "--tty-rate", str(a.tty_rate), "--grade-rate",
            str(a.grade_rate)] + (["--only", only] if only else [])
    log = open(st.path("logs", f"hostile-{w}.log"), "w")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True), out


def collect_hostile(p, out, seconds):
    try:
        p.wait(seconds + 60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return {"error": "hostile.py did not stop"}
    try:
        with open(out) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"error": f"hostile.py: exit {p.returncode}, {e}"}


# ------------------------------------------------------------------- figures

def window_stats(fig, kind, modes):
    """Per mode: pooled n/p50/p95/p99 and each window's p99 (seconds)."""
    out = {}
    for mode in modes:
        xs = [s[3] for s in fig.samples if s[0] == kind and s[2] == mode]
        per = {}
        for s in fig.samples:
            if s[0] == kind and s[2] == mode:
                per.setdefault(s[1], []).append(s[3])
        wp99 = [pct(v, 99) for _, v in sorted(per.items())]
        out[mode] = {"n": len(xs), "p50": pct(xs, 50), "p95": pct(xs, 95), "p99": pct(xs, 99),
                     "window_p99": wp99,
                     "median_window_p99": statistics.median(wp99) if wp99 else float("nan")}
    return out


def ms(x):
    return f"{x * 1000:.0f}" if x == x else "-"


def leftovers(kube, active):
    """Lab objects in the cluster without an active session (terminating ones too)."""
    out = []
    for kind in KINDS:
        try:
            items = kube.list(kind, f"{PREFIX}/lab-session=true")
        except AssertionError as e:
            print(f"chaos: cannot list {kind}: {str(e)[:120]}", flush=True)
            continue
        for o in items:
            sid = o["metadata"].get("labels", {}).get(f"{PREFIX}/session-id")
            if sid not in active:
                out.append(f"{kind}/{o['metadata']['name']}"
                           + (" (terminating)" if o["metadata"].get("deletionTimestamp") else ""))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--window", type=float, default=35, help="seconds per measured window")
    ap.add_argument("--pairs", type=int, default=2, help="pairs of quiet + hostile windows")
    ap.add_argument("--gap", type=float, default=8, help="seconds between windows")
    ap.add_argument("--duration", type=float,
                    help="measured seconds in all (sets --pairs, shortens --window if needed)")
    ap.add_argument("--students", type=int, default=10)
    ap.add_argument("--capacity", type=int, default=6,
                    help="the class's seats (the hostile students get 4 more)")
    ap.add_argument("--no-hostile", action="store_true", help="quiet windows only")
    ap.add_argument("--no-faults", action="store_true", help="no simulator faults, kills, restarts")
    ap.add_argument("--tty-rate", type=float, default=40, help="hostile tty-size requests/s")
    ap.add_argument("--grade-rate", type=float, default=20, help="hostile grade requests/s")
    ap.add_argument("--hostile-nice", type=int, default=0,
                    help="run the hostile students' client at this nice value (its own CPU is "
                         "an artefact of one machine: their browsers and scripts would not "
                         "run on labvm's)")
    ap.add_argument("--max-ratio", type=float, default=2.0)
    ap.add_argument("--keep", action="store_true", help="leave the stack running")
    a = ap.parse_args()
    if a.duration:
        if a.duration < 2 * a.window:
            a.window, a.pairs = a.duration / 2, 1
        else:
            a.pairs = max(1, round(a.duration / (2 * a.window)))
    hostile = not a.no_hostile
    modes = ["quiet", "hostile"] if hostile else ["quiet"]
    schedule = []
    for k in range(a.pairs):
        pair = ["quiet", "hostile"] if k % 2 == 0 else ["hostile", "quiet"]
        schedule += [(k, m) for m in (pair if hostile else ["quiet", "quiet"])]

    base = int(os.environ.get("LABVM_PORT_BASE", "18000")) + 300
    capacity = a.capacity + (HOSTILE_SEATS if hostile else 0)
    st = ChaosStack(os.path.join(SRC, ".chaos"), port_base=base, capacity=capacity,
                    reaper_every=15)
    if st.running_any():
        st.down()
    env = st.up()
    os.environ.update(env)
    kube = Kube()
    db = Db()
    fig = Figures()
    phase = Phase()
    bases = [env[f"LABVM_{fe.upper()}_URL"] for fe in st.frontends()]
    users = [f"student{300 + i}" for i in range(a.students)]
    hostile_users = [SILENT, GARBAGE, HOARDER, SETUPFAIL]
    load = [os.getloadavg()]
    print(f"chaos: {a.students} students, capacity {a.capacity}"
          f"{f' + {HOSTILE_SEATS} for the hostile students' if hostile else ''}; "
          f"{len(schedule)} windows of {a.window:.0f} s ({' '.join(m[0].upper() for _, m in schedule)}), "
          f"gaps {a.gap:.0f} s; faults {'off' if a.no_faults else 'on'}; stack in .chaos "
          f"(ports from {base}); load {load[0][0]:.1f}", flush=True)
    have, unprepared = {}, []
    if hostile:
        ensure_hostile(kube, db, bases[0], have)
        print(f"chaos: hostile students prepared: {sorted(have)}", flush=True)

    stop = threading.Event()
    ths = [threading.Thread(target=student, args=(u, bases, stop, fig, phase)) for u in users]
    samp = threading.Thread(target=sampler, args=(Kube(), stop, fig))
    t0 = time.monotonic()
    for th in ths + [samp]:
        th.start()
    hostile_res = []
    windows = []
    try:
        for w, (seed, mode) in enumerate(schedule):
            phase.set(w, "gap")
            g0 = time.monotonic()
            kube.clear_faults()
            if hostile:
                missing = ensure_hostile(kube, db, bases[0], have, deadline_s=60)
                if mode == "hostile" and missing:
                    unprepared.append((w, missing))
            time.sleep(max(0.0, g0 + a.gap - time.monotonic()))
            fstop = threading.Event()
            fth = None
            if not a.no_faults:
                fth = threading.Thread(target=window_faults,
                                       args=(st, kube, 1000 + seed, a.window, fstop, fig))
            proc = None
            if mode == "hostile":
                spec = {"bases": bases, "frontends": st.frontends(), "password": env["LABVM_PASSWORD"],
                        "silent": have.get(SILENT), "garbage": have.get(GARBAGE),
                        "hoarder": have.get(HOARDER), "setupfail": {"user": SETUPFAIL},
                        "victims": users}
                proc, out = run_hostile(st, spec, a.window, a, w)
            cpu0 = cpu_groups(st, {proc.pid: "hostile students"} if proc else None)
            phase.set(w, mode)
            w0 = time.monotonic()
            if fth:
                fth.start()
            time.sleep(max(0.0, w0 + a.window - time.monotonic()))
            cpu1 = cpu_groups(st, {proc.pid: "hostile students"} if proc else None)
            took_w = time.monotonic() - w0
            phase.set(w, "gap")
            fstop.set()
            if fth:
                fth.join()
                st.pg_up()   # in case a restart was cut short
            if proc:
                hostile_res.append(collect_hostile(proc, out, a.window))
            # (max 0: a part restarted in the window takes its earlier CPU time with it)
            windows.append({"window": w, "mode": mode, "seed": seed,
                            "load1": round(os.getloadavg()[0], 2),
                            "cores": {k: round(max(0.0, cpu1[k] - cpu0.get(k, 0)) / took_w, 3)
                                      for k in cpu1}})
            print(f"chaos: window {w + 1}/{len(schedule)} {mode} done (load "
                  f"{os.getloadavg()[0]:.1f})", flush=True)
    finally:
        phase.set(len(schedule), "gap")
        kube.clear_faults()
        st.pg_up()
        stop.set()
        for th in ths:
            th.join(DEADLINE_S + 60)
        samp.join()
    ran = time.monotonic() - t0
    load.append(os.getloadavg())

    # streams end with their session (issue #26, 4): the hoarder's streams
    # (huge Last-Event-ID, beyond the cap), then its session ends under them
    streams_left = None
    if hostile and have.get(HOARDER):
        spec = {"bases": bases, "frontends": st.frontends(), "password": env["LABVM_PASSWORD"],
                "silent": None, "garbage": None, "hoarder": have[HOARDER],
                "setupfail": {"user": SETUPFAIL}, "victims": []}
        a_streams = argparse.Namespace(**vars(a))
        proc, out = run_hostile(st, spec, 15, a_streams, "streams-end", only="streams")
        time.sleep(5)
        Api(HOARDER, base=bases[0]).end(have[HOARDER]["sid"])
        r = collect_hostile(proc, out, 15)
        streams_left = r.get("extra", {}).get("hoarder streams_open_at_end", "?")
        print(f"chaos: the hoarder's session ended with "
              f"{r.get('extra', {}).get('hoarder streams_open_at_once', '?')} streams on it: "
              f"{streams_left} still open 10 s later; answers after: "
              f"{r.get('answers', {}).get('hoarder streams')}", flush=True)

    # everyone ends what is left (a session a killed worker left open, the
    # hostile students' own)
    for u in users + (hostile_users if hostile else []):
        try:
            Api(u, base=bases[0]).end_current()
        except Exception as e:  # noqa: BLE001
            print(f"chaos: ending {u}'s session: {e}", flush=True)
    grace = int(CONF["orphan_grace_s"])
    time.sleep(grace + 2)
    # as the CronJob's Pod runs it (its own network namespace and labels)
    r_pod = st.reaper_pod()
    reaper = (["nsenter", f"--net={r_pod['netns']}", "--"] if r_pod else []) + \
        [os.path.join(st.bindir, "labvm-reaper")]
    for i in range(2):
        r = subprocess.run(reaper, env=dict(os.environ, LABVM_CONF=st.conf),
                           capture_output=True, text=True, timeout=300)
        print(f"chaos: reaper pass {i + 1}: exit {r.returncode}; "
              f"{r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ''}", flush=True)
        time.sleep(3)
    db = Db()  # PostgreSQL was restarted under the first connection
    active = {row[0] for row in db.query(
        "SELECT id::text FROM sessions WHERE environment = %s AND state IN ('starting', 'ready')",
        st.environment)}
    # what is still going away gets a little longer (the simulator's deletes)
    t_left = time.monotonic() + 30
    while True:
        left = leftovers(kube, active)
        if not any("terminating" in o for o in left) or time.monotonic() > t_left:
            break
        time.sleep(1)
    seats = [o for o in left if o.startswith("virtualmachines/")]
    stuck = db.one("SELECT count(*) FROM sessions WHERE environment = %s AND state = "
                   "'starting'", st.environment)[0]

    # ------------------------------------------------------------ printing
    total = sum(fig.answers.values())
    print(f"chaos: ran {ran:.0f} s; {total} requests of the class; {fig.events}")
    for k in sorted(fig.answers):
        print(f"  {k:28s} {fig.answers[k]}")
    lat = fig.lat
    print(f"chaos: the class's latency (all requests, all windows) p50 "
          f"{statistics.median(lat) * 1000 if lat else 0:.0f} ms, "
          f"p95 {pct(lat, 95) * 1000:.0f} ms, max {max(lat) if lat else 0:.1f} s")
    stats = {k: window_stats(fig, k, modes) for k in ("status", "start", "ready")}
    names = {"status": "status GET", "start": "start -> 201", "ready": "press -> ready"}
    print("chaos: the other students (the class), per mode (ms; 'windows' = each window's p99)")
    ratios = {}
    for k, per in stats.items():
        for mode in modes:
            s = per[mode]
            print(f"  {names[k]:15s} {mode:8s} n {s['n']:5d}  p50 {ms(s['p50']):>6s}  "
                  f"p95 {ms(s['p95']):>6s}  p99 {ms(s['p99']):>6s}  median window p99 "
                  f"{ms(s['median_window_p99']):>6s}  windows "
                  f"[{' '.join(ms(x) for x in s['window_p99'])}]")
        if hostile:
            q, h = per["quiet"]["median_window_p99"], per["hostile"]["median_window_p99"]
            ratios[k] = h / q if q and q == q and h == h else float("nan")
            pooled = per["hostile"]["p99"] / per["quiet"]["p99"] if per["quiet"]["p99"] else 0
            print(f"  {names[k]:15s} ratio hostile/quiet of the median window p99: "
                  f"{ratios[k]:.2f} (pooled p99: {pooled:.2f})")
    print("chaos: CPU in the windows, cores (median of the windows; a window's CPU seconds / "
          "its seconds)")
    for k in sorted({k for w in windows for k in w["cores"]}):
        print(f"  {k:26s} " + "  ".join(
            f"{m} {statistics.median([w['cores'].get(k, 0) for w in windows if w['mode'] == m]):.2f}"
            for m in modes))
    for x in sorted(fig.slow, reverse=True)[:12]:
        print(f"chaos: slow status read {x}")
    fivexx = {m: sum(1 for s in fig.samples if s[2] == m and s[4][:1] == "5") for m in modes}
    print(f"chaos: the class's 5xx answers (status reads): {fivexx}")
    agg, breaches, extra = {}, [], {}
    for hr in hostile_res:
        if "error" in hr:
            breaches.append(hr["error"])
            continue
        for actor, d in hr["answers"].items():
            for ans, n in d.items():
                agg.setdefault(actor, {}).setdefault(ans, 0)
                agg[actor][ans] += n
        breaches += hr["breaches"]
        breaches += [f"{actor}: {n} answers {ans}" for actor, d in hr["answers"].items()
                     for ans, n in d.items() if "NOT-UTF-8" in ans]
        for k, v in hr["extra"].items():
            if isinstance(v, list):
                extra.setdefault(k, []).extend(v)
            elif k.endswith("_at_once"):
                extra[k] = max(extra.get(k, 0), v)
            else:
                extra[k] = extra.get(k, 0) + v
    if hostile:
        secs = sum(hr.get("seconds", 0) for hr in hostile_res) or 1
        print(f"chaos: the hostile students' answers ({len(hostile_res)} windows, {secs:.0f} s)")
        for actor in sorted(agg):
            n = sum(agg[actor].values())
            print(f"  {actor} ({n}, {n / secs:.0f}/s):")
            for ans in sorted(agg[actor], key=lambda x: -agg[actor][x]):
                print(f"      {agg[actor][ans]:7d}  {ans}")
        for k in sorted(extra):
            v = extra[k]
            if isinstance(v, list):
                v = f"n {len(v)}, median {statistics.median(v):.0f}, max {max(v)}"
            print(f"  {k}: {v}")
        if unprepared:
            print(f"chaos: hostile windows without all their hostile students: {unprepared}")
        print(f"chaos: hostile breaches: {len(breaches)}" +
              ("".join(f"\n    {b}" for b in breaches[:10])))
    res = {"requests": total, "hangs": len(fig.hangs), "max_vms_sampled": fig.max_vms,
           "capacity": capacity, "seats_leaked": len(seats), "objects_left": len(left),
           "stuck_starting": stuck, "active_after_end": len(active),
           "ratios": {k: round(v, 3) for k, v in ratios.items()},
           "breaches": len(breaches), "hostile_unprepared": len(unprepared),
           "streams_open_after_their_session": streams_left,
           "load_start": load[0][:3], "load_end": load[1][:3],
           "window_load1": [w["load1"] for w in windows]}
    print("chaos: " + json.dumps(res))
    if left:
        print("chaos: left: " + ", ".join(left[:10]))
    with open(st.path("chaos-result.json"), "w") as f:
        json.dump({"summary": res, "stats": stats, "windows": windows, "class": fig.answers,
                   "events": fig.events, "hostile": agg, "hostile_extra": extra,
                   "breaches": breaches, "args": vars(a)}, f, indent=1, default=str)
    if not a.keep:
        st.down()
    bad_ratio = [k for k, v in ratios.items() if not v <= a.max_ratio]
    ok = (not fig.hangs and fig.max_vms <= capacity and not left and stuck == 0
          and not breaches and not bad_ratio and not unprepared and streams_left in (None, 0))
    print("chaos: " + ("PASS" if ok else "FAIL" + (f" (ratio above {a.max_ratio}: "
                                                     f"{', '.join(bad_ratio)})" if bad_ratio
                                                     else "")))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
