"""CDI on the pod network (controllers/cdi.py uses it; README "CDI importer
pods"):

- the CDI controller's Pod, `cdi/cdi-deployment-...`, with the labels CDI's
  operator gives it (pkg/operator/resources/namespaced/controller.go) and a
  network namespace of its own on the pod network, held by the simulator
  (PR_SET_PDEATHSIG), as a kubelet makes one. The controller "scrapes" each
  running importer pod's progress from there, at
  https://<podIP>:8443/metrics with a 2 s deadline (CDI
  pkg/controller/common/util.go GetMetricsURL, GetProgressReportFromURL), so
  NetworkPolicies in the importer's namespace apply to the scrape as to any
  pod-to-pod connection;
- the registry mirror: the one place imports can read images from, a server
  at a private address (--registry-mirror, default 172.30.0.10:3128) in the
  simulator's internet namespace (podnet.py). The importer pods reach it
  through CDIConfig's importProxy (their http_proxy/https_proxy), from their
  pod IP, so an egress policy that excepts private ranges denies it. The
  mirror paces each transfer over the profile's dv_import; an image named
  *doesnotexist* is "manifest unknown" (404); POST /_sim/cdi
  {"hold": true} keeps every transfer at half way until {"hold": false};
  GET /_sim/cdi shows the mirror's requests and the scrapes per pod IP.

Threads enter a network namespace with setns(2) (per thread for
CLONE_NEWNET): the scraper thread lives in the CDI Pod's, the mirror's
threads in the internet namespace; nothing else of the simulator moves."""
import ctypes
import ipaddress
import os
import queue
import re
import secrets
import socket
import ssl
import threading
import time

import util

CLONE_NEWNET = 0x40000000
CDI_NS = "cdi"
SCRAPE_TIMEOUT = 2.0            # CDI: context.WithTimeout(ctx, 2*time.Second)
MIRROR_DEFAULT = "172.30.0.10:3128"
MIRROR_SIZE = 20 * 12800         # bytes every "image" has (MIRROR_CHUNKS equal chunks)
MIRROR_CHUNKS = 20
CDI_POD_LABELS = {"app": "containerized-data-importer", "cdi.kubevirt.io": "cdi-deployment",
                  "prometheus.cdi.kubevirt.io": "true",
                  "np.kubevirt.io/allow-access-cluster-services": "true",
                  "app.kubernetes.io/component": "storage",
                  "app.kubernetes.io/managed-by": "cdi-operator"}

_libc = ctypes.CDLL(None, use_errno=True)


def enter_netns(pid):
    """Move the calling thread (only) into pid's network namespace."""
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"setns: {os.strerror(e)}")
    finally:
        os.close(fd)


def parse_mirror(spec, pod_net):
    """(address, port) of --registry-mirror ADDR[:PORT]: a private IPv4 address
    outside the pod network (it must be routed to the internet namespace)."""
    host, _, port = (spec or MIRROR_DEFAULT).partition(":")
    try:
        a = ipaddress.ip_address(host)
        p = int(port or 3128)
    except ValueError:
        raise ValueError(f"--registry-mirror must look like 172.30.0.10:3128, not {spec!r}") \
            from None
    rfc1918 = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]
    if a.version != 4 or not any(a in n for n in rfc1918):
        raise ValueError(f"--registry-mirror {host}: give a private IPv4 address (10/8, "
                         "172.16/12, 192.168/16): the point is a registry no lab may reach")
    if pod_net is not None and a in pod_net:
        raise ValueError(f"--registry-mirror {host} is inside the pod network {pod_net}")
    if not 0 < p < 65536:
        raise ValueError(f"--registry-mirror port {p}")
    return str(a), p


