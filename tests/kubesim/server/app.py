"""The simulator's state and its HTTPS server: Sim (the store, the API
server, RBAC, the controllers, tokens, faults; the bootstrap objects, the
seeds and the state files) and the threaded TLS server the handlers run on."""
import json
import os
import secrets
import socket
import socketserver
import ssl
import sys
import threading
import time

import apiserver
import errors
import operators
import rbac
import util
from controllers import Controllers
from faults import Faults
from guests import driver_class
from podnet import PodNetwork
from profiles import Profile
from resources import BY_PLURAL
from schema import Validator
from store import Store

from .discovery import k8s_version
from .handlers import Handler
from .httpio import Dropped

BACKEND_SA = ("labs", "labvm-backend")


# --------------------------------------------------------------------- Sim
class Sim:
    def __init__(self, args):
        self.args = args
        v = getattr(args, "k8s_version", None) or "1.34"
        self.version = tuple(int(x) for x in v.split("."))
        self.version_info = k8s_version(v)
        # API groups not served (--no-api): discovery leaves them out, their paths are 404
        self.unserved = frozenset(getattr(args, "no_api", None) or ())
        self.state_dir = os.path.abspath(args.state_dir)
        self.log_lock = threading.Lock()
        self.store = Store(history=args.watch_history)
        self.validator = Validator()
        self.authz = rbac.Authorizer(self.store)
        self.api = apiserver.ApiServer(self.store, self.validator, self.authz,
                                       owner_ref_enforcement="OwnerReferencesPermissionEnforcement"
                                       in (args.admission or []))
        self.profile = Profile(args.profile, args.time_scale)
        self.faults = Faults()
        self.tokens = {}
        self.token_expiry = {}    # token -> time.time() after which it is refused
        self.token_lock = threading.Lock()
        self.rotations = 0
        self.guest_class = driver_class(args.guest)
        self.guest_net = self._guest_net(args.guest_net, args.port)
        # the pod network (podnet.py): every guest has its own network namespace on it
        self.podnet = PodNetwork(args.port, args.pod_cidr, log=self.log)
        self.sandboxes = []        # running_pod()s with a network namespace of their own
        self.dns = None            # clusterdns.ClusterDNS (--dns)
        # Multus session networks (sessnet.py): a bridge per NAD, veths into guests
        from guests import spawner
        from sessnet import SessionNetworks
        self.sessnets = SessionNetworks(spawn=lambda fn: spawner().call(fn), log=self.log)
        # what a node reserves per VMI beyond its memory (KubeVirt's launcher
        # overhead) and how many VMIs a node takes (virt-handler's kvm device
        # count): QEMU guests are real, so their node is this machine
        self.launcher_overhead = args.launcher_overhead
        self.guest_slots = args.max_guests
        self.consoles = {}        # (ns, name) -> WsSession
        self.console_lock = threading.Lock()
        self.requests = 0
        # requests by the protocol ALPN selected for their connection
        # ("http/1.1", "none"; "h2": connections refused) and their kind (rest,
        # watch, console, exec): a client that would speak h2 shows here
        # (--alpn h2,http/1.1)
        self.alpn_lock = threading.Lock()
        self.alpn = {}
        self.started = time.time()
        # CDI's controller Pod (its progress scrapes) and the registry mirror (cdinet.py)
        from cdinet import CdiNet
        self.cdi_net = CdiNet(self)
        self.controllers = Controllers(self)

    @staticmethod
    def _guest_net(spec, port):
        if not spec:
            # the nodes' InternalIP addresses (127.A.255.N; nothing listens
            # there): distinct per port, never 127.0/127.1 (localhost)
            return (127, 2 + port % 254)
        try:
            a, b, c, d = spec.split("/")[0].split(".")
            if int(a) != 127:
                raise ValueError
            return (127, int(b))
        except ValueError:
            raise SystemExit(f"kubesim: --guest-net must look like 127.A.0.0/16, not {spec!r}") \
                from None

    def log(self, msg):
        with self.log_lock:
            sys.stderr.write(f"kubesim: {msg.rstrip()}\n")
            sys.stderr.flush()

    def guest_dir(self, ns, name, uid):
        return os.path.join(self.state_dir, "guests", f"{ns}.{name}.{uid[:8]}")

    def alpn_count(self, proto, kind):
        with self.alpn_lock:
            d = self.alpn.setdefault(proto or "none", {})
            d[kind] = d.get(kind, 0) + 1

    def alpn_stats(self):
        with self.alpn_lock:
            return {k: dict(v) for k, v in self.alpn.items()}

    def user_for(self, token):
        exp = self.token_expiry.get(token)
        if exp is not None and time.time() >= exp:
            return None           # expired: 401, as a bound token past its exp
        return self.tokens.get(token)

    def rotate_backend_token(self, old_valid_s):
        """The kubelet's rotation of the backend Pod's projected token: a new
        token for the same ServiceAccount, projected through the atomic
        writer (STATE/serviceaccount/..data swapped), the old one valid for
        old_valid_s more seconds (its exp), then refused (401)."""
        with self.token_lock:
            old = self.backend_token
            self.backend_token = self.new_token(rbac.sa_user(*BACKEND_SA))
            self.token_expiry[old] = time.time() + old_valid_s
            self.project_token()
            if getattr(self, "url", None):
                self.write_kubeconfigs()
            self.rotations += 1
        self.log(f"backend token rotated ({self.rotations}); the old one is refused in "
                 f"{old_valid_s} s")
        return {"rotations": self.rotations, "old_valid_s": old_valid_s}

    def project_token(self):
        """STATE/serviceaccount as the kubelet projects a service-account
        volume (token, ca.crt, namespace), and STATE/backend-token a symlink
        to its token."""
        with open(self.ca_crt) as f:
            ca = f.read()
        atomic_project(os.path.join(self.state_dir, "serviceaccount"),
                       {"token": self.backend_token, "ca.crt": ca, "namespace": BACKEND_SA[0]})
        link = os.path.join(self.state_dir, "backend-token")
        tmp = link + ".tmp"
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        os.symlink(os.path.join("serviceaccount", "token"), tmp)
        os.replace(tmp, link)

    def new_token(self, user):
        t = secrets.token_urlsafe(32)
        self.tokens[t] = user
        return t

    # ---------------------------------------------------------------- bootstrap
    def bootstrap(self):
        admin = rbac.User("kubesim-admin", ["system:masters"])
        self.admin_token = self.new_token(admin)
        self.backend_token = self.new_token(rbac.sa_user(*BACKEND_SA))
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.api.create(admin, BY_PLURAL["namespaces"], "", {"metadata": {"name": ns}})
        for o in rbac.BUILTIN:
            res = BY_PLURAL[o["kind"].lower() + "s"]
            self.api.create(admin, res, "", util.deep(o))
        for ns in ("default", "kube-system"):
            self.api.create(admin, BY_PLURAL["serviceaccounts"], ns,
                            {"metadata": {"name": "default", "namespace": ns}})
        mem = self.args.node_memory
        kvm = str(self.guest_slots) if self.guest_slots else "1k"
        # --no-kvm: no /dev/kvm on the nodes: virt-handler's device plugin marks
        # every kvm device Unhealthy (KubeVirt pkg/virt-handler/device-manager/
        # generic_device.go:295-301), so the kubelet counts them in capacity only
        kvm_free = "0" if getattr(self.args, "no_kvm", False) else kvm
        for i in range(1, self.args.nodes + 1):
            name = f"node-{i}"
            ip = f"127.{self.guest_net[1]}.255.{i}"
            node = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": {
                        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64", "kubevirt.io/schedulable": "true",
                        "node-role.kubernetes.io/worker": ""}},
                    "spec": {"podCIDR": f"10.244.{i}.0/24"},
                    "status": {"capacity": {"cpu": str(self.args.node_cpus), "memory": mem,
                                            "pods": "110", "devices.kubevirt.io/kvm": kvm,
                                            "ephemeral-storage": "100Gi"},
                               "allocatable": {"cpu": str(self.args.node_cpus), "memory": mem,
                                               "pods": "110", "devices.kubevirt.io/kvm": kvm_free,
                                               "ephemeral-storage": "100Gi"},
                               "conditions": [{"type": "Ready", "status": "True",
                                               "reason": "KubeletReady",
                                               "message": "kubelet is posting ready status",
                                               "lastHeartbeatTime": util.now_rfc3339(),
                                               "lastTransitionTime": util.now_rfc3339()}],
                               "addresses": [{"type": "InternalIP", "address": ip},
                                             {"type": "Hostname", "address": name}],
                               "nodeInfo": {"kubeletVersion": self.version_info["gitVersion"],
                                            "containerRuntimeVersion": "containerd://1.7.0",
                                            "operatingSystem": "linux", "architecture": "amd64",
                                            "osImage": "Debian GNU/Linux 12 (bookworm)",
                                            "kernelVersion": os.uname().release}}}
            self.api.create(admin, BY_PLURAL["nodes"], "", node, keep_status=True)
        self.cdi_net.bootstrap(admin, self.api, BY_PLURAL)
        # the KubeVirt and CDI custom resources and KubeVirt's default role (operators.py)
        operators.install(self, admin)
        docs = []
        if self.args.rbac:
            docs += load_docs(self.args.rbac)
        for f in self.args.seed or []:
            docs += load_docs(f)
        # namespaces first, then the rest in file order
        docs.sort(key=lambda d: 0 if d.get("kind") == "Namespace" else 1)
        for d in docs:
            ns = (d.get("metadata") or {}).get("namespace")
            if ns and self.store.get("namespaces", "", ns) is None and d.get("kind") != "Namespace":
                self.api.create(admin, BY_PLURAL["namespaces"], "", {"metadata": {"name": ns}})
            self.seed(admin, d)
        if getattr(self.args, "backend_pod", None):
            self.backend_pod(admin, self.args.backend_pod)
        if getattr(self.args, "dns", None):
            from clusterdns import ClusterDNS
            self.dns = ClusterDNS(self, admin, self.args.dns)

    def backend_pod(self, admin, path):
        """labvm's backend as a Pod of the cluster (`--backend-pod FILE`): the
        Deployment of FILE (conf/k8s/labvm-backend.yaml) is created, validated
        as any Deployment, and its one replica is a Running Pod whose address
        is the pod network's node-side address, the one the host's route to the
        pod network uses as its source: labvm's processes on this host then
        reach the guests as that Pod, with the Deployment's labels, and
        NetworkPolicies treat them so (no node exemption for that address).

        With --backend-netns the Pod is a sandbox of its own instead, as a
        real kubelet makes one: an address of the pod CIDR (IPAM, as any
        pod's), a network namespace held by the simulator with eth0 on the
        pod network (sandboxes_up(), once the controllers run, so that the
        policies know the address before it is on the network), and the
        node's address as hostIP. labvm's processes join that namespace
        (tests/stack --backend pod); the host's .254 stays the node's, with
        the node exemption the API documents.

        The CronJob of FILE (the reaper) is created too, and one Pod of its
        Job runs as a sandbox of its own in either mode (reaper_pod())."""
        import hashlib
        docs = load_docs(path)
        dep = next((d for d in docs if d.get("kind") == "Deployment"), None)
        if dep is None:
            raise SystemExit(f"kubesim: --backend-pod {path}: no Deployment in it")
        dep = util.deep(dep)
        ns = (dep.get("metadata") or {}).get("namespace") or "default"
        if self.store.get("namespaces", "", ns) is None:
            self.api.create(admin, BY_PLURAL["namespaces"], "", {"metadata": {"name": ns}})
        dep["status"] = {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                         "readyReplicas": 1, "availableReplicas": 1}
        self.seed(admin, dep)
        tmpl = util.deep(dep["spec"]["template"])
        h = hashlib.sha256(json.dumps(tmpl, sort_keys=True).encode()).hexdigest()[:10]
        md = tmpl.get("metadata") or {}
        labels = dict(md.get("labels") or {}, **{"pod-template-hash": h})
        ip = self.podnet.node_ip if self.podnet else "127.0.0.1"
        host_ip = ip
        own = getattr(self.args, "backend_netns", False)
        if own:
            if not self.podnet:
                raise SystemExit("kubesim: --backend-netns needs the pod network")
            ip = self.controllers.ipam.alloc()
            host_ip = self.node_ip(1)
        name = f"{dep['metadata']['name']}-{h}-{secrets.token_hex(3)[:5]}"
        self.running_pod(admin, ns, name, labels, tmpl.get("spec") or {}, ip, host_ip,
                         annotations=md.get("annotations"), own_ip=own,
                         sandbox="backend-pod.json" if own else None)
        cj = next((d for d in docs if d.get("kind") == "CronJob"), None)
        if cj is not None and self.podnet:
            self.reaper_pod(admin, util.deep(cj))

    def reaper_pod(self, admin, cj):
        """The reaper CronJob (validated as any) and a Pod of its Job as a
        sandbox of its own on the pod network (STATE/reaper-pod.json names it;
        tests/stack runs labvm-reaper inside it): the jobTemplate's pod
        labels plus those the Job controller adds (batch.kubernetes.io/
        job-name and controller-uid, and the legacy job-name and
        controller-uid; k8s.io/api batch/v1 types.go), so NetworkPolicies see
        the reaper as a real cluster does, not as the backend. One Pod stands
        for every run's (a real CronJob makes a Job and a Pod, with a new
        address, each minute: same labels, same verdicts); no Job object, so
        the Pod has no ownerReference."""
        import uuid
        self.seed(admin, cj)
        ns = cj["metadata"].get("namespace") or "default"
        tmpl = util.deep(util.dig(cj, "spec", "jobTemplate", "spec", "template") or {})
        md = tmpl.get("metadata") or {}
        job = f"{cj['metadata']['name']}-{int(time.time() // 60)}"
        uid = str(uuid.uuid4())
        labels = dict(md.get("labels") or {}, **{
            "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": job,
            "controller-uid": uid, "job-name": job})
        self.running_pod(admin, ns, f"{job}-{secrets.token_hex(3)[:5]}", labels,
                         tmpl.get("spec") or {}, self.controllers.ipam.alloc(),
                         self.node_ip(1), annotations=md.get("annotations"), own_ip=True,
                         sandbox="reaper-pod.json")

    def node_ip(self, i):
        return f"127.{self.guest_net[1]}.255.{i}"

    def running_pod(self, admin, ns, name, labels, spec, ip, host_ip, annotations=None,
                    own_ip=False, sandbox=None):
        """A Running Pod on node-1 that no kubelet runs (the simulator's own:
        labvm's backend and reaper, the cluster DNS): its address `ip` (taken
        from the IPAM when own_ip), and with `sandbox` (a STATE file name) a
        network namespace of its own on the pod network once the controllers
        run (sandboxes_up(); "" for no file)."""
        if self.store.get("namespaces", "", ns) is None:
            self.api.create(admin, BY_PLURAL["namespaces"], "", {"metadata": {"name": ns}})
        now = util.now_rfc3339()
        spec = dict(spec, nodeName="node-1")
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": ns, "labels": labels,
                            "annotations": dict(annotations or {})},
               "spec": spec,
               "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                          "hostIP": host_ip, "startTime": now, "qosClass": "Burstable",
                          "conditions": [{"type": t, "status": "True",
                                          "lastTransitionTime": now}
                                         for t in ("Initialized", "Ready", "ContainersReady",
                                                   "PodScheduled")],
                          "containerStatuses": [
                              {"name": c["name"], "image": c.get("image", ""), "imageID": "",
                               "ready": True, "started": True, "restartCount": 0,
                               "state": {"running": {"startedAt": now}}}
                              for c in spec.get("containers") or []]}}
        self.seed(admin, pod)
        if own_ip:
            made = self.store.get("pods", ns, name)
            self.controllers.ipam.ips[made["metadata"]["uid"]] = ip   # the address is taken
        if sandbox is not None:
            self.sandboxes.append({"name": name, "namespace": ns, "ip": ip, "file": sandbox})
        return ip

    def sandboxes_up(self):
        """The network namespaces of running_pod()'s sandboxes, each held by a
        process of the simulator (PR_SET_PDEATHSIG, as the guests'), with eth0
        at the Pod's address; STATE/<file> names one for the processes that
        join it (pid, netns, ip, name, namespace, pod_cidr, node_ip). Run
        after the controllers started: attach() waits until the NetworkPolicy
        chains know the address. Then the cluster DNS (clusterdns.py)."""
        for b in self.sandboxes:
            holder = self.podnet._holder(["sleep", "infinity"])
            self.podnet.wait_own_netns(holder.pid)
            self.podnet.attach(holder.pid, b["ip"], owner=self)
            b["pid"] = holder.pid
            if b["file"]:
                info = {k: b[k] for k in ("name", "namespace", "ip")}
                info.update(pid=holder.pid, netns=f"/proc/{holder.pid}/ns/net",
                            pod_cidr=str(self.podnet.net), node_ip=self.podnet.node_ip)
                p = os.path.join(self.state_dir, b["file"])
                with open(p + ".tmp", "w") as f:
                    json.dump(info, f)
                os.replace(p + ".tmp", p)
            if b["file"] or getattr(self.args, "verbose", False):
                # (the cluster DNS's Pods are named in cluster-dns.json instead: a
                # plain start prints nothing before its ready line)
                self.log(f"Pod {b['namespace']}/{b['name']}: {b['ip']} in the network "
                         f"namespace of PID {holder.pid}")
            if b.get("serve"):
                b["serve"](holder.pid)
        if self.dns is not None:
            self.dns.up()

    def seed(self, admin, d):
        from resources import by_kind
        res = by_kind(d.get("apiVersion", ""), d.get("kind", ""))
        if res is None:
            raise SystemExit(f"kubesim: seed object of unknown kind {d.get('apiVersion')}/"
                             f"{d.get('kind')}")
        ns = (d.get("metadata") or {}).get("namespace") or ("default" if res.namespaced else "")
        if res.plural == "namespaces" and self.store.get("namespaces", "", d["metadata"]["name"]):
            return
        try:
            self.api.create(admin, res, ns, util.deep(d), keep_status=True)
        except errors.ApiError as e:
            raise SystemExit(f"kubesim: seed {res.kind} {ns}/{(d.get('metadata') or {}).get('name')}: "
                             f"{e.message}") from None

    def write_state_files(self, url):
        sd = self.state_dir

        def w(name, text, mode=0o644):
            p = os.path.join(sd, name)
            tmp = p + ".tmp"
            with open(tmp, "w") as f:
                f.write(text)
            os.chmod(tmp, mode)
            os.replace(tmp, p)
        with open(self.ca_crt) as f:
            w("ca.crt", f.read())
        w("admin-token", self.admin_token + "\n")
        self.project_token()
        self.url = url
        self.write_kubeconfigs()
        w("ready", url + "\n")

    def write_kubeconfigs(self):
        sd = self.state_dir
        url = self.url

        def w(name, text, mode=0o644):
            p = os.path.join(sd, name)
            tmp = p + ".tmp"
            with open(tmp, "w") as f:
                f.write(text)
            os.chmod(tmp, mode)
            os.replace(tmp, p)
        for name, tok, user in (("kubeconfig", self.admin_token, "kubesim-admin"),
                                ("backend.kubeconfig", self.backend_token, "labvm-backend")):
            w(name, f"""apiVersion: v1
kind: Config
clusters:
- name: kubesim
  cluster:
    server: {url}
    certificate-authority: {os.path.join(sd, 'ca.crt')}
users:
- name: {user}
  user:
    token: {tok}
contexts:
- name: kubesim
  context: {{cluster: kubesim, user: {user}, namespace: labs}}
current-context: kubesim
""")


