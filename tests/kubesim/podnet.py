"""The simulated pod network (PLATFORM-style sketch in README "Pod network").

    host netns                 cluster netns (ours)                   pod netns (a guest's)
    ksh<port> 10.A.B.254/32 -- host0 --+
      route 10.A.B.0/24                |  br0 10.A.B.1/24 --- p<n> === eth0 10.A.B.n/24
                                       |   (isolated ports,            default via 10.A.B.1
                                       |    proxy_arp_pvlan: every
                                       |    packet is routed here)
                                       +- inet0 203.0.113.1/24 === eth0 203.0.113.10 (the "internet")

Every namespace is held by a process of ours (PR_SET_PDEATHSIG: it dies with
the simulator), never a named /run/netns entry: when the simulator exits, even
killed, the namespaces go, and with them the veth pairs, the host's ksh<port>
and its route. Nothing is routed off the machine: the cluster namespace has no
link but host0, br0 and inet0, its default route is the internet namespace,
which takes every address outside the pod network as its own (AnyIP: any
"internet" address answers, a DNS query to the host's resolver is refused at
once instead of timing out); the host only has the one /24 route, for the
backend (source 10.A.B.254, the "node" address).

The pod CIDR is 10.(port >> 8).(port & 255).0/24, distinct for every port, so
two simulators never share one. nftables in the cluster namespace (its
tables die with it): `bridge ksim_guard` lets a port send only its own IPv4
address (IP and ARP; nothing else, no IPv6), so a root student who changes
the guest's address or routes gets nowhere; `inet ksim_pol` is the
NetworkPolicy verdict (controllers/netpol.py writes its chains).

What a policy denies is dropped, as Calico (Felix's
iptablesFilterDenyAction, default DROP) and Cilium ("Policy denied" drops)
do: a client waits out its own timeout. (Calico can be set to Reject; no
suite needs a denied client to fail fast, so the simulator has no such
mode.) The simulator's own guards are not policy and stay
rejects: pods never reach the host (.254) or the cluster namespace itself,
and an address no pod holds yet is unreachable at once. Policy comes first:
a connection the source's egress policy denies is dropped before any guard.

`add_local_endpoint()` (clusterdns.py: NodeLocal DNSCache) gives the
cluster namespace a route to a link-local address held by a namespace of
its own, a veth away: the node's hostNetwork listener, reached from pods
through their egress policy like any destination."""
import ipaddress
import os
import subprocess
import threading

INTERNET_IP = "203.0.113.10"      # TEST-NET-3: the stand-in internet host
INTERNET_GW = "203.0.113.1"
INTERNET_SERVER = r"""
import socket, threading
def serve(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(64)
    while True:
        c, a = s.accept()
        try:
            c.settimeout(2); c.recv(4096)
            c.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\ninternet\n")
        except OSError:
            pass
        c.close()
for p in (80, 443):
    threading.Thread(target=serve, args=(p,), daemon=True).start()
threading.Event().wait()
"""


EMPTY_POLICY = "  chain egress { }\n  chain ingress { }"


class NetError(Exception):
    pass


def pod_cidr_for_port(port):
    return f"10.{(port >> 8) & 255}.{port & 255}.0/24"


