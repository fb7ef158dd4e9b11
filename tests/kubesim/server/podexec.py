"""A pod's exec subresource (`/api/v1/namespaces/NS/pods/NAME/exec`), over a
WebSocket with the kubelet's channel protocols, as the API server proxies it
from the kubelet (k8s.io/apiserver wsstream, kubelet remotecommand):

- RBAC: the verb is the HTTP method's: `get` on `pods/exec` for the
  WebSocket's GET, `create` for SPDY's POST (k8s.io/apiserver v0.34
  requestinfo.go); with `--k8s-version 1.35` or later the GET needs `create`
  as well (the AuthorizePodWebsocketUpgradeCreatePermission gate, beta and
  on by default from 1.35: kubernetes/kubernetes#134577).
- Query: `command` (repeated: the argv), `container` (may be omitted with one
  container), `stdin`, `stdout`, `stderr`, `tty` (with tty, stderr is
  dropped: the pty carries both).
- Checks, in the API server's order and words: at least one of
  stdin/stdout/stderr (400), a command, the container name, a node
  (`does not have a host assigned`), not completed (`cannot exec into a
  container in a completed pod; current phase is Failed`), the container
  running (`container not found ("NAME")`, 500 from the kubelet).
- Subprotocols, in the client's order of preference: `v5.channel.k8s.io`,
  `v4.channel.k8s.io`; none of them: 400 `requested protocol(s) are not
  supported`. Every frame (binary; a client's text frame counts as its
  UTF-8 bytes, as the kubelet's websocket library reads it) starts with its channel: 0 stdin (client
  to server), 1 stdout, 2 stderr, 3 error (server to client: one Status JSON
  when the command ends), 4 resize (client: `{"Width":W,"Height":H}`, JSON
  values in sequence, a frame may split or join them). v5 adds 255 close:
  `[255, channel]` from the client closes that channel (stdin: end of input).
  Right after the handshake the server sends one empty frame (channel byte
  only) on the lowest output channel requested (stdout, else stderr, else
  error), as the kubelet does. Frames on unknown channels are ignored.
- The end: the error channel gets `{"metadata":{},"status":"Success"}` or
  `{"metadata":{},"status":"Failure","message":"command terminated with
  non-zero exit code: ...","reason":"NonZeroExitCode","details":{"causes":
  [{"reason":"ExitCode","message":"N"}]}}`, then the WebSocket closes (1000).
- A client that closes first: with a tty the command is hung up (SIGHUP,
  then SIGKILL). Without one nothing is signalled, as on a cluster: the
  kubelet's streaming server waits for the runtime's exec to end, and the
  runtime (containerd's CRI) waits for the process, whose stdin gets EOF
  and whose output is no longer read; it runs to its own end (reaped then)
  or until its Pod goes (tests/kubesim/CONFORMANCE.md, "Pods / exec"). The
  exec'd process leads a session of its own (runc's setsid)."""
import errno
import fcntl
import json
import os
import select
import signal
import socket
import struct
import termios
import threading
import time
import urllib.parse

from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
from wsproto.utilities import LocalProtocolError

import errors
from resources import BY_PLURAL

from . import spdy
from .streams import upgrade_websocket

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255


def _bool(q, k):
    return (q.get(k) or [""])[-1].lower() in ("1", "true", "t", "yes", "y")


