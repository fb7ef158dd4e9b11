"""Guest drivers: what runs "inside" a simulated VM once its VMI is Running.

The guest-driver interface (a second driver, e.g. qemu_guest.QemuGuest, plugs
in by implementing the same class shape; the simulator picks the driver with
`--guest process|qemu|none` and looks a QEMU driver up as
`qemu_guest.QemuGuest`):

    class Driver:
        def __init__(self, name, workdir, userdata, ip, memory_mib, cpus, disk,
                     boot_delay=0.0, env=None, hostname=None, log=None, net=None): ...
            name        the VMI name ("<namespace>/<name>" is not used: one
                        simulator serves names unique per namespace; the
                        simulator passes "<ns>.<name>" style unique names in
                        workdir only)
            workdir     a private, empty folder under the simulator's state dir
                        for this guest (overlay upper/work dirs, disk images,
                        logs, sockets); the driver may remove it in stop()
            userdata    bytes: the NoCloud user-data (from the Secret's key
                        `userdata` or `userData`, or inline), or None
            ip          the pod's address, also reported as the VMI's
                        ipAddress
            net         the simulator's pod network (podnet.PodNetwork): the
                        driver runs the guest in a network namespace of its
                        own and attaches it there with ip (net.attach), and
                        detaches it in stop(); every process guest process gets
                        LABVM_AGENT_LISTEN=0.0.0.0:8899. Without net (direct
                        use: bench.py, tests/qemu/t900) ip is a loopback
                        address of the host the agent listens on
            memory_mib, cpus   from the VMI's domain (requests / cpu cores)
            disk        {"kind": "containerDisk", "image": "..."} |
                        {"kind": "ephemeral", "claimName": "...", "pvc": {...}} |
                        {"kind": "dataVolume", "name": "...", "pvc": {...}} |
                        {"kind": "persistentVolumeClaim", "claimName": "...", "pvc": {...}}
            boot_delay  seconds from start() until cloud-init starts (the
                        profile's guest boot time); a real VM may ignore it
            env         extra environment for guest processes (dict)
            hostname    the guest's hostname (defaults to name)
            log         callable(str) for diagnostics
        def start(self): non-blocking; raises on immediate failure
        def alive(self) -> bool: the guest is still running
        def console(self) -> socket.socket: a connected stream socket to the
                        guest's first serial port (raw bytes both ways). Each
                        call is a new connection and replaces (closes) the
                        previous one; the simulator does the WebSocket framing
                        and kicks the previous WebSocket client itself.
        def exec(self, cmd, timeout) -> (exit_code, stdout_bytes, stderr_bytes):
                        run `sh -c cmd` inside the guest as root (raise
                        NotImplementedError where impossible)
        def stop(self): kill everything of the guest (no process may survive)
                        and discard its writes; idempotent; may block briefly
        def rss(self) -> int: resident memory of the guest in bytes (for stats)

ProcessGuest (below) is the default driver: the guest is a set of processes
in their own mount, UTS and PID namespaces, chrooted into a copy-on-write
overlay of the host's root (PLATFORM.md section 9). Its init (guest_init.py,
PID 1) runs the cloud-config; the serial console is a pty on the simulator's
side with a getty-like session inside the guest (a root login shell when the
cloud-config installed the serial-getty autologin drop-in, otherwise a login
prompt that never accepts). Killing PID 1 kills every process of the guest.
"""
import errno
import json
import os
import pty
import queue
import select
import shutil
import signal
import socket
import struct
import subprocess
import termios
import fcntl
import threading
import time

import cloudinit

HERE = os.path.dirname(os.path.abspath(__file__))
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DROPIN_DIR = "/etc/systemd/system/serial-getty@ttyS0.service.d"
AGENT_PORT = 8899


