#!/usr/bin/python3
"""kubesim: the API's verbs, errors and validation (timeout: 120)."""
import base64
import copy

from simlib import (DVS, PODS, SECRETS, VMIS, VMS, Sim, secret, vm, wait_for)
from tap import T

t = T()
sim = Sim(guest="none")
A, B = sim.admin, sim.backend


@t.test
def discovery():
    r = A.get("/version")
    t.eq(r.status, 200, "/version")
    t.ok(r.json.get("major") == "1" and r.json.get("gitVersion"), "version fields", r.json)
    r = A.get("/api")
    t.eq(r.json.get("versions"), ["v1"], "/api versions")
    r = A.get("/apis")
    groups = {g["name"]: g for g in r.json["groups"]}
    for g in ("kubevirt.io", "cdi.kubevirt.io", "subresources.kubevirt.io"):
        t.ok(g in groups, f"/apis lists {g}")
    t.eq(groups["cdi.kubevirt.io"]["preferredVersion"]["version"], "v1beta1", "cdi preferred")
    r = A.get("/api/v1")
    names = {x["name"]: x for x in r.json["resources"]}
    for n in ("secrets", "pods", "persistentvolumeclaims", "events", "namespaces", "nodes"):
        t.ok(n in names, f"/api/v1 lists {n}")
    t.eq(names["secrets"]["namespaced"], True, "secrets namespaced")
    r = A.get("/apis/kubevirt.io/v1")
    names = {x["name"]: x for x in r.json["resources"]}
    t.eq(names["virtualmachines"]["kind"], "VirtualMachine", "vm kind")
    t.ok("vm" in names["virtualmachines"].get("shortNames", []), "vm short name")
    r = A.get("/apis/subresources.kubevirt.io/v1")
    t.ok(any(x["name"] == "virtualmachineinstances/console" for x in r.json["resources"]),
         "console subresource discovered")
    r = A.get("/apis/cdi.kubevirt.io/v1beta1")
    t.ok(any(x["name"] == "datavolumes" for x in r.json["resources"]), "datavolumes discovered")
    t.eq(B.get("/version").status, 200, "discovery allowed to the backend")


@t.test
def bad_input_gets_real_statuses():
    nob = sim.client(None)
    r = nob.get(SECRETS)
    t.eq(r.status, 401, "no token")
    t.eq((r.json or {}).get("reason"), "Unauthorized", "401 reason")
    t.eq((r.json or {}).get("kind"), "Status", "401 is a Status")
    r = sim.client("not-a-token").get(SECRETS)
    t.eq(r.status, 401, "bad token")
    r = A.request("POST", SECRETS, raw=b"{not json", ctype="application/json")
    t.eq(r.status, 400, "malformed JSON")
    t.eq(r.json.get("reason"), "BadRequest", "400 reason")
    t.eq(r.json.get("kind"), "Status", "400 is a Status")
    r = A.request("POST", SECRETS, raw=b"a=b", ctype="application/x-www-form-urlencoded")
    t.eq(r.status, 415, "wrong content type")
    t.eq(r.json.get("reason"), "UnsupportedMediaType", "415 reason")
    r = A.get("/api/v1/namespaces/labs/frobnicators")
    t.eq(r.status, 404, "unknown resource")
    t.eq(r.json.get("reason"), "NotFound", "404 reason")
    r = A.get("/apis/kubevirt.io/v1/namespaces/labs/virtualmachines/nope")
    t.eq(r.status, 404, "missing object")
    t.eq(r.json.get("message"), 'virtualmachines.kubevirt.io "nope" not found', "404 message")
    t.eq(r.json.get("details"), {"name": "nope", "group": "kubevirt.io",
                                 "kind": "virtualmachines"}, "404 details")
    r = A.get("/apis/nope.example/v1/things")
    t.eq(r.status, 404, "unknown group")
    r = A.post("/api/v1/namespaces/nosuchns/secrets", secret("x", "#cloud-config\n",
                                                             ns="nosuchns"))
    t.eq(r.status, 404, "missing namespace")
    t.eq(r.json.get("message"), 'namespaces "nosuchns" not found', "namespace message")


