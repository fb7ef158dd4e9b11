"""Secondary L2 networks (Multus + the bridge CNI plugin) for guests that
have a network namespace of their own.

Every NetworkAttachmentDefinition a guest is attached to gets one Linux
bridge, named as its CNI config says (`bridge`, the plugin's default "cni0"
otherwise), in a network namespace of its own that the simulator holds (a
`sleep` under `unshare --net`, PR_SET_PDEATHSIG: it dies with the
simulator, and with it the bridge and every veth). A guest's attachment is a
veth pair: one end a port of that bridge, the other the guest's `eth1`,
`eth2`, ... with the MAC KubeVirt was asked for (the interface's
`macAddress`). Its addresses are the NAD's static IPAM addresses and those
the guest's cloud-init network data gives the interface with that MAC (the
simulator plays cloud-init's part here, before the guest's init runs).

Guests on the same NAD share one L2 segment: any protocol, any port. Two
NADs never share anything: their bridges are in different namespaces, so a
guest of one session cannot reach another session's machines even when
their address ranges overlap. Nothing here is routed anywhere: a bridge
namespace has no link but its ports (no default route, no address of its
own), and the guest's eth1 gets only on-link addresses.

The namespace (rather than the pod network's own namespace, as a real node
would have it) keeps the pod network's bridge-family nftables guard, which
filters every bridge of its namespace, out of the session networks' way."""
import os
import subprocess
import threading
import time


class SessionNetError(Exception):
    pass


def _run(argv, check=True):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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


class _Segment:
    """One NAD's bridge and its namespace."""

    def __init__(self, key, bridge, holder):
        self.key = key
        self.bridge = bridge
        self.holder = holder       # Popen of the namespace's holder
        self.ports = {}            # owner -> [port names]
        self.next_port = 0


class SessionNetworks:
    def __init__(self, spawn=None, log=print):
        self.lock = threading.Lock()
        self.segments = {}         # NAD uid -> _Segment
        self.log = log
        self.spawn = spawn or (lambda fn: fn())   # run Popen on a long-lived thread

    def _holder(self):
        return self.spawn(lambda: subprocess.Popen(
            ["setpriv", "--pdeathsig", "KILL", "unshare", "--net", "--", "sleep", "infinity"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=True))

    def _segment(self, key, bridge):
        seg = self.segments.get(key)
        if seg and seg.holder.poll() is None:
            return seg
        h = self._holder()
        try:
            _own_netns(h.pid)
            in_netns(h.pid, f"""
echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6 || true
ip link set lo up
ip link add {bridge} type bridge
ip link set {bridge} up
""")
        except Exception:
            h.kill()
            h.wait()
            raise
        seg = _Segment(key, bridge, h)
        self.segments[key] = seg
        return seg

    def attach(self, pid, key, bridge, ifname, mac, addresses, owner):
        """Give pid's network namespace the interface ifname (MAC mac, the
        given CIDR addresses) on the bridge of NAD `key`."""
        if not bridge or len(bridge) > 15 or not all(c.isalnum() or c in "-_." for c in bridge):
            raise SessionNetError(f"bad bridge name {bridge!r}")
        with self.lock:
            seg = self._segment(key, bridge)
            port = f"s{seg.next_port}"
            seg.next_port += 1
            mac_opt = f"address {mac}" if mac else ""
            in_netns(seg.holder.pid, f"""
ip link add {port} type veth peer name {ifname} {mac_opt} netns {pid}
ip link set {port} master {bridge}
ip link set {port} up
""")
            seg.ports.setdefault(owner, []).append(port)
        adds = "".join(f"ip addr add {a} dev {ifname}\n" for a in addresses)
        in_netns(pid, f"""
echo 1 > /proc/sys/net/ipv6/conf/{ifname}/disable_ipv6 || true
{adds}ip link set {ifname} up
""")

    def detach(self, owner):
        """The owner's guest stopped (its namespace, and with it its veths, go
        with it): a segment nobody is attached to any more is taken down."""
        with self.lock:
            for key, seg in list(self.segments.items()):
                ports = seg.ports.pop(owner, None)
                if ports and seg.holder.poll() is None:
                    in_netns(seg.holder.pid, "".join(f"ip link del {p} 2>/dev/null || true\n"
                                                     for p in ports), check=False)
                if not seg.ports:
                    self._drop(key)

    def _drop(self, key):
        seg = self.segments.pop(key, None)
        if seg and seg.holder.poll() is None:
            seg.holder.kill()
            seg.holder.wait()

    def stop(self):
        with self.lock:
            for key in list(self.segments):
                self._drop(key)
