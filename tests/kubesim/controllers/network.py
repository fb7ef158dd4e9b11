"""The pod network's address management. With the pod network (podnet.py:
process guests and `--guest none`) each pod gets an address of the pod CIDR;
QEMU guests, which still forward their agent port to the host, get their own
loopback address 127.A.x.y out of the simulator's /16 (`--guest-net`), and an
address something else on this host already listens on (another simulator's
guest, a leftover process) is skipped. Either way kept per owner (a VMI's
address survives its launcher pod being recreated) and released when its
guest stops."""
import socket


class Ipam:
    def __init__(self, base, pool=None):
        self.base = base           # (127, A)
        self.pool = pool           # the pod network's addresses (podnet.PodNetwork.pool)
        self.ips = {}              # owner uid (a VMI's) -> ip
        self.ip_next = 0

    def alloc(self):
        used = set(self.ips.values())
        if self.pool:
            for _ in range(len(self.pool)):
                ip = self.pool[self.ip_next % len(self.pool)]
                self.ip_next += 1
                if ip not in used:
                    return ip
            raise RuntimeError("pod network exhausted")
        base = self.base
        for _ in range(65000):
            i = self.ip_next
            self.ip_next = (self.ip_next + 1) % (254 * 254)
            ip = f"{base[0]}.{base[1]}.{i // 254}.{i % 254 + 1}"
            if ip not in used and self.ip_free(ip):
                return ip
        raise RuntimeError("guest network exhausted")

    def release(self, uid):
        self.ips.pop(uid, None)

    @staticmethod
    def ip_free(ip):
        """Nobody else on this host (another simulator's guest, a leftover
        process) listens on ip:8899: the address is really this guest's."""
        with socket.socket() as s:
            try:
                s.bind((ip, 8899))
                return True
            except OSError:
                return False
