#!/usr/bin/python3
"""kubesim: Multus NetworkAttachmentDefinitions: the CRD is served and
validated (spec.config a string, nothing else), a VMI on a multus network
gets the launcher annotation k8s.v1.cni.cncf.io/networks, its second
interface in status.interfaces and the pod's network-status (static IPAM
honoured); a VM naming a NAD that does not exist never starts: its launcher
pod stays ContainerCreating with Multus's FailedCreatePodSandBox error, until
the NAD appears. RBAC: the backend may create, list and delete NADs only."""
import json

from simlib import NS, PODS, SECRETS, VMIS, VMS, Sim, events_for, phase, secret, vm, \
    wait_for, wait_running
from tap import T

t = T()
sim = Sim("--nodes", "2", guest="none")
A, B = sim.admin, sim.backend
NADS = f"/apis/k8s.cni.cncf.io/v1/namespaces/{NS}/network-attachment-definitions"
LAB = {"labvm.io/lab-session": "true"}


def nad(name, conf):
    return {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
            "metadata": {"name": name, "namespace": NS, "labels": LAB},
            "spec": {"config": json.dumps(conf)}}


def multus_vm(name, net, mac="02:1b:00:00:00:01"):
    o = vm(name, f"{name}-ci", disk="containerdisk")
    spec = o["spec"]["template"]["spec"]
    spec["domain"]["devices"]["interfaces"].append({"name": "session", "bridge": {},
                                                    "macAddress": mac})
    spec["networks"].append({"name": "session", "multus": {"networkName": net}})
    return o


def launcher(name):
    pods = [p for p in A.get(PODS).json["items"]
            if p["metadata"]["labels"].get("vm.kubevirt.io/name") == name]
    return pods[0] if pods else None


@t.test(name="the CRD is served: discovery, create, get by short name's plural, strict schema")
def crd_served():
    d = A.get("/apis/k8s.cni.cncf.io/v1").json
    r = next(x for x in d["resources"] if x["name"] == "network-attachment-definitions")
    t.eq((r["kind"], r["namespaced"], sorted(r["shortNames"])),
         ("NetworkAttachmentDefinition", True, ["nad", "net-attach-def"]), "discovery")
    c = A.post(NADS, nad("n-ok", {"cniVersion": "0.3.1", "type": "bridge", "bridge": "br-ok"}))
    t.eq(c.status, 201, "created", c.json)
    t.eq(A.get(NADS + "/n-ok").json["spec"]["config"], c.json["spec"]["config"], "read back")
    bad = nad("n-bad", {"type": "bridge"})
    bad["spec"]["bridge"] = "x"
    r = A.post(NADS, bad)
    t.eq(r.status, 400, "an unknown spec field is refused", r.json)
    bad = nad("n-bad", {})
    bad["spec"]["config"] = {"type": "bridge"}
    r = A.post(NADS, bad)
    t.eq(r.status, 422, "a config that is not a string is refused", r.json)


@t.test(name="RBAC: the backend creates, lists and deletes NADs; it may not get or patch them")
def rbac():
    r = B.post(NADS, nad("n-rbac", {"type": "bridge"}))
    t.eq(r.status, 201, "create", r.json)
    t.eq(B.get(NADS).status, 200, "list")
    t.eq(B.get(NADS + "/n-rbac").status, 403, "get is not granted")
    t.eq(B.patch(NADS + "/n-rbac", {"metadata": {"labels": {"x": "y"}}}).status, 403,
         "patch is not granted")
    t.eq(B.delete(NADS + "/n-rbac").status, 200, "delete")


