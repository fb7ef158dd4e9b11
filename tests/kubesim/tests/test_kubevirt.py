#!/usr/bin/python3
"""kubesim: KubeVirt and CDI behaviour: VM -> VMI -> launcher pod -> Running,
scheduling on nodes with memory, volumes (missing PVC, RWO on two nodes,
DataVolume import), missing cloud-init Secret, deletion (timeout: 150)."""
import time

from simlib import (DVS, EVENTS, NS, PODS, PVCS, SECRETS, VMIS, VMS, Sim, events_for, phase,
                    secret, vm, wait_for, wait_running)
from tap import T

t = T()
sim = Sim("--nodes", "3", "--node-memory", "8Gi", guest="none")
A, B = sim.admin, sim.backend
LABELS = {"labvm.io/lab-session": "true", "labvm.io/session-id": "s-1",
          "labvm.io/environment": "check", "labvm.io/lesson": "linux-basics"}


def watch_phases(name, timeout=5):
    """VMI phases seen through a watch, in order, until Running."""
    rv = A.get(VMIS).json["metadata"]["resourceVersion"]
    w = A.watch(VMIS + f"?watch=1&resourceVersion={rv}&fieldSelector=metadata.name%3D{name}"
                f"&timeoutSeconds={timeout}")
    return w


@t.test
def vm_to_running_vmi_and_pod():
    B.post(SECRETS, secret("life-1", "#cloud-config\n", labels=LABELS))
    w = watch_phases("life-1")
    t0 = time.monotonic()
    r = B.post(VMS, vm("life-1", "life-1", labels=LABELS))
    t.eq(r.status, 201, "create VM")
    phases = []
    while True:
        e = w.next()
        if e is None:
            break
        p = (e["object"].get("status") or {}).get("phase")
        if not phases or phases[-1] != p:
            phases.append(p)
        if p == "Running":
            break
    took = time.monotonic() - t0
    w.close()
    t.eq(phases, ["Pending", "Scheduling", "Scheduled", "Running"], "VMI phases")
    t.diag(f"Running after {took:.2f}s (fast profile)")
    vmi = A.get(VMIS + "/life-1").json
    for k, v in LABELS.items():
        t.eq(vmi["metadata"]["labels"].get(k), v, f"VMI label {k} from the template")
    ref = vmi["metadata"]["ownerReferences"][0]
    t.eq((ref["kind"], ref["name"], ref["controller"]), ("VirtualMachine", "life-1", True),
         "VMI owned by its VM")
    t.ok(vmi["status"].get("nodeName", "").startswith("node-"), "nodeName")
    ip = vmi["status"]["interfaces"][0]["ipAddress"]
    t.ok(ip.startswith(f"10.{sim.port >> 8}.{sim.port & 255}."),
         "interfaces[0].ipAddress on the pod network", ip)
    conds = {c["type"]: c["status"] for c in vmi["status"]["conditions"]}
    t.eq(conds.get("Ready"), "True", "Ready condition")
    ts = [p["phase"] for p in vmi["status"]["phaseTransitionTimestamps"]]
    t.eq(ts, ["Pending", "Scheduling", "Scheduled", "Running"], "phaseTransitionTimestamps")
    pods = A.get(PODS + "?labelSelector=kubevirt.io%3Dvirt-launcher%2Cvm.kubevirt.io%2Fname%3Dlife-1"
                 ).json["items"]
    t.eq(len(pods), 1, "one launcher pod")
    pod = pods[0]
    t.ok(pod["metadata"]["name"].startswith("virt-launcher-life-1-"), "pod name")
    for k, v in LABELS.items():
        t.eq(pod["metadata"]["labels"].get(k), v, f"pod label {k}")
    t.eq(pod["metadata"]["labels"].get("kubevirt.io/created-by"), vmi["metadata"]["uid"],
         "created-by label")
    t.eq(pod["metadata"]["ownerReferences"][0]["uid"], vmi["metadata"]["uid"], "pod owned by VMI")
    t.eq(pod["status"]["phase"], "Running", "pod Running")
    t.eq(pod["status"]["podIP"], ip, "pod IP is the VMI's address")
    t.eq(pod["spec"]["nodeName"], vmi["status"]["nodeName"], "same node")
    v = wait_for(lambda: (lambda j: j if j["status"].get("printableStatus") == "Running" else None)(
        A.get(VMS + "/life-1").json), 2, what="VM Running")
    t.eq(v["status"].get("printableStatus"), "Running", "VM printableStatus")
    t.eq(v["status"].get("ready"), True, "VM ready")
    evs = {e["reason"] for e in events_for(sim, "life-1")}
    for reason in ("SuccessfulCreate", "Scheduled", "Started"):
        t.ok(reason in evs, f"event {reason}", evs)


