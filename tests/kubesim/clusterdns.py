"""The cluster's DNS endpoints (`--dns`, default kube-dns), so that a test
can see which of them a NetworkPolicy admits:

    kube-dns   a CoreDNS Pod in kube-system labelled k8s-app=kube-dns, on the
               pod network, answering on 53/UDP and 53/TCP (kubernetes
               cluster/addons/dns/coredns/coredns.yaml.base: the Deployment
               coredns, template label k8s-app: kube-dns, ports dns 53/UDP and
               dns-tcp 53/TCP; kubeadm, EKS, GKE and AKS label it the same)
    nodelocal  NodeLocal DNSCache: a hostNetwork Pod node-local-dns in
               kube-system (k8s-app=node-local-dns) whose listener answers on
               169.254.20.10:53 (cluster/addons/dns/nodelocaldns/README.md: "a
               dedicated dummy interface with a link local ip (169.254.20.10/32
               by default)"); the address lives in a namespace of its own a
               veth away from the cluster namespace (podnet.add_local_endpoint),
               so pods reach it through their egress policy and, not being a
               pod on the pod network, no podSelector ever matches it
    openshift  OpenShift's CoreDNS: a Pod dns-default-* in openshift-dns
               labelled dns.operator.openshift.io/daemonset-dns=default,
               answering on 5353/UDP and 5353/TCP (openshift/cluster-dns-operator
               pkg/operator/controller/names.go, assets/dns/daemonset.yaml)

Not modelled: Services and kube-proxy. A pod's query to the kube-dns
Service's ClusterIP is DNAT'ed to a CoreDNS pod before the CNI's policy
sees it (so a policy matches the pod); here a client addresses the pod
itself, which is what the policy sees after DNAT. NodeLocal DNSCache in
kube-proxy iptables mode also binds the kube-dns ClusterIP on its dummy
interface (nodelocaldns.yaml: -localip LOCAL,DNS_SERVER), where no DNAT
happens: not modelled (no ClusterIPs).

Every server answers, over UDP and over TCP (two-byte length prefix, RFC
1035 4.2.2): NXDOMAIN for a name under cluster.local (no Services are
modelled), a single-label name and a reverse (in-addr.arpa) name, as CoreDNS
answers names it does not have; for any other name an A question gets the
stand-in internet host's address (podnet.INTERNET_IP), other types no
answer (NOERROR). Its sockets are made by a
thread that enters the endpoint's network namespace (setns), and served by
the simulator's threads: no process per server."""
import ctypes
import os
import secrets
import socket
import struct
import threading

from podnet import INTERNET_IP

NODELOCAL_IP = "169.254.20.10"
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def sockets_in(pid, port):
    """A UDP and a listening TCP socket on 0.0.0.0:port inside pid's netns."""
    out = {}

    def run():
        try:
            fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    e = ctypes.get_errno()
                    raise OSError(e, f"setns: {os.strerror(e)}")
            finally:
                os.close(fd)
            u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            u.bind(("0.0.0.0", port))
            t = socket.socket()
            t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            t.bind(("0.0.0.0", port))
            t.listen(16)
            out["s"] = (u, t)
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            out["e"] = e
    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join()
    if "e" in out:
        raise out["e"]
    return out["s"]


def answer(query):
    """The reply to one DNS query (bytes), or None for something unparsable."""
    if len(query) < 12:
        return None
    qid, flags, qd = struct.unpack("!HHH", query[:6])
    if flags & 0x8000 or qd != 1:
        return None
    i = 12
    while i < len(query) and query[i]:
        if query[i] & 0xC0:
            return None
        i += 1 + query[i]
    if i + 5 > len(query):
        return None
    qtype, qclass = struct.unpack("!HH", query[i + 1:i + 5])
    question = query[12:i + 5]
    labels, j = [], 12
    while query[j]:
        labels.append(query[j + 1:j + 1 + query[j]].decode("ascii", "replace").lower())
        j += 1 + query[j]
    rd = flags & 0x0100
    nx = len(labels) < 2 or labels[-2:] == ["cluster", "local"] or \
        labels[-2:] == ["in-addr", "arpa"] or labels[-2:] == ["ip6", "arpa"]
    if nx:
        return struct.pack("!HHHHHH", qid, 0x8083 | rd, 1, 0, 0, 0) + question
    an = b""
    if qtype == 1 and qclass == 1:
        an = struct.pack("!HHHIH", 0xC00C, 1, 1, 30, 4) + socket.inet_aton(INTERNET_IP)
    return struct.pack("!HHHHHH", qid, 0x8080 | rd, 1, 1 if an else 0, 0, 0) + question + an


def serve(u, t):
    def udp():
        while True:
            try:
                q, peer = u.recvfrom(4096)
                r = answer(q)
                if r:
                    u.sendto(r, peer)
            except OSError:
                return

    def tcp_one(c):
        try:
            c.settimeout(5)
            buf = b""
            while True:
                while len(buf) < 2:
                    d = c.recv(4096)
                    if not d:
                        return
                    buf += d
                n = struct.unpack("!H", buf[:2])[0]
                while len(buf) < 2 + n:
                    d = c.recv(4096)
                    if not d:
                        return
                    buf += d
                r = answer(buf[2:2 + n])
                buf = buf[2 + n:]
                if not r:
                    return
                c.sendall(struct.pack("!H", len(r)) + r)
        except OSError:
            pass
        finally:
            c.close()

    def tcp():
        while True:
            try:
                c, _ = t.accept()
            except OSError:
                return
            threading.Thread(target=tcp_one, args=(c,), daemon=True).start()
    for fn in (udp, tcp):
        threading.Thread(target=fn, daemon=True, name="cluster-dns").start()


