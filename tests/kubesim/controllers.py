"""The cluster's controllers, simulated: scheduler and kubelet (pods on nodes
with memory, image pulls, volume attach, Multi-Attach, secret mounts), the
PVC binder and its protection finalizer, CDI (DataVolume import with CDI's
phases and PVC annotations), KubeVirt (VM -> VMI -> virt-launcher pod ->
Running, printableStatus, deletion with finalizers), the garbage collector
(ownerReferences, Background/Foreground/Orphan) and the namespace controller.

Level-triggered: one thread runs reconcile() over all objects whenever the
store changes or a delay falls due; delays come from the profile. Guest
processes are started and stopped by worker threads, never under the store
lock.

With real guests (`--guest qemu`) the node is this machine: a VMI becomes
Running only once its QEMU process runs (its start failing makes it Failed),
AgentConnected and guestOSInfo come when the QEMU guest agent answers, a
guest that powers itself off makes its VMI Succeeded (a crash: Failed), and
the scheduler also counts the node's devices.kubevirt.io/kvm (VMIs at once)."""
import base64
import queue
import socket
import threading
import time
import traceback

import util
from util import dig, parse_quantity

GI = 2**30
MI = 2**20
LAUNCHER_OVERHEAD = 200 * MI
LAUNCHER_IMAGE = "quay.io/kubevirt/virt-launcher:v1.5.0"
VM_FINALIZER = "kubevirt.io/virtualMachineControllerFinalize"
VMI_FINALIZERS = ["kubevirt.io/virtualMachineControllerFinalize",
                  "kubevirt.io/foregroundDeleteVirtualMachine"]
PVC_PROTECTION = "kubernetes.io/pvc-protection"
KVM_DEVICE = "devices.kubevirt.io/kvm"
KV = "kubevirt.io/v1"
FAILING_IMAGE = "doesnotexist"


def _cond(ctype, status, reason="", message="", probe=False):
    c = {"type": ctype, "status": status, "lastProbeTime": None,
         "lastTransitionTime": util.now_rfc3339()}
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def set_condition(conds, new):
    """Replace the condition of new's type, keeping lastTransitionTime when the status
    did not change. Returns the new list."""
    out = []
    found = False
    for c in conds or []:
        if c.get("type") == new["type"]:
            found = True
            if c.get("status") == new["status"] and c.get("reason") == new.get("reason") and \
                    c.get("message") == new.get("message"):
                out.append(c)
            else:
                if c.get("status") == new["status"]:
                    new = dict(new, lastTransitionTime=c.get("lastTransitionTime"))
                out.append(new)
        else:
            out.append(c)
    if not found:
        out.append(new)
    return out


