"""The default scheduler (kube-scheduler's default profile, the parts a lab
cluster meets; citations in CONFORMANCE.md, "Networking"). An unbound pod,
after the profile's schedule delay, is filtered against every node, in the
default plugins' order, each node failing at its first filter:

- NodeUnschedulable: `spec.unschedulable` ("node(s) were unschedulable");
- NodeAffinity: `nodeSelector` and required `nodeAffinity` terms ("node(s)
  didn't match Pod's node affinity/selector");
- NodeResourcesFit: memory, cpu, devices.kubevirt.io/kvm and the pod count
  against allocatable minus what the node's pods request ("Insufficient
  memory", "Insufficient cpu", "Insufficient devices.kubevirt.io/kvm", "Too
  many pods");
- InterPodAffinity: required pod affinity (a node whose topology domain
  holds a pod matching every term; the first pod of a group whose terms
  match its own labels may go anywhere while no pod matches yet: "node(s)
  didn't match pod affinity rules"), required anti-affinity, and the
  existing pods' required anti-affinity.

The nodes that pass are scored like NodeResourcesFit's LeastAllocated
strategy (cpu and memory, weight 1 each: (allocatable - requested with this
pod) * 100 / allocatable, averaged; containers without requests count 100m
CPU and 200 MiB); the best score wins, ties to the first node by name (upstream picks
one of the best at random). So pods spread over the nodes. Unbound or missing
PVCs, or no fit, leave the pod Pending with PodScheduled=False
(Unschedulable) and a FailedScheduling event, retried later."""
import time

import labelsel
import util
from util import dig, parse_quantity

from .base import KVM_DEVICE, Controller, cond, pod_request, set_condition
from .kubelet import container_statuses, pod_status

MAX_NODE_SCORE = 100
DEFAULT_MILLI_CPU = 100                  # schedutil.DefaultMilliCPURequest
DEFAULT_MEMORY = 200 * 1024 * 1024       # schedutil.DefaultMemoryRequest
R_AFFINITY = "node(s) didn't match pod affinity rules"
R_ANTI = "node(s) didn't match pod anti-affinity rules"
R_EXISTING_ANTI = "node(s) didn't satisfy existing pods anti-affinity rules"
R_SELECTOR = "node(s) didn't match Pod's node affinity/selector"
# UnschedulableAndUnresolvable: preemption cannot help (the rest: no victims)
UNRESOLVABLE = {R_AFFINITY, R_SELECTOR, "node(s) were unschedulable"}


def _milli_cpu(pod):
    total = 0
    for c in dig(pod, "spec", "containers") or []:
        q = dig(c, "resources", "requests", "cpu")
        if q is not None:
            try:
                total += int(parse_quantity(q) * 1000)
            except ValueError:
                pass
    return total


def _non_zero(pod):
    """(milli-CPU, memory) for scoring: each container without a request
    counts schedutil's defaults (GetNonzeroRequests)."""
    cpu = mem = 0
    for c in dig(pod, "spec", "containers") or []:
        req = dig(c, "resources", "requests") or {}
        try:
            cpu += int(parse_quantity(req["cpu"]) * 1000) if "cpu" in req else DEFAULT_MILLI_CPU
        except ValueError:
            cpu += DEFAULT_MILLI_CPU
        try:
            mem += int(parse_quantity(req["memory"])) if "memory" in req else DEFAULT_MEMORY
        except ValueError:
            mem += DEFAULT_MEMORY
    return cpu, mem


def _quantity(node, key, scale=1):
    try:
        return int(parse_quantity(dig(node, "status", "allocatable", key) or "0") * scale)
    except ValueError:
        return 0


def _terms(pod, kind, key="requiredDuringSchedulingIgnoredDuringExecution"):
    return dig(pod, "spec", "affinity", kind, key) or []


