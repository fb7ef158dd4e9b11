#!/usr/bin/python3
"""The waiting line (issue #20): a start refused for capacity may join it;
one place per user; whichever request sees free seats admits the head, in
join order, across front ends; a place lapses without polls; the line lives
in PostgreSQL and survives labvm.fcgi and database restarts; capacity is
never exceeded."""
import os
import random
import signal
import subprocess
import threading
import time

from labtest import (PREFIX, reaper_argv, Api, Db, Kube, env, frontends, lighttpd_fcgi_pids, pg_ctl,
                     reset_world, users, wait_until)
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
CAPACITY = 8
LESSON = "linux-basics"
STATE = env("LABVM_STATE")
HOLDERS = users(270, CAPACITY)
FES = [url for _, url in frontends()]


def join(api):
    return api.request("POST", "/api/sessions", {"lesson": LESSON, "queue": True})


def fill():
    """Every seat taken by HOLDERS; their session ids."""
    sids = []
    for u in HOLDERS:
        r = Api(u).start(LESSON)
        t.require(r.status == 201, f"holder {u} start: {r}")
        sids.append((u, r.json["id"]))
    return sids


def end_all(sids):
    for u, sid in sids:
        Api(u).end(sid)


def waiting_users():
    return [u for (u,) in db.query("SELECT user_name FROM session_queue WHERE state = 'waiting' "
                                 "ORDER BY seq")]


class Watch:
    """Counts lab VMs in the cluster all along (the capacity's truth)."""

    def __init__(self):
        self.most = 0
        self.stop = threading.Event()
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def run(self):
        k = Kube()
        while not self.stop.is_set():
            self.most = max(self.most, len(k.list("virtualmachines", f"{PREFIX}/lab-session=true")))
            time.sleep(0.1)

    def done(self):
        self.stop.set()
        self.th.join(10)
        return self.most


def poll_until_admitted(api, sid, timeout=120, interval=1.0):
    """As the page does: GET the place until it is a session."""
    def check():
        r = api.get(sid)
        if r.status == 200 and r.json.get("state") in ("starting", "ready"):
            return r
        return None
    return wait_until(check, timeout, interval, f"{api.user}'s place admitted")


@t.test(name="join only for capacity: 202 queued with position and bound; one place per user; leave")
def join_and_leave():
    reset_world(kube, db)
    a = Api("student230")
    r = join(a)
    t.eq(r.status, 201, "with free seats, \"queue\": true is a normal start", r)
    a.end(r.json["id"])
    wait_until(lambda: not kube.lab_vms(), 30, what="the VM gone")
    t.eq(Api("student230").request("POST", "/api/sessions", {"lesson": LESSON, "queue": 1}).status,
         400, "\"queue\" must be a boolean")
    holders = fill()
    r = Api("student278").start(LESSON)
    t.eq((r.status, r.json.get("error"), r.json.get("can_queue")), (503, "capacity_full", True),
         "a start refused for capacity offers the line", r.json)
    r = join(a)
    t.eq(r.status, 202, "joining answers 202", r)
    q = r.json
    sid = q["id"]
    t.eq((q["state"], q["queue"]["position"], q["queue"]["ahead"]), ("queued", 1, 0),
         "a queued session, first in line", q)
    t.ok(q["queue"]["no_later_than"] and q["queue"]["estimate"],
         "the bound (the earliest expiry) and an estimate", q["queue"])
    exp = sorted(Api(u).get(s).json["expires_at"] for u, s in holders)[0]
    t.eq(q["queue"]["no_later_than"], exp, "the bound for the 1st seat is the earliest expiry")
    t.ok(q["queue"]["estimate"] <= q["queue"]["no_later_than"], "the estimate is not later")
    r = a.start(LESSON)
    t.eq((r.status, r.json.get("error"), (r.json.get("session") or {}).get("id")),
         (409, "session_exists", sid), "a second start names the place", r.json)
    t.eq(join(a).status, 409, "a second join too")
    r = a.current()
    t.eq((r.status, r.json.get("id"), r.json.get("state")), (200, sid, "queued"),
         "the place is the user's current session")
    t.eq(Api("student231").get(sid).status, 404, "another user does not see it")
    t.eq(a.ticket(sid).json.get("error"), "not_ready", "no console for a place in line")
    b = Api("student231")
    r = join(b)
    sb = r.json["id"]
    t.eq(r.json["queue"]["position"], 2, "the next is 2nd in line", r.json)
    exps = sorted(Api(u).get(s).json["expires_at"] for u, s in holders)
    t.eq(r.json["queue"]["no_later_than"], exps[1], "the 2nd's bound is the 2nd earliest expiry")
    r = a.end(sid)
    t.eq((r.status, r.json.get("state")), (200, "left"), "DELETE leaves the line", r)
    t.eq(a.get(sid).json.get("state"), "left", "the place says so afterwards")
    t.eq(a.current().status, 404, "no open session any more")
    t.eq(b.get(sb).json["queue"]["position"], 1,
         "the one behind moved up")
    end_all(holders)


