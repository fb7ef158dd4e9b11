"""CDI's DataVolume controller: a DataVolume (or a VM's dataVolumeTemplate)
creates its PVC (DV annotations passed through, CDI's annotations,
storage.pod.phase Pending -> Running -> Succeeded) and goes Pending ->
ImportScheduled -> ImportInProgress (progress in 10 % steps) -> Succeeded
(Clone* for a pvc source), timed by the profile's dv_import."""
import time

import util
from util import dig

from .base import PVC_PROTECTION, Controller, cond, owner_ref, set_condition

# The StorageProfiles of the simulated storage classes (CDI's claimPropertySets):
# "standard", the default class, is ReadWriteOnce Filesystem storage; another
# class has no profile, so a DataVolume's `storage` without accessModes stays
# Pending there, as with real CDI.
STORAGE_PROFILES = {"standard": ("ReadWriteOnce",)}


class DataVolumeController(Controller):
    name = "cdi-datavolume-controller"

    def reconcile(self, store):
        for dv in store.list("datavolumes"):
            self.datavolume(dv)

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
            stor = spec.get("storage")
            if stor is not None and not stor.get("accessModes"):
                # real CDI takes them from the storage class's StorageProfile
                # (claimPropertySets) and leaves the DataVolume Pending without one
                sc = stor.get("storageClassName") or "standard"
                modes = STORAGE_PROFILES.get(sc)
                if not modes:
                    if not st.get("phase"):
                        self._dv_status(dv, "Pending", "N/A", bound=False)
                        self.api.event(dv, "Warning", "ErrClaimNotValid",
                                       "DataVolume.storage spec is missing accessMode and volumeMode, "
                                       f"cannot get access mode from StorageProfile {sc}",
                                       "datavolume-controller")
                    return
                spec = dict(spec, storage=dict(stor, accessModes=list(modes)))
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
            modes = dig(pvc, "status", "accessModes") or dig(pvc, "spec", "accessModes") or []
            if phase == "ImportScheduled" and set(modes) == {"ReadOnlyMany"}:
                # the importer writes the image: a writable
                # mount of a ReadOnlyMany claim, which the CSI driver refuses
                if not any(c.get("reason") == "FailedMount"
                           for c in st.get("conditions") or []):
                    n = util.deep(dv)
                    n["status"]["conditions"] = set_condition(
                        n["status"].get("conditions") or [],
                        cond("Running", "False", "FailedMount",
                             f"importer-{name}: claim {name} is ReadOnlyMany and the importer "
                             "needs to write to it"))
                    self.api.sys_update("datavolumes", n)
                    self.api.event(dv, "Warning", "FailedMount",
                                   f'importer-{name}: MountVolume.SetUp failed: claim "{name}" is '
                                   "ReadOnlyMany and the importer mounts it writable; import "
                                   "into ReadWriteOnce/ReadWriteMany storage (then mount it "
                                   "read-only) or clone into a ReadOnlyMany claim",
                                   "datavolume-controller")
                return
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
        conds = set_condition(conds, cond("Bound", "True" if bound else "False",
                                          "Bound" if bound else "Pending",
                                          "PVC " + n["metadata"]["name"] + (" Bound" if bound else " Pending")))
        done = phase == "Succeeded"
        conds = set_condition(conds, cond("Ready", "True" if done else "False",
                                          "" if done else "TransferRunning" if running and bound else ""))
        conds = set_condition(conds, cond("Running", "True" if (running and not done and bound
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

