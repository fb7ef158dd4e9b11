"""The default scheduler: an unbound pod goes, after the profile's schedule
delay, to the node with the most free memory that matches its nodeSelector
and has room for its memory and devices.kubevirt.io/kvm requests; unbound or
missing PVCs, or no fit, leave it Pending with PodScheduled=False
(Unschedulable) and a FailedScheduling event, retried later."""
import time

import util
from util import dig, parse_quantity

from .base import KVM_DEVICE, Controller, cond, pod_mem, pod_request, set_condition
from .kubelet import container_statuses, pod_status


class Scheduler(Controller):
    name = "default-scheduler"

    def reconcile(self, store):
        self._free = None          # per pass: the nodes' free resources
        for pod in store.list("pods"):
            if pod["metadata"].get("deletionTimestamp") or dig(pod, "spec", "nodeName"):
                continue
            if (dig(pod, "status", "phase") or "Pending") in ("Succeeded", "Failed"):
                continue
            self.pod(pod)

    def pod(self, pod):
        md = pod["metadata"]
        uid = md["uid"]
        ns = md.get("namespace")
        if not self.ready(uid, "schedule", "schedule"):
            return
        target, why = self._schedule(pod)
        if target is None:
            pod_status(self.api, pod, phase="Pending", conditions=[
                cond("PodScheduled", "False", "Unschedulable", why)])
            self.api.event(pod, "Warning", "FailedScheduling", why, "default-scheduler")
            # retry later
            self.due[(uid, "schedule")] = time.monotonic() + self.profile.delay("attach_retry") * 2
            return
        n = util.deep(pod)
        n["spec"]["nodeName"] = target
        n["status"]["conditions"] = set_condition(n["status"].get("conditions"),
                                                  cond("PodScheduled", "True"))
        node_obj = self.store.get("nodes", "", target)
        n["status"]["hostIP"] = dig(node_obj, "status", "addresses", 0, "address") or "127.0.0.1"
        n["status"]["containerStatuses"] = container_statuses(
            pod, {"waiting": {"reason": "ContainerCreating"}})
        n["status"]["startTime"] = util.now_rfc3339()
        self.api.sys_update("pods", n)
        self.api.event(pod, "Normal", "Scheduled",
                       f"Successfully assigned {ns}/{md['name']} to {target}", "default-scheduler")

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

