#!/usr/bin/python3
"""t800: labvm-bench readiness, N=5 on the shared stack (fast profile).

timeout: 400

It runs `labvm-bench readiness` as five students (student281..student285,
reserved for this suite) and checks what it writes and prints: CSV, JSON and
SVG exist and parse, the columns, n=5 per stage, the stage order of every
sample on both clocks, the printed table's columns, that the figures agree
with the session rows in PostgreSQL, and that nothing is left open. Then
`report` over the same window must find the same five sessions, `selftest`
must pass, and Ctrl-C during a run must end every session it started.
Last, `class` (the waiting line beside retry-only, issue #20): a tiny class of
six students (student292..297) against two free seats (student286..291 hold
the other six of the check stack's eight), both modes, figures present and
sane: everyone gets a lab, the line admits in press order with one press
each, retry-only needs more presses, capacity is never exceeded.
"""
import csv
import json
import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET

from labtest import Api, Db, Kube, env, reset_world, wait_until
from tap import T

t = T()
BENCH = os.path.join(env("LABVM_BIN"), "labvm-bench")
FIRST, N = 281, 5
USERS = [f"student{i}" for i in range(FIRST, FIRST + N)]
LESSON = "debian-golden"
COLUMNS = ["idx", "user", "lesson", "session_id", "http_status", "start_error",
           "admission_retries", "admission_wait_s", "disk_source", "fallback_reason", "state",
           "stage", "end_reason", "created_at", "polls", "post_app_ms", "server_submitted_s",
           "server_running_s", "server_ready_s", "server_failed_s", "cluster_running_s",
           "client_submitted_s", "client_running_s", "client_ready_s", "client_failed_s",
           "error"]
STATS = ["n", "min", "p50", "p90", "p99", "max", "mean", "stdev"]
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")

db = Db()
kube = Kube()
reset_world(kube, db)
out = tempfile.mkdtemp(prefix="t800-")
# `report --since` takes whole seconds: start on a fresh second, so sessions of
# the suites before this one (the same lesson, a moment earlier) fall outside
time.sleep(1.01 - time.time() % 1)
started = time.time()
run = {}


def bench(*args, timeout=300):
    return subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=timeout)


def num(row, key):
    v = row[key]
    return float(v) if v != "" else None


def active_sessions():
    return db.one("SELECT count(*) FROM sessions WHERE user_name = ANY(%s) "
                  "AND state IN ('starting', 'ready')", USERS)[0]


@t.test
def readiness_runs():
    r = bench("readiness", "--lessons", LESSON, "--n", str(N), "--concurrency", str(N),
              "--poll", "0.2", "--first", str(FIRST), "--user-count", str(N), "--timeout", "120",
              "--out", out, "--name", "r", "--quiet")
    run["r"] = r
    t.eq(r.returncode, 0, "exit status")
    if r.returncode != 0:
        t.diag(r.stdout[-3000:] + r.stderr[-2000:])


@t.test
def printed_table_has_the_stats_columns():
    text = run["r"].stdout
    header = re.search(r"^\s+side\s+stage \(s\)\s+(.*)$", text, re.M)
    t.require(header, "a table header line")
    t.eq(header.group(1).split(), STATS, "the stats columns")
    rows = re.findall(r"^\s+server\s+press -> (submitted|VMI Running|ready)\s+(\d+)\s", text, re.M)
    t.eq(sorted(s for s, _ in rows), ["VMI Running", "ready", "submitted"], "server stage rows")
    t.ok(all(n == str(N) for _, n in rows), "n = 5 in each server row", rows)
    client = re.findall(r"^\s+client\s+request -> (201|Running seen|ready seen)\s+(\d+)\s", text,
                        re.M)
    t.eq(len(client), 3, "three client rows")
    t.ok(all(n == str(N) for _, n in client), "n = 5 in each client row", client)
    t.ok(re.search(r"disk golden: 5 started, 5 ready, 0 failed", text), "the group line", text[:2000])
    t.ok("stage order (request <= submitted <= running <= ready, both clocks): holds" in text,
         "the tool's own order check")


