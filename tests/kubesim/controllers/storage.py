"""The PersistentVolume controller (the PVC binder) and the
kubernetes.io/pvc-protection finalizer: a PVC gets the finalizer, binds after
the profile's pvc_bind delay (volumeName, capacity, bind annotations), and a
PVC being deleted keeps its finalizer while a pod that is not finished uses it.
A claim whose dataSourceRef names a populator's kind (CDI's VolumeImportSource)
is not provisioned: its populator binds it."""
import util
from util import dig

from .base import PVC_PROTECTION, Controller


class PVCBinder(Controller):
    name = "persistentvolume-binder-controller"

    def reconcile(self, store):
        for pvc in store.list("persistentvolumeclaims"):
            self.pvc(pvc)

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
            ref = dig(pvc, "spec", "dataSourceRef") or {}
            if ref.get("apiGroup") not in (None, "", "snapshot.storage.k8s.io"):
                # a volume populator's claim (KEP-1495): the provisioner leaves it
                # alone; the populator binds a volume to it (CDI's Rebind)
                return
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

