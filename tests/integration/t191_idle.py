#!/usr/bin/python3
"""Idle labs give their seat back (issue #28): typing in a console, a grade, a
console ticket and "I'm still here" postpone the idle end; without activity
the session ends with end_reason "idle", its objects go and the head of the
line gets the seat; the warning comes first, on the event stream and in the
JSON; extensions are capped and refused while the line waits; Pod and
multi-machine lessons behave the same; activity typed through one bridge
counts for a request served by another front end.

Time-scaled: the test lessons end after 12 s without activity
(idle_minutes 0.2), the stack warns 4 s before (idle_warning_s 4). No timing
is asserted: each check waits for the state it expects."""
import asyncio
import datetime
import os
import re

from labtest import (PREFIX, Api, Db, Kube, env, frontends, reset_world, users, wait_until)
from labconsole import Console, PrivateBridge
from sse import Stream, events_path
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
IDLE = "test-idle"
IDLE_S = 12
FES = dict(frontends())


def conf_key(name, default):
    with open(env("LABVM_CONF")) as f:
        for line in f:
            k, _, v = line.partition("=")
            if k.strip() == name:
                return v.strip()
    return default


CAPACITY = int(conf_key("vm_capacity", "8"))


def ts(v):
    return datetime.datetime.fromisoformat(v.replace("Z", "+00:00")) if v else None


def post(api, sid, what):
    return api.request("POST", f"/api/sessions/{sid}/{what}", {})


def ready(user, lesson=IDLE, timeout=120):
    api = Api(user)
    api.end_current()
    r = api.start(lesson)
    t.require(r.status == 201, f"{user} start {lesson}: {r}")
    s = api.wait_state(r.json["id"], ("ready", "failed"), timeout)
    t.require(s["state"] == "ready", f"{user} {lesson} not ready: {s.get('error')}")
    return api, s


def objs(kind, sid):
    return kube.list(kind, f"{PREFIX}/session-id={sid}")


def ended_for_idle(api, sid, timeout=90):
    """Poll as a page does (a GET is not activity) until the session ends."""
    def check():
        r = api.get(sid)
        return r.json if r.status == 200 and r.json["state"] in ("ended", "failed") else None
    return wait_until(check, timeout, 0.5, f"session {sid} ended")


def moved_on(api, sid, before, what):
    """Wait until the session's idle end is later than `before` (activity
    recorded), seen through api; the session JSON then."""
    def check():
        r = api.get(sid)
        if r.status != 200 or r.json["state"] != "ready":
            return {"lost": r.json}
        return r.json if ts(r.json["idle_ends_at"]) > before else None
    s = wait_until(check, 30, 0.3, f"{what}: idle end postponed")
    t.require("lost" not in s, f"{what}: the lab ended meanwhile: {s}")
    return s


lab = {}


@t.test(name="a ready idle lesson: last_activity_at, idle_ends_at = it + idle_minutes, "
             "extensions_left; a lesson without idle ending has idle_ends_at null")
def json_fields():
    api, s = ready("student400")
    lab.update(api=api, s=s)
    t.ok(s["last_activity_at"] is not None, "last_activity_at set at ready", s)
    t.eq((ts(s["idle_ends_at"]) - ts(s["last_activity_at"])).total_seconds(), IDLE_S,
         "idle_ends_at = last activity + 12 s", s)
    t.eq(s["extensions_left"], 2, "max_extensions of the lesson", s)
    other, o = ready("student401", "linux-basics")
    t.eq((o["idle_ends_at"], o["warning"]), (None, None),
         "idle ending off (config idle_minutes 0): idle_ends_at null, no warning", o)
    other.end(o["id"])
    r = Api("student402").request("POST", f"/api/sessions/{s['id']}/activity", {})
    t.eq(r.status, 404, "someone else's session: 404", r)


@t.test(name="\"I'm still here\", a grade, a console ticket and typing in the console each "
             "postpone the idle end")
def activity_postpones():
    api, s = lab["api"], lab["s"]
    sid = s["id"]
    cur = api.get(sid).json
    r = post(api, sid, "activity")
    t.eq(r.status, 200, "POST /activity: 200 session", r)
    cur = moved_on(api, sid, ts(cur["idle_ends_at"]), "I'm still here")
    r = api.grade(sid)
    t.eq(r.status, 200, "grade", r)
    cur = moved_on(api, sid, ts(cur["idle_ends_at"]), "a grade")
    url = api.ticket(sid).json["url"]
    cur = moved_on(api, sid, ts(cur["idle_ends_at"]), "a console ticket")
    loop = asyncio.new_event_loop()

    async def typed():
        c = await Console.open(env("LABVM_URL"), url, "student400")
        t.require(await c.opened(30), "console open")
        before = ts(api.get(sid).json["idle_ends_at"])
        # the bridge records typing at most every 3 s: type until it shows
        def check():
            r = api.get(sid)
            return r.json if ts(r.json["idle_ends_at"]) > before else None
        got = None
        for _ in range(40):
            await c.send(b"echo still-typing\r")
            await asyncio.sleep(0.5)
            got = check()
            if got:
                break
        t.ok(got is not None, "typing postponed the idle end (recorded by the bridge)")
        # a page merely open (a console that only receives) is not activity
        await c.close()
    loop.run_until_complete(typed())
    loop.close()


