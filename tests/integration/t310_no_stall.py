#!/usr/bin/python3
"""No student stalls labvm for everyone else (issue #13): a frozen agent
(SIGSTOP) and a student pressing Grade over and over hold one worker for one
bounded deadline, while other students' polls and starts are served; at most
one readiness probe per session is in flight; a per-user start rate limit."""
import json
import os
import re
import signal
import threading
import time

from agentrec import records, replace_agent
from fcgiclient import LabFcgi
from guestproc import listener_pid
from labtest import Api, Db, Kube, ready_lab, reset_world, vm_of, wait_until
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)


def agent_pid(sid):
    """Host PID of the guest agent listening on the session's VMI address."""
    ip = db.one("SELECT ip FROM session_vms WHERE session_id = %s", sid)[0]
    return wait_until(lambda: listener_pid(ip), 20, 0.1, f"the agent listening on {ip}:8899")


def agent_ms(resp):
    m = re.search(r"agent;dur=([0-9.]+)", resp.header("Server-Timing") or "")
    return float(m.group(1)) if m else 0.0


def setting_up(api, lesson="test-hold"):
    s = api.start(lesson).json
    wait_until(lambda: api.get(s["id"]).json["stage"] == "setting_up", 60, 0.1, "setting_up")
    wait_until(lambda: db.one("SELECT ip FROM session_vms WHERE session_id = %s",
                              s["id"])[0], 10, 0.1, "the VMI address recorded")
    return s


def go(s):
    """Let test-hold's setup finish."""
    kube.guest_exec(s["vms"][0]["name"], "touch /root/go")


@t.test(name="a frozen agent: concurrent polls of its session make one probe, the others "
             "answer from the last known state")
def probe_single_flight():
    api = Api("student311")
    s = setting_up(api)
    pid = agent_pid(s["id"])
    os.kill(pid, signal.SIGSTOP)
    try:
        res = [None] * 6
        def poll(i):
            res[i] = Api("student311").get(s["id"])
        ths = [threading.Thread(target=poll, args=(i,)) for i in range(len(res))]
        for th in ths:
            th.start()
        for th in ths:
            th.join()
    finally:
        os.kill(pid, signal.SIGCONT)
    t.ok(all(r.status == 200 for r in res), "every poll answered 200", [r.status for r in res])
    probes = [agent_ms(r) for r in res]
    # one probe at a time (each waits 1.5 s for the frozen agent): of six polls
    # sent at once, the first probes and the others answer at once; a poll the
    # loaded machine delivers after that probe ended may probe again
    n = sum(1 for ms in probes if ms > 0)
    t.ok(1 <= n <= 2 and len(probes) - n >= 4,
         "one probe at a time: the other polls did not probe", probes)
    t.ok(all(r.json["stage"] == "setting_up" for r in res), "the others said setting_up")
    go(s)
    api.wait_state(s["id"], "ready", 30)
    api.end(s["id"])


@t.test(name="a frozen agent and Grade pressed 12 times: one grade (bounded deadline, 502), "
             "11 answered 409 grade_running at once; other students are served meanwhile")
def frozen_grade():
    api = Api("student312")
    s = setting_up(api)
    go(s)
    api.wait_state(s["id"], "ready", 30)
    g = api.grade(s["id"])
    t.eq(g.status, 200, "a grade with a live agent works", g)
    pid = agent_pid(s["id"])
    os.kill(pid, signal.SIGSTOP)
    grades, done = [None] * 12, {}
    others = {}
    try:
        def grade(i):
            grades[i] = Api("student312", timeout=120).grade(s["id"])
            done[i] = time.monotonic()
        ths = [threading.Thread(target=grade, args=(i,)) for i in range(len(grades))]
        t0 = time.monotonic()
        for th in ths:
            th.start()
        time.sleep(0.5)
        # other students: a status poll, a start, its poll, an end
        o1, o2 = Api("student313"), Api("student314")
        a = time.monotonic()
        others["current"] = (o1.current(), time.monotonic() - a, time.monotonic())
        a = time.monotonic()
        st = o2.start("linux-basics")
        others["start"] = (st, time.monotonic() - a, time.monotonic())
        if st.status == 201:
            a = time.monotonic()
            others["get"] = (o2.get(st.json["id"]), time.monotonic() - a, time.monotonic())
        for th in ths:
            th.join(60)
    finally:
        os.kill(pid, signal.SIGCONT)
    codes = sorted(g.status for g in grades if g is not None)
    t.eq(len(codes), 12, "every grade was answered")
    busy = [g for g in grades if g is not None and g.status == 409]
    t.eq(len(busy), 11, "11 answered 409", codes)
    t.ok(all(g.json.get("error") == "grade_running" and g.header("Retry-After") for g in busy),
         "409 grade_running with Retry-After")
    slow = [i for i, g in enumerate(grades) if g is not None and g.status != 409]
    t.eq([grades[i].status for i in slow], [502], "the one real grade: 502 agent_unreachable")
    first_done = min(done[i] for i in slow) if slow else time.monotonic()
    t.diag(f"the frozen grade took {first_done - t0:.1f} s (the lesson's deadline is 6 s)")
    for k, (r, dt, at) in others.items():
        t.diag(f"other student's {k}: {r.status} in {dt * 1000:.0f} ms")
    t.eq(others["current"][0].status, 404, "another student's poll answered (no session)")
    t.eq(others["start"][0].status, 201, "another student's start answered 201",
         others["start"][0])
    t.ok(all(at < first_done for _, _, at in others.values()),
         "... both before the frozen grade's deadline ran out")
    g = api.grade(s["id"])
    t.eq(g.status, 200, "after the agent thaws, grading works again", g)
    if "get" in others:
        o2.end(others["start"][0].json["id"])
    api.end(s["id"])


