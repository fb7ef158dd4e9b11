#!/usr/bin/python3
"""labvm-doctor's check 6, the canary (issue #31): on the healthy demo every
check passes, canary included: two labs of the built-in lesson start at once
in environment <env>-doctor, become ready, open their consoles through the
stack's labvm-console with tickets of its key, pass their grader step, find
the fence closed from inside (each other's agent, the API server, the
backend's Pod) and the stand-in internet of the simulator open (the only
"internet" any test uses: 203.0.113.10, inside the simulator's network
namespace), and are ended and reclaimed, while a student's lab of the
stack's own environment goes on untouched. Then each way it fails: a policy
that lets labs reach each other's agents, a fence without egress (a warn), a
ticket key that is not the bridge's, a doctor killed mid-way (its canaries
are out of the stack reaper's reach, and the next run ends them), and a
SIGTERM (the canaries are ended before it exits). State in STATE/t962.
timeout: 400
"""
import copy
import os
import re
import shutil
import signal
import subprocess
import time

from labtest import (Db, Kube, env, np_path, ready_lab, reaper_argv, reset_world, restore_fence,
                     shipped_policies, wait_until)
from tap import T

t = T()
SRC, BIN = env("LABVM_SRC"), env("LABVM_BIN")
DOCTOR = os.path.join(BIN, "labvm-doctor")
STATE = os.path.join(env("LABVM_STATE"), "t962")
ENV = env("LABVM_ENVIRONMENT")
DENV = ENV + "-doctor"
INTERNET = "203.0.113.10:80"   # the simulator's stand-in internet host (its own namespace)
LINE = re.compile(r"^(ok|warn|FAIL)\s+(\d) (\S+)\s+(.*?)(?: -- fix: (.*))?$")
kube, db = Kube(), Db()
NS = kube.ns
reset_world(kube, db)
shutil.rmtree(STATE, ignore_errors=True)
os.makedirs(STATE)

with open(env("LABVM_CONF")) as f:
    STACK_CONF = f.read()


def conf(name, **keys):
    text = STACK_CONF
    for k, v in keys.items():
        text = re.sub(rf"(?m)^{k} = .*$", f"{k} = {v}", text) if re.search(
            rf"(?m)^{k} = ", text) else text + f"{k} = {v}\n"
    path = os.path.join(STATE, name + ".conf")
    with open(path, "w") as f:
        f.write(text)
    return path


# the demo's lessons: conf/lessons as shipped (the canary takes its image from them)
DEMO = os.path.join(STATE, "demo")
shutil.copytree(os.path.join(SRC, "conf", "lessons"), DEMO)
HEALTHY = conf("healthy", lessons_dir=DEMO)


def parse(out):
    return [LINE.match(x).groups() for x in out.splitlines() if LINE.match(x)]


def doctor(cfg, *args, timeout=240):
    r = subprocess.run([DOCTOR, "--internet", INTERNET, *args],
                       env=dict(os.environ, LABVM_CONF=cfg), capture_output=True, text=True,
                       timeout=timeout)
    return r.returncode, parse(r.stdout), r.stdout + r.stderr


def canary(lines, verdict=None, pattern=""):
    return [x for x in lines if x[2] == "canary" and (verdict is None or x[0] == verdict)
            and re.search(pattern, x[3])]


def doctor_objects():
    """Every object of the doctor's environment left in the namespace."""
    left = []
    for kind in ("virtualmachines", "virtualmachineinstances", "pods", "secrets"):
        left += [f"{kind}/{o['metadata']['name']}"
                 for o in kube.list(kind, f"labvm.io/environment={DENV}")]
    return left


def doctor_sessions(since):
    return db.query("SELECT user_name, state, end_reason, ready_at IS NOT NULL FROM sessions "
                    "WHERE environment = %s AND created_at >= %s ORDER BY user_name", DENV,
                    since)


def db_now():
    return db.one("SELECT clock_timestamp()")[0]


def reclaimed(lines, what):
    got = canary(lines, "ok", r"ended and reclaimed \d")
    t.eq(len(got), 2, f"{what}: both canaries timed, ended and reclaimed", canary(lines))
    t.eq(doctor_objects(), [], f"{what}: nothing of environment {DENV} is left in the cluster")


