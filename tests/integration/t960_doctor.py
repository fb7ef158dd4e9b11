#!/usr/bin/python3
"""labvm-doctor (issue #31): the healthy demo passes every check, and each
failure class makes it fail with the right line and fix. The shared stack
for what can be changed and put back (the Role, the golden PVC, a lesson,
the schema record, the reaper); a simulator of its own for what cannot (CDI
and Multus not served, nodes without /dev/kvm, NetworkPolicy stored but not
enforced: kubesim --no-api/--no-kvm/--no-policy-enforcement, port
LABVM_PORT_BASE+150); a PgBouncer of its own in transaction and in session
mode (port +151) in front of the test PostgreSQL. State in STATE/t960.
timeout: 600
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from labtest import Db, Kube, env, wait_until
from tap import T

t = T()
SRC = env("LABVM_SRC")
BIN = env("LABVM_BIN")
DOCTOR = os.path.join(BIN, "labvm-doctor")
STATE = os.path.join(env("LABVM_STATE"), "t960")
BASE = int(os.environ.get("LABVM_PORT_BASE", "18000"))
SIM_PORT, PGB_PORT = BASE + 150, BASE + 151
NS = env("LABVM_NAMESPACE")
LINE = re.compile(r"^(ok|warn|FAIL)\s+(\d) (\S+)\s+(.*?)(?: -- fix: (.*))?$")
kube, db = Kube(), Db()
shutil.rmtree(STATE, ignore_errors=True)
os.makedirs(STATE)

with open(env("LABVM_CONF")) as f:
    STACK_CONF = f.read()


def conf(name, **keys):
    """A labvm.conf: the stack's with keys replaced (or added)."""
    text = STACK_CONF
    for k, v in keys.items():
        if re.search(rf"(?m)^{k} = ", text):
            text = re.sub(rf"(?m)^{k} = .*$", f"{k} = {v}", text)
        else:
            text += f"{k} = {v}\n"
    path = os.path.join(STATE, name + ".conf")
    with open(path, "w") as f:
        f.write(text)
    return path


def lessons(name, files=(), extra=()):
    """A lessons_dir: conf/lessons' files named (all when files is None),
    with their guides, plus extra (file name, text) pairs."""
    d = os.path.join(STATE, name)
    os.makedirs(d)
    src = os.path.join(SRC, "conf", "lessons")
    for n in sorted(os.listdir(src)):
        if n.endswith(".json") and (files is None or n in files):
            shutil.copy(os.path.join(src, n), d)
    shutil.copytree(os.path.join(src, "guides"), os.path.join(d, "guides"))
    for n, text in extra:
        with open(os.path.join(d, n), "w") as f:
            f.write(text)
    return d


def doctor(cfg, *args):
    """(exit status, [(verdict, number, check, found, fix)], output)."""
    r = subprocess.run([DOCTOR, "--no-canary", *args], env=dict(os.environ, LABVM_CONF=cfg),
                       capture_output=True, text=True, timeout=240)
    lines = [LINE.match(x).groups() for x in r.stdout.splitlines() if LINE.match(x)]
    return r.returncode, lines, r.stdout + r.stderr


def find(lines, verdict, check, pattern):
    return [x for x in lines if x[0] == verdict and x[2] == check and re.search(pattern, x[3])]


def one(lines, verdict, check, pattern, what):
    got = find(lines, verdict, check, pattern)
    t.eq(len(got), 1, f"{what}: one {verdict} {check} line /{pattern}/",
         "\n".join(" ".join(str(p) for p in x) for x in lines if x[2] == check))
    return got[0] if got else (None,) * 5


def fails(lines):
    return [x for x in lines if x[0] == "FAIL"]


