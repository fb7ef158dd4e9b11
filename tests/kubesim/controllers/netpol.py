"""NetworkPolicy enforcement (the CNI's policy agent): after every pass,
the `networking.k8s.io/v1` NetworkPolicies and the pods on the pod network
become the `egress` and `ingress` chains of podnet's `inet ksim_pol` table,
applied off the store lock by podnet's applier thread.

Semantics, as the Kubernetes documentation defines them:
- a pod selected by a policy whose policyTypes has Ingress (Egress) is
  isolated for ingress (egress); policyTypes defaults to Ingress, plus
  Egress when the spec has an `egress` section;
- an isolated pod admits what at least one rule of at least one policy that
  selects it allows (policies add up); a connection needs both the source's
  egress and the destination's ingress to allow it;
- a rule's peers (`from`/`to`: missing or empty means everyone) are
  `podSelector` (pods of the policy's namespace), `namespaceSelector` (all
  pods of the matching namespaces), both (the matching pods of the matching
  namespaces) or `ipBlock` (`cidr` less `except`, applied to any address,
  pods' included); `ports` (missing or empty: all) are protocol (default
  TCP), port (a number, or for ingress a name of the selected pod's container
  ports) and `endPort`;
- traffic from the pod's node (the host, podnet.node_ip) is always allowed;
  replies of an allowed connection are allowed (conntrack).

Choices where Kubernetes leaves them to the implementation: a denied
packet is dropped, as Calico (iptablesFilterDenyAction, default DROP) and
Cilium ("Policy denied" drops) do, so a client waits out its own timeout
(podnet.PodNetwork.DENY); connections established before a policy started to deny them go on
(conntrack), new ones are denied; a named port in an egress rule matches
nothing (stricter than the CNIs, which resolve it on the destination pod)."""
import ipaddress
import threading

from labelsel import match_label_selector_obj as matches
from util import dig

from .base import Controller

def _chain_name(kind, ip):
    return f"{kind}_{ip.replace('.', '_')}"


