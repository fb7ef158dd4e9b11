"""virt-controller's VirtualMachine controller: the VM's finalizer, its
dataVolumeTemplates, the VMI it wants (runStrategy Always/RerunOnFailure/Once/
Manual/Halted, or `running`) created from spec.template, deletion (the VMI
first, then the finalizer), and the VM's status (printableStatus, ready,
created, the Ready condition), which follows its VMI within the same pass."""
import util
from util import dig

from ..base import Controller, cond, controlled_by, get_condition, owner_ref, set_condition
from .common import KV, VM_FINALIZER, VMI_FINALIZERS, run_strategy


class VMController(Controller):
    name = "virtualmachine-controller"

    def reconcile(self, store):
        for vm in store.list("virtualmachines"):
            self.vm(vm)

    def reconcile_status(self, store):
        """The VM's status follows its VMI within the same pass (run after the
        VMI controllers and the kubelet)."""
        for v in store.list("virtualmachines"):
            if not v["metadata"].get("deletionTimestamp"):
                vmi = store.get("virtualmachineinstances", v["metadata"].get("namespace"),
                                v["metadata"]["name"])
                if vmi is not None and not controlled_by(vmi, v["metadata"]["uid"]) and \
                        vmi["metadata"].get("ownerReferences"):
                    vmi = None
                self._vm_status(v, vmi, None)

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
            if dvname and "cdi.kubevirt.io" in (getattr(self.sim.args, "no_api", None) or ()):
                # no CDI (kubesim --no-api cdi.kubevirt.io): the create fails and
                # the VM stays Provisioning (KubeVirt pkg/virt-controller/watch/
                # vm/vm.go:552, v1.9.0: "Error creating DataVolume %s: %v")
                self.api.event(vm, "Warning", "FailedDataVolumeCreate",
                               f"Error creating DataVolume {dvname}: the server could not "
                               "find the requested resource (post datavolumes.cdi.kubevirt.io)",
                               "virtualmachine-controller")
                continue
            if dvname and self.store.get("datavolumes", ns, dvname) is None:
                # the template's metadata, labels and annotations as they are,
                # plus kubevirt.io/created-by and allowClaimAdoption (KubeVirt
                # pkg/storage/types/dv.go GenerateDataVolumeFromTemplate,
                # pkg/virt-controller/watch/util/util.go CreateDataVolumeManifest)
                tmd = util.deep(t.get("metadata") or {})
                tmd["labels"] = dict(tmd.get("labels") or {},
                                     **{"kubevirt.io/created-by": md["uid"]})
                tmd["annotations"] = dict(tmd.get("annotations") or {},
                                          **{"cdi.kubevirt.io/allowClaimAdoption": "true"})
                dv = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
                      "metadata": dict(tmd, namespace=ns, ownerReferences=[owner_ref(vm)]),
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
        conds = set_condition(conds, cond("Ready", "True" if ready else "False",
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