@t.test
def secret_crud_and_conflict():
    s = secret("crud-1", "#cloud-config\n")
    r = B.post(SECRETS, s)
    t.eq(r.status, 201, "create")
    obj = r.json
    md = obj["metadata"]
    t.ok(md.get("uid") and md.get("resourceVersion") and md.get("creationTimestamp"),
         "server metadata", md)
    r = B.post(SECRETS, s)
    t.eq(r.status, 409, "duplicate create")
    t.eq(r.json.get("reason"), "AlreadyExists", "AlreadyExists")
    r = B.get(SECRETS + "/crud-1")
    t.eq(r.json["data"], s["data"], "get returns data")
    # update with a stale resourceVersion (admin: the backend may not update)
    stale = copy.deepcopy(r.json)
    cur = copy.deepcopy(r.json)
    cur["metadata"]["labels"]["x"] = "1"
    r1 = A.put(SECRETS + "/crud-1", cur)
    t.eq(r1.status, 200, "update")
    t.ok(int(r1.json["metadata"]["resourceVersion"]) > int(md["resourceVersion"]), "rv grows")
    stale["metadata"]["labels"]["x"] = "2"
    r2 = A.put(SECRETS + "/crud-1", stale)
    t.eq(r2.status, 409, "stale update")
    t.eq(r2.json.get("reason"), "Conflict", "Conflict reason")
    t.ok("the object has been modified" in r2.json.get("message", ""), "conflict message",
         r2.json.get("message"))
    r = B.put(SECRETS + "/crud-1", r1.json)
    t.eq(r.status, 403, "backend may not update secrets (rbac.yaml grants patch only)")
    r = B.delete(SECRETS + "/crud-1")
    t.eq(r.status, 200, "delete")
    t.eq(r.json.get("status"), "Success", "delete answers Status Success")
    t.eq(B.get(SECRETS + "/crud-1").status, 404, "gone")
    t.eq(B.delete(SECRETS + "/crud-1").status, 404, "delete again")


@t.test
def generate_name_and_string_data():
    s = secret("", "#cloud-config\n")
    del s["metadata"]["name"]
    s["metadata"]["generateName"] = "gen-"
    s["stringData"] = {"extra": "héllo"}
    r = B.post(SECRETS, s)
    t.eq(r.status, 201, "create with generateName")
    name = r.json["metadata"]["name"]
    t.ok(name.startswith("gen-") and len(name) == 9, "generated name", name)
    t.eq(base64.b64decode(r.json["data"]["extra"]).decode(), "héllo", "stringData -> data")
    t.ok("stringData" not in r.json, "stringData not stored")
    B.delete(SECRETS + "/" + name)


@t.test
def patches():
    B.post(SECRETS, secret("p-1", "#cloud-config\n"))
    r = B.patch(SECRETS + "/p-1", {"metadata": {"labels": {"a": "1", "labvm.io/lab-session": None}}})
    t.eq(r.status, 200, "merge patch")
    t.eq(r.json["metadata"]["labels"], {"a": "1"}, "merge patch semantics (null deletes)")
    r = B.patch(SECRETS + "/p-1", [{"op": "add", "path": "/metadata/labels/b", "value": "2"},
                                   {"op": "test", "path": "/metadata/labels/a", "value": "1"}],
                ctype="application/json-patch+json")
    t.eq(r.status, 200, "json patch")
    t.eq(r.json["metadata"]["labels"], {"a": "1", "b": "2"}, "json patch result")
    r = B.patch(SECRETS + "/p-1", [{"op": "test", "path": "/metadata/labels/a", "value": "9"}],
                ctype="application/json-patch+json")
    t.eq(r.status, 422, "failed json-patch test op")
    u1 = A.post(VMS, vm("p-own-1", run_strategy="Halted")).json["metadata"]["uid"]
    u2 = A.post(VMS, vm("p-own-2", run_strategy="Halted")).json["metadata"]["uid"]
    r = B.patch(SECRETS + "/p-1", {"metadata": {"ownerReferences": [
        {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "p-own-1",
         "uid": u1}]}}, ctype="application/strategic-merge-patch+json")
    t.eq(r.status, 200, "strategic merge patch on a built-in kind")
    r = B.patch(SECRETS + "/p-1", {"metadata": {"ownerReferences": [
        {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "p-own-2",
         "uid": u2}]}}, ctype="application/strategic-merge-patch+json")
    t.eq([o["uid"] for o in r.json["metadata"].get("ownerReferences", [])], [u1, u2],
         "SMP merges ownerReferences by uid")
    r = B.patch(SECRETS + "/p-1", {"metadata": {"resourceVersion": "1", "labels": {"c": "3"}}})
    t.eq(r.status, 409, "patch with a stale resourceVersion")
    r = B.patch(SECRETS + "/p-1", {"x": 1}, ctype="text/plain")
    t.eq(r.status, 415, "unsupported patch type")
    r = A.patch(VMS + "/none", {"metadata": {}}, ctype="application/strategic-merge-patch+json")
    t.ok(r.status in (404, 415), "SMP on a custom resource is refused or not found", r.status)
    B.delete(SECRETS + "/p-1")
    A.delete(VMS + "/p-own-1")
    A.delete(VMS + "/p-own-2")


