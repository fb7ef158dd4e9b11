#!/usr/bin/env python3
"""labvm guest agent: readiness and grading over HTTP, inside the student's VM.

cloud-init writes this file to /opt/labvm/agent.py and starts it early; labvm
talks to it on port 8899. One self-contained file, Python 3.7+ standard
library only (any image with cloud-init has python3).

Every request needs `Authorization: Bearer <token>`, the per-VM token that
cloud-init writes to the token file (read at each request, so the agent may
start before the file exists; until then everything is refused).

    GET  /ready  200 {"ready": true, "since": <flag mtime>}
                 503 {"ready": false, "state": "booting" | "setup_running" |
                      "setup_failed" | "setup_finished",
                      "exit_code": N | null, "log_tail": "..."}
    GET  /ready?wait=S  the same, held up to S s (0..60, else 400) until the
                 flag appears or setup fails: labvm sees readiness at once.
    POST /run    {"cmd": "...", "timeout_s": 30}  (timeout optional, max 300)
                 200 {"exit_code": N | null, "stdout": "...", "stderr": "...",
                      "timed_out": bool, "truncated": bool, "duration_ms": N}
    POST /tty-size {"cols": N, "rows": M}  (1..1000 each)
                 200 {"tty": path, "cols": N, "rows": M}; 409 no_console
                 The serial console's window size (TIOCSWINSZ; the kernel then
                 sends SIGWINCH to the program in front): a serial line has no
                 size of its own, the student's browser terminal has one.

Errors are {"error": "...", "message": "..."} with 400, 403, 404, 405, 411,
413 or 500. Files written by cloud-init ($STATE = state dir):
$STATE/setup.started before setup runs, the setup log while it runs,
$STATE/setup.rc (exit code) when it ends, $STATE/ready last, on success only.
The agent writes $STATE/agent.listening once it listens: cloud-init writes the
flag only then (bounded), so the flag is never older than the agent that reports it.

Settings: --listen / LABVM_AGENT_LISTEN (host:port, default 0.0.0.0:8899),
--token-file / LABVM_AGENT_TOKEN_FILE (/etc/labvm/agent-token),
--state-dir / LABVM_STATE_DIR (/var/lib/labvm),
--setup-log / LABVM_SETUP_LOG (/var/log/labvm-setup.log),
--console-tty / LABVM_AGENT_CONSOLE_TTY (/dev/ttyS0, KubeVirt's serial console).
"""
import argparse
import fcntl
import hmac
import json
import os
import re
import selectors
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 64 * 1024          # request body limit (413 above)
MAX_DISCARD = 1024 * 1024     # read and drop bodies up to this before a 413
OUTPUT_CAP = 64 * 1024        # per stream, for /run
LOG_TAIL = 2048               # bytes of the setup log in /ready
DEFAULT_TIMEOUT, MAX_TIMEOUT = 30, 300
EXIT_GRACE = 0.5              # s to wait for the pipes once the shell exited
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

CONF = {}  # filled by main(): token_file, state_dir, setup_log


def read_token():
    """The token, or None while there is none (file absent, unreadable, empty)."""
    try:
        with open(CONF["token_file"], "rb") as f:
            return f.read().strip() or None
    except OSError:
        return None