@t.test
def deletion_is_observable_while_terminating():
    r = B.delete(VMS + "/life-1")
    t.eq(r.status, 200, "delete")
    t0 = time.monotonic()
    lst = B.get(VMS + "?labelSelector=labvm.io%2Flab-session%3Dtrue").json["items"]
    names = [i["metadata"]["name"] for i in lst]
    t.ok("life-1" in names, "a terminating VM is still listed (it holds memory)", names)
    v = A.get(VMS + "/life-1").json
    t.ok(v["metadata"].get("deletionTimestamp"), "deletionTimestamp")
    t.ok("kubevirt.io/virtualMachineControllerFinalize" in v["metadata"].get("finalizers", []),
         "VM finalizer")
    saw_terminating = False

    def gone():
        nonlocal saw_terminating
        r = A.get(VMS + "/life-1")
        if r.status == 200 and r.json["status"].get("printableStatus") == "Terminating":
            saw_terminating = True
        return r.status == 404
    wait_for(gone, 120, what="VM gone")
    t.ok(saw_terminating, "printableStatus Terminating seen (deletion is observable)")
    t.eq(A.get(VMIS + "/life-1").status, 404, "VMI gone")
    t.eq(A.get(PODS + "?labelSelector=vm.kubevirt.io%2Fname%3Dlife-1").json["items"], [],
         "pod gone")


@t.test
def scheduling_respects_memory():
    # 3 nodes x 8Gi; each 3Gi VM's pod asks 3Gi + overhead: two fit per node
    for i in range(7):
        A.post(VMS, vm(f"mem-{i}", memory="3Gi", disk="container"))
    wait_for(lambda: sum(1 for i in range(7) if phase(sim, f"mem-{i}") == "Running") == 6, 10,
             what="six running")
    time.sleep(0.3)
    phases = [phase(sim, f"mem-{i}") for i in range(7)]
    t.eq(sorted(phases, key=str).count("Running"), 6, "six fit", phases)
    pend = [i for i, p in enumerate(phases) if p != "Running"]
    t.eq(len(pend), 1, "one stays out")
    if pend:
        name = f"mem-{pend[0]}"
        pod = A.get(PODS + f"?labelSelector=vm.kubevirt.io%2Fname%3D{name}").json["items"][0]
        t.eq(pod["status"]["phase"], "Pending", "its pod is Pending")
        c = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"][0]
        t.eq((c["status"], c["reason"]), ("False", "Unschedulable"), "Unschedulable")
        t.ok("Insufficient memory" in c["message"], "message", c["message"])
        v = A.get(VMS + f"/{name}").json
        t.eq(v["status"]["printableStatus"], "ErrorUnschedulable", "VM printableStatus")
        t.ok(any(e["reason"] == "FailedScheduling" for e in events_for(sim, name)),
             "FailedScheduling event")
        nodes = {A.get(VMIS + f"/mem-{i}").json["status"].get("nodeName")
                 for i in range(7) if i != pend[0]}
        t.eq(len(nodes), 3, "spread over the three nodes")
        A.delete(VMS + "/mem-0" if pend[0] != 0 else VMS + "/mem-1")
        wait_running(sim, name, 10)
        t.ok(True, "runs once memory is freed")
    for i in range(7):
        A.delete(VMS + f"/mem-{i}")
    wait_for(lambda: not A.get(PODS).json["items"], 10, what="pods gone")


@t.test
def bigger_than_any_node_stays_pending():
    A.post(VMS, vm("huge-1", memory="64Gi"))
    time.sleep(1.0)
    vmi = A.get(VMIS + "/huge-1").json
    t.eq(vmi["status"]["phase"], "Scheduling", "VMI waits (pod exists)")
    c = {c["type"]: c for c in vmi["status"].get("conditions", [])}
    t.eq(c.get("PodScheduled", {}).get("reason"), "Unschedulable", "PodScheduled Unschedulable")
    t.eq(A.get(VMS + "/huge-1").json["status"]["printableStatus"], "ErrorUnschedulable",
         "VM printableStatus")
    A.delete(VMS + "/huge-1")


