#!/usr/bin/python3
"""The teacher's room (issue #29): who teaches, the authorization matrix
through both front ends (404, never 403, outside the lessons one teaches),
the class view (grades, ticks, the line, ETag/304), grades.csv (RFC 4180,
read back with Python's csv module), the grade history, teacher tickets
(view drops every keystroke, control types; watchers in the student's
session JSON and its events; a teacher's ticket does not open for a
student), extend (bounded, allowed while students wait), reset (the seat is
kept with a full class and a line), end (end_reason teacher), and an audit
row for every action.

Users: student371..student385; teacher1 (every lesson, labvm.conf
teachers), teacher2 (linux-basics, the lesson's "teachers"), teacher3
(test-teacher only), operator (every lesson)."""
import asyncio
import csv
import io
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from labconsole import Console  # noqa: E402
from labtest import Api, Db, Kube, env, frontends, reset_world, wait_until  # noqa: E402
from tap import T  # noqa: E402

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
# this suite's users start the day afresh (a kept stack may hold their rows
# of an earlier run: the class counts the day's sessions)
SUITE_USERS = [f"student{i}" for i in range(371, 386)]
db.query("DELETE FROM teacher_audit WHERE student = ANY(%s)", SUITE_USERS)
db.query("DELETE FROM session_queue WHERE user_name = ANY(%s)", SUITE_USERS)
db.query("DELETE FROM sessions WHERE user_name = ANY(%s)", SUITE_USERS)
CAPACITY = next(int(v) for k, _, v in (line.partition("=") for line in open(env("LABVM_CONF")))
                if k.strip() == "vm_capacity")
CONSOLE_STATS = env("LABVM_CONSOLE_URL").replace("ws://", "http://") + "/console-stats"
loop = asyncio.new_event_loop()


def run(coro):
    return loop.run_until_complete(coro)


def ready(user, lesson):
    api = Api(user)
    api.end_current()
    r = api.start(lesson)
    t.require(r.status == 201, f"start {lesson} for {user}: {r}")
    s = api.wait_state(r.json["id"], ("ready", "failed"), 120)
    t.require(s["state"] == "ready", f"{user}'s {lesson} ready: {s.get('error')}")
    return api, s


def console_stats():
    import urllib.request
    with urllib.request.urlopen(CONSOLE_STATS, timeout=10) as r:
        return json.loads(r.read())


# the labs the suite works on: a linux-basics lab (teacher2's lesson) and a
# test-teacher lab (not teacher2's)
mine_api, mine = ready("student371", "linux-basics")
other_api, other = ready("student372", "test-teacher")


def teacher_routes(sid, lesson):
    """Every teacher route, as (method, path, body)."""
    return [
        ("GET", "/api/teacher/lessons", None),
        ("GET", f"/api/teacher/lessons/{lesson}/class", None),
        ("GET", f"/api/teacher/lessons/{lesson}/grades.csv", None),
        ("GET", f"/api/teacher/audit?lesson={lesson}", None),
        ("POST", f"/api/teacher/sessions/{sid}/console-ticket", {"mode": "view"}),
        ("POST", f"/api/teacher/sessions/{sid}/console-ticket", {"mode": "control"}),
        ("POST", f"/api/teacher/sessions/{sid}/extend", {"minutes": 5}),
        ("POST", f"/api/teacher/sessions/{sid}/reset", {}),
        ("DELETE", f"/api/teacher/sessions/{sid}", None),
    ]


@t.test(name="who teaches: labvm.conf teachers, the lesson's teachers, operators; others 404")
def who_teaches():
    ids = lambda r: sorted(x["id"] for x in r.json["lessons"])  # noqa: E731
    every = sorted(x["id"] for x in Api("student373").lessons().json["lessons"])
    r1 = Api("teacher1").request("GET", "/api/teacher/lessons")
    t.eq(r1.status, 200, "teacher1: 200")
    t.eq(ids(r1), every, "teacher1 (labvm.conf teachers) teaches every lesson")
    r2 = Api("teacher2").request("GET", "/api/teacher/lessons")
    t.eq(ids(r2), ["linux-basics"], "teacher2 teaches linux-basics only (its lesson's teachers)")
    row = r2.json["lessons"][0]
    t.ok(row["active"] >= 1 and row["ready"] >= 1, "counts: the ready lab is counted", row)
    t.eq(ids(Api("teacher3").request("GET", "/api/teacher/lessons")), ["test-teacher"],
         "teacher3 teaches test-teacher only")
    t.eq(ids(Api("operator").request("GET", "/api/teacher/lessons")), every,
         "an operator teaches every lesson")
    r = Api("student373").request("GET", "/api/teacher/lessons")
    t.eq(r.status, 404, "a student: 404", r)
    # REMOTE_USER only: a header naming a teacher changes nothing
    r = Api("student373").request("GET", "/api/teacher/lessons",
                                  headers={"Remote-User": "teacher1", "X-Remote-User": "teacher1"})
    t.eq(r.status, 404, "a student with a Remote-User header naming a teacher: still 404", r)


