#!/usr/bin/python3
"""GET /api/metrics: the Prometheus text format, for operators only, right
across several labvm.fcgi processes behind a load balancer.

The suite runs its own balancer: lighttpd (round-robin) in front of two
labvm.fcgi processes under spawn-fcgi, on the stack's database, cluster and
environment, with `operators = teacher` added to a copy of the stack's
labvm.conf. Requests alternate between the processes, so every count below
is only right if what each process saw reaches every scrape. The values are
parsed with prometheus_client's own parser and checked against what the
suite did (as differences between a scrape before and one after).
timeout: 300
"""
import asyncio
import base64
import os
import re
import subprocess
import sys
import time
import urllib.parse

import websockets
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from labclient import Api, wait_until  # noqa: E402
from labtest import reaper_argv  # noqa: E402
from tap import T  # noqa: E402

t = T()
ENV = os.environ
STATE = os.path.join(ENV["LABVM_STATE"], "metrics")
BIN = ENV.get("LABVM_BIN") or os.path.join(ENV["LABVM_SRC"], "build", "bin")
BASE = urllib.parse.urlsplit(ENV.get("LABVM_LIGHTTPD_URL") or ENV["LABVM_URL"]).port - 80
LB_PORT, FCGI_PORTS = BASE + 184, (BASE + 185, BASE + 186)
LB = f"http://127.0.0.1:{LB_PORT}"
OPERATOR, STUDENT, STUDENT2 = "teacher", "student321", "student322"
LESSON = "linux-basics"
procs = []


def spawn(name, argv, env=None):
    out = open(os.path.join(STATE, f"{name}.log"), "ab")
    e = dict(ENV)
    e.update(env or {})
    procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  env=e, start_new_session=True))
    out.close()


def stop_all():
    for p in procs:
        try:
            os.killpg(p.pid, 15)
            p.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    procs.clear()


def up():
    os.makedirs(STATE, exist_ok=True)
    conf = os.path.join(STATE, "labvm.conf")
    text = open(ENV["LABVM_CONF"]).read()
    text = re.sub(r"^operators = .*\n", "", text, flags=re.M)
    with open(conf, "w") as f:
        f.write(text + f"operators = {OPERATOR}, someone-else\n")
    for i, port in enumerate(FCGI_PORTS):
        spawn(f"fcgi{i}", ["spawn-fcgi", "-n", "-a", "127.0.0.1", "-p", str(port), "--",
                           os.path.join(BIN, "labvm.fcgi")], env={"LABVM_CONF": conf})
    hosts = ", ".join(f'( "host" => "127.0.0.1", "port" => {p}, "check-local" => "disable", '
                      f'"fix-root-scriptname" => "enable" )' for p in FCGI_PORTS)
    lconf = os.path.join(STATE, "lighttpd.conf")
    with open(lconf, "w") as f:
        f.write(f"""server.modules = ( "mod_access", "mod_auth", "mod_authn_file", "mod_fastcgi" )
server.bind = "127.0.0.1"
server.port = {LB_PORT}
server.document-root = "{STATE}"
server.pid-file = "{STATE}/lighttpd.pid"
server.errorlog = "{STATE}/lighttpd-error.log"
auth.backend = "htpasswd"
auth.backend.htpasswd.userfile = "{ENV['LABVM_STATE']}/htpasswd"
auth.require = ( "/" => ( "method" => "basic", "realm" => "labvm", "require" => "valid-user" ) )
fastcgi.balance = "round-robin"
fastcgi.server = ( "/api/" => ( {hosts} ) )
""")
    subprocess.run(["lighttpd", "-tt", "-f", lconf], check=True, capture_output=True)
    spawn("lighttpd", ["lighttpd", "-D", "-f", lconf])
    op = Api(OPERATOR, base=LB)

    def answers():
        try:
            return op.request("GET", "/api/healthz").status == 200
        except OSError:
            op.close()
            return False
    wait_until(answers, 20, what="the balancer and both labvm.fcgi answer")
    return conf


def scrape(api=None):
    api = api or Api(OPERATOR, base=LB)
    r = api.request("GET", "/api/metrics", headers={"Accept": "text/plain"})
    t.require(r.status == 200, f"operator scrape: {r.status} {r.body[:300]}")
    return r, list(text_string_to_metric_families(r.body))


def samples(fams):
    """{(sample name, frozenset(labels)): value}"""
    out = {}
    for f in fams:
        for s in f.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def val(smp, name, **labels):
    return smp.get((name, frozenset(labels.items())), 0.0)


def total(smp, name, **labels):
    """sum over the series of name whose labels include the given ones"""
    want = set(labels.items())
    return sum(v for (n, ls), v in smp.items() if n == name and want <= set(ls))