@t.test
def missing_pvc():
    A.post(VMS, vm("nopvc-1", claim="does-not-exist"))
    wait_for(lambda: A.get(VMS + "/nopvc-1").json["status"].get("printableStatus") ==
             "ErrorPvcNotFound", 5, what="ErrorPvcNotFound")
    time.sleep(0.5)
    vmi = A.get(VMIS + "/nopvc-1").json
    t.eq(vmi["status"]["phase"], "Pending", "VMI stays Pending")
    t.eq(A.get(PODS + "?labelSelector=vm.kubevirt.io%2Fname%3Dnopvc-1").json["items"], [],
         "no launcher pod is rendered")
    c = {c["type"]: c for c in vmi["status"].get("conditions", [])}
    t.eq((c.get("Synchronized", {}).get("status"), c.get("Synchronized", {}).get("reason")),
         ("False", "FailedPvcNotFound"), "Synchronized condition")
    evs = [e for e in events_for(sim, "nopvc-1") if e["reason"] == "FailedPvcNotFound"]
    t.ok(evs and evs[0]["type"] == "Warning" and evs[0]["message"] ==
         "failed to render launch manifest: didn't find PVC does-not-exist", "event", evs)
    # the PVC appears: the VMI starts (nothing fails permanently)
    A.post(PVCS, {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                  "metadata": {"name": "does-not-exist"},
                  "spec": {"accessModes": ["ReadOnlyMany"],
                           "resources": {"requests": {"storage": "1Gi"}}}})
    wait_running(sim, "nopvc-1", 5)
    t.ok(True, "runs once the PVC exists and is Bound")
    A.delete(VMS + "/nopvc-1")


@t.test
def rwo_pvc_on_two_nodes():
    A.post(PVCS, {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                  "metadata": {"name": "rwo-disk"},
                  "spec": {"accessModes": ["ReadWriteOnce"],
                           "resources": {"requests": {"storage": "1Gi"}}}})
    wait_for(lambda: A.get(PVCS + "/rwo-disk").json["status"]["phase"] == "Bound", 5)
    A.post(VMS, vm("rwo-a", disk="pvc", claim="rwo-disk", node="node-1"))
    wait_running(sim, "rwo-a")
    A.post(VMS, vm("rwo-b", disk="pvc", claim="rwo-disk", node="node-2"))
    A.post(VMS, vm("rwo-c", disk="pvc", claim="rwo-disk", node="node-1"))
    wait_running(sim, "rwo-c")
    t.ok(True, "a second pod on the same node may use an RWO volume")
    time.sleep(0.8)
    vmi = A.get(VMIS + "/rwo-b").json
    t.eq(vmi["status"]["phase"], "Scheduling", "second node's VMI stays Scheduling")
    pod = A.get(PODS + "?labelSelector=vm.kubevirt.io%2Fname%3Drwo-b").json["items"][0]
    t.eq(pod["spec"].get("nodeName"), "node-2", "scheduled to node-2")
    t.eq(pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"],
         "ContainerCreating", "ContainerCreating")
    evs = [e for e in events_for(sim, "rwo-b") if e["reason"] == "FailedAttachVolume"]
    t.ok(evs, "FailedAttachVolume event")
    if evs:
        t.eq(evs[0]["type"], "Warning", "Warning")
        t.ok(evs[0]["message"].startswith('Multi-Attach error for volume "pvc-') and
             "Volume is already exclusively attached to one node and can't be attached to "
             "another" in evs[0]["message"], "Multi-Attach message", evs[0]["message"])
        t.eq(evs[0]["source"]["component"], "attachdetach-controller", "source")
    A.delete(VMS + "/rwo-a")
    A.delete(VMS + "/rwo-c")
    wait_running(sim, "rwo-b", 10)
    t.ok(True, "attaches once the other node let go")
    A.delete(VMS + "/rwo-b")


