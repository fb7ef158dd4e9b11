#!/usr/bin/python3
"""labvm-console listens only where console_listen says (loopback in every
shipped config): the front end is its only client, and its stats page and
WebSocket must not be reachable from the network."""
import re
import socket

from labtest import env
from tap import T

t = T()
with open(env("LABVM_CONF")) as f:
    host, port = re.search(r"(?m)^console_listen = (\S+):(\d+)$", f.read()).groups()
port = int(port)


def listeners(port):
    """(address, family) of the sockets in LISTEN state on port, from /proc/net."""
    out = []
    for fam, path in (("ipv4", "/proc/net/tcp"), ("ipv6", "/proc/net/tcp6")):
        with open(path) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                addr, p = local.split(":")
                if state == "0A" and int(p, 16) == port:
                    if fam == "ipv4":
                        out.append((socket.inet_ntop(socket.AF_INET, bytes.fromhex(addr)[::-1]), fam))
                    else:
                        raw = bytes.fromhex(addr)
                        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                        out.append((socket.inet_ntop(socket.AF_INET6, raw), fam))
    return out


@t.test(name=f"the bridge listens on {host}:{port} only")
def only_there():
    ls = listeners(port)
    t.eq(ls, [(host, "ipv4")], "listening sockets on the console port")


@t.test(name="it answers on loopback; a non-loopback address of this host is refused")
def reachability():
    with socket.create_connection((host, port), timeout=3):
        pass
    others = [a for a in socket.gethostbyname_ex(socket.gethostname())[2]
              if not a.startswith("127.")]
    try:
        import subprocess
        out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
        others += [m for m in re.findall(r"inet (\d+\.\d+\.\d+\.\d+)", out) if not m.startswith("127.")]
    except OSError:
        pass
    for a in sorted(set(others)):
        s = socket.socket()
        s.settimeout(3)
        try:
            refused = s.connect_ex((a, port)) != 0
        finally:
            s.close()
        t.ok(refused, f"{a}:{port} refused")
    if not others:
        t.diag("this host has no non-loopback IPv4 address: the listener check above covers it")


@t.test(name="console tickets never reach the front ends' access logs")
def no_ticket_in_logs():
    import os
    import time
    import uuid
    from labtest import Api, frontends
    state = env("LABVM_STATE")
    for fe, url in frontends():
        sid = str(uuid.uuid4())
        marker = "v1.SECRET" + uuid.uuid4().hex
        log = os.path.join(state, "logs", f"{fe}-access.log")
        start = os.path.getsize(log) if os.path.exists(log) else 0
        Api("student61", base=url).request("GET", f"/console/{sid}?ticket={marker}")
        deadline = time.monotonic() + 15
        text = ""
        while time.monotonic() < deadline:  # lighttpd writes its access log in batches
            with open(log, errors="replace") as f:
                f.seek(start)
                text = f.read()
            if sid in text:
                break
            time.sleep(0.2)
        t.ok(sid in text, f"{fe}: the console request is in the access log")
        t.ok(marker not in text and "ticket=" not in text, f"{fe}: without its ticket")


t.done()