async def with_console(url, user, fn):
    """Run fn() while a console WebSocket is open (through the stack's front end)."""
    base = ENV.get("LABVM_LIGHTTPD_URL") or ENV["LABVM_URL"]
    cred = base64.b64encode(f"{user}:{ENV.get('LABVM_PASSWORD', 'labvm')}".encode()).decode()
    ws = await websockets.connect(base.replace("http://", "ws://") + url, subprotocols=["labvm-console.v1"],
                                  extra_headers={"Authorization": f"Basic {cred}"}, open_timeout=10,
                                  ping_interval=None, close_timeout=2)
    try:
        await asyncio.sleep(0.5)
        return fn()
    finally:
        await ws.close()


conf = None
try:
    conf = up()
    setup_error = None
except Exception as e:  # noqa: BLE001
    setup_error = f"{type(e).__name__}: {e}"


@t.test(name="students and other users get 403; no login gets the front end's 401")
def access():
    t.require(not setup_error, f"balancer up: {setup_error}")
    for user in (STUDENT, "student1"):
        r = Api(user, base=LB).request("GET", "/api/metrics")
        t.eq((r.status, (r.json or {}).get("error")), (403, "forbidden"), f"{user} on the balancer")
        t.ok("labvm_" not in r.body, "no metric in the refusal")
    for fe in ("LABVM_LIGHTTPD_URL", "LABVM_APACHE_URL"):
        if ENV.get(fe):   # the shared stack names no operator: nobody reads metrics there
            r = Api(OPERATOR, base=ENV[fe]).request("GET", "/api/metrics")
            t.eq(r.status, 403, f"teacher through {fe} (not an operator in that labvm.conf)")
    r = Api(None, base=LB).request("GET", "/api/metrics")
    t.eq(r.status, 401, "no credentials: 401 from the front end")


@t.test(name="the exposition format: HELP and TYPE, _total counters, histograms, base units")
def format_ok():
    t.require(not setup_error, f"balancer up: {setup_error}")
    r, fams = scrape()
    ct = r.header("Content-Type") or ""
    t.ok(ct.startswith("text/plain") and "version=0.0.4" in ct, "Content-Type of the text format", ct)
    names = [ln.split()[2] for ln in r.body.splitlines() if ln.startswith("# TYPE ")]
    t.eq(len(names), len(set(names)), "each family declared once", names)
    helps = {ln.split()[2] for ln in r.body.splitlines() if ln.startswith("# HELP ")}
    t.eq(sorted(set(names) - helps), [], "every family has HELP")
    for want in ("labvm_sessions", "labvm_session_starts_total", "labvm_vm_capacity_limit",
                 "labvm_vm_capacity_in_use", "labvm_cluster_up", "labvm_console_tickets_total",
                 "labvm_start_stage_duration_seconds"):
        t.ok(want in names, f"family {want}")
    for ln in r.body.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", ln)
        if not m:
            continue
        name, typ = m.groups()
        if typ == "counter":
            t.ok(name.endswith("_total"), f"counter {name} ends in _total")
        if "duration" in name:
            t.ok(name.endswith("_seconds"), f"{name} in seconds")
    for f in fams:
        if f.type != "histogram":
            continue
        series = {}
        for s in f.samples:
            key = frozenset((k, v) for k, v in s.labels.items() if k != "le")
            series.setdefault(key, {})[(s.name, s.labels.get("le"))] = s.value
        for key, ss in series.items():
            buckets = sorted(((float(le), v) for (n, le), v in ss.items() if n.endswith("_bucket")))
            vals = [v for _, v in buckets]
            what = f"{f.name}{dict(key)}"
            t.ok(buckets and buckets[-1][0] == float("inf"), f"{what}: has +Inf")
            t.eq(vals, sorted(vals), f"{what}: buckets cumulative")
            t.eq(vals[-1] if vals else None, ss.get((f.name + "_count", None)), f"{what}: +Inf == _count")
            t.ok((f.name + "_sum", None) in ss, f"{what}: _sum")
    smp = samples(fams)
    t.eq(val(smp, "labvm_vm_capacity_limit"), float(re.search(r"^vm_capacity = (\d+)", open(conf).read(),
                                                              re.M).group(1)), "capacity limit from labvm.conf")
    t.eq(val(smp, "labvm_cluster_up"), 1.0, "the cluster answered")
    t.eq(total(smp, "labvm_console_bridge_up"), 1.0, "this host's console bridge answered")


