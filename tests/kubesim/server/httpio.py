"""HTTP/1.1 over TLS as the API server speaks it: the TLS handshake per
connection, request bodies (Content-Length or chunked, always drained),
answers written headers-and-body in one go, and Dropped (close without an
answer: the fault injection's drop, `/_sim/down`)."""
import socket
import ssl
from http.server import BaseHTTPRequestHandler

import errors
import util


class Dropped(Exception):
    """Close the connection without an answer."""


class HttpIO(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kubesim"
    sys_version = ""
    timeout = 600

    def setup(self):
        self.request.settimeout(15)
        try:
            self.request.do_handshake()
        except (OSError, ssl.SSLError):
            self.request.close()
            raise
        self.request.settimeout(self.timeout)
        try:
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        self.alpn = self.request.selected_alpn_protocol()
        if self.alpn == "h2":
            self.refuse_h2()
        super().setup()

    def refuse_h2(self):
        """The client chose h2 (offered with --alpn h2,http/1.1, as
        kube-apiserver offers it): this server speaks HTTP/1.1 only, so it
        answers as an HTTP/2 server that requires HTTP/1.1 would (RFC 9113
        section 3.4 preface, then SETTINGS and GOAWAY HTTP_1_1_REQUIRED, 0xd)
        and closes: stricter than a real API server, which would serve h2.
        Counted in /_sim/stats "alpn"."""
        self.sim.alpn_count("h2", "refused")
        try:
            self.request.settimeout(2)
            self.request.recv(24)
            settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
            goaway = b"\x00\x00\x08\x07\x00\x00\x00\x00\x00" + b"\x00" * 4 + \
                b"\x00\x00\x00\x0d"
            self.request.sendall(settings + goaway)
        except OSError:
            pass
        try:
            self.request.close()
        except OSError:
            pass
        raise Dropped()

    def count_alpn(self, kind):
        self.sim.alpn_count(self.alpn, kind)

    def version_string(self):
        return "kubesim"

    def log_message(self, fmt, *args):
        if self.sim.args.verbose:
            self.sim.log("%s %s" % (self.address_string(), fmt % args))

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except Dropped:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        except (ConnectionError, ssl.SSLError, socket.timeout):
            self.close_connection = True

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def do_HEAD(self):
        self.dispatch("HEAD")

    def do_OPTIONS(self):
        self.dispatch("OPTIONS")

    # ---------------------------------------------------------------- I/O
    def body(self):
        if hasattr(self, "_body"):
            return self._body
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks = []
            while True:
                line = self.rfile.readline(1024)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline(8)
            self._body = b"".join(chunks)
        else:
            n = int(self.headers.get("Content-Length") or 0)
            if n > 8 * 2**20:
                raise errors.ApiError(413, "Request entity too large: limit is 3145728",
                                      "RequestEntityTooLarge")
            self._body = self.rfile.read(n) if n else b""
        return self._body

    def send_json(self, code, obj, headers=None, raw=None):
        after = getattr(self, "after_fault", None)
        if after is not None and code < 400:
            # a fault with "after": the request took effect; its answer is lost
            self.after_fault = None
            return self.send_error_status(after)
        data = raw if raw is not None else util.dumps(obj)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Audit-Id", self.audit_id)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        for w in getattr(self, "warnings", []):
            self.send_header("Warning", f'299 - "{w}"')
        self.end_with(data)

    def end_with(self, data):
        """Headers and body in one write (one TLS record, no Nagle/delayed-ACK stall)."""
        self._headers_buffer.append(b"\r\n")
        out = b"".join(self._headers_buffer)
        self._headers_buffer = []
        if self.command != "HEAD":
            out += data
        self.wfile.write(out)

    def send_error_status(self, e):
        if e.text is not None:
            return self.send_text(e.code, e.text, headers=e.headers)
        self.send_json(e.code, e.status(), e.headers)

    def send_text(self, code, text, ctype="text/plain; charset=utf-8", headers=None):
        data = text.encode() if isinstance(text, str) else text
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_with(data)

    def drain_body(self):
        """An error answered before the body was read must still consume it:
        on a keep-alive connection the unread bytes would otherwise be parsed
        as the next request (the real API server always reads the body)."""
        if hasattr(self, "_body"):
            return
        try:
            self.body()
        except Exception:  # noqa: BLE001 - unreadable: do not reuse the connection
            self.close_connection = True

