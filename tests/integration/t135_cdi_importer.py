#!/usr/bin/python3
"""A `disk: datavolume` lesson (fresh-disk) beside pod lessons, with CDI's
importer pod as a real cluster has it (issue #25 item 4): the pod inherits
the DataVolume's lab labels through the PVC and has no kubevirt.io key, yet
it is not a lab Pod: it takes no place of pod_capacity, the reaper neither
lists nor deletes it (a warm pool VM's import included), and the lab-Pod
NetworkPolicy does not select it, so CDI's progress scrape and the registry
mirror at a private address still work. Lab Pods carry labvm.io/lab-pod;
a Pod of the previous release (no mark) is still fenced and reaped
(timeout: 300)."""
import concurrent.futures
import os
import re
import shlex
import subprocess
import uuid

import yaml

from labtest import PREFIX, Api, Db, Kube, env, reset_world, users, vm_of, wait_until
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
ENV = env("LABVM_ENVIRONMENT")
BIN = env("LABVM_BIN")
POD_CAPACITY = int(re.search(r"(?m)^pod_capacity = (\d+)$",
                             open(env("LABVM_CONF")).read()).group(1))
SRC = os.environ.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
NP = f"/apis/networking.k8s.io/v1/namespaces/{kube.ns}/networkpolicies"
OP = Api("operator")


def run(exe, *args):
    r = subprocess.run([os.path.join(BIN, exe), *args], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, LABVM_CONF=env("LABVM_CONF")))
    return r.returncode, r.stdout + r.stderr


def summary(out, key):
    m = re.search(rf"\b{key}=(\d+)", out)
    return int(m.group(1)) if m else None


def hold(on):
    r = kube.request("POST", "/_sim/cdi", {"hold": on})
    assert r.status == 200, r
    return r.json


def importers():
    return [p for p in kube.list("pods", "cdi.kubevirt.io=importer")]


def running_importer(lab_label=f"{PREFIX}/lab-session"):
    for p in importers():
        st = (p["status"].get("containerStatuses") or [{}])[0].get("state", {})
        if p["status"].get("phase") == "Running" and "running" in st and \
                p["metadata"]["labels"].get(lab_label):
            return p
    return None


def dv_of(session):
    vm = kube.get("virtualmachines", vm_of(session)).json
    return vm["spec"]["dataVolumeTemplates"][0]["metadata"]["name"]


def dv_status(name):
    return kube.get("datavolumes", name).json.get("status") or {}


@t.test(name="the importer pod carries the lab labels and takes no place of pod_capacity")
def capacity():
    hold(True)
    vm_user = Api("student391")
    try:
        s = vm_user.start("fresh-disk").json
        t.require(s.get("id"), f"fresh-disk started: {s}")
        imp = wait_until(running_importer, 60, what="the importer pod running")
        labels = imp["metadata"]["labels"]
        t.eq((labels.get(f"{PREFIX}/lab-session"), labels.get(f"{PREFIX}/session-id")),
             ("true", s["id"]), "it inherited the session's labels (through the PVC)")
        t.ok("kubevirt.io" not in labels and f"{PREFIX}/lab-pod" not in labels,
             "no kubevirt.io key and no lab-pod mark", labels)
        who = users(392, POD_CAPACITY)
        with concurrent.futures.ThreadPoolExecutor(len(who)) as ex:
            rs = list(ex.map(lambda u: Api(u).start("k8s-pod-intro"), who))
        t.eq([r.status for r in rs], [201] * POD_CAPACITY,
             f"all {POD_CAPACITY} pod lessons admitted beside the import",
             [r.json.get("error") for r in rs])
        pods = kube.list("pods", f"{PREFIX}/lab-pod=true")
        t.eq(len(pods), POD_CAPACITY, "the lab Pods carry the lab-pod mark")
        for u in who:
            Api(u).end_current()
    finally:
        hold(False)
    s = vm_user.wait_state(s["id"], ("ready", "failed"), 120)
    t.eq(s["state"], "ready", "the fresh-disk session turns ready", s.get("error"))
    vm_user.end(s["id"])


