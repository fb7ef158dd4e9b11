#!/usr/bin/python3
"""The golden disk: a usable golden PVC becomes a read-only base with a
per-VM copy-on-write layer; every unusable case falls back silently to the
containerDisk with the reason recorded."""
from labtest import Api, Db, Kube, reset_world, vm_of, wait_until
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
PVC = "golden-test"
IMAGE = "quay.io/containerdisks/debian:12"
api = Api("student180")


def drop_pvc():
    r = kube.get("persistentvolumeclaims", PVC)
    if r.status == 200:
        if r.json["metadata"].get("finalizers"):
            kube.patch("persistentvolumeclaims", PVC, {"metadata": {"finalizers": None}})
        kube.delete("persistentvolumeclaims", PVC)
    wait_until(lambda: kube.get("persistentvolumeclaims", PVC).status == 404, 20,
               what="the test PVC gone")


def make_pvc(modes=("ReadOnlyMany",), annotations=None, finalizers=None, bound=True):
    drop_pvc()
    ann = {"labvm.io/image": IMAGE, "cdi.kubevirt.io/storage.pod.phase": "Succeeded"}
    ann.update(annotations or {})
    ann = {k: v for k, v in ann.items() if v is not None}
    meta = {"name": PVC, "annotations": ann}
    if finalizers:
        meta["finalizers"] = finalizers
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta,
           "spec": {"accessModes": list(modes), "resources": {"requests": {"storage": "1Gi"}}}}
    r = kube.create("persistentvolumeclaims", pvc)
    if r.status != 201:
        raise AssertionError(f"creating the PVC: {r}")
    phase = "Bound" if bound else "Pending"
    if (r.json.get("status") or {}).get("phase") != phase:
        # what a storage provisioner would do: set the claim's status
        s = kube.request("PATCH", kube.path("persistentvolumeclaims", kube.ns, PVC) + "/status",
                         {"status": {"phase": phase, "accessModes": list(modes)}},
                         "application/merge-patch+json")
        if s.status != 200:
            raise AssertionError(f"setting the PVC status: {s}")
    wait_until(lambda: (kube.get("persistentvolumeclaims", PVC).json.get("status") or {})
               .get("phase") == phase, 20, what=f"PVC {phase}")


def start_and_check(source, reason, what):
    r = api.start("test-golden")
    t.require(r.status == 201, f"{what}: start answers 201, got {r}")
    s = r.json
    t.eq(s["disk"], {"source": source, "fallback_reason": reason}, f"{what}: disk in the answer")
    t.eq(db.one("SELECT disk_source, disk_fallback_reason FROM sessions WHERE id = %s", s["id"]),
         (source, reason), f"{what}: recorded in the database")
    vm = kube.get("virtualmachines", vm_of(s)).json
    root = [v for v in vm["spec"]["template"]["spec"]["volumes"] if v["name"] == "rootdisk"][0]
    if source == "golden":
        t.eq(root.get("ephemeral"), {"persistentVolumeClaim": {"claimName": PVC, "readOnly": True}},
             f"{what}: read-only base with a copy-on-write layer (ephemeral)")
    else:
        t.eq(root.get("containerDisk", {}).get("image"), IMAGE, f"{what}: containerDisk root")
    return s


@t.test(name="usable golden PVC: ephemeral root, and the VM becomes ready")
def usable():
    make_pvc()
    s = start_and_check("golden", None, "usable")
    s = api.wait_state(s["id"], ("ready", "failed"), timeout=60)
    t.eq(s["state"], "ready", "ready on the golden disk", s.get("error"))
    api.end(s["id"])


@t.test(name="missing PVC: containerDisk, not_found")
def not_found():
    drop_pvc()
    api.end(start_and_check("containerdisk", "not_found", "missing")["id"])


@t.test(name="forbidden PVC read: containerDisk, forbidden")
def forbidden():
    make_pvc()
    kube.fault(verb="get", resource="persistentvolumeclaims", code=403, times=1)
    try:
        api.end(start_and_check("containerdisk", "forbidden", "forbidden")["id"])
    finally:
        kube.clear_faults()


@t.test(name="PVC still importing: containerDisk, importing")
def importing():
    make_pvc(annotations={"cdi.kubevirt.io/storage.pod.phase": "Running"})
    api.end(start_and_check("containerdisk", "importing", "importing")["id"])


@t.test(name="CDI importer pod still pending: containerDisk, importing")
def importing_pending():
    make_pvc(annotations={"cdi.kubevirt.io/storage.pod.phase": "Pending"})
    api.end(start_and_check("containerdisk", "importing", "pending import")["id"])


@t.test(name="ReadWriteOnce PVC: containerDisk, single_node")
def single_node():
    make_pvc(modes=("ReadWriteOnce",))
    api.end(start_and_check("containerdisk", "single_node", "RWO")["id"])


@t.test(name="PVC of another image: containerDisk, image_mismatch")
def mismatch():
    make_pvc(annotations={"labvm.io/image": "quay.io/containerdisks/fedora:40"})
    api.end(start_and_check("containerdisk", "image_mismatch", "other image")["id"])


@t.test(name="PVC being deleted: containerDisk, deleting")
def deleting():
    make_pvc(finalizers=["labvm.test/hold"])
    kube.delete("persistentvolumeclaims", PVC)
    t.ok(kube.get("persistentvolumeclaims", PVC).json["metadata"].get("deletionTimestamp"),
         "the PVC is terminating")
    api.end(start_and_check("containerdisk", "deleting", "deleting")["id"])


@t.test(name="PVC read fails (503): containerDisk, unavailable")
def unavailable():
    make_pvc()
    kube.fault(verb="get", resource="persistentvolumeclaims", code=503, times=1)
    try:
        api.end(start_and_check("containerdisk", "unavailable", "API error")["id"])
    finally:
        kube.clear_faults()


drop_pvc()
reset_world(kube, db)
t.done()
