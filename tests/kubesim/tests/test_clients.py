#!/usr/bin/python3
"""kubesim: Debian's kubectl (kubernetes-client) and python3-kubernetes against
the simulator (timeout: 150)."""
import json
import os
import subprocess

from simlib import KUBECTL, Sim, vm, wait_for, wait_running, VMS
from tap import T

t = T()
sim = Sim()
HAVE_KUBECTL = os.access(KUBECTL, os.X_OK)
NO_KUBECTL = None if HAVE_KUBECTL else f"Debian's kubectl not at {KUBECTL} (run tests/deps)"
try:

    from kubernetes import client, watch
    from kubernetes.client.rest import ApiException
    NO_PYK = None
except ImportError:
    NO_PYK = "python3-kubernetes not installed"

KC_ADMIN = sim.kubeconfig()
KC_BACKEND = sim.kubeconfig(sim.backend_token)


def k(*args, kc=KC_ADMIN, inp=None):
    r = subprocess.run([KUBECTL, "--kubeconfig", kc, "--request-timeout=20s"] + list(args),
                       input=inp, capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr


def manifest(name, **kw):
    return json.dumps(vm(name, **kw))


@t.test(skip=NO_KUBECTL)
def kubectl_discovery_and_get():
    rc, out, err = k("version")
    t.eq(rc, 0, f"kubectl version: {err}")
    t.ok("v1.34.0+kubesim" in out, "server version shown", out)
    rc, out, err = k("get", "nodes")
    t.eq(rc, 0, f"get nodes: {err}")
    t.eq(len(out.strip().splitlines()), 5, "four nodes and a header")
    rc, out, err = k("api-resources", "--api-group=kubevirt.io")
    t.eq(rc, 0, f"api-resources: {err}")
    t.ok("virtualmachines" in out and "vm" in out, "KubeVirt resources discovered", out)
    rc, out, err = k("get", "pvc", "golden-debian-12", "-o", "jsonpath={.status.phase}")
    t.eq((rc, out), (0, "Bound"), f"jsonpath output ({err})")


@t.test(skip=NO_KUBECTL)
def kubectl_crud_secrets_and_vms():
    rc, out, err = k("create", "secret", "generic", "kc-ci",
                     "--from-literal=userdata=#cloud-config")
    t.eq(rc, 0, f"create secret: {err}")
    rc, out, err = k("apply", "-f", "-", inp=manifest("kc-vm", secret_name="kc-ci"))
    t.eq(rc, 0, f"apply (create) VM: {err}")
    t.ok("created" in out, out)
    wait_running(sim, "kc-vm")
    rc, out, err = k("get", "vm", "-l", "labvm.io/lab-session=true")
    t.eq(rc, 0, f"get vm with a selector: {err}")
    t.ok("kc-vm" in out and "Running" in out, "table shows the VM Running", out)
    rc, out, err = k("get", "vmi", "kc-vm", "-o", "json")
    t.eq(rc, 0, err)
    t.eq(json.loads(out)["status"]["phase"], "Running", "-o json")
    changed = vm("kc-vm", secret_name="kc-ci")
    changed["metadata"]["labels"]["extra"] = "yes"
    rc, out, err = k("apply", "-f", "-", inp=json.dumps(changed))
    t.eq(rc, 0, f"apply (patch) VM: {err}")
    t.ok("configured" in out, out)
    t.eq(sim.admin.get(VMS + "/kc-vm").json["metadata"]["labels"].get("extra"), "yes",
         "label applied")
    rc, out, err = k("apply", "-f", "-", inp=json.dumps(changed))
    t.ok(rc == 0 and "unchanged" in out, f"apply again is unchanged: {out} {err}")
    rc, out, err = k("label", "secret", "kc-ci", "a=b")
    t.eq(rc, 0, f"label secret (strategic merge patch): {err}")
    rc, out, err = k("delete", "vm", "kc-vm")
    t.eq(rc, 0, f"delete VM: {err}")
    t.eq(sim.admin.get(VMS + "/kc-vm").status, 404, "kubectl delete waited until it was gone")
    rc, out, err = k("delete", "secret", "kc-ci")
    t.eq(rc, 0, f"delete secret: {err}")


@t.test(skip=NO_KUBECTL)
def kubectl_errors():
    bad = vm("kc-bad")
    bad["spec"]["template"]["spec"]["domain"]["cpux"] = 1
    rc, out, err = k("apply", "-f", "-", inp=json.dumps(bad))
    t.ok(rc != 0 and 'unknown field "spec.template.spec.domain.cpux"' in err,
         "strict validation error reaches kubectl", err)
    rc, out, err = k("get", "vm", "nope")
    t.ok(rc != 0 and 'virtualmachines.kubevirt.io "nope" not found' in err, "NotFound", err)
    rc, out, err = k("get", "events", kc=KC_BACKEND)
    t.ok(rc != 0 and "Forbidden" in err and "cannot list resource \"events\"" in err,
         "Forbidden for the backend", err)
    rc, out, err = k("get", "vm", kc=KC_BACKEND)
    t.eq(rc, 0, f"backend may list VMs: {err}")


def pyk(token):
    cfg = client.Configuration()
    cfg.host = sim.url
    cfg.ssl_ca_cert = sim.ca
    cfg.api_key = {"authorization": "Bearer " + token}
    return client.ApiClient(cfg)


@t.test(skip=NO_PYK)
def python_kubernetes_crud():
    api = pyk(sim.backend_token)
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    s = client.V1Secret(metadata=client.V1ObjectMeta(name="py-ci", labels={
        "labvm.io/lab-session": "true"}), string_data={"userdata": "#cloud-config\n"})
    out = core.create_namespaced_secret("labs", s)
    t.ok(out.metadata.uid, "create secret")
    out = core.patch_namespaced_secret("py-ci", "labs", {"metadata": {"labels": {"x": "y"}}})
    t.eq(out.metadata.labels.get("x"), "y", "patch (strategic merge) secret")
    names = [i.metadata.name for i in core.list_namespaced_secret(
        "labs", label_selector="labvm.io/lab-session=true,x in (y)").items]
    t.eq(names, ["py-ci"], "list with a selector")
    t.eq(core.read_namespaced_persistent_volume_claim("golden-debian-12", "labs").status.phase,
         "Bound", "read PVC")
    body = vm("py-vm", secret_name="py-ci")
    o = co.create_namespaced_custom_object("kubevirt.io", "v1", "labs", "virtualmachines", body)
    t.eq(o["metadata"]["name"], "py-vm", "create VM")
    try:
        co.create_namespaced_custom_object("kubevirt.io", "v1", "labs", "virtualmachines", body)
        t.fail("duplicate create accepted")
    except ApiException as e:
        t.eq(e.status, 409, "duplicate VM -> 409")
    wait_running(sim, "py-vm")
    lst = co.list_namespaced_custom_object("kubevirt.io", "v1", "labs", "virtualmachines",
                                           label_selector="labvm.io/lab-session=true")
    t.eq([i["metadata"]["name"] for i in lst["items"]], ["py-vm"], "list VMs")
    vmi = co.get_namespaced_custom_object("kubevirt.io", "v1", "labs", "virtualmachineinstances",
                                          "py-vm")
    t.eq(vmi["status"]["phase"], "Running", "get VMI")
    # the backend relabels a warm pool VM as a session's (rbac.yaml: patch on VMs)
    o = co.patch_namespaced_custom_object("kubevirt.io", "v1", "labs", "virtualmachines", "py-vm",
                                          {"metadata": {"labels": {"a": "b"}}})
    t.eq(o["metadata"]["labels"].get("a"), "b", "merge patch of a VM by the backend")
    try:
        co.patch_namespaced_custom_object("kubevirt.io", "v1", "labs", "virtualmachineinstances",
                                          "py-vm", {"metadata": {"labels": {"a": "b"}}})
        t.fail("backend patched a VMI")
    except ApiException as e:
        t.eq(e.status, 403, "backend may not patch VMIs")
    admin = client.CustomObjectsApi(pyk(sim.admin_token))
    o = admin.patch_namespaced_custom_object("kubevirt.io", "v1", "labs", "virtualmachines",
                                             "py-vm", {"metadata": {"labels": {"a": None}}})
    t.ok("a" not in o["metadata"]["labels"], "merge patch removes a label (null)")
    d = co.delete_namespaced_custom_object("kubevirt.io", "v1", "labs", "virtualmachines",
                                           "py-vm", propagation_policy="Background")
    t.ok(d["metadata"].get("deletionTimestamp"), "delete returns the terminating VM")
    wait_for(lambda: sim.admin.get(VMS + "/py-vm").status == 404, 10, what="VM gone")
    t.eq(core.read_namespaced_secret("py-ci", "labs").metadata.name, "py-ci",
         "a Secret without an owner reference outlives the VM")
    st = core.delete_namespaced_secret("py-ci", "labs")
    t.eq(st.status, "Success", "delete secret")
    try:
        core.read_namespaced_secret("py-ci", "labs")
        t.fail("secret still there")
    except ApiException as e:
        t.eq(e.status, 404, "then 404")


@t.test(skip=NO_PYK)
def python_kubernetes_watch():
    api = pyk(sim.admin_token)
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    rv = co.list_namespaced_custom_object("kubevirt.io", "v1", "labs",
                                          "virtualmachineinstances")["metadata"]["resourceVersion"]
    co.create_namespaced_custom_object("kubevirt.io", "v1", "labs", "virtualmachines",
                                       vm("py-w"))
    seen = []
    w = watch.Watch()
    for ev in w.stream(co.list_namespaced_custom_object, "kubevirt.io", "v1", "labs",
                       "virtualmachineinstances", resource_version=rv, timeout_seconds=5):
        seen.append((ev["type"], ev["object"]["status"].get("phase")))
        if ev["object"]["status"].get("phase") == "Running":
            w.stop()
    t.eq(seen[0][0], "ADDED", "ADDED first")
    t.eq(seen[-1], ("MODIFIED", "Running"), "MODIFIED to Running")
    co.delete_namespaced_custom_object("kubevirt.io", "v1", "labs", "virtualmachines", "py-w")
    types = []
    for ev in w.stream(core.list_namespaced_pod, "labs", label_selector="vm.kubevirt.io/name=py-w",
                       timeout_seconds=5):
        types.append(ev["type"])
        if ev["type"] == "DELETED":
            w.stop()
    t.eq(types[-1] if types else None, "DELETED", "launcher pod DELETED event")


sim.stop()
t.done()
