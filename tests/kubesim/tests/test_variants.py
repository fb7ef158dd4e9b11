#!/usr/bin/python3
"""kubesim: a cluster unlike the test one, as labvm-doctor meets them (issue
#31): CDI and Multus not installed (--no-api), nodes without /dev/kvm
(--no-kvm) until KubeVirt's useEmulation is switched on, a CNI that stores
NetworkPolicies and enforces none (--no-policy-enforcement); and the reaper
CronJob's status after a run (/_sim/cronjobs/NS/NAME/ran). One simulator
with every variant at once (timeout: 180)."""
import base64
import os

import yaml

from simlib import (DVS, NS, PODS, SRC, VMS, Sim, cloud_config, events_for, secret, vm,
                    wait_for, wait_running)
from tap import T
import netprobe  # noqa: E402

t = T()
sim = Sim("--no-api", "cdi.kubevirt.io", "--no-api", "k8s.cni.cncf.io", "--no-kvm",
          "--no-policy-enforcement")
A, B = sim.admin, sim.backend
KV = "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts/kubevirt"
NP = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"


def launcher(name):
    items = A.get(PODS + f"?labelSelector=vm.kubevirt.io%2Fname%3D{name}").json["items"]
    return items[0] if items else {}


def scheduled(name):
    c = [c for c in (launcher(name).get("status") or {}).get("conditions") or []
         if c["type"] == "PodScheduled"]
    return c[0] if c else {}


@t.test(name="--no-api: CDI and Multus are not served, as on a cluster without them")
def unserved_groups():
    groups = {g["name"] for g in A.get("/apis").json["groups"]}
    t.ok("cdi.kubevirt.io" not in groups and "k8s.cni.cncf.io" not in groups,
         "discovery leaves them out", sorted(groups))
    t.ok({"kubevirt.io", "subresources.kubevirt.io", "networking.k8s.io"} <= groups,
         "the others are there", sorted(groups))
    t.eq(A.get("/apis/cdi.kubevirt.io").status, 404, "no group")
    t.eq(A.get("/apis/cdi.kubevirt.io/v1beta1").status, 404, "no group version")
    r = B.get(DVS)
    t.eq((r.status, r.json.get("reason")), (404, "NotFound"), "no DataVolumes", r.json)
    r = B.post(f"/apis/k8s.cni.cncf.io/v1/namespaces/{NS}/network-attachment-definitions",
               {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
                "metadata": {"name": "n"}, "spec": {"config": "{}"}})
    t.eq(r.status, 404, "a NAD cannot be created", r.json)
    t.eq(A.get("/apis/cdi.kubevirt.io/v1beta1/cdis").status, 404, "no CDI CR")
    # a VM's dataVolumeTemplates: KubeVirt's create of the DataVolume fails
    v = vm("dvt", disk="dv", claim="dvt-root")
    v["spec"]["dataVolumeTemplates"] = [{"metadata": {"name": "dvt-root"}, "spec": {
        "source": {"registry": {"url": "docker://quay.io/containerdisks/debian:12"}},
        "storage": {"resources": {"requests": {"storage": "10Gi"}}}}}]
    t.eq(A.post(VMS, v).status, 201, "the VM itself is accepted")
    ev = wait_for(lambda: [e for e in events_for(sim, "dvt")
                           if e["reason"] == "FailedDataVolumeCreate"], 10, what="the event")
    t.ok(ev and ev[0]["type"] == "Warning" and "Error creating DataVolume dvt-root" in
         ev[0]["message"], "FailedDataVolumeCreate, as virt-controller records it", ev)
    t.eq((A.get(VMS + "/dvt").json.get("status") or {}).get("printableStatus"), "Provisioning",
         "the VM stays Provisioning")
    A.delete(VMS + "/dvt")


