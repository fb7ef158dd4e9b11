#!/usr/bin/python3
"""kubesim: storage a real cluster accepts (no writable mount of a
ReadOnlyMany claim, access modes from the StorageProfile) and the workload
kinds labvm's in-cluster manifests use (Deployment, CronJob, Service,
ConfigMap, Secret), validated strictly; `--backend-pod` runs the shipped
Deployment's Pod on the pod network (timeout: 120)."""
import os

import yaml

from simlib import DVS, EVENTS, NS, PODS, VMS, Sim, phase, vm, wait_for
from tap import T

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
K8S = os.path.join(SRC, "conf", "k8s")
t = T()
sim = Sim("--backend-pod", os.path.join(K8S, "labvm-backend.yaml"), guest="none")
A = sim.admin


def dv(name, storage, source=None):
    return {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"source": source or {"registry": {"url": "docker://quay.io/x/y:1"}},
                     "storage": storage}}


def events(name):
    return [(e["reason"], e["message"]) for e in A.get(EVENTS).json["items"]
            if e["involvedObject"]["name"] == name]


def dv_phase(name):
    return (A.get(f"{DVS}/{name}").json.get("status") or {}).get("phase")


def events_of_pods(vmname):
    pods = A.get(f"{PODS}?labelSelector=vm.kubevirt.io%2Fname%3D{vmname}").json["items"]
    names = {p["metadata"]["name"] for p in pods}
    return [(e["reason"], e["message"]) for e in A.get(EVENTS).json["items"]
            if e["involvedObject"]["name"] in names]


REQ = {"resources": {"requests": {"storage": "1Gi"}}}