class Scheduler(Controller):
    name = "default-scheduler"

    def reconcile(self, store):
        self._snap = None          # per pass: the nodes, their requests, the bound pods
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

    # --- the snapshot (kube-scheduler's cache: pods it bound count at once) -------------
    def _snapshot(self):
        nodes = {n["metadata"]["name"]: n for n in self.store.list("nodes")}
        used = {n: {"memory": 0, "cpu": 0, KVM_DEVICE: 0, "pods": 0, "score_memory": 0,
                    "score_cpu": 0} for n in nodes}
        bound = []                 # (pod, node) of every pod the scheduler's cache holds
        for p in self.store.list("pods"):
            nn = dig(p, "spec", "nodeName")
            # its informer leaves out Succeeded and Failed pods
            if nn in used and dig(p, "status", "phase") not in ("Succeeded", "Failed"):
                self._add(used[nn], p)
                bound.append((p, nn))
        return {"nodes": nodes, "used": used, "bound": bound}

    @staticmethod
    def _add(u, pod):
        mem, cpu = pod_request(pod, "memory"), _milli_cpu(pod)
        u["memory"] += mem
        u["cpu"] += cpu
        u[KVM_DEVICE] += pod_request(pod, KVM_DEVICE)
        u["pods"] += 1
        # scoring counts a container without requests as 100m / 200Mi
        nz_cpu, nz_mem = _non_zero(pod)
        u["score_memory"] += nz_mem
        u["score_cpu"] += nz_cpu

    # --- filters --------------------------------------------------------------------------
    def _node_affinity_ok(self, pod, node):
        labels = node["metadata"].get("labels") or {}
        if any(labels.get(k) != v for k, v in (dig(pod, "spec", "nodeSelector") or {}).items()):
            return False
        req = dig(pod, "spec", "affinity", "nodeAffinity",
                  "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
        if req:
            # terms are ORed, the expressions of a term ANDed
            return any(labelsel.match_label_selector_obj(
                {"matchExpressions": [e for e in t.get("matchExpressions") or []
                                      if e.get("operator") in ("In", "NotIn", "Exists",
                                                               "DoesNotExist")]}, labels)
                and self._gt_lt_ok(t, labels) for t in req)
        return True

    @staticmethod
    def _gt_lt_ok(term, labels):
        for e in term.get("matchExpressions") or []:
            op = e.get("operator")
            if op not in ("Gt", "Lt"):
                continue
            try:
                have, want = int(labels[e["key"]]), int((e.get("values") or [""])[0])
            except (KeyError, ValueError):
                return False
            if (op == "Gt" and not have > want) or (op == "Lt" and not have < want):
                return False
        return True

    def _term_namespaces(self, pod, term):
        """The namespaces a pod affinity term looks at: its `namespaces` and
        those its `namespaceSelector` selects ({} all); neither: the pod's."""
        names = set(term.get("namespaces") or [])
        sel = term.get("namespaceSelector")
        if sel is not None:
            if not sel.get("matchLabels") and not sel.get("matchExpressions"):
                return None                # every namespace
            for nso in self.store.list("namespaces"):
                if labelsel.match_label_selector_obj(sel, nso["metadata"].get("labels")):
                    names.add(nso["metadata"]["name"])
        elif not names:
            names.add(pod["metadata"].get("namespace"))
        return names

    def _matches(self, owner, term, other):
        """Does pod `other` match term (of pod `owner`): namespace and selector."""
        nss = self._term_namespaces(owner, term)
        if nss is not None and other["metadata"].get("namespace") not in nss:
            return False
        sel = term.get("labelSelector")
        # a nil selector matches nothing (metav1.LabelSelectorAsSelector)
        return sel is not None and labelsel.match_label_selector_obj(
            sel, other["metadata"].get("labels"))

    def _affinity_filter(self, pod, snap):
        """InterPodAffinity's Filter as a function of the node: None (passes)
        or the reason."""
        nodes, bound = snap["nodes"], snap["bound"]
        aff = _terms(pod, "podAffinity")
        anti = _terms(pod, "podAntiAffinity")
        # PreFilter: topology pairs of the pods matching ALL affinity terms,
        # of those matching each anti-affinity term, and of the existing pods
        # whose anti-affinity terms match this pod
        aff_counts, anti_counts, existing_anti = {}, {}, {}
        for other, nn in bound:
            labels = nodes[nn]["metadata"].get("labels") or {}
            if aff and all(self._matches(pod, t, other) for t in aff):
                for t in aff:
                    if t.get("topologyKey") in labels:
                        k = (t["topologyKey"], labels[t["topologyKey"]])
                        aff_counts[k] = aff_counts.get(k, 0) + 1
            for t in anti:
                if self._matches(pod, t, other) and t.get("topologyKey") in labels:
                    k = (t["topologyKey"], labels[t["topologyKey"]])
                    anti_counts[k] = anti_counts.get(k, 0) + 1
            for t in _terms(other, "podAntiAffinity"):
                if self._matches(other, t, pod) and t.get("topologyKey") in labels:
                    k = (t["topologyKey"], labels[t["topologyKey"]])
                    existing_anti[k] = existing_anti.get(k, 0) + 1
        self_match = bool(aff) and all(self._matches(pod, t, pod) for t in aff)

        def check(node):
            labels = node["metadata"].get("labels") or {}
            if aff:
                exist = True
                for t in aff:
                    if t.get("topologyKey") not in labels:
                        return R_AFFINITY      # every topology label must be there
                    if aff_counts.get((t["topologyKey"], labels[t["topologyKey"]]), 0) <= 0:
                        exist = False
                # the first pod of a group with affinity to itself
                if not exist and not (not aff_counts and self_match):
                    return R_AFFINITY
            for t in anti:
                k = t.get("topologyKey")
                if k in labels and anti_counts.get((k, labels[k]), 0) > 0:
                    return R_ANTI
            if any(existing_anti.get((k, v), 0) > 0 for k, v in labels.items()):
                return R_EXISTING_ANTI
            return None
        return check

    def _schedule(self, pod):
        if self._snap is None:
            self._snap = self._snapshot()
        snap = self._snap
        nodes, used = snap["nodes"], snap["used"]
        need = {"memory": pod_request(pod, "memory"), "cpu": _milli_cpu(pod),
                KVM_DEVICE: pod_request(pod, KVM_DEVICE)}
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
        affinity = self._affinity_filter(pod, snap)
        fits, reasons = [], {}

        def fail(r):
            reasons[r] = reasons.get(r, 0) + 1
        for n, node in nodes.items():
            u = used[n]
            if dig(node, "spec", "unschedulable"):
                fail("node(s) were unschedulable")
                continue
            if not self._node_affinity_ok(pod, node):
                fail(R_SELECTOR)
                continue
            if u["pods"] + 1 > _quantity(node, "pods"):
                fail("Too many pods")
                continue
            short = [r for r, alloc in (("cpu", _quantity(node, "cpu", 1000)),
                                        ("memory", _quantity(node, "memory")),
                                        (KVM_DEVICE, _quantity(node, KVM_DEVICE)))
                     if need[r] and u[r] + need[r] > alloc]
            if short:
                for r in short:      # NodeResourcesFit names each resource short
                    fail(f"Insufficient {r}")
                continue
            why = affinity(node)
            if why:
                fail(why)
                continue
            fits.append(n)
        if not fits:
            parts = ", ".join(f"{c} {r}" for r, c in sorted(reasons.items()))
            unres = sum(c for r, c in reasons.items() if r in UNRESOLVABLE)
            pre = []
            if total - unres:
                pre.append(f"{total - unres} No preemption victims found for incoming pod")
            if unres:
                pre.append(f"{unres} Preemption is not helpful for scheduling")
            return None, (f"0/{total} nodes are available: {parts}. preemption: 0/{total} nodes "
                          f"are available: {', '.join(pre)}.")
        # max() keeps the first of equals: ties go to the first node by name
        best = max(sorted(fits), key=lambda n: self._score(pod, nodes[n], used[n]))
        self._add(used[best], pod)
        snap["bound"].append((pod, best))
        return best, None

    @staticmethod
    def _score(pod, node, u):
        """NodeResourcesFit, LeastAllocated, cpu and memory at weight 1."""
        total, weights = 0, 0
        nz_cpu, nz_mem = _non_zero(pod)
        for alloc, req in ((_quantity(node, "cpu", 1000), u["score_cpu"] + nz_cpu),
                           (_quantity(node, "memory"), u["score_memory"] + nz_mem)):
            if alloc == 0:
                continue
            total += 0 if req > alloc else (alloc - req) * MAX_NODE_SCORE // alloc
            weights += 1
        return total // weights if weights else 0
