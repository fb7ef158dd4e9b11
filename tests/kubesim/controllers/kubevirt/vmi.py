"""virt-controller's VirtualMachineInstance controller: a VMI's volumes must
exist (FailedPvcNotFound, DataVolumesNotReady), then it renders the
virt-launcher pod (launcher.py) and follows it: Pending -> Scheduling (the
pod's PodScheduled, image pull errors) -> Scheduled (the pod runs on a node).
From Scheduled on, virt-handler (handler.py) owns the VMI: Running, the
guest, its end. Deleting a VMI: virt-handler stops the guest, then this
controller deletes the launcher pod and, once it is gone, drops the VMI's
finalizers."""
import operators
import util
from util import dig

from ..base import Controller, cond, get_condition
from .common import VMI_FINALIZERS, launcher_of, vmi_status
from .launcher import launcher_pod


class VMIController(Controller):
    name = "virtualmachineinstance-controller"

    def __init__(self, mgr):
        super().__init__(mgr)
        self.runtime = mgr.runtime

    def reconcile(self, store):
        for vmi in store.list("virtualmachineinstances"):
            self.vmi(vmi)

    def _vmi_status(self, vmi, phase=None, **changes):
        return vmi_status(self.api, vmi, phase, **changes)

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
        st = vmi.get("status") or {}
        phase = st.get("phase") or "Pending"
        pod = launcher_of(self.mgr, vmi)
        if md.get("deletionTimestamp"):
            if self.runtime.state.get(uid) in ("starting", "running", "stopping"):
                return      # virt-handler shuts the guest down first
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
                        cond("Synchronized", "False", "FailedPvcNotFound", msg),
                        cond("PodScheduled", "False", "Unschedulable", msg)])
                elif reason == "DataVolumesNotReady":
                    self._vmi_status(vmi, "Pending", conditions=[
                        cond("DataVolumesReady", "False", "NotAllDataVolumesReady",
                             "Not all of the VMI's DVs are ready")])
                return
            if not self.ready(uid, "pod-create", "pod_create"):
                return
            self._create_launcher(vmi)
            self._vmi_status(vmi, "Scheduling", drop_conditions=("Synchronized", "DataVolumesReady"))
            return
        if pod is None:
            # launcher pod vanished under a live VMI
            if phase in ("Scheduled", "Running"):
                self.runtime.stop(uid)
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
                conds.append(cond("PodScheduled", "False", psched.get("reason", ""),
                                  psched.get("message", "")))
            else:
                conds.append(cond("PodScheduled", "True"))
            waiting = None
            for cs in dig(pod, "status", "containerStatuses") or []:
                w = dig(cs, "state", "waiting", "reason")
                if w in ("ErrImagePull", "ImagePullBackOff"):
                    waiting = w
            if waiting:
                conds.append(cond("Synchronized", "False", waiting,
                                  f"{waiting}: image could not be pulled"))
            if pphase == "Running":
                node = dig(pod, "spec", "nodeName")
                n = self._vmi_status(vmi, "Scheduled", nodeName=node,
                                     conditions=[cond("PodScheduled", "True")],
                                     drop_conditions=("Synchronized",))
                if n is not None:
                    nn = util.deep(n)
                    nn["metadata"].setdefault("labels", {})["kubevirt.io/nodeName"] = node
                    self.api.sys_update("virtualmachineinstances", nn)
            else:
                self._vmi_status(vmi, "Scheduling", conditions=conds,
                                 drop_conditions=() if waiting else ("Synchronized",))
            return
        # Scheduled and Running: virt-handler's (handler.py)

    def _create_launcher(self, vmi):
        md = vmi["metadata"]
        pod = launcher_pod(vmi, getattr(self.sim, "launcher_overhead", None),
                           emulation=operators.emulation(self.store))
        p = self.api.sys_create("pods", pod)
        self.mgr.pods_by_owner[md["uid"]] = p
        self.api.event(vmi, "Normal", "SuccessfulCreate", f"Created virtual machine pod "
                       f"{p['metadata']['name']}", "virtualmachine-controller")
        return p
