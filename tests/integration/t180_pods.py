#!/usr/bin/python3
"""Pod lessons: the Pod labvm submits (zero capabilities, files Secret owned
by the Pod), readiness from the Pod's Ready condition, named failures,
pod_capacity apart from the VM seats, one session per user across runtimes,
the end and the reaper (timeout: 400)."""
import base64
import concurrent.futures
import os
import re
import subprocess
import time
import uuid

import utf8text
from labtest import PREFIX, Api, Db, Kube, env, reset_world, users, vm_of, wait_until, reaper_argv, restore_fence
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
ENV = env("LABVM_ENVIRONMENT")
POD_CAPACITY = int(re.search(r"(?m)^pod_capacity = (\d+)$",
                             open(env("LABVM_CONF")).read()).group(1))
LAB_PODS = f"{PREFIX}/lab-pod=true"


def reap(*args):
    r = subprocess.run(reaper_argv(*args), capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, LABVM_CONF=env("LABVM_CONF")))
    return r.returncode, r.stdout + r.stderr


def summary(out, key):
    m = re.search(rf"\b{key}=(\d+)", out)
    return int(m.group(1)) if m else None


def in_pod(name, cmd):
    return kube.guest_exec(name, cmd)


def gone(kind, name):
    r = kube.get(kind, name)
    return r.status == 404


@t.test(name="a pod lesson starts a Pod with zero capabilities and becomes ready")
def pod_lesson_ready():
    api = Api("student361")
    r = api.start("k8s-pod-intro")
    t.require(r.status == 201, f"start: {r}")
    s = r.json
    t.eq((s["runtime"], s["state"], s["disk"]["source"]), ("pod", "starting", None),
         "runtime pod, no disk")
    s = api.wait_state(s["id"], ("ready", "failed"), 60)
    t.eq(s["state"], "ready", "ready", s.get("error"))
    t.ok(s["running_at"] and s["ready_at"], "both stages recorded")
    name = vm_of(s)
    pod = kube.get("pods", name).json
    labels = pod["metadata"]["labels"]
    t.eq({k: labels.get(f"{PREFIX}/{k}") for k in ("lab-session", "session-id", "environment",
                                                   "lesson")},
         {"lab-session": "true", "session-id": s["id"], "environment": ENV,
          "lesson": "k8s-pod-intro"}, "the four labels on the Pod")
    spec = pod["spec"]
    c = spec["containers"][0]
    t.eq(spec.get("automountServiceAccountToken"), False, "no service-account token")
    t.eq(spec.get("restartPolicy"), "Never", "restartPolicy Never")
    t.eq(c["securityContext"]["capabilities"], {"drop": ["ALL"]}, "drop ALL")
    t.eq(c["securityContext"]["allowPrivilegeEscalation"], False, "no privilege escalation")
    t.eq(spec["securityContext"]["seccompProfile"]["type"], "RuntimeDefault", "seccomp")
    t.eq(c["resources"]["limits"]["memory"], "256Mi", "memory limit from the lesson")
    t.ok("requests" in c["resources"], "requests set")
    t.eq(c["readinessProbe"]["exec"]["command"], ["test", "-e", "/run/labvm/ready"],
         "readiness is an exec probe on the flag")
    cond = {x["type"]: x["status"] for x in pod["status"]["conditions"]}
    t.eq(cond.get("Ready"), "True", "the Pod's own Ready condition")
    sec = kube.get("secrets", name + "-files").json
    owners = sec["metadata"].get("ownerReferences") or []
    t.eq([(o["kind"], o["name"], o["uid"]) for o in owners],
         [("Pod", name, pod["metadata"]["uid"])], "the Secret is owned by the Pod")
    t.ok("setup.sh" in sec["data"] and "f0" in sec["data"], "setup and files in the Secret")
    out = in_pod(name, "cat /root/README.txt; cat /srv/app/app.conf; grep CapEff /proc/self/status")
    t.eq(out["exit_code"], 0, "exec in the lab Pod", out)
    t.ok(out["stdout"].startswith("1. Change the port"), "the lab file is in place", out)
    t.ok("port = 8080" in out["stdout"], "setup ran", out)
    t.ok("CapEff:\t0000000000000000" in out["stdout"], "no capabilities", out)
    t.ok(in_pod(name, "mount -t tmpfs none /mnt")["exit_code"] != 0, "mount refused")
    # one session per user across runtimes
    r = api.start("linux-basics")
    t.eq((r.status, r.json.get("error")), (409, "session_exists"), "no VM beside the Pod")
    t.eq(r.json["session"]["id"], s["id"], "names the open pod session")
    # the end: Pod and Secret deleted explicitly
    r = api.end(s["id"])
    t.eq((r.status, r.json["state"]), (200, "ended"), "ended")
    wait_until(lambda: gone("pods", name), 20, what="Pod deleted")
    t.ok(gone("secrets", name + "-files"), "Secret deleted")
    row = db.one("SELECT deleted_at IS NOT NULL FROM session_vms WHERE session_id = %s", s["id"])
    t.eq(row, (True,), "recorded as deleted")