def atomic_project(target, files):
    """Project files into target as the kubelet's AtomicWriter does
    (kubernetes/kubernetes pkg/volume/util/atomic_writer.go Write): the data
    in a new hidden timestamped directory `..YYYY_MM_DD_HH_MM_SS.<random>`,
    user-visible `NAME -> ..data/NAME` symlinks, a `..data_tmp` symlink to
    the new directory renamed over `..data` (the one atomic step), then the
    previous timestamped directory removed. A reader that opens NAME sees
    the old file or the new one, never a mix; the new one is a new inode."""
    import tempfile
    os.makedirs(target, exist_ok=True)
    data = os.path.join(target, "..data")
    try:
        old = os.readlink(data)
    except OSError:
        old = None
    ts = tempfile.mkdtemp(prefix=time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime()),
                          dir=target)
    os.chmod(ts, 0o755)
    for name, text in files.items():
        p = os.path.join(ts, name)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, 0o644)
    for name in files:
        vis = os.path.join(target, name)
        if not os.path.islink(vis):
            os.symlink(os.path.join("..data", name), vis)
    tmp = os.path.join(target, "..data_tmp")
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    os.symlink(os.path.basename(ts), tmp)
    os.rename(tmp, data)
    if old and old != os.path.basename(ts):
        import shutil
        shutil.rmtree(os.path.join(target, old), ignore_errors=True)


def load_docs(path):
    import yaml
    with open(path) as f:
        text = f.read()
    docs = []
    if path.endswith(".json"):
        d = json.loads(text)
        docs = d if isinstance(d, list) else [d]
    else:
        docs = [d for d in yaml.safe_load_all(text) if d]
    out = []
    for d in docs:
        if isinstance(d, dict) and d.get("kind", "").endswith("List") and "items" in d:
            out.extend(d["items"])
        elif isinstance(d, dict):
            out.append(d)
    return out



class TLSServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, ssl.SSLError, socket.timeout, OSError, Dropped)):
            return
        super().handle_error(request, client_address)


class TLSServer6(TLSServer):
    address_family = socket.AF_INET6


def serve(sim, ctx):
    Handler.sim = sim
    cls = TLSServer6 if ":" in sim.args.host else TLSServer
    srv = cls((sim.args.host, sim.args.port), Handler, bind_and_activate=False)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True, do_handshake_on_connect=False)
    srv.server_bind()
    srv.server_activate()
    return srv

