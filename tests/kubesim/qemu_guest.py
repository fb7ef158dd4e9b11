"""Real QEMU guests for the cluster simulator (`--guest qemu`).

A QemuGuest is one VMI's virt-launcher + QEMU: a Debian 12 guest booted from
the image that `tests/kubesim/guest-image/build` makes (raw ext4 `base.img`,
`vmlinuz`, `initrd-tiny.img`), with

- the root disk a qcow2 overlay on the read-only raw base, exactly KubeVirt's
  ephemeral volume (`qemu-img create -f qcow2 -b base.img -F raw`); the
  containerDisk and the golden-PVC (`ephemeral`) cases are the same here; the
  overlay is removed with the guest;
- the cloud-init user-data (the Secret's `userdata`) delivered as a NoCloud
  seed: an iso9660 volume labelled `cidata` on a second virtio disk, as
  KubeVirt's cloudInitNoCloud attaches it, with meta-data `instance-id` and
  `local-hostname` = the VMI name;
- user-mode networking (the guest is 10.0.2.15, as behind KubeVirt's
  masquerade binding): with `net` (the simulator's pod network) QEMU runs in
  the pod's own network namespace, whose eth0 has the pod IP, and forwards
  0.0.0.0:agent_port there to the guest's 8899 while the guest's own traffic
  leaves from the pod IP (so NetworkPolicy applies to the VM); without `net`
  (direct use, tests/qemu/t900) the host's `ip:agent_port` (a loopback
  address) is forwarded instead;
- Multus secondary networks with KubeVirt's bridge binding (`session_nets`
  from the simulator, `sessnets` its sessnet.SessionNetworks): per network a
  second virtio NIC with the interface's MAC on a tap `tap<hash>` in the
  pod's namespace, which QEMU creates; the CNI attachment (a veth from the
  node's bridge, pod side `<hash>-nic`) and the tap are ports of the in-pod
  bridge `k6t-<hash>` (kubevirt/kubevirt pkg/network/setup/netpod
  bridgeBindingSpec, pkg/network/link/names.go); the guest's own cloud-init
  configures its address from the NoCloud seed's `network-config` (the
  VMI's cloudInitNoCloud network data, as virt-launcher writes it);
- the serial port (ttyS0) on a unix socket that this object holds from boot
  on; `console()` hands out one end of a socketpair carrying raw bytes both
  ways (KubeVirt's `plain.kubevirt.io` stream). One client at a time: a new
  console() disconnects the previous client, like KubeVirt's console kick.
  Output while no client is attached is kept in a small ring buffer
  (`serial_log()`), and not replayed unless asked (`console(replay=True)`);
- the QEMU guest agent channel (`org.qemu.guest_agent.0`, as KubeVirt always
  adds it); `exec()` runs a command through it (`guest-exec`), without
  touching the console;
- KVM only when real hardware virtualisation is there (kvm_intel / kvm_amd;
  `kvm_pvm` crashes guests), otherwise TCG; a watchdog kills QEMU when its log
  shows `internal error` (a KVM emulation failure pauses QEMU forever).

Interface: the guest-driver contract of guests.py (ProcessGuest), plus a few
extras:

    g = QemuGuest(name, workdir, userdata, ip, memory_mib, cpus, disk,
                  boot_delay=0.0, env=None, hostname=None, log=None,
                  agent_port=8899, image_dir=None)
    g.start()            # non-blocking: overlay + seed + launch; raises GuestError
    g.alive()            # the QEMU process runs (False after a guest poweroff)
    s = g.console()      # connected socket, raw bytes both ways; kicks the previous one
    rc, out, err = g.exec(cmd, timeout)   # sh -c cmd as root, via the guest agent
    g.stop()             # ACPI powerdown, kill after 5 s; removes overlay, seed, sockets
    g.rss(), g.pss()     # bytes of the QEMU process
    extras: g.started_at, g.first_serial_at (monotonic), g.error (why QEMU
    was killed), g.exit_code(), g.serial_log(), g.agent_connected(),
    g.osinfo(), g.qmp(cmd), console(replay=True)

boot_delay is ignored (a real guest takes its own time) and so is env: the
process guests' LABVM_AGENT_LISTEN=<ip>:8899 must not reach a real guest,
whose agent listens on 0.0.0.0:8899 behind the port forward. `hostname`
(default: name) is the NoCloud local-hostname.

`disk` is {"kind": "containerDisk", "image": ...}, {"kind": "ephemeral",
"claimName": ...}, {"kind": "dataVolume", "name": ...} or {"kind":
"persistentVolumeClaim", "claimName": ...} (kinds compared case-blind): all a
throw-away qcow2 overlay on base.img, except that a dataVolume or
persistentVolumeClaim disk with a "path" key keeps its overlay at that path
(created on first use, kept by stop()), so that its writes outlive the VM as
a real clone's would.

Memory and CPUs are clamped to what this machine holds (`node_capacity()`);
placement (refusing VMIs that do not fit) is the simulator's job, with
`node_capacity()` and `host_overhead_mib()` as the figures a node would report.

Run `python3 tests/kubesim/qemu_guest.py --help` for a standalone check.
"""
import atexit
import base64
import json
import os
import re
import selectors
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import guests

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGE_BUILD = os.path.join(REPO, "tests", "kubesim", "guest-image", "build")
DEFAULT_IMAGE_DIR = os.environ.get("LABVM_GUEST_IMAGE_DIR") or os.path.join(REPO, ".cache", "guest-image")
GUEST_AGENT_PORT = 8899          # the labvm agent's port inside the guest
RING_BYTES = 64 * 1024           # serial output kept while no client listens
CLIENT_BACKLOG = 1 << 20         # output queued for a slow console client before dropping
MIN_MEMORY_MIB = 256
HOST_RESERVE_MIB = 1024          # what a node keeps for itself (kubelet's system-reserved)
TB_SIZE_MIB = 256                # TCG translation cache (part of each guest's RSS)
KERNEL_APPEND = "root=/dev/vda rw console=ttyS0,115200 mitigations=off"