def step_left(name):
    """The timed-out step's processes still in the Pod (pgrep's pattern does
    not match the pgrep's own shell)."""
    return in_pod(name, "pgrep -af 'sleep 100[0]'; true")["stdout"].strip()


@t.test(name="grading by exec: exit codes from the error channel, output, timeouts; nothing "
             "of a timed-out step is left running in the Pod")
def grading():
    api = Api("student365")
    s = api.wait_state(api.start("k8s-pod-intro").json["id"], ("ready",), 60)
    r = api.grade(s["id"])
    t.eq((r.status, r.json["passed"], r.json["total"]), (200, 0, 2), "nothing done yet", r)
    t.eq([x["exit_code"] for x in r.json["steps"]], [1, 2], "grep's exit codes (2: no such file)")
    in_pod(vm_of(s), "sed -i 's/port = 8080/port = 8081/' /srv/app/app.conf; "
                     "echo hello > /root/hello.txt")
    r = api.grade(s["id"])
    t.eq((r.json["passed"], r.json["total"]), (2, 2), "both steps pass", r.json)
    t.eq(api.get(s["id"]).json["last_grade"]["passed"], 2, "stored as last_grade")
    api.end(s["id"])

    s = api.wait_state(api.start("test-pod-grade").json["id"], ("ready",), 60)
    r = api.grade(s["id"])
    t.eq(r.status, 200, "graded", r)
    st = {x["name"]: x for x in r.json["steps"]}
    t.eq((st["passes"]["passed"], st["passes"]["exit_code"]), (True, 0), "Success: 0")
    f = st["fails with 3"]
    t.eq((f["passed"], f["exit_code"]), (False, 3), "NonZeroExitCode: 3")
    t.eq(f["output"], "to-out\nto-err\n", "stdout then stderr")
    to = st["times out"]
    t.eq((to["passed"], to["exit_code"], to.get("timed_out")), (False, None, True), "timed out")
    # hanging up a non-tty exec kills nothing (CONFORMANCE.md "Pods / exec"):
    # labvm's step wrapper kills the step in the Pod
    try:
        wait_until(lambda: not step_left(vm_of(s)), 30, 0.2, "the timed-out step gone")
    except TimeoutError:
        pass
    t.eq(step_left(vm_of(s)), "", "nothing of the timed-out step is left running in the Pod")
    t.eq(in_pod(vm_of(s), "test -e /tmp/step-outlived-its-timeout")["exit_code"], 1,
         "... and it never got past its sleep")
    t.eq(st["quotes & pipes survive"]["passed"], True, "the command reaches sh -c intact",
         st["quotes & pipes survive"])
    api.end(s["id"])