def log_tail(path, size=LOG_TAIL):
    """The end of the setup log as readable text ("" when there is none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            cut = f.tell() > size
            f.seek(max(0, f.tell() - size))
            data = f.read(size)
    except OSError:
        return ""
    if cut:  # drop a split UTF-8 character, and a partial first line if short
        data = data.lstrip(bytes(range(0x80, 0xC0)))
        nl = data.find(b"\n")
        if 0 <= nl < 256:
            data = data[nl + 1:]
    text = ANSI.sub("", data.decode("utf-8", "replace")).replace("\r\n", "\n")
    # progress bars redraw a line with \r: keep what was last drawn
    return "\n".join(line.rsplit("\r", 1)[-1] for line in text.split("\n"))


READY_WAIT_MAX, READY_WAIT_STEP = 60.0, 0.01  # the flag is looked for every 10 ms


def ready_wait(query):
    """ready_status(), held up to ?wait=S seconds until the flag appears or
    setup fails (setup_finished is not the end: the flag follows it)."""
    w = dict(p.partition("=")[::2] for p in query.split("&")).get("wait", "0")
    try:
        w = float(w)
    except ValueError:
        raise ValueError("wait must be a number of seconds") from None
    if not 0 <= w <= READY_WAIT_MAX:  # also refuses nan
        raise ValueError("wait must be between 0 and %g seconds" % READY_WAIT_MAX)
    end, sd = time.monotonic() + w, CONF["state_dir"]
    while time.monotonic() < end and not os.path.exists(os.path.join(sd, "ready")):
        if os.path.exists(os.path.join(sd, "setup.rc")) and ready_status()[1]["state"] == \
                "setup_failed":
            break
        time.sleep(min(READY_WAIT_STEP, max(0.0, end - time.monotonic())))
    return ready_status()  # the whole answer once, at the end (a stat per look till then)


def ready_status():
    state_dir = CONF["state_dir"]
    try:
        since = os.stat(os.path.join(state_dir, "ready")).st_mtime
        return 200, {"ready": True, "since": since}
    except OSError:
        pass
    rc, state = None, "booting"
    try:
        with open(os.path.join(state_dir, "setup.rc")) as f:
            rc = int(f.read().strip())
        state = "setup_finished" if rc == 0 else "setup_failed"
    except (OSError, ValueError):  # absent, or being written: still running
        if os.path.exists(os.path.join(state_dir, "setup.started")):
            state = "setup_running"
    return 503, {"ready": False, "state": state, "exit_code": rc,
                 "log_tail": log_tail(CONF["setup_log"])}


def kill_group(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:  # already gone
        pass


def run_command(cmd, timeout):
    """Run cmd with /bin/sh in its own process group; bounded output."""
    start = time.monotonic()
    cwd = "/root" if os.path.isdir("/root") and os.access("/root", os.X_OK) else "/"
    env = dict(os.environ, HOME="/root")
    env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    proc = subprocess.Popen(["/bin/sh", "-c", cmd], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=cwd, env=env, start_new_session=True)
    out = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    truncated = timed_out = False
    deadline, exited = start + timeout, None
    sel = selectors.DefaultSelector()
    for fd in out:
        sel.register(fd, selectors.EVENT_READ)
    try:
        # read both pipes until EOF; keep draining past the cap so the
        # command never blocks on a full pipe
        while sel.get_map():
            now = time.monotonic()
            if exited is None and proc.poll() is not None:
                exited = now
            limit = deadline if exited is None else min(deadline, exited + EXIT_GRACE)
            if now >= limit:
                # timeout, or the shell exited but something it started in
                # the background still holds the pipes: kill the group
                timed_out = exited is None
                kill_group(proc.pid)
                break
            for key, _ in sel.select(min(limit - now, 0.2)):
                data = os.read(key.fd, 65536)
                if not data:
                    sel.unregister(key.fd)
                    continue
                buf = out[key.fd]
                room = OUTPUT_CAP - len(buf)
                if len(data) > room:
                    truncated = True
                buf += data[:max(room, 0)]
        if exited is None and not timed_out:  # pipes closed, command still runs
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
                kill_group(proc.pid)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
    finally:
        if proc.returncode is None:  # interrupted, or would not die
            kill_group(proc.pid)
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
    stdout, stderr = (bytes(b).decode("utf-8", "replace") for b in out.values())
    return {"exit_code": proc.returncode, "stdout": stdout, "stderr": stderr,
            "timed_out": timed_out, "truncated": truncated,
            "duration_ms": int((time.monotonic() - start) * 1000)}


def parse_run(body):
    """(cmd, timeout) from a /run body, or raise ValueError with a message."""
    try:
        req = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError("body is not valid JSON")
    if not isinstance(req, dict):
        raise ValueError("body must be a JSON object")
    cmd = req.get("cmd")
    if not isinstance(cmd, str) or not cmd.strip():
        raise ValueError("cmd must be a non-empty string")
    timeout = req.get("timeout_s")
    if timeout is None:
        timeout = DEFAULT_TIMEOUT
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not timeout > 0:
        raise ValueError("timeout_s must be a positive number")
    return cmd, min(float(timeout), MAX_TIMEOUT)


def parse_tty_size(body):
    """(cols, rows) from a /tty-size body, or raise ValueError with a message."""
    try:
        req = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError("body is not valid JSON")
    if not isinstance(req, dict):
        raise ValueError("body must be a JSON object")
    out = []
    for k in ("cols", "rows"):
        v = req.get(k)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1000:
            raise ValueError(k + " must be an integer in 1..1000")
        out.append(v)
    return out[0], out[1]


def set_tty_size(path, cols, rows):
    fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    finally:
        os.close(fd)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive; every answer has Content-Length
    server_version = "labvm-agent/1"
    timeout = 120  # idle keep-alive connections are closed after this

    ROUTES = {"/ready": "GET", "/run": "POST", "/tty-size": "POST"}

    def handle_any(self):
        length = self.headers.get("Content-Length", "0")
        if self.headers.get("Transfer-Encoding"):
            return self.error(411, "length_required", "send a Content-Length", close=True)
        if not length.isdigit():
            return self.error(400, "bad_request", "invalid Content-Length", close=True)
        length = int(length)
        body = None  # None: too large, not kept
        if length <= MAX_BODY:
            body = self.rfile.read(length)
            if len(body) != length:
                return self.error(400, "bad_request", "body shorter than Content-Length",
                                  close=True)
        elif length <= MAX_DISCARD:  # read it, so that the client sees our 413
            self.rfile.read(length)
        else:
            self.close_connection = True

        token = read_token()
        auth = self.headers.get("Authorization", "")
        scheme, _, given = auth.partition(" ")
        if token is None:
            return self.error(403, "forbidden", "no agent token configured yet")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
                given.strip().encode("utf-8", "replace"), token):
            return self.error(403, "forbidden", "missing or wrong bearer token")

        path, _, query = self.path.partition("?")
        if path not in self.ROUTES:
            return self.error(404, "not_found", "no such path: " + path)
        if self.command != self.ROUTES[path]:
            return self.error(405, "method_not_allowed", "use " + self.ROUTES[path],
                              headers={"Allow": self.ROUTES[path]})
        if body is None:
            return self.error(413, "too_large", "request body over %d bytes" % MAX_BODY,
                              close=True)
        if path == "/ready":
            try:
                return self.send_json(*ready_wait(query))
            except ValueError as e:
                return self.error(400, "bad_request", str(e))
        if path == "/tty-size":
            try:
                cols, rows = parse_tty_size(body)
            except ValueError as e:
                return self.error(400, "bad_request", str(e))
            try:
                set_tty_size(CONF["console_tty"], cols, rows)
            except OSError as e:
                return self.error(409, "no_console", "%s: %s" % (CONF["console_tty"], e.strerror))
            return self.send_json(200, {"tty": CONF["console_tty"], "cols": cols, "rows": rows})
        try:
            cmd, timeout = parse_run(body)
        except ValueError as e:
            return self.error(400, "bad_request", str(e))
        try:
            result = run_command(cmd, timeout)
        except OSError as e:
            return self.error(500, "exec_failed", str(e))
        self.send_json(200, result)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = handle_any

    def send_json(self, code, obj, headers=None, close=False):
        data = json.dumps(obj).encode("utf-8")
        if close:
            self.close_connection = True
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            self.wfile.flush()
        except OSError:  # the client went away
            self.close_connection = True

    def error(self, code, error, message, headers=None, close=False):
        self.send_json(code, {"error": error, "message": message}, headers, close)

    def send_error(self, code, message=None, explain=None):
        # http.server's own errors (malformed request line, ...) as JSON too,
        # with a status line even when the request line was unparsable
        if self.request_version == "HTTP/0.9":
            self.request_version = "HTTP/1.0"
        self.error(code, "http_%d" % code, message or explain or "error", close=True)

    def log_request(self, code="-", size="-"):
        code = getattr(code, "value", code)
        self.log_message("%s %s %s", getattr(self, "command", None) or "-",
                         (getattr(self, "path", None) or "-")[:200], code)

    def log_message(self, fmt, *args):
        sys.stderr.write("%s agent: %s %s\n" % (
            time.strftime("%Y-%m-%dT%H:%M:%S"), self.client_address[0], fmt % args))
        sys.stderr.flush()


def parse_listen(value):
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError("listen address must be host:port, got %r" % value)
    return host.strip("[]") or "0.0.0.0", int(port)


def main(argv=None):
    env = os.environ.get
    ap = argparse.ArgumentParser(
        description="labvm guest agent: GET /ready and POST /run over HTTP, "
                    "bearer-token protected.")
    ap.add_argument("--listen", default=env("LABVM_AGENT_LISTEN") or "0.0.0.0:8899",
                    help="host:port (env LABVM_AGENT_LISTEN, default 0.0.0.0:8899)")
    ap.add_argument("--token-file", default=env("LABVM_AGENT_TOKEN_FILE") or "/etc/labvm/agent-token",
                    help="file holding the bearer token (env LABVM_AGENT_TOKEN_FILE)")
    ap.add_argument("--state-dir", default=env("LABVM_STATE_DIR") or "/var/lib/labvm",
                    help="setup.started, setup.rc, ready (env LABVM_STATE_DIR)")
    ap.add_argument("--setup-log", default=env("LABVM_SETUP_LOG") or "/var/log/labvm-setup.log",
                    help="setup script output (env LABVM_SETUP_LOG)")
    ap.add_argument("--console-tty", default=env("LABVM_AGENT_CONSOLE_TTY") or "/dev/ttyS0",
                    help="the serial console that POST /tty-size sizes (env LABVM_AGENT_CONSOLE_TTY)")
    args = ap.parse_args(argv)
    try:
        host, port = parse_listen(args.listen)
    except ValueError as e:
        ap.error(str(e))
    CONF.update(token_file=args.token_file, state_dir=args.state_dir,
                setup_log=args.setup_log, console_tty=args.console_tty)

    class Server(ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        daemon_threads = True
        allow_reuse_address = True

    server = Server((host, port), Handler)
    try:  # for cloud-init's last line: the flag follows (see the top)
        with open(os.path.join(args.state_dir, "agent.listening"), "w") as f:
            f.write("%s:%d\n" % (host, server.server_address[1]))
    except OSError:
        pass
    sys.stderr.write("agent: listening on %s:%d\n" % (host, server.server_address[1]))
    sys.stderr.flush()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