def exit_status(code, argv):
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {"metadata": {}, "status": "Failure",
            "message": f"command terminated with non-zero exit code: command "
                       f"'{' '.join(argv)}' exited with {code}: ",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


class PodExec:
    def pod_sub(self, method, route, user):
        sim = self.sim
        ns, name, sub = route["ns"], route["name"], route["sub"]
        res = BY_PLURAL["pods"]
        sim.api.authorize(user, route["verb"], res, ns, name, sub)
        for verb in route.get("also") or ():
            sim.api.authorize(user, verb, res, ns, name, sub)
        q = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query, keep_blank_values=True)
        if sub == "log":
            return self.pod_log(ns, name, q)
        if method not in ("GET", "POST"):
            raise errors.method_not_allowed()
        return self.pod_exec(ns, name, q)

    def _pod_container(self, ns, name, q):
        sim = self.sim
        res = BY_PLURAL["pods"]
        with sim.store.lock:
            pod = sim.store.get("pods", ns, name)
            if pod is None:
                raise errors.not_found(res, name)
            names = [c["name"] for c in pod["spec"].get("containers") or []]
            cname = (q.get("container") or [""])[-1]
            if not cname:
                if len(names) != 1:
                    raise errors.bad_request(f"a container name must be specified for pod {name}"
                                             f", choose one of: [{' '.join(names)}]")
                cname = names[0]
            if cname not in names:
                raise errors.bad_request(f"container {cname} is not valid for pod {name}")
            if not pod["spec"].get("nodeName"):
                raise errors.bad_request(f"pod {name} does not have a host assigned")
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                raise errors.bad_request("cannot exec into a container in a completed pod; "
                                         f"current phase is {phase}")
            uid = pod["metadata"]["uid"]
            g = sim.controllers.guests.get(uid)
            running = sim.controllers.guest_state.get(uid) == "running" and g is not None \
                and getattr(g, "kind", "") == "pod" and g.alive()
        if not running:
            raise errors.ApiError(500, f'container not found ("{cname}")', "InternalError")
        return g

    def pod_log(self, ns, name, q):
        g = self._pod_container(ns, name, q)
        data = g.logs()
        tail = (q.get("tailLines") or [""])[-1]
        if tail.isdigit():
            data = b"\n".join(data.rstrip(b"\n").split(b"\n")[-int(tail):]) + b"\n"
        return self.send_text(200, data)

    def pod_exec(self, ns, name, q):
        stdin, stdout, stderr, tty = (_bool(q, k) for k in ("stdin", "stdout", "stderr", "tty"))
        if tty:
            stderr = False
        if not (stdin or stdout or stderr):
            raise errors.bad_request("you must specify at least 1 of stdin, stdout, stderr")
        argv = q.get("command") or []
        if not argv:
            raise errors.bad_request("you must specify at least one command for the container")
        g = self._pod_container(ns, name, q)
        up = (self.headers.get("Upgrade") or "").lower()
        if up == "spdy/3.1":
            return self.pod_exec_spdy(g, argv, stdin, stdout, stderr, tty)
        key = self.headers.get("Sec-WebSocket-Key")
        if up != "websocket" or not key:
            raise errors.bad_request("Upgrade request required")
        offered = [p.strip() for p in (self.headers.get("Sec-WebSocket-Protocol") or "").split(",")
                   if p.strip()]
        proto = next((p for p in offered if p in PROTOCOLS), None)
        if proto is None:
            raise errors.bad_request(f"requested protocol(s) are not supported: {offered}; "
                                     f"supports {list(PROTOCOLS)}")
        try:
            proc, master = g.spawn_exec(argv, tty=tty)
        except Exception as e:  # noqa: BLE001
            raise errors.ApiError(500, f'container not found ("{name}"): {e}',
                                  "InternalError") from None
        upgrade_websocket(self, key, proto)
        ChannelSession(self, proto, proc, master, argv, stdin, stdout, stderr, tty).run()


    def pod_exec_spdy(self, g, argv, stdin, stdout, stderr, tty):
        offered = [p.strip() for h in self.headers.get_all("X-Stream-Protocol-Version") or []
                   for p in h.split(",") if p.strip()]
        proto = next((p for p in offered if p in spdy.PROTOCOLS), None)
        if proto is None:
            raise errors.bad_request(f"unable to upgrade: unable to negotiate protocol: client "
                                     f"supports {offered}, server supports "
                                     f"{list(spdy.PROTOCOLS)}")
        self.send_response(101, "Switching Protocols")
        self.send_header("Connection", "Upgrade")
        self.send_header("Upgrade", "SPDY/3.1")
        self.send_header("X-Stream-Protocol-Version", proto)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        self.connection.settimeout(None)
        SpdySession(self, g, argv, stdin, stdout, stderr, tty).run()


