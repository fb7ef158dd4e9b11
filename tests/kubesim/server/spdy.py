"""SPDY/3.1 for a pod's exec, as the kubelet serves it to clients that do not
speak the WebSocket protocols (kubectl before 1.29, e.g. Debian 12's 1.20):
the request carries `Upgrade: SPDY/3.1` and `X-Stream-Protocol-Version`
headers (the client's choices in its order; served: v4.channel.k8s.io), the
answer is 101 with the chosen version, then the client opens one SPDY stream
per channel (SYN_STREAM with the header `streamtype`: error, stdin, stdout,
stderr, resize), each answered with SYN_REPLY. The command starts once every
expected stream is there (the kubelet waits up to 30 s); its output goes as
DATA frames on the stdout/stderr streams; stdin's FIN is the end of input;
the resize stream carries `{"Width":W,"Height":H}` values; at the end the
error stream gets the same Status JSON as the WebSocket protocols (v4), and
every stream the server writes is closed (FIN) before the connection.

Framing (SPDY/3, draft-mbelshe-httpbis-spdy-00): control frames
`1|version 3|type|flags|length24`, data frames `0|stream id|flags|length24`;
header blocks are zlib streams (one per direction and connection, sync
flushed per block) with the protocol's dictionary below. PING is echoed;
SETTINGS, WINDOW_UPDATE (spdystream keeps no windows) and GOAWAY are read
and ignored."""
import json
import struct
import threading
import zlib

# The SPDY/3 header compression dictionary (the spec's section 2.6.10.1):
# length-prefixed words, then a tail of status codes, dates and media types.
WORDS = (
    'options', 'head', 'post', 'put', 'delete', 'trace', 'accept', 'accept-charset',
    'accept-encoding', 'accept-language', 'accept-ranges', 'age', 'allow', 'authorization',
    'cache-control', 'connection', 'content-base', 'content-encoding', 'content-language',
    'content-length', 'content-location', 'content-md5', 'content-range', 'content-type',
    'date', 'etag', 'expect', 'expires', 'from', 'host', 'if-match', 'if-modified-since',
    'if-none-match', 'if-range', 'if-unmodified-since', 'last-modified', 'location',
    'max-forwards', 'pragma', 'proxy-authenticate', 'proxy-authorization', 'range', 'referer',
    'retry-after', 'server', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'user-agent',
    'vary', 'via', 'warning', 'www-authenticate', 'method', 'get', 'status', '200 OK',
    'version', 'HTTP/1.1', 'url', 'public', 'set-cookie', 'keep-alive', 'origin'
)
TAIL = (
    '1001012012022052063003023033043053063074024054064074084094104114124134144154'
    '16417502504505203 Non-Authoritative Information204 No Content301 Moved Perma'
    'nently400 Bad Request401 Unauthorized403 Forbidden404 Not Found500 Internal '
    'Server Error501 Not Implemented503 Service UnavailableJan Feb Mar Apr May Ju'
    'n Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTch'
    'unked,text/html,image/png,image/jpg,image/gif,application/xml,application/xh'
    'tml+xml,text/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdchcha'
    'rset=utf-8charset=iso-8859-1,utf-,*,enq=0.'
)
DICTIONARY = b"".join(len(w).to_bytes(4, "big") + w.encode() for w in WORDS) + TAIL.encode()
assert len(DICTIONARY) == 1423

SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = \
    1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN = 0x01
PROTOCOLS = ("v4.channel.k8s.io",)


class SpdyError(Exception):
    pass