def get_condition(obj, ctype):
    for c in dig(obj, "status", "conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def mem_request(vmi_spec):
    q = dig(vmi_spec, "domain", "resources", "requests", "memory") or \
        dig(vmi_spec, "domain", "memory", "guest") or \
        dig(vmi_spec, "domain", "resources", "limits", "memory") or "0"
    try:
        return int(parse_quantity(q))
    except ValueError:
        return 0


def pod_mem(pod):
    return pod_request(pod, "memory")


def pod_request(pod, resource):
    total = 0
    for c in dig(pod, "spec", "containers") or []:
        q = dig(c, "resources", "requests", resource)
        if q is not None:
            try:
                total += int(parse_quantity(q))
            except ValueError:
                pass
    return total


def run_strategy(vm):
    spec = vm.get("spec") or {}
    rs = spec.get("runStrategy")
    if rs:
        return rs
    if spec.get("running") is True:
        return "Always"
    return "Halted"


def owner_ref(obj, controller=True):
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": controller, "blockOwnerDeletion": True}


def controlled_by(obj, owner_uid):
    for o in dig(obj, "metadata", "ownerReferences") or []:
        if o.get("uid") == owner_uid and o.get("controller"):
            return True
    return False


class GuestWorkers:
    """N worker threads; the operations of one guest always go to the same worker, in order."""

    def __init__(self, n=4, log=print):
        self.qs = [queue.Queue() for _ in range(n)]
        self.log = log
        for i, q in enumerate(self.qs):
            threading.Thread(target=self._loop, args=(q,), name=f"guest-worker-{i}",
                             daemon=True).start()

    def _loop(self, q):
        while True:
            fn = q.get()
            try:
                fn()
            except Exception:  # noqa: BLE001
                self.log("guest worker: " + traceback.format_exc())

    def submit(self, key, fn):
        self.qs[hash(key) % len(self.qs)].put(fn)


class Controllers:
    def __init__(self, sim):
        self.sim = sim
        self.api = sim.api
        self.store = sim.store
        self.profile = sim.profile
        self.due = {}              # (uid, stage) -> monotonic time
        self.wake = threading.Event()
        self.stopping = False
        self.images = {}           # node -> set(images pulled)
        self.pulling = {}          # (node, image) -> monotonic time the pull completes
        self.guests = {}           # vmi uid -> guest driver
        self.guest_state = {}      # vmi uid -> "starting" | "running" | "stopping" | "stopped" |
        #                            "failed" | "succeeded" (the guest powered itself off)
        self.guest_errors = {}     # vmi uid -> why its guest did not start or died
        self.agent_info = {}       # vmi uid -> guest OS info once the QEMU guest agent answered
        # real guests: Running only once the guest process runs (see the module doc)
        self.real_guests = getattr(sim.guest_class, "kind", "") == "qemu"
        self.ips = {}              # vmi uid -> ip
        self.ip_next = 0
        self.workers = GuestWorkers(4, sim.log)
        self.store.listeners.append(lambda *a: self.wake.set())
        self.thread = threading.Thread(target=self._loop, name="controllers", daemon=True)
        self.passes = 0

    def start(self):
        self.thread.start()
        if self.real_guests:
            threading.Thread(target=self._agent_probe_loop, name="guest-agent-probe",
                             daemon=True).start()

    # ------------------------------------------------------------ timing
    def ready(self, uid, stage, delay):
        """True once the named delay (profile key or seconds) for (uid, stage) has passed."""
        k = (uid, stage)
        t = self.due.get(k)
        now = time.monotonic()
        if t is None:
            d = self.profile.delay(delay) if isinstance(delay, str) else float(delay)
            self.due[k] = now + d
            return d <= 0
        return now >= t

    def forget(self, uid):
        for k in [k for k in self.due if k[0] == uid]:
            del self.due[k]

    def _loop(self):
        while not self.stopping:
            now = time.monotonic()
            future = [t for t in self.due.values() if t > now]
            timeout = min(0.5, max(0.0, min(future) - now)) if future else 0.5
            self.wake.wait(timeout)
            time.sleep(0.005)   # coalesce bursts of changes into one pass
            self.wake.clear()
            if self.stopping:
                return
            try:
                with self.store.lock:
                    self.reconcile()
                self.passes += 1
            except Exception:  # noqa: BLE001
                self.sim.log("controllers: " + traceback.format_exc())
                time.sleep(0.05)

    # -------------------------------------------------------- reconcile
    def reconcile(self):
        self._pods_by_owner = {}
        for p in self.store.list("pods"):
            for o in p["metadata"].get("ownerReferences") or []:
                if o.get("controller"):
                    self._pods_by_owner[o.get("uid")] = p
        self._free = None
        live = set()
        for ns in self.store.list("namespaces"):
            self.namespace(ns)
        for pvc in self.store.list("persistentvolumeclaims"):
            live.add(pvc["metadata"]["uid"])
            self.pvc(pvc)
        for dv in self.store.list("datavolumes"):
            live.add(dv["metadata"]["uid"])
            self.datavolume(dv)
        for vm in self.store.list("virtualmachines"):
            live.add(vm["metadata"]["uid"])
            self.vm(vm)
        for vmi in self.store.list("virtualmachineinstances"):
            live.add(vmi["metadata"]["uid"])
            self.vmi(vmi)
        for pod in self.store.list("pods"):
            live.add(pod["metadata"]["uid"])
            self.pod(pod)
        # VM status follows its VMI within the same pass
        for v in self.store.list("virtualmachines"):
            if not v["metadata"].get("deletionTimestamp"):
                vmi = self.store.get("virtualmachineinstances", v["metadata"].get("namespace"),
                                     v["metadata"]["name"])
                if vmi is not None and not controlled_by(vmi, v["metadata"]["uid"]) and \
                        vmi["metadata"].get("ownerReferences"):
                    vmi = None
                self._vm_status(v, vmi, None)
        self.gc()
        if len(self.due) > 0:
            for k in [k for k in self.due if k[0] not in live and not k[0].startswith("node:")]:
                del self.due[k]
        for uid in [u for u in self.guest_state if u not in live and
                    self.guest_state[u] in ("stopped", "failed", "succeeded")]:
            self.guest_state.pop(uid, None)
            self.guests.pop(uid, None)
            self.guest_errors.pop(uid, None)
            self.agent_info.pop(uid, None)

    # -------------------------------------------------------- namespaces
    def namespace(self, ns):
        md = ns["metadata"]
        if not md.get("deletionTimestamp"):
            return
        name = md["name"]
        left = 0
        for plural, objs in list(self.store.objs.items()):
            if plural in ("namespaces", "nodes", "clusterroles", "clusterrolebindings"):
                continue
            for (ons, _), o in list(objs.items()):
                if ons != name:
                    continue
                left += 1
                if not o["metadata"].get("deletionTimestamp"):
                    try:
                        self.api.sys_delete(plural, o)
                    except Exception:  # noqa: BLE001
                        pass
        if left == 0:
            self.store.remove("namespaces", ns)

    # -------------------------------------------------------------- PVCs
    def pvc(self, pvc):
        md = pvc["metadata"]
        uid = md["uid"]
        if md.get("deletionTimestamp"):
            if PVC_PROTECTION in (md.get("finalizers") or []) and not self._pvc_in_use(pvc):
                n = util.deep(pvc)
                n["metadata"]["finalizers"] = [f for f in n["metadata"]["finalizers"]
                                               if f != PVC_PROTECTION]
                self.api.sys_update("persistentvolumeclaims", n)
            return
        if PVC_PROTECTION not in (md.get("finalizers") or []) and dig(pvc, "status", "phase") != "Bound":
            n = util.deep(pvc)
            n["metadata"].setdefault("finalizers", []).append(PVC_PROTECTION)
            self.api.sys_update("persistentvolumeclaims", n)
            return
        if dig(pvc, "status", "phase") in (None, "Pending"):
            if not self.ready(uid, "bind", "pvc_bind"):
                return
            n = util.deep(pvc)
            spec = n.setdefault("spec", {})
            spec.setdefault("volumeName", f"pvc-{uid}")
            n["status"] = {"phase": "Bound", "accessModes": spec.get("accessModes") or [],
                           "capacity": {"storage": dig(spec, "resources", "requests", "storage")
                                        or "1Gi"}}
            ann = n["metadata"].setdefault("annotations", {})
            ann.setdefault("pv.kubernetes.io/bind-completed", "yes")
            ann.setdefault("pv.kubernetes.io/bound-by-controller", "yes")
            ann.setdefault("volume.kubernetes.io/storage-provisioner", "kubesim.io/hostpath")
            self.api.sys_update("persistentvolumeclaims", n)

    def _pvc_in_use(self, pvc):
        ns, name = pvc["metadata"].get("namespace"), pvc["metadata"]["name"]
        for pod in self.store.list("pods", ns):
            if dig(pod, "status", "phase") in ("Succeeded", "Failed"):
                continue
            for v in dig(pod, "spec", "volumes") or []:
                if dig(v, "persistentVolumeClaim", "claimName") == name:
                    return True
        return False

    # ------------------------------------------------------- DataVolumes
    def datavolume(self, dv):
        md = dv["metadata"]
        if md.get("deletionTimestamp"):
            return
        uid = md["uid"]
        ns, name = md.get("namespace"), md["name"]
        st = dv.get("status") or {}
        phase = st.get("phase") or ""
        pvc = self.store.get("persistentvolumeclaims", ns, name)
        spec = dv.get("spec") or {}
        src = spec.get("source") or {}
        if src.get("registry"):
            kind, endpoint = "registry", src["registry"].get("url", "")
        elif src.get("http"):
            kind, endpoint = "http", src["http"].get("url", "")
        elif src.get("pvc"):
            kind, endpoint = "pvc", f'{src["pvc"].get("namespace", ns)}/{src["pvc"].get("name")}'
        elif src.get("blank") is not None:
            kind, endpoint = "blank", ""
        else:
            kind, endpoint = "none", ""
        if pvc is None and phase in ("", "Pending"):
            pspec = util.deep(spec.get("pvc") or spec.get("storage") or {})
            pspec.setdefault("accessModes", ["ReadWriteOnce"])
            pspec.setdefault("volumeMode", "Filesystem")
            ann = dict(md.get("annotations") or {})
            ann.update({
                "cdi.kubevirt.io/storage.contentType": spec.get("contentType", "kubevirt"),
                "cdi.kubevirt.io/storage.pod.phase": "Pending",
                "cdi.kubevirt.io/storage.pod.restarts": "0",
                "cdi.kubevirt.io/storage.preallocation.requested": "false",
                "cdi.kubevirt.io/createdForDataVolume": uid,
            })
            if kind in ("registry", "http"):
                ann["cdi.kubevirt.io/storage.import.endpoint"] = endpoint
                ann["cdi.kubevirt.io/storage.import.source"] = kind
                ann["cdi.kubevirt.io/storage.import.importPodName"] = f"importer-{name}"
            elif kind == "pvc":
                ann["k8s.io/CloneRequest"] = endpoint
            new_pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "metadata": {"name": name, "namespace": ns, "annotations": ann,
                                    "labels": {"app": "containerized-data-importer",
                                               "app.kubernetes.io/component": "storage",
                                               "app.kubernetes.io/managed-by": "cdi-controller"},
                                    "ownerReferences": [owner_ref(dv)],
                                    "finalizers": [PVC_PROTECTION]},
                       "spec": pspec, "status": {"phase": "Pending"}}
            self.api.sys_create("persistentvolumeclaims", new_pvc)
            self._dv_status(dv, "Pending", "N/A", bound=False)
            return
        if pvc is None:
            return
        bound = dig(pvc, "status", "phase") == "Bound"
        if phase in ("", "Pending"):
            if bound:
                self._dv_status(dv, "ImportScheduled" if kind in ("registry", "http") else
                                "CloneScheduled" if kind == "pvc" else "Pending", "N/A")
                self._pvc_ann(pvc, {"cdi.kubevirt.io/storage.pod.phase": "Pending"})
            return
        if phase in ("ImportScheduled", "CloneScheduled"):
            if self.ready(uid, "importer-start", "schedule"):
                self._dv_status(dv, "ImportInProgress" if phase == "ImportScheduled" else
                                "CloneInProgress", "0.00%")
                self._pvc_ann(pvc, {"cdi.kubevirt.io/storage.pod.phase": "Running",
                                    "cdi.kubevirt.io/storage.condition.running": "true",
                                    "cdi.kubevirt.io/storage.condition.running.reason": "Pod is running",
                                    "cdi.kubevirt.io/storage.pod.ready": "true"})
            return
        if phase in ("ImportInProgress", "CloneInProgress"):
            k = (uid, "import")
            if k not in self.due:
                d = self.profile.delay("dv_import")
                if kind == "pvc":
                    d /= 3
                self.due[k] = time.monotonic() + d
                self.due[(uid, "import-start")] = time.monotonic()
                self.due[(uid, "import-len")] = d
            t_end = self.due[k]
            now = time.monotonic()
            if now >= t_end:
                self._dv_status(dv, "Succeeded", "100.0%", running=False)
                self._pvc_ann(pvc, {"cdi.kubevirt.io/storage.pod.phase": "Succeeded",
                                    "cdi.kubevirt.io/storage.condition.running": "false",
                                    "cdi.kubevirt.io/storage.condition.running.reason": "Completed",
                                    "cdi.kubevirt.io/storage.condition.running.message":
                                        "Import Complete",
                                    "cdi.kubevirt.io/storage.pod.ready": "false"})
                return
            start = self.due[(uid, "import-start")]
            length = max(self.due[(uid, "import-len")], 1e-6)
            pct = min(99.99, 100.0 * (now - start) / length)
            step = int(pct // 10) * 10
            if step and (st.get("progress") or "0") != f"{step:.2f}%" and \
                    float((st.get("progress") or "0%").rstrip("%") or 0) < step:
                self._dv_status(dv, phase, f"{step:.2f}%")
            # wake up for the next progress step
            nxt = start + length * (step + 10) / 100
            self.due[(uid, "import-tick")] = min(nxt, t_end)

    def _dv_status(self, dv, phase, progress, bound=True, running=True):
        n = util.deep(dv)
        st = n.setdefault("status", {})
        st["phase"] = phase
        st["progress"] = progress
        st["claimName"] = n["metadata"]["name"]
        st.setdefault("restartCount", 0)
        conds = st.get("conditions") or []
        conds = set_condition(conds, _cond("Bound", "True" if bound else "False",
                                           "Bound" if bound else "Pending",
                                           "PVC " + n["metadata"]["name"] + (" Bound" if bound else " Pending")))
        done = phase == "Succeeded"
        conds = set_condition(conds, _cond("Ready", "True" if done else "False",
                                           "" if done else "TransferRunning" if running and bound else ""))
        conds = set_condition(conds, _cond("Running", "True" if (running and not done and bound
                                                                   and "Progress" in phase) else "False",
                                           "Completed" if done else ""))
        st["conditions"] = conds
        self.api.sys_update("datavolumes", n)

    def _pvc_ann(self, pvc, ann):
        cur = pvc["metadata"].get("annotations") or {}
        if all(cur.get(k) == v for k, v in ann.items()):
            return
        n = util.deep(pvc)
        n["metadata"].setdefault("annotations", {}).update(ann)
        self.api.sys_update("persistentvolumeclaims", n)

    # ------------------------------------------------------------ VMs
    def vm(self, vm):
        md = vm["metadata"]
        uid = md["uid"]
        ns, name = md.get("namespace"), md["name"]
        vmi = self.store.get("virtualmachineinstances", ns, name)
        if vmi is not None and not controlled_by(vmi, uid):
            vmi = None if vmi["metadata"].get("ownerReferences") else vmi
        deleting = bool(md.get("deletionTimestamp"))
        if deleting:
            if vmi is not None and not vmi["metadata"].get("deletionTimestamp"):
                self.api.sys_delete("virtualmachineinstances", vmi)
            if vmi is None and VM_FINALIZER in (md.get("finalizers") or []):
                n = util.deep(vm)
                n["metadata"]["finalizers"] = [f for f in n["metadata"]["finalizers"]
                                               if f != VM_FINALIZER]
                n["status"] = dict(n.get("status") or {}, printableStatus="Terminating",
                                   ready=False, created=False)
                self.api.sys_update("virtualmachines", n)
                return
            self._vm_status(vm, vmi, "Terminating")
            return
        if VM_FINALIZER not in (md.get("finalizers") or []):
            n = util.deep(vm)
            n["metadata"].setdefault("finalizers", []).append(VM_FINALIZER)
            self.api.sys_update("virtualmachines", n)
            return
        # dataVolumeTemplates
        for t in dig(vm, "spec", "dataVolumeTemplates") or []:
            dvname = dig(t, "metadata", "name")
            if dvname and self.store.get("datavolumes", ns, dvname) is None:
                dv = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
                      "metadata": dict(util.deep(t.get("metadata") or {}), namespace=ns,
                                       ownerReferences=[owner_ref(vm)]),
                      "spec": util.deep(t.get("spec") or {})}
                dv["metadata"].pop("creationTimestamp", None)
                try:
                    self.api.sys_create("datavolumes", dv)
                except Exception:  # noqa: BLE001
                    pass
        rs = run_strategy(vm)
        want = rs in ("Always", "RerunOnFailure", "Once")
        if vmi is not None:
            phase = dig(vmi, "status", "phase")
            if not vmi["metadata"].get("deletionTimestamp"):
                if rs == "Halted" or (phase in ("Failed", "Succeeded") and (
                        rs == "Always" or (rs == "RerunOnFailure" and phase == "Failed"))):
                    self.api.sys_delete("virtualmachineinstances", vmi)
        elif want and not (rs == "Once" and dig(vm, "status", "created") is False and
                           self.due.get((uid, "once-done"))):
            if self.ready(uid, "vmi-create", "vmi_create"):
                self.due.pop((uid, "vmi-create"), None)
                tmpl = dig(vm, "spec", "template") or {}
                tmd = util.deep(tmpl.get("metadata") or {})
                new = {"apiVersion": KV, "kind": "VirtualMachineInstance",
                       "metadata": {"name": name, "namespace": ns,
                                    "labels": tmd.get("labels") or {},
                                    "annotations": dict(tmd.get("annotations") or {}),
                                    "ownerReferences": [owner_ref(vm)],
                                    "finalizers": list(VMI_FINALIZERS)},
                       "spec": util.deep(tmpl.get("spec") or {}),
                       "status": {"phase": "Pending", "phaseTransitionTimestamps": [
                           {"phase": "Pending", "phaseTransitionTimestamp": util.now_micro()}]}}
                if not new["metadata"]["labels"]:
                    del new["metadata"]["labels"]
                new["metadata"]["annotations"]["kubevirt.io/latest-observed-api-version"] = "v1"
                new["metadata"]["annotations"]["kubevirt.io/storage-observed-api-version"] = "v1"
                dom = new["spec"].setdefault("domain", {})
                dom.setdefault("firmware", {}).setdefault("uuid", util.new_uid())
                dom.setdefault("machine", {}).setdefault("type", "q35")
                try:
                    vmi = self.api.sys_create("virtualmachineinstances", new)
                    self.api.event(vm, "Normal", "SuccessfulCreate",
                                   f"Started the virtual machine by creating the new virtual "
                                   f"machine instance {name}", "virtualmachine-controller")
                except Exception:  # noqa: BLE001
                    vmi = self.store.get("virtualmachineinstances", ns, name)
        self._vm_status(vm, vmi, None)

    def _vm_status(self, vm, vmi, forced):
        cur = self.store.get("virtualmachines", vm["metadata"].get("namespace"),
                             vm["metadata"]["name"])
        if cur is None:
            return
        rs = run_strategy(cur)
        ps = forced
        ready = False
        if ps is None:
            if vmi is None:
                ps = "Stopped" if rs in ("Halted", "Manual") else "Starting"
                ps = self._dv_printable(cur) or ps
            else:
                phase = dig(vmi, "status", "phase")
                reason = (get_condition(vmi, "Synchronized") or {}).get("reason")
                sched = get_condition(vmi, "PodScheduled") or {}
                if vmi["metadata"].get("deletionTimestamp"):
                    ps = "Stopping"
                elif phase == "Running":
                    ps = "Running"
                    ready = (get_condition(vmi, "Ready") or {}).get("status") == "True"
                elif phase in ("Succeeded",):
                    ps = "Stopped"
                elif phase == "Failed":
                    ps = "CrashLoopBackOff"
                elif reason == "FailedPvcNotFound":
                    ps = "ErrorPvcNotFound"
                elif reason in ("ErrImagePull", "ImagePullBackOff"):
                    ps = reason
                elif sched.get("status") == "False" and sched.get("reason") == "Unschedulable":
                    ps = "WaitingForVolumeBinding" if "unbound" in (sched.get("message") or "") \
                        else "ErrorUnschedulable"
                else:
                    ps = self._dv_printable(cur) or "Starting"
        st = util.deep(cur.get("status") or {})
        st["printableStatus"] = ps
        st["runStrategy"] = rs
        st["created"] = vmi is not None
        st["ready"] = ready
        conds = st.get("conditions") or []
        conds = set_condition(conds, _cond("Ready", "True" if ready else "False",
                                           "" if ready else ("VMINotExists" if vmi is None
                                                             else "PodNotExists" if ps != "Running"
                                                             else "GuestNotReady"),
                                           "" if ready else ("VMI does not exist" if vmi is None
                                                             else "virt-launcher pod has not yet "
                                                                  "been scheduled"
                                                             if ps != "Running" else "")))
        st["conditions"] = conds
        if vmi is not None:
            st["desiredGeneration"] = cur["metadata"].get("generation", 1)
            st["observedGeneration"] = cur["metadata"].get("generation", 1)
        if st != (cur.get("status") or {}):
            n = util.deep(cur)
            n["status"] = st
            self.api.sys_update("virtualmachines", n)

    def _dv_printable(self, vm):
        ns = vm["metadata"].get("namespace")
        for v in dig(vm, "spec", "template", "spec", "volumes") or []:
            dvn = dig(v, "dataVolume", "name")
            if dvn:
                dv = self.store.get("datavolumes", ns, dvn)
                if dv is None or dig(dv, "status", "phase") != "Succeeded":
                    if dv is not None and dig(dv, "status", "phase") == "Failed":
                        return "DataVolumeError"
                    return "Provisioning"
        return None

    # ----------------------------------------------------------- VMIs
    def _vmi_status(self, vmi, phase=None, **changes):
        n = util.deep(vmi)
        st = n.setdefault("status", {})
        if phase and st.get("phase") != phase:
            st["phase"] = phase
            st.setdefault("phaseTransitionTimestamps", []).append(
                {"phase": phase, "phaseTransitionTimestamp": util.now_micro()})
        conds = changes.pop("conditions", None)
        if conds:
            cl = st.get("conditions") or []
            for c in conds:
                cl = set_condition(cl, c)
            st["conditions"] = cl
        drop = changes.pop("drop_conditions", ())
        if drop:
            st["conditions"] = [c for c in st.get("conditions") or [] if c.get("type") not in drop]
        st.update(changes)
        if n != vmi:
            return self.api.sys_update("virtualmachineinstances", n)
        return vmi

    def _launcher(self, vmi):
        uid = vmi["metadata"]["uid"]
        p = self._pods_by_owner.get(uid)
        if p is not None:
            cur = self.store.get("pods", p["metadata"].get("namespace", ""), p["metadata"]["name"])
            if cur is not None and controlled_by(cur, uid):
                return cur
        return None

    def _volume_problem(self, vmi):
        """(reason, message, event_type) when a volume keeps the launcher pod from being
        rendered; None when all volume sources exist."""
        ns = vmi["metadata"].get("namespace")
        for v in dig(vmi, "spec", "volumes") or []:
            claim = dig(v, "ephemeral", "persistentVolumeClaim", "claimName") or \
                dig(v, "persistentVolumeClaim", "claimName")
            if claim and self.store.get("persistentvolumeclaims", ns, claim) is None:
                return ("FailedPvcNotFound", f"failed to render launch manifest: didn't find PVC "
                        f"{claim}", "Warning")
            dvn = dig(v, "dataVolume", "name")
            if dvn:
                dv = self.store.get("datavolumes", ns, dvn)
                pvc = self.store.get("persistentvolumeclaims", ns, dvn)
                if dv is None and pvc is None:
                    return ("FailedPvcNotFound", f"PVC {ns}/{dvn} does not exist, waiting for it "
                            "to appear", "Normal")
                if dv is not None and dig(dv, "status", "phase") != "Succeeded":
                    return ("DataVolumesNotReady", f"DataVolume {dvn} is not ready", None)
        return None

    def vmi(self, vmi):
        md = vmi["metadata"]
        uid = md["uid"]
        ns, name = md.get("namespace"), md["name"]
        st = vmi.get("status") or {}
        phase = st.get("phase") or "Pending"
        pod = self._launcher(vmi)
        if md.get("deletionTimestamp"):
            gs = self.guest_state.get(uid)
            if gs in ("starting", "running"):
                if self.ready(uid, "shutdown", "vm_shutdown"):
                    self._stop_guest(uid)
                return
            if gs == "stopping":
                return
            if pod is not None:
                if not pod["metadata"].get("deletionTimestamp"):
                    self.api.sys_delete("pods", pod)
                return
            if phase in ("Running", "Scheduled"):
                vmi = self._vmi_status(vmi, "Succeeded", drop_conditions=("Ready",))
            fins = [f for f in (vmi["metadata"].get("finalizers") or []) if f not in VMI_FINALIZERS]
            if fins != (vmi["metadata"].get("finalizers") or []):
                n = util.deep(vmi)
                n["metadata"]["finalizers"] = fins
                self.api.sys_update("virtualmachineinstances", n)
            return
        if phase in ("Succeeded", "Failed"):
            return
        if phase == "Pending" and pod is None:
            prob = self._volume_problem(vmi)
            if prob:
                reason, msg, etype = prob
                if etype:
                    self.api.event(vmi, etype, reason, msg, "virtualmachine-controller")
                if reason == "FailedPvcNotFound" and etype == "Warning":
                    self._vmi_status(vmi, "Pending", conditions=[
                        _cond("Synchronized", "False", "FailedPvcNotFound", msg),
                        _cond("PodScheduled", "False", "Unschedulable", msg)])
                elif reason == "DataVolumesNotReady":
                    self._vmi_status(vmi, "Pending", conditions=[
                        _cond("DataVolumesReady", "False", "NotAllDataVolumesReady",
                              "Not all of the VMI's DVs are ready")])
                return
            if not self.ready(uid, "pod-create", "pod_create"):
                return
            self._create_launcher(vmi)
            self._vmi_status(vmi, "Scheduling", drop_conditions=("Synchronized", "DataVolumesReady"),
                             conditions=[_cond("PodScheduled", "False", "Pending",
                                               "virt-launcher pod created")] if False else None)
            return
        if pod is None:
            # launcher pod vanished under a live VMI
            if phase in ("Scheduled", "Running"):
                self._stop_guest(uid)
                self._vmi_status(vmi, "Failed", drop_conditions=("Ready",))
                self.api.event(vmi, "Warning", "Stopped", "The VirtualMachineInstance crashed.",
                               "virt-handler")
            elif phase == "Scheduling":
                self._vmi_status(vmi, "Pending")
            return
        pphase = dig(pod, "status", "phase")
        psched = get_condition(pod, "PodScheduled") or {}
        if pod["metadata"].get("deletionTimestamp") and phase != "Running":
            return
        if phase in ("Pending", "Scheduling"):
            conds = []
            if psched.get("status") == "False":
                conds.append(_cond("PodScheduled", "False", psched.get("reason", ""),
                                   psched.get("message", "")))
            else:
                conds.append(_cond("PodScheduled", "True"))
            waiting = None
            for cs in dig(pod, "status", "containerStatuses") or []:
                w = dig(cs, "state", "waiting", "reason")
                if w in ("ErrImagePull", "ImagePullBackOff"):
                    waiting = w
            if waiting:
                conds.append(_cond("Synchronized", "False", waiting,
                                   f"{waiting}: image could not be pulled"))
            if pphase == "Running":
                node = dig(pod, "spec", "nodeName")
                n = self._vmi_status(vmi, "Scheduled", nodeName=node,
                                     conditions=[_cond("PodScheduled", "True")],
                                     drop_conditions=("Synchronized",))
                if n is not None:
                    nn = util.deep(n)
                    nn["metadata"].setdefault("labels", {})["kubevirt.io/nodeName"] = node
                    self.api.sys_update("virtualmachineinstances", nn)
            else:
                self._vmi_status(vmi, "Scheduling", conditions=conds,
                                 drop_conditions=() if waiting else ("Synchronized",))
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
                gs = self.guest_state.get(uid)
                if gs is None:
                    self._start_guest(vmi, pod)
                    return
                if gs == "starting":
                    return
                if gs != "running":
                    why = self.guest_errors.get(uid) or "the domain did not start"
                    self._vmi_status(vmi, "Failed", drop_conditions=("Ready",))
                    self.api.event(vmi, "Warning", "SyncFailed",
                                   f"server error. command SyncVMI failed: {why}"[:1000],
                                   "virt-handler")
                    return
            mac = "02:%02x:%02x:%02x:%02x:%02x" % tuple(bytes.fromhex(uid.replace("-", "")[:10]))
            # a process guest "has" its agent at once; a real one reports it later
            agent = [] if self.real_guests else [_cond("AgentConnected", "True")]
            os_info = {} if self.real_guests else {
                "id": "debian", "name": "Debian GNU/Linux", "version": "12", "versionId": "12",
                "prettyName": "Debian GNU/Linux 12 (bookworm)", "kernelRelease": "6.1.0-kubesim"}
            n = self._vmi_status(
                vmi, "Running",
                interfaces=[{"name": "default", "ipAddress": ip, "ipAddresses": [ip], "mac": mac,
                             "infoSource": "domain" if self.real_guests else "domain, guest-agent",
                             "interfaceName": "eth0",
                             "podInterfaceName": "eth0", "queueCount": 1, "linkState": "up"}],
                guestOSInfo=os_info,
                qosClass="Burstable", launcherContainerImageVersion=LAUNCHER_IMAGE,
                migrationMethod="BlockMigration", migrationTransport="Unix",
                activePods={pod["metadata"]["uid"]: dig(pod, "spec", "nodeName")},
                conditions=[_cond("Ready", "True"),
                            _cond("LiveMigratable", "False", "DisksNotLiveMigratable",
                                  "cannot migrate VMI which does not use masquerade, bridge with "
                                  "kubevirt.io/allow-pod-bridge-network-live-migration VM "
                                  "annotation or a migratable plugin to connect to the pod "
                                  "network" if False else
                                  "cannot migrate VMI: PVC is not shared, live migration "
                                  "requires that all PVCs must be shared (using ReadWriteMany "
                                  "access mode)")] + agent)
            self.api.event(vmi, "Normal", "Started", "VirtualMachineInstance started.",
                           "virt-handler")
            if not self.real_guests:
                self._start_guest(n or vmi, pod)
            return
        if phase == "Running":
            gs = self.guest_state.get(uid)
            if gs == "failed":
                self._vmi_status(vmi, "Failed", drop_conditions=("Ready",))
                self.api.event(vmi, "Warning", "Stopped", "The VirtualMachineInstance crashed.",
                               "virt-handler")
            elif gs == "succeeded":
                self._vmi_status(vmi, "Succeeded", drop_conditions=("Ready", "AgentConnected"))
                self.api.event(vmi, "Normal", "Stopped", "The VirtualMachineInstance was shut "
                               "down.", "virt-handler")
            elif gs == "running" and uid in self.agent_info and \
                    (get_condition(vmi, "AgentConnected") or {}).get("status") != "True":
                info = self.agent_info[uid] or {}
                os_info = {k: v for k, v in (
                    ("id", info.get("id")), ("name", info.get("name")),
                    ("prettyName", info.get("pretty-name")), ("version", info.get("version")),
                    ("versionId", info.get("version-id")),
                    ("kernelRelease", info.get("kernel-release")),
                    ("kernelVersion", info.get("kernel-version")),
                    ("machine", info.get("machine"))) if v}
                ifs = [dict(i, infoSource="domain, guest-agent")
                       for i in dig(vmi, "status", "interfaces") or []]
                self._vmi_status(vmi, conditions=[_cond("AgentConnected", "True")],
                                 guestOSInfo=os_info, interfaces=ifs)

    def _create_launcher(self, vmi):
        md = vmi["metadata"]
        name = md["name"]
        labels = dict(md.get("labels") or {})
        labels.update({"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": md["uid"],
                       "vm.kubevirt.io/name": name.split(".")[0][:63],
                       "vmi.kubevirt.io/id": name[:63]})
        spec = vmi.get("spec") or {}
        mem = mem_request(spec)
        cpus = int(dig(spec, "domain", "cpu", "cores") or 1) * int(
            dig(spec, "domain", "cpu", "sockets") or 1) * int(dig(spec, "domain", "cpu", "threads") or 1)
        volumes = []
        images = []
        for v in spec.get("volumes") or []:
            vn = v.get("name")
            if v.get("containerDisk"):
                images.append(v["containerDisk"].get("image", ""))
                volumes.append({"name": vn, "emptyDir": {}})
            elif dig(v, "ephemeral", "persistentVolumeClaim", "claimName"):
                volumes.append({"name": vn, "persistentVolumeClaim": {
                    "claimName": v["ephemeral"]["persistentVolumeClaim"]["claimName"],
                    "readOnly": True}})
            elif dig(v, "persistentVolumeClaim", "claimName"):
                volumes.append({"name": vn, "persistentVolumeClaim": {
                    "claimName": v["persistentVolumeClaim"]["claimName"]}})
            elif dig(v, "dataVolume", "name"):
                volumes.append({"name": vn, "persistentVolumeClaim": {
                    "claimName": v["dataVolume"]["name"]}})
            elif v.get("cloudInitNoCloud") is not None:
                ref = dig(v, "cloudInitNoCloud", "secretRef", "name")
                if ref:
                    volumes.append({"name": f"{vn}-udata", "secret": {"secretName": ref}})
        volumes.append({"name": "ephemeral-disks", "emptyDir": {}})
        containers = [{"name": "compute", "image": LAUNCHER_IMAGE,
                       "command": ["/usr/bin/virt-launcher-monitor", "--qemu-timeout", "240s",
                                   "--name", name, "--uid", md["uid"], "--namespace",
                                   md.get("namespace")],
                       "resources": {"requests": {"memory": str(mem + getattr(
                                                      self.sim, "launcher_overhead",
                                                      LAUNCHER_OVERHEAD)),
                                                  "cpu": "100m",
                                                  "devices.kubevirt.io/kvm": "1"},
                                     "limits": {"devices.kubevirt.io/kvm": "1"}}}]
        for i, img in enumerate(images):
            containers.append({"name": f"volume{i}", "image": img,
                               "command": ["/usr/bin/container-disk"],
                               "resources": {"requests": {"memory": "1M", "cpu": "10m"}}})
        node_sel = dict(spec.get("nodeSelector") or {})
        node_sel["kubevirt.io/schedulable"] = "true"
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"generateName": f"virt-launcher-{name}-",
                            "namespace": md.get("namespace"), "labels": labels,
                            "annotations": {"kubevirt.io/domain": name,
                                            "kubevirt.io/migrationTransportUnix": "true",
                                            "kubectl.kubernetes.io/default-container": "compute"},
                            "ownerReferences": [owner_ref(vmi)]},
               "spec": {"containers": containers, "volumes": volumes, "nodeSelector": node_sel,
                        "hostname": spec.get("hostname") or name.split(".")[0][:63],
                        "restartPolicy": "Never", "schedulerName": "default-scheduler",
                        "terminationGracePeriodSeconds": 30, "automountServiceAccountToken": False,
                        "dnsPolicy": "ClusterFirst", "priority": 0,
                        "securityContext": {"runAsUser": 107, "runAsNonRoot": True}},
               "status": {"phase": "Pending", "qosClass": "Burstable"}}
        if dig(spec, "affinity"):
            pod["spec"]["affinity"] = util.deep(spec["affinity"])
        p = self.api.sys_create("pods", pod)
        self._pods_by_owner[md["uid"]] = p
        self.api.event(vmi, "Normal", "SuccessfulCreate", f"Created virtual machine pod "
                       f"{p['metadata']['name']}", "virtualmachine-controller")
        return p

    # --------------------------------------------------- guests (I/O off-lock)
    def _alloc_ip(self):
        used = set(self.ips.values())
        base = self.sim.guest_net
        for _ in range(65000):
            i = self.ip_next
            self.ip_next = (self.ip_next + 1) % (254 * 254)
            ip = f"{base[0]}.{base[1]}.{i // 254}.{i % 254 + 1}"
            if ip not in used and self._ip_free(ip):
                return ip
        raise RuntimeError("guest network exhausted")

    @staticmethod
    def _ip_free(ip):
        """Nobody else on this host (another simulator's guest, a leftover
        process) listens on ip:8899: the address is really this guest's."""
        with socket.socket() as s:
            try:
                s.bind((ip, 8899))
                return True
            except OSError:
                return False

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

    def _start_guest(self, vmi, pod):
        md = vmi["metadata"]
        uid = md["uid"]
        if uid in self.guest_state:
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
        if getattr(cls, "kind", "") == "process":
            kw["hide"] = [self.sim.state_dir]
        if getattr(cls, "kind", "") == "qemu":
            # KubeVirt's NoCloud instance-id: stable per VMI name and namespace
            kw.update(instance_id=f"{md['name']}.{md.get('namespace')}",
                      image_dir=getattr(self.sim.args, "guest_image_dir", None))
        self.guest_state[uid] = "starting"
        key = uid

        def go():
            g = None
            try:
                g = cls(**kw)
                self.guests[uid] = g
                g.start()
                stop = False
                with self.store.lock:
                    if self.guest_state.get(uid) == "starting":
                        self.guest_state[uid] = "running"
                    elif self.guest_state.get(uid) in ("stopping", "stopped"):
                        stop = True
                if stop:
                    g.stop()
            except Exception as e:  # noqa: BLE001
                self.sim.log(f"guest {md.get('namespace')}/{md['name']} failed to start: {e}")
                with self.store.lock:
                    self.guest_state[uid] = "failed"
                    self.guest_errors[uid] = str(e)
                if g is not None and getattr(g, "kind", "") == "qemu":
                    g.stop(timeout=0)   # overlay, seed, sockets
            self.wake.set()
        self.workers.submit(key, go)

    def _stop_guest(self, uid):
        gs = self.guest_state.get(uid)
        if gs in (None, "stopped", "failed", "succeeded"):
            if gs is None:
                self.ips.pop(uid, None)
            return
        self.guest_state[uid] = "stopping"

        def go():
            g = self.guests.get(uid)
            try:
                if g is not None:
                    g.stop()
            finally:
                with self.store.lock:
                    self.guest_state[uid] = "stopped"
                    self.guests.pop(uid, None)
                    self.ips.pop(uid, None)
                self.wake.set()
        self.workers.submit(uid, go)

    def check_guests(self):
        """Mark guests that died on their own (called periodically, off the store lock).
        A real guest that powered itself off (QEMU exit 0) succeeded, anything
        else failed; its overlay goes at once (an ephemeral disk dies with QEMU)."""
        for uid, g in list(self.guests.items()):
            if self.guest_state.get(uid) == "running" and not g.alive():
                real = getattr(g, "kind", "") == "qemu"
                state = "failed"
                if real:
                    code = g.exit_code()
                    state = "succeeded" if code == 0 and not g.error else "failed"
                    why = g.error or f"qemu exited with {code}"
                with self.store.lock:
                    if self.guest_state.get(uid) != "running":
                        continue
                    self.guest_state[uid] = state
                    self.ips.pop(uid, None)
                    if real:
                        self.guest_errors[uid] = why
                if real:
                    self.sim.log(f"guest {g.name}: {why} ({state})")
                    self.workers.submit(uid, g.stop)
                self.wake.set()

    def _agent_probe_loop(self):
        """KubeVirt's AgentConnected: poll each running real guest's QEMU guest
        agent until it answers (off the store lock; a probe may take a second)."""
        while not self.stopping:
            time.sleep(1.0)
            for uid, g in list(self.guests.items()):
                if self.guest_state.get(uid) != "running" or uid in self.agent_info:
                    continue
                try:
                    if not g.agent_connected(timeout=1.0):
                        continue
                    info = g.osinfo()
                except Exception:  # noqa: BLE001 - not up yet, or going away
                    continue
                with self.store.lock:
                    if self.guest_state.get(uid) == "running":
                        self.agent_info[uid] = info or {}
                self.wake.set()

    def stop_all(self):
        self.stopping = True
        self.wake.set()
        gs = list(self.guests.values())
        threads = []
        for g in gs:
            # a real guest gets 3 s to power off, then QEMU is killed: all done
            # well within the 8 s a stack gives the simulator after SIGTERM
            fn = (lambda g=g: g.stop(timeout=3)) if getattr(g, "kind", "") == "qemu" else g.stop
            t = threading.Thread(target=fn, daemon=True)
            t.start()
            threads.append(t)
        deadline = time.monotonic() + (6 if self.real_guests else 4)
        for t in threads:
            t.join(max(0.01, deadline - time.monotonic()))

    # ------------------------------------------------------------ pods
    def _node_free(self):
        """(nodes, {node: memory bytes free}, {node: kvm devices free})."""
        nodes = {n["metadata"]["name"]: n for n in self.store.list("nodes")}
        used = {n: 0 for n in nodes}
        used_kvm = {n: 0 for n in nodes}
        for p in self.store.list("pods"):
            nn = dig(p, "spec", "nodeName")
            if nn in used and dig(p, "status", "phase") not in ("Succeeded", "Failed"):
                used[nn] += pod_mem(p)
                used_kvm[nn] += pod_request(p, KVM_DEVICE)
        free, free_kvm = {}, {}
        for n, node in nodes.items():
            try:
                alloc = int(parse_quantity(dig(node, "status", "allocatable", "memory") or "0"))
            except ValueError:
                alloc = 0
            try:
                kvm = int(parse_quantity(dig(node, "status", "allocatable", KVM_DEVICE) or "0"))
            except ValueError:
                kvm = 0
            free[n] = alloc - used[n]
            free_kvm[n] = kvm - used_kvm[n]
        return nodes, free, free_kvm

    def _schedule(self, pod):
        if self._free is None:
            self._free = self._node_free()
        nodes, free, free_kvm = self._free
        need = pod_mem(pod)
        need_kvm = pod_request(pod, KVM_DEVICE)
        sel = dig(pod, "spec", "nodeSelector") or {}
        ns = pod["metadata"].get("namespace")
        unbound = []
        for v in dig(pod, "spec", "volumes") or []:
            c = dig(v, "persistentVolumeClaim", "claimName")
            if c:
                pvc = self.store.get("persistentvolumeclaims", ns, c)
                if pvc is None:
                    return None, f'persistentvolumeclaim "{c}" not found'
                if dig(pvc, "status", "phase") != "Bound":
                    unbound.append(c)
        total = len(nodes)
        if unbound:
            return None, (f"0/{total} nodes are available: pod has unbound immediate "
                          f"PersistentVolumeClaims. preemption: 0/{total} nodes are available: "
                          f"{total} Preemption is not helpful for scheduling.")
        fits, reasons = [], {}
        for n, node in nodes.items():
            labels = node["metadata"].get("labels") or {}
            if dig(node, "spec", "unschedulable"):
                reasons["node(s) were unschedulable"] = reasons.get("node(s) were unschedulable", 0) + 1
                continue
            if any(labels.get(k) != v for k, v in sel.items()):
                r = "node(s) didn't match Pod's node affinity/selector"
                reasons[r] = reasons.get(r, 0) + 1
                continue
            if free[n] < need:
                reasons["Insufficient memory"] = reasons.get("Insufficient memory", 0) + 1
                continue
            if free_kvm[n] < need_kvm:
                r = f"Insufficient {KVM_DEVICE}"
                reasons[r] = reasons.get(r, 0) + 1
                continue
            fits.append(n)
        if not fits:
            parts = ", ".join(f"{c} {r}" for r, c in sorted(reasons.items()))
            return None, (f"0/{total} nodes are available: {parts}. preemption: 0/{total} nodes "
                          f"are available: {total} No preemption victims found for incoming pod.")
        fits.sort(key=lambda n: (-free[n], n))
        free[fits[0]] -= need
        free_kvm[fits[0]] -= need_kvm
        return fits[0], None

    def _pod_status(self, pod, **kw):
        n = util.deep(pod)
        st = n.setdefault("status", {})
        conds = kw.pop("conditions", None)
        if conds:
            cl = st.get("conditions") or []
            for c in conds:
                cl = set_condition(cl, c)
            st["conditions"] = cl
        st.update(kw)
        if n != pod:
            return self.api.sys_update("pods", n)
        return pod

    def _container_statuses(self, pod, state, ready=False, started=False):
        out = []
        for c in dig(pod, "spec", "containers") or []:
            out.append({"name": c["name"], "image": c.get("image"), "imageID": "",
                        "ready": ready, "restartCount": 0, "started": started, "state": state,
                        "lastState": {}})
        return out

    def pod(self, pod):
        md = pod["metadata"]
        uid = md["uid"]
        ns = md.get("namespace")
        st = pod.get("status") or {}
        node = dig(pod, "spec", "nodeName")
        if md.get("deletionTimestamp"):
            if not node or st.get("phase") in ("Succeeded", "Failed") and False:
                self.store.remove("pods", pod)
                return
            # the VMI's guest must be down before the launcher goes away
            owner = next((o for o in md.get("ownerReferences") or []
                          if o.get("kind") == "VirtualMachineInstance"), None)
            if owner and self.guest_state.get(owner.get("uid")) in ("starting", "running",
                                                                    "stopping"):
                if self.guest_state.get(owner.get("uid")) != "stopping":
                    self._stop_guest(owner["uid"])
                return
            if self.ready(uid, "terminate", "pod_terminate"):
                self.store.remove("pods", pod)
            return
        phase = st.get("phase") or "Pending"
        if phase in ("Succeeded", "Failed"):
            return
        if not node:
            if not self.ready(uid, "schedule", "schedule"):
                return
            target, why = self._schedule(pod)
            if target is None:
                self._pod_status(pod, phase="Pending", conditions=[
                    _cond("PodScheduled", "False", "Unschedulable", why)])
                self.api.event(pod, "Warning", "FailedScheduling", why, "default-scheduler")
                # retry later
                self.due[(uid, "schedule")] = time.monotonic() + self.profile.delay("attach_retry") * 2
                return
            n = util.deep(pod)
            n["spec"]["nodeName"] = target
            n["status"]["conditions"] = set_condition(n["status"].get("conditions"),
                                                      _cond("PodScheduled", "True"))
            node_obj = self.store.get("nodes", "", target)
            n["status"]["hostIP"] = dig(node_obj, "status", "addresses", 0, "address") or "127.0.0.1"
            n["status"]["containerStatuses"] = self._container_statuses(
                pod, {"waiting": {"reason": "ContainerCreating"}})
            n["status"]["startTime"] = util.now_rfc3339()
            self.api.sys_update("pods", n)
            self.api.event(pod, "Normal", "Scheduled",
                           f"Successfully assigned {ns}/{md['name']} to {target}", "default-scheduler")
            return
        if phase == "Pending":
            self._kubelet_start(pod, node)

    def _kubelet_start(self, pod, node):
        md = pod["metadata"]
        uid = md["uid"]
        ns = md.get("namespace")
        retry = self.profile.delay("attach_retry")
        # secrets (cloud-init user data)
        for v in dig(pod, "spec", "volumes") or []:
            sn = dig(v, "secret", "secretName")
            if sn and self.store.get("secrets", ns, sn) is None:
                k = (uid, "mount-retry")
                if self.due.get(k, 0) <= time.monotonic():
                    self.api.event(pod, "Warning", "FailedMount",
                                   f'MountVolume.SetUp failed for volume "{v["name"]}" : secret '
                                   f'"{sn}" not found', "kubelet")
                    self.due[k] = time.monotonic() + retry
                return
        # PVC attach (RWO across nodes -> Multi-Attach)
        has_pvc = False
        for v in dig(pod, "spec", "volumes") or []:
            c = dig(v, "persistentVolumeClaim", "claimName")
            if not c:
                continue
            has_pvc = True
            pvc = self.store.get("persistentvolumeclaims", ns, c)
            if pvc is None or dig(pvc, "status", "phase") != "Bound":
                return
            modes = dig(pvc, "status", "accessModes") or dig(pvc, "spec", "accessModes") or []
            if ("ReadWriteOnce" in modes or "ReadWriteOncePod" in modes) and \
                    not ({"ReadOnlyMany", "ReadWriteMany"} & set(modes)):
                other = self._attached_elsewhere(pvc, node, uid)
                if other:
                    k = (uid, "attach-retry")
                    if self.due.get(k, 0) <= time.monotonic():
                        vol = dig(pvc, "spec", "volumeName") or f"pvc-{pvc['metadata']['uid']}"
                        self.api.event(pod, "Warning", "FailedAttachVolume",
                                       f'Multi-Attach error for volume "{vol}" Volume is already '
                                       "exclusively attached to one node and can't be attached to "
                                       "another", "attachdetach-controller")
                        self.due[k] = time.monotonic() + retry
                    return
        if has_pvc and not self.ready(uid, "attach", "volume_attach"):
            return
        # images
        for c in dig(pod, "spec", "containers") or []:
            img = c.get("image") or ""
            if img == LAUNCHER_IMAGE:
                continue
            if FAILING_IMAGE in img:
                k = (uid, "pull-retry")
                if self.due.get(k, 0) <= time.monotonic():
                    first = not dig(pod, "status", "containerStatuses", 1, "state", "waiting",
                                    "reason") in ("ErrImagePull", "ImagePullBackOff")
                    reason = "ErrImagePull" if first else "ImagePullBackOff"
                    self.api.event(pod, "Warning", "Failed",
                                   f'Failed to pull image "{img}": rpc error: code = NotFound '
                                   f'desc = failed to pull and unpack image "{img}": not found',
                                   "kubelet")
                    self._pod_status(pod, containerStatuses=[
                        dict(s, state={"waiting": {"reason": reason,
                                                   "message": f'Back-off pulling image "{img}"'}})
                        if s["image"] == img else s
                        for s in self._container_statuses(pod, {"waiting": {
                            "reason": "ContainerCreating"}})])
                    self.due[k] = time.monotonic() + retry * 5
                return
            have = self.images.setdefault(node, set())
            if img in have:
                if not self.ready(uid, f"pull:{img}", "image_cached"):
                    return
                continue
            pk = (node, img)
            t = self.pulling.get(pk)
            if t is None:
                d = self.profile.delay("image_pull")
                self.pulling[pk] = time.monotonic() + d
                self.due[("node:" + node, img)] = time.monotonic() + d
                self.api.event(pod, "Normal", "Pulling", f'Pulling image "{img}"', "kubelet")
                return
            if time.monotonic() < t:
                return
            have.add(img)
            self.pulling.pop(pk, None)
            self.due.pop(("node:" + node, img), None)
            self.api.event(pod, "Normal", "Pulled", f'Successfully pulled image "{img}"',
                           "kubelet")
        if not self.ready(uid, "container", "container_start"):
            return
        vmi_uid = md.get("labels", {}).get("kubevirt.io/created-by")
        ip = self.ips.get(vmi_uid) if vmi_uid else None
        if ip is None:
            ip = self._alloc_ip()
            if vmi_uid:
                self.ips[vmi_uid] = ip
        self._pod_status(pod, phase="Running", podIP=ip, podIPs=[{"ip": ip}],
                         containerStatuses=self._container_statuses(
                             pod, {"running": {"startedAt": util.now_rfc3339()}}, True, True),
                         conditions=[_cond("Initialized", "True"), _cond("ContainersReady", "True"),
                                     _cond("Ready", "True")])
        self.api.event(pod, "Normal", "Started", "Started container compute", "kubelet")

    def _attached_elsewhere(self, pvc, node, my_uid):
        ns, name = pvc["metadata"].get("namespace"), pvc["metadata"]["name"]
        mine = self.store.get("pods", ns, "")
        for p in self.store.list("pods", ns):
            if p["metadata"]["uid"] == my_uid:
                continue
            pn = dig(p, "spec", "nodeName")
            if not pn or pn == node:
                continue
            if dig(p, "status", "phase") != "Running":
                continue
            for v in dig(p, "spec", "volumes") or []:
                if dig(v, "persistentVolumeClaim", "claimName") == name:
                    return pn
        del mine
        return None

    # ---------------------------------------------------------------- GC
    def gc(self):
        objs = []
        for plural, d in self.store.objs.items():
            if plural == "events":
                continue
            for o in d.values():
                objs.append((plural, o))
        now = time.monotonic()
        if now - getattr(self, "_last_event_ttl", 0) > 30:
            # the apiserver's --event-ttl (1 h)
            self._last_event_ttl = now
            limit = time.time() - 3600
            for e in list(self.store.objs.get("events", {}).values()):
                ts = util.parse_rfc3339(e.get("lastTimestamp") or "")
                if ts is not None and ts < limit:
                    self.store.remove("events", e)
        deps = {}
        for plural, o in objs:
            for ref in o["metadata"].get("ownerReferences") or []:
                deps.setdefault(ref.get("uid"), []).append((plural, o))
        # owners being deleted in the foreground / orphaning
        for plural, o in objs:
            md = o["metadata"]
            if not md.get("deletionTimestamp"):
                continue
            fins = md.get("finalizers") or []
            uid = md["uid"]
            if "orphan" in fins:
                for dp, d in deps.get(uid, []):
                    cur = self.store.get(dp, d["metadata"].get("namespace", ""), d["metadata"]["name"])
                    if cur is None:
                        continue
                    n = util.deep(cur)
                    n["metadata"]["ownerReferences"] = [r for r in n["metadata"].get(
                        "ownerReferences") or [] if r.get("uid") != uid]
                    if not n["metadata"]["ownerReferences"]:
                        del n["metadata"]["ownerReferences"]
                    self.api.sys_update(dp, n)
                n = util.deep(o)
                n["metadata"]["finalizers"] = [f for f in fins if f != "orphan"]
                self.api.sys_update(plural, n)
            elif "foregroundDeletion" in fins:
                blocking = 0
                for dp, d in deps.get(uid, []):
                    cur = self.store.get(dp, d["metadata"].get("namespace", ""), d["metadata"]["name"])
                    if cur is None:
                        continue
                    if any(r.get("uid") == uid and r.get("blockOwnerDeletion")
                           for r in cur["metadata"].get("ownerReferences") or []):
                        blocking += 1
                    if not cur["metadata"].get("deletionTimestamp"):
                        self.api.sys_delete(dp, cur, "Foreground")
                if blocking == 0:
                    n = util.deep(o)
                    n["metadata"]["finalizers"] = [f for f in fins if f != "foregroundDeletion"]
                    self.api.sys_update(plural, n)
        # dependents whose owners are all gone
        for plural, o in objs:
            md = o["metadata"]
            refs = md.get("ownerReferences")
            if not refs or md.get("deletionTimestamp"):
                continue
            cur = self.store.get(plural, md.get("namespace", ""), md["name"])
            if cur is not o:
                continue
            alive = []
            for r in refs:
                owner = self.store.by_uid_get(r.get("uid"))
                if owner is not None:
                    alive.append(r)
            if not alive:
                try:
                    self.api.sys_delete(plural, o)
                except Exception:  # noqa: BLE001
                    pass
            elif len(alive) != len(refs):
                n = util.deep(o)
                n["metadata"]["ownerReferences"] = alive
                self.api.sys_update(plural, n)