def run_reaper(cfg):
    """One pass of the reaper, as the stack's cron or CronJob runs it, and
    the CronJob's status when the cluster has one (kubesim: /_sim/cronjobs)."""
    r = subprocess.run([os.path.join(BIN, "labvm-reaper")], env=dict(os.environ, LABVM_CONF=cfg),
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def cronjob_ran(k, ok):
    r = k.request("POST", f"/_sim/cronjobs/{NS}/labvm-reaper/ran", {"succeeded": ok})
    return r.status


DEMO = lessons("demo", files=None)   # the demo's lessons: conf/lessons, no test lessons
HEALTHY = conf("healthy", lessons_dir=DEMO)
NP = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"


def shipped_policies():
    import yaml
    with open(os.path.join(SRC, "conf", "k8s", "networkpolicy.yaml")) as f:
        return [d for d in yaml.safe_load_all(f) if d and d.get("kind") == "NetworkPolicy"]


def apply_policies(k):
    """conf/k8s/networkpolicy.yaml as an operator applies it; the names made
    here (to delete at the end: the stack is left as it was found)."""
    have = {p["metadata"]["name"] for p in k.request("GET", NP).json.get("items", [])}
    made = []
    for p in shipped_policies():
        if p["metadata"]["name"] not in have:
            r = k.request("POST", NP, p)
            assert r.status == 201, r
            made.append(p["metadata"]["name"])
    return made


# ---------------------------------------------------------------- healthy
@t.test(name="the healthy demo: every check passes (warns only for the fence's enforcement "
             "and the canary), exit 0")
def healthy():
    made = apply_policies(kube)
    try:
        rc, out = run_reaper(env("LABVM_CONF"))
        t.eq(rc, 0, "the reaper's pass", out[-500:])
        if kube.request("GET", f"/apis/batch/v1/namespaces/{NS}/cronjobs/labvm-reaper"
                        ).status == 200:
            # a stack whose reaper is a CronJob's: its status says it ran
            t.eq(cronjob_ran(kube, rc == 0), 200, "the CronJob's run recorded")
        rc, lines, out = doctor(HEALTHY)
        t.diag("labvm-doctor on the healthy demo:\n" + out)
        t.eq(rc, 0, "exit 0", out[-2000:])
        t.eq(fails(lines), [], "no FAIL line")
        t.eq({x[2] for x in lines}, {"credentials", "permissions", "apis", "nodes", "lessons",
                                     "canary", "reaper", "database"}, "a line from every check")
        warns = [x for x in lines if x[0] == "warn"]
        t.eq(sorted((x[2], x[3].split(":")[0]) for x in warns),
             [("apis", "whether the network enforces NetworkPolicies is not verified"),
              ("canary", "skipped (--no-canary)")],
             "the only warns: enforcement unverified, the canary not run", warns)
        one(lines, "ok", "credentials", r"accepted as system:serviceaccount:labs:labvm-backend; "
            r"the CA .* verifies", "the token and the CA")
        one(lines, "ok", "credentials", rf"namespace {NS} exists$", "the namespace, read")
        one(lines, "ok", "permissions", r"all \d+ verbs on \d+ resources are granted", "RBAC")
        one(lines, "ok", "apis", r"Kubernetes v1\.34\.\S+ \(tested: 1\.34 to 1\.35\)", "k8s")
        one(lines, "ok", "apis", r"KubeVirt v1\.9\.0 \(tested: 1\.9\)", "KubeVirt's version")
        one(lines, "ok", "apis", r"CDI v1\.66\.0", "CDI's version")
        one(lines, "ok", "apis", r"k8s\.cni\.cncf\.io/v1 serves network-attachment-definitions: "
            r".*kubeadm-cluster", "Multus, for the multi-machine lesson")
        one(lines, "ok", "apis", rf"labvm's {len(shipped_policies())} NetworkPolicies are in "
            rf"namespace {NS}", "the fence applied")
        one(lines, "ok", "nodes", r"4 of 4 nodes run VMs \(devices\.kubevirt\.io/kvm", "VM nodes")
        one(lines, "ok", "nodes", r"vm_capacity \d+ fits every VM lesson", "capacity")
        one(lines, "ok", "nodes", r"session_network same-node: every multi-machine lesson fits",
            "the session network's rule")
        n = len([f for f in os.listdir(DEMO) if f.endswith(".json")])
        one(lines, "ok", "lessons", rf"{n} lesson files pass labvm\.fcgi --check", "--check")
        one(lines, "ok", "lessons", r"lesson debian-golden: golden PVC golden-debian-12 is used",
            "the golden decision")
        one(lines, "ok", "reaper", r"last complete pass for environment \S+ was \d+ s ago",
            "the reaper's pass")
        one(lines, "ok", "database", r"migrated: (\d+) of \1 migrations", "the schema")
        one(lines, "ok", "database", r"LISTEN/NOTIFY delivers", "locks and NOTIFY")
    finally:
        for name in made:
            kube.request("DELETE", f"{NP}/{name}")


@t.test(name="--json: the same findings as one document; a bad --only is a usage error")
def json_output():
    r = subprocess.run([DOCTOR, "--json", "--only", "credentials,canary", "--no-canary"],
                       env=dict(os.environ, LABVM_CONF=HEALTHY), capture_output=True, text=True,
                       timeout=60)
    doc = json.loads(r.stdout)
    t.eq((r.returncode, doc["exit"], doc["fail"]), (0, 0, 0), "exit 0", r.stdout[-500:])
    t.eq([(x["number"], x["check"], x["status"]) for x in doc["results"]],
         [(1, "credentials", "ok"), (1, "credentials", "ok"), (6, "canary", "warn")],
         "the lines, checks in order")
    t.ok(all(set(x) == {"number", "check", "status", "found", "fix"} for x in doc["results"]),
         "each with what it found and the fix", doc["results"])
    t.ok("--no-canary" in doc["results"][-1]["found"], "the canary says why it did not run",
         doc["results"][-1])
    r = subprocess.run([DOCTOR, "--only", "credentials,bogus"],
                       env=dict(os.environ, LABVM_CONF=HEALTHY), capture_output=True, text=True)
    t.eq(r.returncode, 2, "an unknown check: exit 2", r.stderr)
    r = subprocess.run([DOCTOR], env=dict(os.environ, LABVM_CONF=os.path.join(STATE, "nope")),
                       capture_output=True, text=True)
    t.eq(r.returncode, 2, "no config: exit 2", r.stderr)


@t.test(name="nothing answers (API server, database): FAIL lines with the fixes, each finding "
             "one line, the other checks say they could not check")
def nothing_answers():
    cfg = conf("down", kube_api=f"https://127.0.0.1:{BASE + 152}", lessons_dir=DEMO,
               database=f"postgresql://labvm:x@127.0.0.1:{BASE + 153}/labvm?connect_timeout=2")
    rc, lines, out = doctor(cfg)
    body = [x for x in out.splitlines() if x and not x.startswith("labvm-doctor: ")]
    t.eq(rc, 1, "exit 1")
    t.eq([x for x in body if not LINE.match(x)], [], "every finding is one line (libpq's "
         "two-line message joined)", out)
    line = one(lines, "FAIL", "credentials", r"^the API server https://127\.0\.0\.1:\d+ cannot "
               r"be used: cluster API unreachable", "the API server")
    t.ok(line[4] and "kube_api" in line[4], "its fix", line)
    one(lines, "FAIL", "database", r"^cannot connect to the database: .*Connection refused Is the "
        r"server running", "the database")
    for c in ("permissions", "apis", "nodes"):
        one(lines, "warn", c, r"^not checked: the API server cannot be used \(check 1\)", c)
    one(lines, "ok", "lessons", r"lesson files pass labvm\.fcgi --check", "the lessons need neither")


# ------------------------------------------------------------- permissions
ROLE = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles/labvm-backend"
CROLE = "/apis/rbac.authorization.k8s.io/v1/clusterroles/labvm-nodes"


def put_back(path, orig):
    cur = kube.request("GET", path).json
    orig = dict(orig, metadata=dict(orig["metadata"],
                                    resourceVersion=cur["metadata"]["resourceVersion"]))
    r = kube.request("PUT", path, orig)
    assert r.status == 200, r


@t.test(name="a Role without a verb (get on pods/exec, patched through the API): FAIL, the "
             "Role's rule as the fix")
def role_without_a_verb():
    orig = kube.request("GET", ROLE).json
    role = json.loads(json.dumps(orig))
    for rule in role["rules"]:
        if rule["resources"] == ["pods/exec"]:
            rule["verbs"] = ["create"]
    try:
        r = kube.request("PUT", ROLE, role)
        t.require(r.status == 200, f"the Role patched: {r}")
        rc, lines, out = doctor(HEALTHY, "--only", "permissions")
        t.diag("labvm-doctor after `get` was taken from pods/exec:\n" + out)
        t.eq(rc, 1, "exit 1")
        line = one(lines, "FAIL", "permissions", r"^get pods/exec is denied in namespace labs "
                   r"\(used by labvm\.fcgi, labvm-console\): Pod terminals and Pod grading are "
                   r"refused: a WebSocket exec is an HTTP GET", "the missing verb, what breaks")
        t.ok(line[4] and "kubectl apply -f conf/k8s/rbac.yaml" in line[4] and
             "Role labvm-backend grants get create on pods/exec" in line[4], "the fix", line)
        t.eq(len(fails(lines)), 1, "nothing else fails")
    finally:
        put_back(ROLE, orig)
    rc, lines, _ = doctor(HEALTHY, "--only", "permissions")
    t.eq((rc, [x[0] for x in lines]), (0, ["ok"]), "the Role put back: ok again")
    # an optional grant: the nodes ClusterRole without list is a warn, not a FAIL
    orig = kube.request("GET", CROLE).json
    cr = json.loads(json.dumps(orig))
    cr["rules"][0]["verbs"] = ["get"]
    try:
        t.eq(kube.request("PUT", CROLE, cr).status, 200, "the ClusterRole patched")
        rc, lines, _ = doctor(HEALTHY, "--only", "permissions")
        t.eq(rc, 0, "optional: exit 0")
        one(lines, "warn", "permissions", r"^list nodes is denied at the cluster scope .*never_fits",
            "the optional verb is a warn")
    finally:
        put_back(CROLE, orig)


# ------------------------------------------------- a cluster of its own
sys.path.insert(0, os.path.join(SRC, "tests", "kubesim", "tests"))
from simlib import Sim  # noqa: E402

other = {}


def broken():
    """The simulator without CDI, Multus, /dev/kvm and policy enforcement,
    and a labvm.conf for it (the demo's lessons)."""
    if "sim" not in other:
        s = Sim("--no-api", "cdi.kubevirt.io", "--no-api", "k8s.cni.cncf.io", "--no-kvm",
                "--no-policy-enforcement", guest="none", port=SIM_PORT)
        other["sim"] = s
        other["kube"] = Kube(url=s.url, token=s.admin_token, ca=s.ca)
        other["conf"] = conf("broken", kube_api=s.url, environment="t960broken",
                             kube_token_file=os.path.join(s.dir, "serviceaccount", "token"),
                             kube_ca_file=s.ca, lessons_dir=DEMO)
    return other


@t.test(name="a missing API group (CDI, Multus not served): FAIL naming the lessons and the fix")
def missing_api_groups():
    b = broken()
    rc, lines, out = doctor(b["conf"], "--only", "apis")
    t.diag("labvm-doctor on a cluster without CDI and Multus:\n" + out)
    t.eq(rc, 1, "exit 1")
    line = one(lines, "FAIL", "apis", r"^the API group cdi\.kubevirt\.io is not served: the "
               r"datavolume disks .*fresh-disk", "CDI")
    t.ok(line[4] and line[4].startswith("install CDI"), "its fix", line)
    line = one(lines, "FAIL", "apis", r"^the API group k8s\.cni\.cncf\.io is not served: the "
               r"session network of multi-machine lessons \(kubeadm-cluster\)", "Multus")
    t.ok(line[4] and "install Multus" in line[4], "its fix", line)
    t.eq(len(fails(lines)), 3, "and the fence not applied there: nothing else",
         fails(lines))
    one(lines, "ok", "apis", r"KubeVirt v1\.9\.0", "KubeVirt is there")


@t.test(name="NetworkPolicy not enforced: the policies are there, and the doctor can only warn "
             "(the canary will tell); without them it FAILs")
def netpol_not_enforced():
    b = broken()
    rc, lines, _ = doctor(b["conf"], "--only", "apis")
    line = one(lines, "FAIL", "apis", r"^labvm's NetworkPolicies .* are not in namespace labs: "
               r"nothing fences the labs", "no policies: FAIL")
    t.ok(line[4] and "kubectl apply -f conf/k8s/networkpolicy.yaml" in line[4], "its fix", line)
    apply_policies(b["kube"])
    rc, lines, out = doctor(b["conf"], "--only", "apis")
    t.diag("with the policies applied, on a network that enforces none:\n" + out)
    one(lines, "ok", "apis", r"^labvm's \d+ NetworkPolicies are in namespace labs", "applied")
    line = one(lines, "warn", "apis", r"^whether the network enforces NetworkPolicies is not "
               r"verified: .*the canary, check 6", "enforcement: a warn")
    t.ok(not [x for x in lines if re.search(r"enforce", x[3]) and x[0] == "ok"],
         "no line claims enforcement", lines)
    # the same words as on the enforcing stack: the API cannot tell them apart
    rc2, lines2, _ = doctor(HEALTHY, "--only", "apis")
    t.ok(line in lines2 or any(x[3] == line[3] for x in lines2),
         "the healthy stack gets the same warn: only traffic (the canary) tells")


@t.test(name="no KVM on any node: FAIL (no node runs a VM); KubeVirt's useEmulation turns it "
             "into a warn")
def no_kvm():
    b = broken()
    rc, lines, out = doctor(b["conf"], "--only", "nodes")
    t.diag("labvm-doctor on nodes without /dev/kvm:\n" + out)
    t.eq(rc, 1, "exit 1")
    line = one(lines, "FAIL", "nodes", r"^no node can run a VM: none of the 4 nodes has "
               r"devices\.kubevirt\.io/kvm allocatable .* useEmulation is off", "no VM node")
    t.ok(line[4] and "/dev/kvm" in line[4] and "useEmulation: true" in line[4], "the fix", line)
    r = b["kube"].request("PATCH", "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts/kubevirt",
                          {"spec": {"configuration": {"developerConfiguration": {
                              "useEmulation": True}}}}, "application/merge-patch+json")
    t.eq(r.status, 200, "useEmulation on")
    rc, lines, _ = doctor(b["conf"], "--only", "nodes")
    t.eq((rc, fails(lines)), (0, []), "then nothing fails")
    one(lines, "ok", "nodes", r"^4 of 4 nodes run VMs \(KubeVirt's useEmulation", "VM nodes")
    one(lines, "warn", "nodes", r"useEmulation is on: guests run under software emulation",
        "slow: a warn")


@t.test(name="the reaper: never run (FAIL), a CronJob whose Jobs fail (FAIL), one that runs (ok)")
def reaper():
    b = broken()
    rc, lines, _ = doctor(b["conf"], "--only", "reaper")
    one(lines, "ok", "reaper", r"^no CronJob labvm-reaper in namespace labs: a host install",
        "no CronJob: a host install")
    line = one(lines, "FAIL", "reaper", r"^no pass of labvm-reaper for environment t960broken "
               r"is recorded", "never ran")
    t.ok(line[4] and "conf/crontab" in line[4] and "CronJob" in line[4], "the fix", line)
    import yaml
    with open(os.path.join(SRC, "conf", "k8s", "labvm-backend.yaml")) as f:
        cj = next(d for d in yaml.safe_load_all(f) if d and d.get("kind") == "CronJob")
    k = b["kube"]
    t.eq(k.request("POST", f"/apis/batch/v1/namespaces/{NS}/cronjobs", cj).status, 201,
         "the shipped CronJob applied")
    rc, lines, _ = doctor(b["conf"], "--only", "reaper")
    one(lines, "warn", "reaper", r"^the CronJob labvm-reaper was made \d+ s ago and has not run",
        "new, not run yet")
    rc, out = run_reaper(b["conf"])
    t.eq(rc, 0, "a pass of the reaper there", out[-400:])
    t.eq(cronjob_ran(k, False), 200, "recorded as a failed Job")
    rc, lines, _ = doctor(b["conf"], "--only", "reaper")
    line = one(lines, "FAIL", "reaper", r"^the CronJob labvm-reaper runs \(last \d+ s ago\) but "
               r"its Jobs do not succeed", "its Jobs fail")
    t.ok(line[4] and "describe cronjob labvm-reaper" in line[4], "the fix", line)
    t.eq(cronjob_ran(k, True), 200, "then a good one")
    rc, lines, _ = doctor(b["conf"], "--only", "reaper")
    t.eq((rc, fails(lines)), (0, []), "nothing fails")
    one(lines, "ok", "reaper", r"^the CronJob labvm-reaper ran \d+ s ago, its last success",
        "the CronJob")
    one(lines, "ok", "reaper", r"^labvm-reaper's last complete pass for environment t960broken",
        "the database's record of the pass")


# ------------------------------------------------------------- lessons
GOLDEN_PVC = "t960-golden-rwo"
GOLDEN_LESSON = json.dumps({
    "id": "t960-golden", "title": "t960 golden", "runtime": "vm", "minutes": 10,
    "image": "quay.io/containerdisks/debian:12", "disk": "golden", "golden_pvc": GOLDEN_PVC,
    "memory": "512Mi", "cpus": 1, "grader": [{"name": "true", "command": "true"}]})


@t.test(name="a golden PVC that is ReadWriteOnce: FAIL single_node (golden.c's decision) and the fix")
def golden_rwo():
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": GOLDEN_PVC, "annotations": {
               "labvm.io/image": "quay.io/containerdisks/debian:12"}},
           "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "standard",
                    "resources": {"requests": {"storage": "1Gi"}}}}
    t.require(kube.create("persistentvolumeclaims", pvc).status == 201, "the PVC made")
    try:
        wait_until(lambda: (kube.get("persistentvolumeclaims", GOLDEN_PVC).json.get("status") or
                            {}).get("phase") == "Bound", 30, what="Bound")
        cfg = conf("golden", lessons_dir=lessons("golden", files=(), extra=[
            ("t960-golden.json", GOLDEN_LESSON)]))
        rc, lines, out = doctor(cfg, "--only", "lessons")
        t.diag("labvm-doctor with a ReadWriteOnce golden PVC:\n" + out)
        t.eq(rc, 1, "exit 1")
        line = one(lines, "FAIL", "lessons", rf"^lesson t960-golden: golden PVC {GOLDEN_PVC} is "
                   r"not used: single_node .*boots from the containerDisk", "the decision")
        t.ok(line[4] and "ReadOnlyMany or ReadWriteMany" in line[4], "the fix", line)
        one(lines, "ok", "lessons", r"^1 lesson files pass labvm\.fcgi --check", "the file is fine")
    finally:
        kube.delete("persistentvolumeclaims", GOLDEN_PVC)