class SpdyConn:
    """One SPDY/3.1 server connection over a file pair (reads from rfile,
    writes to wfile under a lock)."""

    def __init__(self, rfile, wfile):
        self.rfile = rfile
        self.wfile = wfile
        self.wlock = threading.Lock()
        self.inflate = zlib.decompressobj(zdict=DICTIONARY)
        self.deflate = zlib.compressobj(zlib.Z_BEST_COMPRESSION, zlib.DEFLATED, 15,
                                        zdict=DICTIONARY)

    def _read(self, n):
        b = b""
        while len(b) < n:
            chunk = self.rfile.read(n - len(b))
            if not chunk:
                raise EOFError
            b += chunk
        return b

    def read_frame(self):
        """-> ("control", type, flags, body) | ("data", stream id, flags, body)."""
        h = self._read(8)
        flags, length = h[4], int.from_bytes(h[5:8], "big")
        body = self._read(length) if length else b""
        if h[0] & 0x80:
            version = struct.unpack(">H", h[0:2])[0] & 0x7fff
            if version != 3:
                raise SpdyError(f"SPDY version {version}")
            return "control", struct.unpack(">H", h[2:4])[0], flags, body
        return "data", struct.unpack(">I", h[0:4])[0] & 0x7fffffff, flags, body

    def headers(self, block):
        raw = self.inflate.decompress(block)
        n = struct.unpack(">I", raw[:4])[0]
        p, out = 4, {}
        for _ in range(n):
            ln = struct.unpack(">I", raw[p:p + 4])[0]
            name = raw[p + 4:p + 4 + ln].decode().lower()
            p += 4 + ln
            lv = struct.unpack(">I", raw[p:p + 4])[0]
            out[name] = raw[p + 4:p + 4 + lv].decode()
            p += 4 + lv
        return out

    def _block(self, hdrs):
        raw = struct.pack(">I", len(hdrs))
        for k, v in hdrs.items():
            raw += struct.pack(">I", len(k)) + k.encode() + struct.pack(">I", len(v)) + v.encode()
        return self.deflate.compress(raw) + self.deflate.flush(zlib.Z_SYNC_FLUSH)

    def _write(self, data):
        with self.wlock:
            self.wfile.write(data)
            self.wfile.flush()

    def control(self, ftype, flags, body):
        self._write(struct.pack(">HHB", 0x8003, ftype, flags) + len(body).to_bytes(3, "big") +
                    body)

    def syn_reply(self, sid, hdrs=None):
        with self.wlock:     # the compressor's state follows the order on the wire
            block = self._block(hdrs or {})
            body = struct.pack(">I", sid) + block
            self.wfile.write(struct.pack(">HHB", 0x8003, SYN_REPLY, 0) +
                             len(body).to_bytes(3, "big") + body)
            self.wfile.flush()

    def data(self, sid, data, fin=False):
        for i in range(0, max(len(data), 1), 0xffff):
            chunk = data[i:i + 0xffff]
            last = fin and i + 0xffff >= len(data)
            self._write(struct.pack(">IB", sid, FLAG_FIN if last else 0) +
                        len(chunk).to_bytes(3, "big") + chunk)


class SpdyExec:
    """The exec streams over SpdyConn, driving a ChannelSession-like target
    (podexec.ChannelSession's stdin/resize/close-stdin and output hooks)."""

    def __init__(self, conn, want, tty):
        self.c = conn
        self.want = want           # {"stdin","stdout","stderr"} -> bool
        self.tty = tty
        self.streams = {}          # streamtype -> stream id
        self.ready = threading.Event()

    def expected(self):
        e = {"error"} | {k for k in ("stdin", "stdout", "stderr") if self.want[k]}
        if self.tty:
            e.add("resize")
        return e

    def handle(self, frame, on_stdin, on_stdin_end, on_resize):
        kind, a, flags, body = frame
        if kind == "control":
            if a == SYN_STREAM:
                sid = struct.unpack(">I", body[:4])[0] & 0x7fffffff
                hdrs = self.c.headers(body[10:])
                st = hdrs.get("streamtype", "")
                self.streams[st] = sid
                self.c.syn_reply(sid)
                if self.expected() <= set(self.streams):
                    self.ready.set()
                if st == "stdin" and flags & FLAG_FIN:
                    on_stdin_end()
            elif a == PING:
                self.c.control(PING, 0, body)
            elif a == GOAWAY:
                raise EOFError
            elif a == HEADERS:
                self.c.headers(body[4:])      # keep the zlib stream in step
            return
        by_sid = {v: k for k, v in self.streams.items()}
        st = by_sid.get(a)
        if st == "stdin":
            if body:
                on_stdin(body)
            if flags & FLAG_FIN:
                on_stdin_end()
        elif st == "resize" and body:
            on_resize(body)

    def out(self, st, data):
        sid = self.streams.get(st)
        if sid is not None and data:
            self.c.data(sid, data)

    def finish(self, status):
        sid = self.streams.get("error")
        if sid is not None:
            self.c.data(sid, json.dumps(status, separators=(",", ":")).encode())
        for st in ("stdout", "stderr", "error"):
            if st in self.streams:
                try:
                    self.c.data(self.streams[st], b"", fin=True)
                except OSError:
                    pass