@t.test(name="values match what the suite did, with requests spread over two processes")
def values():
    t.require(not setup_error, f"balancer up: {setup_error}")
    a, b = Api(STUDENT, base=LB), Api(STUDENT2, base=LB)
    for api in (a, b):
        api.end_current()
    time.sleep(6)   # earlier calls flushed
    _, fams = scrape()
    before = samples(fams)
    r = a.start(LESSON)
    t.require(r.status == 201, f"start: {r}")
    sid = r.json["id"]
    t.eq(a.start(LESSON).status, 409, "a second start: session_exists")
    t.eq(b.start("no-such-lesson").status, 404, "an unknown lesson")
    s = a.wait_state(sid, ("ready", "failed"), 60)
    t.require(s["state"] == "ready", f"ready: {s}")
    _, fams = scrape()
    mid = samples(fams)
    t.ok(val(mid, "labvm_vm_capacity_in_use") >= 1, "capacity in use counts the lab VM")
    t.eq(val(mid, "labvm_sessions", state="ready", runtime="vm") -
         val(before, "labvm_sessions", state="ready", runtime="vm"), 1.0, "one more ready session")
    for _ in range(2):
        t.eq(a.ticket(sid).status, 200, "console ticket")
    r = a.ticket(sid)
    t.require(r.status == 200, f"console ticket: {r}")
    during = asyncio.run(with_console(r.json["url"], STUDENT, lambda: samples(scrape()[1])))
    t.ok(total(during, "labvm_console_connections") >= 1, "the open console is counted",
         total(during, "labvm_console_connections"))
    t.ok(total(during, "labvm_console_sessions") >= 1, "its session has a console")
    t.eq(a.end(sid).status, 200, "end")
    time.sleep(6.5)   # both processes' flusher threads ran
    scrapes = [samples(scrape()[1]) for _ in range(4)]   # round-robin: both processes answer
    after = scrapes[-1]
    d = lambda name, **lb: val(after, name, **lb) - val(before, name, **lb)   # noqa: E731
    t.eq(d("labvm_session_starts_total", lesson=LESSON, runtime="vm"), 1.0, "starts +1")
    t.eq(d("labvm_start_refusals_total", reason="session_exists"), 1.0, "refusal session_exists +1")
    t.eq(d("labvm_start_refusals_total", reason="unknown_lesson"), 1.0, "refusal unknown_lesson +1")
    t.eq(d("labvm_console_tickets_total"), 3.0, "console tickets +3")
    t.eq(d("labvm_sessions", state="ended", runtime="vm"), 1.0, "ended sessions +1")
    disk = (s.get("disk") or {}).get("source") or "containerdisk"
    for stage in ("running", "ready"):
        lb = dict(stage=stage, lesson=LESSON, disk_source=disk)
        t.eq(d("labvm_start_stage_duration_seconds_count", **lb), 1.0, f"stage {stage}: one more observation")
        t.ok(d("labvm_start_stage_duration_seconds_sum", **lb) > 0, f"stage {stage}: its seconds in _sum")
    t.ok(total(after, "labvm_cluster_request_duration_seconds_count", verb="POST") -
         total(before, "labvm_cluster_request_duration_seconds_count", verb="POST") >= 2,
         "cluster POSTs (Secret, VM) counted")
    t.ok(total(after, "labvm_cluster_request_duration_seconds_count", verb="DELETE") >
         total(before, "labvm_cluster_request_duration_seconds_count", verb="DELETE"), "cluster DELETEs counted")
    t.ok(total(after, "labvm_agent_request_duration_seconds_count") >
         total(before, "labvm_agent_request_duration_seconds_count"), "agent calls counted")
    t.ok(total(after, "labvm_db_query_duration_seconds_count", verb="INSERT") >
         total(before, "labvm_db_query_duration_seconds_count", verb="INSERT"), "database INSERTs counted")
    stable = ("labvm_session_starts_total", "labvm_start_refusals_total", "labvm_console_tickets_total",
              "labvm_sessions", "labvm_start_stage_duration_seconds_count")
    views = [{k: v for k, v in sc.items() if k[0] in stable} for sc in scrapes]
    t.ok(all(v == views[0] for v in views), "every process's scrape shows the same counts")


@t.test(name="a reaper pass is counted")
def reaper():
    t.require(not setup_error, f"balancer up: {setup_error}")
    before = samples(scrape()[1])
    r = subprocess.run(reaper_argv("--grace", "86400"), capture_output=True,
                       text=True, env=dict(ENV, LABVM_CONF=conf))
    t.ok(r.returncode in (0, 1), "the reaper ran", r.stderr[-300:])
    after = samples(scrape()[1])
    t.eq(total(after, "labvm_reaper_passes_total") - total(before, "labvm_reaper_passes_total"), 1.0,
         "one more pass")


stop_all()
t.done()
