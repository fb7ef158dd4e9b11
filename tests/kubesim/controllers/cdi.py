"""CDI (containerized-data-importer 1.66): the DataVolume controller, the
import controller and the import populator, with the importer pods they run
(README "CDI importer pods"; every behaviour is cited in CONFORMANCE.md,
"Storage / CDI").

A registry or http DataVolume (or a VM's dataVolumeTemplate) gets its PVC,
which carries the DataVolume's labels and annotations, then one of two flows:

- legacy (the storage class is not CSI, --cdi-flow legacy, or the
  DataVolume's `cdi.kubevirt.io/storage.usePopulator: "false"`): the PVC has
  the import annotations; once it is Bound the import controller runs the
  importer pod `importer-<pvc>` on it;
- populator (the default, the class's provisioner being a CSI driver): the
  PVC names a VolumeImportSource in `dataSourceRef` and stays Pending; the
  populator makes the claim `prime-<pvc uid>`, the import controller runs
  `importer-prime-<pvc uid>` on that, the populator copies the import
  annotations and the progress onto the target, and on success rebinds the
  volume to it and deletes the prime claim.

Either way the importer pod carries ALL the labels of the target PVC, so
also the DataVolume's (import-controller.go createImporterPod), is owned by
the claim it writes, and runs cdi_importer.py (with --guest process|qemu):
it reads the image from the registry mirror (cdinet.py) through CDIConfig's
import proxy, from its own pod IP, and serves its progress on :8443, which
the CDI controller's Pod scrapes from namespace `cdi`. A scrape that is
refused leaves the progress as it was; one that fails otherwise (a timeout:
a dropped connection) makes the legacy DataVolume controller skip its status
update while the pod runs (controller-base.go reconcileProgressUpdate), and
the populator only logs it. A failing importer exits 1: the kubelet
restarts it (OnFailure, CrashLoopBackOff), the claim's running condition
says why, the DataVolume stays ImportInProgress with restartCount rising.
With --guest none nothing runs in the pod: the import completes
dv_import after the pod is Running.

Clones (a `pvc` source) and blank images keep a timed model (no pod)."""
import json
import time

import util
from util import dig

from .base import PVC_PROTECTION, Controller, cond, controlled_by, owner_ref, set_condition

A = "cdi.kubevirt.io/"
ANN_POD_PHASE = A + "storage.pod.phase"
ANN_POD_READY = A + "storage.pod.ready"
ANN_RESTARTS = A + "storage.pod.restarts"
ANN_SCHEDULABLE = A + "storage.pod.schedulable"
ANN_RUNNING = A + "storage.condition.running"
ANN_RUNNING_MSG = ANN_RUNNING + ".message"
ANN_RUNNING_REASON = ANN_RUNNING + ".reason"
ANN_ENDPOINT = A + "storage.import.endpoint"
ANN_SOURCE = A + "storage.import.source"
ANN_IMPORT_POD = A + "storage.import.importPodName"
ANN_CONTENT = A + "storage.contentType"
ANN_PREALLOC = A + "storage.preallocation.requested"
ANN_FOR_DV = A + "createdForDataVolume"
ANN_USE_POPULATOR = A + "storage.usePopulator"
ANN_POPULATOR_KIND = A + "storage.populator.kind"
ANN_POPULATOR_PROGRESS = A + "storage.populator.progress"
ANN_PRIME_NAME = A + "storage.populator.pvcPrime"
ANN_IMMEDIATE = A + "storage.bind.immediate.requested"
ANN_CREATED_BY = A + "storage.createdByController"
# what the populator copies from the prime claim to the target (populator-base.go)
DESIRED = (ANN_POD_PHASE, ANN_POD_READY, ANN_RESTARTS, ANN_PREALLOC,
           A + "storage.preallocation", ANN_RUNNING, ANN_RUNNING_MSG, ANN_RUNNING_REASON,
           ANN_SCHEDULABLE)
IMPORTER_IMAGE = "quay.io/kubevirt/cdi-importer:v1.66.0"
VOLUME_IMPORT_SOURCE = "VolumeImportSource"
QEMU_SUBGID = 107

# The StorageProfiles of the simulated storage classes (CDI's claimPropertySets):
# "standard", the default class, is ReadWriteOnce Filesystem storage; another
# class has no profile, so a DataVolume's `storage` without accessModes stays
# Pending there, as with real CDI.
STORAGE_PROFILES = {"standard": ("ReadWriteOnce",)}