@t.test(name="setup failing names its exit code and output; bad image and no node are named")
def named_failures():
    api = Api("student362")
    s = api.start("test-pod-broken").json
    s = api.wait_state(s["id"], ("failed", "ready"), 60)
    t.eq(s["state"], "failed", "failed")
    t.ok(s["error"].startswith("setting_up: the lab setup failed with exit code 3"), s["error"])
    t.ok("cannot find /opt/thing" in s["error"] and "preparing" in s["error"],
         "the output's tail", s["error"])
    wait_until(lambda: gone("pods", vm_of(s)), 20, what="the failed Pod deleted")
    t.ok(gone("secrets", vm_of(s) + "-files"), "and its Secret")

    s = api.start("test-pod-badimage").json
    s = api.wait_state(s["id"], ("failed", "ready"), 60)
    t.eq(s["state"], "failed", "failed")
    t.ok(re.match(r"^booting: the image could not be pulled \((ErrImagePull|ImagePullBackOff)",
                  s["error"]), s["error"])

    # a Pod no node can ever hold: refused at the press (nodefit.h), named
    r = api.start("test-pod-huge")
    t.eq((r.status, r.json.get("error")), (409, "never_fits"), "refused at once", r.json)
    t.ok("its Pod needs 512.0 GiB of memory; the largest node" in r.json.get("message", ""),
         "names the need and the node", r.json)


@t.test(name="a Pod's setup failing with multi-byte output across the 1023-byte cut: failed, "
             "not stuck; the error is the message cut before the character; Pod deleted")
def named_failure_utf8():
    out, rc = utf8text.setup_output("test-pod-utf8")
    full = ("setting_up: the lab setup failed with exit code %d: " % rc
            + utf8text.termination_message(out)).encode()
    t.require(utf8text.splits_at(full, 1023), "the termination message straddles byte 1023")
    api = Api("student383")
    s = api.wait_state(api.start("test-pod-utf8").json["id"], ("failed", "ready"), 60)
    t.eq((s["state"], s["stage"]), ("failed", "setting_up"), "failed in setting_up")
    t.eq((s.get("error") or "").encode(), utf8text.clean_cut(full, 1023),
         "the error: the whole message cut before the character that did not fit")
    t.ok("\u2018count\u2019 \u672a\u5b9a\u7fa9\u3067\u3059 \u25cf" in s["error"], "the setup's text kept")
    wait_until(lambda: gone("pods", vm_of(s)), 20, what="the failed Pod deleted")
    t.ok(gone("secrets", vm_of(s) + "-files"), "and its Secret")
    t.ok(vm_of(s) not in {p["metadata"]["name"] for p in kube.list("pods", LAB_PODS)},
         "its Pod seat is free")


@t.test(name="Pod grading output that is not UTF-8 (0xff, stray continuation bytes, NUL, a "
             "cut character) or long: U+FFFD in place, cut on a character, and the grade is "
             "stored (last_grade), not shown once and lost")
def grading_bytes():
    api = Api("student384")
    s = api.wait_state(api.start("test-pod-bytes").json["id"], ("ready",), 60)
    r = api.grade(s["id"])
    t.eq(r.status, 200, "graded", r)
    steps = (r.json or {}).get("steps") or [{}, {}]
    bad = steps[0].get("output") or ""
    t.eq(bad, "bad \ufffd \ufffd\ufffd cut \ufffd\ufffd nul \ufffd end\nerr \ufffd\n",
         "each ill-formed byte and the NUL are U+FFFD; stdout then stderr")
    t.eq((steps[0].get("passed"), steps[0].get("exit_code")), (False, 1), "its exit code")
    long_out = steps[1].get("output") or ""
    body = long_out.removesuffix("\n[output truncated]")
    t.ok(long_out.endswith("\n[output truncated]") and len(body.encode()) <= 8192
         and ("\u6587\u5b57\u25cf" * 1500).startswith(body) and len(body.encode()) > 8180,
         "a long multi-byte output is cut on a character", long_out[-40:])
    g = api.get(s["id"]).json
    stored = g.get("last_grade") or {}
    t.eq([x.get("output") for x in stored.get("steps") or []], [bad, long_out],
         "the grade is stored with the session as it was shown")
    t.ok(db.one("SELECT last_grade IS NOT NULL FROM sessions WHERE id = %s", s["id"])[0],
         "last_grade written")
    api.end(s["id"])