@t.test
def csv_samples():
    path = os.path.join(out, "r.csv")
    t.require(os.path.exists(path), "r.csv exists")
    with open(path, newline="") as f:
        rd = csv.DictReader(f)
        t.eq(rd.fieldnames, COLUMNS, "CSV columns")
        rows = list(rd)
    run["rows"] = rows
    t.eq(len(rows), N, "one row per session")
    t.eq(sorted(r["user"] for r in rows), USERS, "the reserved users")
    for r in rows:
        t.eq((r["lesson"], r["http_status"], r["state"], r["stage"], r["disk_source"]),
             (LESSON, "201", "ready", "ready", "golden"), f"row {r['idx']}")
        t.ok(UUID.match(r["session_id"]), "session id is a UUID", r["session_id"])
        t.eq(r["end_reason"], "user", "ended by labvm-bench")
        for k in ("server_submitted_s", "server_running_s", "server_ready_s",
                  "cluster_running_s", "client_submitted_s", "client_running_s",
                  "client_ready_s"):
            t.ok(r[k] != "" and math.isfinite(float(r[k])), f"{k} measured", r)
        t.ok(r["server_failed_s"] == "" and r["client_failed_s"] == "", "no failure times", r)


@t.test
def stage_order_holds_for_every_sample():
    rows = run.get("rows") or []
    t.require(len(rows) == N, "rows from the CSV")
    for r in rows:
        s = [0.0, num(r, "server_submitted_s"), num(r, "server_running_s"),
             num(r, "server_ready_s")]
        c = [0.0, num(r, "client_submitted_s"), num(r, "client_running_s"),
             num(r, "client_ready_s")]
        t.ok(all(x is not None for x in s + c), "every stage measured", r)
        if not all(x is not None for x in s + c):
            continue
        t.ok(s == sorted(s), "server: press <= submitted <= running <= ready", s)
        t.ok(c == sorted(c), "client: request <= 201 <= running seen <= ready seen", c)
        # a poll sees a change only after the server recorded it (same machine clock)
        t.ok(c[3] + 0.05 >= s[3], "ready seen no earlier than ready_at", (c[3], s[3]))
        t.ok(c[2] + 0.05 >= s[2], "running seen no earlier than running_at", (c[2], s[2]))


@t.test
def json_summary():
    path = os.path.join(out, "r.json")
    t.require(os.path.exists(path), "r.json exists")
    with open(path) as f:
        j = json.load(f)
    t.eq(len(j["samples"]), N, "samples")
    t.eq(j["meta"]["command"], "readiness", "meta.command")
    t.eq(j["meta"]["n_per_lesson"], N, "meta.n_per_lesson")
    t.ok("linear interpolation" in j["methods"]["percentiles"], "the percentile method is named")
    groups = [g for g in j["groups"] if g["disk_source"]]
    t.eq([(g["lesson"], g["disk_source"], g["n"], g["ready"], g["failed"]) for g in groups],
         [(LESSON, "golden", N, N, 0)], "one group, all ready")
    t.eq(j["order_violations"], 0, "order violations")
    st = groups[0]["stats"] if groups else {}
    for key in ("server_submitted", "server_running", "server_ready", "server_running_to_ready",
                "cluster_running", "client_submitted", "client_running", "client_ready"):
        s = st.get(key, {})
        t.eq(sorted(s), sorted(STATS + ["p25", "p75"]), f"{key} stats keys")
        t.eq(s.get("n"), N, f"{key}: n")
        if s.get("n") == N:
            t.ok(s["min"] <= s["p50"] <= s["p90"] <= s["p99"] <= s["max"], f"{key} ordered", s)
            vals = sorted(x[key + "_s"] if key + "_s" in x else None for x in j["samples"]
                          if key + "_s" in x)
            if len(vals) == N:
                t.ok(abs(s["p50"] - vals[2]) < 1e-6, f"{key}: p50 is the median", (s, vals))
                t.ok(abs(s["min"] - vals[0]) < 1e-6 and abs(s["max"] - vals[-1]) < 1e-6,
                     f"{key}: min and max", (s, vals))
    csv_ids = sorted(r["session_id"] for r in run.get("rows", []))
    t.eq(sorted(x["session_id"] for x in j["samples"]), csv_ids, "JSON and CSV: same sessions")


