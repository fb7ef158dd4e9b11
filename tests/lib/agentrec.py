#!/usr/bin/python3
"""A stand-in for the guest agent that records what reaches it, for tests
where the token must not go somewhere, or where a frozen agent must cost
one request at a time.

Inside a simulated guest (its own network namespace) it listens where the
agent does (0.0.0.0:8899) and writes one JSON line per event to --log:

    {"ev": "open", "conc": N}    a connection; N open at once, this one counted
    {"ev": "req", "method": ..., "path": ..., "auth": sha256 of the
     Authorization header's value (never the token itself), "body": ...}
    {"ev": "close", "conc": N}

--mode silent reads the request and never answers (a frozen agent: the
connection stays until the client gives up); --mode answer answers like a
guest whose setup still runs (/ready 503 setup_running, /tty-size 200);
--mode garbage answers each connection with the next of GARBAGE (what a
student who is root can put on port 8899: bytes that are not UTF-8, NULs
and lone surrogates in JSON strings, "every step passed", no JSON at all,
a broken status line, a short or oversize body, a body trickled a byte at a
time, deep nesting, wrong types, a hang-up).

From a test (host side): replace_agent() kills the guest's agent and starts
this in its place; records() reads the log back."""
import argparse
import hashlib
import json
import os
import signal
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))

BAD = b"bad \xff\xfe \x80\xbf \xc0\xaf \xed\xa0\x80 \xf8\x88\x80\x80\x80 "
JA = "\u65e5\u672c\u8a9e\u25cf\u2018quoted\u2019".encode()