@t.test
def datavolume_import():
    dv = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
          "metadata": {"name": "fresh-1", "annotations": {"labvm.io/image": "img"}},
          "spec": {"source": {"registry": {"url": "docker://quay.io/containerdisks/debian:12"}},
                   "storage": {"resources": {"requests": {"storage": "10Gi"}}}}}
    t.eq(A.post(DVS, dv).status, 201, "create DataVolume")
    rv = A.get(DVS).json["metadata"]["resourceVersion"]
    wd = A.watch(DVS + f"?watch=1&resourceVersion={rv}&timeoutSeconds=8")
    wp = A.watch(PVCS + f"?watch=1&resourceVersion={rv}&fieldSelector=metadata.name%3Dfresh-1"
                 "&timeoutSeconds=8")
    A.post(VMS, vm("dv-vm", disk="dv", claim="fresh-1"))
    seen, ann_seen, provisioning = [], [], False
    while True:
        e = wd.next()
        if e is None:
            break
        p = e["object"].get("status", {}).get("phase")
        if p and (not seen or seen[-1] != p):
            seen.append(p)
        if p == "ImportInProgress" and not provisioning:
            provisioning = A.get(VMS + "/dv-vm").json["status"].get("printableStatus") == \
                "Provisioning"
        if p == "Succeeded":
            break
    wd.close()
    while True:
        e = wp.next()
        if e is None:
            break
        a = e["object"]["metadata"].get("annotations", {}).get("cdi.kubevirt.io/storage.pod.phase")
        if a and (not ann_seen or ann_seen[-1] != a):
            ann_seen.append(a)
        if a == "Succeeded":
            break
    wp.close()
    t.ok(provisioning, "VM printableStatus Provisioning while importing")
    t.eq([s for s in seen if s != "Pending"], ["ImportScheduled", "ImportInProgress", "Succeeded"],
         f"CDI phases {seen}")
    t.eq(ann_seen, ["Pending", "Running", "Succeeded"], "PVC storage.pod.phase annotation")
    pvc = A.get(PVCS + "/fresh-1").json
    t.eq(pvc["metadata"]["annotations"].get("labvm.io/image"), "img",
         "DataVolume annotations pass to the PVC")
    # CDI 1.66 on a CSI class: the import populator (the endpoint is on the prime claim)
    t.eq(pvc["spec"].get("dataSourceRef"),
         {"apiGroup": "cdi.kubevirt.io", "kind": "VolumeImportSource",
          "name": "volume-import-source-" + A.get(DVS + "/fresh-1").json["metadata"]["uid"]},
         "the claim names its VolumeImportSource")
    t.eq(pvc["status"]["phase"], "Bound", "PVC Bound")
    t.eq(A.get(DVS + "/fresh-1").json["status"]["progress"], "100.0%", "progress")
    wait_running(sim, "dv-vm", 5)
    t.ok(True, "the VM runs once the import succeeded")
    A.delete(VMS + "/dv-vm")
    A.delete(DVS + "/fresh-1")
    wait_for(lambda: A.get(PVCS + "/fresh-1").status == 404, 5, what="PVC collected with its DV")


@t.test
def data_volume_templates():
    v = vm("dvt-1", disk="dv", claim="dvt-1-root")
    v["spec"]["dataVolumeTemplates"] = [{"metadata": {"name": "dvt-1-root"}, "spec": {
        "source": {"registry": {"url": "docker://quay.io/containerdisks/debian:12"}},
        "storage": {"resources": {"requests": {"storage": "10Gi"}}}}}]
    t.eq(A.post(VMS, v).status, 201, "VM with dataVolumeTemplates")
    wait_running(sim, "dvt-1", 8)
    dv = A.get(DVS + "/dvt-1-root").json
    t.eq(dv["metadata"]["ownerReferences"][0]["name"], "dvt-1", "DV owned by the VM")
    A.delete(VMS + "/dvt-1")
    wait_for(lambda: A.get(DVS + "/dvt-1-root").status == 404, 5, what="DV collected")


@t.test
def missing_secret_keeps_vmi_from_starting():
    A.post(VMS, vm("nosec-1", "nosec-1-ci"))
    time.sleep(0.8)
    t.eq(A.get(VMIS + "/nosec-1").json["status"]["phase"], "Scheduling", "stuck in Scheduling")
    evs = [e for e in events_for(sim, "nosec-1") if e["reason"] == "FailedMount"]
    t.ok(evs and 'secret "nosec-1-ci" not found' in evs[0]["message"], "FailedMount event", evs)
    A.post(SECRETS, secret("nosec-1-ci", "#cloud-config\n"))
    wait_running(sim, "nosec-1", 5)
    t.ok(True, "starts once the Secret exists")
    A.delete(VMS + "/nosec-1")