@t.test(name="authorization matrix, both front ends: a student 404 on every teacher route, "
             "teacher2 404 on another lesson's class, sessions, tickets, CSV and audit")
def matrix():
    before = db.one("SELECT state, expires_at::text FROM sessions WHERE id = %s", other["id"])
    for fe, base in frontends():
        student = Api("student373", base=base)
        t2 = Api("teacher2", base=base)
        for method, path, body in teacher_routes(mine["id"], "linux-basics"):
            r = student.request(method, path, body)
            t.eq(r.status, 404, f"{fe}: student {method} {path}", r)
            t.ok(r.status != 403, f"{fe}: never 403")
        # the owner of a session is no teacher of it either
        owner = Api("student371", base=base)
        for method, path, body in teacher_routes(mine["id"], "linux-basics")[4:]:
            r = owner.request(method, path, body)
            t.eq(r.status, 404, f"{fe}: the owner on {method} {path}", r)
        for method, path, body in teacher_routes(other["id"], "test-teacher")[1:]:
            r = t2.request(method, path, body)
            t.eq(r.status, 404, f"{fe}: teacher2 {method} {path}", r)
        # the same answer as a session or lesson that does not exist
        t.eq(t2.request("GET", "/api/teacher/lessons/no-such-lesson/class").status, 404,
             f"{fe}: a lesson that does not exist: 404 too")
        t.eq(t2.request("POST", "/api/teacher/sessions/00000000-0000-4000-8000-000000000000"
                        "/extend", {"minutes": 1}).status, 404,
             f"{fe}: a session that does not exist: 404 too")
        # positive control: teacher2 on its own lesson
        r = t2.request("GET", "/api/teacher/lessons/linux-basics/class")
        t.eq(r.status, 200, f"{fe}: teacher2 on linux-basics' class: 200", r)
    after = db.one("SELECT state, expires_at::text FROM sessions WHERE id = %s", other["id"])
    t.eq(after, before, "the other lesson's session is untouched (state, expires_at)")
    n = db.one("SELECT count(*) FROM teacher_audit WHERE session_id = %s", other["id"])[0]
    t.eq(n, 0, "no audit row for a refused action")


@t.test(name="grade history: every grade kept; the student's own, the class's, 404 for others")
def grade_history():
    other_api.request("POST", f"/api/sessions/{other['id']}/grade", {})
    kube.guest_exec(other["vms"][0]["name"], "touch /root/flag")
    g = other_api.request("POST", f"/api/sessions/{other['id']}/grade", {})
    t.eq(g.status, 200, "second grade", g)
    h = other_api.request("GET", f"/api/sessions/{other['id']}/grades")
    t.eq(h.status, 200, "the student's history", h)
    grades = h.json["grades"]
    t.eq(len(grades), 2, "both grades are kept", grades)
    t.eq([x["passed"] for x in grades], [1, 2], "first 1/3, then 2/3 (the flag)", grades)
    t.eq([s["name"] for s in h.json["steps"]],
         ["passes, always", 'the "flag" file, exists', "=a formula-looking name"],
         "the lesson's steps, in order")
    t.eq([x["results"] for x in grades], ["100", "110"], "each grade's result per step")
    t.eq([x["total"] for x in grades], [3, 3], "each grade's total")
    t.ok(all(x["at"].endswith("Z") for x in grades) and grades[0]["at"] < grades[1]["at"],
         "each grade's time, oldest first", grades)
    t.eq(Api("student373").request("GET", f"/api/sessions/{other['id']}/grades").status, 404,
         "another student: 404")
    c = Api("teacher3").request("GET", "/api/teacher/lessons/test-teacher/class")
    t.eq(c.status, 200, "teacher3's class", c)
    row = next(s for s in c.json["students"] if s["user"] == "student372")
    t.eq(row["session"]["id"], other["id"], "the row is the student's session")
    for k in ("state", "stage", "created_at", "ready_at", "expires_at", "idle_ends_at",
              "last_activity_at", "watchers", "machines"):
        t.ok(k in row["session"], f"the row's session has {k}", row["session"])
    t.eq(row["session"]["ready_at"], other_api.get(other["id"]).json["ready_at"],
         "its ready_at is the session's")
    t.eq(len(row["grades"]), 2, "the class row has every grade", row)
    t.eq([s["passed"] for s in row["steps"]], [True, True, False], "ticks: the latest result")
    t.eq(row["progress"]["passed"], 2, "progress: 2 of 3")
    t.eq(row["progress"]["total"], 3, "progress: of 3")
    n = db.one("SELECT count(*) FROM grade_steps WHERE session_id = %s", other["id"])[0]
    t.eq(n, 6, "grade_steps: 2 grades x 3 steps")
    n = db.one("SELECT count(*) FROM grades WHERE session_id = %s", other["id"])[0]
    t.eq(n, 2, "grades: 2 rows")