def source_of(dv):
    src = dig(dv, "spec", "source") or {}
    ns = dv["metadata"].get("namespace")
    if src.get("registry"):
        return "registry", src["registry"].get("url", "")
    if src.get("http"):
        return "http", src["http"].get("url", "")
    if src.get("pvc"):
        return "pvc", f'{src["pvc"].get("namespace", ns)}/{src["pvc"].get("name")}'
    if src.get("blank") is not None:
        return "blank", ""
    return "none", ""


def is_import_target(pvc):
    """A target PVC of the import populator (dataSourceRef: a VolumeImportSource)."""
    ref = dig(pvc, "spec", "dataSourceRef") or {}
    return ref.get("kind") == VOLUME_IMPORT_SOURCE and ref.get("apiGroup") == "cdi.kubevirt.io"


class DataVolumeController(Controller):
    name = "cdi-deployment"

    def __init__(self, mgr):
        super().__init__(mgr)
        self.flow = getattr(self.sim.args, "cdi_flow", None) or "populator"
        self.pods_run = getattr(self.sim.guest_class, "kind", "") in ("process", "qemu")
        self.scraped = {}      # importer pod uid -> ("ok", pct|None) | ("refused",) | ("error", msg)
        self.logged = set()

    @property
    def net(self):
        return getattr(self.sim, "cdi_net", None)

    def reconcile(self, store):
        if self.net is not None:
            self.scraped.update(self.net.take_results())
        for uid in [u for u in self.scraped if u not in store.by_uid]:
            del self.scraped[uid]
        for dv in store.list("datavolumes"):
            self.datavolume(dv)
        for pvc in store.list("persistentvolumeclaims"):
            if is_import_target(pvc):
                self.populate(pvc)
        for pvc in store.list("persistentvolumeclaims"):
            ann = pvc["metadata"].get("annotations") or {}
            if ann.get(ANN_SOURCE) in ("registry", "http") and ann.get(ANN_ENDPOINT):
                self.import_pvc(pvc)

    # ------------------------------------------------------ DataVolumes
    def datavolume(self, dv):
        md = dv["metadata"]
        if md.get("deletionTimestamp"):
            return
        kind, endpoint = source_of(dv)
        if kind not in ("registry", "http"):
            return self.timed(dv, kind, endpoint)
        ns, name = md.get("namespace"), md["name"]
        st = dv.get("status") or {}
        pvc = self.store.get("persistentvolumeclaims", ns, name)
        if pvc is None and (st.get("phase") or "Pending") == "Pending":
            use = (md.get("annotations") or {}).get(ANN_USE_POPULATOR)
            if use not in ("true", "false"):
                # the DataVolume remembers which flow it took (datavolume/util.go
                # updateDataVolumeUseCDIPopulator)
                n = util.deep(dv)
                n["metadata"].setdefault("annotations", {})[ANN_USE_POPULATOR] = \
                    "true" if self.flow == "populator" else "false"
                self.api.sys_update("datavolumes", n)
                return
            spec = self._claim_spec(dv)
            if spec is None:
                return
            self._create_target(dv, spec, kind, endpoint, use == "true")
            self._dv_status(dv, "Pending", "N/A", bound=False)
            return
        if pvc is None:
            return
        self._import_status(dv, pvc)

    def _claim_spec(self, dv):
        spec = dv.get("spec") or {}
        stor = spec.get("storage")
        if stor is not None and not stor.get("accessModes"):
            # real CDI takes them from the storage class's StorageProfile
            # (claimPropertySets) and leaves the DataVolume Pending without one
            sc = stor.get("storageClassName") or "standard"
            modes = STORAGE_PROFILES.get(sc)
            if not modes:
                if not dig(dv, "status", "phase"):
                    self._dv_status(dv, "Pending", "N/A", bound=False)
                    self.api.event(dv, "Warning", "ErrClaimNotValid",
                                   "DataVolume.storage spec is missing accessMode and volumeMode, "
                                   f"cannot get access mode from StorageProfile {sc}",
                                   "datavolume-controller")
                return None
            spec = dict(spec, storage=dict(stor, accessModes=list(modes)))
        pspec = util.deep(spec.get("pvc") or spec.get("storage") or {})
        pspec.setdefault("accessModes", ["ReadWriteOnce"])
        pspec.setdefault("volumeMode", "Filesystem")
        return pspec

    def _create_target(self, dv, pspec, kind, endpoint, populator):
        """newPersistentVolumeClaim (datavolume/controller-base.go): CDI's labels,
        then every DataVolume label; the DataVolume's annotations and CDI's."""
        md = dv["metadata"]
        labels = {"app": "containerized-data-importer"}
        if pspec.get("volumeMode") == "Filesystem":
            labels["alerts.k8s.io/KubePersistentVolumeFillingUp"] = "disabled"
        labels.update(md.get("labels") or {})
        # util.SetRecommendedLabels: its static labels win
        labels.update({"app.kubernetes.io/component": "storage",
                       "app.kubernetes.io/managed-by": "cdi-controller"})
        ann = dict(md.get("annotations") or {})
        ann.update({ANN_RESTARTS: "0", ANN_CONTENT: dig(dv, "spec", "contentType") or "kubevirt",
                    ANN_PREALLOC: "false", ANN_FOR_DV: md["uid"]})
        if populator:
            ann[ANN_IMMEDIATE] = ""
            pspec = dict(pspec, dataSourceRef={"apiGroup": "cdi.kubevirt.io",
                                               "kind": VOLUME_IMPORT_SOURCE,
                                               "name": f"volume-import-source-{md['uid']}"})
        else:
            ann.update({ANN_ENDPOINT: endpoint, ANN_SOURCE: kind})
        pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": md["name"], "namespace": md.get("namespace"),
                            "annotations": ann, "labels": labels,
                            "ownerReferences": [owner_ref(dv)], "finalizers": [PVC_PROTECTION]},
               "spec": pspec, "status": {"phase": "Pending"}}
        self.api.sys_create("persistentvolumeclaims", pvc)

    def _import_status(self, dv, pvc):
        """The DataVolume's phase and progress from its PVC (datavolume
        import-controller.go updateStatusPhase, controller-base.go
        reconcileProgressUpdate)."""
        md = dv["metadata"]
        ns = md.get("namespace")
        st = dv.get("status") or {}
        ann = pvc["metadata"].get("annotations") or {}
        populator = is_import_target(pvc) and ann.get(ANN_USE_POPULATOR, "true") != "false"
        bound = dig(pvc, "status", "phase") == "Bound"
        ref = self.store.get("persistentvolumeclaims", ns, f"prime-{pvc['metadata']['uid']}") \
            if populator else pvc
        phase = st.get("phase") or "Pending"
        pod_phase = ann.get(ANN_POD_PHASE)
        progress = st.get("progress") or "N/A"
        if pod_phase == "Succeeded":
            phase, progress = "Succeeded", "100.0%"
        elif ref is not None and ANN_IMPORT_POD in (ref["metadata"].get("annotations") or {}) \
                and dig(ref, "status", "phase") == "Bound":
            phase = "ImportScheduled"
            if pod_phase == "Running":
                phase = "ImportInProgress"
            elif pod_phase == "Failed" and ann.get(A + "storage.import.fatalError") == "true":
                phase = "Failed"
        if phase != "Succeeded":
            if populator:
                progress = ann.get(ANN_POPULATOR_PROGRESS) or "N/A"
            else:
                pod = self.store.get("pods", ns, ann.get(ANN_IMPORT_POD) or "")
                if pod is not None and dig(pod, "status", "phase") == "Running":
                    r = self.scraped.get(pod["metadata"]["uid"])
                    if r and r[0] == "error":
                        # the scrape's error ends this reconcile before the
                        # status is written (reconcileProgressUpdate returns it)
                        return
                    if r and r[0] == "ok" and r[1] is not None:
                        progress = f"{float(r[1]):.2f}%"
        conds = {"running": ann.get(ANN_RUNNING) == "true",
                 "reason": ann.get(ANN_RUNNING_REASON) or "",
                 "message": ann.get(ANN_RUNNING_MSG) or ""}
        restarts = int(ann.get(ANN_RESTARTS) or 0)
        before = st.get("phase")
        self._dv_status(dv, phase, progress, bound=bound or (populator and ref is not None),
                        running=conds, restarts=restarts)
        if phase != before:
            msg = {"ImportScheduled": ("Normal", f"Import into {pvc['metadata']['name']} scheduled"),
                   "ImportInProgress": ("Normal",
                                        f"Import into {pvc['metadata']['name']} in progress"),
                   "Succeeded": ("Normal",
                                 f"Successfully imported into PVC {pvc['metadata']['name']}")}
            if phase in msg:
                self.api.event(dv, msg[phase][0], phase, msg[phase][1], "datavolume-controller")
        if phase == "ImportScheduled":
            self._rox_refused(dv, pvc)

    def _rox_refused(self, dv, pvc):
        modes = dig(pvc, "status", "accessModes") or dig(pvc, "spec", "accessModes") or []
        if set(modes) != {"ReadOnlyMany"}:
            return
        # the importer writes the image: a writable mount of a ReadOnlyMany
        # claim, which the CSI driver refuses (the importer pod stays
        # ContainerCreating with FailedMount, kubelet.py)
        name = dv["metadata"]["name"]
        if any(c.get("reason") == "FailedMount" for c in dig(dv, "status", "conditions") or []):
            return
        n = util.deep(self.store.get("datavolumes", dv["metadata"].get("namespace"), name) or dv)
        n.setdefault("status", {})["conditions"] = set_condition(
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

    # ---------------------------------------------------- the populator
    def populate(self, pvc):
        """import-populator.go reconcileTargetPVC, populator-base.go createPVCPrime."""
        md = pvc["metadata"]
        ns, uid = md.get("namespace"), md["uid"]
        ann = md.get("annotations") or {}
        if ann.get(ANN_USE_POPULATOR) == "false":
            return
        prime = self.store.get("persistentvolumeclaims", ns, f"prime-{uid}")
        if md.get("deletionTimestamp"):
            return
        if dig(pvc, "status", "phase") == "Bound":
            if prime is not None and dig(prime, "status", "phase") == "Lost" and \
                    not prime["metadata"].get("deletionTimestamp"):
                self.api.sys_delete("persistentvolumeclaims", prime)   # reconcileCleanup
            return
        dv = self._owner_dv(pvc)
        if prime is None:
            if dv is None:
                return
            kind, endpoint = source_of(dv)
            spec = pvc.get("spec") or {}
            prime = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                     "metadata": {
                         "name": f"prime-{uid}", "namespace": ns,
                         "labels": {"app": "containerized-data-importer",
                                    "velero.io/exclude-from-backup": "true",
                                    "app.kubernetes.io/component": "storage",
                                    "app.kubernetes.io/managed-by": "cdi-controller"},
                         "annotations": {ANN_IMMEDIATE: "", ANN_POPULATOR_KIND:
                                         VOLUME_IMPORT_SOURCE,
                                         ANN_CONTENT: ann.get(ANN_CONTENT, "kubevirt"),
                                         ANN_PREALLOC: "false",
                                         ANN_ENDPOINT: endpoint, ANN_SOURCE: kind},
                         "ownerReferences": [owner_ref(pvc)], "finalizers": [PVC_PROTECTION]},
                     "spec": {k: spec[k] for k in ("accessModes", "resources", "storageClassName",
                                                   "volumeMode") if k in spec},
                     "status": {"phase": "Pending"}}
            self.api.sys_create("persistentvolumeclaims", prime)
            self.api.event(pvc, "Normal", "CreatedPVCPrimeSuccessfully",
                           "PVC Prime created successfully", "import-populator")
            return
        pann = prime["metadata"].get("annotations") or {}
        n = util.deep(pvc)
        nann = n["metadata"].setdefault("annotations", {})
        nann[ANN_PRIME_NAME] = prime["metadata"]["name"]
        for k in DESIRED:
            if k in pann:
                nann[k] = pann[k]
            else:
                nann.pop(k, None)
        phase = pann.get(ANN_POD_PHASE)
        if phase == "Succeeded":
            nann[ANN_POPULATOR_PROGRESS] = "100.0%"
        elif pann.get(ANN_IMPORT_POD):
            pod = self.store.get("pods", ns, pann[ANN_IMPORT_POD])
            if pod is None:
                if ANN_POPULATOR_PROGRESS not in nann and \
                        dig(prime, "status", "phase") == "Bound":
                    nann[ANN_POPULATOR_PROGRESS] = "N/A"
            elif dig(pod, "status", "phase") == "Running":
                r = self.scraped.get(pod["metadata"]["uid"])
                if r and r[0] == "ok" and r[1] is not None and not r[1].startswith("100"):
                    nann[ANN_POPULATOR_PROGRESS] = f"{float(r[1]):.2f}%"
                elif r and r[0] == "error":
                    self._log_once(("progress", pod["metadata"]["uid"]),
                                   f"import-populator: Failed to update import progress for pvc "
                                   f"{ns}/{md['name']}: {r[1]}")
        if n != pvc:
            pvc = self.api.sys_update("persistentvolumeclaims", n) or pvc
        if phase == "Succeeded" and dig(prime, "status", "phase") == "Bound":
            # labels, annotations, then Rebind: the prime claim's volume
            # becomes the target's, the prime claim is Lost (and deleted)
            t = util.deep(pvc)
            t["spec"]["volumeName"] = dig(prime, "spec", "volumeName") or f"pvc-{uid}"
            t["status"] = {"phase": "Bound",
                           "accessModes": dig(prime, "status", "accessModes") or
                           dig(t, "spec", "accessModes") or [],
                           "capacity": dig(prime, "status", "capacity") or {}}
            tann = t["metadata"].setdefault("annotations", {})
            tann.setdefault("pv.kubernetes.io/bind-completed", "yes")
            tann.setdefault("pv.kubernetes.io/bound-by-controller", "yes")
            self.api.sys_update("persistentvolumeclaims", t)
            p = util.deep(prime)
            p["status"] = dict(p.get("status") or {}, phase="Lost")
            self.api.sys_update("persistentvolumeclaims", p)
            self.api.event(pvc, "Normal", "ImportSucceeded",
                           f"Successfully imported into {md['name']}", "import-populator")

    def _owner_dv(self, pvc):
        for o in pvc["metadata"].get("ownerReferences") or []:
            if o.get("kind") == "DataVolume" and o.get("controller"):
                dv = self.store.get("datavolumes", pvc["metadata"].get("namespace"), o["name"])
                if dv is not None and dv["metadata"]["uid"] == o.get("uid"):
                    return dv
        return None

    # -------------------------------------------- the import controller
    def import_pvc(self, pvc):
        """import-controller.go reconcilePvc: a claim with import annotations
        (a legacy target, or a prime claim) gets its importer pod."""
        md = pvc["metadata"]
        ns, name = md.get("namespace"), md["name"]
        ann = md.get("annotations") or {}
        pod_name = ann.get(ANN_IMPORT_POD)
        pod = self.store.get("pods", ns, pod_name) if pod_name else None
        if pod is not None and not controlled_by(pod, md["uid"]):
            self._log_once(("owner", md["uid"]), f"import-controller: {ns}/{name}: Pod is not "
                                                 "owned by PVC")
            return
        complete = ann.get(ANN_POD_PHASE) == "Succeeded"
        if md.get("deletionTimestamp") or complete:
            if pod is not None and not pod["metadata"].get("deletionTimestamp"):
                self.api.sys_delete("pods", pod)                        # cleanup
            return
        if dig(pvc, "status", "phase") != "Bound":
            return
        if not pod_name:
            n = util.deep(pvc)
            n["metadata"]["annotations"][ANN_IMPORT_POD] = f"importer-{name}"   # initPvcPodName
            self.api.sys_update("persistentvolumeclaims", n)
            return
        if pod is None:
            users = [p for p in self.store.list("pods", ns)
                     if dig(p, "status", "phase") not in ("Succeeded", "Failed") and
                     any(dig(v, "persistentVolumeClaim", "claimName") == name
                         for v in dig(p, "spec", "volumes") or [])]
            if users:
                for p in users:
                    self.api.event(pvc, "Warning", "ImportTargetInUse",
                                   f"pod {ns}/{p['metadata']['name']} using "
                                   f"PersistentVolumeClaim {name}", "import-controller")
                return
            self.api.sys_create("pods", self._importer_pod(pvc, pod_name))
            return
        self._pvc_from_pod(pvc, pod)

    def _importer_pod(self, pvc, pod_name):
        """makeImporterPodSpec + createImporterPod (import-controller.go)."""
        md = pvc["metadata"]
        ns = md.get("namespace")
        ann = md.get("annotations") or {}
        labels = {"app": "containerized-data-importer", "cdi.kubevirt.io": "importer",
                  "prometheus.cdi.kubevirt.io": "true",
                  "app.kubernetes.io/managed-by": "cdi-controller",
                  "app.kubernetes.io/component": "storage"}
        src = md.get("labels") or {}
        if ann.get(ANN_POPULATOR_KIND):
            # the populator's prime claim: the labels come from the target claim
            # that controls it
            owner = next((o for o in md.get("ownerReferences") or []
                          if o.get("controller") and o.get("kind") == "PersistentVolumeClaim"),
                         None)
            target = self.store.get("persistentvolumeclaims", ns, owner["name"]) if owner else None
            src = (target or {}).get("metadata", {}).get("labels") or {}
        labels.update(src)                       # util.MergeLabels(srcLabels, pod.Labels)
        owners = md.get("ownerReferences") or []
        owner_uid = owners[0]["uid"] if len(owners) == 1 else md["uid"]
        mirror = self.net.mirror.url if self.net is not None and self.net.mirror else ""
        env = [{"name": "IMPORTER_SOURCE", "value": ann.get(ANN_SOURCE, "")},
               {"name": "IMPORTER_ENDPOINT", "value": ann.get(ANN_ENDPOINT, "")},
               {"name": "IMPORTER_CONTENTTYPE", "value": ann.get(ANN_CONTENT, "kubevirt")},
               {"name": "IMPORTER_IMAGE_SIZE",
                "value": dig(pvc, "spec", "resources", "requests", "storage") or ""},
               {"name": "OWNER_UID", "value": owner_uid},
               {"name": "INSECURE_TLS", "value": "false"},
               {"name": "http_proxy", "value": mirror},
               {"name": "https_proxy", "value": mirror},
               {"name": "no_proxy", "value": ""}]
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod_name, "namespace": ns,
                             "annotations": {ANN_CREATED_BY: "yes"}, "labels": labels,
                             "ownerReferences": [dict(owner_ref(pvc), apiVersion="v1",
                                                      kind="PersistentVolumeClaim")]},
                "spec": {"containers": [{
                    "name": "importer", "image": IMPORTER_IMAGE, "imagePullPolicy": "IfNotPresent",
                    "args": ["-v=1"], "env": env,
                    "ports": [{"name": "metrics", "containerPort": 8443, "protocol": "TCP"}],
                    "resources": {"limits": {"cpu": "750m", "memory": "600M"},
                                  "requests": {"cpu": "100m", "memory": "60M"}},
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "volumeMounts": [{"name": "cdi-data-vol", "mountPath": "/data"}],
                    "securityContext": {"allowPrivilegeEscalation": False,
                                        "capabilities": {"drop": ["ALL"]},
                                        "runAsNonRoot": True, "runAsUser": QEMU_SUBGID,
                                        "seccompProfile": {"type": "RuntimeDefault"}}}],
                    "volumes": [{"name": "cdi-data-vol", "persistentVolumeClaim": {
                        "claimName": md["name"], "readOnly": False}}],
                    "restartPolicy": "OnFailure", "enableServiceLinks": False,
                    "securityContext": {"fsGroup": QEMU_SUBGID,
                                        "seccompProfile": {"type": "RuntimeDefault"}}},
                "status": {"phase": "Pending"}}

    def _pvc_from_pod(self, pvc, pod):
        """updatePvcFromPod and setAnnotationsFromPodWithPrefix (import-controller.go,
        controller/util.go); the progress scrape (common/util.go)."""
        md = pvc["metadata"]
        n = util.deep(pvc)
        ann = n["metadata"]["annotations"]
        puid = pod["metadata"]["uid"]
        sts = dig(pod, "status", "containerStatuses") or []
        phase = dig(pod, "status", "phase") or "Pending"
        term_msg = None
        if sts:
            s0 = sts[0]
            if int(s0.get("restartCount") or 0) >= int(ann.get(ANN_RESTARTS) or 0):
                ann[ANN_RESTARTS] = str(int(s0.get("restartCount") or 0))
            state = s0.get("state") or {}
            if all("running" in (s.get("state") or {}) for s in sts):
                ann[ANN_RUNNING], ann[ANN_RUNNING_MSG], ann[ANN_RUNNING_REASON] = \
                    "true", "", "Pod is running"
            else:
                ann[ANN_RUNNING] = "false"
                w = state.get("waiting") or {}
                last = dig(s0, "lastState", "terminated") or {}
                term = state.get("terminated") or {}
                if w.get("reason") in ("ImagePullBackOff", "ErrImagePull", "InvalidImageName"):
                    ann[ANN_RUNNING_MSG] = f"Unable to pull image: {s0.get('image')}"
                    ann[ANN_RUNNING_REASON] = "ImagePullFailed"
                elif w and w.get("reason") != "CrashLoopBackOff":
                    ann[ANN_RUNNING_MSG] = w.get("message") or ""
                    ann[ANN_RUNNING_REASON] = w.get("reason") or ""
                else:
                    # a container that ended: its termination message (JSON from
                    # the importer), the state the kubelet reports, or the one it
                    # just left for the back-off
                    t = term or last
                    if t:
                        term_msg = _termination(t.get("message"))
                        ann[ANN_RUNNING_MSG] = term_msg
                        ann[ANN_RUNNING_REASON] = "Completed" if t.get("exitCode") == 0 \
                            else t.get("reason") or "Error"
                        if t.get("exitCode"):
                            self.api.event(pvc, "Warning", "ErrImportFailed", term_msg,
                                           "import-controller")
        ann[ANN_IMPORT_POD] = pod["metadata"]["name"]
        ann[ANN_POD_PHASE] = phase
        ann[ANN_SCHEDULABLE] = "true"
        if phase == "Pending" and any(c.get("type") == "PodScheduled" and
                                      c.get("reason") == "Unschedulable"
                                      for c in dig(pod, "status", "conditions") or []):
            ann[ANN_SCHEDULABLE] = "false"
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in dig(pod, "status", "conditions") or [])
        ann[ANN_POD_READY] = "true" if ready else "false"
        if phase == "Running" and not self.pods_run:
            # --guest none: no importer process; the import lasts dv_import
            if self.ready(puid, "import", "dv_import"):
                ann.update({ANN_POD_PHASE: "Succeeded", ANN_RUNNING: "false",
                            ANN_RUNNING_REASON: "Completed", ANN_RUNNING_MSG: "Import Complete",
                            ANN_POD_READY: "false"})
        elif phase == "Running" and self.net is not None and self.net.started:
            # the controller re-reads a running import every 2 s (RequeueAfter),
            # fetching its progress from the pod's metrics endpoint
            ip = dig(pod, "status", "podIP")
            if ip and time.monotonic() >= self.due.get((puid, "scrape"), 0):
                owners = md.get("ownerReferences") or []
                owner = owners[0]["uid"] if len(owners) == 1 else md["uid"]
                # the metric's ownerUID: the DataVolume's (legacy), the target
                # claim's (populator: the prime claim's one owner)
                self.net.scrape(puid, ip, owner)
                self.due[(puid, "scrape")] = time.monotonic() + self.profile.delay("cdi_requeue")
        if n != pvc:
            self.api.sys_update("persistentvolumeclaims", n)
        if ann.get(ANN_POD_PHASE) == "Succeeded":
            self.api.event(pvc, "Normal", "ImportSucceeded", "Import Successful",
                           "import-controller")
            if not pod["metadata"].get("deletionTimestamp"):
                self.api.sys_delete("pods", pod)     # ShouldDeletePod: no retain annotation
            self.scraped.pop(puid, None)

    def _log_once(self, key, msg):
        if key not in self.logged:
            self.logged.add(key)
            self.sim.log(msg)

    # ------------------------------------- clones, blank (timed, no pod)
    def timed(self, dv, kind, endpoint):
        md = dv["metadata"]
        uid = md["uid"]
        ns, name = md.get("namespace"), md["name"]
        st = dv.get("status") or {}
        phase = st.get("phase") or ""
        pvc = self.store.get("persistentvolumeclaims", ns, name)
        spec = dv.get("spec") or {}
        if pvc is None and phase in ("", "Pending"):
            pspec = self._claim_spec(dv)
            if pspec is None:
                return
            ann = dict(md.get("annotations") or {})
            ann.update({ANN_CONTENT: spec.get("contentType", "kubevirt"),
                        ANN_POD_PHASE: "Pending", ANN_RESTARTS: "0", ANN_PREALLOC: "false",
                        ANN_FOR_DV: uid})
            if kind == "pvc":
                ann["k8s.io/CloneRequest"] = endpoint
            labels = {"app": "containerized-data-importer"}
            labels.update(md.get("labels") or {})
            labels.update({"app.kubernetes.io/component": "storage",
                           "app.kubernetes.io/managed-by": "cdi-controller"})
            new_pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "metadata": {"name": name, "namespace": ns, "annotations": ann,
                                    "labels": labels, "ownerReferences": [owner_ref(dv)],
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
                self._dv_status(dv, "CloneScheduled" if kind == "pvc" else "Pending", "N/A")
            return
        if phase == "CloneScheduled":
            if self.ready(uid, "importer-start", "schedule"):
                self._dv_status(dv, "CloneInProgress", "0.00%")
                self._pvc_ann(pvc, {ANN_POD_PHASE: "Running", ANN_RUNNING: "true",
                                    ANN_RUNNING_REASON: "Pod is running", ANN_POD_READY: "true"})
            return
        if phase == "CloneInProgress":
            k = (uid, "import")
            if k not in self.due:
                d = self.profile.delay("dv_import") / 3
                self.due[k] = time.monotonic() + d
                self.due[(uid, "import-start")] = time.monotonic()
                self.due[(uid, "import-len")] = d
            t_end = self.due[k]
            now = time.monotonic()
            if now >= t_end:
                self._dv_status(dv, "Succeeded", "100.0%", running=False)
                self._pvc_ann(pvc, {ANN_POD_PHASE: "Succeeded", ANN_RUNNING: "false",
                                    ANN_RUNNING_REASON: "Completed",
                                    ANN_RUNNING_MSG: "Clone Complete", ANN_POD_READY: "false"})
                return
            start = self.due[(uid, "import-start")]
            length = max(self.due[(uid, "import-len")], 1e-6)
            pct = min(99.99, 100.0 * (now - start) / length)
            step = int(pct // 10) * 10
            if step and float((st.get("progress") or "0%").rstrip("%") or 0) < step:
                self._dv_status(dv, phase, f"{step:.2f}%")
            self.due[(uid, "import-tick")] = min(start + length * (step + 10) / 100, t_end)

    # ------------------------------------------------------------ status
    def _dv_status(self, dv, phase, progress, bound=True, running=True, restarts=None):
        cur = self.store.get("datavolumes", dv["metadata"].get("namespace"),
                             dv["metadata"]["name"]) or dv
        n = util.deep(cur)
        st = n.setdefault("status", {})
        st["phase"] = phase
        st["progress"] = progress
        st["claimName"] = n["metadata"]["name"]
        st["restartCount"] = restarts if restarts is not None else st.get("restartCount", 0)
        conds = st.get("conditions") or []
        name = n["metadata"]["name"]
        conds = set_condition(conds, cond("Bound", "True" if bound else "False",
                                          "Bound" if bound else "Pending",
                                          f"PVC {name} Bound" if bound else f"PVC {name} Pending"))
        done = phase == "Succeeded"
        if isinstance(running, dict):
            is_running, reason, msg = running["running"], running["reason"], running["message"]
        else:
            is_running, reason, msg = running and bound and "Progress" in phase, "", ""
        conds = set_condition(conds, cond("Ready", "True" if done else "False",
                                          "" if done else "TransferRunning" if is_running else ""))
        keep = next((c for c in conds if c.get("type") == "Running" and
                     c.get("reason") == "FailedMount"), None)
        if keep is None or done or is_running:
            conds = set_condition(conds, cond(
                "Running", "True" if (is_running and not done) else "False",
                "Completed" if done else reason, "" if done else msg))
        st["conditions"] = conds
        self.api.sys_update("datavolumes", n)

    def _pvc_ann(self, pvc, ann):
        cur = pvc["metadata"].get("annotations") or {}
        if all(cur.get(k) == v for k, v in ann.items()):
            return
        n = util.deep(pvc)
        n["metadata"].setdefault("annotations", {}).update(ann)
        self.api.sys_update("persistentvolumeclaims", n)


def _termination(msg):
    """The importer's termination message: JSON {"message": ...} (CDI's
    common.TerminationMessage), else the plain text."""
    if not msg:
        return ""
    try:
        o = json.loads(msg)
        if isinstance(o, dict) and isinstance(o.get("message"), str):
            return o["message"]
    except ValueError:
        pass
    return msg.strip()
