"""virt-handler, the node agent of KubeVirt: from Scheduled on it owns the
VMI. It starts the domain (the guest: a process guest or QEMU, through the
node's guest runtime) after the profile's domain_start delay and reports
Running (interfaces with the pod's address, guestOSInfo, conditions); it
notices a guest that died (Failed) or powered itself off (Succeeded), a real
guest's QEMU guest agent (AgentConnected, guestOSInfo), and on deletion
powers the guest off after vm_shutdown.

With real guests (`--guest qemu`) the VMI is Running only once QEMU runs (a
start that fails makes it Failed, event SyncFailed); a process guest starts
just after its VMI turns Running, with its agent "connected" at once."""
import base64
import json
import time

import multus
from util import dig

from ..base import MI, Controller, cond, get_condition
from .common import LAUNCHER_IMAGE, launcher_of, mem_request, vmi_status


class VirtHandler(Controller):
    name = "virt-handler"

    def __init__(self, mgr):
        super().__init__(mgr)
        self.runtime = mgr.runtime
        self.ips = mgr.ipam.ips      # vmi uid -> the address of its pod
        # real guests: Running only once the guest process runs (see the module doc)
        self.real_guests = self.runtime.real

    def reconcile(self, store):
        for vmi in store.list("virtualmachineinstances"):
            self.vmi(vmi)

    def _vmi_status(self, vmi, phase=None, **changes):
        return vmi_status(self.api, vmi, phase, **changes)

    def vmi(self, vmi):
        md = vmi["metadata"]
        uid = md["uid"]
        phase = (vmi.get("status") or {}).get("phase") or "Pending"
        if md.get("deletionTimestamp"):
            if self.runtime.state.get(uid) in ("starting", "running"):
                if self.ready(uid, "shutdown", "vm_shutdown"):
                    self.runtime.stop(uid)
            return
        if phase not in ("Scheduled", "Running"):
            return
        pod = launcher_of(self.mgr, vmi)
        if pod is None:
            return      # virt-controller fails the VMI (vmi.py)
        pphase = dig(pod, "status", "phase")
        if pod["metadata"].get("deletionTimestamp") and phase != "Running":
            return
        if phase == "Scheduled":
            if pphase != "Running":
                return
            if not self.ready(uid, "domain", "domain_start"):
                return
            ip = self.ips.get(uid) or dig(pod, "status", "podIP")
            self.ips[uid] = ip
            if self.real_guests:
                # virt-handler reports Running once the domain (QEMU) runs
                gs = self.runtime.state.get(uid)
                if gs is None:
                    self._start_domain(vmi, pod)
                    return
                if gs == "starting":
                    return
                if gs != "running":
                    why = self.runtime.errors.get(uid) or "the domain did not start"
                    self._vmi_status(vmi, "Failed", drop_conditions=("Ready",))
                    self.api.event(vmi, "Warning", "SyncFailed",
                                   f"server error. command SyncVMI failed: {why}"[:1000],
                                   "virt-handler")
                    return
            mac = "02:%02x:%02x:%02x:%02x:%02x" % tuple(bytes.fromhex(uid.replace("-", "")[:10]))
            # a process guest "has" its agent at once; a real one reports it later
            agent = [] if self.real_guests else [cond("AgentConnected", "True")]
            os_info = {} if self.real_guests else {
                "id": "debian", "name": "Debian GNU/Linux", "version": "12", "versionId": "12",
                "prettyName": "Debian GNU/Linux 12 (bookworm)", "kernelRelease": "6.1.0-kubesim"}
            n = self._vmi_status(
                vmi, "Running",
                interfaces=[{"name": "default", "ipAddress": ip, "ipAddresses": [ip], "mac": mac,
                             "infoSource": "domain" if self.real_guests else "domain, guest-agent",
                             "interfaceName": "eth0",
                             "podInterfaceName": "eth0", "queueCount": 1, "linkState": "up"}]
                + self._secondary_interfaces(vmi, pod),
                guestOSInfo=os_info,
                qosClass="Burstable", launcherContainerImageVersion=LAUNCHER_IMAGE,
                migrationMethod="BlockMigration", migrationTransport="Unix",
                activePods={pod["metadata"]["uid"]: dig(pod, "spec", "nodeName")},
                conditions=[cond("Ready", "True"),
                            cond("LiveMigratable", "False", "DisksNotLiveMigratable",
                                 "cannot migrate VMI: PVC is not shared, live migration "
                                 "requires that all PVCs must be shared (using ReadWriteMany "
                                 "access mode)")] + agent)
            self.api.event(vmi, "Normal", "Started", "VirtualMachineInstance started.",
                           "virt-handler")
            if not self.real_guests:
                self._start_domain(n or vmi, pod)
            return
        if phase == "Running":
            gs = self.runtime.state.get(uid)
            if gs == "failed":
                self._vmi_status(vmi, "Failed", drop_conditions=("Ready",))
                self.api.event(vmi, "Warning", "Stopped", "The VirtualMachineInstance crashed.",
                               "virt-handler")
            elif gs == "succeeded":
                self._vmi_status(vmi, "Succeeded", drop_conditions=("Ready", "AgentConnected"))
                self.api.event(vmi, "Normal", "Stopped", "The VirtualMachineInstance was shut "
                               "down.", "virt-handler")
            elif gs == "running" and uid in self.runtime.agent_info and \
                    (get_condition(vmi, "AgentConnected") or {}).get("status") != "True":
                info = self.runtime.agent_info[uid] or {}
                os_info = {k: v for k, v in (
                    ("id", info.get("id")), ("name", info.get("name")),
                    ("prettyName", info.get("pretty-name")), ("version", info.get("version")),
                    ("versionId", info.get("version-id")),
                    ("kernelRelease", info.get("kernel-release")),
                    ("kernelVersion", info.get("kernel-version")),
                    ("machine", info.get("machine"))) if v}
                ifs = [dict(i, infoSource="domain, guest-agent")
                       for i in dig(vmi, "status", "interfaces") or []]
                self._vmi_status(vmi, conditions=[cond("AgentConnected", "True")],
                                 guestOSInfo=os_info, interfaces=ifs)

    def _secondary_interfaces(self, vmi, pod):
        """status.interfaces of the VMI's multus networks: the MAC from the
        launcher's network-status, the addresses the guest configured from its
        cloud-init network data (reported by the guest agent) or else the
        NAD's static IPAM."""
        ann = (pod["metadata"].get("annotations") or {}).get(multus.STATUS_ANNOTATION)
        try:
            status = json.loads(ann) if ann else []
        except ValueError:
            status = []
        by_iface = {e.get("interface"): e for e in status if isinstance(e, dict)}
        guest = multus.guest_network_data(self._networkdata(vmi))
        out = []
        for i, (name, itf, _ref) in enumerate(multus.vmi_multus(vmi)):
            st = by_iface.get(multus.pod_iface_name(name)) or {}
            mac = (itf.get("macAddress") or st.get("mac") or "").lower()
            addrs = [a.split("/")[0] for a in guest.get(mac, [])] or list(st.get("ips") or [])
            e = {"name": name, "mac": mac, "interfaceName": f"eth{i + 1}",
                 "infoSource": "domain, guest-agent, multus-status",
                 "podInterfaceName": multus.pod_iface_name(name), "queueCount": 1,
                 "linkState": "up"}
            if addrs:
                e["ipAddress"] = addrs[0]
                e["ipAddresses"] = addrs
            out.append(e)
        return out

    def _session_nets(self, vmi, node):
        """What the guest's secondary interfaces are (sessnet.py): per multus
        network its L2 domain (the CNI bridge plugin's bridge on the launcher
        pod's node; an OVN-Kubernetes layer2 network's cluster-wide switch),
        the interface's MAC and its pod-side name, the addresses of static IPAM
        and of the guest's own cloud-init network data."""
        ns = vmi["metadata"].get("namespace")
        guest = multus.guest_network_data(self._networkdata(vmi))
        out = []
        for i, (name, itf, (nns, nname)) in enumerate(multus.vmi_multus(vmi)):
            nad = self.store.get("network-attachment-definitions", nns or ns, nname)
            conf, err = multus.cni_config(nad)
            if err:
                continue        # the kubelet did not start the pod without it
            domain, bridge = multus.l2_domain(conf, node)
            if domain is None:
                continue
            mac = (itf.get("macAddress") or "").lower() or None
            out.append({"domain": domain, "bridge": bridge, "ifname": f"eth{i + 1}",
                        "pod_iface": multus.pod_iface_name(name), "mac": mac,
                        "addresses": multus.static_ips(conf) + guest.get(mac or "", [])})
        return out

    @staticmethod
    def _pod_mac(vmi):
        spec = vmi.get("spec") or {}
        pod_nets = {n.get("name") for n in spec.get("networks") or [] if "pod" in n}
        for itf in dig(spec, "domain", "devices", "interfaces") or []:
            if itf.get("name") in pod_nets and itf.get("macAddress"):
                return itf["macAddress"].lower()
        return None

    def _networkdata(self, vmi):
        ns = vmi["metadata"].get("namespace")
        for v in dig(vmi, "spec", "volumes") or []:
            ci = v.get("cloudInitNoCloud") or v.get("cloudInitConfigDrive")
            if not isinstance(ci, dict):
                continue
            ref = dig(ci, "networkDataSecretRef", "name")
            if ref:
                data = (self.store.get("secrets", ns, ref) or {}).get("data") or {}
                for k in ("networkdata", "networkData"):
                    if k in data:
                        return base64.b64decode(data[k]).decode("utf-8", "replace")
                return None
            if ci.get("networkData"):
                return ci["networkData"]
            if ci.get("networkDataBase64"):
                return base64.b64decode(ci["networkDataBase64"]).decode("utf-8", "replace")
        return None

    def _userdata(self, vmi):
        ns = vmi["metadata"].get("namespace")
        for v in dig(vmi, "spec", "volumes") or []:
            ci = v.get("cloudInitNoCloud") or v.get("cloudInitConfigDrive")
            if not isinstance(ci, dict):
                continue
            ref = dig(ci, "secretRef", "name")
            if ref:
                s = self.store.get("secrets", ns, ref)
                data = (s or {}).get("data") or {}
                for k in ("userdata", "userData"):
                    if k in data:
                        return base64.b64decode(data[k])
                return None
            if ci.get("userData"):
                return ci["userData"].encode()
            if ci.get("userDataBase64"):
                return base64.b64decode(ci["userDataBase64"])
        return None

    def _disk(self, vmi):
        ns = vmi["metadata"].get("namespace")
        for v in dig(vmi, "spec", "volumes") or []:
            if v.get("containerDisk"):
                return {"kind": "containerDisk", "image": v["containerDisk"].get("image")}
            claim = dig(v, "ephemeral", "persistentVolumeClaim", "claimName")
            if claim:
                return {"kind": "ephemeral", "claimName": claim,
                        "pvc": self.store.get("persistentvolumeclaims", ns, claim)}
            dvn = dig(v, "dataVolume", "name")
            if dvn:
                return {"kind": "dataVolume", "name": dvn,
                        "pvc": self.store.get("persistentvolumeclaims", ns, dvn)}
            claim = dig(v, "persistentVolumeClaim", "claimName")
            if claim:
                return {"kind": "persistentVolumeClaim", "claimName": claim,
                        "pvc": self.store.get("persistentvolumeclaims", ns, claim)}
        return {}

    def _start_domain(self, vmi, pod):
        """Start the VMI's guest (off the store lock, on the runtime's workers)."""
        md = vmi["metadata"]
        uid = md["uid"]
        if uid in self.runtime.state:
            return
        spec = vmi.get("spec") or {}
        ip = self.ips.get(uid)
        cls = self.sim.guest_class
        kw = dict(name=md["name"], workdir=self.sim.guest_dir(md.get("namespace"), md["name"], uid),
                  userdata=self._userdata(vmi), ip=ip,
                  memory_mib=mem_request(spec) // MI or 1024,
                  cpus=int(dig(spec, "domain", "cpu", "cores") or 1), disk=self._disk(vmi),
                  boot_delay=self.profile.delay("guest_boot"),
                  hostname=spec.get("hostname") or md["name"], log=self.sim.log)
        nets = self._session_nets(vmi, dig(pod, "spec", "nodeName"))
        if getattr(cls, "kind", "") == "process":
            kw["hide"] = [self.sim.state_dir]
            kw["net"] = self.sim.podnet
            if self.sim.dns is not None:
                kw["resolv_conf"] = self.sim.dns.resolv_conf(md.get("namespace"), vm=True)
            if nets:
                kw.update(session_nets=nets, sessnets=self.sim.sessnets)
        if getattr(cls, "kind", "") == "qemu":
            kw["net"] = self.sim.podnet
            # the pod network interface's MAC (KubeVirt gives the guest NIC the
            # interface's macAddress), and the bridge-binding secondary NICs
            kw["pod_mac"] = self._pod_mac(vmi)
            # KubeVirt writes cloudInitNoCloud's network data to the seed's
            # network-config (pkg/cloud-init/cloud-init.go GenerateLocalData)
            kw["networkdata"] = self._networkdata(vmi)
            if nets:
                kw.update(session_nets=nets, sessnets=self.sim.sessnets)
            if self.sim.dns is not None:
                kw["resolv_conf"] = self.sim.dns.resolv_conf(md.get("namespace"), vm=True)
            # KubeVirt's NoCloud instance-id: stable per VMI name and namespace
            kw.update(instance_id=f"{md['name']}.{md.get('namespace')}",
                      image_dir=getattr(self.sim.args, "guest_image_dir", None))
        self.runtime.start(uid, cls, kw, f"{md.get('namespace')}/{md['name']}")

    def agent_probe_loop(self):
        """KubeVirt's AgentConnected: poll each running real guest's QEMU guest
        agent until it answers (off the store lock; a probe may take a second)."""
        rt = self.runtime
        while not self.mgr.stopping:
            time.sleep(1.0)
            for uid, g in list(rt.guests.items()):
                if rt.state.get(uid) != "running" or uid in rt.agent_info:
                    continue
                try:
                    if not g.agent_connected(timeout=1.0):
                        continue
                    info = g.osinfo()
                except Exception:  # noqa: BLE001 - not up yet, or going away
                    continue
                with self.store.lock:
                    if rt.state.get(uid) == "running":
                        rt.agent_info[uid] = info or {}
                self.mgr.wake.set()
