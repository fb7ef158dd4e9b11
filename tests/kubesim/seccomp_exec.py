"""The container runtime's default seccomp profile (`seccompProfile: {type:
RuntimeDefault}`), installed in the calling process before it execs the
container's command (the way runc installs it before the container's execve):

    /usr/bin/python3 -I -S seccomp_exec.py CAPS -- ARGV...

CAPS is the container's capability set (comma separated, no CAP_ prefix, as
podguest.capabilities() returns it; "-" for none): as in containerd's
DefaultProfile, a capability re-allows the syscalls it gates. podguest.py
passes this file's source with `-c` (the container's root is an overlay of
this host's, so /usr/bin/python3 and Debian's python3-seccomp are there).

The real profile (containerd contrib/seccomp/seccomp_default.go, moby
profiles/seccomp/default.json) is an allowlist with defaultAction
SCMP_ACT_ERRNO (EPERM). This filter is the equivalent denylist on x86_64
(and its i386 and x32 ABIs) for what a container without the gating
capabilities may not call; every denied call fails with EPERM, clone3 with
ENOSYS (as both profiles do, so that glibc falls back to clone, whose flags
are checked). Syscalls newer than the list are allowed here, unlike there.

- never allowed: keyctl, add_key, request_key (the kernel keyring is not
  namespaced), userfaultfd, kexec_load, kexec_file_load, pivot_root,
  swapon, swapoff, move_pages, uselib, ustat, sysfs, _sysctl, vm86, vm86old,
  nfsservctl, get_kernel_syms, create_module, query_module, lookup_dcookie,
  io_uring_setup/enter/register (dropped from moby's and containerd's
  profiles in 2023);
- personality unless its argument is 0, 8, 0x20000, 0x20008 or 0xffffffff;
- CAP_SYS_ADMIN: bpf (or CAP_BPF), perf_event_open (or CAP_PERFMON), mount,
  umount, umount2, unshare, setns, fanotify_init, name_to_handle_at,
  quotactl, fsopen, fsconfig, fsmount, fspick, open_tree, move_mount,
  mount_setattr, clone with a CLONE_NEW* flag (NS, UTS, IPC, USER, PID, NET,
  CGROUP), clone3;
- CAP_DAC_READ_SEARCH: open_by_handle_at; CAP_SYS_BOOT: reboot;
  CAP_SYS_CHROOT: chroot; CAP_SYS_MODULE: init_module, finit_module,
  delete_module; CAP_SYS_PACCT: acct; CAP_SYS_PTRACE: kcmp, pidfd_getfd;
  CAP_SYS_RAWIO: iopl, ioperm; CAP_SYS_TIME: settimeofday, stime,
  clock_settime, clock_adjtime; CAP_SYS_TTY_CONFIG: vhangup; CAP_SYS_NICE:
  get_mempolicy, mbind, set_mempolicy; CAP_SYSLOG: syslog.

ptrace and process_vm_readv/writev are allowed (both profiles allow them on
kernels >= 4.8), as are sethostname/setdomainname (the UTS namespace is the
container's; the capability check still applies).
"""
import ctypes
import errno
import os
import struct
import sys

NEVER = ["keyctl", "add_key", "request_key", "userfaultfd", "kexec_load", "kexec_file_load",
         "pivot_root", "swapon", "swapoff", "move_pages", "uselib", "ustat", "sysfs", "_sysctl",
         "vm86", "vm86old", "nfsservctl", "get_kernel_syms", "create_module", "query_module",
         "lookup_dcookie", "io_uring_setup", "io_uring_enter", "io_uring_register"]