class ChannelSession:
    def __init__(self, handler, proto, proc, master, argv, stdin, stdout, stderr, tty):
        self.h = handler
        self.sock = handler.connection
        self.rfile = handler.rfile
        self.v5 = proto.startswith("v5.")
        self.proc = proc
        self.master = master
        self.argv = argv
        self.want = {STDIN: stdin, STDOUT: stdout, STDERR: stderr}
        self.tty = tty
        self.ws = Connection(ConnectionType.SERVER)
        self.wlock = threading.Lock()
        self.closed = False
        self.stdin_open = stdin
        self.resize_buf = ""

    def send(self, event):
        with self.wlock:
            try:
                data = self.ws.send(event)
            except LocalProtocolError as e:
                raise OSError(str(e)) from None
            self.h.wfile.write(data)
            self.h.wfile.flush()

    def frame(self, ch, data=b""):
        self.send(BytesMessage(data=bytes([ch]) + data))

    # ----------------------------------------------------------- client in
    def _stdin(self, data):
        if not self.stdin_open or not data:
            return
        try:
            if self.master is not None:
                os.write(self.master, data)
            else:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
        except (OSError, ValueError):
            pass

    def _close_stdin(self):
        if not self.stdin_open:
            return
        self.stdin_open = False
        try:
            if self.master is not None:
                os.write(self.master, b"\x04")
            else:
                self.proc.stdin.close()
        except (OSError, ValueError):
            pass

    def _resize(self, data):
        self.resize_buf += data.decode(errors="replace")
        dec = json.JSONDecoder()
        while True:
            s = self.resize_buf.lstrip()
            if not s:
                self.resize_buf = ""
                return
            try:
                obj, end = dec.raw_decode(s)
            except ValueError:
                self.resize_buf = s
                return
            self.resize_buf = s[end:]
            if self.master is not None and isinstance(obj, dict):
                w, h = int(obj.get("Width") or 0), int(obj.get("Height") or 0)
                if w > 0 and h > 0:
                    try:
                        fcntl.ioctl(self.master, termios.TIOCSWINSZ,
                                    struct.pack("HHHH", min(h, 65535), min(w, 65535), 0, 0))
                    except OSError:
                        pass

    def _message(self, data):
        if not data:
            return
        ch, body = data[0], data[1:]
        if self.v5 and ch == CLOSE:
            if len(body) == 1 and body[0] == STDIN:
                self._close_stdin()
            return
        if ch == STDIN:
            self._stdin(body)
        elif ch == RESIZE and self.tty:
            self._resize(body)
        # other channels: ignored, as the kubelet does

    # ---------------------------------------------------------- command out
    def _pump(self, fd, ch):
        while True:
            try:
                r, _, _ = select.select([fd], [], [], 0.5)
                if not r:
                    if self.closed:
                        return
                    continue
                data = os.read(fd, 32768)
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                return        # EIO: the pty's last holder is gone
            if not data:
                return
            try:
                self.frame(ch, data)
            except OSError:
                return

    def _outputs(self):
        ts = []
        if self.master is not None:
            ts.append(threading.Thread(target=self._pump, args=(self.master, STDOUT), daemon=True))
        else:
            if self.want[STDOUT]:
                ts.append(threading.Thread(target=self._pump, args=(self.proc.stdout.fileno(),
                                                                    STDOUT), daemon=True))
            if self.want[STDERR]:
                ts.append(threading.Thread(target=self._pump, args=(self.proc.stderr.fileno(),
                                                                    STDERR), daemon=True))
        for t in ts:
            t.start()
        code = self.proc.wait()
        for t in ts:
            t.join(5 if self.master is None else 0.5)
        if code < 0:
            code = 128 - code
        if not self.closed:
            try:
                self.end(exit_status(code, self.argv))
            except OSError:
                pass
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def end(self, status):
        self.frame(ERROR, json.dumps(status, separators=(",", ":")).encode())
        self.send(CloseConnection(code=1000))

    # ----------------------------------------------------------------- run
    def run(self):
        first = STDOUT if self.want[STDOUT] else (STDERR if self.want[STDERR] else ERROR)
        try:
            self.frame(first)
        except OSError:
            pass
        if not self.want[STDIN] and self.master is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        out = threading.Thread(target=self._outputs, daemon=True)
        out.start()
        try:
            while not self.closed:
                data = self.rfile.read1(65536)
                if not data:
                    break
                self.ws.receive_data(data)
                done = False
                for ev in self.ws.events():
                    if isinstance(ev, BytesMessage):
                        self._message(bytes(ev.data))
                    elif isinstance(ev, TextMessage):
                        # x/net/websocket's Message.Receive takes a text frame's
                        # bytes like a binary one's (python3-kubernetes sends str as text)
                        self._message(ev.data.encode())
                    elif isinstance(ev, CloseConnection):
                        try:
                            self.send(CloseConnection(code=ev.code))
                        except OSError:
                            pass
                        done = True
                        break
                    elif isinstance(ev, Ping):
                        self.send(ev.response())
                if done:
                    break
        except (EOFError, OSError, ValueError):
            pass
        finally:
            if not self.closed:
                # the client went away first: hang the command up
                self.closed = True
                self._hangup()
            out.join(3)
            if self.master is not None:
                try:
                    os.close(self.master)
                except OSError:
                    pass

    def _hangup(self):
        if self.proc.poll() is not None:
            return
        if not self.tty:
            # no tty to hang up: the command keeps running (see the top)
            self._close_stdin()
            return
        for sig in (signal.SIGHUP, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)
            except OSError:
                pass
            deadline = time.monotonic() + 1
            while self.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            if self.proc.poll() is not None:
                return