@t.test
def svg_plot():
    path = os.path.join(out, "r.svg")
    t.require(os.path.exists(path), "r.svg exists")
    root = ET.parse(path).getroot()
    t.eq(root.tag, "{http://www.w3.org/2000/svg}svg", "an SVG document")
    ns = {"s": "http://www.w3.org/2000/svg"}
    t.eq(root.findall(".//s:script", ns), [], "no scripts")
    circles = root.findall(".//s:circle", ns)
    # server submitted, running, cluster running, ready, running->ready, client ready
    t.eq(len(circles), N * 6, "a dot per session and plotted stage")
    texts = " ".join("".join(e.itertext()) for e in root.iter("{http://www.w3.org/2000/svg}text"))
    t.ok("golden (debian-golden)" in texts, "labelled by disk source and lesson", texts[:300])
    t.ok("seconds" in texts, "axis labelled")


@t.test
def figures_match_the_database():
    rows = run.get("rows") or []
    t.require(rows, "rows from the CSV")
    for r in rows:
        got = db.one("SELECT user_name, lesson, state, end_reason, disk_source, "
                     "extract(epoch from submitted_at - created_at), "
                     "extract(epoch from running_at - created_at), "
                     "extract(epoch from ready_at - created_at) FROM sessions WHERE id = %s",
                     r["session_id"])
        t.require(got, f"session {r['session_id']} in the database")
        t.eq(got[:5], (r["user"], LESSON, "ended", "user", "golden"), "the row")
        for dbv, key in zip(got[5:], ("server_submitted_s", "server_running_s",
                                      "server_ready_s")):
            # the API shows milliseconds; the CSV keeps them
            t.ok(abs(float(dbv) - float(r[key])) <= 0.0015, f"{key} = the row's own", (dbv, r[key]))


@t.test
def nothing_left_open():
    t.eq(active_sessions(), 0, "no active session of the reserved users")
    ids = {r["session_id"] for r in run.get("rows", [])}
    left = wait_until(lambda: not [v for v in kube.lab_vms()
                                   if v["metadata"]["labels"].get("labvm.io/session-id") in ids]
                      or None, timeout=30, what="the bench's VMs gone") if ids else True
    t.ok(left, "VMs of the bench's sessions deleted")


@t.test
def report_finds_the_same_sessions():
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
    r = bench("report", "--since", since, "--lessons", LESSON, "--out", out, "--name", "rep",
              "--quiet")
    t.eq(r.returncode, 0, "exit status")
    with open(os.path.join(out, "rep.json")) as f:
        j = json.load(f)
    ids = sorted(x["session_id"] for x in j["samples"])
    t.eq(ids, sorted(x["session_id"] for x in run.get("rows", [])), "the same five sessions")
    g = [x for x in j["groups"] if x["disk_source"] == "golden"]
    t.eq([x["stats"]["server_ready"]["n"] for x in g], [N], "n=5 ready in the report")
    t.ok(all(x["user"] is None for x in j["samples"]), "no user names in the report")
    t.ok(re.search(r"^\s+server\s+press -> ready\s+5\s", r.stdout, re.M), "printed", r.stdout[-1500:])


