#!/usr/bin/python3
"""The event stream, GET /api/sessions/{id}/events: stage changes in order,
one event each with the session JSON and an id; Last-Event-ID resumes
without loss or repetition; owner only; a final event at ready, failed and
ended; keepalive comments; open across a PostgreSQL restart; through
lighttpd and Apache, unbuffered; streams hold no FastCGI worker; at most
stream_max_per_user streams per user across every process (429
too_many_streams), and a stream opened with any Last-Event-ID still ends
when its session does."""
import json
import socket
import threading
import time

from labtest import Api, Db, Kube, env, frontends, pg_ctl, reset_world, users, wait_until
from sse import Stream, events_path
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
ORDER = ["submitted", "scheduling", "booting", "setting_up", "ready"]
STATE = env("LABVM_STATE")


def fresh(api, lesson):
    api.end_current()
    r = api.start(lesson)
    t.require(r.status == 201, f"start {lesson}: {r}")
    return r.json["id"]


def check_order(evs, sid, what):
    ids = [int(e.id) for e in evs]
    t.eq(ids, sorted(set(ids)), f"{what}: ids strictly increase", ids)
    # one event per change of stage or state (a failure or an end keeps the
    # stage it happened in), stages in order
    steps = [(e.json["stage"], e.json["state"]) for e in evs]
    t.ok(all(ORDER.index(a[0]) <= ORDER.index(b[0]) and a != b
             for a, b in zip(steps, steps[1:])),
         f"{what}: one event per stage change, in order", steps)
    t.ok(all(e.json["id"] == sid for e in evs), f"{what}: every event is the session's JSON")


@t.test(name="a start, followed by events through each front end: in order, ends at ready")
def order_per_frontend():
    for fe, base in frontends():
        api = Api("student261", base=base)
        sid = fresh(api, "test-slow-setup")
        st = Stream(events_path(sid), "student261", base=base)
        t.eq(st.status, 200, f"{fe}: 200")
        t.ok(st.headers.get("content-type", "").startswith("text/event-stream"),
             f"{fe}: text/event-stream", st.headers)
        first = st.next()
        t.require(first is not None, f"{fe}: a first event")
        t.eq(first.json["state"], "starting", f"{fe}: the first event is the session now")
        # unbuffered: the first event is here while the start is still going on
        # (the setup takes 2 s, so a buffering front end would hold it back)
        t.eq(db.one("SELECT state FROM sessions WHERE id = %s", sid)[0], "starting",
             f"{fe}: the first event arrived before the start was over (not buffered)")
        rest = st.all()
        evs = [first] + rest
        check_order(evs, sid, fe)
        t.eq(evs[-1].json["state"], "ready", f"{fe}: the final event says ready")
        t.ok(len(evs) >= 3, f"{fe}: the stages came one by one", [e.json["stage"] for e in evs])
        got = api.get(sid).json
        t.eq((got["state"], got["ready_at"]), ("ready", evs[-1].json["ready_at"]),
             f"{fe}: the plain GET says the same")
        all_ids = [int(i) for (i,) in db.query(
            "SELECT seq FROM session_events WHERE session_id = %s ORDER BY seq", sid)]
        t.eq([int(e.id) for e in evs], [i for i in all_ids if i >= int(first.id)],
             f"{fe}: every recorded change after the first event, none twice")
        api.end(sid)


@t.test(name="Last-Event-ID resumes without loss or repetition; after the final event 204")
def resume():
    api = Api("student262")
    sid = fresh(api, "test-slow-setup")
    st = Stream(events_path(sid), "student262")
    first = st.next()
    st.close()  # the connection drops after the first event
    wait_until(lambda: api.get(sid).json["state"] == "ready", 60, 0.2, "ready")
    st2 = Stream(events_path(sid), "student262", last_id=first.id)
    t.eq(st2.status, 200, "resumed")
    evs = st2.all()
    want = [int(i) for (i,) in db.query(
        "SELECT seq FROM session_events WHERE session_id = %s AND seq > %s ORDER BY seq",
        sid, int(first.id))]
    t.eq([int(e.id) for e in evs], want, "exactly the events after Last-Event-ID")
    t.eq(evs[-1].json["state"], "ready", "up to the final one")
    check_order([first] + evs, sid, "resumed")
    st3 = Stream(events_path(sid), "student262", last_id=evs[-1].id)
    t.eq(st3.status, 204, "after the final event: 204 (EventSource stops)")
    bad = Stream(events_path(sid), "student262", last_id="12x")
    t.eq(bad.status, 400, "a Last-Event-ID that is not an id: 400", bad.body)
    t.ok('"bad_request"' in (bad.body or ""), "with a clear error", bad.body)
    api.end(sid)


@t.test(name="owner only: someone else's session and an unknown id are 404")
def owner_only():
    api = Api("student263")
    sid = fresh(api, "linux-basics")
    for base in [b for _, b in frontends()]:
        other = Stream(events_path(sid), "student264", base=base)
        t.eq(other.status, 404, "another user: 404", other.body)
        t.ok('"not_found"' in (other.body or ""), "not_found, as for the plain GET")
    unknown = Stream(events_path("00000000-0000-4000-8000-000000000000"), "student263")
    t.eq(unknown.status, 404, "an unknown session: 404")
    api.end(sid)