@t.test(name="pod_capacity is counted in the cluster apart from VM seats, strict under a burst")
def capacity():
    who = users(370, POD_CAPACITY + 4)

    def start(u):
        return Api(u).start("k8s-pod-intro")
    with concurrent.futures.ThreadPoolExecutor(len(who)) as ex:
        rs = list(ex.map(start, who))
    ok = [r for r in rs if r.status == 201]
    full = [r for r in rs if r.status == 503]
    t.eq((len(ok), len(full)), (POD_CAPACITY, 4), "exactly pod_capacity admitted",
         [r.status for r in rs])
    t.ok(all(r.json["error"] == "capacity_full" and r.header("Retry-After") for r in full),
         "capacity_full with Retry-After")
    t.eq(full[0].json.get("capacity"), POD_CAPACITY, "the pod capacity is named")
    t.eq(len(kube.list("pods", LAB_PODS)), POD_CAPACITY, "that many lab Pods in the cluster")
    # the VM seats are untouched by the Pods
    vm_user = Api("student369")
    r = vm_user.start("linux-basics")
    t.eq(r.status, 201, "a VM lesson still starts", r)
    vm_user.end(r.json["id"])
    # terminating Pods are counted: a finalizer holds an ended one in Terminating
    first = ok[0].json
    kube.patch("pods", vm_of(first), {"metadata": {"finalizers": ["example.com/hold"]}})
    Api(who[rs.index(ok[0])]).end(first["id"])
    wait_until(lambda: kube.get("pods", vm_of(first)).json["metadata"].get("deletionTimestamp"),
               10, what="the ended Pod terminating")
    late = Api("student390")
    r = late.start("k8s-pod-intro")
    t.eq((r.status, r.json.get("error")), (503, "capacity_full"),
         "a terminating Pod still takes its place")
    kube.patch("pods", vm_of(first), {"metadata": {"finalizers": None}})
    wait_until(lambda: gone("pods", vm_of(first)), 20, what="the ended Pod gone")
    r = late.start("k8s-pod-intro")
    t.eq(r.status, 201, "admitted once it is gone", r)
    for u in who + ["student390"]:
        Api(u).end_current()


@t.test(name="reaper: a ready session whose Pod died fails; orphan Pods go; others untouched")
def reaper_pods():
    api = Api("student363")
    s = api.wait_state(api.start("k8s-pod-intro").json["id"], ("ready",), 60)
    name = vm_of(s)
    # the container dies (as an OOM kill would): restartPolicy Never, phase Failed
    r = kube.request("POST", f"/_sim/guests/{kube.ns}/{name}/kill")
    t.eq(r.status, 200, "killed", r)
    wait_until(lambda: kube.get("pods", name).json["status"]["phase"] == "Failed", 20,
               what="the Pod Failed")
    rc, out = reap()
    t.eq(rc, 0, "exit status", out)
    t.eq(summary(out, "vanished"), 1, "counted", out)
    row = db.one("SELECT state, error FROM sessions WHERE id = %s", s["id"])
    t.eq(row[0], "failed", "the session failed")
    t.ok(row[1].startswith("ready: the container ended (Error) with exit code 137"), "named",
         row[1])
    wait_until(lambda: gone("pods", name), 20, what="its Pod deleted")
    t.ok(gone("secrets", name + "-files"), "and its Secret")

    def lab_pod(pname, environment=ENV):
        r = kube.create("pods", {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pname, "labels": {
                f"{PREFIX}/lab-session": "true", f"{PREFIX}/environment": environment,
                f"{PREFIX}/session-id": str(uuid.uuid4())}},
            "spec": {"containers": [{"name": "lab", "image": "debian:12",
                                     "command": ["sleep", "infinity"]}]}})
        assert r.status == 201, r
    lab_pod("orphan-pod-1")
    lab_pod("prod-pod-1", environment="prod")
    rc, out = reap("--grace", "0")
    t.eq((rc, summary(out, "orphan_pods")), (0, 1), "one orphan Pod", out)
    wait_until(lambda: gone("pods", "orphan-pod-1"), 20, what="orphan Pod deleted")
    t.ok(not gone("pods", "prod-pod-1"), "another environment's Pod is untouched")
    kube.delete("pods", "prod-pod-1")
    # a VM's launcher pod carries the lab labels but is never a lab Pod
    vm = Api("student364")
    v = vm.wait_state(vm.start("linux-basics").json["id"], ("ready",), 60)
    rc, out = reap("--grace", "0")
    t.eq(summary(out, "orphan_pods"), 0, "launcher pods are not orphans", out)
    t.eq(db.one("SELECT state FROM sessions WHERE id = %s", v["id"]), ("ready",),
         "the VM session is untouched")
    vm.end(v["id"])


