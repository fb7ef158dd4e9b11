"""Console helpers for the integration suites: the page's WebSocket
(labvm-console.v1 through a front end or straight to a bridge), a private
labvm-console with its own labvm.conf keys, and a TCP proxy that can cut a
bridge off from the database."""
import asyncio
import base64
import json
import os
import socket
import subprocess
import tempfile
import threading
import time

import websockets

PROTO = "labvm-console.v1"


def auth(user, password=None):
    password = password or os.environ.get("LABVM_PASSWORD", "labvm")
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class Console:
    """One browser-side connection: output bytes, control messages, close code."""

    def __init__(self, ws):
        self.ws = ws
        self.out = bytearray()
        self.ctl = []
        self.code = None
        self.reason = None

    @classmethod
    async def open(cls, base, url, user, timeout=30, **kw):
        h = {"Authorization": auth(user)}
        fronts = {os.environ.get(k, "").rstrip("/") for k in
                  ("LABVM_URL", "LABVM_LIGHTTPD_URL", "LABVM_APACHE_URL")}
        if base.rstrip("/") not in fronts:
            # straight to a bridge: the caller is the front end that logged the user in
            h["Forwarded"] = f'for=127.0.0.1;remote_user="{user}"'
        ws = await websockets.connect(
            base.replace("http://", "ws://") + url, subprotocols=[PROTO],
            extra_headers=h, open_timeout=timeout,
            ping_interval=None, max_size=None, close_timeout=2, **kw)
        return cls(ws)

    async def _recv(self, timeout):
        try:
            m = await asyncio.wait_for(self.ws.recv(), timeout)
        except websockets.ConnectionClosed as e:
            rc = e.rcvd
            self.code = rc.code if rc else 1006
            self.reason = rc.reason if rc else ""
            return False
        if isinstance(m, str):
            self.ctl.append(json.loads(m))
        else:
            self.out += m
        return True

    async def until(self, pred, timeout=30):
        """Wait until pred(self); it is checked at each message and at least
        every 0.5 s (a predicate may watch something besides the messages:
        pings and pongs, which are no messages, or a server's counters)."""
        end = time.monotonic() + timeout
        while not pred(self):
            left = end - time.monotonic()
            if left <= 0 or self.code is not None:
                return False
            try:
                if not await self._recv(min(left, 0.5)):
                    return pred(self)
            except asyncio.TimeoutError:
                continue
        return True

    async def opened(self, timeout=30):
        return await self.until(lambda c: "open" in c.states(), timeout)

    async def closed(self, timeout=60):
        await self.until(lambda c: False, timeout)
        return self.code, self.reason

    async def send(self, data):
        await self.ws.send(data)

    async def close(self):
        await self.ws.close()

    def states(self):
        return [m.get("state") for m in self.ctl if m.get("type") == "status"]

    def closed_msg(self):
        return next((m for m in self.ctl if m.get("type") == "closed"), None)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateBridge:
    """A labvm-console on its own port: the stack's labvm.conf with keys replaced
    (env: variables added to its environment)."""

    def __init__(self, name, env=None, **overrides):
        self.port = free_port()
        keys = dict(overrides, console_listen=f"127.0.0.1:{self.port}")
        self.conf = tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False)
        with open(os.environ["LABVM_CONF"]) as f:
            for line in f:
                if line.split("=")[0].strip() not in keys:
                    self.conf.write(line)
        for k, v in keys.items():
            self.conf.write(f"{k} = {v}\n")
        self.conf.close()
        exe = os.path.join(os.environ["LABVM_BIN"], "labvm-console")
        self.logpath = os.path.join(os.environ["LABVM_STATE"], "logs", f"bridge-{name}.log")
        self.log = open(self.logpath, "ab")
        self.log_start = self.log.tell()
        self.p = subprocess.Popen([exe], env=dict(os.environ, **(env or {}),
                                                  LABVM_CONF=self.conf.name),
                                  stdout=self.log, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.p.poll() is not None:
                    raise RuntimeError(f"private bridge {name} did not start")
                time.sleep(0.05)

    def close(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()
        os.unlink(self.conf.name)


class TcpProxy:
    """127.0.0.1:port -> target; cut() drops every connection and refuses new
    ones (closes them at once) until resume()."""

    def __init__(self, target_host, target_port):
        self.target = (target_host, target_port)
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(64)
        self.port = self.srv.getsockname()[1]
        self.up = True
        self.conns = []
        self.lock = threading.Lock()
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            if not self.up:
                c.close()
                continue
            try:
                u = socket.create_connection(self.target, 10)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.conns += [c, u]
                self.accepted += 1
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        self.up = False
        with self.lock:
            for s in self.conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
                except OSError:
                    pass
            self.conns = []

    def resume(self):
        self.up = True

    def close(self):
        self.cut()
        self.srv.close()