@t.test(name="the reaper neither lists nor deletes an importer pod (a warm pool VM's import)")
def reaper():
    reset_world(kube, db)
    hold(True)
    try:
        r = OP.request("POST", "/api/operator/pool", {"lesson": "fresh-disk", "count": 1})
        t.require(r.status == 201, f"warm request: {r}")
        rc, out = run("labvm-pool", "tick")
        t.require(rc == 0, out)
        imp = wait_until(lambda: running_importer(f"{PREFIX}/pool"), 60,
                         what="the pool VM's importer running")
        name = imp["metadata"]["name"]
        t.ok(f"{PREFIX}/session-id" not in imp["metadata"]["labels"],
             "a pool disk's importer: pool label, no session id", imp["metadata"]["labels"])
        rc, out = run("labvm-reaper", "--dry-run", "--grace", "0")
        t.eq(rc, 0, "dry run", out)
        t.ok(name not in out, "the dry run names no importer pod", out)
        rc, out = run("labvm-reaper", "--grace", "0")
        t.eq((rc, summary(out, "orphan_pods")), (0, 0), "no orphan Pods", out)
        t.eq(kube.get("pods", name).json.get("metadata", {}).get("deletionTimestamp"), None,
             "the importer pod is left to CDI")
        # a Pod of the previous release (no mark, no owner, no CDI label) is still reaped
        old = f"old-lab-pod-{uuid.uuid4().hex[:6]}"
        kube.create("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": old, "labels": {f"{PREFIX}/lab-session": "true",
                                    f"{PREFIX}/environment": ENV,
                                    f"{PREFIX}/session-id": str(uuid.uuid4())}},
            "spec": {"containers": [{"name": "lab", "image": "debian:12",
                                     "command": ["sleep", "infinity"]}]}})
        rc, out = run("labvm-reaper", "--grace", "0")
        t.eq(summary(out, "orphan_pods"), 1, "an unmarked Pod of the previous release is reaped",
             out)
        wait_until(lambda: kube.get("pods", old).status == 404, 20, what="old Pod deleted")
    finally:
        hold(False)
    reset_world(kube, db)


@t.test(name="networkpolicy.yaml: the importer is not fenced as a lab Pod; lab Pods still are")
def network_policy():
    import netprobe
    made = []
    with open(os.path.join(SRC, "conf", "k8s", "networkpolicy.yaml")) as f:
        for pol in yaml.safe_load_all(f):
            r = kube.request("POST", NP, pol)
            t.ok(r.status in (201, 409), f"{pol['metadata']['name']} applied", r.json)
            if r.status == 201:
                made.append(pol["metadata"]["name"])
    api = Api("student398")
    try:
        hold(True)
        s = api.start("fresh-disk").json
        imp = wait_until(running_importer, 60, what="the importer running")
        ip = imp["status"]["podIP"]
        dv = dv_of(s)
        wait_until(lambda: dv_status(dv).get("progress", "N/A") not in ("N/A", "0.00%"),
                   30, what="progress scraped through the policy")
        t.ok(True, "CDI's scrape reaches the importer (progress %s)" % dv_status(dv)["progress"])
        reqs = hold(False)["mirror"]["requests"]
        t.ok(any(r["from"] == ip for r in reqs), "the importer reached the registry mirror at a "
             "private address", reqs)
        s = api.wait_state(s["id"], ("ready", "failed"), 120)
        t.eq(s["state"], "ready", "the import completes and the session is ready", s.get("error"))
        t.eq(dv_status(dv).get("restartCount"), 0, "the importer never failed")
        api.end(s["id"])
        # an unmarked Pod of the previous release is still fenced (labvm-lab-pods-unmarked)
        old = "old-lab-pod-fenced"
        kube.create("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": old, "labels": {f"{PREFIX}/lab-session": "true",
                                    f"{PREFIX}/environment": "other"}},
            "spec": {"containers": [{"name": "lab", "image": "debian:12",
                                     "command": ["sleep", "infinity"]}]}})
        wait_until(lambda: kube.get("pods", old).json["status"].get("phase") == "Running", 30,
                   what="the unmarked Pod running")
        mirror = kube.request("GET", "/_sim/cdi").json["mirror"]["address"].split(":")
        probe = netprobe.script()
        got = kube.guest_exec(old, f"python3 -c {shlex.quote(probe)} {mirror[0]} {mirror[1]}")
        got = got["stdout"].strip()
        t.ok(got in ("timeout", "refused"), "it cannot reach a private address", got)
        got = kube.guest_exec(old, f"python3 -c {shlex.quote(probe)} 203.0.113.10 80")
        got = got["stdout"].strip()
        t.eq(got, "open", "but the internet")
        kube.delete("pods", old)
    finally:
        hold(False)
        for name in made:
            kube.request("DELETE", f"{NP}/{name}")
        api.end_current()


t.done()