@t.test(name="final events: failed (nobody polling: the deadline still holds) and ended")
def final_failed_ended():
    api = Api("student265")
    sid = fresh(api, "test-never-ready")
    st = Stream(events_path(sid), "student265")
    evs = st.all()  # nobody polls the plain GET: the stream's driver keeps the deadline
    t.ok(evs, "events came")
    t.eq(evs[-1].json["state"], "failed", "the final event says failed", evs[-1].data)
    t.ok("not ready" in (evs[-1].json["error"] or ""), "with the stage's error",
         evs[-1].json["error"])
    check_order(evs, sid, "failed")

    sid = fresh(api, "test-never-ready")
    st = Stream(events_path(sid), "student265")
    first = st.next()
    t.eq(first.json["state"], "starting", "starting")
    t.eq(api.end(sid).status, 200, "ended by the student")
    evs = st.all()
    t.eq(evs[-1].json["state"], "ended", "the final event says ended", [e.data for e in evs])
    t.eq(evs[-1].json["end_reason"], "user", "ended by the user")


@t.test(name="keepalive comments on a quiet stream")
def keepalive():
    api = Api("student266")
    sid = fresh(api, "test-never-ready")
    st = Stream(events_path(sid), "student266")
    st.next()
    # test-never-ready stays in setting_up for its 3 s deadline; the stack's
    # stream_keepalive_s is 2
    st.all()
    t.ok(any(c == "keepalive" for c, _ in st.comments), "a ': keepalive' comment came",
         st.comments)
    api.end_current()



@t.test(name="a stream stays open across a PostgreSQL restart and gets what happens after it")
def across_pg_restart():
    api = Api("student267")
    sid = fresh(api, "test-long-setup")  # stays starting (setup) until ended below
    st = Stream(events_path(sid), "student267")
    first = st.next()
    t.eq(first.json["state"], "starting", "starting")
    r = pg_ctl("restart", "-m", "fast")
    t.require(r.returncode == 0, f"pg restart: {r.stderr}")
    before = int(first.id)
    # the same connection: whatever the session does next (the deadline, or
    # the end below) arrives on it
    api2 = Api("student267")
    wait_until(lambda: api2.get(sid).status == 200, 20, 0.2, "the API answers again")
    api2.end(sid)
    evs = st.all()
    t.ok(evs, "events after the restart came on the open stream")
    t.ok(all(int(e.id) > before for e in evs), "none repeated", [e.id for e in evs])
    t.ok(evs and evs[-1].json["state"] in ("failed", "ended"), "up to the final event",
         [e.data[:80] for e in evs])
    want = [int(i) for (i,) in Db().query(
        "SELECT seq FROM session_events WHERE session_id = %s AND seq > %s ORDER BY seq",
        sid, before)]
    t.eq([int(e.id) for e in evs], want, "every change after the first event, in order")


PER_USER = 4  # stream_max_per_user's default (the stack does not set it)


@t.test(name="at most stream_max_per_user streams per user, counted across processes: one "
             "more is 429 too_many_streams with Retry-After; other users still get streams; a "
             "closed stream's slot is free again")
def per_user_cap():
    api = Api("student270")
    sid = fresh(api, "test-hold")
    bases = [b for _, b in frontends()]
    # alternately through each front end: lighttpd's labvm.fcgi processes and
    # Apache's own count together
    mine = []
    for i in range(PER_USER):
        s = Stream(events_path(sid), "student270", base=bases[i % len(bases)], timeout=30)
        t.require(s.status == 200, f"stream {i + 1}: {s.status} {s.body}")
        s.next()
        mine.append(s)
    for base in bases:
        over = Stream(events_path(sid), "student270", base=base, timeout=30)
        t.eq(over.status, 429, f"one more through {base}: 429", over.body)
        j = json.loads(over.body or "{}")
        t.eq(j.get("error"), "too_many_streams", "too_many_streams", j)
        t.ok(over.headers.get("retry-after", "").isdigit() and j.get("retry_after_s"),
             "with Retry-After", over.headers)
    other = Api("student271")
    osid = fresh(other, "test-hold")
    o = Stream(events_path(osid), "student271", timeout=30)
    t.eq(o.status, 200, "another user still gets a stream", o.body)
    o.close()
    mine.pop().close()
    again = None
    for _ in range(50):
        again = Stream(events_path(sid), "student270", timeout=30)
        if again.status == 200:
            break
        time.sleep(0.2)
    t.eq(again.status, 200, "a closed stream's slot is given back", again.body)
    mine.append(again)
    api.end(sid)
    for s in mine:
        t.eq(s.all()[-1].json["state"], "ended", "each stream got the final event")
        s.close()
    other.end(osid)


@t.test(name="a stream opened with a Last-Event-ID beyond the session's newest event still "
             "gets the final event when the session ends")