class Spawner:
    """Runs Popen calls on one long-lived thread, so that PR_SET_PDEATHSIG (which
    fires when the *thread* that forked exits) ties guests to the simulator's life."""

    def __init__(self):
        self.q = queue.Queue()
        t = threading.Thread(target=self._loop, name="guest-spawner", daemon=True)
        t.start()

    def _loop(self):
        while True:
            fn, box, ev = self.q.get()
            try:
                box.append((True, fn()))
            except BaseException as e:  # noqa: BLE001 - handed back to the caller
                box.append((False, e))
            ev.set()

    def call(self, fn):
        box, ev = [], threading.Event()
        self.q.put((fn, box, ev))
        ev.wait()
        ok, v = box[0]
        if not ok:
            raise v
        return v


SPAWNER = None
_SPAWNER_LOCK = threading.Lock()


def spawner():
    """The one spawner thread of this process (process and QEMU guests alike)."""
    global SPAWNER
    with _SPAWNER_LOCK:
        if SPAWNER is None:
            SPAWNER = Spawner()
    return SPAWNER


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _pidns(pid):
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def status_kb(pid, key):
    """A /proc/<pid>/status field in KiB (pid may be "self"); 0 when unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


class GuestError(Exception):
    pass


class ProcessGuest:
    kind = "process"

    def __init__(self, name, workdir, userdata, ip, memory_mib=1024, cpus=1, disk=None,
                 boot_delay=0.0, env=None, hostname=None, log=None, hide=(), net=None,
                 session_nets=(), sessnets=None, resolv_conf=None):
        self.name = name
        # the cluster DNS the guest is given (clusterdns.ClusterDNS.resolv_conf):
        # its /etc/resolv.conf, else the host's (the overlay's lower layer)
        self.resolv_conf = resolv_conf
        self.net = net            # podnet.PodNetwork: the guest gets its own network namespace
        # Multus secondary networks (sessnet.py): eth1, ... on their node's bridge
        self.session_nets = list(session_nets) if net and sessnets else []
        self.sessnets = sessnets
        self.workdir = workdir
        self.userdata = userdata
        self.ip = ip
        self.memory_mib = memory_mib
        self.cpus = cpus
        self.disk = disk or {}
        self.boot_delay = boot_delay
        self.hostname = (hostname or name)[:63]
        # on the pod network the agent listens on its normal address inside
        # the guest's own network namespace; without it, on the guest's own
        # loopback address
        self.env = {"LABVM_AGENT_LISTEN": f"{'0.0.0.0' if net else ip}:{AGENT_PORT}"}
        self.env.update(env or {})
        self.log = log or (lambda m: None)
        self.hide = [h for h in hide if h]
        self.proc = None          # the unshare process (host side)
        self.init_pid = None      # PID 1 of the guest, host pid
        self.lock = threading.RLock()
        self.stopped = False
        self.started_at = None
        # serial line
        self.master = None
        self.slave_name = None
        self.getty = None         # Popen of the nsenter running the getty
        self.getty_autologin = None
        self.console_sock = None  # our end of the current console connection
        self.pump = None

    def _resolv_setup(self):
        """The setup script's lines writing the guest's /etc/resolv.conf (in its
        overlay's upper layer), or nothing."""
        if not self.resolv_conf:
            return ""
        return f'rm -f "$M/etc/resolv.conf"; printf %s {_sq(self.resolv_conf)} > "$M/etc/resolv.conf"\n'

    # ---------------------------------------------------------------- start
    def start(self):
        os.makedirs(self.workdir, exist_ok=True)
        up, wk, mg = (os.path.join(self.workdir, d) for d in ("upper", "work", "merged"))
        for d in (up, wk, mg):
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(HERE, "guest_init.py")) as f:
            init_src = f.read()
        hides = "".join(f'[ -d "$M{h}" ] && mount -t tmpfs -o size=4k,mode=000 hidden "$M{h}"\n'
                        for h in self.hide if os.path.isabs(h))
        setup = f"""set -e
M={_sq(mg)}
mount -t overlay overlay -o lowerdir=/,upperdir={_sq(up)},workdir={_sq(wk)} "$M"
mount --rbind /dev "$M/dev"
# the guest's serial console is its own (a pty, bound here when the console
# first opens), never the host's serial port
[ -e "$M/dev/ttyS0" ] && mount --bind /dev/null "$M/dev/ttyS0"
mount -t proc proc "$M/proc"
mount -t tmpfs -o mode=1777,size=512m tmpfs "$M/tmp"
mount -t tmpfs -o mode=755,size=64m tmpfs "$M/run"
mkdir -p "$M/run/lock"
{self._resolv_setup()}{hides}hostname {_sq(self.hostname)}
exec chroot "$M" /usr/bin/python3 -I -S -c "$1"
"""
        plan = cloudinit.plan(self.userdata, self.hostname, dict(self.env))
        plan["boot_delay"] = self.boot_delay
        argv = ["setpriv", "--pdeathsig", "KILL", "unshare", "--mount", "--uts", "--pid"] + \
            (["--net"] if self.net else []) + \
            ["--fork", "--kill-child", "/bin/sh", "-c", setup, "guest-setup", init_src]
        logf = open(os.path.join(self.workdir, "guest.log"), "ab")
        self.started_at = time.monotonic()

        def spawn():
            return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=logf,
                                    stderr=subprocess.STDOUT, close_fds=True,
                                    env={"PATH": GUEST_PATH, "LANG": "C.UTF-8"})
        self.proc = spawner().call(spawn)
        logf.close()
        if self.net:
            # the guest's eth0, before its init reads the plan (cloud-init has a network)
            pid = self._init()
            try:
                if not pid:
                    raise GuestError("no init process")
                self.net.attach(pid, self.ip, self)
                for s in self.session_nets:
                    self.sessnets.attach(pid, s["domain"], s["bridge"], s["ifname"], s["mac"],
                                         s["addresses"], self)
            except Exception as e:  # noqa: BLE001
                self.stop()
                raise GuestError(f"guest {self.name}: no network: {e}") from None
        try:
            self.proc.stdin.write(json.dumps(plan).encode())
            self.proc.stdin.close()
        except OSError as e:
            self.stop()
            raise GuestError(f"guest {self.name} did not start: {e}") from None

    def _init(self):
        """Host pid of the guest's PID 1 (the child unshare forked)."""
        if self.init_pid:
            return self.init_pid
        if not self.proc:
            return None
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            kids = _children(self.proc.pid)
            if kids:
                self.init_pid = kids[0]
                return self.init_pid
            if self.proc.poll() is not None:
                return None
            time.sleep(0.005)
        return None

    def wait_ready(self, timeout=10):
        """Wait until the guest's init runs inside the chroot (for measurements)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = self._init()
            if pid:
                try:
                    if os.readlink(f"/proc/{pid}/root") != "/":
                        return True
                except OSError:
                    pass
            if self.proc and self.proc.poll() is not None:
                return False
            time.sleep(0.002)
        return False

    def alive(self):
        return bool(self.proc) and self.proc.poll() is None and not self.stopped

    # -------------------------------------------------------------- nsenter
    def _entered(self, timeout=10.0):
        """Host pid of the guest's init once it runs inside its own root, or
        GuestError. Until its setup has chrooted into the overlay, the init's
        root is the host's: nothing may be entered then (a command would
        write the host's file system), so wait for the chroot, briefly."""
        deadline = time.monotonic() + timeout
        while True:
            pid = self._init()
            if not pid or not self.alive():
                raise GuestError("guest is not running")
            try:
                if os.readlink(f"/proc/{pid}/root") != "/" and \
                        os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid"):
                    return pid
            except OSError:
                raise GuestError("guest is not running") from None
            if time.monotonic() > deadline:
                raise GuestError("guest is still booting (its init has not entered its root)")
            time.sleep(0.005)

    def _nsenter(self, argv, wd=None):
        pid = self._entered()
        if wd and argv[:2] == ["/usr/bin/env", "-i"]:
            argv = argv[:2] + ["-C", wd] + argv[2:]   # chdir inside the guest's root
        return ["nsenter", "-t", str(pid), "-m", "-u", "-p", "-r", "-w"] + \
            (["-n"] if self.net else []) + ["--"] + argv

    def _guest_env(self, extra=None):
        e = {"PATH": GUEST_PATH, "HOME": "/root", "LANG": "C.UTF-8", "USER": "root",
             "LOGNAME": "root", "SHELL": "/bin/bash"}
        e.update(self.env)
        e.update(extra or {})
        return ["/usr/bin/env", "-i"] + [f"{k}={v}" for k, v in e.items()]

    def exec(self, cmd, timeout=10):
        argv = self._nsenter(self._guest_env() + ["/bin/sh", "-c", cmd])
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out, err = p.communicate()
            return 124, out, err + b"\nkubesim: command timed out\n"
        return p.returncode, out, err

    # -------------------------------------------------------------- console
    def _autologin(self):
        try:
            pid = self._entered()
        except GuestError:
            return False
        d = f"/proc/{pid}/root{DROPIN_DIR}"
        try:
            for n in os.listdir(d):
                if not n.endswith(".conf"):
                    continue
                with open(os.path.join(d, n), errors="replace") as f:
                    for line in f:
                        s = line.strip()
                        if s.startswith("ExecStart=") and "--autologin root" in s:
                            return True
        except OSError:
            pass
        return False

    def _open_serial(self):
        if self.master is not None:
            return
        m, s = pty.openpty()
        fcntl.ioctl(m, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        self.master = m
        self.slave = s
        self._bind_ttyS0(os.ttyname(s))
        self.pump = threading.Thread(target=self._pump_out, name=f"serial-{self.name}",
                                     daemon=True)
        self.pump.start()
        threading.Thread(target=self._getty_loop, name=f"getty-{self.name}", daemon=True).start()

    def _bind_ttyS0(self, pts):
        """The console pty is the guest's /dev/ttyS0, as KubeVirt's serial
        console is (the agent's /tty-size sets its window size there)."""
        try:
            pid = self._entered()
        except GuestError as e:
            self.log(f"console: /dev/ttyS0: {e}")
            return
        r = subprocess.run(["nsenter", "-t", str(pid), "-m", "-r", "mount", "--bind", pts,
                            "/dev/ttyS0"], stdin=subprocess.DEVNULL, capture_output=True)
        if r.returncode:
            self.log(f"console: /dev/ttyS0: {r.stderr.decode(errors='replace').strip()}")

    def _spawn_getty(self):
        auto = self._autologin()
        if auto:
            argv = self._nsenter(self._guest_env({"TERM": "xterm-256color"}) +
                                 ["/usr/bin/setsid", "-c", "/bin/bash", "-l"], wd="/root")
        else:
            script = ('h=$(hostname); while :; do printf "\\r\\nDebian GNU/Linux 12 %s ttyS0'
                      '\\r\\n\\r\\n%s login: " "$h" "$h"; read -r u || exit 0; [ -z "$u" ] && continue; '
                      'printf "Password: "; stty -echo; read -r p; stty echo; sleep 2; '
                      'printf "\\r\\nLogin incorrect\\r\\n"; done')
            argv = self._nsenter(self._guest_env({"TERM": "vt220"}) +
                                 ["/usr/bin/setsid", "-c", "/bin/sh", "-c", script], wd="/")
        p = subprocess.Popen(argv, stdin=self.slave, stdout=self.slave, stderr=self.slave,
                             close_fds=True, start_new_session=True)
        self.getty, self.getty_autologin = p, auto

    def _getty_loop(self):
        last = 0.0
        while not self.stopped and self.alive():
            with self.lock:
                if self.getty is None or self.getty.poll() is not None:
                    wait = 0.2 - (time.monotonic() - last)
                    if wait > 0:
                        time.sleep(wait)
                    try:
                        self._spawn_getty()
                    except (GuestError, OSError) as e:
                        self.log(f"getty: {e}")
                    last = time.monotonic()
                elif not self.getty_autologin and self._autologin():
                    # `systemctl restart serial-getty@ttyS0` after the drop-in appeared
                    self._kill_getty()
                    self.getty = None
                    continue
            time.sleep(0.1)

    def _kill_getty(self):
        """Kill the getty's whole session inside the guest (as a tty hangup would)."""
        p = self.getty
        if p is None:
            return
        sids = set()
        for c in _children(p.pid):
            try:
                sids.add(os.getsid(c))
            except OSError:
                pass
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                if os.getsid(int(d)) in sids:
                    os.kill(int(d), signal.SIGKILL)
            except OSError:
                pass
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            p.wait(2)
        except subprocess.TimeoutExpired:
            pass

    def _pump_out(self):
        while not self.stopped:
            try:
                r, _, _ = select.select([self.master], [], [], 0.5)
                if not r:
                    continue
                data = os.read(self.master, 10240)
            except OSError as e:
                if e.errno == errno.EIO:
                    time.sleep(0.05)
                    continue
                return
            if not data:
                continue
            s = self.console_sock
            if s is not None:
                try:
                    s.sendall(data)
                except OSError:
                    pass

    def _pump_in(self, s):
        while not self.stopped:
            try:
                data = s.recv(10240)
            except OSError:
                data = b""
            if not data:
                break
            try:
                os.write(self.master, data)
            except OSError:
                break
        with self.lock:
            if self.console_sock is s:
                self.console_sock = None
        try:
            s.close()
        except OSError:
            pass

    def console(self):
        if not self.alive():
            raise GuestError("guest is not running")
        with self.lock:
            self._open_serial()
            ours, theirs = socket.socketpair()
            old, self.console_sock = self.console_sock, ours
            if old is not None:
                try:
                    old.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            threading.Thread(target=self._pump_in, args=(ours,), daemon=True).start()
            return theirs

    # ----------------------------------------------------------------- stop
    def stop(self):
        with self.lock:
            if self.stopped:
                return
            self.stopped = True
            sock, self.console_sock = self.console_sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        pid = self.init_pid or (self._init() if self.proc and self.proc.poll() is None else None)
        # SIGKILL to the namespace's init kills every process in it; unshare (its
        # parent) then reaps it and exits. unshare is killed too only if it lingers.
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc:
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                try:
                    self.proc.kill()
                except ProcessLookupError:
                    pass
                try:
                    self.proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pass
        if self.getty is not None:
            try:
                self.getty.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        for fd in (self.master, getattr(self, "slave", None)):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.master = None
        if self.net:
            self.net.detach(self.ip, self)
        if self.session_nets:
            self.sessnets.detach(self)
        shutil.rmtree(self.workdir, ignore_errors=True)

    # ---------------------------------------------------------------- stats
    def pids(self):
        pid = self._init() if self.proc and self.proc.poll() is None else None
        if not pid:
            return []
        ns = _pidns(pid)
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit() and _pidns(int(d)) == ns:
                out.append(int(d))
        return out

    def rss(self):
        return sum(status_kb(p, "VmRSS") for p in self.pids()) * 1024

    def pss(self):
        return sum(_pss_kb(p) for p in self.pids()) * 1024


class NoGuest:
    """--guest none: no processes; the console answers with a notice."""
    kind = "none"

    def __init__(self, name, workdir, userdata, ip, memory_mib=1024, cpus=1, disk=None, **kw):
        self.name = name
        self.running = False

    def start(self):
        self.running = True

    def alive(self):
        return self.running

    def console(self):
        a, b = socket.socketpair()
        a.sendall(b"kubesim: this simulator runs no guests (--guest none)\r\n")
        threading.Thread(target=lambda: (a.recv(1), a.close()), daemon=True).start()
        return b

    def exec(self, cmd, timeout=10):
        raise NotImplementedError("no guests (--guest none)")

    def stop(self):
        self.running = False

    def rss(self):
        return 0


def _sq(s):
    return "'" + str(s).replace("'", "'\\''") + "'"


def driver_class(kind):
    if kind == "process":
        return ProcessGuest
    if kind == "none":
        return NoGuest
    if kind == "qemu":
        try:
            import qemu_guest  # noqa: WPS433 - optional second driver (issue 9)
        except ImportError as e:
            raise SystemExit(f"kubesim: --guest qemu needs tests/kubesim/qemu_guest.py "
                             f"(QemuGuest), which is not there: {e}") from None
        return qemu_guest.QemuGuest
    raise SystemExit(f"kubesim: unknown guest driver {kind!r} (process, qemu, none)")