@t.test(name="a lesson that fails --check: FAIL with --check's own first error; a file labvm "
             "cannot load: FAIL, labvm.fcgi would not start")
def lesson_fails_check():
    bad_setup = json.dumps({
        "id": "t960-bad-setup", "title": "bad setup", "runtime": "vm", "minutes": 10,
        "image": "quay.io/containerdisks/debian:12", "disk": "containerdisk", "memory": "512Mi",
        "cpus": 1, "setup": "if [ -e /x ]; then\n  echo (\nfi\n",
        "grader": [{"name": "true", "command": "true"}]})
    d = lessons("badcheck", files=("linux-basics.json",),
                extra=[("t960-bad-setup.json", bad_setup)])
    cfg = conf("badcheck", lessons_dir=d)
    rc, lines, out = doctor(cfg, "--only", "lessons")
    t.diag("labvm-doctor with a lesson whose setup is not shell:\n" + out)
    t.eq(rc, 1, "exit 1")
    line = one(lines, "FAIL", "lessons", r"^t960-bad-setup\.json fails labvm\.fcgi --check \(1 "
               r"error\): setup: not a valid shell script: line \d+", "the lesson and the error")
    t.ok(line[4] and "labvm.fcgi --check" in line[4], "the fix names the check", line)
    for f in ("t960-bad-setup.json", "linux-basics.json"):
        r = subprocess.run([os.path.join(BIN, "labvm.fcgi"), "--check", os.path.join(d, f)],
                           capture_output=True, text=True, timeout=60)
        named = bool(find(lines, "FAIL", "lessons", "^" + re.escape(f)))
        t.eq(named, r.returncode != 0, f"{f}: the doctor's verdict is labvm.fcgi --check's")
    # a file labvm cannot even load (lessons_load): the doctor says labvm will not start
    with open(os.path.join(d, "t960-broken.json"), "w") as f:
        f.write('{"id": "t960-broken", "title": ')
    rc, lines, _ = doctor(cfg, "--only", "lessons")
    one(lines, "FAIL", "lessons", r"^t960-broken\.json fails labvm\.fcgi --check \(1 error\): "
        r"line 1, column \d+: not valid JSON", "the JSON error")
    one(lines, "FAIL", "lessons", r"^labvm\.fcgi cannot load the lessons and will not start",
        "labvm would not start")