@t.test(name="class view: ETag, 304 while nothing changed, 200 after a grade")
def class_etag():
    t3 = Api("teacher3")
    a = t3.request("GET", "/api/teacher/lessons/test-teacher/class")
    tag = a.header("ETag")
    t.ok(tag and tag.startswith('"'), "an ETag", a.headers)
    b = t3.request("GET", "/api/teacher/lessons/test-teacher/class",
                   headers={"If-None-Match": tag})
    t.eq(b.status, 304, "304 with If-None-Match while nothing changed", b)
    t.eq(b.body, "", "no body")
    other_api.request("POST", f"/api/sessions/{other['id']}/grade", {})
    c = t3.request("GET", "/api/teacher/lessons/test-teacher/class",
                   headers={"If-None-Match": tag})
    t.eq(c.status, 200, "200 after a grade", c)
    t.ok(c.header("ETag") != tag, "a new ETag")


@t.test(name="grades.csv: RFC 4180 (CRLF, quotes doubled), parsed by Python's csv module")
def grades_csv():
    r = Api("teacher3").request("GET", "/api/teacher/lessons/test-teacher/grades.csv")
    t.eq(r.status, 200, "200", r)
    t.ok((r.header("Content-Type") or "").startswith("text/csv"), "text/csv", r.headers)
    raw = r.body
    t.ok(raw.endswith("\r\n") and "\n" not in raw.replace("\r\n", ""), "CRLF line ends")
    rows = list(csv.reader(io.StringIO(raw, newline="")))
    t.eq(rows[0], ["user", "session", "machine", "step", "latest", "attempts",
                   "first_passed_at"], "the header")
    mine_rows = [x for x in rows[1:] if x[0] == "student372"]
    t.eq(len(mine_rows), 3, "one row per grader step", mine_rows)
    by = {x[3]: x for x in mine_rows}
    t.eq(sorted(by), sorted(['passes, always', 'the "flag" file, exists',
                             "=a formula-looking name"]),
         "names with commas and quotes come back as they are")
    t.eq(by["passes, always"][4], "passed", "latest passed")
    t.eq(by["passes, always"][5], "3", "attempts: three grades")
    t.ok(by["passes, always"][6].endswith("Z"), "first passed at, RFC 3339")
    t.eq(by["=a formula-looking name"][4], "failed", "latest failed")
    t.eq(by["=a formula-looking name"][6], "", "never passed: empty")
    t.eq(by['the "flag" file, exists'][5], "3", "attempts")
    t.ok('"the ""flag"" file, exists"' in raw, "a quote is doubled inside a quoted field")