class ClusterDNS:
    """The endpoints of --dns: the Pods are created at bootstrap (running_pod),
    the listeners once the pod network and the controllers run (up())."""

    def __init__(self, sim, admin, modes):
        self.sim = sim
        self.modes = list(modes)
        self.info = {}             # mode -> {"ip", "port", "pod"}
        if not sim.podnet:
            return
        spec = {"containers": [{"name": "coredns", "image": "registry.k8s.io/coredns/coredns:v1.12.0",
                                "ports": [{"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                          {"name": "dns-tcp", "containerPort": 53,
                                           "protocol": "TCP"}]}],
                "dnsPolicy": "Default"}
        for mode in self.modes:
            suffix = secrets.token_hex(3)[:5]
            if mode == "kube-dns":
                name = f"coredns-{secrets.token_hex(5)}-{suffix}"
                ip = sim.running_pod(admin, "kube-system", name, {"k8s-app": "kube-dns"}, spec,
                                     sim.controllers.ipam.alloc(), sim.node_ip(1), own_ip=True,
                                     sandbox="")
                self._serve_sandbox(name, mode, 53)
                self.info[mode] = {"ip": ip, "port": 53, "pod": f"kube-system/{name}"}
            elif mode == "openshift":
                name = f"dns-default-{suffix}"
                osp = {"containers": [{"name": "dns", "image": "quay.io/openshift/origin-coredns",
                                       "ports": [{"name": "dns", "containerPort": 5353,
                                                  "protocol": "UDP"},
                                                 {"name": "dns-tcp", "containerPort": 5353,
                                                  "protocol": "TCP"}]}],
                       "dnsPolicy": "Default"}
                ip = sim.running_pod(admin, "openshift-dns", name,
                                     {"dns.operator.openshift.io/daemonset-dns": "default"}, osp,
                                     sim.controllers.ipam.alloc(), sim.node_ip(1), own_ip=True,
                                     sandbox="")
                self._serve_sandbox(name, mode, 5353)
                self.info[mode] = {"ip": ip, "port": 5353, "pod": f"openshift-dns/{name}"}
            elif mode == "nodelocal":
                name = f"node-local-dns-{suffix}"
                nl = {"containers": [{"name": "node-cache",
                                      "image": "registry.k8s.io/dns/k8s-dns-node-cache:1.22.28",
                                      "args": ["-localip", NODELOCAL_IP],
                                      "ports": [{"name": "dns", "containerPort": 53,
                                                 "protocol": "UDP"},
                                                {"name": "dns-tcp", "containerPort": 53,
                                                 "protocol": "TCP"}]}],
                      "hostNetwork": True, "dnsPolicy": "Default"}
                node = sim.node_ip(1)
                sim.running_pod(admin, "kube-system", name, {"k8s-app": "node-local-dns"}, nl,
                                node, node)
                self.info[mode] = {"ip": NODELOCAL_IP, "port": 53, "pod": f"kube-system/{name}"}

    def nameserver(self):
        """What the kubelet's --cluster-dns names here: the kube-dns pod (the
        Service's DNAT target), else NodeLocal DNSCache's address (its IPVS-mode
        setup), else None (guests keep the host's resolver)."""
        for mode in ("kube-dns", "nodelocal"):
            if mode in self.info:
                return self.info[mode]["ip"]
        return None

    def resolv_conf(self, ns, vm=False, policy=None):
        """A pod's /etc/resolv.conf under dnsPolicy ClusterFirst (the default),
        as the kubelet writes it (kubernetes pkg/kubelet/network/dns/dns.go:
        nameserver the cluster DNS, search <ns>.svc.<domain> svc.<domain>
        <domain>, options ndots:5); a VM's guest gets the nameservers and the
        search domains of its launcher pod's file by DHCP (kubevirt
        pkg/network/dhcp/configurator.go startDHCP), no options. None for
        another dnsPolicy (Default: the node's) or no cluster DNS."""
        ip = self.nameserver()
        if not ip or (policy not in (None, "", "ClusterFirst")):
            return None
        d = "cluster.local"
        text = f"search {ns}.svc.{d} svc.{d} {d}\nnameserver {ip}\n"
        return text if vm else text + "options ndots:5\n"

    def _serve_sandbox(self, name, mode, port):
        b = next(x for x in self.sim.sandboxes if x["name"] == name)
        b["serve"] = lambda pid: serve(*sockets_in(pid, port))

    def up(self):
        """The NodeLocal listener (the Pods' listeners start with their
        sandboxes); then STATE/cluster-dns.json: mode -> ip, port, pod."""
        if "nodelocal" in self.info:
            pid = self.sim.podnet.add_local_endpoint(NODELOCAL_IP)
            serve(*sockets_in(pid, 53))
        import json
        p = os.path.join(self.sim.state_dir, "cluster-dns.json")
        with open(p + ".tmp", "w") as f:
            json.dump(self.info, f)
        os.replace(p + ".tmp", p)
        if self.info and getattr(self.sim.args, "verbose", False):
            self.sim.log("cluster DNS: " + ", ".join(f"{m} {i['ip']}:{i['port']}"
                                                     for m, i in self.info.items()))