@t.test
def image_pull_failure_and_halted():
    A.post(VMS, vm("badimg-1", disk="container", image="quay.io/nope/doesnotexist:1"))
    wait_for(lambda: A.get(VMS + "/badimg-1").json["status"].get("printableStatus") in
             ("ErrImagePull", "ImagePullBackOff"), 5, what="ErrImagePull")
    t.ok(True, "ErrImagePull")
    A.delete(VMS + "/badimg-1")
    A.post(VMS, vm("halt-1", run_strategy="Halted"))
    wait_for(lambda: A.get(VMS + "/halt-1").json.get("status", {}).get("printableStatus") ==
             "Stopped", 5, what="Stopped")
    t.eq(A.get(VMIS + "/halt-1").status, 404, "no VMI for a Halted VM")
    r = A.patch(VMS + "/halt-1", {"spec": {"runStrategy": "Always"}})
    t.eq(r.status, 200, "start by patching runStrategy")
    wait_running(sim, "halt-1")
    r = A.patch(VMS + "/halt-1", {"spec": {"runStrategy": "Halted"}})
    wait_for(lambda: A.get(VMIS + "/halt-1").status == 404, 5, what="stopped")
    wait_for(lambda: A.get(VMS + "/halt-1").json["status"]["printableStatus"] == "Stopped", 5,
             what="Stopped again")
    t.ok(True, "Stopped again")
    A.delete(VMS + "/halt-1")


@t.test
def nodes_served():
    r = A.get("/api/v1/nodes")
    t.eq([n["metadata"]["name"] for n in r.json["items"]], ["node-1", "node-2", "node-3"], "nodes")
    n = A.get("/api/v1/nodes/node-2").json
    t.eq(n["status"]["capacity"]["memory"], "8Gi", "node memory")
    t.eq(n["status"]["allocatable"]["devices.kubevirt.io/kvm"], "1k", "VMIs per node (default)")
    t.eq(A.get(EVENTS).status, 200, "events listable")
    t.eq(A.get(f"/api/v1/namespaces/{NS}").json["status"]["phase"], "Active", "namespace")


def affine_vm(name, sid, memory="1Gi", anti=None):
    """A VM of session sid whose launcher pod must share a node with the
    session's others (what labvm asks for a multi-machine session)."""
    labels = dict(LABELS, **{"labvm.io/session-id": sid})
    o = vm(name, labels=labels, disk="container", memory=memory)
    term = {"labelSelector": {"matchLabels": {"labvm.io/session-id": sid}},
            "topologyKey": "kubernetes.io/hostname"}
    aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    if anti:
        aff["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"labvm.io/session-id": anti}},
             "topologyKey": "kubernetes.io/hostname"}]}
    o["spec"]["template"]["spec"]["affinity"] = aff
    return o


def node_of(name):
    return (A.get(VMIS + f"/{name}").json.get("status") or {}).get("nodeName")


def pod_scheduled(name):
    pods = A.get(PODS + f"?labelSelector=vm.kubevirt.io%2Fname%3D{name}").json["items"]
    c = [c for p in pods for c in (p.get("status") or {}).get("conditions") or []
         if c["type"] == "PodScheduled"]
    return c[0] if c else {}


@t.test(name="least allocated: three VMs at once spread over the three nodes")
def least_allocated_spreads():
    for i in range(3):
        A.post(VMS, vm(f"spread-{i}", disk="container", memory="512Mi"))
    for i in range(3):
        wait_running(sim, f"spread-{i}", 10)
    nodes = [node_of(f"spread-{i}") for i in range(3)]
    t.eq(len(set(nodes)), 3, "one per node", nodes)
    # a bigger VM goes where the least is requested
    # (placed before anything is freed: the three nodes tie, so it may go to
    # any of them; the node emptied next is one it did not take)
    A.post(VMS, vm("spread-big", disk="container", memory="4Gi"))
    wait_running(sim, "spread-big", 10)
    big = node_of("spread-big")
    v = next(i for i in range(3) if nodes[i] != big)
    A.delete(VMS + f"/spread-{v}")
    wait_for(lambda: not A.get(PODS + f"?labelSelector=vm.kubevirt.io%2Fname%3Dspread-{v}")
             .json["items"], 10, what=f"spread-{v}'s pod gone")
    A.post(VMS, vm("spread-next", disk="container", memory="512Mi"))
    wait_running(sim, "spread-next", 10)
    t.eq(node_of("spread-next"), nodes[v], "the next VM takes the emptied node",
         (nodes, big))
    for n in [f"spread-{i}" for i in range(3) if i != v] + ["spread-big", "spread-next"]:
        A.delete(VMS + f"/{n}")
    wait_for(lambda: not A.get(PODS).json["items"], 10, what="pods gone")


