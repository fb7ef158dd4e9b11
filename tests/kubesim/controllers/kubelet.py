"""The kubelet of every simulated node: a pod bound to a node needs its
Secrets (FailedMount until they exist), its PVCs bound and attached (an RWO
claim running elsewhere: FailedAttachVolume, Multi-Attach), its images
(pulled once per node, then cached; an image named *doesnotexist* fails with
ErrImagePull/ImagePullBackOff), then its containers start (Running, the pod
IP). A pod being deleted goes once the guest behind it is down and the
profile's pod_terminate has passed; one never bound goes at once."""
import time

import multus
import util
from util import dig

from .base import FAILING_IMAGE, Controller, cond, set_condition
from .kubevirt.common import LAUNCHER_IMAGE
from .pods import PodContainers, is_launcher

PRELOADED = (LAUNCHER_IMAGE,)      # images every node already has


def pod_status(api, pod, **kw):
    """Write the pod's status: conditions= to set, other fields as given."""
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
        return api.sys_update("pods", n)
    return pod


def container_statuses(pod, state, ready=False, started=False):
    out = []
    for c in dig(pod, "spec", "containers") or []:
        out.append({"name": c["name"], "image": c.get("image"), "imageID": "",
                    "ready": ready, "restartCount": 0, "started": started, "state": state,
                    "lastState": {}})
    return out