@t.test(name="40 join in a burst through two front ends: admitted in join order, capacity never exceeded")
def burst_fairness():
    reset_world(kube, db)
    holders = fill()
    us = users(230, 40)
    apis = [Api(u, base=FES[i % len(FES)]) for i, u in enumerate(us)]
    out = [None] * len(apis)
    gate = threading.Barrier(len(apis))

    def one(i):
        gate.wait()
        out[i] = join(apis[i])
    ths = [threading.Thread(target=one, args=(i,)) for i in range(len(apis))]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    t.eq([r.status for r in out].count(202), 40, "all 40 joined", [r.status for r in out])
    t.eq(sorted(r.json["queue"]["position"] for r in out if r.status == 202), list(range(1, 41)),
         "positions 1..40, each once")
    byq = sorted((r.json["queue"] for r in out if r.status == 202), key=lambda q: q["position"])
    t.ok(all(q["no_later_than"] and q["estimate"] for q in byq),
         "every place has a bound and an estimate, beyond the seats held too",
         [q["position"] for q in byq if not q["no_later_than"]])
    bounds = [q["no_later_than"] for q in byq if q["no_later_than"]]
    t.eq(bounds, sorted(bounds), "the bound never falls with the position")
    order = waiting_users()
    t.eq(len(order), 40, "40 places in line")
    t.ok(len(FES) >= 2, "two front ends", FES)
    r = Api("student278").start(LESSON)
    t.eq(r.status, 503, "a newcomer's fresh start waits behind the line", r)
    watch = Watch()
    end_all(holders)     # the seats free; the students' polls move the line
    admitted = {}

    def student(i):
        api, sid = apis[i], out[i].json["id"]
        poll_until_admitted(api, sid, timeout=300, interval=2.0)
        admitted[api.user] = True
        time.sleep(random.uniform(0.2, 2.0))   # sessions end at random
        api.end(sid)
    ths = [threading.Thread(target=student, args=(i,)) for i in range(len(apis))]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    most = watch.done()
    t.eq(len(admitted), 40, "every student admitted")
    got = [u for (u,) in db.query("SELECT q.user_name FROM session_queue q JOIN sessions s "
                                "ON s.id = q.id WHERE q.id::text = ANY(%s) "
                                "ORDER BY s.submitted_at", [r.json["id"] for r in out])]
    t.eq(got, order, "admissions in join order")
    t.ok(most <= CAPACITY, "never more lab VMs than the capacity", most)
    t.ok(most == CAPACITY, "the line filled every seat", most)


@t.test(name="a place not polled lapses; its student is told so; the reaper lapses too")
def lapse():
    reset_world(kube, db)
    holders = fill()
    a, b = Api("student230"), Api("student231")
    sa, sb = join(a).json["id"], join(b).json["id"]
    db.query("UPDATE session_queue SET last_seen_at = now() - interval '1 hour' WHERE id = %s",
             (sa,))
    r = b.get(sb)
    t.eq(r.json["queue"]["position"], 1, "the poll behind it lapsed it: 1st now", r.json)
    r = a.get(sa)
    t.eq(r.json.get("state"), "lapsed", "the student who returns is told", r.json)
    t.ok("lapsed" in (r.json.get("message") or ""), "with a message", r.json)
    t.eq(a.current().status, 404, "no open session")
    r = join(a)
    t.eq((r.status, r.json["queue"]["position"]), (202, 2), "may join anew, at the end", r.json)
    db.query("UPDATE session_queue SET last_seen_at = now() - interval '1 hour' WHERE id = %s",
             (sb,))
    rp = subprocess.run(reaper_argv(),
                        env=dict(os.environ, LABVM_CONF=env("LABVM_CONF")),
                        capture_output=True, text=True, timeout=120)
    t.eq(db.one("SELECT state FROM session_queue WHERE id = %s", sb), ("lapsed",),
         "the reaper's run lapsed a place nobody polls", rp.stdout + rp.stderr)
    end_all(holders)


