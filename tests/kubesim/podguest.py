"""Pods as guests: what the kubelet runs for a pod that is not a
virt-launcher (a container, through the same runtime as VM guests).

A PodGuest is a ProcessGuest (own mount, UTS and PID namespaces, a
copy-on-write overlay root, the state dir hidden) whose PID 1 is the
container's command instead of a cloud-init, run the way a container runtime
runs it:

- the image: every image name maps to the same root filesystem, an overlay of
  this host's root (Debian 12 with python3, bash, coreutils, util-linux:
  "debian:12", "debian:bookworm-slim", "python:3" ... all read the same tree).
  An image whose name contains "doesnotexist", or matches a `--refuse-image`
  pattern, is refused by the registry (ErrImagePull, then ImagePullBackOff),
  before any guest exists.
- capabilities: the container runtime's default set (CHOWN, DAC_OVERRIDE,
  FOWNER, FSETID, KILL, SETGID, SETUID, SETPCAP, NET_BIND_SERVICE, NET_RAW,
  SYS_CHROOT, MKNOD, AUDIT_WRITE, SETFCAP) minus `securityContext.capabilities.
  drop` (`ALL`: none) plus `add`, really applied with setpriv: the bounding,
  inheritable and ambient sets, so a root process in the container holds
  exactly those. `allowPrivilegeEscalation: false` is no_new_privs. Exec'd
  processes (kubectl exec, probes) get the same.
- seccomp: with the effective profile RuntimeDefault (controllers/pods.py
  decides) the command and every exec'd process run under the runtime's
  default profile (seccomp_exec.py: keyctl, add_key, bpf, unshare, mount ...
  fail with EPERM), installed just before setpriv and the exec, as runc
  does; Unconfined (or no profile: the kubelet's default) installs none.
- /dev is the container's own tmpfs (null, zero, full, random, urandom, tty,
  a private devpts, shm) with `terminationMessagePath` (default
  /dev/termination-log) a file the kubelet reads when the container ends.
- Secret volumes are read-only bind mounts of the Secret's keys (mode
  `defaultMode`, 0644 by default) at each volumeMount's mountPath.
- stdout and stderr go to the container's log (`DIR/guests/.../container.log`).
- environment: PATH, HOSTNAME, HOME=/root, TERM=xterm when exec'd with a tty,
  and the container's `env` values.
- network: on the simulator's pod network (podnet.py) the pod has its own
  network namespace with the pod IP, attached before its command starts,
  exactly as a VM guest; exec and probes enter it too.
"""
import os
import pty
import signal
import struct
import subprocess
import termios
import fcntl
import glob
import time

from guests import GUEST_PATH, HERE, GuestError, ProcessGuest, _children, _sq, spawner

DEFAULT_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
                "SETPCAP", "NET_BIND_SERVICE", "NET_RAW", "SYS_CHROOT", "MKNOD", "AUDIT_WRITE",
                "SETFCAP"]
TERMINATION_LOG = "/dev/termination-log"
SECCOMP_PROFILES = ("RuntimeDefault",)     # what PodGuest(seccomp=...) can apply
with open(os.path.join(HERE, "seccomp_exec.py")) as _f:
    SECCOMP_EXEC = _f.read()


def kill_exec(p):
    """SIGKILL an exec'd process (Popen of its nsenter) and the process
    group it leads in the container (its own session: spawn_exec)."""
    for pid in _children(p.pid) + [p.pid]:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


def seccomp_missing():
    """Why RuntimeDefault cannot be applied on this machine, or None."""
    if glob.glob("/usr/lib/python3/dist-packages/seccomp.cpython-*.so"):
        return None
    return "the RuntimeDefault seccomp profile needs Debian's python3-seccomp (tests/deps)"


def capabilities(sc):
    """The container's capability set (upper case, no CAP_ prefix) from its securityContext."""
    caps = (sc or {}).get("capabilities") or {}
    drop = {c.upper().removeprefix("CAP_") for c in caps.get("drop") or []}
    add = [c.upper().removeprefix("CAP_") for c in caps.get("add") or []]
    have = [] if "ALL" in drop else [c for c in DEFAULT_CAPS if c not in drop]
    for c in add:
        if c not in have and c != "ALL":
            have.append(c)
    return have


