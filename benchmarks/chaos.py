#!/usr/bin/python3
"""benchmarks/chaos.py: labvm under faults (what `make chaos` runs).

    benchmarks/chaos.py [--duration S] [--students N] [--capacity C] [--keep]

A stack of its own in .chaos/ (tests/stack's parts: PostgreSQL, the simulator,
labvm-console, lighttpd and Apache in front of labvm.fcgi, the reaper every
15 s), ports LABVM_PORT_BASE + 300. For --duration seconds (default 300) a
class of --students (default 10) starts labs, polls, opens the console,
grades and ends, over both front ends, while

  - the simulator fails or delays 5-20 % of every verb (rules redrawn every 10 s),
  - a labvm.fcgi process is SIGKILLed every 15 s (lighttpd / spawn-fcgi restart it),
  - PostgreSQL is restarted every 60 s,
  - labvm-console is restarted every 40 s,
  - lab VMs are counted in the cluster every 0.5 s (terminating ones too).

Then the faults stop, every student ends their session, and after the orphan
grace two reaper passes run. Printed figures: requests by answer, latency
p50/p95/max, requests that hung past the client's deadline, the largest VM
count sampled against the capacity, cluster objects without an active
session, sessions stuck in `starting`. Exit 1 when any of the last four is
not what the issue asks (0 hangs, never above capacity, 0 orphans, 0 stuck).
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

from labclient import Api, Db, Kube  # noqa: E402
from labstack import Stack  # noqa: E402
from benchstats import pct  # noqa: E402

PREFIX = "labvm.io"
DEADLINE_S = 150          # a request not answered in this long has hung
LESSONS = ["linux-basics", "test-slow-setup"]
VERBS = ["create", "get", "list", "delete", "patch"]

# conf: short cluster timeouts so that the orphan grace (its minimum follows
# them) is short enough to wait for at the end
CONF = {"kube_timeout_ms": "3000", "capacity_lock_timeout_ms": "2000", "orphan_grace_s": "40",
        "db_idle_tx_timeout_s": "15", "start_rate_max": "0"}


class ChaosStack(Stack):
    def write_conf(self):
        super().write_conf()
        with open(self.conf) as f:
            lines = [ln for ln in f if ln.split("=", 1)[0].strip() not in CONF]
        lines += [f"{k} = {v}\n" for k, v in CONF.items()]
        with open(self.conf, "w") as f:
            f.writelines(lines)


class Figures:
    def __init__(self):
        self.lock = threading.Lock()
        self.answers = {}   # "GET session 200" -> n
        self.lat = []
        self.hangs = []
        self.events = {"fcgi_killed": 0, "pg_restarts": 0, "bridge_restarts": 0,
                       "fault_rules": 0, "samples": 0, "sample_errors": 0, "consoles_open": 0,
                       "consoles_refused": 0, "grades_200": 0, "ready": 0}
        self.max_vms = 0

    def req(self, what, status, dt):
        with self.lock:
            k = f"{what} {status}"
            self.answers[k] = self.answers.get(k, 0) + 1
            self.lat.append(dt)

    def ev(self, k, n=1):
        with self.lock:
            self.events[k] = self.events.get(k, 0) + n


def timed(fig, what, fn):
    t0 = time.monotonic()
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001 (a refused, reset or malformed answer)
        dt = time.monotonic() - t0
        if dt >= DEADLINE_S - 1:
            fig.hangs.append((what, dt))
            fig.req(what, "hang", dt)
        else:
            fig.req(what, type(e).__name__, dt)
        return None
    err = (r.json or {}).get("error") if isinstance(r.json, dict) else None
    fig.req(what, f"{r.status} {err}" if err else r.status, time.monotonic() - t0)
    return r


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


def student(user, bases, stop, fig):
    rnd = random.Random(user)
    while not stop.is_set():
        base = rnd.choice(bases)
        api = Api(user, base=base, timeout=DEADLINE_S)
        r = timed(fig, "start", lambda: api.start(rnd.choice(LESSONS)))
        sid = None
        if r is not None and r.status == 201:
            sid = r.json["id"]
        elif r is not None and r.status == 409 and (r.json or {}).get("session"):
            sid = r.json["session"]["id"]
        if not sid:
            time.sleep(rnd.uniform(0.5, 2))
            continue
        state, t_end = "starting", time.monotonic() + 120
        while state == "starting" and not stop.is_set() and time.monotonic() < t_end:
            g = timed(fig, "get", lambda: api.get(sid))
            if g is not None and g.status == 200:
                state = g.json["state"]
            time.sleep(0.5)
        if state == "ready":
            fig.ev("ready")
            tk = timed(fig, "ticket", lambda: api.ticket(sid))
            if tk is not None and tk.status == 200:
                res = asyncio.run(console_once(base, tk.json["url"], user))
                fig.ev("consoles_open" if res == "open" else "consoles_refused")
            gr = timed(fig, "grade", lambda: api.grade(sid))
            if gr is not None and gr.status == 200:
                fig.ev("grades_200")
            time.sleep(rnd.uniform(0, 3))
        for _ in range(20):
            e = timed(fig, "end", lambda: api.end(sid))
            if e is not None and e.status in (200, 404):
                break
            time.sleep(1)
        api.close()


def faults(kube, stop, fig):
    rnd = random.Random(1)
    while not stop.wait(10 if fig.events["fault_rules"] else 0):
        try:
            kube.clear_faults()
            for v in VERBS:
                p = rnd.uniform(0.05, 0.20)
                if rnd.random() < 0.5:
                    kube.fault(verb=v, probability=p, code=rnd.choice([500, 503, 429]))
                else:
                    kube.fault(verb=v, probability=p, delay_ms=rnd.randint(100, 2500))
                fig.ev("fault_rules")
        except Exception:  # noqa: BLE001
            pass


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


def killer(st, stop, fig):
    rnd = random.Random(2)
    while not stop.wait(15):
        pids = fcgi_pids(st)
        if pids:
            try:
                os.kill(rnd.choice(pids), signal.SIGKILL)
                fig.ev("fcgi_killed")
            except OSError:
                pass


def pg_restarter(st, stop, fig):
    while not stop.wait(60):
        st.pg_down()
        time.sleep(1)
        st.pg_up()
        fig.ev("pg_restarts")


def bridge_restarter(st, stop, fig):
    while not stop.wait(40):
        st.stop("console")
        st.console_up()
        fig.ev("bridge_restarts")


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



def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=300)
    ap.add_argument("--students", type=int, default=10)
    ap.add_argument("--capacity", type=int, default=6)
    ap.add_argument("--keep", action="store_true", help="leave the stack running")
    a = ap.parse_args()

    base = int(os.environ.get("LABVM_PORT_BASE", "18000")) + 300
    st = ChaosStack(os.path.join(SRC, ".chaos"), port_base=base, capacity=a.capacity,
                    reaper_every=15)
    if st.running_any():
        st.down()
    env = st.up()
    os.environ.update(env)
    kube = Kube()
    fig = Figures()
    bases = [env[f"LABVM_{fe.upper()}_URL"] for fe in st.frontends()]
    stop, chaos_stop = threading.Event(), threading.Event()
    users = [f"student{300 + i}" for i in range(a.students)]
    ths = [threading.Thread(target=student, args=(u, bases, stop, fig)) for u in users]
    chaos = [threading.Thread(target=f, args=args) for f, args in (
        (faults, (kube, chaos_stop, fig)), (killer, (st, chaos_stop, fig)),
        (pg_restarter, (st, chaos_stop, fig)), (bridge_restarter, (st, chaos_stop, fig)),
        (sampler, (Kube(), stop, fig)))]
    t0 = time.monotonic()
    print(f"chaos: {a.students} students, capacity {a.capacity}, {a.duration:.0f} s, "
          f"stack in .chaos (ports from {base})", flush=True)
    for th in ths + chaos:
        th.start()
    try:
        time.sleep(a.duration)
    finally:
        chaos_stop.set()
        for th in chaos[:4]:
            th.join()
        kube.clear_faults()
        st.pg_up()  # in case a restart was cut short
        stop.set()
        for th in ths:
            th.join(DEADLINE_S + 60)
        chaos[4].join()
    ran = time.monotonic() - t0
    # every student ends what is left (a session a killed worker left open)
    for u in users:
        Api(u, base=bases[0]).end_current()
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
    orphans = []
    for kind in ("virtualmachines", "secrets"):
        for o in kube.list(kind, f"{PREFIX}/lab-session=true"):
            sid = o["metadata"].get("labels", {}).get(f"{PREFIX}/session-id")
            if sid not in active and not o["metadata"].get("deletionTimestamp"):
                orphans.append(f"{kind}/{o['metadata']['name']}")
    stuck = db.one("SELECT count(*) FROM sessions WHERE environment = %s AND state = "
                   "'starting'", st.environment)[0]

    total = sum(fig.answers.values())
    print(f"chaos: ran {ran:.0f} s; {total} requests; {fig.events}")
    for k in sorted(fig.answers):
        print(f"  {k:28s} {fig.answers[k]}")
    lat = fig.lat
    print(f"chaos: latency p50 {statistics.median(lat) * 1000 if lat else 0:.0f} ms, "
          f"p95 {pct(lat, 95) * 1000:.0f} ms, max {max(lat) if lat else 0:.1f} s")
    res = {"requests": total, "hangs": len(fig.hangs), "max_vms_sampled": fig.max_vms,
           "capacity": a.capacity, "orphans_after_reaper": len(orphans),
           "stuck_starting": stuck, "active_after_end": len(active)}
    print("chaos: " + json.dumps(res))
    if orphans:
        print("chaos: orphans: " + ", ".join(orphans[:10]))
    if not a.keep:
        st.down()
    ok = not fig.hangs and fig.max_vms <= a.capacity and not orphans and stuck == 0
    print("chaos: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
