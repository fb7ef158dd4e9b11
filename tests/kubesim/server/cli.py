"""The command line (see the kubesim script): the options, the QEMU guest
image when `--guest qemu`, start-up (state dir, certificates, bootstrap,
the server, the controllers, the guest health thread, the state files) and
shutdown on SIGTERM/SIGINT (guests first)."""
import argparse
import os
import signal
import ssl
import sys
import threading
import time

from .app import Sim, serve
from .discovery import K8S_VERSIONS

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # tests/kubesim
REPO = os.path.dirname(os.path.dirname(HERE))


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="kubesim", description="A Kubernetes + KubeVirt + CDI API "
                                 "simulator with real guests (labvm's test cluster).")
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--port", type=int, default=6443)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--profile", default="fast", choices=["fast", "realistic"])
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--guest", default="process", choices=["process", "qemu", "none"])
    ap.add_argument("--guest-net", default=None,
                    help="127.A.0.0/16: the nodes' InternalIP addresses (127.A.255.N; default "
                         "127.(2 + port %% 254)); guests are on the pod network (--pod-cidr)")
    ap.add_argument("--pod-cidr", default=None,
                    help="the pod network (a /24; default 10.(port >> 8).(port & 255).0/24)")
    ap.add_argument("--backend-pod", default=None, metavar="FILE",
                    help="run labvm's backend as the Pod of FILE's Deployment "
                         "(conf/k8s/labvm-backend.yaml): its address is the host's on the "
                         "pod network")
    ap.add_argument("--backend-netns", action="store_true",
                    help="with --backend-pod: the Pod has a network namespace of its own on "
                         "the pod network (an address of the pod CIDR), held by the simulator; "
                         "STATE/backend-pod.json says which (pid, netns, ip) for labvm's "
                         "processes to join (tests/stack --backend pod)")
    ap.add_argument("--cdi-flow", default="populator", choices=["populator", "legacy"],
                    help="how CDI imports a registry/http DataVolume: populator (the "
                         "storage class is CSI: a prime-<uid> claim and importer-prime-<uid>, "
                         "CDI 1.66's default) or legacy (importer-<pvc> on the claim itself); "
                         "a DataVolume's cdi.kubevirt.io/storage.usePopulator overrides it")
    ap.add_argument("--registry-mirror", default=None, metavar="ADDR:PORT",
                    help="the only registry imports can reach (CDIConfig importProxy): a private "
                         "address outside the pod network (default 172.30.0.10:3128)")
    ap.add_argument("--dns", default="kube-dns",
                    help="the cluster DNS endpoints, comma-separated: kube-dns (CoreDNS Pod "
                         "k8s-app=kube-dns in kube-system, port 53), nodelocal (NodeLocal "
                         "DNSCache: a hostNetwork listener on 169.254.20.10:53), openshift "
                         "(Pod dns.operator.openshift.io/daemonset-dns=default in "
                         "openshift-dns, port 5353); none for no DNS (default kube-dns)")
    ap.add_argument("--rbac", default=None,
                    help="RBAC objects to load (default: conf/k8s/rbac.yaml of this repo)")
    ap.add_argument("--no-rbac", action="store_true", help="load no RBAC file")
    ap.add_argument("--seed", action="append", default=[])
    ap.add_argument("--nodes", type=int, default=None,
                    help="default 4; 1 with --guest qemu (the node is this machine)")
    ap.add_argument("--node-memory", default=None,
                    help="default 32Gi; with --guest qemu this machine's memory less 1 GiB")
    ap.add_argument("--node-cpus", type=int, default=None,
                    help="default 16; with --guest qemu this machine's CPUs")
    ap.add_argument("--max-guests", type=int, default=None,
                    help="VMIs a node runs at once (its devices.kubevirt.io/kvm); default "
                         "1000, with --guest qemu under TCG the node's CPUs")
    ap.add_argument("--guest-image-dir", default=None,
                    help="--guest qemu: the image folder (default .cache/guest-image, "
                         "built at start when missing or stale)")
    ap.add_argument("--watch-history", type=int, default=5000,
                    help="events kept for watches; older resourceVersions get 410 Expired")
    ap.add_argument("--admission", action="append", default=[],
                    help="extra admission plugins: OwnerReferencesPermissionEnforcement")
    ap.add_argument("--alpn", default="http/1.1",
                    help="the ALPN protocols offered (kube-apiserver: h2,http/1.1; a client "
                         "that picks h2 gets GOAWAY HTTP_1_1_REQUIRED, counted in /_sim/stats)")
    ap.add_argument("--k8s-version", default="1.34", choices=list(K8S_VERSIONS),
                    help="the Kubernetes minor to behave as (/version; from 1.35 a "
                         "WebSocket pods/exec needs create as well as get)")
    ap.add_argument("--no-api", action="append", default=[], metavar="GROUP",
                    help="do not serve this API group (its operator or CRDs not installed: "
                         "cdi.kubevirt.io, k8s.cni.cncf.io, subresources.kubevirt.io, ...): "
                         "absent from discovery, 404 on its paths; repeatable")
    ap.add_argument("--no-kvm", action="store_true",
                    help="nodes without /dev/kvm: devices.kubevirt.io/kvm allocatable 0 "
                         "(capacity unchanged), so a VM schedules only with KubeVirt's "
                         "useEmulation")
    ap.add_argument("--kubevirt-emulation", action="store_true",
                    help="the KubeVirt CR's spec.configuration.developerConfiguration."
                         "useEmulation: true (launcher pods ask for no kvm device)")
    ap.add_argument("--no-policy-enforcement", action="store_true",
                    help="a CNI without NetworkPolicy support: policies are stored and served, "
                         "nothing enforces them")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    a.alpn = [p.strip() for p in a.alpn.split(",") if p.strip()]
    if not a.alpn or any(p not in ("h2", "http/1.1") for p in a.alpn):
        ap.error("--alpn takes h2 and/or http/1.1")
    a.host = a.host.strip("[]")
    from resources import GROUPS
    for g in a.no_api:
        if g not in GROUPS or g == "":
            ap.error(f"--no-api: {g!r} is not an API group the simulator serves "
                     f"({', '.join(sorted(x for x in GROUPS if x))})")
    if a.rbac is None and not a.no_rbac:
        d = os.path.join(REPO, "conf", "k8s", "rbac.yaml")
        a.rbac = d if os.path.exists(d) else None
    if a.backend_netns and not a.backend_pod:
        ap.error("--backend-netns needs --backend-pod")
    if a.no_rbac:
        a.rbac = None
    if a.registry_mirror:
        import ipaddress
        from cdinet import parse_mirror
        try:
            from podnet import pod_cidr_for_port
            parse_mirror(a.registry_mirror, ipaddress.ip_network(a.pod_cidr or
                                                                 pod_cidr_for_port(a.port)))
        except ValueError as e:
            ap.error(str(e))
    dns = [x.strip() for x in a.dns.split(",") if x.strip()]
    if dns == ["none"]:
        dns = []
    bad = [x for x in dns if x not in ("kube-dns", "nodelocal", "openshift")]
    if bad:
        ap.error(f"--dns: unknown {', '.join(bad)} (kube-dns, nodelocal, openshift or none)")
    a.dns = dns
    if a.time_scale <= 0:
        ap.error("--time-scale must be > 0")
    if a.guest == "qemu":
        import qemu_guest
        cap = qemu_guest.node_capacity()
        a.accel = qemu_guest.accelerator()
        # under TCG a guest is one to two busy host threads: the node takes two
        # guests per host CPU (four on 2 cores: the kubeadm-cluster lesson's
        # three machines boot together, slower), memory permitting
        defaults = {"nodes": 1, "node_memory": f"{cap['memory_mib']}Mi", "node_cpus": cap["cpus"],
                    "max_guests": 2 * cap["cpus"] if a.accel == "tcg" else 0}
        a.launcher_overhead = qemu_guest.host_overhead_mib(accel=a.accel) * 2**20
    else:
        a.accel = None
        defaults = {"nodes": 4, "node_memory": "32Gi", "node_cpus": 16, "max_guests": 0}
        a.launcher_overhead = None      # KubeVirt's own estimate per VMI
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.nodes < 1:
        ap.error("--nodes must be >= 1")
    if a.max_guests < 0:
        ap.error("--max-guests must be >= 0 (0: no limit but memory)")
    return a