class PodGuest(ProcessGuest):
    kind = "pod"

    def __init__(self, name, workdir, ip, command, env=None, caps=(), no_new_privs=False,
                 volumes=(), working_dir=None, termination_path=TERMINATION_LOG,
                 hostname=None, log=None, hide=(), net=None, seccomp=None, resolv_conf=None):
        super().__init__(name, workdir, None, ip, hostname=hostname or name, log=log,
                         hide=hide, net=net, resolv_conf=resolv_conf)
        self.command = list(command)
        self.cenv = dict(env or {})
        self.caps = list(caps)
        self.no_new_privs = no_new_privs
        if seccomp not in (None,) + SECCOMP_PROFILES:
            raise GuestError(f"seccomp profile {seccomp!r} is not supported")
        self.seccomp = seccomp
        self.volumes = list(volumes)     # [(mountPath, {relpath: (bytes, mode)})]
        self.working_dir = working_dir or "/"
        self.termination_path = termination_path or TERMINATION_LOG
        self.env = {}                    # no LABVM_AGENT_LISTEN in a container
        self.killed_by = 0

    # ------------------------------------------------------------ helpers
    def _setpriv(self):
        # the seccomp filter first (it needs CAP_SYS_ADMIN, or no_new_privs), then the caps
        pre = []
        if self.seccomp == "RuntimeDefault":
            pre = ["/usr/bin/python3", "-I", "-S", "-c", SECCOMP_EXEC,
                   ",".join(self.caps) or "-", "--"]
        bset = ",".join(["-all"] + ["+" + c.lower() for c in self.caps])
        argv = ["setpriv", "--bounding-set=" + bset, "--inh-caps=-all", "--ambient-caps=-all"]
        if self.no_new_privs:
            argv.append("--no-new-privs")
        return pre + argv + ["--"]

    def _env(self, tty=False):
        e = {"PATH": GUEST_PATH, "HOSTNAME": self.hostname, "HOME": "/root"}
        if tty:
            e["TERM"] = "xterm"
        e.update(self.cenv)
        return ["/usr/bin/env", "-i"] + [f"{k}={v}" for k, v in e.items()]

    # -------------------------------------------------------------- start
    def start(self):
        os.makedirs(self.workdir, exist_ok=True)
        up, wk, mg = (os.path.join(self.workdir, d) for d in ("upper", "work", "merged"))
        for d in (up, wk, mg):
            os.makedirs(d, exist_ok=True)
        tl = os.path.join(self.workdir, "termination-log")
        open(tl, "wb").close()
        vols = ""
        for i, (path, files) in enumerate(self.volumes):
            src = os.path.join(self.workdir, f"vol{i}")
            os.makedirs(src, exist_ok=True)
            for rel, (data, mode) in files.items():
                p = os.path.join(src, rel)
                os.makedirs(os.path.dirname(p), exist_ok=True)
                with open(p, "wb") as f:
                    f.write(data)
                os.chmod(p, mode)
            vols += (f'mkdir -p "$M"{_sq(path)}\nmount --bind {_sq(src)} "$M"{_sq(path)}\n'
                     f'mount -o remount,bind,ro "$M"{_sq(path)}\n')
        hides = "".join(f'[ -d "$M{h}" ] && mount -t tmpfs -o size=4k,mode=000 hidden "$M{h}"\n'
                        for h in self.hide if os.path.isabs(h))
        wd = self.working_dir
        cmd = " ".join(_sq(a) for a in self._setpriv() + self._env() + self.command)
        setup = f"""set -e
# the pod's network is attached before the container runs (a line on stdin)
read -r _go || true
exec </dev/null
M={_sq(mg)}
mount -t overlay overlay -o lowerdir=/,upperdir={_sq(up)},workdir={_sq(wk)} "$M"
mount -t tmpfs -o mode=755,size=1m,nosuid dev "$M/dev"
for d in null zero full random urandom tty; do : > "$M/dev/$d"; mount --bind "/dev/$d" "$M/dev/$d"; done
mkdir -p "$M/dev/pts" "$M/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$M/dev/pts"
ln -s pts/ptmx "$M/dev/ptmx"; ln -s /proc/self/fd "$M/dev/fd"
ln -s /proc/self/fd/0 "$M/dev/stdin"; ln -s /proc/self/fd/1 "$M/dev/stdout"; ln -s /proc/self/fd/2 "$M/dev/stderr"
mount -t tmpfs -o mode=1777,size=64m shm "$M/dev/shm"
mount -t proc proc "$M/proc"
mount -t tmpfs -o mode=1777,size=512m tmpfs "$M/tmp"
mount -t tmpfs -o mode=755,size=64m tmpfs "$M/run"
mkdir -p "$M/run/lock" "$M"$(dirname {_sq(self.termination_path)})
: > "$M"{_sq(self.termination_path)}
mount --bind {_sq(tl)} "$M"{_sq(self.termination_path)}
{vols}{self._resolv_setup()}{hides}hostname {_sq(self.hostname)}
mkdir -p "$M"{_sq(wd)}
exec chroot "$M" /bin/sh -c 'cd "$1" && shift && exec "$@"' cd {_sq(wd)} {cmd}
"""
        argv = ["setpriv", "--pdeathsig", "KILL", "unshare", "--mount", "--uts", "--pid"] + \
            (["--net"] if self.net else []) + \
            ["--fork", "--kill-child", "/bin/sh", "-c", setup]
        logf = open(os.path.join(self.workdir, "container.log"), "ab")
        self.started_at = time.monotonic()

        def spawn():
            return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=logf,
                                    stderr=subprocess.STDOUT, close_fds=True,
                                    env={"PATH": GUEST_PATH, "LANG": "C.UTF-8"})
        self.proc = spawner().call(spawn)
        logf.close()
        if self.net:
            # the pod's eth0 (the pod network, podnet.py), as for a VM guest
            pid = self._init()
            try:
                if not pid:
                    raise GuestError("no sandbox process")
                self.net.attach(pid, self.ip, self)
            except Exception as e:  # noqa: BLE001
                self.stop()
                raise GuestError(f"pod {self.name}: no network: {e}") from None
        try:
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.close()
        except OSError as e:
            self.stop()
            raise GuestError(f"pod {self.name} did not start: {e}") from None
        # created = the command runs in its root (exec and probes need that);
        # a command that ends at once is the runtime's health check's business
        self.wait_ready(30)

    # ------------------------------------------------------------ the end
    def exit_code(self):
        """The container's exit code once it ended (128+N for signal N), else None."""
        if not self.proc:
            return None
        rc = self.proc.poll()
        if rc is None:
            return None
        if self.killed_by:
            # unshare does not pass a signal on faithfully: what killed PID 1 is known
            return 128 + self.killed_by
        return 128 - rc if rc < 0 else rc

    def kill(self, sig):
        """The container's PID 1 dies of sig (as the OOM killer's SIGKILL)."""
        pid = self._init()
        if not pid:
            raise GuestError("container is not running")
        self.killed_by = int(sig)
        os.kill(pid, sig)

    def _log_tail(self, n):
        try:
            with open(os.path.join(self.workdir, "container.log"), "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - n))
                return f.read()
        except OSError:
            return b""

    def logs(self):
        try:
            with open(os.path.join(self.workdir, "container.log"), "rb") as f:
                return f.read()
        except OSError:
            return b""

    def termination_message(self, fallback_to_logs=False):
        """The termination message file (at most 4096 bytes), or with
        FallbackToLogsOnError the log's last 80 lines / 2048 bytes when the
        file is empty and the container failed."""
        try:
            with open(os.path.join(self.workdir, "termination-log"), "rb") as f:
                msg = f.read(4096)
        except OSError:
            msg = b""
        if not msg.strip() and fallback_to_logs and self.exit_code():
            tail = self._log_tail(2048 + 256)
            # unshare's own complaint about its child's death is not the container's output
            lines = [ln for ln in tail.split(b"\n") if not ln.startswith(b"unshare: ")]
            msg = b"\n".join(lines[-80:])[-2048:]
        return msg.decode(errors="replace")

    # --------------------------------------------------------------- exec
    def _exec_argv(self, argv, tty):
        pid = self._init()
        if not pid or not self.alive():
            raise GuestError("container is not running")
        try:
            inside = os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid") \
                and os.readlink(f"/proc/{pid}/root") != "/"
        except OSError:
            inside = False
        if not inside:     # never run anything in the host's namespaces
            raise GuestError(f"container is not running (pid {pid} is not its init)")
        cmd = self._setpriv() + self._env(tty) + list(argv)
        # the runtime starts every exec'd process in a session of its own
        # (runc: setsid() in nsexec.c's STAGE_INIT, tty or not), so it leads
        # its own process group; with a tty that is also its controlling one
        if tty:
            cmd = ["setsid", "-c"] + cmd
        else:
            cmd = ["setsid", "-w"] + cmd
        return ["nsenter", "-t", str(pid), "-m", "-u", "-p", "-r", "-w"] + \
            (["-n"] if self.net else []) + ["--"] + cmd

    def spawn_exec(self, argv, tty=False, rows=24, cols=80):
        """Start argv in the container as `kubectl exec` does: -> (Popen, master fd or None).
        With tty the process runs on a new pty (its controlling terminal; the
        caller reads and writes the master); else stdin/stdout/stderr are pipes."""
        full = self._exec_argv(argv, tty)
        if tty:
            m, s = pty.openpty()
            fcntl.ioctl(m, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            try:
                p = subprocess.Popen(full, stdin=s, stdout=s, stderr=s, close_fds=True,
                                     start_new_session=True)
            finally:
                os.close(s)
            return p, m
        p = subprocess.Popen(full, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
        return p, None

    def exec(self, cmd, timeout=10):
        return self.exec_argv(["/bin/sh", "-c", cmd], timeout)

    def exec_argv(self, argv, timeout=10):
        p, _ = self.spawn_exec(argv)
        try:
            out, err = p.communicate(b"", timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_exec(p)
            out, err = p.communicate()
            return None, out, err
        return p.returncode, out, err

    def console(self):
        raise GuestError("a pod has no serial console")