class GuestError(Exception):
    pass


# --- the machine ----------------------------------------------------------------
def accelerator():
    """'kvm' only with real hardware virtualisation (kvm_intel or kvm_amd loaded
    and /dev/kvm usable); otherwise 'tcg'. LABVM_QEMU_ACCEL=kvm|tcg overrides.
    kvm_pvm (nested, no vmx/svm) exposes /dev/kvm but the stock Debian kernel
    dies on it with a KVM internal error, hence the module check."""
    forced = os.environ.get("LABVM_QEMU_ACCEL")
    if forced in ("kvm", "tcg"):
        return forced
    hw = os.path.isdir("/sys/module/kvm_intel") or os.path.isdir("/sys/module/kvm_amd")
    if hw and os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "kvm"
    return "tcg"


def _meminfo_mib(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) // 1024
    return 0


def node_capacity():
    """What a node would report as allocatable: {"cpus", "memory_mib"}."""
    return {"cpus": os.cpu_count() or 1,
            "memory_mib": max(MIN_MEMORY_MIB, _meminfo_mib("MemTotal") - HOST_RESERVE_MIB)}


def host_overhead_mib(memory_mib=1024, accel=None):
    """Host memory a guest costs beyond its own RAM (QEMU itself, and the TCG
    translation cache); KubeVirt adds a similar per-VMI overhead to the
    virt-launcher pod's memory request."""
    return 128 + (TB_SIZE_MIB if (accel or accelerator()) == "tcg" else 0)


def clamp(memory_mib, cpus):
    """Memory and vCPUs bounded to what one guest can have on this machine."""
    cap = node_capacity()
    cpus = max(1, min(int(cpus or 1), cap["cpus"]))
    memory_mib = max(MIN_MEMORY_MIB, min(int(memory_mib or 1024), cap["memory_mib"]))
    return memory_mib, cpus


def image_paths(image_dir=None):
    d = image_dir or DEFAULT_IMAGE_DIR
    return {k: os.path.join(d, k) for k in ("base.img", "vmlinuz", "initrd-tiny.img")}


def image_ready(image_dir=None):
    d = image_dir or DEFAULT_IMAGE_DIR
    return all(os.path.exists(p) for p in image_paths(d).values()) and \
        os.path.exists(os.path.join(d, "recipe.sha256"))