@t.test(name="a view ticket's keystrokes never reach the guest; control's do; watchers shown")
def view_and_control():
    t2 = Api("teacher2")
    vm = mine["vms"][0]["name"]
    sid = mine["id"]
    seq0 = db.one("SELECT coalesce(max(seq), 0) FROM session_events WHERE session_id = %s",
                  sid)[0]
    dropped0 = console_stats()["view_dropped"]

    async def go():
        tk = t2.request("POST", f"/api/teacher/sessions/{sid}/console-ticket",
                        {"mode": "view"})
        t.eq(tk.status, 200, "a view ticket", tk)
        t.eq(tk.json["mode"], "view", "its mode")
        v = await Console.open(t2.base, tk.json["url"], "teacher2")
        t.ok(await v.opened(20), "the view console opens", v.ctl)
        got = wait_until(lambda: [(w["user"], w["mode"])
                                  for w in mine_api.get(sid).json["watchers"]], 10,
                         what="a watcher in the session JSON")
        t.eq(got, [("teacher2", "view")], "the student's session JSON: teacher2 watches (view)")
        # the student's console beside it: the shell is up and echoes
        sk = mine_api.ticket(sid)
        c = await Console.open(mine_api.base, sk.json["url"], "student371")
        t.ok(await c.opened(20), "the student's console opens beside it")
        await c.send(b"echo student-$((40+2))\r")
        t.ok(await v.until(lambda x: b"student-42" in x.out, 10),
             "the viewer sees the student's output")
        # the viewer types; then the student: the shell reads its input in
        # order, so had the viewer's bytes arrived, they ran before this echo
        # (no ^C after it: the tty flushes its pending input on one)
        await v.send(b"touch /root/typed-by-viewer\r")
        await asyncio.sleep(0.5)
        await c.send(b"echo after-$((1+1))\r")
        t.ok(await v.until(lambda x: b"after-2" in x.out, 10), "the student's next line ran")
        seen = kube.guest_exec(vm, "ls /root").get("stdout", "")
        t.ok("typed-by-viewer" not in seen, "view: the keystrokes did not reach the guest", seen)
        t.ok(console_stats()["view_dropped"] >= dropped0 + 28,
             "the bridge counts the dropped bytes", console_stats()["view_dropped"] - dropped0)
        await c.close()
        await v.close()
        # take over: a control ticket types
        tk = t2.request("POST", f"/api/teacher/sessions/{sid}/console-ticket",
                        {"mode": "control"})
        t.eq(tk.status, 200, "a control ticket", tk)
        k = await Console.open(t2.base, tk.json["url"], "teacher2")
        t.ok(await k.opened(20), "the control console opens")
        await k.send(b"touch /root/typed-by-teacher\r")
        t.ok(await k.until(lambda x: b"typed-by-teacher" in x.out, 10), "the echo")
        wait_until(lambda: [(w["user"], w["mode"]) for w in mine_api.get(sid).json["watchers"]]
                   == [("teacher2", "control")], 10, what="watchers: teacher2 (control)")
        await asyncio.sleep(0.5)
        await k.close()

    run(go())
    out = kube.guest_exec(vm, "ls /root")
    t.ok("typed-by-teacher" in out.get("stdout", ""), "control: the file exists", out)
    t.ok("typed-by-viewer" not in out.get("stdout", ""), "view: the file does not", out)
    wait_until(lambda: mine_api.get(sid).json["watchers"] == [], 10,
               what="no watchers once the consoles closed")
    evs = db.query("SELECT snapshot->'watchers' FROM session_events WHERE session_id = %s "
                   "AND seq > %s ORDER BY seq", sid, seq0)
    modes = [[w["mode"] for w in e[0]] for e in evs]
    t.ok(["view"] in modes and ["control"] in modes and [] in modes,
         "the session's events carry each change of watchers", modes)


@t.test(name="a teacher's ticket does not open for a student (4403), nor teacher3's elsewhere")
def teacher_ticket_not_for_student():
    async def go():
        tk = Api("teacher2").request("POST", f"/api/teacher/sessions/{mine['id']}"
                                     "/console-ticket", {"mode": "control"})
        t.eq(tk.status, 200, "ticket", tk)
        for fe, base in frontends():
            # the owner of the session itself, with the teacher's ticket
            c = await Console.open(base, tk.json["url"], "student371")
            code, reason = await c.closed(20)
            t.eq(code, 4403, f"{fe}: refused for the student", (code, reason))
            t.eq(reason, "ticket not for this user", f"{fe}: the reason")
    run(go())


@t.test(name="extend: bounded by teacher_extend_max_minutes, allowed while students wait")
def extend():
    t2 = Api("teacher2")
    sid = mine["id"]
    e0 = mine_api.get(sid).json["expires_at"]
    for bad in (0, 61, 1.5, "5", None):
        r = t2.request("POST", f"/api/teacher/sessions/{sid}/extend", {"minutes": bad})
        t.eq(r.status, 400, f"minutes {bad!r}: 400", r)
    t.eq(mine_api.get(sid).json["expires_at"], e0, "nothing moved")
    # a student waiting in line (the one a student's extend would yield to)
    db.query("INSERT INTO session_queue (id, user_name, lesson, environment, pool, seats) "
             "VALUES (gen_random_uuid(), 'student385', 'linux-basics', %s, 'vm', 1)",
             env("LABVM_ENVIRONMENT"))
    try:
        r = t2.request("POST", f"/api/teacher/sessions/{sid}/extend", {"minutes": 10})
        t.eq(r.status, 200, "extend 10 minutes with a line waiting", r)
        d = db.one("SELECT extract(epoch FROM %s::timestamptz - %s::timestamptz)",
                   r.json["expires_at"], e0)[0]
        t.eq(round(float(d)), 600, "expires_at moved by 10 minutes")
    finally:
        db.query("UPDATE session_queue SET state = 'left', ended_at = now() "
                 "WHERE user_name = 'student385' AND state = 'waiting'")