@t.test
def plot_redraws_the_same_figures():
    r = bench("plot", "--in", os.path.join(out, "r.json"), "--out", out, "--name", "replot")
    t.eq(r.returncode, 0, "exit status")
    with open(os.path.join(out, "r.json")) as f:
        a = json.load(f)
    with open(os.path.join(out, "replot.json")) as f:
        b = json.load(f)
    def close(x, y):  # the samples in JSON are rounded to microseconds
        if isinstance(x, dict):
            return isinstance(y, dict) and x.keys() == y.keys() and all(close(x[k], y[k])
                                                                      for k in x)
        if isinstance(x, (int, float)) and isinstance(y, (int, float)):
            return abs(x - y) <= 1e-5
        return x == y
    sa, sb = [g["stats"] for g in a["groups"]], [g["stats"] for g in b["groups"]]
    t.ok(len(sa) == len(sb) and all(close(x, y) for x, y in zip(sa, sb)), "same stats", (sa, sb))
    t.eq(len(b["samples"]), N, "same samples")
    t.ok(ET.parse(os.path.join(out, "replot.svg")).getroot().tag.endswith("svg"), "an SVG")


@t.test
def selftest_passes():
    r = bench("selftest", "--out", os.path.join(out, "self"))
    t.eq(r.returncode, 0, "exit status")
    t.ok(re.search(r"^1\.\.\d+$", r.stdout, re.M) and "not ok" not in r.stdout, "all checks ok",
         r.stdout[-2000:])