# ---------------------------------------------------------------- healthy
@t.test(name="the healthy demo: every check passes, canary included (two labs ready, console "
             "through labvm-console, grader, fence, internet, ended and reclaimed), exit 0; a "
             "student's lab of the stack's environment untouched")
def healthy():
    r = subprocess.run(reaper_argv(), capture_output=True, text=True, timeout=120)
    t.eq(r.returncode, 0, "the reaper's pass (check 7 reads it)", r.stderr[-500:])
    if kube.request("GET", f"/apis/batch/v1/namespaces/{NS}/cronjobs/labvm-reaper").status == 200:
        # the stack's reaper is its CronJob's: its status says it ran (as t960)
        t.eq(kube.request("POST", f"/_sim/cronjobs/{NS}/labvm-reaper/ran",
                          {"succeeded": True}).status, 200, "the CronJob's run recorded")
    api, student = ready_lab("student370")
    since = db_now()
    nonces = db.one("SELECT count(*) FROM console_tickets_used")[0]
    t0 = time.monotonic()
    rc, lines, out = doctor(HEALTHY)
    took = time.monotonic() - t0
    t.diag(f"labvm-doctor on the healthy demo ({took:.1f} s):\n" + out)
    t.eq(rc, 0, "exit 0", out[-3000:])
    t.eq([x for x in lines if x[0] == "FAIL"], [], "no FAIL line")
    t.eq([(x[2], x[3].split(":")[0]) for x in lines if x[0] == "warn"],
         [("apis", "whether the network enforces NetworkPolicies is not verified")],
         "the only warn: what the API cannot show (the canary's fence lines show it)")
    for n, m in ((1, 2), (2, 1)):
        t.eq(len(canary(lines, "ok", rf"^the fence holds from inside canary {n}: canary {m}'s "
                        r"agent 10\.[\d.]+:8899 dropped \(timeout\); the API server "
                        r"127\.0\.0\.1:\d+ refused; the backend's Pod 10\.[\d.]+:8080 dropped "
                        r"\(timeout\)$")), 1,
             f"canary {n}: the other's agent, the API server and the backend's Pod closed",
             canary(lines))
        t.eq(len(canary(lines, "ok", rf"^canary {n} reaches the internet \({INTERNET} open\)$")),
             1, f"canary {n}: the stand-in internet open", canary(lines))
        t.eq(len(canary(lines, "ok", rf"^canary {n} \(session [0-9a-f]{{8}}, VM lab-[0-9a-f]+ "
                        rf"on {DENV}\): submitted [\d.]+ s, VMI Running [\d.]+ s later, agent "
                        r"ready [\d.]+ s later, console [\d.]+ s, grader [\d.]+ s, fence "
                        r"[\d.]+ s, ended and reclaimed [\d.]+ s$")), 1,
             f"canary {n}: each stage's time", canary(lines))
    t.eq(doctor_sessions(since),
         [("labvm-doctor-1", "ended", "user", True), ("labvm-doctor-2", "ended", "user", True)],
         f"two session rows in environment {DENV}: ready once, then ended as a student ends")
    t.eq(db.one("SELECT count(*) FROM console_tickets_used")[0] - nonces, 2,
         "labvm-console took a ticket of each (its single-use record)")
    t.eq(doctor_objects(), [], "nothing of the doctor's environment left")
    s = api.get(student["id"]).json
    t.eq(s["state"], "ready", "the student's lab is still ready")
    t.eq(len(kube.list("virtualmachines", f"labvm.io/session-id={student['id']}")), 1,
         "and its VM is still there")
    api.end(student["id"])


# ---------------------------------------------------------------- the fence open
def patched_policy(change):
    """labvm-lab-vms as shipped, changed by change(spec), in place of the shipped one."""
    pol = copy.deepcopy(next(p for p in shipped_policies()
                             if p["metadata"]["name"] == "labvm-lab-vms"))
    change(pol["spec"])
    r = kube.request("PUT", np_path(kube, "labvm-lab-vms"),
                     dict(pol, metadata=dict(kube.request("GET", np_path(kube, "labvm-lab-vms")
                                                          ).json["metadata"])))
    assert r.status == 200, r