@t.test(name="reset keeps the seat: the class full, a student waiting, nobody takes it")
def reset_keeps_seat():
    # fill the class: the labs of this suite plus more, up to the capacity
    in_use = len(kube.lab_vms())
    fill = []
    for i in range(CAPACITY - in_use):
        a = Api(f"student{374 + i}")
        a.end_current()
        r = a.start("test-teacher")
        t.require(r.status == 201, f"fill {i}: {r}")
        fill.append((a, r.json["id"]))
    t.eq(len(kube.lab_vms()), CAPACITY, "the class is full")
    waiting = Api("student384")
    waiting.end_current()
    q = waiting.request("POST", "/api/sessions", {"lesson": "linux-basics", "queue": True})
    t.eq(q.status, 202, "student384 joins the line", q)
    old = mine["id"]
    r = Api("teacher1").request("POST", f"/api/teacher/sessions/{old}/reset", {})
    t.eq(r.status, 201, "the reset: 201 and a fresh session", r)
    new = r.json["id"]
    t.ok(new != old, "a new session id")
    t.eq(r.json["user"], "student371", "the same student")
    t.eq(r.json["lesson"], "linux-basics", "the same lesson")
    o = mine_api.get(old).json
    t.eq((o["state"], o["end_reason"]), ("ended", "reset"), "the old one ended (reset)")
    cur = mine_api.current()
    t.eq(cur.json.get("id"), new, "the student's current session is the new one", cur)
    # the line polls meanwhile: its head never gets the seat
    for _ in range(10):
        w = waiting.current()
        t.eq(w.json.get("state"), "queued", "student384 still waits", w)
        s = mine_api.get(new).json
        if s["state"] == "ready":
            break
        time.sleep(0.5)
    s = mine_api.wait_state(new, ("ready", "failed"), 120)
    t.eq(s["state"], "ready", "the fresh session gets ready", s.get("error"))
    wait_until(lambda: not kube.lab_vms(f"labvm.io/session-id={old}"), 60,
               what="the old session's VM is gone")
    t.eq(waiting.current().json.get("state"), "queued", "after the old VM is gone: still queued")
    t.eq(len([v for v in kube.lab_vms()]), CAPACITY, "still exactly the capacity in use")
    # positive control: a seat freed by an end goes to the line
    a, sid = fill[0]
    a.end(sid)
    got = wait_until(lambda: waiting.current().json.get("state") in ("starting", "ready"), 60,
                     what="student384 admitted once a seat frees")
    t.ok(got, "the line moves on an end")
    mine["id"] = new
    for a, sid in fill[1:]:
        a.end(sid)
    waiting.end_current()


@t.test(name="end: end_reason teacher; idempotent; the audit has a row for every action")
def end_and_audit():
    t2 = Api("teacher2")
    sid = mine["id"]
    r = t2.request("DELETE", f"/api/teacher/sessions/{sid}")
    t.eq(r.status, 200, "end", r)
    t.eq((r.json["state"], r.json["end_reason"]), ("ended", "teacher"), "ended by the teacher")
    r = t2.request("DELETE", f"/api/teacher/sessions/{sid}")
    t.eq(r.status, 200, "again: 200 (idempotent)")
    a = t2.request("GET", "/api/teacher/audit?lesson=linux-basics")
    t.eq(a.status, 200, "the audit", a)
    acts = [(x["teacher"], x["action"], x["student"]) for x in a.json["actions"]
            if x["student"] == "student371"]
    for want in [("teacher2", "watch", "student371"), ("teacher2", "take_over", "student371"),
                 ("teacher2", "extend", "student371"), ("teacher1", "reset", "student371"),
                 ("teacher2", "end", "student371")]:
        t.ok(want in acts, f"audit: {want[1]} by {want[0]}", acts)
    t.eq(sum(1 for x in acts if x[1] == "end"), 1, "one end row (the second end did nothing)")
    reset = next(x for x in a.json["actions"] if x["action"] == "reset")
    t.ok(reset["detail"].get("new_session"), "the reset names the new session", reset)
    ext = next(x for x in a.json["actions"] if x["action"] == "extend")
    t.eq(ext["detail"].get("minutes"), 10, "the extend's minutes", ext)
    t.eq(Api("teacher2").request("GET", "/api/teacher/audit").status, 404,
         "no lesson named: 404")
    other_api.end(other["id"])


t.done()