class Kubelet(Controller):
    name = "kubelet"

    def __init__(self, mgr):
        super().__init__(mgr)
        self.runtime = mgr.runtime
        self.ipam = mgr.ipam
        self.ips = mgr.ipam.ips
        self.images = {}           # node -> set(images pulled)
        self.pulling = {}          # (node, image) -> monotonic time the pull completes
        self.mgr = mgr
        self.containers = PodContainers(self)   # pods that are not launchers (pods.py)

    def reconcile(self, store):
        for pod in store.list("pods"):
            md = pod["metadata"]
            if md.get("deletionTimestamp"):
                self.terminate(pod)
            elif dig(pod, "spec", "nodeName") and \
                    (dig(pod, "status", "phase") or "Pending") == "Pending":
                self.start(pod, pod["spec"]["nodeName"])
            elif self.containers.enabled and not is_launcher(pod) and \
                    dig(pod, "status", "phase") == "Running":
                if not self.containers.crashed(pod):
                    self.containers.running(pod)

    def _pod_status(self, pod, **kw):
        return pod_status(self.api, pod, **kw)

    def _container_statuses(self, pod, state, ready=False, started=False):
        return container_statuses(pod, state, ready, started)

    def terminate(self, pod):
        md = pod["metadata"]
        uid = md["uid"]
        if not dig(pod, "spec", "nodeName"):
            self.store.remove("pods", pod)
            return
        if self.containers.enabled and not is_launcher(pod) and self.containers.terminate(pod):
            return
        # the VMI's guest must be down before the launcher goes away
        owner = next((o for o in md.get("ownerReferences") or []
                      if o.get("kind") == "VirtualMachineInstance"), None)
        if owner and self.runtime.state.get(owner.get("uid")) in ("starting", "running",
                                                                  "stopping"):
            if self.runtime.state.get(owner.get("uid")) != "stopping":
                self.runtime.stop(owner["uid"])
            return
        if self.ready(uid, "terminate", "pod_terminate"):
            self.store.remove("pods", pod)

    def start(self, pod, node):
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
            if set(modes) == {"ReadOnlyMany"} and not dig(v, "persistentVolumeClaim", "readOnly"):
                # a ReadOnlyMany claim mounted writable: the CSI driver refuses
                k = (uid, "mount-retry")
                if self.due.get(k, 0) <= time.monotonic():
                    vol = dig(pvc, "spec", "volumeName") or f"pvc-{pvc['metadata']['uid']}"
                    self.api.event(pod, "Warning", "FailedMount",
                                   f'MountVolume.SetUp failed for volume "{vol}" : claim "{c}" '
                                   "is ReadOnlyMany and the volume is not mounted read-only",
                                   "kubelet")
                    self.due[k] = time.monotonic() + retry
                return
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
        # the pod sandbox: CNI ADD through Multus, every attachment's NAD must exist
        attached = self._multus(pod, retry)
        if attached is None:
            return
        # images
        for c in dig(pod, "spec", "containers") or []:
            img = c.get("image") or ""
            if img in PRELOADED:
                continue
            if FAILING_IMAGE in img:
                k = (uid, "pull-retry")
                if self.due.get(k, 0) <= time.monotonic():
                    first = not any(
                        dig(st, "state", "waiting", "reason") in ("ErrImagePull",
                                                                  "ImagePullBackOff")
                        for st in dig(pod, "status", "containerStatuses") or []
                        if st.get("image") == img)
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
        if self.containers.enabled and not is_launcher(pod):
            self.containers.pending(pod)
            return
        vmi_uid = md.get("labels", {}).get("kubevirt.io/created-by") if is_launcher(pod) else None
        ip = self.ips.get(vmi_uid) if vmi_uid else None
        if ip is None:
            ip = self.ipam.alloc()
            if vmi_uid:
                self.ips[vmi_uid] = ip
        if multus.pod_networks(pod):
            n = util.deep(pod)
            mac = "0a:58:%02x:%02x:%02x:%02x" % tuple(bytes.fromhex(uid.replace("-", "")[:8]))
            n["metadata"].setdefault("annotations", {})[multus.STATUS_ANNOTATION] = \
                multus.network_status(ip, mac, attached)
            pod = self.api.sys_update("pods", n) or pod
        self._pod_status(pod, phase="Running", podIP=ip, podIPs=[{"ip": ip}],
                         containerStatuses=self._container_statuses(
                             pod, {"running": {"startedAt": util.now_rfc3339()}}, True, True),
                         conditions=[cond("Initialized", "True"), cond("ContainersReady", "True"),
                                     cond("Ready", "True")])
        self.api.event(pod, "Normal", "Started", "Started container compute", "kubelet")

    def _multus(self, pod, retry):
        """The pod's secondary attachments ([] without any), or None while the
        sandbox cannot be created (FailedCreatePodSandBox, retried)."""
        md = pod["metadata"]
        out = []
        for i, e in enumerate(multus.pod_networks(pod)):
            ns = e.get("namespace") or md.get("namespace")
            name = e.get("name") or ""
            nad = self.store.get("network-attachment-definitions", ns, name)
            why = None
            if nad is None:
                why = multus.missing_error(pod, name, ns)
            else:
                conf, err = multus.cni_config(nad)
                err = err or multus.plugin_error(conf, nad)
                if err:
                    why = (f"Failed to create pod sandbox: rpc error: code = Unknown desc = "
                           f"failed to create pod network sandbox: [{md.get('namespace')}/"
                           f"{md['name']}:{name}]: {err}")
            if why:
                k = (md["uid"], "sandbox-retry")
                if self.due.get(k, 0) <= time.monotonic():
                    self.api.event(pod, "Warning", "FailedCreatePodSandBox", why[:1000],
                                   "kubelet")
                    self._pod_status(pod, containerStatuses=self._container_statuses(
                        pod, {"waiting": {"reason": "ContainerCreating"}}))
                    self.due[k] = time.monotonic() + retry
                return None
            mac = e.get("mac") or "0a:58:%02x:%02x:%02x:%02x" % (
                i + 1, *bytes.fromhex(md["uid"].replace("-", "")[:6]))
            out.append({"name": f"{ns}/{name}", "interface": e.get("interface") or f"net{i + 1}",
                        "mac": mac.lower(), "ips": multus.static_ips(conf),
                        "bridge": multus.bridge_name(conf, nad), "nad_uid": nad["metadata"]["uid"]})
        return out

    def _attached_elsewhere(self, pvc, node, my_uid):
        ns, name = pvc["metadata"].get("namespace"), pvc["metadata"]["name"]
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
        return None