def _head(code, n, extra=b""):
    return (b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n" % (code, n)) + extra + b"\r\n"


def _full(code, body):
    return [_head(code, len(body)) + body]


# each entry: (name, fn(path) -> list of byte strings to send, one after the other;
# None between them: a pause of 0.2 s)
GARBAGE = [
    ("bad-bytes-pass", lambda p: _full(200, b'{"ready": true, "exit_code": 0, "timed_out": false, '
                                       b'"stdout": "' + BAD * 50 + JA * 300 + JA[:-2] +
                                       b'", "stderr": "\\u0000 nul \\u00e9 \x01\x1f", '
                                       b'"log_tail": "' + BAD + b'", "tty": "' + BAD + b'", '
                                       b'"cols": 80, "rows": 24}')),
    ("lone-surrogates", lambda p: _full(200, b'{"exit_code": 0, "stdout": "\\ud800 \\udfff '
                                        b'\\udbff\\u0041", "stderr": "", "timed_out": false}')),
    ("not-json", lambda p: _full(200, bytes(range(256)) * 16)),
    ("bad-status-line", lambda p: [b"HTTP/1.1 2\xff\xfe OK\r\n\xff: \x80\r\n\r\n{}"]),
    ("short-body", lambda p: [_head(200, 100000) + b'{"exit_code": 0, "stdout": "'
                              + JA[:5]]),
    ("oversize", lambda p: [_head(200, 2 * 1024 * 1024 + 16) + b'{"stdout": "' +
                            (BAD + JA) * (2 * 1024 * 1024 // (len(BAD) + len(JA)) + 1)]),
    ("trickle", lambda p: [x for b in b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
                           for x in (bytes([b]), None)]),
    ("deep-nesting", lambda p: _full(200, b"[" * 200000 + b"]" * 200000)),
    ("wrong-types", lambda p: _full(200, b'{"exit_code": "0", "stdout": 5, "stderr": [], '
                                    b'"timed_out": "yes", "ready": "true", "state": 7, '
                                    b'"cols": "x", "rows": null, "log_tail": {}}')),
    ("hang-up", lambda p: []),
    ("not-ready-bad-tail", lambda p: _full(503, b'{"ready": false, "state": "setup_failed", '
                                           b'"exit_code": 9, "log_tail": "' + BAD +
                                           JA * 400 + JA[:-1] + b'"}')),
    ("huge-exit", lambda p: _full(200, b'{"exit_code": 1e999, "stdout": "' + JA * 20000 +
                                  b'\\ud83d", "stderr": "", "timed_out": false}')),
]
# /run (a grade's steps, one after the other): answers that parse come in runs,
# so that some grades get every step answered (and passed, with bytes that are
# not UTF-8 in their output) and others fail halfway
RUN_ORDER = ["bad-bytes-pass", "bad-bytes-pass", "huge-exit", "wrong-types", "bad-bytes-pass",
             "lone-surrogates", "not-json", "oversize", "bad-bytes-pass", "trickle", "deep-nesting", "short-body",
             "bad-status-line", "hang-up", "not-ready-bad-tail"]


def serve(args):
    lock = threading.Lock()
    state = {"conc": 0}
    logf = open(args.log, "a", buffering=1)

    def log(o):
        with lock:
            logf.write(json.dumps(o) + "\n")

    def conn(c):
        with lock:
            state["conc"] += 1
            n = state["conc"]
        log({"ev": "open", "conc": n})
        try:
            c.settimeout(120)
            data = b""
            while b"\r\n\r\n" not in data and len(data) < 65536:
                d = c.recv(65536)
                if not d:
                    break
                data += d
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path = (lines[0].split(" ") + ["", ""])[:2]
            hdr = {}
            for ln in lines[1:]:
                k, _, v = ln.partition(":")
                hdr[k.strip().lower()] = v.strip()
            want = int(hdr.get("content-length") or 0)
            while len(body) < want:
                d = c.recv(65536)
                if not d:
                    break
                body += d
            auth = hdr.get("authorization")
            log({"ev": "req", "method": method, "path": path,
                 "auth": hashlib.sha256(auth.encode()).hexdigest() if auth else None,
                 "body": body.decode("utf-8", "replace")})
            if args.mode == "silent":
                while c.recv(65536):
                    pass
                return
            if args.mode == "garbage":
                kind = "/run" if path.startswith("/run") else "other"
                with lock:
                    i = state.setdefault(kind, 0)
                    state[kind] += 1
                if kind == "/run":
                    name = RUN_ORDER[i % len(RUN_ORDER)]
                    fn = dict(GARBAGE)[name]
                else:
                    name, fn = GARBAGE[i % len(GARBAGE)]
                log({"ev": "garbage", "what": name})
                for part in fn(path):
                    if part is None:
                        time.sleep(0.2)
                    else:
                        c.sendall(part)
                return
            if path.startswith("/tty-size"):
                try:
                    j = json.loads(body)
                    out = {"tty": "/dev/ttyS0", "cols": j["cols"], "rows": j["rows"]}
                except (ValueError, KeyError, TypeError):
                    out = {"tty": "/dev/ttyS0"}
                code = 200
            elif path.startswith("/ready"):
                code, out = 503, {"ready": False, "state": "setup_running", "exit_code": None,
                                  "log_tail": ""}
            else:
                code, out = 200, {}
            b = json.dumps(out).encode()
            c.sendall(f"HTTP/1.1 {code} X\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {len(b)}\r\nConnection: close\r\n\r\n".encode() + b)
        except OSError:
            pass
        finally:
            with lock:
                state["conc"] -= 1
                n = state["conc"]
            log({"ev": "close", "conc": n})
            c.close()

    host, _, port = args.listen.rpartition(":")
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, int(port)))
    s.listen(64)
    signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
    while True:
        c, _ = s.accept()
        threading.Thread(target=conn, args=(c,), daemon=True).start()


def replace_agent(kube, vm, ip, mode, log="/tmp/agentrec.jsonl"):
    """Kill the agent of guest vm (listening on ip) and start a recorder in
    its place; returns once the recorder listens."""
    from guestproc import listener_pid
    from labclient import wait_until
    pid = wait_until(lambda: listener_pid(ip), 20, 0.1, f"the agent on {ip}")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not listener_pid(ip), 10, 0.05, "the agent gone")
    # the recorder is copied into the guest first: a guest's /tmp is its own,
    # so a checkout under /tmp (a CI clone) is not there by path
    import base64
    with open(os.path.join(HERE, "agentrec.py"), "rb") as f:
        b64 = base64.b64encode(f.read()).decode()
    kube.guest_exec(vm, f"echo {b64} | base64 -d > /root/agentrec.py; rm -f {log}; "
                        f"nohup /usr/bin/python3 -I /root/agentrec.py "
                        f"--mode {mode} --log {log} >/dev/null 2>&1 &")
    wait_until(lambda: listener_pid(ip, name=b"agentrec"), 20, 0.1, f"the recorder on {ip}")


def records(kube, vm, log="/tmp/agentrec.jsonl"):
    out = kube.guest_exec(vm, f"cat {log} 2>/dev/null; true")["stdout"]
    return [json.loads(ln) for ln in out.splitlines() if ln.strip()]


def token_hash(token):
    return hashlib.sha256(f"Bearer {token}".encode()).hexdigest()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", default="0.0.0.0:8899")
    ap.add_argument("--log", required=True)
    ap.add_argument("--mode", choices=("silent", "answer", "garbage"), default="silent")
    serve(ap.parse_args(sys.argv[1:]))