@t.test(name="a policy opened (every Pod to the agents, any egress): the canaries reach each "
             "other's agent, FAIL with the fix, and say what held; still ended and reclaimed")
def fence_open():
    try:
        def opened(spec):
            # "opened to debug a download": every Pod to the agents, and any egress
            spec["ingress"] = [{"from": [{"podSelector": {}}],
                                "ports": [{"protocol": "TCP", "port": 8899}]}]
            spec["egress"] = [{}]
        patched_policy(opened)
        rc, lines, out = doctor(HEALTHY, "--only", "apis,canary")
        t.diag("labvm-doctor --only apis,canary, the policy opened:\n" + out)
        t.eq(len([x for x in lines if x[2] == "apis" and x[0] == "ok" and
                  re.search(r"^labvm's \d+ NetworkPolicies are in namespace", x[3])]), 1,
             "check 3 sees the policies in place: only traffic tells")
        t.eq(rc, 1, "exit 1")
        for n, m in ((1, 2), (2, 1)):
            got = canary(lines, "FAIL", rf"^canary {n} reached canary {m}'s agent at "
                         r"10\.[\d.]+:8899: one lab can reach another lab's grading agent$")
            t.eq(len(got), 1, f"canary {n}: the FAIL line", canary(lines))
            t.ok(got and "apply conf/k8s/networkpolicy.yaml unchanged" in (got[0][4] or ""),
                 "its fix", got)
            # the stack's backend Pod is the simulator's host link, where nothing
            # listens on the Deployment's containerPort: refused, where the fence drops
            got = canary(lines, "ok", rf"^the rest of the fence holds from inside canary {n}: "
                         r"the API server 127\.0\.0\.1:\d+ refused; the backend's Pod "
                         r"10\.[\d.]+:8080 refused$")
            t.eq(len(got), 1, f"canary {n}: what held, the backend's answer no longer a drop",
                 canary(lines))
        t.eq(canary(lines, "ok", "^the fence holds"), [], "no line says the fence holds")
        reclaimed(lines, "an open fence")
    finally:
        restore_fence(kube)


@t.test(name="a fence without egress (DNS only): the internet is a warn, not a FAIL; exit 0")
def no_egress():
    try:
        patched_policy(lambda spec: spec.__setitem__(
            "egress", [e for e in spec["egress"] if "ipBlock" not in str(e)]))
        rc, lines, out = doctor(HEALTHY, "--only", "canary")
        t.eq(rc, 0, "exit 0", out[-2000:])
        for n in (1, 2):
            got = canary(lines, "warn", rf"^canary {n} cannot reach the internet: "
                         rf"{INTERNET} dropped \(timeout\)$")
            t.eq(len(got), 1, f"canary {n}: the warn", canary(lines))
            t.ok(got and "allow the labs' egress" in (got[0][4] or ""), "its fix", got)
        t.eq(len(canary(lines, "ok", "^the fence holds")), 2, "the fence itself holds")
        reclaimed(lines, "no egress")
    finally:
        restore_fence(kube)


# ---------------------------------------------------------------- the console
@t.test(name="a ticket key that is not labvm-console's: the console FAILs with the bridge's "
             "own reason; the grader and the fence are still tried, both reclaimed")
