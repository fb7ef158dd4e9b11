"""The pod network's address management: each guest gets its own loopback
address 127.A.x.y out of the simulator's /16 (`--guest-net`), kept per owner
(a VMI's address survives its launcher pod being recreated) and released when
its guest stops. An address something else on this host already listens on
(another simulator's guest, a leftover process) is skipped. Freed addresses
are reused, as real IPAM does; POST /_sim/ipam {"next": IP} makes the next
guest get a given free address (a test of address reuse)."""
import socket


class Ipam:
    def __init__(self, base):
        self.base = base           # (127, A)
        self.ips = {}              # owner uid (a VMI's) -> ip
        self.ip_next = 0
        self.give_next = None      # an address the next alloc hands out (/_sim/ipam)

    def alloc(self):
        used = set(self.ips.values())
        base = self.base
        # real IPAM reuses freed addresses; a test can ask for one explicitly
        want, self.give_next = self.give_next, None
        if want and want not in used and self.ip_free(want):
            return want
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
            # as the agent binds (SO_REUSEADDR): a TIME-WAIT left by a guest
            # that died does not make its address look taken; a listener does
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((ip, 8899))
                return True
            except OSError:
                return False
