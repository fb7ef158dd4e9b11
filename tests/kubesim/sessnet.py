"""Secondary L2 networks (Multus + a CNI plugin) for guests that have a
network namespace of their own; citations in CONFORMANCE.md, "Networking".

The CNI `bridge` plugin (containernetworking/plugins plugins/main/bridge)
works on ONE node: its ADD makes the bridge its config names (`bridge`,
default "cni0") in the node's own network namespace if it is not there yet
(ensureBridge: create, EEXIST is fine, "already exists but is not a bridge"
otherwise), and plugs a veth into it; nothing connects that bridge to any
other node (no uplink: "container-to-container communication on the same
host"). Its DEL removes the container's veth and never the bridge
(containernetworking/plugins#282; PR #283, which would have, was closed
unmerged), so a bridge stays on every node that ever had a pod on it.

So here every simulated node has a network namespace of its own (a `sleep`
under `unshare --net`, PR_SET_PDEATHSIG: it dies with the simulator, and with
it every bridge and veth), and an L2 segment is (node, bridge name): two
guests on the same NAD reach each other only when they run on the same node;
two NADs naming the same bridge share it on a node, as they would there.
A guest's attachment is a veth pair: one end `veth<8 hex>` a port of that
bridge, the other the guest's `eth1`, `eth2`, ... with the MAC KubeVirt was
asked for and the addresses given (the NAD's static IPAM, and those of the
guest's cloud-init network data: for process guests the simulator plays
cloud-init's part). `attach(..., addresses=None)` gives the peer no address
and leaves it down (a QEMU guest's launcher pod, where the peer goes into the
pod's in-pod bridge with the tap, as KubeVirt's bridge binding does).

A detached guest's port goes (its namespace dies and the veth with it); the
bridge stays: `bridges()` lists every node's bridges and their ports
(`GET /_sim/nodes/bridges`), and `node_exec()` runs a script on a node as a
hostNetwork pod would (the node's network namespace, its own /sys):
operators' clean-up of leaked bridges is tested that way.

OVN-Kubernetes' `layer2` secondary networks (ovn-k8s-cni-overlay, topology
layer2) are one logical switch for the whole cluster, whatever the nodes:
`attach(domain=OVERLAY, ...)` puts them in one namespace of their own, a
bridge per network name (`overlay_bridge()`).

Nothing here is routed anywhere: a node namespace has no link but bridges
and their ports (no default route, no address, IPv6 off), the guest's
peer gets only on-link addresses. These namespaces are apart from the pod
network's (podnet.py), whose bridge-family nftables guard filters every
bridge of its namespace."""
import hashlib
import os
import re
import secrets
import subprocess
import threading
import time

OVERLAY = "<ovn-layer2>"      # the domain of cluster-wide overlay networks
BRIDGE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")


class SessionNetError(Exception):
    pass


def _run(argv, check=True, timeout=None):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    if check and p.returncode != 0:
        raise SessionNetError(f"{' '.join(argv[:8])}...: {p.stderr.strip()[:300]}")
    return p


def in_netns(pid, script, check=True):
    """A shell script in pid's network namespace only (mounts and PIDs stay ours)."""
    return _run(["nsenter", "-t", str(pid), "-n", "/bin/sh", "-ec", script], check=check)


def _own_netns(pid, timeout=5.0):
    mine = os.readlink("/proc/self/ns/net")
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if os.readlink(f"/proc/{pid}/ns/net") != mine:
                return
        except OSError:
            raise SessionNetError(f"process {pid} is gone") from None
        time.sleep(0.005)
    raise SessionNetError(f"process {pid} has no network namespace of its own")


def overlay_bridge(network):
    """The bridge standing for an overlay network (a Linux name: 15 characters)."""
    return "ovl" + hashlib.sha256(network.encode()).hexdigest()[:12]


class _Domain:
    """A node's network namespace (or the overlay's): its bridges' ports."""

    def __init__(self, name, holder):
        self.name = name
        self.holder = holder       # Popen of the namespace's holder
        self.ports = {}            # owner -> [(bridge, port)]