@t.test(name="required pod affinity on the session id: a session's VMs share one node")
def pod_affinity_same_node():
    for i in range(3):
        A.post(VMS, affine_vm(f"aff-a{i}", "sess-a", memory="512Mi"))
    for i in range(3):
        wait_running(sim, f"aff-a{i}", 10)
    nodes = {node_of(f"aff-a{i}") for i in range(3)}
    t.eq(len(nodes), 1, "all three on one node (the first of the group went anywhere)", nodes)
    # another session's group starts elsewhere (least allocated), then stays together
    for i in range(2):
        A.post(VMS, affine_vm(f"aff-b{i}", "sess-b", memory="512Mi"))
        wait_running(sim, f"aff-b{i}", 10)
    nb = {node_of(f"aff-b{i}") for i in range(2)}
    t.eq(len(nb), 1, "session b together", nb)
    t.ok(nb != nodes, "and not on session a's node", (nodes, nb))
    # a VM of session a that its node cannot hold waits, named, never elsewhere
    A.post(VMS, affine_vm("aff-a-big", "sess-a", memory="6Gi"))
    wait_for(lambda: pod_scheduled("aff-a-big").get("reason") == "Unschedulable", 10,
             what="aff-a-big unschedulable")
    msg = pod_scheduled("aff-a-big").get("message", "")
    t.ok("1 Insufficient memory" in msg and "2 node(s) didn't match pod affinity rules" in msg,
         "its node is full, the others are not its session's", msg)
    t.ok("2 Preemption is not helpful for scheduling" in msg, "affinity: unresolvable", msg)
    for n in ("aff-a0", "aff-a1", "aff-a2", "aff-a-big", "aff-b0", "aff-b1"):
        A.delete(VMS + f"/{n}")
    wait_for(lambda: not A.get(PODS).json["items"], 10, what="pods gone")


@t.test(name="pod affinity to pods that do not exist, not matching itself: never scheduled")
def pod_affinity_no_match():
    o = affine_vm("aff-lone", "sess-x")
    # the term selects another session's pods, not its own labels
    o["spec"]["template"]["spec"]["affinity"]["podAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"] = {
        "matchLabels": {"labvm.io/session-id": "sess-nobody"}}
    A.post(VMS, o)
    wait_for(lambda: pod_scheduled("aff-lone").get("reason") == "Unschedulable", 10,
             what="unschedulable")
    msg = pod_scheduled("aff-lone").get("message", "")
    t.ok(msg.startswith("0/3 nodes are available: 3 node(s) didn't match pod affinity rules."),
         "no node: the special case needs the pod to match its own terms", msg)
    # anti-affinity: a pod refusing session y's node goes elsewhere
    A.delete(VMS + "/aff-lone")
    A.post(VMS, affine_vm("anti-y0", "sess-y", memory="512Mi"))
    wait_running(sim, "anti-y0", 10)
    A.post(VMS, affine_vm("anti-z0", "sess-z", memory="256Mi", anti="sess-y"))
    wait_running(sim, "anti-z0", 10)
    t.ok(node_of("anti-z0") != node_of("anti-y0"), "anti-affinity keeps it off y's node")
    for n in ("anti-y0", "anti-z0"):
        A.delete(VMS + f"/{n}")
    wait_for(lambda: not A.get(PODS).json["items"], 10, what="pods gone")


@t.test
def guests_per_node_are_bounded():
    """--max-guests N: the node's devices.kubevirt.io/kvm (virt-handler's device
    count; what bounds real QEMU guests on a small machine)."""
    with Sim("--nodes", "1", "--max-guests", "2", guest="none") as s2:
        a = s2.admin
        node = a.get("/api/v1/nodes/node-1").json
        t.eq(node["status"]["allocatable"]["devices.kubevirt.io/kvm"], "2", "node allocatable")
        for i in range(3):
            a.post(VMS, vm(f"slot-{i}", disk="container"))
            if i < 2:
                wait_running(s2, f"slot-{i}")
        wait_for(lambda: a.get(VMS + "/slot-2").json.get("status", {}).get("printableStatus") ==
                 "ErrorUnschedulable", 5, what="third unschedulable")
        pod = a.get(PODS + "?labelSelector=vm.kubevirt.io%2Fname%3Dslot-2").json["items"][0]
        c = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"][0]
        t.eq((c["status"], c["reason"]), ("False", "Unschedulable"), "Unschedulable")
        t.ok("1 Insufficient devices.kubevirt.io/kvm" in c["message"], "message", c["message"])
        t.eq(phase(s2, "slot-2"), "Scheduling", "its VMI waits")
        a.delete(VMS + "/slot-0")
        wait_running(s2, "slot-2", 10)
        t.ok(True, "runs once a slot is free")


sim.stop()
t.done()