class SpdySession(ChannelSession):
    """The same command and channels over SPDY/3.1 streams (spdy.py)."""
    NAMES = {STDOUT: "stdout", STDERR: "stderr", ERROR: "error"}

    def __init__(self, handler, guest, argv, stdin, stdout, stderr, tty):
        self.h = handler
        self.sock = handler.connection
        self.guest = guest
        self.argv = argv
        self.want = {STDIN: stdin, STDOUT: stdout, STDERR: stderr}
        self.tty = tty
        self.v5 = False
        self.closed = False
        self.stdin_open = stdin
        self.resize_buf = ""
        self.proc = self.master = None
        self.conn = spdy.SpdyConn(handler.rfile, handler.wfile)
        self.x = spdy.SpdyExec(self.conn, {"stdin": stdin, "stdout": stdout, "stderr": stderr},
                               tty)
        self.pending_in = []

    def frame(self, ch, data=b""):
        self.x.out(self.NAMES.get(ch), data)

    def end(self, status):
        self.x.finish(status)

    def _stdin(self, data):
        if self.proc is None:
            self.pending_in.append(data)
        else:
            super()._stdin(data)

    def _close_stdin(self):
        if self.proc is None:
            self.pending_close = True
        else:
            super()._close_stdin()

    def run(self):
        out = None
        self.pending_close = False
        try:
            deadline = time.monotonic() + 30
            while True:
                if self.proc is None and self.x.ready.is_set():
                    self.proc, self.master = self.guest.spawn_exec(self.argv, tty=self.tty)
                    if not self.want[STDIN] and self.master is None:
                        self.proc.stdin.close()
                    for d in self.pending_in:
                        super()._stdin(d)
                    if self.pending_close:
                        super()._close_stdin()
                    out = threading.Thread(target=self._outputs, daemon=True)
                    out.start()
                if self.proc is None and time.monotonic() > deadline:
                    break          # the kubelet's stream creation timeout
                if self.closed:
                    break
                frame = self.conn.read_frame()
                self.x.handle(frame, self._stdin, self._close_stdin, self._resize)
        except (EOFError, OSError, ValueError, spdy.SpdyError):
            pass
        finally:
            if not self.closed and self.proc is not None:
                self.closed = True
                self._hangup()
            self.closed = True
            if out is not None:
                out.join(3)
            if self.master is not None:
                try:
                    os.close(self.master)
                except OSError:
                    pass
