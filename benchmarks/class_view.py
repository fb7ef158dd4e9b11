#!/usr/bin/python3
"""The teacher's class view (issue #29): GET /api/teacher/lessons/{id}/class
for a class of --students students with --grades grades each (of the
lesson's every step), in labvm's own time (the answer's Server-Timing app
duration: parse, the queries, the JSON) and as the teacher's client sees it,
p50/p95; the same with If-None-Match (the page's poll: 304 while nothing
changed); and its cost while the class runs: a student's session reads
(GET /api/sessions/{id}, what every page does once a second) alone and while
a teacher polls the class view back to back (the worst case; the page polls
every 3 s).

    . .demo/env   # or any stack's env file (tests/stack up)
    benchmarks/class_view.py [--students 200] [--grades 10] [--samples 200]

The class is seeded straight into PostgreSQL (ended sessions of today,
users bench-class-NNN, one machine each, grade_steps rows) and deleted at
the end: no lab machine is made for it. One real lab (--user) is the
student whose reads are measured. Target: p95 <= 50 ms in labvm's own
time. The machine is shared: compare figures of one run only."""
import argparse
import base64
import os
import re
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from benchstats import pct  # noqa: E402
from labclient import Api, Db, env  # noqa: E402

PREFIX = "bench-class-"


def seed(db, lesson, nsteps, students, grades):
    envname = env("LABVM_ENVIRONMENT")
    db.query("DELETE FROM sessions WHERE user_name LIKE %s", PREFIX + "%")
    db.query(
        "INSERT INTO sessions (id, user_name, lesson, runtime, environment, state, stage, "
        "created_at, ready_at, ended_at, expires_at, end_reason, running_timeout_s, "
        "ready_timeout_s) "
        "SELECT gen_random_uuid(), %s || lpad(i::text, 3, '0'), %s, 'vm', %s, 'ended', "
        "'ready', now() - interval '1 minute', now(), now(), now() + interval '1 hour', "
        "'user', 150, 300 FROM generate_series(1, %s) i",
        PREFIX, lesson, envname, students)
    db.query(
        "INSERT INTO session_vms (session_id, vm_name, secret_name, agent_token, stage) "
        "SELECT id, 'bench-' || id, 'bench-' || id || '-cloudinit', 'x', 'ready' "
        "FROM sessions WHERE user_name LIKE %s", PREFIX + "%")
    # every grade has every step; a student passes one more step each grade
    db.query(
        "INSERT INTO grade_steps (session_id, graded_at, ord, machine, step, passed) "
        "SELECT s.id, now() - make_interval(secs => 60 - g), k, NULL, 'step ' || k, k <= g "
        "FROM sessions s, generate_series(1, %s) g, generate_series(0, %s - 1) k "
        "WHERE s.user_name LIKE %s", grades, nsteps, PREFIX + "%")
    db.query(
        "INSERT INTO grades (session_id, graded_at, passed, total, results) "
        "SELECT s.id, now() - make_interval(secs => 60 - g), least(g + 1, %s), %s, "
        "(SELECT string_agg(CASE WHEN k <= g THEN '1' ELSE '0' END, '' ORDER BY k) "
        "FROM generate_series(0, %s - 1) k) "
        "FROM sessions s, generate_series(1, %s) g WHERE s.user_name LIKE %s",
        nsteps, nsteps, nsteps, grades, PREFIX + "%")
    db.query("ANALYZE sessions")
    db.query("ANALYZE grade_steps")
    db.query("ANALYZE grades")


def get(url, auth, headers=None):
    h = {"Authorization": auth}
    h.update(headers or {})
    rq = urllib.request.Request(url, headers=h)
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(rq, timeout=30) as r:
            body = r.read()
            status, hdrs = r.status, r.headers
    except urllib.error.HTTPError as e:
        body, status, hdrs = e.read(), e.code, e.headers
    wall = (time.perf_counter() - t0) * 1000
    app = None
    for part in (hdrs.get("Server-Timing") or "").split(","):
        m = re.match(r"\s*app;dur=([\d.]+)", part)
        if m:
            app = float(m.group(1))
    return status, hdrs, body, wall, app