@t.test(name="a VMI on a NAD: networks annotation, network-status, status.interfaces (static IPAM)")
def attached():
    A.post(NADS, nad("n-static", {"cniVersion": "0.3.1", "type": "bridge", "bridge": "br-st",
                                  "ipam": {"type": "static",
                                           "addresses": [{"address": "10.9.8.7/24"}]}}))
    A.post(SECRETS, secret("m1-ci", "#cloud-config\n"))
    t.eq(A.post(VMS, multus_vm("m1", "n-static")).status, 201, "VM created")
    wait_running(sim, "m1", 10)
    p = launcher("m1")
    nets = json.loads(p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"])
    t.eq([(n["name"], n["namespace"], n["mac"]) for n in nets],
         [("n-static", NS, "02:1b:00:00:00:01")], "the launcher asks Multus for the NAD")
    t.ok(nets[0]["interface"].startswith("pod") and len(nets[0]["interface"]) == 14,
         "KubeVirt's hashed pod interface name", nets[0]["interface"])
    st = json.loads(p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"])
    t.eq([(s["name"], s.get("default", False)) for s in st],
         [("kindnet", True), (f"{NS}/n-static", False)], "network-status: default, then the NAD")
    t.eq(st[1]["ips"], ["10.9.8.7"], "static IPAM honoured")
    ifs = A.get(VMIS + "/m1").json["status"]["interfaces"]
    t.eq([i["name"] for i in ifs], ["default", "session"], "two interfaces in the VMI status")
    t.eq((ifs[1]["mac"], ifs[1]["ipAddress"], ifs[1]["interfaceName"]),
         ("02:1b:00:00:00:01", "10.9.8.7", "eth1"), "the second interface's MAC and address")
    A.delete(VMS + "/m1")


@t.test(name="a VM naming a missing NAD does not start: FailedCreatePodSandBox, until it appears")
def missing():
    A.post(SECRETS, secret("m2-ci", "#cloud-config\n"))
    t.eq(A.post(VMS, multus_vm("m2", "n-missing")).status, 201,
         "the VM is accepted (the NAD is looked up by the CNI, not by admission)")
    ev = wait_for(lambda: [e for e in events_for(sim, launcher("m2")["metadata"]["name"])
                           if e["reason"] == "FailedCreatePodSandBox"] if launcher("m2") else None,
                  10, what="FailedCreatePodSandBox")
    t.ok('network-attachment-definitions.k8s.cni.cncf.io "n-missing" not found'
         in ev[0]["message"] and ev[0]["type"] == "Warning", "Multus's error", ev[0]["message"])
    p = launcher("m2")
    t.eq(p["status"]["phase"], "Pending", "the launcher pod is Pending")
    t.eq({c["state"]["waiting"]["reason"] for c in p["status"]["containerStatuses"]},
         {"ContainerCreating"}, "its containers wait in ContainerCreating")
    t.ok(phase(sim, "m2") in ("Pending", "Scheduling"), "the VMI does not start", phase(sim, "m2"))
    A.post(NADS, nad("n-missing", {"cniVersion": "0.3.1", "type": "bridge"}))
    wait_running(sim, "m2", 10)
    t.ok(True, "it starts once the NAD exists")
    A.delete(VMS + "/m2")


@t.test(name="a plugin the nodes lack, or an OVN layer2 NAD naming another: the sandbox fails")
def plugin_errors():
    A.post(NADS, nad("n-macvlan", {"cniVersion": "0.3.1", "type": "macvlan", "master": "eth0"}))
    A.post(NADS, nad("n-ovn-bad", {"cniVersion": "0.3.1", "type": "ovn-k8s-cni-overlay",
                                   "topology": "layer2", "name": "x",
                                   "netAttachDefName": f"{NS}/another"}))
    A.post(NADS, nad("n-ovn", {"cniVersion": "0.3.1", "type": "ovn-k8s-cni-overlay",
                               "topology": "layer2", "name": "labs-n-ovn",
                               "netAttachDefName": f"{NS}/n-ovn"}))
    for vmn, net, want in (("m3", "n-macvlan", 'failed to find plugin "macvlan"'),
                           ("m4", "n-ovn-bad", "netAttachDefName")):
        A.post(SECRETS, secret(f"{vmn}-ci", "#cloud-config\n"))
        A.post(VMS, multus_vm(vmn, net))
        ev = wait_for(lambda: [e for e in events_for(sim, launcher(vmn)["metadata"]["name"])
                               if e["reason"] == "FailedCreatePodSandBox"]
                      if launcher(vmn) else None, 10, what=f"{vmn}: FailedCreatePodSandBox")
        t.ok(want in ev[0]["message"], f"{net}: the CNI's error", ev[0]["message"])
        A.delete(VMS + f"/{vmn}")
    A.post(SECRETS, secret("m5-ci", "#cloud-config\n"))
    A.post(VMS, multus_vm("m5", "n-ovn"))
    wait_running(sim, "m5", 10)
    t.ok(True, "an OVN-Kubernetes layer2 NAD of its own name starts")
    A.delete(VMS + "/m5")


sim.stop()
t.done()