def _run(argv, inp=None, check=True):
    p = subprocess.run(argv, input=inp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if check and p.returncode != 0:
        raise NetError(f"{' '.join(argv[:6])}...: {p.stderr.strip()[:400]}")
    return p


def in_ns(pid, script, check=True):
    """Run a shell script in pid's network namespace (only: mounts, PIDs stay ours)."""
    return _run(["nsenter", "-t", str(pid), "-n", "/bin/sh", "-ec", script], check=check)


class PodNetwork:
    def __init__(self, port, cidr=None, log=print):
        self.port = port
        self.net = ipaddress.ip_network(cidr or pod_cidr_for_port(port))
        if self.net.prefixlen > 24:
            raise NetError("the pod CIDR must be a /24 or larger")
        hosts = list(self.net.hosts())
        self.gw = str(hosts[0])
        # br0's MAC is set once: a bridge left to itself takes its lowest port's
        # MAC and changes it as guests come and go, and the guests' neighbour
        # entries for the gateway and the node (proxy ARP: br0's MAC) then point
        # nowhere until they expire (tens of seconds of lost SYN-ACKs). 0a:58 and
        # the address, as the bridge CNI plugin derives a MAC.
        self.gw_mac = "0a:58:" + ":".join(f"{b:02x}" for b in hosts[0].packed)
        self.node_ip = str(hosts[-1])
        self.pool = [str(h) for h in hosts[1:-1]]
        self.hostdev = f"ksh{port}"[:15]
        self.log = log
        self.cluster = None        # holder Popen of the cluster netns
        self.internet = None       # the internet host (its server is the holder)
        self.lock = threading.Lock()
        self.ports = {}            # ip -> bridge port name
        self.owners = {}           # ip -> who attached it (a guest)
        self.policy = ""           # the NetworkPolicy chains (controllers/netpol.py)
        self.node_is_pod = False   # the node address is a Pod's (--backend-pod): policed
        self.known = set()         # pod addresses the applied policy chains were rendered for
        self.policed = False       # a NetworkPolicy controller feeds set_policy
        self.applied = None
        self.locals = []           # (address, holder Popen, device): add_local_endpoint()

    # ------------------------------------------------------------ set-up
    def _holder(self, argv):
        from guests import spawner   # the long-lived thread: PDEATHSIG outlives no one
        return spawner().call(lambda: subprocess.Popen(
            ["setpriv", "--pdeathsig", "KILL", "unshare", "--net", "--"] + argv,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=True))

    def start(self):
        if not os.path.exists("/usr/sbin/nft"):
            raise NetError("nftables is not installed (tests/deps installs it)")
        _run(["ip", "link", "del", self.hostdev], check=False)    # a leftover of ours
        self.cluster = self._holder(["sleep", "infinity"])
        self.internet = self._holder(["python3", "-I", "-c", INTERNET_SERVER])
        c, i = self.cluster.pid, self.internet.pid
        pre = self.net.prefixlen
        # wait until both holders are in their own namespace
        for p in (c, i):
            for _ in range(500):
                try:
                    if os.readlink(f"/proc/{p}/ns/net") != os.readlink("/proc/self/ns/net"):
                        break
                except OSError:
                    pass
                threading.Event().wait(0.01)
            else:
                raise NetError("a network namespace holder did not start")
        _run(["ip", "link", "add", self.hostdev, "type", "veth", "peer", "name", "host0",
              "netns", str(c)])
        _run(["ip", "addr", "add", f"{self.node_ip}/32", "dev", self.hostdev])
        _run(["ip", "link", "set", self.hostdev, "up"])
        _run(["ip", "route", "add", str(self.net), "dev", self.hostdev, "src", self.node_ip])
        in_ns(c, f"""
ip link set lo up
echo 1 > /proc/sys/net/ipv4/ip_forward
echo 0 > /proc/sys/net/ipv4/conf/all/send_redirects
echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6 || true
ip link add br0 type bridge
ip link set br0 address {self.gw_mac}
ip addr add {self.gw}/{pre} dev br0
echo 0 > /proc/sys/net/ipv4/conf/br0/send_redirects
echo 1 > /proc/sys/net/ipv4/conf/br0/proxy_arp
echo 1 > /proc/sys/net/ipv4/conf/br0/proxy_arp_pvlan
echo 0 > /proc/sys/net/ipv4/neigh/br0/proxy_delay
ip link set br0 up
ip link set host0 up
echo 1 > /proc/sys/net/ipv4/conf/host0/proxy_arp
echo 0 > /proc/sys/net/ipv4/neigh/host0/proxy_delay
ip route add {self.node_ip}/32 dev host0
ip link add inet0 type veth peer name eth0 netns {i}
ip addr add {INTERNET_GW}/24 dev inet0
ip link set inet0 up
ip route add default via {INTERNET_IP} dev inet0
""")
        in_ns(i, f"""
ip link set lo up
ip addr add {INTERNET_IP}/24 dev eth0
ip link set eth0 up
ip route add default via {INTERNET_GW}
ip rule add pref 100 lookup local
ip rule del pref 0
ip rule add pref 10 to {self.net} lookup main
ip route add local 0.0.0.0/0 dev lo
ip route add throw 203.0.113.0/24 table local
""")
        self.apply()

    def stop(self):
        for _, h, _ in self.locals:
            if h.poll() is None:
                h.kill()
                h.wait()
        for h in (self.internet, self.cluster):
            if h and h.poll() is None:
                h.kill()
                h.wait()
        _run(["ip", "link", "del", self.hostdev], check=False)

    # ------------------------------------------------------------ pods
    @staticmethod
    def wait_own_netns(pid, timeout=5.0):
        """pid, once it runs in a network namespace other than ours (after
        `unshare --net` has done its work)."""
        import time
        mine = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if os.readlink(f"/proc/{pid}/ns/net") != mine:
                    return pid
            except OSError:
                raise NetError(f"process {pid} is gone") from None
            time.sleep(0.005)
        raise NetError(f"process {pid} has no network namespace of its own")

    def attach(self, pid, ip, owner=None):
        """Give pid's (fresh) network namespace its eth0 on the pod network. The
        guest side is configured before the bridge port comes up and the address
        counts as attached: until then a connection to it is refused at once
        (never an ARP wait for an address nobody has yet)."""
        n = ip.split(".")[-1]
        port = f"p{n}"
        with self.lock:
            in_ns(self.cluster.pid, f"""
ip link del {port} 2>/dev/null || true
ip link add {port} type veth peer name eth0 netns {pid}
""")
        in_ns(pid, f"""
echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6 || true
ip link set lo up
ip addr add {ip}/{self.net.prefixlen} dev eth0
ip link set eth0 up
ip route add default via {self.gw}
""")
        import time
        deadline = time.monotonic() + 5
        while self.policed and ip not in self.known and time.monotonic() < deadline:
            time.sleep(0.01)
        with self.lock:
            in_ns(self.cluster.pid, f"""
ip link set {port} master br0
bridge link set dev {port} isolated on
ip link set {port} up
ip neigh del {ip} dev br0 2>/dev/null || true
""")
            self.ports[ip] = port
            self.owners[ip] = owner
            self._apply_locked()

    def detach(self, ip, owner=None):
        with self.lock:
            if self.owners.get(ip) is not owner:
                return             # the address went to another guest meanwhile
            self.owners.pop(ip, None)
            port = self.ports.pop(ip, None)
            if port and self.cluster and self.cluster.poll() is None:
                # the address's next owner has another MAC: forget this one's
                in_ns(self.cluster.pid, f"ip link del {port} 2>/dev/null || true; "
                      f"ip neigh del {ip} dev br0 2>/dev/null || true", check=False)
                self._apply_locked()

    def add_local_endpoint(self, address):
        """A namespace of its own holding `address` (a /32, e.g. NodeLocal
        DNSCache's 169.254.20.10), a veth away from the cluster namespace,
        which routes the address there: as a hostNetwork listener on a
        node's dummy interface, reached by pods through their egress policy
        (it is no pod: no ingress policy selects it). Returns the holder's
        PID (clusterdns.py binds its sockets in that namespace)."""
        h = self._holder(["sleep", "infinity"])
        self.wait_own_netns(h.pid)
        dev = f"ep{len(self.locals)}"
        with self.lock:
            in_ns(self.cluster.pid, f"""
ip link add {dev} type veth peer name eth0 netns {h.pid}
ip link set {dev} up
echo 1 > /proc/sys/net/ipv4/conf/{dev}/proxy_arp
echo 0 > /proc/sys/net/ipv4/neigh/{dev}/proxy_delay
ip route add {address}/32 dev {dev}
""")
            in_ns(h.pid, f"""
echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6 || true
ip link set lo up
ip addr add {address}/32 dev eth0
ip link set eth0 up
ip route add {self.net} dev eth0
""")
            self.locals.append((address, h, dev))
        return h.pid

    def set_policy(self, text, node_is_pod=False, known=()):
        """The NetworkPolicy chains, rendered for the pods whose addresses are
        `known`; attach() waits until its pod's address is among them, so that
        no guest is ever on the network before the policies that select it."""
        with self.lock:
            self.known = set(known)
            if (text, node_is_pod) != (self.policy, self.node_is_pod):
                self.policy, self.node_is_pod = text, node_is_pod
                self._apply_locked()

    def apply(self):
        with self.lock:
            self._apply_locked()

    # ------------------------------------------------------------ nftables
    def ruleset(self):
        guard = "\n".join(
            f'    iifname "{p}" ether type ip ip saddr {ip} accept\n'
            f'    iifname "{p}" ether type arp arp saddr ip {ip} accept'
            for ip, p in sorted(self.ports.items()))
        attached = ", ".join(sorted(self.ports)) or ""
        # traffic from the pod's node is always allowed (NetworkPolicySpec), unless
        # the node address stands for a Pod (the backend): then it is policed as one
        if self.node_is_pod:
            node_egress, node = '    iifname "host0" jump egress\n', ""
        else:
            node_egress, node = "", '    iifname "host0" oifname "br0" accept\n'

        aset = f"elements = {{ {attached} }}" if attached else ""
        return f"""table bridge ksim_guard
delete table bridge ksim_guard
table bridge ksim_guard {{
  chain pre {{
    type filter hook prerouting priority 0; policy drop;
{guard}
  }}
}}
table inet ksim_pol
delete table inet ksim_pol
table inet ksim_pol {{
  set attached {{ type ipv4_addr; {aset} }}
  chain input {{
    type filter hook input priority 0; policy accept;
    iifname != "br0" accept
    ct state established,related accept
    jump egress
    meta l4proto tcp reject with tcp reset
    reject with icmpx type port-unreachable
  }}
  chain forward {{
    type filter hook forward priority 0; policy drop;
    ct state established,related accept
    ct state invalid drop
    iifname "host0" ip saddr != {self.node_ip} drop
    iifname "br0" jump egress
{node_egress}    oifname "br0" ip daddr != @attached meta l4proto tcp reject with tcp reset
    oifname "br0" ip daddr != @attached reject with icmpx type host-unreachable
    oifname "host0" meta l4proto tcp reject with tcp reset
    oifname "host0" reject with icmpx type port-unreachable
{node}    oifname "br0" jump ingress
    accept
  }}
{self.policy or EMPTY_POLICY}
}}
"""

    DENY = "    drop\n"   # the end of a pod's policy chain: what none of its rules allowed

    def _apply_locked(self):
        if not self.cluster or self.cluster.poll() is not None:
            return
        text = self.ruleset()
        if text == self.applied:
            return
        p = subprocess.run(["nsenter", "-t", str(self.cluster.pid), "-n", "nft", "-f", "-"],
                           input=text, text=True, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
        if p.returncode != 0:
            self.log(f"nft failed: {p.stderr.strip()[:2000]}")
            raise NetError("nft: " + p.stderr.strip()[:300])
        self.applied = text

    def exec_in(self, which, script):
        """Run a script in the cluster ("cluster") or internet ("internet") namespace."""
        h = self.cluster if which == "cluster" else self.internet
        return in_ns(h.pid, script, check=False)