class SessionNetworks:
    def __init__(self, spawn=None, log=print):
        self.lock = threading.Lock()
        self.domains = {}          # node name (or OVERLAY) -> _Domain
        self.log = log
        self.spawn = spawn or (lambda fn: fn())   # run Popen on a long-lived thread

    def _holder(self):
        return self.spawn(lambda: subprocess.Popen(
            ["setpriv", "--pdeathsig", "KILL", "unshare", "--net", "--", "sleep", "infinity"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=True))

    def _domain(self, name):
        d = self.domains.get(name)
        if d and d.holder.poll() is None:
            return d
        h = self._holder()
        try:
            _own_netns(h.pid)
            in_netns(h.pid, """
echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6 || true
echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6 || true
ip link set lo up
""")
        except Exception:
            h.kill()
            h.wait()
            raise
        d = _Domain(name, h)
        self.domains[name] = d
        return d

    def attach(self, pid, domain, bridge, ifname, mac, addresses, owner):
        """CNI ADD: give pid's network namespace the interface ifname (MAC mac,
        the given CIDR addresses, up; None: no address, left down) on the
        bridge `bridge` of `domain` (a node name, or OVERLAY), made first if
        that domain has no such bridge yet."""
        if not domain:
            raise SessionNetError("the pod has no node")
        if not bridge or not BRIDGE_NAME.match(bridge):
            raise SessionNetError(f"bad bridge name {bridge!r}")
        if not BRIDGE_NAME.match(ifname):
            raise SessionNetError(f"bad interface name {ifname!r}")
        with self.lock:
            d = self._domain(domain)
            port = "veth" + secrets.token_hex(4)
            mac_opt = f"address {mac}" if mac else ""
            in_netns(d.holder.pid, f"""
if ip -o link show dev {bridge} >/dev/null 2>&1; then
  ip -d -o link show dev {bridge} | grep -q ' bridge ' || {{ echo '"{bridge}" already exists but is not a bridge' >&2; exit 1; }}
else
  ip link add {bridge} type bridge
fi
ip link set {bridge} up
ip link add {port} type veth peer name {ifname} {mac_opt} netns {pid}
ip link set {port} master {bridge}
ip link set {port} up
""")
            d.ports.setdefault(owner, []).append((bridge, port))
        if addresses is None:
            in_netns(pid, f"echo 1 > /proc/sys/net/ipv6/conf/{ifname}/disable_ipv6 || true\n")
            return
        adds = "".join(f"ip addr add {a} dev {ifname}\n" for a in addresses)
        in_netns(pid, f"""
echo 1 > /proc/sys/net/ipv6/conf/{ifname}/disable_ipv6 || true
{adds}ip link set {ifname} up
""")

    def detach(self, owner):
        """CNI DEL: the owner's guest stopped (its namespace, and with it its
        veths, go with it); its ports go, the bridges stay (plugins#282)."""
        with self.lock:
            for d in self.domains.values():
                ports = d.ports.pop(owner, None)
                if ports and d.holder.poll() is None:
                    in_netns(d.holder.pid, "".join(f"ip link del {p} 2>/dev/null || true\n"
                                                   for _, p in ports), check=False)

    def bridges(self):
        """{domain: [{"name": bridge, "ports": [port, ...]}]}: what `ip link
        show type bridge` and `ip link show master B` say in each namespace."""
        with self.lock:
            doms = [(n, d.holder.pid) for n, d in self.domains.items() if d.holder.poll() is None]
        out = {}
        for name, pid in doms:
            r = in_netns(pid, "ip -o link show type bridge", check=False)
            brs = []
            for line in r.stdout.splitlines():
                m = re.match(r"\d+:\s+([^:@]+)[:@]", line)
                if not m:
                    continue
                b = m.group(1)
                pr = in_netns(pid, f"ip -o link show master {b}", check=False)
                ports = [re.match(r"\d+:\s+([^:@]+)", ln).group(1)
                         for ln in pr.stdout.splitlines() if re.match(r"\d+:\s+([^:@]+)", ln)]
                brs.append({"name": b, "ports": ports})
            out[name] = sorted(brs, key=lambda x: x["name"])
        return out

    def node_exec(self, domain, script, timeout=30.0):
        """(exit code, stdout, stderr) of `sh -c script` as a hostNetwork pod
        on that node would run it: the node's network namespace, a mount
        namespace of its own with that namespace's /sys."""
        with self.lock:
            d = self.domains.get(domain)
            if d is None or d.holder.poll() is not None:
                raise KeyError(domain)
            pid = d.holder.pid
        wrapper = 'mount -t sysfs sysfs /sys && exec /bin/sh -c "$1"'
        try:
            p = _run(["nsenter", "-t", str(pid), "-n", "--", "unshare", "--mount",
                      "--propagation", "private", "--", "/bin/sh", "-c", wrapper, "node-exec",
                      script], check=False, timeout=timeout)
        except subprocess.TimeoutExpired:
            return 124, "", "timed out\n"
        return p.returncode, p.stdout, p.stderr

    def stop(self):
        with self.lock:
            for d in self.domains.values():
                if d.holder.poll() is None:
                    d.holder.kill()
                    d.holder.wait()
            self.domains.clear()
