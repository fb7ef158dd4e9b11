"""A minimal FastCGI client, and a labvm.fcgi of a test's own.

Some tests need a labvm.fcgi they control: with its own labvm.conf (a small
start rate limit, a database reached through a test proxy) or one they can
freeze (SIGSTOP) without freezing the stack's front ends. LabFcgi starts
`labvm.fcgi --listen 127.0.0.1:PORT` with the stack's labvm.conf plus
overrides and speaks FastCGI to it directly, as lighttpd would (REMOTE_USER
set by "the front end", i.e. this client).

    with LabFcgi({"start_rate_max": "2"}) as f:
        r = f.request("POST", "/api/sessions", "student1", {"lesson": "x"})
"""
import json
import os
import signal
import socket
import struct
import subprocess
import time

from labclient import Response, env

BEGIN, END, PARAMS, STDIN, STDOUT, STDERR = 1, 3, 4, 5, 6, 7


def _nv(name, value):
    out = b""
    for x in (name, value):
        n = len(x)
        out += bytes([n]) if n < 128 else struct.pack(">I", n | 0x80000000)
    return out + name + value


def _record(t, rid, content=b""):
    return struct.pack(">BBHHBB", 1, t, rid, len(content), 0, 0) + content


def fcgi_request(addr, params, body=b"", timeout=30):
    """One FastCGI request; returns (status, headers, body bytes)."""
    s = socket.create_connection(addr, timeout=timeout)
    try:
        out = _record(BEGIN, 1, struct.pack(">HB5x", 1, 0))
        pb = b"".join(_nv(k.encode(), v.encode()) for k, v in params.items())
        for i in range(0, len(pb), 65535):
            out += _record(PARAMS, 1, pb[i:i + 65535])
        out += _record(PARAMS, 1)
        for i in range(0, len(body), 65535):
            out += _record(STDIN, 1, body[i:i + 65535])
        out += _record(STDIN, 1)
        s.sendall(out)
        buf, stdout = b"", b""
        while True:
            while len(buf) < 8:
                d = s.recv(65536)
                if not d:
                    raise ConnectionError("labvm.fcgi closed the connection")
                buf += d
            _, t, _, n, pad, _ = struct.unpack(">BBHHBB", buf[:8])
            while len(buf) < 8 + n + pad:
                d = s.recv(65536)
                if not d:
                    raise ConnectionError("labvm.fcgi closed the connection")
                buf += d
            content, buf = buf[8:8 + n], buf[8 + n + pad:]
            if t == STDOUT:
                stdout += content
            elif t == END:
                break
    finally:
        s.close()
    head, _, rest = stdout.partition(b"\r\n\r\n")
    status, headers = 200, []
    for line in head.decode("latin-1").split("\r\n"):
        k, _, v = line.partition(":")
        if k.lower() == "status":
            status = int(v.split()[0])
        else:
            headers.append((k.strip(), v.strip()))
    return status, headers, rest


class LabFcgi:
    def __init__(self, overrides=None, port=None, threads=4):
        self.overrides = dict(overrides or {})
        self.overrides.setdefault("fcgi_threads", str(threads))
        base = int(os.environ.get("LABVM_PORT_BASE", "18000"))
        self.port = port or base + 170 + (os.getpid() % 20)
        state = env("LABVM_STATE")
        self.dir = os.path.join(state, f"own-fcgi-{self.port}")
        self.conf = os.path.join(self.dir, "labvm.conf")
        self.proc = None

    def __enter__(self):
        os.makedirs(self.dir, exist_ok=True)
        keys = []
        with open(env("LABVM_CONF")) as f:
            for line in f:
                k = line.split("=", 1)[0].strip()
                if k in self.overrides:
                    continue
                keys.append(line.rstrip("\n"))
        for k, v in self.overrides.items():
            keys.append(f"{k} = {v}")
        with open(self.conf, "w") as f:
            f.write("\n".join(keys) + "\n")
        exe = os.path.join(env("LABVM_BIN"), "labvm.fcgi")
        self.log = open(os.path.join(self.dir, "labvm.fcgi.log"), "ab")
        self.proc = subprocess.Popen([exe, "--listen", f"127.0.0.1:{self.port}"],
                                     env=dict(os.environ, LABVM_CONF=self.conf),
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"labvm.fcgi did not start; see {self.dir}")
                time.sleep(0.05)
        return self

    def request(self, method, path, user=None, body=None, timeout=60):
        data = json.dumps(body).encode() if body is not None else b""
        params = {"REQUEST_METHOD": method, "REQUEST_URI": path, "SCRIPT_NAME": path,
                  "SERVER_PROTOCOL": "HTTP/1.1", "CONTENT_LENGTH": str(len(data)),
                  "GATEWAY_INTERFACE": "CGI/1.1"}
        if body is not None:
            params["CONTENT_TYPE"] = "application/json"
        if user:
            params["REMOTE_USER"] = user
        st, h, b = fcgi_request(("127.0.0.1", self.port), params, data, timeout)
        return Response(st, h, b.decode("utf-8", "replace"))

    def stop_signal(self, sig):
        os.kill(self.proc.pid, sig)

    def __exit__(self, *exc):
        if self.proc and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
                os.kill(self.proc.pid, signal.SIGTERM)
                self.proc.wait(8)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.log.close()
        return False