def wrong_key():
    key = os.path.join(STATE, "other.key")
    with open(key, "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    os.chmod(key, 0o600)
    rc, lines, out = doctor(conf("wrongkey", lessons_dir=DEMO, ticket_key_file=key),
                            "--only", "canary")
    t.diag("labvm-doctor --only canary, with another ticket key:\n" + out)
    t.eq(rc, 1, "exit 1")
    for n in (1, 2):
        got = canary(lines, "FAIL", rf"^canary {n}'s console: labvm-console closed it: "
                     r"closed by the server \(4401: bad ticket signature\)$")
        t.eq(len(got), 1, f"canary {n}: the console's FAIL, in the bridge's words", canary(lines))
        t.ok(got and "ticket_key_file" in (got[0][4] or ""), "its fix names the key", got)
    t.eq(len(canary(lines, "ok", "^the fence holds")), 2, "the fence still tried")
    t.eq(len(canary(lines, "ok", r"console FAILED, grader [\d.]+ s")), 2,
         "the times say which stage failed")
    reclaimed(lines, "a wrong key")


@t.test(name="labvm-console not where --console says: FAIL, could not be opened; and with "
             "fewer free seats than two canaries the canary is not run (a warn)")
def no_bridge_no_seats():
    port = int(os.environ.get("LABVM_PORT_BASE", "18000")) + 162   # nothing listens there
    rc, lines, out = doctor(HEALTHY, "--only", "canary", "--console", f"ws://127.0.0.1:{port}")
    t.eq(rc, 1, "exit 1", out[-1500:])
    t.eq(len(canary(lines, "FAIL", rf"^canary \d's console: labvm-console at "
                    rf"ws://127\.0\.0\.1:{port}/console/ could not be opened")), 2,
         "both consoles: could not be opened", canary(lines))
    reclaimed(lines, "no bridge")
    rc, lines, out = doctor(conf("oneseat", lessons_dir=DEMO, vm_capacity=1), "--only", "canary")
    t.eq((rc, [x[0] for x in canary(lines)]), (0, ["warn"]), "one warn, exit 0", out[-1500:])
    t.ok(canary(lines, "warn", r"^not run: 0 of vm_capacity 1 VMs are in use, and the canaries "
                r"need 2$"), "it says why", canary(lines))
    t.eq(doctor_objects(), [], "nothing started")


# ---------------------------------------------------------------- interrupted
def start_doctor():
    return subprocess.Popen([DOCTOR, "--internet", INTERNET, "--only", "canary"],
                            env=dict(os.environ, LABVM_CONF=HEALTHY), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def wait_canaries_ready(since):
    wait_until(lambda: [x[1] for x in doctor_sessions(since)] == ["ready", "ready"],
               timeout=60, what="both canaries ready")


@t.test(name="a doctor killed mid-way: its canaries are out of the stack reaper's reach "
             "(another environment), and the next run ends them first")
def killed():
    since = db_now()
    p = start_doctor()
    try:
        wait_canaries_ready(since)
    finally:
        p.kill()
        p.wait()
    left = doctor_objects()
    t.ok(any(x.startswith("virtualmachines/") for x in left), "its VMs are left", left)
    rc = subprocess.run(reaper_argv(), capture_output=True, text=True, timeout=120).returncode
    t.eq(rc, 0, "the stack's reaper passes")
    t.eq(sorted(doctor_objects()), sorted(left),
         f"and leaves them: environment {DENV} is not its own")
    rc, lines, out = doctor(HEALTHY, "--only", "canary")
    t.diag("the next run:\n" + out)
    t.eq(rc, 0, "the next run passes", out[-2000:])
    t.eq(len(canary(lines, "warn", rf"^2 canary sessions of an earlier run were still open in "
                    rf"environment {DENV}: ended now$")), 1, "it says so", canary(lines))
    t.eq([x[1:3] for x in doctor_sessions(since)], [("ended", "user")] * 4,
         "the killed run's two sessions ended, and its own two")
    reclaimed(lines, "after a killed run")


@t.test(name="SIGTERM (a Job's deadline): the canaries are ended and reclaimed before it exits")
def sigterm():
    since = db_now()
    p = start_doctor()
    wait_canaries_ready(since)
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=90)
    lines = parse(out)
    t.eq(p.returncode, 1, "exit 1", out[-2000:])
    t.eq(len(canary(lines, "FAIL", r"^interrupted \(SIGINT or SIGTERM\)")), 1,
         "the FAIL line says it was interrupted", canary(lines))
    t.eq([x[1:3] for x in doctor_sessions(since)], [("ended", "user")] * 2, "both ended")
    t.eq(doctor_objects(), [], "nothing left in the cluster")


t.done()