@t.test
def strict_validation():
    v = vm("strict-1")
    v["spec"]["template"]["spec"]["domain"]["devicez"] = {}
    r = A.post(VMS, v)
    t.eq(r.status, 400, "unknown field in a VM")
    t.ok('unknown field "spec.template.spec.domain.devicez"' in r.json.get("message", ""),
         "names the field", r.json.get("message"))
    v = vm("strict-2")
    v["spec"]["runStrategy"] = 3
    r = A.post(VMS, v)
    t.eq(r.status, 422, "mistyped field in a VM")
    s = secret("strict-3", "x")
    s["dataa"] = {}
    r = A.post(SECRETS, s)
    t.eq(r.status, 400, "unknown field in a Secret")
    s = secret("strict-4", "x")
    s["data"]["userdata"] = "!!!not base64"
    r = A.post(SECRETS, s)
    t.eq(r.status, 400, "bad base64 in a Secret")
    s = secret("Bad_Name", "x")
    r = A.post(SECRETS, s)
    t.eq(r.status, 422, "invalid name")
    t.eq(r.json.get("reason"), "Invalid", "Invalid reason")
    t.eq(r.json["details"]["causes"][0]["field"], "metadata.name", "cause field")
    s = secret("x-labels", "x", labels={"bad key!": "v"})
    t.eq(A.post(SECRETS, s).status, 422, "invalid label key")
    dv = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
          "metadata": {"name": "dv-x"}, "spec": {"source": {"registry": {"url": "docker://x"}},
                                                 "storage": {"resourcez": {}}}}
    t.eq(A.post(DVS, dv).status, 400, "unknown field in a DataVolume")


@t.test
def kubevirt_admission():
    ud = "#cloud-config\nruncmd:\n- " + "echo " + "x" * 2100 + "\n"
    v = vm("big-1", userdata=ud)
    r = B.post(VMS, v)
    t.eq(r.status, 422, "inline userData over 2048 bytes")
    msg = r.json.get("message", "")
    t.ok(msg.startswith('admission webhook "virtualmachine-validator.kubevirt.io" denied the '
                        "request: "), "webhook prefix", msg)
    t.ok("spec.template.spec.volumes[1].cloudInitNoCloud userdata exceeds 2048 byte limit. "
         "Should use UserDataSecretRef for larger data." in msg, "KubeVirt message", msg)
    t.eq(r.json["details"]["causes"][0]["field"],
         "spec.template.spec.volumes[1].cloudInitNoCloud", "cause field")
    small = vm("small-1", userdata="#cloud-config\nruncmd:\n- echo " + "x" * 1900 + "\n")
    r = B.post(VMS, small)
    t.eq(r.status, 201, "inline userData under the limit")
    v = vm("both-1")
    v["spec"]["running"] = True
    r = B.post(VMS, v)
    t.eq(r.status, 422, "running together with runStrategy")
    t.ok("Running and RunStrategy are mutually exclusive" in r.json.get("message", ""),
         "mutual exclusion message", r.json.get("message"))
    v = vm("running-1")
    del v["spec"]["runStrategy"]
    v["spec"]["running"] = False
    r = B.post(VMS, v)
    t.eq(r.status, 201, "running alone is accepted")
    t.ok("spec.running is deprecated" in r.headers.get("warning", ""), "deprecation warning",
         r.headers.get("warning"))
    v = vm("nosrc-1")
    v["spec"]["template"]["spec"]["volumes"][0]["containerDisk"] = {"image": "x"}
    r = B.post(VMS, v)
    t.eq(r.status, 422, "a volume with two sources")
    v = vm("nodisk-1")
    v["spec"]["template"]["spec"]["domain"]["devices"]["disks"].append(
        {"name": "ghost", "disk": {"bus": "virtio"}})
    t.eq(B.post(VMS, v).status, 422, "a disk without its volume")
    for n in ("small-1", "running-1"):
        A.delete(VMS + "/" + n)


