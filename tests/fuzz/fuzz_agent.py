#!/usr/bin/python3
"""Fuzz the guest agent's HTTP handler (fcgi-app/guest/agent.py).

    tests/fuzz/fuzz_agent.py [--seconds N] [--corpus DIR] [--crashes DIR]

libFuzzer cannot drive Python, so this is a mutation fuzzer of its own: raw
HTTP requests from the corpus (tests/fuzz/corpus/agent: valid and broken
requests to /ready, /ready?wait, /run, /tty-size), mutated at the byte level
(flips, inserts, deletes, repeats, splices, header and Content-Length games),
sent to one agent on 127.0.0.1 over fresh connections. A finding is: the
agent process dies, an answer that is not HTTP/1.x with a 3-digit status, a
500, a Python traceback in its log, or the agent no longer answering a valid
request afterwards. Findings are written to --crashes and make the exit code 1.

Safety: POST /run executes its "cmd". Before a request with the real token
reaches /run, its JSON body is parsed exactly as the agent parses it and any
"cmd" is replaced by `true`; and the agent runs as the user nobody with its
own files in a temporary folder. Nothing leaves loopback.
"""
import argparse
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AGENT = os.path.join(SRC, "fcgi-app", "guest", "agent.py")
TOKEN = "fuzz-Token-0123456789abcdef0123456789"
STATUS = re.compile(rb"^HTTP/1\.[01] (\d{3}) ")


def start_agent(tmp):
    os.makedirs(os.path.join(tmp, "state"))
    tok = os.path.join(tmp, "agent-token")
    with open(tok, "w") as f:
        f.write(TOKEN + "\n")
    script = os.path.join(tmp, "agent.py")
    shutil.copy(AGENT, script)
    log = open(os.path.join(tmp, "agent.log"), "wb")
    env = {"PATH": "/usr/bin:/bin", "LABVM_AGENT_LISTEN": "127.0.0.1:0",
           "LABVM_AGENT_TOKEN_FILE": tok, "LABVM_STATE_DIR": os.path.join(tmp, "state"),
           "LABVM_SETUP_LOG": os.path.join(tmp, "setup.log"),
           "LABVM_AGENT_CONSOLE_TTY": "/dev/null"}
    argv = ["/usr/bin/python3", script]
    if os.geteuid() == 0:   # the agent's /run as nobody, its files theirs
        subprocess.run(["chown", "-R", "nobody:nogroup", tmp], check=True)
        os.chmod(tmp, 0o755)
        argv = ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"] + argv
    p = subprocess.Popen(argv, env=env, cwd=tmp, stdin=subprocess.DEVNULL, stdout=log,
                         stderr=log)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and p.poll() is None:
        with open(log.name, errors="replace") as f:
            m = re.search(r"listening on .*:(\d+)", f.read())
        if m:
            return p, int(m.group(1)), log.name
        time.sleep(0.05)
    raise SystemExit("fuzz_agent: the agent did not start")


def split(req):
    head, sep, body = req.partition(b"\r\n\r\n")
    return head, sep, body


