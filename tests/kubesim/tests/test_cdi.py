#!/usr/bin/python3
"""kubesim: CDI's importer pods, as CDI 1.66 runs them (CONFORMANCE.md
"Storage / CDI"): a VM's dataVolumeTemplate labels reach the DataVolume, its
PVC and then the importer pod (legacy importer-<pvc>, populator
prime-<uid> / importer-prime-<uid>); the pod has a pod IP and serves its
progress on :8443, which CDI's controller Pod scrapes from namespace cdi; it
reads images only from the registry mirror at a private address, so an
egress policy that excepts private ranges makes the import fail (CrashLoop,
the reason on the claim and the DataVolume), and one that denies ingress
leaves the progress at N/A while the import still completes (timeout: 240)."""
import json
import subprocess

from simlib import DVS, EVENTS, KUBESIM, NS, PODS, PVCS, VMS, Sim, vm, wait_for
from tap import T

t = T()
sim = Sim("--nodes", "2")                 # the populator flow: the default
A = sim.admin
NP = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"
LAB = {"labvm.io/lab-session": "true", "labvm.io/session-id": "s-1",
       "labvm.io/environment": "test", "labvm.io/lesson": "fresh-disk"}
PRIVATE = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]


def hold(on):
    r = A.post("/_sim/cdi", {"hold": on})
    assert r.status == 200, r.json
    return r.json["mirror"]


def dv_vm(name, labels=LAB, url="docker://quay.io/containerdisks/debian:12", ann=None):
    v = vm(name, disk="dv", claim=f"{name}-disk", labels={"app": "x"})
    v["spec"]["dataVolumeTemplates"] = [{
        "metadata": {"name": f"{name}-disk", "labels": dict(labels),
                     "annotations": dict(ann or {})},
        "spec": {"source": {"registry": {"url": url}},
                 "storage": {"resources": {"requests": {"storage": "1Gi"}}}}}]
    return v


def get(path):
    r = A.get(path)
    return r.json if r.status == 200 else None


def pod(name):
    return get(f"{PODS}/{name}")


def running_pod(name):
    p = pod(name)
    return p if p and p["status"].get("phase") == "Running" and \
        "running" in (p["status"].get("containerStatuses") or [{}])[0].get("state", {}) else None


def dv(name):
    return get(f"{DVS}/{name}") or {}


def gone(path):
    return A.get(path).status == 404