@t.test
def update_needs_resource_version_for_custom_resources():
    A.post(VMS, vm("upd-1", run_strategy="Halted"))
    wait_for(lambda: A.get(VMS + "/upd-1").json.get("status", {}).get("printableStatus") ==
             "Stopped", 5, what="controller settled")
    cur = A.get(VMS + "/upd-1").json
    body = copy.deepcopy(cur)
    del body["metadata"]["resourceVersion"]
    r = A.put(VMS + "/upd-1", body)
    t.eq(r.status, 422, "custom resource update without resourceVersion")
    cur = A.get(VMS + "/upd-1").json
    cur["spec"]["template"]["metadata"]["labels"]["y"] = "1"
    for _ in range(5):   # retry on conflict, as client-go's RetryOnConflict does
        r = A.put(VMS + "/upd-1", cur)
        if r.status != 409:
            break
        cur = A.get(VMS + "/upd-1").json
        cur["spec"]["template"]["metadata"]["labels"]["y"] = "1"
    t.eq(r.status, 200, "update")
    t.eq(r.json["metadata"]["generation"], 2, "generation bumped by a spec change")
    A.delete(VMS + "/upd-1")


@t.test
def pagination():
    for i in range(7):
        A.post(SECRETS, secret(f"page-{i}", "x", labels={"page": "yes"}))
    seen = []
    cont = ""
    pages = 0
    while True:
        r = A.get(SECRETS + "?labelSelector=page%3Dyes&limit=3" + (f"&continue={cont}" if cont else ""))
        seen += [i["metadata"]["name"] for i in r.json["items"]]
        pages += 1
        cont = r.json["metadata"].get("continue")
        if not cont:
            break
    t.eq(seen, [f"page-{i}" for i in range(7)], "all items once, in order")
    t.eq(pages, 3, "three pages")
    r = A.get(SECRETS + "?labelSelector=page%3Dyes&limit=3")
    t.eq(r.json["metadata"].get("remainingItemCount"), 4, "remainingItemCount")
    r = A.delete(SECRETS + "?labelSelector=page%3Dyes")
    t.eq(r.status, 200, "deletecollection")
    t.eq(len(A.get(SECRETS + "?labelSelector=page%3Dyes").json["items"]), 0, "collection gone")


@t.test
def owner_references_and_propagation():
    r = A.post(VMS, vm("own-1", run_strategy="Halted"))
    uid = r.json["metadata"]["uid"]
    ref = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "own-1", "uid": uid}
    s = secret("own-1-ci", "x")
    s["metadata"]["ownerReferences"] = [ref]
    t.eq(B.post(SECRETS, s).status, 201, "owned secret")
    wait_for(lambda: A.get(VMS + "/own-1").json["metadata"].get("finalizers"), 5,
             what="the VM controller adds its finalizer")
    s2 = secret("own-1-orphan", "x")
    s2["metadata"]["ownerReferences"] = [dict(ref)]
    A.post(SECRETS, s2)
    # Orphan keeps dependents: make a second VM for it
    r2 = A.post(VMS, vm("own-2", run_strategy="Halted"))
    ref2 = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "own-2",
            "uid": r2.json["metadata"]["uid"]}
    s3 = secret("own-2-ci", "x")
    s3["metadata"]["ownerReferences"] = [ref2]
    A.post(SECRETS, s3)
    r = B.delete(VMS + "/own-1")
    t.eq(r.status, 200, "delete VM")
    t.ok(r.json["metadata"].get("deletionTimestamp"), "VM terminating (deletionTimestamp)")
    t.ok("kubevirt.io/virtualMachineControllerFinalize" in r.json["metadata"].get("finalizers", []),
         "VM finalizer visible while terminating", r.json["metadata"].get("finalizers"))
    wait_for(lambda: A.get(VMS + "/own-1").status == 404, 5, what="VM gone")
    wait_for(lambda: A.get(SECRETS + "/own-1-ci").status == 404, 5, what="owned secret GC")
    t.eq(A.get(SECRETS + "/own-1-orphan").status, 404, "second owned secret GC")
    r = A.delete(VMS + "/own-2", {"kind": "DeleteOptions", "apiVersion": "v1",
                                  "propagationPolicy": "Orphan"})
    t.eq(r.status, 200, "orphan delete")
    wait_for(lambda: A.get(VMS + "/own-2").status == 404, 5, what="VM gone")
    s = A.get(SECRETS + "/own-2-ci")
    t.eq(s.status, 200, "orphaned secret kept")
    t.ok(not s.json["metadata"].get("ownerReferences"), "ownerReference removed")
    A.delete(SECRETS + "/own-2-ci")
    # a dependent whose owner never existed is collected too
    s4 = secret("own-ghost", "x")
    s4["metadata"]["ownerReferences"] = [dict(ref, uid="00000000-0000-0000-0000-000000000000")]
    A.post(SECRETS, s4)
    wait_for(lambda: A.get(SECRETS + "/own-ghost").status == 404, 5, what="ghost-owned GC")


