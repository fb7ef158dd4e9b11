"""Host PIDs of a simulated guest's processes, for tests that freeze
(SIGSTOP) a guest agent or kill a guest: the process whose own network
namespace has the LISTEN socket on ip:port (the pod network gives each guest
its own namespace; the host's `ss` does not see inside), and the PID 1 of
the pid namespace it lives in."""
import os
import socket


def _has_address(pid, ip):
    """The network namespace of pid has ip as a local address (fib_trie)."""
    try:
        with open(f"/proc/{pid}/net/fib_trie") as f:
            lines = f.read().splitlines()
    except OSError:
        return False
    return any(ln.strip() == f"|-- {ip}" and i + 1 < len(lines) and
               "/32 host LOCAL" in lines[i + 1] for i, ln in enumerate(lines))


def _listen_inodes(pid, ip, port):
    mine = f"{socket.inet_aton(ip)[::-1].hex().upper()}:{port:04X}"
    anyaddr = f"00000000:{port:04X}"
    out = set()
    try:
        with open(f"/proc/{pid}/net/tcp") as f:
            next(f)
            for line in f:
                p = line.split()
                if p[3] != "0A":
                    continue
                # bound to the address, or to any address of a namespace that has it
                if p[1] == mine or (p[1] == anyaddr and _has_address(pid, ip)):
                    out.add(p[9])
    except OSError:
        pass
    return out


def listener_pid(ip, port=8899, name=b"agent"):
    """The PID of the process listening on ip:port (its cmdline naming
    `name`), or None."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if name not in f.read():
                    continue
        except OSError:
            continue
        inodes = _listen_inodes(d, ip, port)
        if not inodes:
            continue
        try:
            fds = {os.readlink(f"/proc/{d}/fd/{fd}") for fd in os.listdir(f"/proc/{d}/fd")}
        except OSError:
            continue
        if any(f"socket:[{i}]" in fds for i in inodes):
            return int(d)
    return None


def guest_init(pid):
    """The host PID of PID 1 of the pid namespace pid lives in."""
    while pid > 1:
        with open(f"/proc/{pid}/status") as f:
            st = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
        if st["NSpid"].split()[-1] == "1":
            return pid
        pid = int(st["PPid"])
    raise AssertionError("no guest init found")
