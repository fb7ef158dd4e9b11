#!/usr/bin/python3
# timeout: 900
"""The console closes whenever the session ends, by every path: expiry by the
reaper, a failure, a VM that vanished, and an end while the bridge's database
listener is down (it re-checks when the database is back); and the bridge's
own close codes: 4429 (too many tabs), 4503 (database unavailable), 1008 (a
tab that does not read). 1011 (out of memory) is t525's (an LD_PRELOAD shim
makes one of the bridge's allocations fail).

Each case waits for the close with a generous limit and asserts the code and
the reason; none of them times anything."""
import asyncio
import base64
import os
import socket
import subprocess
import urllib.parse

import labvm_ticket as lt
from labconsole import Console, PrivateBridge, TcpProxy
from labtest import reaper_argv, Db, Kube, env, ready_lab, reset_world, ticket_url, vm_of, wait_until
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
FRONT = os.environ.get("LABVM_LIGHTTPD_URL") or env("LABVM_URL")
KEY = lt.load_key(conf=env("LABVM_CONF"))
loop = asyncio.new_event_loop()


def run(coro):
    return loop.run_until_complete(coro)


def reap(*args):
    r = subprocess.run(reaper_argv(*args), env=dict(os.environ, LABVM_CONF=env("LABVM_CONF")),
                       capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr


async def open_console(base, url, user, **kw):
    c = await Console.open(base, url, user, **kw)
    ok = await c.opened(60)
    if not ok:
        raise AssertionError(f"console did not open: {c.ctl} {c.code} {c.reason}")
    return c


def check_closed(c, code, reason_part, what):
    t.eq(c.code, code, f"{what}: close code ({c.reason!r})")
    t.ok(reason_part in (c.reason or ""), f"{what}: reason says {reason_part!r}", c.reason)
    m = c.closed_msg()
    t.ok(m and m.get("code") == code, f"{what}: the closed message came first", c.ctl[-3:])


@t.test(name="expiry by the reaper closes the open console (4410 session ended)")
def expiry():
    user = "student191"
    api, s = ready_lab(user)

    async def go():
        c = await open_console(FRONT, ticket_url(api, s["id"]), user)
        db.query("UPDATE sessions SET expires_at = now() - interval '1 second' WHERE id = %s",
                 s["id"])
        rc, out = reap()
        t.eq(rc, 0, "the reaper ran", out)
        t.ok("expired=1" in out, "and ended the session as expired", out)
        await c.closed(120)
        check_closed(c, 4410, "ended", "expired")
    run(go())
    t.eq(db.one("SELECT state, end_reason FROM sessions WHERE id = %s", s["id"]),
         ("ended", "expired"), "the row")


@t.test(name="a session that fails closes the open console (4410 session failed)")
def failure():
    user = "student192"
    api, s = ready_lab(user)

    async def go():
        c = await open_console(FRONT, ticket_url(api, s["id"]), user)
        # what every failure path writes (session.c fail(), the reaper)
        db.query("UPDATE sessions SET state = 'failed', end_reason = 'failed', "
                 "error = 't520: failed on purpose', ended_at = now() WHERE id = %s", s["id"])
        await c.closed(120)
        # (the bridge's notification path says "session ended" for a failed
        # session too; its check on connect says "session failed")
        check_closed(c, 4410, "session", "failed")
    run(go())
    kube.delete("virtualmachines", vm_of(s))
    kube.delete("secrets", vm_of(s) + "-cloudinit")


@t.test(name="a VM that vanishes closes the console; once the reaper marked the session "
             "failed, a reconnect is refused with 4410")
def vanished():
    user = "student193"
    api, s = ready_lab(user)

    async def go():
        c = await open_console(FRONT, ticket_url(api, s["id"]), user)
        kube.delete("virtualmachines", vm_of(s))
        wait_until(lambda: kube.get("virtualmachines", vm_of(s)).status == 404, 120,
                   what="the VM gone")
        await c.closed(120)
        # the upstream goes with the VMI (4502), or the session's end is seen first (4410)
        t.ok(c.code in (4502, 4410), "the open console closed", (c.code, c.reason))
        rc, out = reap()
        t.ok(rc == 0 and "vanished=1" in out, "the reaper marks it vanished", out)
        tk = lt.make(KEY, s["id"], user, vm_of(s))
        d = await Console.open(FRONT, f"/console/{s['id']}?ticket={tk}", user)
        await d.closed(60)
        check_closed(d, 4410, "failed", "reconnect after the VM vanished")
    run(go())
    t.eq(db.one("SELECT state FROM sessions WHERE id = %s", s["id"]), ("failed",), "the row")


@t.test(name="database listener down: new consoles 4503, open ones stay; the session ended "
             "meanwhile closes its console (4410) once the bridge is back on the database")
def listener_down():
    user = "student194"
    api, s = ready_lab(user)
    u = urllib.parse.urlsplit(env("LABVM_DATABASE"))
    proxy = TcpProxy(u.hostname, u.port)
    dsn = env("LABVM_DATABASE").replace(f"{u.hostname}:{u.port}", f"127.0.0.1:{proxy.port}")
    br = PrivateBridge("t520-listen", database=dsn)
    try:
        async def go():
            c = await open_console(br.base, ticket_url(api, s["id"]), user)
            proxy.cut()           # the bridge's connection (and its LISTEN) is gone
            # the session ends as labvm ends it (the row first; its NOTIFY goes
            # nowhere now); the VM is left, so the upstream stays up and only
            # the bridge's re-check can close the console
            db.query("UPDATE sessions SET state = 'ended', end_reason = 'user', "
                     "ended_at = now() WHERE id = %s", s["id"])
            # a new console while the database is unreachable: 4503
            tk = lt.make(KEY, s["id"], user, vm_of(s))
            d = await Console.open(br.base, f"/console/{s['id']}?ticket={tk}", user)
            await d.closed(120)
            check_closed(d, 4503, "database", "a new console while the database is unreachable")
            t.eq(c.code, None, "the open console stays while the bridge cannot check it")
            proxy.resume()        # the bridge reconnects and re-checks its open sessions
            await c.closed(180)
            check_closed(c, 4410, "ended", "ended while the listener was down")
        run(go())
    finally:
        br.close()
        proxy.close()
    kube.delete("virtualmachines", vm_of(s))
    kube.delete("secrets", vm_of(s) + "-cloudinit")


@t.test(name="console_max_per_session = 1: a second tab is refused with 4429, the first stays")
def too_many():
    user = "student195"
    api, s = ready_lab(user)
    br = PrivateBridge("t520-max", console_max_per_session=1)
    try:
        async def go():
            a = await open_console(br.base, ticket_url(api, s["id"]), user)
            b = await Console.open(br.base, ticket_url(api, s["id"]), user)
            await b.closed(60)
            check_closed(b, 4429, "too many", "second tab")
            await a.send(b"echo still''here\r")
            t.ok(await a.until(lambda x: b"stillhere\r\n" in x.out, 60), "the first tab still works")
            t.eq(a.code, None, "and is open")
            await a.close()
        run(go())
    finally:
        br.close()
    api.end(s["id"])


def raw_console(port, url, user="student196"):
    """A WebSocket to the bridge from a plain socket with a small receive
    buffer: after the handshake nothing reads it, as a frozen tab. (Straight
    to the bridge: this is the front end that logged `user` in.)"""
    sk = socket.socket()
    sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sk.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sk.sendall((f"GET {url} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: labvm-console.v1\r\n"
                f'Forwarded: for=127.0.0.1;remote_user="{user}"\r\n\r\n')
               .encode())
    head = b""
    while b"\r\n\r\n" not in head:
        d = sk.recv(1)
        if not d:
            raise AssertionError(f"handshake: {head!r}")
        head += d
    if b" 101 " not in head.split(b"\r\n")[0]:
        raise AssertionError(f"handshake: {head!r}")
    return sk


def ws_send(sk, data):
    """One masked binary frame (as a browser sends)."""
    mask = os.urandom(4)
    n = len(data)
    hdr = bytes([0x82]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big"))
    sk.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))