@t.test
def ctrl_c_ends_the_sessions_it_started():
    # test-never-ready (the check's test lessons) stays "starting" until its deadline
    p = subprocess.Popen([BENCH, "readiness", "--lessons", "test-never-ready", "--n", "3",
                          "--concurrency", "3", "--poll", "0.2", "--first", str(FIRST),
                          "--user-count", str(N), "--out", out, "--name", "int", "--quiet"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: active_sessions() == 3, timeout=30, what="three sessions starting")
        p.send_signal(signal.SIGINT)
        so, se = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    t.eq(p.returncode, 130, "exit status after Ctrl-C")
    t.ok("ending the sessions it started" in se, "says so", se[-500:])
    t.eq(active_sessions(), 0, "every session it started is ended")
    with open(os.path.join(out, "int.json")) as f:
        j = json.load(f)
    t.eq(j["meta"]["interrupted"], True, "the partial figures say interrupted")
    t.eq(sorted(x["state"] for x in j["samples"]), ["interrupted"] * 3, "samples interrupted")


CAPACITY = 8  # the check stack's vm_capacity (t125 too)
HOLDERS = [f"student{i}" for i in range(286, 286 + CAPACITY - 2)]
CLASS_FIRST, CLASS_N = 292, 6
CLASS_USERS = [f"student{i}" for i in range(CLASS_FIRST, CLASS_FIRST + CLASS_N)]


def class_bench(*args):
    return bench("class", "--students", str(CLASS_N), "--first", str(CLASS_FIRST),
                 "--user-count", str(CLASS_N), "--capacity", str(CAPACITY), "--quiet", *args)


@t.test
def class_line_beside_retry_only():
    wait_until(lambda: not kube.lab_vms() or None, timeout=60, what="no lab VM left")
    held = []
    try:
        for u in HOLDERS:
            r = Api(u).start("linux-basics")
            t.require(r.status == 201, f"holder {u} start: {r}")
            held.append((u, r.json["id"]))
        # seed 1, spread 8 s: presses at least 0.5 s apart (so the front end
        # takes them in press order); holds of 4-6 s keep both seats busy
        # until the last press, so four join the line; retry after 1 s (not 30)
        r = class_bench("--hold", "uniform:4:6", "--spread", "8", "--seed", "1",
                        "--retry-after", "1", "--reaction", "0.5", "--poll", "0.5",
                        "--timeout", "120", "--out", out, "--name", "class")
    finally:
        for u, sid in held:
            Api(u).end(sid)
    t.eq(r.returncode, 0, "exit status")
    if r.returncode != 0:
        t.diag(r.stdout[-3000:] + r.stderr[-2000:])
    with open(os.path.join(out, "class.json")) as f:
        j = json.load(f)
    t.eq(j["command"], "class", "command")
    modes = {m["mode"]: m for m in j["modes"]}
    t.eq([m["mode"] for m in j["modes"]], ["retry", "line"], "retry-only first, then the line")
    for name, m in modes.items():
        t.eq((m["got_a_lab"], m["errors"]), (CLASS_N, 0), f"{name}: everyone got a lab")
        w = m["wait_s"]
        t.eq(w["n"], CLASS_N, f"{name}: a wait per student")
        t.ok(0 <= w["min"] <= w["p50"] <= w["p90"] <= w["p95"] <= w["max"] < 120,
             f"{name}: waits ordered", w)
        t.eq(m["ordered_pairs"], CLASS_N * (CLASS_N - 1) // 2, f"{name}: every pair compared")
        t.ok(m["most_lab_vms_at_once"] is not None and m["most_lab_vms_at_once"] <= CAPACITY,
             f"{name}: capacity never exceeded", m["most_lab_vms_at_once"])
        t.eq(len(m["students_detail"]), CLASS_N, f"{name}: one row per student")
    line, retry = modes.get("line", {}), modes.get("retry", {})
    t.eq(line.get("out_of_order_pairs"), 0, "the line: no out-of-order admission")
    t.eq(line.get("presses_per_student"), 1.0, "the line: one press each")
    t.eq(line.get("joined_the_line"), CLASS_N - 2, "the line: all but the first two joined it")
    t.eq(line.get("estimate_given"), line.get("joined_the_line"), "an estimate on each place")
    t.ok(line.get("estimate_abs_error_s", {}).get("p50") is not None, "estimate error measured")
    t.ok(retry.get("presses_per_student", 0) > 1, "retry-only: pressed again",
         retry.get("presses_per_student"))
    t.eq(retry.get("joined_the_line"), 0, "retry-only: no place in line")
    row = re.search(r"^\s+out-of-order admissions \(pairs\)\s+(\d+) of (\d+)\s+(\d+) of (\d+)$",
                    r.stdout, re.M)
    t.ok(row and row.group(3) == "0", "printed: the line's out-of-order count is 0",
         r.stdout[-2500:])
    for label in ("wait for a lab p50 (s)", "wait p95 (s)", "presses per student (mean)",
                  "estimate error |admitted - estimate| p50 (s)"):
        t.ok(re.search(r"^\s+" + re.escape(label) + r"\s+\S+\s+\S+$", r.stdout, re.M),
             f"printed: {label}, one column per mode")
    left = db.one("SELECT count(*) FROM sessions WHERE user_name = ANY(%s) "
                  "AND state IN ('starting', 'ready')", CLASS_USERS + HOLDERS)[0]
    t.eq(left, 0, "every session of the class ended")
    t.eq(db.one("SELECT count(*) FROM session_queue WHERE user_name = ANY(%s) "
                "AND state = 'waiting'", CLASS_USERS)[0], 0, "no place left in line")


@t.test
def class_bad_options():
    for args, says in ((["--hold", "normal:3"], "--hold normal:3: expected"),
                       (["--hold", "uniform:9:3"], "expected uniform:MIN:MAX"),
                       (["--mode", "queue"], "--mode queue: expected line, retry or both"),
                       (["--students", "0"], "--students 0: expected a number")):
        r = class_bench(*args)
        t.eq(r.returncode, 2, f"{args}: exit status 2")
        t.ok(says in r.stderr, f"{args}: says why", r.stderr[-300:])


try:
    t.done()
finally:
    for u in USERS + CLASS_USERS + HOLDERS:
        db.query("UPDATE sessions SET state = 'ended', end_reason = 'user', ended_at = now() "
                 "WHERE user_name = %s AND state IN ('starting', 'ready')", u)
    shutil.rmtree(out, ignore_errors=True)
