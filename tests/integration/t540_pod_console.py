#!/usr/bin/python3
# timeout: 300
"""labvm-console for a pod lesson: the browser's labvm-console.v1 (raw bytes,
JSON control messages) through lighttpd and Apache -> labvm-console -> the
Pod's exec subresource (v5.channel.k8s.io: a channel byte on every frame) ->
a login shell on a tty in the lab container. Every byte value 0..255 passes
both ways as the first byte of a message's data, the page's resize message
reaches the tty (channel 4), and the shell's end closes the console with its
exit status (the error channel)."""
import asyncio
import base64
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

import websockets

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from labclient import Kube  # noqa: E402
from labtest import reset_world  # noqa: E402
from tap import T  # noqa: E402

t = T()
ENV = os.environ
FRONTS = [(fe, ENV[f"LABVM_{fe.upper()}_URL"])
          for fe in ENV.get("LABVM_FRONTENDS", "lighttpd").split()]
PASSWORD = ENV.get("LABVM_PASSWORD", "labvm")
PROTO = "labvm-console.v1"
USER = "student351"
kube = Kube()
reset_world(kube)
loop = asyncio.new_event_loop()


def run(coro):
    return loop.run_until_complete(coro)


def auth(user):
    return "Basic " + base64.b64encode(f"{user}:{PASSWORD}".encode()).decode()


def api(method, path, base, body=None, user=USER):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Authorization": auth(user)})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def start_pod_lab(base):
    st, s = api("GET", "/api/sessions/current", base)
    if st == 200:
        api("DELETE", f"/api/sessions/{s['id']}", base)
    st, s = api("POST", "/api/sessions", base, {"lesson": "k8s-pod-intro"})
    assert st == 201, (st, s)
    deadline = time.monotonic() + 60
    while s["state"] == "starting" and time.monotonic() < deadline:
        time.sleep(0.3)
        st, s = api("GET", f"/api/sessions/{s['id']}", base)
    assert s["state"] == "ready", s
    return s


class Console:
    def __init__(self, ws):
        self.ws, self.out, self.ctl, self.code, self.reason = ws, bytearray(), [], None, None

    @classmethod
    async def open(cls, base, url):
        ws = await websockets.connect(base.replace("http://", "ws://") + url,
                                      subprotocols=[PROTO],
                                      extra_headers={"Authorization": auth(USER)},
                                      open_timeout=10, ping_interval=None, max_size=None)
        return cls(ws)

    async def until(self, pred, timeout=10):
        end = time.monotonic() + timeout
        while not pred(self):
            left = end - time.monotonic()
            if left <= 0 or self.code is not None:
                return False
            try:
                m = await asyncio.wait_for(self.ws.recv(), left)
            except asyncio.TimeoutError:
                return pred(self)
            except websockets.ConnectionClosed as e:
                self.code = e.rcvd.code if e.rcvd else 1006
                self.reason = e.rcvd.reason if e.rcvd else ""
                return pred(self)
            if isinstance(m, str):
                self.ctl.append(json.loads(m))
            else:
                self.out += m
        return True

    async def expect(self, needle, timeout=10):
        return await self.until(lambda c: needle in c.out, timeout)


for fe, base in FRONTS:
    @t.test(name=f"{fe}: a pod lesson's terminal is a shell in the Pod; every byte passes")
    def terminal(fe=fe, base=base):
        s = start_pod_lab(base)
        pod = s["vms"][0]["name"]
        st, tk = api("POST", f"/api/sessions/{s['id']}/console-ticket", base, {})
        t.require(st == 200, f"ticket: {st} {tk}")

        async def go():
            c = await Console.open(base, tk["url"])
            t.ok(await c.until(lambda c: any(m.get("state") == "open" for m in c.ctl)),
                 "status open", c.ctl)
            # the page sends its size at open; the tty takes it (channel 4)
            await c.ws.send(json.dumps({"type": "resize", "cols": 117, "rows": 41}))
            await c.ws.send(b"stty size; echo mark-$((6*7)); id -u; cat /root/README.txt\r")
            t.ok(await c.expect(b"mark-42"), "a shell answers", bytes(c.out[-300:]))
            t.ok(await c.expect(b"41 117"), "the resize reached the tty", bytes(c.out[-300:]))
            t.ok(await c.expect(b"Change the port"), "in the lab's Pod", bytes(c.out[-300:]))
            await c.ws.send(json.dumps({"type": "resize", "cols": 90, "rows": 20}))
            await asyncio.sleep(0.3)
            await c.ws.send(b"stty size\r")
            t.ok(await c.expect(b"20 90"), "a later resize too", bytes(c.out[-200:]))
            # down: bytes 0..255, each value the first byte of the data of some
            # message, raw (no output processing on the tty)
            await c.ws.send(b"printf 'ready-go\\n'; stty raw -echo; sleep 0.3; "
                            b"python3 -c \"import os,time\n"
                            b"for i in range(256): os.write(1, bytes([i]) + b'.'*7); "
                            b"time.sleep(0.01)\"; stty sane\r")
            t.ok(await c.expect(b"ready-go"), "about to send")
            mark = len(c.out)
            want = b"".join(bytes([i]) + b"." * 7 for i in range(256))
            t.ok(await c.until(lambda c: want in bytes(c.out[mark:]), 15),
                 "bytes 0..255 arrive intact as the first byte of output",
                 bytes(c.out[mark:mark + 80]))
            # up: every byte value typed, as the first byte of each message
            await c.ws.send(b"stty raw -echo; head -c 2048 > /tmp/up.bin; stty sane; "
                            b"echo read-$((6*7))\r")
            await asyncio.sleep(0.5)
            sent = b""
            for i in range(256):
                chunk = bytes([i]) + bytes([(i * 7 + k) % 256 for k in range(7)])
                sent += chunk
                await c.ws.send(chunk)
            # read-42 is the shell's output only (the echoed line says $((6*7)))
            t.ok(await c.expect(b"read-42", 15), "the shell read it all",
                 bytes(c.out[-200:]))
            r = kube.guest_exec(pod, "od -An -v -tx1 /tmp/up.bin | tr -d ' \\n'")
            t.eq(r["stdout"], sent.hex(), "bytes 0..255 arrive intact in the Pod")
            # the shell's end closes the console with its status
            await c.ws.send(b"exit 7\r")
            await c.until(lambda c: False, 10)
            closed = [m for m in c.ctl if m.get("type") == "closed"]
            t.eq(c.code, 4502, "closed: the upstream ended", (c.code, c.reason))
            t.ok(closed and "exited with code 7" in closed[0].get("reason", ""),
                 "the exit status from the error channel", closed)
        run(go())
        api("DELETE", f"/api/sessions/{s['id']}", base)


t.done()