@t.test(name="End by one student admits the head within seconds (the head's polls)")
def end_admits_head():
    reset_world(kube, db)
    holders = fill()
    a = Api("student230")
    sid = join(a).json["id"]
    t.eq(Api(holders[0][0]).end(holders[0][1]).json["state"], "ended", "one student ends")
    r = poll_until_admitted(a, sid, timeout=30, interval=1.0)
    t.eq((r.json["id"], r.json["state"] in ("starting", "ready")), (sid, True),
         "the place became the session, same id", r.json)
    t.eq(db.one("SELECT state FROM session_queue WHERE id = %s", sid), ("admitted",),
         "the place is marked admitted")
    a.end(sid)
    end_all(holders[1:])


@t.test(name="a seat free while the line waits: a newcomer's start is refused, and its request admits the head")
def newcomer_behind_line():
    reset_world(kube, db)
    holders = fill()
    a = Api("student230")
    sid = join(a).json["id"]
    # one seat frees without any labvm request seeing it (nobody pumps yet)
    u, hs = holders[0]
    vm = Api(u).get(hs).json["vms"][0]["name"]
    db.query("UPDATE sessions SET state = 'ended', end_reason = 'user', ended_at = now() "
             "WHERE id = %s", hs)
    kube.delete("virtualmachines", vm)
    wait_until(lambda: len(kube.lab_vms()) < CAPACITY, 30, what="a seat free in the cluster")
    t.eq(db.one("SELECT state FROM session_queue WHERE id = %s", sid), ("waiting",),
         "the head still waits")
    r = Api("student278").start(LESSON)
    t.eq((r.status, r.json.get("error"), r.json.get("queued")), (503, "capacity_full", 1),
         "the newcomer is refused: the free seat is the line's", r.json)
    t.eq(db.one("SELECT state FROM session_queue WHERE id = %s", sid), ("admitted",),
         "the newcomer's request admitted the head")
    t.eq(a.get(sid).json["state"] in ("starting", "ready"), True, "the head's session runs")
    a.end(sid)
    end_all(holders[1:])




@t.test(name="the line survives a labvm.fcgi restart and a PostgreSQL restart")
def survives_restarts():
    global db
    reset_world(kube, db)
    holders = fill()
    a, b = Api("student230"), Api("student231")
    sa, sb = join(a).json["id"], join(b).json["id"]
    before = set(lighttpd_fcgi_pids())
    t.require(before, "lighttpd's labvm.fcgi found")
    for pid in before:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: set(lighttpd_fcgi_pids()) - before, 15, what="lighttpd restarted labvm.fcgi")
    r = wait_until(lambda: (lambda x: x if x.status == 200 else None)(b.get(sb)), 15, 0.5,
                   "a poll after the restart")
    t.eq((r.json["state"], r.json["queue"]["position"]), ("queued", 2),
         "after labvm.fcgi restarted: still 2nd", r.json)
    r = pg_ctl("restart", "-m", "fast")
    t.require(r.returncode == 0, f"pg restart: {r.stderr}")
    db = Db()
    r = b.get(sb)
    t.eq((r.status, r.json.get("state"), (r.json.get("queue") or {}).get("position")),
         (200, "queued", 2), "after PostgreSQL restarted: still 2nd", r.json)
    Api(holders[0][0]).end(holders[0][1])
    r = poll_until_admitted(a, sa, timeout=30)
    t.eq(r.json["id"], sa, "and the head is admitted as before")
    r = b.get(sb)
    t.eq(r.json["queue"]["position"], 1, "the next moved up", r.json)
    a.end(sa)
    b.end(sb)
    end_all(holders[1:])


t.done()