@t.test(name="a frozen agent and a tty-size storm: other students are answered while it "
             "runs, one request at a time reaches the agent, the last size asked for is the "
             "last one sent")
def tty_size_storm():
    api, s = ready_lab("student317")
    sid, vm = s["id"], vm_of(s)
    ip = db.one("SELECT ip FROM session_vms WHERE session_id = %s", sid)[0]
    # the student's agent: a listener that accepts, reads, and never answers
    replace_agent(kube, vm, ip, "silent")
    path = f"/api/sessions/{sid}/tty-size"
    stop = threading.Event()
    answers, lock = [], threading.Lock()
    # the stack has 2 x 4 workers: 12 clients asking over and over would hold
    # all of them if each request waited for the agent
    def storm(i):
        a = Api("student317", timeout=120)
        n = 0
        while not stop.is_set() and n < 400:
            n += 1
            r = a.request("POST", path, {"cols": 20 + i, "rows": 10 + n % 50})
            with lock:
                answers.append((r.status, r.json or {}))
    ths = [threading.Thread(target=storm, args=(i,)) for i in range(12)]
    for th in ths:
        th.start()
    # the storm is at the agent before the others ask
    wait_until(lambda: any(e["ev"] == "req" for e in records(kube, vm)), 20, 0.1,
               "the first tty-size at the frozen agent")
    others = []

    def agent_answers():
        with lock:
            return sum(1 for st, _ in answers if st not in (200, 202))
    try:
        for u in ("student318", "student319", "student320"):
            o = Api(u, timeout=120)
            for _ in range(3):
                r = o.current()
                # how many storm requests had come back from the agent (502)
                # when this one was answered, and whether the storm still ran
                others.append((r.status, agent_answers(), not stop.is_set()))
    finally:
        stop.set()
        for th in ths:
            th.join(150)
    t.eq([st for st, _, _ in others], [404] * 9, "every other student's status GET answered")
    t.ok(all(running for _, _, running in others), "... while the storm ran")
    t.eq([n for _, n, _ in others], [0] * 9,
         "... before any storm request came back from the agent (none held a worker)", others)
    codes = sorted({st for st, _ in answers})
    t.ok(set(codes) <= {202, 502}, "the storm's answers: 202 (recorded) or 502", codes)
    pend = [j for st, j in answers if st == 202]
    t.ok(len(pend) > len(answers) // 2 and all(j.get("pending") is True for j in pend),
         f"most answered 202 pending at once ({len(pend)} of {len(answers)})")
    # the last word: one more size, asked after the storm
    last = api.request("POST", path, {"cols": 111, "rows": 37})
    t.ok(last.status in (202, 502), "the last request answered", last)
    wait_until(lambda: db.one("SELECT tty_until IS NULL FROM sessions WHERE id = %s", sid)[0],
               60, 0.1, "no tty-size in flight")
    recs = records(kube, vm)
    sent = [json.loads(e["body"]) for e in recs if e["ev"] == "req"]
    t.diag(f"storm: {len(answers)} requests ({len(pend)} answered 202), {len(sent)} sent to "
           f"the frozen agent; 9 other students' GETs answered meanwhile")
    t.eq(sent[-1], {"cols": 111, "rows": 37}, "the last size asked for was the last one sent")
    t.eq(max(e["conc"] for e in recs if e["ev"] == "open"), 1,
         "one request at a time at the agent")
    t.ok(len(sent) < len(answers) // 4,
         f"sizes coalesced: {len(sent)} sent for {len(answers) + 1} asked")
    api.end(sid)


@t.test(name="two frozen agents hold at most half of a labvm.fcgi's workers: a third "
             "student's grade through the same process is 503 agent_busy, a fourth student's "
             "poll is answered, and once they end the third grades again")