class NetworkPolicyController(Controller):
    name = "netpol"

    def __init__(self, mgr):
        super().__init__(mgr)
        self.podnet = self.sim.podnet
        self.last = None
        self.pending = None
        self.cv = threading.Condition()
        self.node_is_pod = False
        self.known = set()
        if self.podnet is not None:
            self.podnet.policed = True
            threading.Thread(target=self._applier, name="netpol-apply", daemon=True).start()

    def reconcile(self, store):
        if self.podnet is None:
            return
        text = (self.render(store), self.node_is_pod, frozenset(self.known))
        if text != self.last:
            self.last = text
            with self.cv:
                self.pending = text
                self.cv.notify()

    def _applier(self):
        while True:
            with self.cv:
                while self.pending is None:
                    self.cv.wait()
                text, self.pending = self.pending, None
            try:
                self.podnet.set_policy(*text)
            except Exception as e:  # noqa: BLE001
                self.sim.log(f"netpol: {e}")

    # ------------------------------------------------------------ rendering
    def render(self, store):
        net = self.podnet.net
        pods = []
        for p in store.list("pods"):
            ip = dig(p, "status", "podIP")
            if not ip or dig(p, "status", "phase") in ("Succeeded", "Failed"):
                continue
            try:
                if ipaddress.ip_address(ip) not in net:
                    continue
            except ValueError:
                continue
            pods.append((p, ip))
        self.known = {ip for _, ip in pods}
        self.node_is_pod = any(ip == self.podnet.node_ip for _, ip in pods)
        nslabels = {n["metadata"]["name"]: n["metadata"].get("labels") or {}
                    for n in store.list("namespaces")}
        ingress, egress = {}, {}       # ip -> [rule lines]
        for pol in sorted(store.list("networkpolicies"),
                          key=lambda o: (o["metadata"].get("namespace"), o["metadata"]["name"])):
            ns = pol["metadata"].get("namespace")
            spec = pol.get("spec") or {}
            types = spec.get("policyTypes") or (["Ingress"] + (["Egress"] if "egress" in spec
                                                                else []))
            sel = spec.get("podSelector") or {}
            for p, ip in pods:
                if p["metadata"].get("namespace") != ns or \
                        not matches(sel, p["metadata"].get("labels")):
                    continue
                if "Ingress" in types:
                    ingress.setdefault(ip, []).extend(
                        self._rules(spec.get("ingress") or [], "from", "saddr", ns, pods,
                                    nslabels, p))
                if "Egress" in types:
                    egress.setdefault(ip, []).extend(
                        self._rules(spec.get("egress") or [], "to", "daddr", ns, pods,
                                    nslabels, None))
        out = []
        deny = self.podnet.DENY
        for kind, table, match in (("eg", egress, "saddr"), ("in", ingress, "daddr")):
            top = "egress" if kind == "eg" else "ingress"
            out.append(f"  chain {top} {{")
            for ip in sorted(table):
                out.append(f"    ip {match} {ip} jump {_chain_name(kind, ip)}")
            out.append("  }")
            for ip, lines in sorted(table.items()):
                body = "".join(f"    {ln}\n" for ln in lines)
                out.append(f"  chain {_chain_name(kind, ip)} {{\n{body}{deny}  }}")
        return "\n".join(out)

    def _rules(self, rules, key, addr, ns, pods, nslabels, selected):
        lines = []
        for r in rules:
            peers = r.get(key)
            if peers:
                ms = []
                for peer in peers:
                    ms += self._peer(peer, addr, ns, pods, nslabels)
            else:
                ms = [""]
            ports = r.get("ports")
            if ports:
                pm = [m for m in (self._port(pp, selected) for pp in ports) if m is not None]
            else:
                pm = [""]
            for a in ms:
                for m in pm:
                    lines.append(" ".join(x for x in (a, m, "return") if x))
        return lines

    @staticmethod
    def _peer(peer, addr, ns, pods, nslabels):
        blk = peer.get("ipBlock")
        if blk:
            # pods are IPv4 only: an IPv6 block matches nothing; host bits are masked
            try:
                cidr = ipaddress.ip_network(blk["cidr"], strict=False)
                exc = [ipaddress.ip_network(e, strict=False) for e in blk.get("except") or []]
            except (KeyError, ValueError):
                return []
            if cidr.version != 4:
                return []
            m = f"ip {addr} {cidr}"
            exc = [str(e) for e in exc if e.version == 4]
            if exc:
                m += f" ip {addr} != {{ {', '.join(exc)} }}"
            return [m]
        psel, nsel = peer.get("podSelector"), peer.get("namespaceSelector")
        ips = []
        for p, ip in pods:
            pns = p["metadata"].get("namespace")
            if nsel is not None:
                if not matches(nsel, nslabels.get(pns, {})):
                    continue
            elif pns != ns:
                continue
            if psel is not None and not matches(psel, p["metadata"].get("labels")):
                continue
            ips.append(ip)
        if not ips:
            return []
        return [f"ip {addr} {{ {', '.join(sorted(set(ips)))} }}"]

    @staticmethod
    def _port(pp, selected):
        proto = (pp.get("protocol") or "TCP").lower()
        port, end = pp.get("port"), pp.get("endPort")
        if port is None:
            return f"meta l4proto {proto}"
        if isinstance(port, str):
            if selected is None:
                return None
            nums = sorted({cp.get("containerPort") for c in dig(selected, "spec", "containers")
                           or [] for cp in c.get("ports") or []
                           if cp.get("name") == port and
                           (cp.get("protocol") or "TCP").lower() == proto})
            if not nums:
                return None
            return f"meta l4proto {proto} th dport {{ {', '.join(map(str, nums))} }}"
        if end:
            return f"meta l4proto {proto} th dport {port}-{end}"
        return f"meta l4proto {proto} th dport {port}"
