#!/usr/bin/python3
"""What frozen agents cost the class through one front end: another
student's status GET (GET /api/sessions/{id} of a ready lab), through every
front end, before and while --frozen students whose agents accept and never
answer (tests/lib/agentrec.py silent, started in the guest as root would)
each keep one request of each --kinds (grade, tty) in flight through
--through (default apache).

    . .check/env   # any stack's env file (the test lessons: test-hold)
    PYTHONPATH=tests/lib benchmarks/frozen_workers.py [--frozen 2] [--kinds grade,tty]
                                                    [--through apache] [--gets 20]

Each such request holds the labvm.fcgi worker that serves it (a grade for
the lesson's grade deadline, a tty-size for agent_ready_timeout_ms), one per
session and kind (the leases): --frozen x len(--kinds) workers in all. When
that reaches the workers behind --through (Apache: one labvm.fcgi of
fcgi_threads = 4), every other request through it waits for one of them.
Prints p50 / p95 / max of the other student's GETs per front end, before
and during."""
import argparse
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "lib"))
sys.path.insert(0, HERE)

from benchstats import pct  # noqa: E402
from chaos import hostile_agent  # noqa: E402
from labclient import Api, Db, Kube  # noqa: E402


def gets(base, user, sid, n):
    a = Api(user, base=base, timeout=300)
    lat = []
    for _ in range(n):
        t0 = time.monotonic()
        a.get(sid)
        lat.append(time.monotonic() - t0)
        time.sleep(0.1)
    a.close()
    return lat


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--frozen", type=int, default=2)
    ap.add_argument("--kinds", default="grade,tty")
    ap.add_argument("--through", default="apache")
    ap.add_argument("--lesson", default="test-hold", help="grade deadline 6 s")
    ap.add_argument("--gets", type=int, default=20)
    ap.add_argument("--first-user", type=int, default=380)
    a = ap.parse_args()
    kube, db = Kube(), Db()
    fronts = {fe: os.environ[f"LABVM_{fe.upper()}_URL"]
              for fe in os.environ.get("LABVM_FRONTENDS", "lighttpd").split()}
    through = fronts[a.through]
    kinds = a.kinds.split(",")
    frozen = []
    users = [f"student{a.first_user + i}" for i in range(a.frozen + 1)]
    for u in users:
        api = Api(u, base=through)
        api.end_current()
        r = api.start(a.lesson)
        if r.status != 201:
            sys.exit(f"start for {u}: {r}")
        frozen.append((u, r.json["id"]))
    for u, sid in frozen:
        api = Api(u, base=through)
        s = None
        for _ in range(600):
            s = api.get(sid).json
            if s["state"] != "starting" or s.get("stage") == "setting_up":
                break
            time.sleep(0.1)
        if a.lesson == "test-hold":   # its setup waits for /root/go
            kube.guest_exec(s["vms"][0]["name"], "touch /root/go")
        s = api.wait_state(sid, ("ready", "failed"), 120)
        if s["state"] != "ready":
            sys.exit(f"{u}: {s['state']} {s.get('error')}")
    other, osid = frozen.pop()   # the other student keeps a live agent
    for u, sid in frozen:
        s = Api(u, base=through).get(sid).json
        ip = db.one("SELECT ip FROM session_vms WHERE session_id = %s", sid)[0]
        hostile_agent(kube, s["vms"][0]["name"], ip, "silent")

    print(f"frozen_workers: {len(frozen)} students with frozen agents, each one "
          f"{' and one '.join(kinds)} in flight through {a.through}")
    for fe, base in fronts.items():
        lat = gets(base, other, osid, a.gets)
        print(f"  before  {fe:9s} other student's GET p50 {pct(lat, 50) * 1000:7.1f} ms  "
              f"p95 {pct(lat, 95) * 1000:7.1f} ms  max {max(lat) * 1000:7.1f} ms", flush=True)
    stop = threading.Event()

    def keep(u, sid, kind):
        api = Api(u, base=through, timeout=300)
        while not stop.is_set():
            if kind == "grade":
                api.grade(sid)
            else:
                api.request("POST", f"/api/sessions/{sid}/tty-size", {"cols": 80, "rows": 24})
    ths = [threading.Thread(target=keep, args=(u, sid, k), daemon=True)
           for u, sid in frozen for k in kinds]
    for th in ths:
        th.start()
    time.sleep(2)
    for fe, base in fronts.items():
        lat = gets(base, other, osid, a.gets)
        print(f"  during  {fe:9s} other student's GET p50 {pct(lat, 50) * 1000:7.1f} ms  "
              f"p95 {pct(lat, 95) * 1000:7.1f} ms  max {max(lat) * 1000:7.1f} ms", flush=True)
    stop.set()
    for u, sid in frozen + [(other, osid)]:
        Api(u, base=through).end(sid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
