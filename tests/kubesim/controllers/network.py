"""The pod network's address management: each pod gets an address of the pod
CIDR (podnet.PodNetwork.pool), kept per owner (a VMI's address survives its
launcher pod being recreated) and released when its guest stops; addresses
are handed out round robin, so a released one is reused as late as possible."""


class Ipam:
    def __init__(self, pool):
        self.pool = list(pool)     # the pod network's addresses
        self.ips = {}              # owner uid (a VMI's) -> ip
        self.ip_next = 0

    def alloc(self):
        used = set(self.ips.values())
        for _ in range(len(self.pool)):
            ip = self.pool[self.ip_next % len(self.pool)]
            self.ip_next += 1
            if ip not in used:
                return ip
        raise RuntimeError("pod network exhausted")

    def release(self, uid):
        self.ips.pop(uid, None)