def build_image(image_dir=None, log=None):
    """Run the image build (a no-op when its stamp matches). Needs root."""
    d = image_dir or DEFAULT_IMAGE_DIR
    r = subprocess.run([IMAGE_BUILD, "--out", d], stdout=log or subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise GuestError(f"guest image build failed (rc {r.returncode}):\n{r.stdout or ''}")
    return r.stdout


# every live guest of this process, so an exiting simulator leaves no QEMU behind
_LIVE = set()


def _spawn(fn):
    """Start QEMU from the simulator's one long-lived spawner thread:
    `setpriv --pdeathsig KILL` fires when the thread that forked exits, so with
    that thread it fires only when the simulator itself dies (even by SIGKILL)."""
    return guests.spawner().call(fn)


@atexit.register
def _kill_all():
    for g in list(_LIVE):
        try:
            g.stop(timeout=0)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


class QemuGuest:
    kind = "qemu"

    def __init__(self, name, workdir, userdata, ip, memory_mib=1024, cpus=1, disk=None,
                 boot_delay=0.0, env=None, hostname=None, log=None,
                 agent_port=GUEST_AGENT_PORT, image_dir=None, accel=None, append_extra="",
                 instance_id=None, net=None, pod_mac=None, networkdata=None, session_nets=(),
                 sessnets=None, resolv_conf=None, **_ignored):
        # boot_delay: a real guest takes the time it takes. env: the process
        # guests' LABVM_AGENT_LISTEN=<ip>:8899 must NOT reach a real guest (its
        # agent listens on 0.0.0.0:8899, behind the port forward), so it is ignored.
        if not name:
            raise GuestError("a guest needs a name")
        self.name = name
        # stable per VM, as KubeVirt's NoCloud meta-data (<vmi>.<namespace>):
        # cloud-init runs its per-instance modules (runcmd) once per disk
        self.instance_id = instance_id or name
        self.hostname = re.sub(r"[^a-z0-9-]+", "-", (hostname or name).lower()).strip("-")[:63] or "guest"
        self.workdir = os.path.abspath(workdir)
        self.userdata = userdata.encode() if isinstance(userdata, str) else bytes(userdata or b"")
        self.ip = ip
        # podnet.PodNetwork: QEMU runs in the pod's own network namespace, on
        # the pod network at ip; user networking inside it forwards the pod's
        # 8899 to the guest and masquerades the guest's traffic behind the pod
        # address (KubeVirt's masquerade binding), so NetworkPolicy applies
        self.net = net
        self.pod_mac = pod_mac           # the pod interface's macAddress (KubeVirt's)
        self.networkdata = networkdata   # cloudInitNoCloud network data: network-config
        # bridge-binding secondary networks (sessnet.py), only on the pod network
        self.session_nets = list(session_nets) if net and sessnets else []
        self.sessnets = sessnets
        self.resolv_conf = resolv_conf   # the cluster DNS for user networking
        self.agent_port = int(agent_port)
        self.requested = (memory_mib, cpus)
        self.memory_mib, self.cpus = clamp(memory_mib, cpus)
        self.disk = dict(disk or {"kind": "containerDisk", "image": "debian-12"})
        self.image_dir = image_dir or DEFAULT_IMAGE_DIR
        self.accel = accel or accelerator()
        self.append_extra = append_extra
        self.log = log or (lambda msg: None)
        self.proc = None
        self.error = None            # why the guest died, when we know
        self.started_at = None
        self.first_serial_at = None
        self._stopped = False
        self._lock = threading.Lock()
        self._ring = bytearray()
        self._client = None          # our end of the current console socketpair
        self._kicked = []            # previous clients, for the serial thread to close
        self._pending = bytearray()  # output queued for the client
        self._serial = None
        self._wake_r, self._wake_w = None, None
        self._threads = []
        self._sockdir = None
        self._persistent_disk = False
        self._qga_lock = threading.Lock()
        self._qga_buf = b""

    # --- paths ----------------------------------------------------------------
    def _p(self, leaf):
        return os.path.join(self.workdir, leaf)

    def _sock(self, leaf):
        return os.path.join(self._sockdir, leaf)

    @property
    def persistent_disk(self):
        """A DataVolume or PVC disk with a "path" outlives the VM (KubeVirt
        clones the golden image into it); everything else is throw-away."""
        kind = str(self.disk.get("kind", "")).lower()
        return kind in ("datavolume", "persistentvolumeclaim", "pvc") and bool(self.disk.get("path"))

    @property
    def overlay_path(self):
        if self.persistent_disk:
            return os.path.abspath(self.disk["path"])
        return self._p("disk.qcow2")

    @property
    def seed_path(self):
        return self._p("cloudinit.iso")

    @property
    def log_path(self):
        return self._p("qemu.log")

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    # --- start ----------------------------------------------------------------
    def start(self):
        """Create the overlay and the NoCloud seed, and launch QEMU. Returns at
        once (the guest boots in the background); raises GuestError when QEMU
        cannot be started."""
        if self.proc:
            raise GuestError(f"{self.name}: already started")
        img = image_paths(self.image_dir)
        for what, p in img.items():
            if not os.path.exists(p):
                raise GuestError(f"guest image missing: {p} (run {IMAGE_BUILD})")
        base = os.path.realpath(img["base.img"])   # pin this build's files
        kernel = os.path.realpath(img["vmlinuz"])
        initrd = os.path.realpath(img["initrd-tiny.img"])
        os.makedirs(self.workdir, exist_ok=True)
        # unix socket paths are limited to 107 bytes
        if len(self._p("serial.sock")) < 100:
            self._sockdir = self.workdir
        else:
            self._sockdir = tempfile.mkdtemp(prefix="qg-", dir="/tmp")
        for leaf in ("serial.sock", "qmp.sock", "qga.sock"):
            try:
                os.unlink(self._sock(leaf))
            except FileNotFoundError:
                pass

        # root disk: qcow2 overlay on the raw read-only base (KubeVirt's ephemeral volume)
        ov = self.overlay_path
        self._persistent_disk = self.persistent_disk
        if not (self._persistent_disk and os.path.exists(ov)):
            os.makedirs(os.path.dirname(ov), exist_ok=True)
            _run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", base, "-F", "raw", ov])
            os.chmod(ov, 0o640)

        # NoCloud seed: user-data from the Secret, meta-data from the VMI
        seed_dir = tempfile.mkdtemp(prefix="seed-", dir=self.workdir)
        try:
            ud = os.path.join(seed_dir, "user-data")
            md = os.path.join(seed_dir, "meta-data")
            with open(ud, "wb") as f:
                f.write(self.userdata or b"")
            with open(md, "w") as f:
                f.write(f"instance-id: {self.instance_id}\n"
                        f"local-hostname: {self.hostname}\n")
            nc = []
            if self.networkdata:
                nd = os.path.join(seed_dir, "network-config")
                with open(nd, "w") as f:
                    f.write(self.networkdata)
                nc = [f"--network-config={nd}"]
            _run(["cloud-localds", *nc, self.seed_path, ud, md])
        finally:
            shutil.rmtree(seed_dir, ignore_errors=True)

        cmd = self.qemu_command(kernel, initrd)
        with open(self._p("qemu.cmd"), "w") as f:
            f.write(" ".join(_shq(a) for a in cmd) + "\n")
        logf = open(self.log_path, "ab")
        ns = ["unshare", "--net", "--"] if self.net else []
        if self.net and self.resolv_conf:
            # user networking's DNS (10.0.2.3) forwards to the resolver of
            # QEMU's /etc/resolv.conf: the pod's, the cluster DNS, as the
            # guest's DNS is the launcher pod's on KubeVirt (clusterdns.py)
            rc = self._p("resolv.conf")
            with open(rc, "w") as f:
                f.write(self.resolv_conf)
            ns = ["unshare", "--net", "--mount", "--", "/bin/sh", "-c",
                  'mount --bind "$1" /etc/resolv.conf && shift && exec "$@"', "qemu-ns", rc]
        argv = (["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []) + \
            ns + cmd
        try:
            self.proc = _spawn(lambda: subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                close_fds=True, start_new_session=True))
        except OSError as e:
            raise GuestError(f"{self.name}: cannot run qemu-system-x86_64: {e}") from e
        finally:
            logf.close()
        self.started_at = time.monotonic()
        _LIVE.add(self)
        if self.net:
            try:
                self.net.attach(self.net.wait_own_netns(self.proc.pid), self.ip, self)
            except Exception as e:  # noqa: BLE001
                self._kill()
                raise GuestError(f"{self.name}: no pod network: {e}") from None
        self.log(f"{self.name}: qemu pid {self.proc.pid} ({self.accel}, {self.cpus} vCPU, "
                 f"{self.memory_mib} MiB, agent {self.ip}:{self.agent_port})")
        self._wake_r, self._wake_w = socket.socketpair()
        for fn in (self._serial_loop, self._watchdog):
            t = threading.Thread(target=fn, name=f"{fn.__name__}-{self.name}", daemon=True)
            t.start()
            self._threads.append(t)
        # an immediate failure (a taken host port, a bad option) ends QEMU
        # during its set-up; QMP answers only once the main loop runs
        deadline = time.monotonic() + 10
        while self.proc.poll() is None and time.monotonic() < deadline:
            try:
                self.qmp("query-status", timeout=2.0)
                break
            except (OSError, ValueError, GuestError):
                time.sleep(0.02)
        if self.proc.poll() is None and self.session_nets:
            try:
                self._wire_session_nets()
            except Exception as e:  # noqa: BLE001
                self.error = f"no secondary network: {e}"
                self.stop(timeout=0)
                raise GuestError(f"{self.name}: {self.error}") from None
        if self.proc.poll() is not None:
            _LIVE.discard(self)
            try:
                with open(self.log_path, "rb") as f:
                    tail = f.read()[-1500:].decode("utf-8", "replace").strip()
            except OSError:
                tail = ""
            self.error = f"qemu exited at once with {self.proc.returncode}: {tail}"
            self.stop(timeout=0)
            raise GuestError(f"{self.name}: {self.error}")
        return self

    @staticmethod
    def _names(s):
        """(tap, in-pod bridge, pod-side link) of a secondary network, as
        KubeVirt names them from the pod interface "pod<11 hex>"."""
        h = s["pod_iface"][3:]
        return f"tap{h}", f"k6t-{h}", f"{h}-nic"

    def _wire_session_nets(self):
        """KubeVirt's bridge binding in the pod's namespace: the CNI's veth
        (from the node's bridge) and QEMU's tap, ports of k6t-<hash>."""
        import sessnet
        pid = self.proc.pid
        for s in self.session_nets:
            tap, br, nic = self._names(s)
            deadline = time.monotonic() + 5
            while sessnet.in_netns(pid, f"ip link show dev {tap}", check=False).returncode:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise GuestError(f"QEMU made no tap {tap}")
                time.sleep(0.02)
            self.sessnets.attach(pid, s["domain"], s["bridge"], nic, None, None, self)
            sessnet.in_netns(pid, f"""
ip link add {br} type bridge
echo 1 > /proc/sys/net/ipv6/conf/{br}/disable_ipv6 || true
echo 1 > /proc/sys/net/ipv6/conf/{tap}/disable_ipv6 || true
ip link set {nic} master {br}
ip link set {tap} master {br}
ip link set {br} up
ip link set {nic} up
ip link set {tap} up
""")

    def qemu_command(self, kernel, initrd):
        if self.accel == "kvm":
            accel = ["-accel", "kvm", "-cpu", "host"]
        else:
            accel = ["-accel", f"tcg,thread=multi,tb-size={TB_SIZE_MIB}", "-cpu", "max"]
        append = KERNEL_APPEND + (" " + self.append_extra if self.append_extra else "")
        return ["qemu-system-x86_64", *accel,
                "-machine", "pc", "-m", str(self.memory_mib), "-smp", str(self.cpus),
                "-name", re.sub(r"[^\w.-]", "_", self.name),
                "-kernel", kernel, "-initrd", initrd, "-append", append,
                "-drive", f"file={self.overlay_path},format=qcow2,if=virtio,cache=unsafe,discard=unmap",
                "-drive", f"file={self.seed_path},format=raw,if=virtio,readonly=on",
                "-netdev", f"user,id=n0,hostname={self.hostname},"
                           f"hostfwd=tcp:{'0.0.0.0' if self.net else self.ip}:"
                           f"{self.agent_port}-:{GUEST_AGENT_PORT}",
                "-device", "virtio-net-pci,netdev=n0,romfile=" +
                           (f",mac={self.pod_mac}" if self.pod_mac else ""),
                *[a for i, sn in enumerate(self.session_nets) for a in (
                    "-netdev", f"tap,id=s{i},ifname={self._names(sn)[0]},script=no,downscript=no",
                    "-device", f"virtio-net-pci,netdev=s{i},romfile=" +
                               (f",mac={sn['mac']}" if sn.get("mac") else ""))],
                "-device", "virtio-rng-pci",
                "-chardev", f"socket,id=ser0,path={self._sock('serial.sock')},server=on,wait=off",
                "-serial", "chardev:ser0",
                "-device", "virtio-serial-pci",
                "-chardev", f"socket,id=qga0,path={self._sock('qga.sock')},server=on,wait=off",
                "-device", "virtserialport,chardev=qga0,name=org.qemu.guest_agent.0",
                "-qmp", f"unix:{self._sock('qmp.sock')},server=on,wait=off",
                "-display", "none", "-monitor", "none", "-vga", "none", "-nodefaults",
                "-pidfile", self._p("qemu.pid")]

    # --- state ----------------------------------------------------------------
    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self):
        return None if self.proc is None else self.proc.poll()

    def rss(self):
        """Resident bytes of the QEMU process (0 when it is not running)."""
        if not self.alive():
            return 0
        return guests.status_kb(self.proc.pid, "VmRSS") * 1024

    def serial_log(self):
        """The last RING_BYTES of serial output."""
        with self._lock:
            return bytes(self._ring)

    # --- the serial port ----------------------------------------------------------
    def console(self, replay=False):
        """A connected stream socket to the serial port: raw bytes both ways.
        A second call disconnects the previous client (KubeVirt's kick). With
        replay=True the client first gets the recent output from the ring."""
        if not self.alive():
            raise GuestError(f"{self.name}: not running")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        ours.setblocking(False)
        with self._lock:
            if self._client is not None:
                self._kicked.append(self._client)   # the serial thread closes it
            self._client = ours
            self._pending = bytearray(self._ring) if replay else bytearray()
        self._wake()
        return theirs

    def _wake(self):
        try:
            if self._wake_w is not None:
                self._wake_w.send(b"x")
        except OSError:
            pass

    def _serial_loop(self):
        # connect as soon as QEMU has made the socket (QEMU drops serial output
        # while no client is connected)
        path = self._sock("serial.sock")
        ser = None
        while self.alive() and not self._stopped:
            try:
                ser = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                ser.connect(path)
                break
            except OSError:
                _close(ser)
                ser = None
                time.sleep(0.01)
        if ser is None:
            return
        self._serial = ser
        ser.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(ser, selectors.EVENT_READ, "serial")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        client = None
        try:
            while not self._stopped:
                with self._lock:
                    cur, want_write = self._client, bool(self._pending)
                    kicked, self._kicked = self._kicked, []
                for k in kicked:
                    if k is client:
                        try:
                            sel.unregister(k)
                        except (KeyError, ValueError):
                            pass
                        client = None
                    _close(k)
                if cur is not client:
                    if client is not None:
                        try:
                            sel.unregister(client)
                        except (KeyError, ValueError):
                            pass
                    client = cur
                    if client is not None:
                        sel.register(client, selectors.EVENT_READ, "client")
                if client is not None:
                    ev = selectors.EVENT_READ | (selectors.EVENT_WRITE if want_write else 0)
                    try:
                        sel.modify(client, ev, "client")
                    except (KeyError, ValueError, OSError):
                        pass
                for key, mask in sel.select(timeout=1.0):
                    if key.data == "wake":
                        try:
                            self._wake_r.recv(4096)
                        except OSError:
                            pass
                    elif key.data == "serial":
                        try:
                            data = ser.recv(65536)
                        except BlockingIOError:
                            continue
                        except OSError:
                            data = b""
                        if not data:          # QEMU went away
                            return
                        if self.first_serial_at is None:
                            self.first_serial_at = time.monotonic()
                        with self._lock:
                            self._ring += data
                            if len(self._ring) > RING_BYTES:
                                del self._ring[:len(self._ring) - RING_BYTES]
                            if self._client is not None:
                                if len(self._pending) + len(data) <= CLIENT_BACKLOG:
                                    self._pending += data
                        self._flush_client()
                    elif key.data == "client":
                        if mask & selectors.EVENT_WRITE:
                            self._flush_client()
                        if mask & selectors.EVENT_READ:
                            try:
                                data = key.fileobj.recv(65536)
                            except BlockingIOError:
                                continue
                            except OSError:
                                data = b""
                            if not data:      # the client hung up
                                with self._lock:
                                    if self._client is key.fileobj:
                                        self._client = None
                                        self._pending = bytearray()
                                _close(key.fileobj)
                                try:
                                    sel.unregister(key.fileobj)
                                except (KeyError, ValueError):
                                    pass
                                if client is key.fileobj:
                                    client = None
                                continue
                            _send_all(ser, data)
        finally:
            sel.close()
            _close(ser)
            with self._lock:
                left = self._kicked + ([self._client] if self._client is not None else [])
                self._client, self._kicked = None, []
            for c in left:
                _close(c)

    def _flush_client(self):
        with self._lock:
            c = self._client
            if c is None or not self._pending:
                return
            try:
                n = c.send(self._pending)
                del self._pending[:n]
            except BlockingIOError:
                pass
            except OSError:
                self._pending = bytearray()

    # --- watchdog: a KVM emulation failure pauses QEMU instead of exiting -------------
    def _watchdog(self):
        pos = 0
        while self.alive() and not self._stopped:
            time.sleep(1.0)
            try:
                with open(self.log_path, "rb") as f:
                    f.seek(pos)
                    chunk = f.read()
                    pos += len(chunk)
            except OSError:
                continue
            m = re.search(rb"[^\n]*(internal error|emulation failure)[^\n]*", chunk, re.I)
            if m:
                self.error = "qemu: " + m.group(0).decode("utf-8", "replace").strip()
                self.log(f"{self.name}: {self.error}; killing qemu")
                self._kill()
                return

    # --- QMP and the guest agent -----------------------------------------------------
    def qmp(self, command, arguments=None, timeout=5.0):
        """One QMP command on a fresh connection; returns its 'return'."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(self._sock("qmp.sock"))
            f = s.makefile("rwb")
            json.loads(f.readline())                       # greeting
            f.write(b'{"execute":"qmp_capabilities"}\n')
            f.flush()
            _qmp_reply(f)
            msg = {"execute": command}
            if arguments:
                msg["arguments"] = arguments
            f.write(json.dumps(msg).encode() + b"\n")
            f.flush()
            return _qmp_reply(f)
        finally:
            _close(s)

    def _qga(self, command, arguments=None, timeout=5.0):
        """One guest-agent command (raises GuestError while the agent is not up)."""
        with self._qga_lock:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout)
            try:
                s.connect(self._sock("qga.sock"))
                # resynchronise: the channel may hold a stale half reply
                token = int.from_bytes(os.urandom(4), "big") & 0x7FFFFFFF
                s.sendall(b"\xff" + json.dumps({"execute": "guest-sync-delimited",
                                                "arguments": {"id": token}}).encode() + b"\n")
                f = s.makefile("rb")
                while True:
                    line = f.readline()
                    if not line:
                        raise GuestError("guest agent closed the channel")
                    line = line.lstrip(b"\xff").strip()
                    if not line:
                        continue
                    try:
                        if json.loads(line).get("return") == token:
                            break
                    except ValueError:
                        continue
                msg = {"execute": command}
                if arguments:
                    msg["arguments"] = arguments
                s.sendall(json.dumps(msg).encode() + b"\n")
                while True:
                    line = f.readline()
                    if not line:
                        raise GuestError("guest agent closed the channel")
                    line = line.strip()
                    if not line:
                        continue
                    r = json.loads(line)
                    if "error" in r:
                        raise GuestError(f"guest agent: {r['error'].get('desc', r['error'])}")
                    return r.get("return")
            except (OSError, ValueError) as e:
                raise GuestError(f"guest agent not reachable: {e}") from e
            finally:
                _close(s)

    def agent_connected(self, timeout=2.0):
        """True once the QEMU guest agent answers (KubeVirt's AgentConnected)."""
        try:
            self._qga("guest-ping", timeout=timeout)
            return True
        except GuestError:
            return False

    def osinfo(self, timeout=2.0):
        """The guest agent's guest-get-osinfo (what KubeVirt shows as guestOSInfo)."""
        return self._qga("guest-get-osinfo", timeout=timeout)

    def exec(self, cmd, timeout=30.0, stdin=None):
        """Run `sh -c cmd` (or an argv list) in the guest as root through the
        QEMU guest agent; returns (exit code, stdout bytes, stderr bytes), like
        ProcessGuest.exec; 124 when it outlives `timeout` (it is left running
        in the guest). Waits (within `timeout`) for the guest agent while the
        guest boots; raises GuestError when the guest is not running or the
        agent never answers."""
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        args = {"path": argv[0], "arg": argv[1:], "capture-output": True,
                "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                        "HOME=/root", "LANG=C.UTF-8"]}
        if stdin is not None:
            args["input-data"] = base64.b64encode(stdin if isinstance(stdin, bytes)
                                                  else stdin.encode()).decode()
        deadline = time.monotonic() + timeout
        while True:
            if not self.alive():
                raise GuestError(f"{self.name}: not running")
            try:
                pid = self._qga("guest-exec", args, timeout=max(1.0, min(5.0, deadline - time.monotonic())))["pid"]
                break
            except GuestError as e:
                if time.monotonic() > deadline or "not reachable" not in str(e):
                    raise
                time.sleep(0.5)
        while True:
            st = self._qga("guest-exec-status", {"pid": pid})
            if st.get("exited"):
                out = base64.b64decode(st.get("out-data", ""))
                err = base64.b64decode(st.get("err-data", ""))
                rc = st.get("exitcode")
                if rc is None:
                    rc = 128 + int(st.get("signal") or 0)
                return rc, out, err
            if time.monotonic() > deadline:
                return 124, b"", b"\nkubesim: command timed out\n"
            time.sleep(0.05)

    def pss(self):
        """Proportional set size of the QEMU process in bytes."""
        if not self.alive():
            return 0
        try:
            with open(f"/proc/{self.proc.pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    # --- stop -----------------------------------------------------------------------
    def stop(self, timeout=5.0):
        """Power the guest off (ACPI power button through QMP), kill QEMU if it
        is still there after `timeout` seconds, then remove the overlay (unless
        it is a persistent DataVolume disk), the seed and the sockets.
        Idempotent; returns True if the guest shut down by itself."""
        clean = False
        with self._lock:
            first = not self._stopped
            self._stopped = True
        if self.alive() and timeout > 0:
            try:
                self.qmp("system_powerdown", timeout=min(3.0, timeout))
            except (OSError, ValueError, GuestError) as e:
                self.log(f"{self.name}: system_powerdown: {e}")
            try:
                self.proc.wait(timeout)
                clean = True
            except subprocess.TimeoutExpired:
                pass
        self._kill()
        if self.net:
            self.net.detach(self.ip, self)
        if self.session_nets:
            self.sessnets.detach(self)
        if first:
            self._wake()
            for t in self._threads:
                if t is not threading.current_thread():
                    t.join(2.0)
            if not any(t.is_alive() for t in self._threads):
                for w in (self._wake_r, self._wake_w):
                    _close(w)
                self._wake_r = self._wake_w = None
            if self.proc is not None:   # the console output next to qemu.log, for post-mortems
                try:
                    with open(self._p("serial.log"), "wb") as f:
                        f.write(self.serial_log())
                except OSError:
                    pass
            for leaf in ("disk.qcow2", "cloudinit.iso", "qemu.pid"):
                if leaf == "disk.qcow2" and self._persistent_disk:
                    continue
                _unlink(self._p(leaf))
            if self._sockdir:
                for leaf in ("serial.sock", "qmp.sock", "qga.sock"):
                    _unlink(self._sock(leaf))
                if self._sockdir != self.workdir:
                    shutil.rmtree(self._sockdir, ignore_errors=True)
        _LIVE.discard(self)
        return clean

    def _kill(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.kill()
            except OSError:
                pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass

    def __repr__(self):
        return (f"QemuGuest({self.name!r}, ip={self.ip}:{self.agent_port}, "
                f"pid={self.pid}, alive={self.alive()})")


# --- helpers --------------------------------------------------------------------
def _run(argv):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise GuestError(f"{' '.join(argv)} failed (rc {r.returncode}): {r.stdout.strip()}")


def _qmp_reply(f):
    while True:
        line = f.readline()
        if not line:
            raise GuestError("QMP closed the connection")
        r = json.loads(line)
        if "return" in r:
            return r["return"]
        if "error" in r:
            raise GuestError(f"QMP: {r['error'].get('desc', r['error'])}")
        # an event: skip


def _send_all(sock, data):
    view = memoryview(data)
    deadline = time.monotonic() + 5
    while view:
        try:
            n = sock.send(view)
            view = view[n:]
        except BlockingIOError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.005)
        except OSError:
            return


def _close(s):
    if s is None:
        return
    try:
        s.close()
    except OSError:
        pass


def _unlink(p):
    try:
        os.unlink(p)
    except OSError:
        pass


def _shq(a):
    return a if re.fullmatch(r"[-\w.,:=/@+]+", a) else "'" + a.replace("'", "'\\''") + "'"


if __name__ == "__main__":
    import runpy
    runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "guest-image", "try-guest"), run_name="__main__")
