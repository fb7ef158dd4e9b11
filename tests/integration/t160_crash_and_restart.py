#!/usr/bin/python3
"""A process killed mid-request and a database that restarts lose nothing:
the killed start leaves no session row and only labelled objects that the
reaper reclaims; after a database restart the next requests just work."""
import os
import signal
import subprocess
import time
import urllib.parse

import labstack

from labtest import PREFIX, reaper_argv, Api, Db, Kube, env, lighttpd_fcgi_pids, pg_ctl, reset_world, wait_until
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
ENV = env("LABVM_ENVIRONMENT")
STATE = env("LABVM_STATE")



@t.test(name="labvm.fcgi killed mid-start: no session row, labelled leftovers, reaper reclaims")
def killed_mid_start():
    api = Api("student220", timeout=20)
    kube.fault(verb="create", resource="virtualmachines", delay_ms=3000, times=1)
    before = set(lighttpd_fcgi_pids())
    t.require(before, "found lighttpd's labvm.fcgi processes")
    import threading
    result = {}
    th = threading.Thread(target=lambda: result.setdefault("r", api.start("linux-basics")))
    th.start()
    # the Secret exists once the VM create is pending
    wait_until(lambda: kube.list("secrets", f"{PREFIX}/lab-session=true"), 10, 0.05,
               "the Secret created")
    for pid in lighttpd_fcgi_pids():
        os.kill(pid, signal.SIGKILL)
    th.join(30)
    kube.clear_faults()
    r = result.get("r")
    t.ok(r is not None and r.status >= 500, "the student got an error, not a session", r)
    t.eq(db.one("SELECT count(*) FROM sessions WHERE user_name = 'student220' "
                "AND state IN ('starting', 'ready')"), (0,), "no active session row (rolled back)")
    # the API server finishes the create it had received (after the 3 s delay)
    wait_until(kube.lab_vms, 10, 0.1, "the VM created by the already-sent request")
    left = kube.list("secrets", f"{PREFIX}/lab-session=true") + kube.lab_vms()
    t.ok(left, "something was left in the cluster by the killed process")
    t.ok(all(o["metadata"]["labels"].get(f"{PREFIX}/environment") == ENV and
             o["metadata"]["labels"].get(f"{PREFIX}/session-id") for o in left),
         "every leftover carries the marker, this environment and a session id")
    out = subprocess.run(reaper_argv("--grace", "0"), env=dict(os.environ, LABVM_CONF=env("LABVM_CONF")),
                         capture_output=True, text=True, timeout=60)
    t.eq(out.returncode, 0, "reaper ran", out.stdout + out.stderr)
    wait_until(lambda: not kube.lab_vms() and not kube.list("secrets", f"{PREFIX}/lab-session=true"),
               15, what="the leftovers reclaimed")
    # lighttpd starts new workers; the same student can start again
    wait_until(lambda: set(lighttpd_fcgi_pids()) - before, 15, what="lighttpd restarted labvm.fcgi")
    r = wait_until(lambda: (lambda x: x if x.status == 201 else None)(api.start("linux-basics")),
                   15, 0.5, "a start after the crash")
    t.eq(r.status, 201, "a new start works")
    api.end(r.json["id"])



def all_fcgi_pids():
    """Every labvm.fcgi of this stack (lighttpd's children and Apache's under spawn-fcgi)."""
    out = []
    for pid in os.listdir("/proc"):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            envs = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except (OSError, ValueError):
            continue
        if cmd and cmd[0].endswith(b"labvm.fcgi") and \
                f"LABVM_CONF={env('LABVM_CONF')}".encode() in envs:
            out.append(int(pid))
    return out


def worker_connections():
    """Database connections of labvm.fcgi workers (one per worker thread)."""
    return db_now().one("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'labvm' "
                        "AND datname = 'labvm'")[0]


_db = {}


def db_now():
    if "c" not in _db or _db["c"].conn.closed:
        _db["c"] = Db()
    return _db["c"]


def touch_all_workers(sid, want, rounds=100):
    """Concurrent GETs through every front end until `want` worker connections
    exist; returns (statuses seen, connections reached)."""
    import threading
    from labtest import frontends
    statuses = []
    apis = [Api("student221", base=url) for _, url in frontends() for _ in range(8)]
    n = 0
    for _ in range(rounds):
        def one(a):
            statuses.append(a.get(sid).status)
        ths = [threading.Thread(target=one, args=(a,)) for a in apis]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
        n = worker_connections()
        if n >= want:
            break
    return statuses, n


@t.test(name="the database restarts: the next requests succeed on every worker")
def db_restart():
    api = Api("student221")
    r = api.start("linux-basics")
    t.require(r.status == 201, f"start: {r}")
    sid = r.json["id"]
    threads = 4   # fcgi_threads in the stack's labvm.conf
    want = threads * len(all_fcgi_pids())
    t.ok(want >= 12, "lighttpd's two labvm.fcgi and Apache's, four workers each", want)
    # every worker holds a connection that the restart will kill
    codes, n = touch_all_workers(sid, want)
    t.require(n == want, f"every worker has its database connection before: {n} of {want}")
    r = pg_ctl("restart", "-m", "fast")
    t.require(r.returncode == 0, f"pg restart: {r.stderr}")
    _db.clear()
    t.eq(worker_connections(), 0, "the restart dropped every worker's connection")
    codes, n = touch_all_workers(sid, want)
    t.eq(n, want, "every worker reconnected (one connection per worker again)")
    t.eq(sorted(set(codes)), [200], "every request after the restart answered 200 "
         "(reconnect and retry)", len(codes))
    t.eq(api.end(sid).json["state"], "ended", "and writes work")


@t.test(name="the database down: 503 db_unavailable, nothing created; back up: works")
def db_down():
    api = Api("student222")
    wait_until(lambda: not kube.lab_vms(), 20, what="no lab VM before the test")
    r = pg_ctl("stop", "-m", "fast")
    t.require(r.returncode == 0, f"pg stop: {r.stderr}")
    try:
        r = api.start("linux-basics")
        c = api.current()
        h = api.request("GET", "/api/healthz")
    finally:
        # start it again the way the stack does (same port, socket dir, settings)
        port = int(urllib.parse.urlsplit(env("LABVM_DATABASE")).port)
        labstack.Stack(STATE, port_base=port - 432).pg_up()
    t.eq((r.status, (r.json or {}).get("error")), (503, "db_unavailable"), "start refused clearly")
    t.eq(c.status, 503, "reads refused clearly too")
    t.eq(h.status, 503, "healthz says so")
    t.ok((h.json or {}).get("db") != "ok", "the database part is not ok", h.json)
    left = kube.lab_vms()
    t.eq(len(left), 0, "nothing was created in the cluster",
         [(v["metadata"]["name"], v["metadata"]["labels"], v["metadata"].get("deletionTimestamp"), v["metadata"]["creationTimestamp"]) for v in left])
    r = wait_until(lambda: (lambda x: x if x.status == 201 else None)(api.start("linux-basics")),
                   20, 0.5, "a start once the database is back")
    api.end(r.json["id"])


reset_world(kube, Db())  # the first connection died with the restart
t.done()