@t.test
def finalizers_and_foreground():
    s = secret("fin-1", "x")
    s["metadata"]["finalizers"] = ["example.com/hold"]
    A.post(SECRETS, s)
    r = A.delete(SECRETS + "/fin-1")
    t.eq(r.status, 200, "delete with a finalizer")
    g = A.get(SECRETS + "/fin-1")
    t.eq(g.status, 200, "still there")
    t.ok(g.json["metadata"].get("deletionTimestamp"), "deletionTimestamp set")
    cur = g.json
    cur["metadata"]["finalizers"].append("example.com/more")
    t.eq(A.put(SECRETS + "/fin-1", cur).status, 422, "no new finalizers while deleting")
    r = A.patch(SECRETS + "/fin-1", {"metadata": {"finalizers": None}})
    t.eq(r.status, 200, "finalizer removed")
    t.eq(A.get(SECRETS + "/fin-1").status, 404, "then gone")
    r = A.post(VMS, vm("fg-1", run_strategy="Halted"))
    ref = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "fg-1",
           "uid": r.json["metadata"]["uid"], "blockOwnerDeletion": True}
    s = secret("fg-1-ci", "x")
    s["metadata"]["ownerReferences"] = [ref]
    s["metadata"]["finalizers"] = ["example.com/hold"]
    A.post(SECRETS, s)
    r = A.delete(VMS + "/fg-1?propagationPolicy=Foreground")
    t.ok("foregroundDeletion" in r.json["metadata"].get("finalizers", []), "foreground finalizer")
    wait_for(lambda: A.get(SECRETS + "/fg-1-ci").json["metadata"].get("deletionTimestamp"), 5,
             what="dependent deleting")
    t.eq(A.get(VMS + "/fg-1").status, 200, "owner waits for its blocking dependent")
    A.patch(SECRETS + "/fg-1-ci", {"metadata": {"finalizers": None}})
    wait_for(lambda: A.get(VMS + "/fg-1").status == 404, 5, what="owner gone after dependent")


@t.test
def pods_and_vmis_read_only_for_backend():
    t.eq(B.get(PODS).status, 200, "backend lists pods (its lab Pods)")
    t.eq(B.patch(PODS + "/x", {"metadata": {"labels": {"a": "b"}}}).status, 403,
         "backend cannot patch pods")
    t.eq(B.get(VMIS).status, 200, "backend lists VMIs")


@t.test(name="the operators' CRs: KubeVirt's (readable by everyone) and CDI's; virt-api's version")
def operator_crs_and_versions():
    other = sim.client(sim.token(sa="labs/nobody"))   # no binding of its own
    r = other.get("/apis/kubevirt.io/v1/kubevirts")
    t.eq(r.status, 200, "any authenticated user lists the KubeVirt CR (kubevirt.io:default)",
         r.json)
    items = r.json.get("items") or []
    t.eq([(i["metadata"]["namespace"], i["metadata"]["name"]) for i in items],
         [("kubevirt", "kubevirt")], "one, in namespace kubevirt")
    st = items[0].get("status") or {}
    t.eq((st.get("phase"), st.get("observedKubeVirtVersion")), ("Deployed", "v1.9.0"),
         "deployed, at 1.9.0")
    t.eq(items[0]["spec"]["configuration"]["developerConfiguration"]["useEmulation"], False,
         "no software emulation by default")
    t.eq(other.patch("/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts/kubevirt",
                     {"spec": {"imagePullPolicy": "Always"}}).status, 403, "but not change it")
    r = other.get("/apis/subresources.kubevirt.io/v1/version")
    t.eq((r.status, r.json.get("gitVersion")), (200, "v1.9.0"), "virt-api's version", r.json)
    t.ok(set(r.json) >= {"gitVersion", "gitCommit", "gitTreeState", "buildDate", "goVersion",
                         "compiler", "platform"}, "kubevirt.io/client-go version.Info's fields")
    anon = sim.client(None).get("/apis/subresources.kubevirt.io/v1/version")
    t.eq(anon.status, 401, "not without a token (kube-apiserver authenticates first)")
    r = other.get("/apis/cdi.kubevirt.io/v1beta1/cdis")
    t.eq(r.status, 403, "CDI grants no default read of its CR")
    r = A.get("/apis/cdi.kubevirt.io/v1beta1/cdis")
    st = ((r.json.get("items") or [{}])[0]).get("status") or {}
    t.eq((st.get("phase"), st.get("observedVersion")), ("Deployed", "v1.66.0"), "CDI at 1.66.0")
    t.eq(B.get("/apis/cdi.kubevirt.io/v1beta1/cdis").status, 200,
         "the backend may (rbac.yaml's ClusterRole labvm-doctor)")


sim.stop()
t.done()