def huge_last_event_id():
    api = Api("student272")
    sid = fresh(api, "test-hold")
    sts = []
    newest = int(Db().one("SELECT max(seq) FROM session_events")[0])
    for last in ("999999999999999999", str(newest + 1000)):
        st = Stream(events_path(sid), "student272", last_id=last, timeout=20)
        t.eq(st.status, 200, f"Last-Event-ID {last}: 200", st.body)
        st.settimeout(20)
        sts.append(st)
    t.eq(api.end(sid).status, 200, "the session ends")
    for st in sts:
        # keepalive comments keep a stream that never ends alive: read it
        # aside, and give up on it after a while (an old labvm: forever)
        got = []

        def read(st=st):
            try:
                got.append(st.all())
            except (OSError, ValueError):
                got.append([])
        th = threading.Thread(target=read, daemon=True)
        th.start()
        th.join(30)
        evs = got[0] if got else []
        t.ok(evs and evs[-1].json["state"] == "ended",
             "the stream got the final event and closed", [e.data[:60] for e in evs])
        st.close()
    st = Stream(events_path(sid), "student272", last_id="999999999999999999", timeout=20)
    t.eq(st.status, 204, "after the end, the same id: 204 (EventSource stops)", st.body)


@t.test(name="a stream opened with a huge Last-Event-ID as its session ends (the end "
             "committed after the handler read the session, before it read the newest event) "
             "ends too: 204, or the final event")
def end_while_opening():
    # make chaos's hostile student found it: streams opened over and over
    # with a huge Last-Event-ID while their session ended; one stayed open
    api = Api("student274")
    sid = fresh(api, "test-hold")   # setting_up until it ends: no event of its own
    wait_until(lambda: api.get(sid).json["stage"] == "setting_up", 60, 0.1, "setting_up")
    watch = Db()
    lock = Db()
    lock.conn.autocommit = False
    res = {}

    def opener():
        res["st"] = Stream(events_path(sid), "student274", last_id="999999999999999999",
                           timeout=40)
    th = threading.Thread(target=opener, daemon=True)
    with lock.conn.cursor() as c:
        # the handler's look at the session's newest event waits here, after
        # the router read the session (starting)
        c.execute("LOCK TABLE session_events IN ACCESS EXCLUSIVE MODE")
        th.start()
        wait_until(lambda: watch.one(
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "WHERE c.relname = 'session_events' AND NOT l.granted")[0], 20, 0.05,
            "the stream's handler waiting for session_events")
        # an operator ends the session meanwhile (its event goes in with this lock)
        c.execute("UPDATE sessions SET state = 'ended', end_reason = 'operator', "
                  "ended_at = now() WHERE id = %s", (sid,))
    lock.conn.commit()
    th.join(40)
    st = res.get("st")
    t.require(st is not None, "the stream was answered")
    if st.status == 200:
        got = []

        def read():
            try:
                got.append(st.all())
            except Exception:  # noqa: BLE001 (closed under it below)
                got.append(None)
        rd = threading.Thread(target=read, daemon=True)
        rd.start()
        rd.join(15)   # an old labvm: open for good, keepalives only
        evs = got[0] if got else None
        t.ok(evs is not None and evs and evs[-1].json["state"] == "ended",
             "200: the stream got the final event and closed",
             [e.data[:60] for e in evs] if evs else "still open after 15 s")
    else:
        t.eq(st.status, 204, "or 204: nothing after the final event (EventSource stops)",
             st.body)
    st.close()
    lock.close()
    watch.close()


@t.test(name="open streams hold no FastCGI worker: the API answers beside 3x the workers")
def no_worker_per_stream():
    # 2 processes x 4 threads in the stack: 24 streams would starve them;
    # PER_USER streams per user, so 6 users' labs: the earlier ones gone first
    reset_world(kube, Db())
    streams = []
    sessions = []
    for u in users(280, 24 // PER_USER):
        api = Api(u)
        sid = fresh(api, "test-hold")  # stays setting_up until it is ended
        sessions.append((api, sid))
        for _ in range(PER_USER):
            s = Stream(events_path(sid), u, timeout=20)
            t.require(s.status == 200, f"stream: {s.status} {s.body}")
            s.next()
            streams.append(s)
    for base in [b for _, b in frontends()][:1]:
        a = Api("student269", base=base, timeout=10)
        codes = [a.request("GET", "/api/lessons").status for _ in range(10)]
        t.eq(codes, [200] * 10, "the API answers while the streams are open")
    ends = []

    def drain(s):
        ends.append(s.all()[-1].json["state"])
    ths = [threading.Thread(target=drain, args=(s,)) for s in streams]
    for th in ths:
        th.start()
    for api, sid in sessions:
        api.end(sid)
    for th in ths:
        th.join(30)
    t.eq(sorted(set(ends)), ["ended"], "and each stream got its final event", ends)
    t.eq(len(ends), len(streams), "every one of them")
    for s in streams:
        s.close()


reset_world(kube, Db())
t.done()