def agent_slots():
    # Apache runs one labvm.fcgi of fcgi_threads = 4: two agent slots
    base = os.environ["LABVM_APACHE_URL"]
    users = ("student321", "student322", "student323")
    labs = []
    for u in users:
        a = Api(u, base=base, timeout=120)
        s = setting_up(a)
        go(s)
        a.wait_state(s["id"], "ready", 30)
        labs.append((a, s, agent_pid(s["id"])))
    for _, _, pid in labs:
        os.kill(pid, signal.SIGSTOP)
    answers, at = {}, {}
    try:
        def grade(i):
            a, s, _ = labs[i]
            answers[i] = Api(users[i], base=base, timeout=120).grade(s["id"])
            at[i] = time.monotonic()
        ths = [threading.Thread(target=grade, args=(i,)) for i in (0, 1)]
        for th in ths:
            th.start()
        # both grades hold their leases: they are at their agents
        wait_until(lambda: all(db.one("SELECT grade_until IS NOT NULL FROM sessions "
                                      "WHERE id = %s", s["id"])[0] for _, s, _ in labs[:2]),
                   10, 0.05, "two grades in flight")
        third = Api(users[2], base=base, timeout=120).grade(labs[2][1]["id"])
        third_at = time.monotonic()
        poll = Api("student324", base=base, timeout=120).current()
        poll_at = time.monotonic()
        for th in ths:
            th.join(60)
    finally:
        for _, _, pid in labs:
            os.kill(pid, signal.SIGCONT)
    t.eq((third.status, (third.json or {}).get("error")), (503, "agent_busy"),
         "the third grade: 503 agent_busy", third)
    t.ok(third.header("Retry-After"), "with Retry-After", third)
    t.eq(poll.status, 404, "another student's poll answered (no session)", poll)
    t.ok(all(third_at < at[i] and poll_at < at[i] for i in (0, 1)),
         "... both while the two frozen grades were still in flight", (third_at, poll_at, at))
    t.eq(sorted(answers[i].status for i in (0, 1)), [502, 502],
         "the frozen grades: 502 at their deadline")
    g = labs[2][0].grade(labs[2][1]["id"])
    t.eq(g.status, 200, "the slots are free again: the third student grades", g)
    for a, s, _ in labs:
        a.end(s["id"])


@t.test(name="start rate limit: the third start within the window is 429 too_many_starts "
             "with Retry-After; nothing is created; another user is not limited")
def rate_limit():
    with LabFcgi({"start_rate_max": "2", "start_rate_window_s": "120"}) as f:
        user = "student315"
        for u in (user, "student316"):  # an earlier run's starts
            db.query("DELETE FROM sessions WHERE user_name = %s AND state IN "
                     "('ended', 'failed')", u)
        ids = []
        for i in range(2):
            r = f.request("POST", "/api/sessions", user, {"lesson": "linux-basics"})
            t.eq(r.status, 201, f"start {i + 1}", r)
            ids.append(r.json["id"])
            f.request("DELETE", f"/api/sessions/{r.json['id']}", user)
        before = len(kube.lab_vms())
        r = f.request("POST", "/api/sessions", user, {"lesson": "linux-basics"})
        t.eq((r.status, (r.json or {}).get("error")), (429, "too_many_starts"), "third start", r)
        ra = int(r.header("Retry-After") or 0)
        t.ok(0 < ra <= 120, "Retry-After within the window", ra)
        t.eq(r.json.get("retry_after_s"), ra, "retry_after_s in the body agrees")
        t.eq(db.one("SELECT count(*) FROM sessions WHERE user_name = %s AND state IN "
                    "('starting', 'ready')", user)[0], 0, "no session row")
        t.ok(len(kube.lab_vms()) <= before, "no VM created")
        r = f.request("POST", "/api/sessions", "student316", {"lesson": "linux-basics"})
        t.eq(r.status, 201, "another user starts", r)
        f.request("DELETE", f"/api/sessions/{r.json['id']}", "student316")


@t.test(name="a REMOTE_USER longer than a ticket can carry is refused with a clear 400")
def long_user():
    with LabFcgi() as f:
        r = f.request("GET", "/api/sessions/current", "u" * 129)
        t.eq((r.status, r.json.get("error")), (400, "bad_request"), "129 bytes", r)
        t.ok("at most 128" in r.json.get("message", ""), "the message names the limit", r)
        r = f.request("GET", "/api/sessions/current", "u" * 128)
        t.eq(r.status, 404, "128 bytes is a user (no session)", r)


@t.test(name="healthz answers codes, not libpq's or curl's texts")
def healthz_codes():
    with LabFcgi({"database": "postgresql://nobody@127.0.0.1:9/none?connect_timeout=2",
                  "kube_api": "https://127.0.0.1:9"}) as f:
        r = f.request("GET", "/api/healthz")
        t.eq(r.status, 503, "unhealthy", r)
        t.eq(r.json, {"db": "unavailable", "cluster": "unavailable"}, "codes only", r)


reset_world(kube, db)
t.done()