@t.test(name="networkpolicy.yaml: nothing reaches a lab Pod; it reaches the internet only")
def network_policy():
    import yaml
    np_path = f"/apis/networking.k8s.io/v1/namespaces/{kube.ns}/networkpolicies"
    src = os.environ.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    probe = ("python3 -c \"import socket,sys; s=socket.socket(); s.settimeout(2)\n"
             "try:\n s.connect((sys.argv[1], int(sys.argv[2]))); print('open')\n"
             "except ConnectionRefusedError: print('refused')\n"
             "except socket.timeout: print('timeout')\n"
             "except OSError as e: print('error-%d' % e.errno)\" ")
    a, b = Api("student366"), Api("student367")
    sa = a.wait_state(a.start("k8s-pod-intro").json["id"], ("ready",), 60)
    sb = b.wait_state(b.start("k8s-pod-intro").json["id"], ("ready",), 60)
    pa, pb = vm_of(sa), vm_of(sb)
    ip_a = kube.get("pods", pa).json["status"]["podIP"]
    # a student's server in Pod A (no capabilities needed above port 1024)
    in_pod(pa, "setsid python3 -m http.server 8080 >/dev/null 2>&1 & sleep 1")
    try:
        # the stack is fenced from its start (the shipped policies, as an operator
        # applies them)
        got = in_pod(pb, probe + f"{ip_a} 8080")["stdout"].strip()
        t.eq(got, "timeout", "another lab Pod does not reach it (dropped)", got)
        t.eq(in_pod(pa, probe + "203.0.113.10 80")["stdout"].strip(), "open",
             "the lab Pod reaches the internet")
        t.eq(in_pod(pa, probe + f"{kube.get('pods', pb).json['status']['podIP']} 8080")
             ["stdout"].strip(), "timeout", "but no other Pod")
        # unfenced on purpose, for a moment: proof that it was the policy
        for p in kube.request("GET", np_path).json.get("items", []):
            kube.request("DELETE", f"{np_path}/{p['metadata']['name']}")
        time.sleep(1.0)
        t.eq(in_pod(pb, probe + f"{ip_a} 8080")["stdout"].strip(), "open",
             "the policies gone, it is reached (it was the policy)")
        with open(os.path.join(src, "conf", "k8s", "networkpolicy.yaml")) as f:
            for pol in yaml.safe_load_all(f):
                r = kube.request("POST", np_path, pol)
                t.eq(r.status, 201, f"{pol['metadata']['name']} applied again", r.json)
        time.sleep(1.0)
        t.eq(in_pod(pb, probe + f"{ip_a} 8080")["stdout"].strip(), "timeout",
             "applied again, it is not")
    finally:
        restore_fence(kube)
        a.end(sa["id"])
        b.end(sb["id"])


t.done()