def lab_like_policy(name, selector):
    """labvm's lab-Pod policy shape: no ingress, egress to the internet less
    private ranges."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"podSelector": {"matchLabels": selector},
                     "policyTypes": ["Ingress", "Egress"],
                     "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": PRIVATE}}]}]}}


@t.test
def populator_labels_and_ownership():
    hold(True)
    t.eq(A.post(VMS, dv_vm("pop")).status, 201, "VM with a dataVolumeTemplate")
    d = wait_for(lambda: get(f"{DVS}/pop-disk"), 5, what="DataVolume")
    vmo = get(f"{VMS}/pop")
    t.eq({k: d["metadata"]["labels"].get(k) for k in LAB}, LAB,
         "the template's labels are the DataVolume's")
    t.eq(d["metadata"]["labels"].get("kubevirt.io/created-by"), vmo["metadata"]["uid"],
         "plus kubevirt.io/created-by: the VM's uid")
    target = wait_for(lambda: get(f"{PVCS}/pop-disk"), 5, what="target PVC")
    t.eq({k: target["metadata"]["labels"].get(k) for k in LAB}, LAB, "the PVC has them too")
    t.eq(target["spec"].get("dataSourceRef", {}).get("kind"), "VolumeImportSource",
         "populator flow: the target names a VolumeImportSource")
    uid = target["metadata"]["uid"]
    p = wait_for(lambda: running_pod(f"importer-prime-{uid}"), 30,
                 what="importer-prime-<uid> running")
    prime = get(f"{PVCS}/prime-{uid}")
    t.ok(prime is not None, "the prime claim prime-<uid> exists")
    t.ok(not any(k.startswith("labvm.io/") for k in prime["metadata"].get("labels") or {}),
         "the prime claim has only CDI's labels", prime["metadata"].get("labels"))
    t.eq([(o["kind"], o["name"], o.get("controller")) for o in
          prime["metadata"]["ownerReferences"]], [("PersistentVolumeClaim", "pop-disk", True)],
         "the prime claim is controlled by the target")
    labels = p["metadata"]["labels"]
    t.eq({k: labels.get(k) for k in LAB}, LAB, "the importer pod carries the target's labels")
    t.eq((labels.get("app"), labels.get("cdi.kubevirt.io")),
         ("containerized-data-importer", "importer"), "and CDI's own")
    t.ok("kubevirt.io" not in labels, "and no kubevirt.io key", labels)
    t.eq([(o["kind"], o["name"], o.get("controller")) for o in p["metadata"]["ownerReferences"]],
         [("PersistentVolumeClaim", f"prime-{uid}", True)], "owned by the prime claim")
    t.eq(p["spec"]["containers"][0]["ports"],
         [{"name": "metrics", "containerPort": 8443, "protocol": "TCP"}], "metrics port 8443")
    t.ok(p["status"].get("podIP", "").startswith("10."), "an address of the pod network",
         p["status"].get("podIP"))
    # the controller's scrape of the held transfer reaches the target claim
    wait_for(lambda: (get(f"{PVCS}/pop-disk")["metadata"]["annotations"]
                      .get("cdi.kubevirt.io/storage.populator.progress") or "").startswith("50"),
             15, what="progress 50% on the target claim")
    wait_for(lambda: dv("pop-disk")["status"].get("progress") == "50.00%", 5,
             what="the DataVolume's progress from its claim")
    t.ok(True, "the DataVolume's progress follows its claim's")
    t.eq(dv("pop-disk")["status"].get("phase"), "ImportInProgress", "ImportInProgress")
    cdi = A.get("/api/v1/namespaces/cdi/pods").json["items"]
    t.eq([c["metadata"]["labels"].get("cdi.kubevirt.io") for c in cdi], ["cdi-deployment"],
         "the scraper is CDI's controller Pod in namespace cdi")
    reg = hold(False)
    t.ok(any(r["from"] == p["status"]["podIP"] for r in reg["requests"]),
         "the mirror was asked from the importer's pod IP", reg)
    wait_for(lambda: dv("pop-disk").get("status", {}).get("phase") == "Succeeded", 20,
             what="Succeeded")
    t.eq(get(f"{PVCS}/pop-disk")["status"]["phase"], "Bound", "the target bound (rebind)")
    wait_for(lambda: gone(f"{PODS}/importer-prime-{uid}"), 10, what="importer pod deleted")
    wait_for(lambda: gone(f"{PVCS}/prime-{uid}"), 10, what="prime claim deleted")
    t.ok(True, "importer pod and prime claim gone after the import")
    A.delete(f"{VMS}/pop")


@t.test
def legacy_flow_and_denied_scrape():
    # the DataVolume's own annotation picks the legacy flow (CDI's AnnUsePopulator)
    hold(True)
    r = A.post(VMS, dv_vm("leg", ann={"cdi.kubevirt.io/storage.usePopulator": "false"}))
    t.eq(r.status, 201, "VM")
    p = wait_for(lambda: running_pod("importer-leg-disk"), 30, what="importer-leg-disk running")
    t.eq({k: p["metadata"]["labels"].get(k) for k in LAB}, LAB,
         "legacy: importer-<pvc> carries the PVC's labels")
    t.eq([(o["kind"], o["name"]) for o in p["metadata"]["ownerReferences"]],
         [("PersistentVolumeClaim", "leg-disk")], "owned by the PVC itself")
    t.ok(get(f"{PVCS}/leg-disk")["metadata"]["annotations"]
         .get("cdi.kubevirt.io/storage.import.endpoint"), "the PVC has the import annotations")
    wait_for(lambda: dv("leg-disk").get("status", {}).get("progress") == "50.00%", 15,
             what="legacy progress from the scrape")
    t.ok(True, "legacy: the DataVolume's progress is scraped from the pod")
    hold(False)
    wait_for(lambda: dv("leg-disk").get("status", {}).get("phase") == "Succeeded", 20,
             what="Succeeded")
    A.delete(f"{VMS}/leg")

    # ingress to importer pods denied: the scrape is refused, the import completes
    A.post(NP, {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": "no-ingress", "namespace": NS},
                "spec": {"podSelector": {"matchLabels": {"cdi.kubevirt.io": "importer"}},
                         "policyTypes": ["Ingress"]}})
    hold(True)
    A.post(VMS, dv_vm("deny", ann={"cdi.kubevirt.io/storage.usePopulator": "false"}))
    ip = wait_for(lambda: running_pod("importer-deny-disk"), 30,
                  what="importer running")["status"]["podIP"]
    wait_for(lambda: any(r["from"] == ip and r["sent"] >= 128000
                         for r in A.get("/_sim/cdi").json["mirror"]["requests"]), 15,
             what="the transfer half way")
    wait_for(lambda: dv("deny-disk")["status"].get("phase") == "ImportInProgress", 5,
             what="ImportInProgress")
    # a denial is a drop (Calico, Cilium; CONFORMANCE.md "Networking /
    # NetworkPolicy"): each scrape runs into CDI's 2 s timeout
    def denied():
        c = A.get("/_sim/cdi").json["scrapes"].get(ip, {})
        return c.get("error", 0) >= 2 and "i/o timeout" in (c.get("last") or "") and \
            not c.get("ok")
    wait_for(denied, 20, what="two scrapes timed out, none answered")
    st = dv("deny-disk")["status"]
    t.eq((st.get("phase"), st.get("progress")), ("ImportInProgress", "N/A"),
         "no scrape through the policy: progress N/A", st)
    hold(False)
    wait_for(lambda: dv("deny-disk").get("status", {}).get("phase") == "Succeeded", 20,
             what="Succeeded")
    t.ok(True, "the import completes anyway (CDI never fails an import for its progress)")
    A.delete(f"{NP}/no-ingress")
    A.delete(f"{VMS}/deny")


@t.test
def private_registry_egress_denied():
    A.post(NP, lab_like_policy("lab-like", {"labvm.io/lab-session": "true"}))
    t.eq(A.post(VMS, dv_vm("egr")).status, 201, "VM")
    target = wait_for(lambda: get(f"{PVCS}/egr-disk"), 5, what="target PVC")
    name = f"importer-prime-{target['metadata']['uid']}"
    prime = f"prime-{target['metadata']['uid']}"

    def crashing():
        p = pod(name)
        s = ((p or {}).get("status", {}).get("containerStatuses") or [{}])[0]
        return p if s.get("restartCount", 0) >= 1 else None
    p = wait_for(crashing, 30, what="the importer restarting")
    last = p["status"]["containerStatuses"][0]["lastState"]["terminated"]
    t.eq(last["exitCode"], 1, "the importer exits 1")
    d = wait_for(lambda: dv("egr-disk") if dv("egr-disk").get("status", {}).get(
        "restartCount", 0) >= 1 else None, 15, what="restartCount on the DataVolume")
    t.eq(d["status"]["phase"], "ImportInProgress", "the DataVolume stays ImportInProgress")
    run = next(c for c in d["status"]["conditions"] if c["type"] == "Running")
    t.eq(run["status"], "False", "Running False")
    t.ok("172.30.0.10:3128" in run.get("message", "") and "proxyconnect" in run["message"],
         "the reason names the mirror it could not reach", run)
    evs = [e for e in A.get(EVENTS).json["items"]
           if e["involvedObject"]["name"] == prime and e["reason"] == "ErrImportFailed"]
    t.ok(evs, "ErrImportFailed on the claim the importer writes")
    t.eq(dv("egr-disk")["status"]["progress"], "N/A", "no progress")
    A.delete(f"{NP}/lab-like")
    try:
        wait_for(lambda: dv("egr-disk").get("status", {}).get("phase") == "Succeeded", 90,
                 what="Succeeded once the policy is gone")
    except TimeoutError:
        t.diag(f"pod: {json.dumps((pod(name) or {}).get('status'))}")
        t.diag(f"dv: {json.dumps(dv('egr-disk').get('status'))}")
        raise
    t.ok(True, "the next restart imports")
    A.delete(f"{VMS}/egr")


@t.test
def unknown_image_and_bad_mirror_flag():
    A.post(VMS, dv_vm("nope", url="docker://quay.io/doesnotexist/x:1"))
    target = wait_for(lambda: get(f"{PVCS}/nope-disk"), 5, what="target PVC")
    d = wait_for(lambda: dv("nope-disk") if dv("nope-disk").get("status", {}).get(
        "restartCount", 0) >= 1 else None, 30, what="a restart")
    run = next(c for c in d["status"]["conditions"] if c["type"] == "Running")
    t.ok("manifest unknown" in run.get("message", ""), "manifest unknown", run)
    t.ok(target, "")
    A.delete(f"{VMS}/nope")
    r = subprocess.run([KUBESIM, "--state-dir", "/nonexistent", "--registry-mirror",
                        "203.0.113.5:80"], capture_output=True, text=True, timeout=30)
    t.eq(r.returncode, 2, "a public mirror address is refused")
    t.ok("private IPv4 address" in r.stderr, "with the reason", r.stderr[-300:])


sim.stop()
t.done()