def ws_close_code(sk, limit_s=300):
    """Read every frame to the end of the connection: the close frame's code,
    or 1006 when the connection ends without one."""
    sk.settimeout(limit_s)
    buf = b""
    code = 1006

    def need(n):
        nonlocal buf
        while len(buf) < n:
            d = sk.recv(1 << 20)
            if not d:
                raise EOFError
            buf += d
    try:
        while True:
            need(2)
            op, ln = buf[0] & 15, buf[1] & 127
            off = 2
            if ln == 126:
                need(4)
                ln, off = int.from_bytes(buf[2:4], "big"), 4
            elif ln == 127:
                need(10)
                ln, off = int.from_bytes(buf[2:10], "big"), 10
            need(off + ln)
            payload, buf = buf[off:off + ln], buf[off + ln:]
            if op == 8:
                return int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
    except (EOFError, OSError):
        return code


@t.test(name="a tab that stops reading while output floods in is closed with 1008")
def not_reading():
    user = "student196"
    api, s = ready_lab(user)
    br = PrivateBridge("t520-slow", console_ping_s=1)
    try:
        async def prompt():
            c = await open_console(br.base, ticket_url(api, s["id"]), user)
            await c.send(b"\r")
            await c.until(lambda x: x.out.rstrip().endswith((b"#", b"$")), 60)
            await c.close()
        run(prompt())
        sk = raw_console(br.port, ticket_url(api, s["id"]))
        try:
            ws_send(sk, b"yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c 400000000\r")
            closed_line = "closed: 1008 browser not reading console output"

            def logged():   # this bridge's own lines only (the log file is appended to)
                with open(br.logpath, errors="replace") as f:
                    f.seek(br.log_start)
                    return closed_line in f.read()
            try:
                wait_until(logged, 300, 0.5, "the bridge closing the tab")
            except TimeoutError:
                pass
            t.ok(logged(), "the bridge closes the tab that does not read", closed_line)
            code = ws_close_code(sk)   # everything still in flight drains first
            t.ok(code in (1008, 1006), "the tab's connection is closed", code)
        finally:
            sk.close()
    finally:
        br.close()
    api.end(s["id"])


reset_world(kube, db)
t.done()