@t.test(name="--no-kvm: no VM schedules until the KubeVirt CR's useEmulation is on")
def no_kvm_then_emulation():
    node = A.get("/api/v1/nodes/node-1").json["status"]
    t.eq((node["capacity"]["devices.kubevirt.io/kvm"], node["allocatable"]["devices.kubevirt.io/kvm"]),
         ("1k", "0"), "the device plugin's devices are all unhealthy: capacity, none allocatable")
    A.post(VMS, vm("kvm-1", disk="container", memory="512Mi"))
    wait_for(lambda: scheduled("kvm-1").get("reason") == "Unschedulable", 10, what="unschedulable")
    msg = scheduled("kvm-1").get("message", "")
    t.ok("Insufficient devices.kubevirt.io/kvm" in msg, "for want of the kvm device", msg)
    r = A.patch(KV, {"spec": {"configuration": {"developerConfiguration": {"useEmulation": True}}}})
    t.eq(r.status, 200, "useEmulation on", r.json)
    A.post(VMS, vm("emu-1", disk="container", memory="512Mi"))
    wait_running(sim, "emu-1", 15)
    res = launcher("emu-1")["spec"]["containers"][0]["resources"]
    t.ok("devices.kubevirt.io/kvm" not in res.get("requests", {}) and
         "devices.kubevirt.io/kvm" not in res.get("limits", {}),
         "its launcher asks for no kvm device (renderresources.go)", res)
    t.eq(scheduled("kvm-1").get("reason"), "Unschedulable",
         "the launcher made before stays as it was rendered")
    for n in ("kvm-1", "emu-1"):
        A.delete(VMS + f"/{n}")


SERVE = ("nohup python3 -c \"import socketserver as s\n"
         "class H(s.BaseRequestHandler):\n def handle(self): self.request.sendall(b'hi')\n"
         "s.TCPServer.allow_reuse_address = True\n"
         "s.TCPServer(('0.0.0.0', 8899), H).serve_forever()\" >/dev/null 2>&1 &")


@t.test(name="--no-policy-enforcement: policies are stored and served, nothing is fenced")
def policies_not_enforced():
    probe = netprobe.script()
    files = (f"- path: /opt/probe.py\n  encoding: b64\n  content: "
             f"{base64.b64encode(probe.encode()).decode()}\n")
    for name, role in (("np-a", "a"), ("np-b", "b")):
        A.post(f"/api/v1/namespaces/{NS}/secrets", secret(name, cloud_config([SERVE], files)))
        A.post(VMS, vm(name, name, labels={"role": role}, disk="container", memory="512Mi"))
    for name in ("np-a", "np-b"):
        wait_running(sim, name, 20)
    ip = A.get(f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstances/np-b"
               ).json["status"]["interfaces"][0]["ipAddress"]
    c, o = A.post(NP, {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                       "metadata": {"name": "b-deny"},
                       "spec": {"podSelector": {"matchLabels": {"role": "b"}},
                                "policyTypes": ["Ingress"]}})
    t.eq(c, 201, "the policy is accepted", o)
    t.eq([p["metadata"]["name"] for p in B.get(NP).json.get("items", [])], ["b-deny"],
         "and served (the backend lists it: the Role labvm-doctor)")

    def reach():
        r = sim.exec("np-a", f"python3 /opt/probe.py {ip} 8899 3")
        return r["stdout"].strip() or r["stderr"].strip()
    got = wait_for(lambda: reach() == "open" and "open", 15, interval=0.3, what="b's port")
    t.eq(got, "open", "a still reaches b's port 8899 (a denied ingress, unenforced)")
    for n in ("np-a", "np-b"):
        A.delete(VMS + f"/{n}")


@t.test(name="/_sim/cronjobs/NS/NAME/ran: the CronJob's status as its controller writes it")
def cronjob_ran():
    with open(os.path.join(SRC, "conf", "k8s", "labvm-backend.yaml")) as f:
        cj = next(d for d in yaml.safe_load_all(f) if d and d.get("kind") == "CronJob")
    c, o = A.post(f"/apis/batch/v1/namespaces/{NS}/cronjobs", cj)
    t.eq(c, 201, "the shipped reaper CronJob", o)
    path = f"/_sim/cronjobs/{NS}/labvm-reaper/ran"
    t.eq(B.post(path, {"succeeded": True}).status, 403, "admin only")
    t.eq(A.post(path, {"succeeded": "yes"}).status, 400, "a bad body")
    t.eq(A.post(f"/_sim/cronjobs/{NS}/nope/ran", {"succeeded": True}).status, 404, "no such")
    c, o = A.post(path, {"succeeded": False})
    st = A.get(f"/apis/batch/v1/namespaces/{NS}/cronjobs/labvm-reaper").json["status"]
    t.ok(st.get("lastScheduleTime", "").endswith(":00Z") and "lastSuccessfulTime" not in st,
         "a failed run: scheduled (on the minute), no success", st)
    A.post(path, {"succeeded": True})
    st = A.get(f"/apis/batch/v1/namespaces/{NS}/cronjobs/labvm-reaper").json["status"]
    t.ok(st.get("lastSuccessfulTime") and st["lastSuccessfulTime"] >= st["lastScheduleTime"],
         "a successful one: its completion time too", st)


sim.stop()
t.done()