def defuse(req):
    """A /run request the agent would accept gets cmd = "true"."""
    head, sep, body = split(req)
    if b"/run" not in head.split(b"\r\n", 1)[0] or TOKEN.encode() not in head:
        return req
    m = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
    n = int(m.group(1)) if m else len(body)
    try:
        doc = json.loads(body[:n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return req
    if not isinstance(doc, dict) or "cmd" not in doc:
        return req
    doc["cmd"] = "true"
    new = json.dumps(doc).encode()
    head = re.sub(rb"(?im)^content-length:.*$", b"Content-Length: %d" % len(new), head)
    if not m:
        head += b"\r\nContent-Length: %d" % len(new)
    return head + b"\r\n\r\n" + new


def mutate(rng, data, corpus):
    data = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(9)
        i = rng.randrange(len(data) + 1)
        if op == 0 and data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 2 and data:
            del data[i:i + rng.randint(1, 16)]
        elif op == 3 and data:
            j = rng.randrange(len(data))
            data[i:i] = data[j:j + rng.randint(1, 32)] * rng.randint(1, 20)
        elif op == 4:
            other = rng.choice(corpus)
            j = rng.randrange(len(other) + 1)
            data = data[:i] + bytearray(other[j:])
        elif op == 5:
            data = bytearray(re.sub(rb"(?i)content-length:\s*\d+",
                                    b"Content-Length: " + rng.choice(
                                        [b"0", b"-1", b"99999999999", b"1", b"x", b"00012"]),
                                    bytes(data), count=1))
        elif op == 6:
            h = rng.choice([b"Transfer-Encoding: chunked", b"Expect: 100-continue",
                            b"Authorization: Bearer " + TOKEN.encode(), b"Authorization: Basic x",
                            b"Connection: close", b"Content-Type: text/plain", b"X: " + b"y" * 9000])
            k = data.find(b"\r\n")
            if k >= 0:
                data[k:k] = b"\r\n" + h
        elif op == 7:
            data = bytearray(re.sub(rb"wait=\d+", b"wait=" + rng.choice(
                [b"-1", b"0", b"5", b"1e9", b"abc", b"", b"2.5"]), bytes(data), count=1))
        elif op == 8:
            data = bytearray(re.sub(rb'"(cols|rows|timeout_s)":\s*[^,}]*', lambda m: b'"' + m.group(1) + b'":' + rng.choice(
                [b"0", b"-1", b"1001", b"1e400", b"null", b"true", b'"8"', b"[]", b"80.5"]),
                bytes(data), count=1))
    return bytes(data[:65536])


def send(port, req, timeout=5.0):
    """The answer's first bytes, b"" when the agent closed without one."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(req)
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        out = b""
        while len(out) < 256:
            try:
                d = s.recv(4096)
            except (socket.timeout, ConnectionResetError):
                break
            if not d:
                break
            out += d
        return out
    finally:
        s.close()


VALID = (b"GET /ready HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer " + TOKEN.encode() +
         b"\r\nConnection: close\r\n\r\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("FUZZ_SECONDS", 150)))
    ap.add_argument("--corpus", default=os.path.join(SRC, "tests", "fuzz", "corpus", "agent"))
    ap.add_argument("--crashes", default=os.path.join(SRC, "build-fuzz", "crashes", "agent"))
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    corpus = []
    for n in sorted(os.listdir(a.corpus)):
        with open(os.path.join(a.corpus, n), "rb") as f:
            corpus.append(f.read().replace(b"@TOKEN@", TOKEN.encode()))
    seed = a.seed if a.seed is not None else int(time.time())
    rng = random.Random(seed)
    tmp = tempfile.mkdtemp(prefix="labvm-fuzz-agent-")
    os.makedirs(a.crashes, exist_ok=True)
    proc, port, logpath = start_agent(tmp)
    runs = findings = 0
    statuses = {}
    t_end = time.monotonic() + a.seconds
    try:
        while time.monotonic() < t_end:
            req = defuse(mutate(rng, rng.choice(corpus), corpus))
            why = None
            try:
                out = send(port, req)
            except OSError as e:
                out, why = b"", f"connect/send: {e}"
            m = STATUS.match(out)
            line = req.split(b"\r\n", 1)[0].split(b"\n", 1)[0]
            simple = len(line.split()) < 3    # HTTP/0.9: the answer has no status line
            if out and not m and not (simple and out.startswith(b"{")):
                why = f"not an HTTP answer: {out[:60]!r}"
            elif m:
                statuses[m.group(1)] = statuses.get(m.group(1), 0) + 1
                if m.group(1) == b"500":
                    why = "500"
            if proc.poll() is not None:
                why = f"the agent died ({proc.returncode})"
            runs += 1
            if runs % 200 == 0 or why:
                with open(logpath, errors="replace") as f:
                    if "Traceback" in f.read():
                        why = why or "a traceback in the agent's log"
                if not why:
                    ok = STATUS.match(send(port, VALID) or b"")
                    if not ok or ok.group(1) not in (b"200", b"503"):
                        why = "a valid /ready is no longer answered"
            if why:
                findings += 1
                p = os.path.join(a.crashes, f"finding-{findings}")
                with open(p, "wb") as f:
                    f.write(req)
                print(f"fuzz_agent: finding: {why} (input {p})", flush=True)
                if proc.poll() is not None:
                    break
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    st = " ".join(f"{k.decode()}:{v}" for k, v in sorted(statuses.items()))
    print(f"fuzz: agent: {runs} runs in {a.seconds:.0f} s (seed {seed}), answers {st}, "
          f"findings {findings}", flush=True)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