# ------------------------------------------------------------ database
@t.test(name="a stale migration: FAIL naming the missing one and sql/migrate; migrated, ok again")
def stale_migration():
    newest = sorted(f[:-4] for f in os.listdir(os.path.join(SRC, "sql"))
                    if re.match(r"^\d{3}_.*\.sql$", f))[-1]
    db.query("DELETE FROM schema_migrations WHERE version = %s", newest)
    try:
        rc, lines, out = doctor(HEALTHY, "--only", "database")
        t.diag(f"labvm-doctor without {newest} recorded:\n" + out)
        t.eq(rc, 1, "exit 1")
        line = one(lines, "FAIL", "database", rf"^the database is not migrated to this build's "
                   rf"schema: {newest} missing", "the missing migration")
        t.ok(line[4] and line[4].startswith("run sql/migrate"), "the fix", line)
    finally:
        subprocess.run([os.path.join(SRC, "sql", "migrate"), env("LABVM_DATABASE")], check=True,
                       capture_output=True)
    rc, lines, _ = doctor(HEALTHY, "--only", "database")
    t.eq((rc, fails(lines)), (0, []), "sql/migrate applied it: nothing fails")


PGB = os.path.join(SRC, ".cache", "pgbouncer", "usr", "sbin", "pgbouncer")