@t.test(name="extensions: expires_at moves by extend_minutes, extensions_left counts down, "
             "then 409 no_extensions_left")
def extension_cap():
    api, s = lab["api"], lab["s"]
    sid = s["id"]
    e0 = ts(api.get(sid).json["expires_at"])
    r1 = post(api, sid, "extend")
    t.eq((r1.status, r1.json.get("extensions_left")), (200, 1), "first extension", r1)
    t.eq((ts(r1.json["expires_at"]) - e0).total_seconds(), 30, "expires_at + 30 s", r1.json)
    r2 = post(api, sid, "extend")
    t.eq((r2.status, r2.json.get("extensions_left")), (200, 0), "second extension", r2)
    r3 = post(api, sid, "extend")
    t.eq((r3.status, r3.json.get("error")), (409, "no_extensions_left"), "the cap holds", r3)
    t.eq(ts(api.get(sid).json["expires_at"]), ts(r2.json["expires_at"]),
         "a refused extension moves nothing")


@t.test(name="no activity: the warning on the stream (until=end) and in the JSON first, then "
             "end_reason idle, the VM deleted, the head of the line admitted; line_waiting "
             "meanwhile")
def idle_end_admits_line():
    api, s = lab["api"], lab["s"]
    sid = s["id"]
    cap = CAPACITY
    holders = []
    for u in users(410, cap - 1):
        a = Api(u)
        a.end_current()
        r = a.start("linux-basics")
        t.require(r.status == 201, f"holder {u}: {r}")
        holders.append((a, r.json["id"]))
    waiter = Api("student420")
    waiter.end_current()
    q = waiter.request("POST", "/api/sessions", {"lesson": "linux-basics", "queue": True})
    t.eq((q.status, q.json.get("state")), (202, "queued"), "the lab is full: in line", q)
    r = post(api, sid, "extend")
    t.eq((r.status, r.json.get("error")), (409, "no_extensions_left"),
         "(the cap is checked first)", r)
    db.query("UPDATE sessions SET extensions_left = 1 WHERE id = %s", sid)
    r = post(api, sid, "extend")
    t.eq((r.status, r.json.get("error")), (409, "line_waiting"),
         "an extension while the line waits: 409 line_waiting", r)
    r = post(api, sid, "activity")
    t.require(r.status == 200, f"the lab is still there after filling the seats: {r}")
    st = Stream(events_path(sid) + "?until=end", user="student400", timeout=60)
    t.eq(st.status, 200, "event stream through ready")
    first = st.next()
    t.eq(first.json["state"], "ready", "its first event is the ready session", first)
    warn = None
    while True:
        e = st.next()
        if e is None or e.event == "warning" or e.json.get("state") != "ready":
            warn = e
            break
    t.ok(warn is not None and warn.event == "warning", "a warning event before the end", warn)
    w = warn.json if warn else {}
    t.eq(w.get("kind"), "idle", "kind idle", w)
    t.ok(ts(w.get("ends_at")) is not None, "with ends_at", w)
    j = api.get(sid).json
    if j["state"] == "ready":
        t.eq((j["warning"] or {}).get("kind"), "idle", "the JSON says the same", j)
        t.eq(j["warning"]["ends_at"], j["idle_ends_at"], "ends at idle_ends_at", j)
    last = None
    while True:
        e = st.next()
        if e is None:
            break
        last = e
    st.close()
    t.ok(last is not None and last.json["state"] == "ended", "the stream ends with the end",
         last)
    e = ended_for_idle(api, sid)
    t.eq((e["state"], e["end_reason"]), ("ended", "idle"), "ended, reason idle", e)
    t.ok(ts(e["ended_at"]) >= ts(w.get("ends_at")), "not before the warned end", e)
    wait_until(lambda: not objs("virtualmachines", sid) and not objs("secrets", sid), 30,
               what="its VM and Secret deleted")
    t.ok(True, "its VM and Secret are gone")

    def admitted():
        r = waiter.get(q.json["id"])
        return r.json if r.status == 200 and r.json.get("state") in ("starting", "ready") else None
    a = wait_until(admitted, 60, 0.5, "the head of the line admitted")
    t.eq(a["id"], q.json["id"], "the head of the line got the seat", a)
    waiter.end(a["id"])
    for h, hid in holders:
        h.end(hid)
    m = Api("operator").request("GET", "/api/metrics").body
    got = re.search(r'^labvm_sessions_ended_total\{reason="idle"\} (\d+)', m, re.M)
    t.ok(got and int(got.group(1)) >= 1, "metrics: sessions ended by reason idle", got)
    rec = re.search(r'^labvm_idle_reclaimed_seat_seconds_total\{runtime="vm"\} ([0-9.]+)', m,
                    re.M)
    t.ok(rec and float(rec.group(1)) > 0, "metrics: seat-seconds reclaimed by idle ends", rec)
    r = post(api, sid, "activity")
    t.eq((r.status, r.json.get("error")), (409, "not_ready"), "activity after the end: 409", r)