class RegistryMirror:
    def __init__(self, addr, port, profile, log):
        self.addr, self.port = addr, port
        self.profile = profile
        self.log = log
        self.cv = threading.Condition()
        self.hold = False
        self.requests = []          # {"from", "target", "status", "sent"}; the last 200
        self.ready = threading.Event()
        self.error = None

    @property
    def url(self):
        return f"http://{self.addr}:{self.port}"

    def start(self, netns_pid):
        threading.Thread(target=self._serve, args=(netns_pid,), name="registry-mirror",
                         daemon=True).start()
        if not self.ready.wait(5) or self.error:
            raise RuntimeError(f"the registry mirror did not start: {self.error}")

    def set_hold(self, hold):
        with self.cv:
            self.hold = bool(hold)
            self.cv.notify_all()

    def state(self):
        with self.cv:
            return {"address": f"{self.addr}:{self.port}", "hold": self.hold,
                    "requests": [dict(r) for r in self.requests]}

    def _serve(self, pid):
        try:
            enter_netns(pid)
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((self.addr, self.port))
            s.listen(64)
        except OSError as e:
            self.error = str(e)
            self.ready.set()
            return
        self.ready.set()
        while True:
            c, a = s.accept()
            threading.Thread(target=self._one, args=(c, a[0]), daemon=True).start()

    def _one(self, c, peer):
        rec = {"from": peer, "target": "", "status": 0, "sent": 0}
        with self.cv:
            self.requests.append(rec)
            del self.requests[:-200]
        try:
            c.settimeout(10)
            req = b""
            while b"\r\n\r\n" not in req and len(req) < 16384:
                b = c.recv(4096)
                if not b:
                    return
                req += b
            parts = req.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
            target = parts[1] if len(parts) > 1 else ""
            rec["target"] = target
            c.settimeout(None)
            if "doesnotexist" in target:
                body = (b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown",'
                        b'"detail":"unknown tag"}]}')
                rec["status"] = 404
                c.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
                return
            rec["status"] = 200
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                      b"Content-Length: %d\r\nConnection: close\r\n\r\n" % MIRROR_SIZE)
            step = self.profile.delay("dv_import") / MIRROR_CHUNKS
            chunk = bytes(MIRROR_SIZE // MIRROR_CHUNKS)
            for i in range(MIRROR_CHUNKS):
                if i >= MIRROR_CHUNKS // 2:
                    with self.cv:
                        while self.hold:
                            self.cv.wait()
                time.sleep(step)
                n = chunk if i < MIRROR_CHUNKS - 1 else bytes(MIRROR_SIZE - len(chunk) * i)
                c.sendall(n)
                rec["sent"] += len(n)
        except OSError:
            pass
        finally:
            c.close()


class CdiNet:
    """The CDI controller's Pod and its scraper, and the registry mirror."""

    def __init__(self, sim):
        self.sim = sim
        self.podnet = sim.podnet
        self.mirror = None
        self.pod = None             # {"name", "ip", "uid"}
        self.holder = None
        self.jobs = queue.Queue()
        self.results = {}           # key -> (status, value): "ok" pct|None, "refused", "error" msg
        self.busy = set()
        self.counts = {}            # importer pod IP -> scrapes by outcome (/_sim/cdi)
        self.lock = threading.Lock()
        self.started = False

    # ------------------------------------------------------------ set-up
    def bootstrap(self, admin, api, by_plural):
        """The cdi namespace and the CDI controller's Pod (Running, an address
        of the pod network), before the controllers run."""
        if self.podnet is None:
            return
        if self.sim.store.get("namespaces", "", CDI_NS) is None:
            api.create(admin, by_plural["namespaces"], "", {"metadata": {"name": CDI_NS}})
        ip = self.sim.controllers.ipam.alloc()
        now = util.now_rfc3339()
        name = f"cdi-deployment-{secrets.token_hex(5)}-{secrets.token_hex(3)[:5]}"
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": CDI_NS, "labels": dict(CDI_POD_LABELS)},
               "spec": {"nodeName": "node-1", "serviceAccountName": "cdi-sa",
                        "containers": [{"name": "cdi-controller",
                                        "image": "quay.io/kubevirt/cdi-controller:v1.66.0"}]},
               "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                          "hostIP": f"127.{self.sim.guest_net[1]}.255.1", "startTime": now,
                          "conditions": [{"type": t, "status": "True", "lastTransitionTime": now}
                                         for t in ("Initialized", "Ready", "ContainersReady",
                                                   "PodScheduled")],
                          "containerStatuses": [{"name": "cdi-controller", "ready": True,
                                                 "started": True, "restartCount": 0,
                                                 "image": "quay.io/kubevirt/cdi-controller:v1.66.0",
                                                 "imageID": "",
                                                 "state": {"running": {"startedAt": now}}}]}}
        made, _ = api.create(admin, by_plural["pods"], CDI_NS, pod, keep_status=True)
        self.sim.controllers.ipam.ips[made["metadata"]["uid"]] = ip
        self.pod = {"name": name, "ip": ip, "uid": made["metadata"]["uid"]}

    def start(self):
        """After the controllers started (attach waits for the policy chains):
        the Pod's network namespace, the scraper, the mirror."""
        if self.podnet is None or self.pod is None:
            return
        a, p = parse_mirror(getattr(self.sim.args, "registry_mirror", None), self.podnet.net)
        self.mirror = RegistryMirror(a, p, self.sim.profile, self.sim.log)
        self.mirror.start(self.podnet.internet.pid)
        self.holder = self.podnet._holder(["sleep", "infinity"])
        self.podnet.wait_own_netns(self.holder.pid)
        self.podnet.attach(self.holder.pid, self.pod["ip"], owner=self)
        threading.Thread(target=self._scraper, name="cdi-scraper", daemon=True).start()
        self.started = True

    # ------------------------------------------------------------ scraping
    def scrape(self, key, ip, owner_uid):
        """Queue a scrape of https://ip:8443/metrics (non-blocking; the caller
        may hold the store lock). The result lands in results[key]."""
        if not self.started:
            return
        with self.lock:
            if key in self.busy:
                return
            self.busy.add(key)
        self.jobs.put((key, ip, owner_uid))

    def state(self):
        with self.lock:
            scrapes = {ip: dict(c) for ip, c in self.counts.items()}
        return {"controller_pod": self.pod, "flow": getattr(self.sim.args, "cdi_flow", None),
                "mirror": self.mirror.state() if self.mirror else None, "scrapes": scrapes}

    def take_results(self):
        with self.lock:
            out, self.results = self.results, {}
            return out

    def _scraper(self):
        enter_netns(self.holder.pid)
        while True:
            key, ip, owner = self.jobs.get()
            res = self._get(ip, owner)
            with self.lock:
                self.busy.discard(key)
                self.results[key] = res
                c = self.counts.setdefault(ip, {"ok": 0, "refused": 0, "error": 0})
                c[res[0]] += 1
                c["last"] = res[1] if res[0] == "error" else None
            self.sim.controllers.wake.set()

    @staticmethod
    def _get(ip, owner):
        rx = re.compile(r'kubevirt_cdi_import_progress_total\{ownerUID="%s"\} (\d{1,3}\.?\d*)'
                        % re.escape(owner))
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE          # InsecureSkipVerify, as CDI
        deadline = time.monotonic() + SCRAPE_TIMEOUT
        try:
            s = socket.create_connection((ip, 8443), timeout=SCRAPE_TIMEOUT)
        except ConnectionRefusedError:
            return ("refused", None)
        except OSError as e:
            return ("error", f"Get \"https://{ip}:8443/metrics\": dial tcp {ip}:8443: "
                             f"{'i/o timeout' if isinstance(e, socket.timeout) else e}")
        try:
            s.settimeout(max(0.05, deadline - time.monotonic()))
            t = ctx.wrap_socket(s)
            t.sendall(f"GET /metrics HTTP/1.1\r\nHost: {ip}:8443\r\nConnection: close\r\n\r\n"
                      .encode())
            body = b""
            while True:
                t.settimeout(max(0.05, deadline - time.monotonic()))
                b = t.recv(4096)
                if not b:
                    break
                body += b
            m = rx.search(body.decode("latin-1"))
            return ("ok", m.group(1) if m else None)
        except ConnectionRefusedError:
            return ("refused", None)
        except (OSError, ssl.SSLError) as e:
            return ("error", f"Get \"https://{ip}:8443/metrics\": {e}")
        finally:
            s.close()