def prepare_qemu(args):
    """--guest qemu: the tools and the guest image (built now when missing or
    stale: about 80 s the first time, nothing when current)."""
    import shutil
    import qemu_guest
    missing = [t for t in ("qemu-system-x86_64", "qemu-img", "cloud-localds")
               if not shutil.which(t)]
    if missing:
        raise SystemExit(f"kubesim: --guest qemu needs {', '.join(missing)} (Debian packages "
                         "qemu-system-x86 qemu-utils cloud-image-utils; tests/deps installs them)")
    d = args.guest_image_dir or qemu_guest.DEFAULT_IMAGE_DIR
    t0 = time.monotonic()
    print(f"kubesim: guest image {d}: building when needed", file=sys.stderr, flush=True)
    try:
        qemu_guest.build_image(d, log=sys.stderr)
    except qemu_guest.GuestError as e:
        raise SystemExit(f"kubesim: {e}") from None
    if not qemu_guest.image_ready(d):
        raise SystemExit(f"kubesim: no guest image in {d} after the build")
    args.guest_image_dir = d
    print(f"kubesim: guest image ready after {time.monotonic() - t0:.1f} s; QEMU guests use "
          f"{args.accel.upper()}, at most {args.max_guests or 'any number of'} at once per node, "
          f"{(args.launcher_overhead or 0) >> 20} MiB host overhead each", file=sys.stderr,
          flush=True)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.makedirs(args.state_dir, exist_ok=True)
    sd = os.path.abspath(args.state_dir)
    for f in ("ready", "backend-pod.json", "reaper-pod.json"):
        try:
            os.unlink(os.path.join(sd, f))
        except FileNotFoundError:
            pass
    import shutil
    shutil.rmtree(os.path.join(sd, "guests"), ignore_errors=True)
    os.makedirs(os.path.join(sd, "guests"), exist_ok=True)
    if args.guest == "qemu":
        prepare_qemu(args)
    from tls import make_certs
    sim = Sim(args)
    sim.ca_crt, crt, key = make_certs(sd, args.host)
    if sim.podnet:
        try:
            sim.podnet.start()
        except Exception as e:  # noqa: BLE001
            sim.podnet.stop()
            raise SystemExit(f"kubesim: the pod network did not start: {e}") from None
    sim.bootstrap()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    ctx.set_alpn_protocols(args.alpn)
    try:
        srv = serve(sim, ctx)
    except OSError as e:
        raise SystemExit(f"kubesim: cannot listen on {args.host}:{args.port}: {e}") from None
    sim.controllers.start()
    try:
        sim.sandboxes_up()
    except Exception as e:  # noqa: BLE001
        sim.controllers.stop_all()
        sim.podnet.stop()
        raise SystemExit(f"kubesim: the network of the simulator's own Pods: {e}") from None
    try:
        sim.cdi_net.start()
    except Exception as e:  # noqa: BLE001
        sim.controllers.stop_all()
        sim.podnet.stop()
        raise SystemExit(f"kubesim: CDI's Pod and the registry mirror: {e}") from None

    def health():
        while True:
            time.sleep(0.3)
            try:
                sim.controllers.check_guests()
            except Exception:  # noqa: BLE001
                pass
    threading.Thread(target=health, daemon=True, name="guest-health").start()
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True,
                         name="http")
    t.start()
    host = args.host if ":" not in args.host else f"[{args.host}]"
    url = f"https://{host}:{args.port}"
    sim.write_state_files(url)
    print(f"kubesim: ready {url}", flush=True)

    done = threading.Event()

    def on_signal(signum, frame):
        done.set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not done.wait(1):
        pass
    sim.log("stopping: guests first")
    threading.Thread(target=srv.shutdown, daemon=True).start()
    sim.controllers.stop_all()
    sim.sessnets.stop()
    if sim.podnet:
        sim.podnet.stop()
    try:
        os.unlink(os.path.join(sd, "ready"))
    except OSError:
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