def series(url, auth, n, headers=None, want=200):
    apps, walls, size = [], [], 0
    for _ in range(n):
        st, _, body, wall, app = get(url, auth, headers)
        if st != want:
            sys.exit(f"{url}: {st} (wanted {want}): {body[:200]!r}")
        apps.append(app)
        walls.append(wall)
        size = len(body)
    return apps, walls, size


def fmt(xs):
    return f"p50 {statistics.median(xs):6.2f}  p95 {pct(xs, 95):6.2f}  (n {len(xs)})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default=os.environ.get("LABVM_URL"))
    ap.add_argument("--lesson", default="linux-basics")
    ap.add_argument("--teacher", default="teacher1")
    ap.add_argument("--user", default="student197", help="the real student whose reads count")
    ap.add_argument("--students", type=int, default=200)
    ap.add_argument("--grades", type=int, default=10)
    ap.add_argument("--samples", type=int, default=200)
    a = ap.parse_args()
    pw = os.environ.get("LABVM_PASSWORD", "labvm")
    tauth = "Basic " + base64.b64encode(f"{a.teacher}:{pw}".encode()).decode()
    sauth = "Basic " + base64.b64encode(f"{a.user}:{pw}".encode()).decode()
    db = Db()
    lessons = Api(a.teacher, base=a.url).request("GET", "/api/teacher/lessons")
    if lessons.status != 200:
        sys.exit(f"{a.teacher} teaches nothing here: {lessons}")
    row = next((x for x in lessons.json["lessons"] if x["id"] == a.lesson), None)
    if not row:
        sys.exit(f"{a.teacher} does not teach {a.lesson}")
    nsteps = row["steps"]
    student = Api(a.user, base=a.url)
    student.end_current()
    s = student.start(a.lesson).json
    sid = student.wait_state(s["id"], timeout=180)["id"]
    seed(db, a.lesson, nsteps, a.students, a.grades)
    url = f"{a.url}/api/teacher/lessons/{a.lesson}/class"
    try:
        series(url, tauth, 10)  # warm-up
        apps, walls, size = series(url, tauth, a.samples)
        _, hdrs, _, _, _ = get(url, tauth)
        tag = hdrs.get("ETag")
        apps304, walls304, _ = series(url, tauth, a.samples, {"If-None-Match": tag}, want=304)

        surl = f"{a.url}/api/sessions/{sid}"
        series(surl, sauth, 10)
        alone_app, alone_wall, _ = series(surl, sauth, a.samples)
        stop = threading.Event()
        count = [0]

        def teacher_loop():
            while not stop.is_set():
                get(url, tauth)
                count[0] += 1
        th = threading.Thread(target=teacher_loop, daemon=True)
        th.start()
        t0 = time.monotonic()
        busy_app, busy_wall, _ = series(surl, sauth, a.samples)
        secs = time.monotonic() - t0
        stop.set()
        th.join(30)
    finally:
        db.query("DELETE FROM sessions WHERE user_name LIKE %s", PREFIX + "%")
        student.end(sid)
    print(f"class view: {a.students} students x {a.grades} grades x {nsteps} steps "
          f"({a.students * a.grades} grades, {a.students * a.grades * nsteps} step rows), answer {size / 1024:.0f} KiB")
    print(f"  200, labvm's own time (Server-Timing app, ms): {fmt(apps)}")
    print(f"  200, the teacher's client (ms):                {fmt(walls)}")
    print(f"  304 (If-None-Match), labvm's own time (ms):    {fmt(apps304)}")
    print(f"  304 (If-None-Match), the client (ms):          {fmt(walls304)}")
    print(f"  target p95 <= 50 ms (labvm's own, 200): "
          f"{'met' if pct(apps, 95) <= 50 else 'NOT met'}")
    print("cost while the class runs: a student's session read (ms, labvm's own / client)")
    print(f"  alone:                           {fmt(alone_app)} / {fmt(alone_wall)}")
    print(f"  a teacher polling back to back:  {fmt(busy_app)} / {fmt(busy_wall)} "
          f"({count[0] / secs:.1f} class views/s)")
    share = statistics.median(apps) / 3000 * 100
    print(f"  the page's poll (every 3 s, 200 answers): {share:.2f} % of one labvm.fcgi "
          f"worker per teacher; 304 answers cost the same query (the ETag is of the body)")


if __name__ == "__main__":
    main()