@t.test
def storage_profile_access_modes():
    t.eq(A.post(DVS, dv("sp-default", dict(REQ))).status, 201, "created")
    pvc = wait_for(lambda: A.get(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/sp-default")
                   .json.get("spec"), 5, what="PVC")
    t.eq(pvc["accessModes"], ["ReadWriteOnce"], "from the default class's StorageProfile")
    t.eq(A.post(DVS, dv("sp-none", dict(REQ, storageClassName="no-profile"))).status, 201,
         "created")
    wait_for(lambda: any(r == "ErrClaimNotValid" for r, _ in events("sp-none")), 5,
             what="ErrClaimNotValid")
    t.eq(dv_phase("sp-none"), "Pending", "no profile: Pending")
    r = A.get(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/sp-none")
    t.eq(r.status, 404, "and no PVC")


@t.test
def import_into_readonlymany_is_refused():
    t.eq(A.post(DVS, dv("rox-import", dict(REQ, accessModes=["ReadOnlyMany"]))).status, 201, "")
    wait_for(lambda: any(r == "FailedMount" for r, _ in events("rox-import")), 10,
             what="FailedMount")
    t.ok(dv_phase("rox-import") not in ("ImportInProgress", "Succeeded"),
         "the import never runs", dv_phase("rox-import"))
    t.eq(A.post(DVS, dv("rwx-import", dict(REQ, accessModes=["ReadWriteMany"]))).status, 201, "")
    wait_for(lambda: dv_phase("rwx-import") == "Succeeded", 15, what="RWX import")
    t.ok(True, "a ReadWriteMany import succeeds")
    t.eq(A.post(DVS, dv("rox-clone", dict(REQ, accessModes=["ReadOnlyMany"]),
                        {"pvc": {"namespace": NS, "name": "rwx-import"}})).status, 201, "")
    wait_for(lambda: dv_phase("rox-clone") == "Succeeded", 15, what="clone into ROX")
    t.ok(True, "a clone into a ReadOnlyMany claim succeeds")


@t.test
def writable_mount_of_readonlymany_is_refused():
    v = vm("rox-rw", disk="pvc", claim="golden-debian-12")
    t.eq(A.post(VMS, v).status, 201, "VM with the ROX golden claim as a writable disk")
    wait_for(lambda: any(r == "FailedMount" and "ReadOnlyMany" in m
                         for r, m in events_of_pods("rox-rw")), 10, what="FailedMount")
    t.ok(True, "the launcher pod's mount is refused")
    v = vm("rox-eph", disk="golden")
    t.eq(A.post(VMS, v).status, 201, "VM with the ROX golden claim as an ephemeral disk")
    wait_for(lambda: phase(sim, "rox-eph") == "Running", 15, what="ephemeral on ROX runs")
    t.ok(True, "read-only (ephemeral) use of the same claim runs")


@t.test
def shipped_manifests_validate():
    docs = []
    for n in ("labvm-backend.yaml", "rbac.yaml", "networkpolicy.yaml", "labvm-doctor-job.yaml"):
        with open(os.path.join(K8S, n)) as f:
            docs += [d for d in yaml.safe_load_all(f) if d]
    kinds = sorted({d["kind"] for d in docs})
    for want in ("ConfigMap", "CronJob", "Deployment", "Job", "NetworkPolicy", "Secret", "Service"):
        t.ok(want in kinds, f"ships a {want}")
    paths = {"Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
             "CronJob": "/apis/batch/v1/namespaces/{ns}/cronjobs",
             "Job": "/apis/batch/v1/namespaces/{ns}/jobs",
             "Service": "/api/v1/namespaces/{ns}/services",
             "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
             "Secret": "/api/v1/namespaces/{ns}/secrets",
             "NetworkPolicy": "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"}
    for d in docs:
        if d["kind"] not in paths:
            continue
        p = paths[d["kind"]].format(ns=d["metadata"].get("namespace", NS)) + "?dryRun=All"
        d = dict(d, metadata=dict(d["metadata"], name=d["metadata"]["name"] + "-dry"))
        r = A.post(p, d)
        t.eq(r.status, 201, f"{d['kind']} {d['metadata']['name']} validates (dry run)",
             r.json if r.status != 201 else None)
    cj = next(d for d in docs if d["kind"] == "CronJob")
    t.eq((cj["spec"]["schedule"], cj["spec"]["concurrencyPolicy"]), ("* * * * *", "Forbid"),
         "the reaper every minute, never overlapping")
    job = next(d for d in docs if d["kind"] == "Job")
    jp = job["spec"]["template"]["spec"]
    t.eq((jp["serviceAccountName"], jp["containers"][0]["command"]),
         ("labvm-backend", ["/usr/lib/labvm/labvm-doctor"]),
         "labvm-doctor's Job: the backend's ServiceAccount, the installed doctor")
    cj_vols = {v["name"]: v for v in cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"]}
    t.eq({v["name"]: v for v in jp["volumes"] if v["name"] in ("conf", "lessons")},
         {k: cj_vols[k] for k in ("conf", "lessons")}, "the reaper's labvm.conf and lessons")
    dep = next(d for d in docs if d["kind"] == "Deployment")
    pod = dep["spec"]["template"]["spec"]
    t.eq(pod["serviceAccountName"], "labvm-backend", "the ServiceAccount of rbac.yaml")
    for c in pod["containers"]:
        t.ok(c.get("resources", {}).get("requests") and c["resources"].get("limits"),
             f"{c['name']}: resources")
    probes = [c.get(k, {}).get("httpGet", {}).get("path") for c in pod["containers"]
              for k in ("readinessProbe", "livenessProbe")]
    t.ok(probes.count("/api/healthz") == 2, "probes on /api/healthz", probes)


@t.test
def workloads_are_validated_strictly():
    base = {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d1", "namespace": NS},
            "spec": {"selector": {"matchLabels": {"a": "b"}},
                     "template": {"metadata": {"labels": {"a": "b"}},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    P = f"/apis/apps/v1/namespaces/{NS}/deployments"
    t.eq(A.post(P + "?dryRun=All", base).status, 201, "a minimal Deployment")
    bad = yaml.safe_load(yaml.safe_dump(base))
    bad["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy2"] = "x"
    r = A.post(P, bad)
    t.eq(r.status, 400, "unknown field", r.json)
    bad = yaml.safe_load(yaml.safe_dump(base))
    bad["spec"]["template"]["metadata"]["labels"] = {"a": "c"}
    r = A.post(P, bad)
    t.eq(r.status, 422, "selector does not match the template", r.json)
    bad = yaml.safe_load(yaml.safe_dump(base))
    bad["spec"]["replicas"] = "two"
    t.eq(A.post(P, bad).status, 400, "wrong type")
    cj = {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c1", "namespace": NS},
          "spec": {"schedule": "* * *", "concurrencyPolicy": "Sometimes", "jobTemplate": {
              "spec": {"template": {"spec": {"restartPolicy": "Always",
                                             "containers": [{"name": "c", "image": "i"}]}}}}}}
    r = A.post(f"/apis/batch/v1/namespaces/{NS}/cronjobs", cj)
    t.eq(r.status, 422, "bad CronJob", r.json)
    msg = r.json.get("message", "")
    t.ok("schedule" in msg and "concurrencyPolicy" in msg and "restartPolicy" in msg,
         "schedule, concurrencyPolicy and restartPolicy named", msg)


@t.test
def backend_pod_runs():
    pods = A.get(f"{PODS}?labelSelector=app.kubernetes.io%2Fname%3Dlabvm-backend").json["items"]
    t.eq(len(pods), 1, "the Deployment's Pod")
    p = pods[0]
    t.eq(p["status"]["phase"], "Running", "Running")
    t.eq(p["status"]["podIP"], f"10.{sim.port >> 8}.{sim.port & 255}.254",
         "at the host's address on the pod network")
    t.eq(p["spec"]["serviceAccountName"], "labvm-backend", "its ServiceAccount")
    r = A.get(f"/apis/apps/v1/namespaces/{NS}/deployments/labvm-backend")
    t.eq((r.status, (r.json.get("status") or {}).get("readyReplicas")), (200, 1),
         "the Deployment, 1 ready replica")


sim.stop()
t.done()