@t.test(name="a starting session is never ended for idleness")
def starting_never_idle():
    api = Api("student403")
    api.end_current()
    # the VMI stays Pending while every node is cordoned: the session stays starting
    from labtest import cordon
    cordon(kube, True)
    try:
        r = api.start(IDLE)
        t.require(r.status == 201, f"start: {r}")
        sid = r.json["id"]
        # a ready session would have ended in this time; make the row look long idle too
        db.query("UPDATE sessions SET last_activity_at = now() - interval '1 hour' "
                 "WHERE id = %s", sid)
        wait_until(lambda: db.one("SELECT now() - created_at > interval '14 seconds' "
                                  "FROM sessions WHERE id = %s", sid)[0], 30, 0.5,
                   "longer than the idle time since the press")
        s = api.get(sid).json
        t.eq((s["state"], s["idle_ends_at"], s["warning"]), ("starting", None, None),
             "still starting: no idle end, no warning", s)
        api.end(sid)
    finally:
        cordon(kube, False)


@t.test(name="a Pod lesson: activity postpones, no activity ends it (idle), its Pod deleted")
def pod_lesson():
    api, s = ready("student404", "test-idle-pod")
    sid = s["id"]
    t.eq(s["runtime"], "pod", "a Pod session")
    cur = s
    t.eq(post(api, sid, "activity").status, 200, "I'm still here")
    moved_on(api, sid, ts(cur["idle_ends_at"]), "pod: I'm still here")
    e = ended_for_idle(api, sid)
    t.eq((e["state"], e["end_reason"]), ("ended", "idle"), "ended, reason idle", e)
    wait_until(lambda: not objs("pods", sid), 30, what="its Pod deleted")
    t.ok(True, "its Pod is gone")


@t.test(name="a multi-machine lesson: a ticket for the second machine postpones; no activity "
             "ends it (idle), every VM deleted")
def multi_lesson():
    api, s = ready("student405", "test-idle-multi")
    sid = s["id"]
    t.eq(len(s["vms"]), 2, "two machines")
    t.eq(api.ticket(sid, "two").status, 200, "a ticket for machine two")
    moved_on(api, sid, ts(s["idle_ends_at"]), "multi: ticket for machine two")
    r = post(api, sid, "extend")
    t.eq((r.status, r.json.get("error")), (409, "no_extensions_left"),
         "max_extensions 0: none", r)
    e = ended_for_idle(api, sid)
    t.eq((e["state"], e["end_reason"]), ("ended", "idle"), "ended, reason idle", e)
    wait_until(lambda: not objs("virtualmachines", sid), 30, what="every VM deleted")
    t.ok(True, "both VMs are gone")


@t.test(name="activity typed through a second bridge counts for a request served by the "
             "other front end (recorded in PostgreSQL)")
def across_bridges():
    api, s = ready("student406")
    sid = s["id"]
    other = FES.get("apache") or FES.get("lighttpd")
    api2 = Api("student406", base=other)
    br = PrivateBridge("t190-second")
    loop = asyncio.new_event_loop()
    try:
        async def go():
            c = await Console.open(br.base, api.ticket(sid).json["url"], "student406")
            t.require(await c.opened(30), "console open on the second bridge")
            before = ts(api2.get(sid).json["idle_ends_at"])
            got = None
            for _ in range(40):
                await c.send(b"echo from-the-second-bridge\r")
                await asyncio.sleep(0.5)
                r = api2.get(sid)
                if r.json["state"] == "ready" and ts(r.json["idle_ends_at"]) > before:
                    got = r.json
                    break
            t.ok(got is not None, f"the idle end moved, as {other} sees it", got)
            await c.close()
        loop.run_until_complete(go())
    finally:
        loop.close()
        br.close()
    api.end(sid)


@t.test(name="an expiry near: the JSON warns with kind expiry (idle ending off)")
def expiry_warning():
    api, s = ready("student407", "linux-basics")
    sid = s["id"]
    db.query("UPDATE sessions SET expires_at = now() + interval '3 seconds' WHERE id = %s", sid)
    j = api.get(sid).json
    t.eq((j["warning"] or {}).get("kind"), "expiry", "kind expiry", j)
    t.eq(j["warning"]["ends_at"], j["expires_at"], "ends at expires_at", j)
    e = ended_for_idle(api, sid)
    t.eq(e["end_reason"], "expired", "then it expires (not idle)", e)


t.done()