def pgbouncer():
    """A PgBouncer of this suite's in front of the test PostgreSQL: database
    labvm_tx in transaction mode, labvm_session in session mode."""
    if "pgb" in other:
        return other["pgb"]
    import urllib.parse
    u = urllib.parse.urlsplit(env("LABVM_DATABASE"))
    d = os.path.join(STATE, "pgbouncer")
    os.makedirs(d)
    os.chmod(STATE, 0o755)
    shutil.chown(d, "postgres")
    server = f"host=127.0.0.1 port={u.port} dbname=labvm user={u.username} password={u.password}"
    with open(os.path.join(d, "pgbouncer.ini"), "w") as f:
        f.write(f"""[databases]
labvm_tx = {server} pool_mode=transaction
labvm_session = {server} pool_mode=session
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {PGB_PORT}
unix_socket_dir =
auth_type = plain
auth_file = {d}/users.txt
pool_mode = session
default_pool_size = 4
max_client_conn = 50
ignore_startup_parameters = extra_float_digits
logfile = {d}/pgbouncer.log
pidfile = {d}/pgbouncer.pid
""")
    with open(os.path.join(d, "users.txt"), "w") as f:
        f.write(f'"{u.username}" "{u.password}"\n')
    for n in ("pgbouncer.ini", "users.txt"):
        shutil.chown(os.path.join(d, n), "postgres")
        os.chmod(os.path.join(d, n), 0o600)
    p = subprocess.Popen(["runuser", "-u", "postgres", "--", PGB, os.path.join(d, "pgbouncer.ini")],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    other["pgb"] = p
    import socket
    wait_until(lambda: socket.socket().connect_ex(("127.0.0.1", PGB_PORT)) == 0, 15,
               what="pgbouncer listening")
    return p


@t.test(name="behind PgBouncer in transaction mode: FAIL (session locks, LISTEN/NOTIFY), with "
             "the pool mode as the fix; in session mode: ok")
def pgbouncer_transaction_mode():
    t.require(os.access(PGB, os.X_OK), f"PgBouncer at {PGB} (tests/deps unpacks Debian's)")
    pgbouncer()
    import urllib.parse
    u = urllib.parse.urlsplit(env("LABVM_DATABASE"))
    dsn = lambda db_: (f"postgresql://{u.username}:{u.password}@127.0.0.1:{PGB_PORT}/{db_}"
                       "?connect_timeout=5")
    rc, lines, out = doctor(conf("pgb-tx", database=dsn("labvm_tx"), lessons_dir=DEMO),
                            "--only", "database")
    t.diag("labvm-doctor through PgBouncer, pool_mode = transaction:\n" + out)
    t.eq(rc, 1, "exit 1")
    line = one(lines, "FAIL", "database", r"^LISTEN/NOTIFY does not deliver through the "
               r"configured connection", "NOTIFY lost")
    t.ok(line[4] and "pool_mode = session" in line[4], "the fix names the pool mode", line)
    t.ok(find(lines, "FAIL", "database", r"two open connections were served by one server "
              r"process|session-level advisory lock taken in one statement is not held"),
         "the session locks' line", lines)
    one(lines, "ok", "database", r"migrated", "the statements themselves work")
    rc, lines, out = doctor(conf("pgb-session", database=dsn("labvm_session"), lessons_dir=DEMO),
                            "--only", "database")
    t.eq((rc, fails(lines)), (0, []), "session mode: nothing fails", out)
    one(lines, "ok", "database", r"LISTEN/NOTIFY delivers", "session mode keeps the session")


def cleanup():
    if "pgb" in other:
        try:
            os.killpg(other["pgb"].pid, signal.SIGTERM)
            other["pgb"].wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    if "sim" in other:
        other["sim"].stop()
    for table in ("metric_counters", "pool_vms", "pool_warm"):
        db.query(f"DELETE FROM {table} WHERE environment = 't960broken'")


try:
    t.done()
finally:
    cleanup()