# syscalls a capability re-allows (any of the capabilities in the key)
GATED = {
    ("SYS_ADMIN",): ["mount", "umount", "umount2", "unshare", "setns", "fanotify_init",
                     "name_to_handle_at", "quotactl", "fsopen", "fsconfig", "fsmount", "fspick",
                     "open_tree", "move_mount", "mount_setattr"],
    ("SYS_ADMIN", "BPF"): ["bpf"],
    ("SYS_ADMIN", "PERFMON"): ["perf_event_open"],
    ("DAC_READ_SEARCH",): ["open_by_handle_at"],
    ("SYS_BOOT",): ["reboot"],
    ("SYS_CHROOT",): ["chroot"],
    ("SYS_MODULE",): ["init_module", "finit_module", "delete_module"],
    ("SYS_PACCT",): ["acct"],
    ("SYS_PTRACE",): ["kcmp", "pidfd_getfd"],
    ("SYS_RAWIO",): ["iopl", "ioperm"],
    ("SYS_TIME",): ["settimeofday", "stime", "clock_settime", "clock_adjtime"],
    ("SYS_TTY_CONFIG",): ["vhangup"],
    ("SYS_NICE",): ["get_mempolicy", "mbind", "set_mempolicy"],
    ("SYSLOG",): ["syslog"],
}
CLONE_NEW = [0x00020000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000,
             0x02000000]     # NS, UTS, IPC, USER, PID, NET, CGROUP
PERSONALITY_OK = [0x0, 0x8, 0x20000, 0x20008, 0xffffffff]


def denied(caps):
    """-> the syscall names this profile refuses to a container holding caps."""
    caps = set(caps)
    out = list(NEVER)
    for gate, names in GATED.items():
        if not caps & set(gate):
            out += names
    return out


def _personality_filter():
    """A second, classic-BPF filter for personality's argument (libseccomp
    compares an argument once per rule, so "not one of five values" needs
    this). Filters stack: the stricter action wins."""
    ld, jeq, ret = 0x20, 0x15, 0x06        # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_RET|K
    allow, deny = 0x7fff0000, 0x00050000 | errno.EPERM
    prog = [(ld, 0, 0, 4)]                                # arch
    prog += [(jeq, 1, 0, 0xc000003e), (ret, 0, 0, allow)]  # AUDIT_ARCH_X86_64
    prog += [(ld, 0, 0, 0)]                               # nr (x86_64 135, x32 135|1<<30)
    prog += [(jeq, 2, 0, 135), (jeq, 1, 0, 0x40000087), (ret, 0, 0, allow)]
    prog += [(ld, 0, 0, 20), (jeq, 1, 0, 0), (ret, 0, 0, deny)]   # args[0] high word
    prog += [(ld, 0, 0, 16)]                              # args[0] low word
    n = len(PERSONALITY_OK)
    prog += [(jeq, n - i, 0, v) for i, v in enumerate(PERSONALITY_OK)]
    prog += [(ret, 0, 0, deny), (ret, 0, 0, allow)]
    buf = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in prog))
    fprog = struct.pack("HxxxxxxP", len(prog), ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    # PR_SET_SECCOMP, SECCOMP_MODE_FILTER (CAP_SYS_ADMIN held here: no no_new_privs)
    if libc.prctl(22, 2, ctypes.c_char_p(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def install(caps):
    if "/usr/lib/python3/dist-packages" not in sys.path:
        sys.path.append("/usr/lib/python3/dist-packages")
    import seccomp
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for a in (seccomp.Arch.X86, seccomp.Arch.X32):
        if a != seccomp.system_arch():
            f.add_arch(a)
    # no_new_privs is allowPrivilegeEscalation's business (setpriv, later), as with runc
    f.set_attr(seccomp.Attr.CTL_NNP, 0)
    eperm = seccomp.ERRNO(errno.EPERM)
    for name in denied(caps):
        try:
            f.add_rule(eperm, name)
        except (ValueError, RuntimeError):
            pass                           # not a syscall of these ABIs
    if "SYS_ADMIN" not in caps:
        for flag in CLONE_NEW:
            f.add_rule(eperm, "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
        f.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
    f.load()
    _personality_filter()


def main(argv):
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: seccomp_exec.py CAPS -- ARGV...\n")
        return 2
    caps = [c for c in argv[0].split(",") if c and c != "-"]
    try:
        install(caps)
    except Exception as e:  # noqa: BLE001 - the runtime refuses to create the container
        sys.stderr.write(f"kubesim: cannot apply the RuntimeDefault seccomp profile: {e}\n")
        return 128
    try:
        os.execvp(argv[2], argv[2:])
    except OSError as e:
        sys.stderr.write(f"kubesim: exec {argv[2]}: {e.strerror}\n")
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
