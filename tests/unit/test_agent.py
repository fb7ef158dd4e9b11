#!/usr/bin/python3
"""The guest agent (fcgi-app/guest/agent.py), run locally as a plain process.

Each agent runs from a lone copy of agent.py in a temp dir (so it must be
self-contained) on 127.0.0.1 with port 0, with the token file, state dir and
setup log in temp dirs. LABVM_AGENT_PYTHON picks the interpreter that runs
the agent (default /usr/bin/python3), e.g. to try an old Python 3.7.
"""
import ast
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from tap import T

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AGENT = os.path.join(SRC, "fcgi-app", "guest", "agent.py")
PYTHON = os.environ.get("LABVM_AGENT_PYTHON", "/usr/bin/python3")
TOKEN = "s3cr3t-Token-0123456789abcdef"

t = T()
TMP = tempfile.mkdtemp(prefix="labvm-agent-test-")


class Agent:
    """One agent process with its own files under TMP/<name>."""

    def __init__(self, name, token=TOKEN, args=None, env=None, listen=True):
        self.dir = os.path.join(TMP, name)
        self.state = os.path.join(self.dir, "state")
        self.token_file = os.path.join(self.dir, "agent-token")
        self.setup_log = os.path.join(self.dir, "labvm-setup.log")
        self.log = os.path.join(self.dir, "agent.log")
        os.makedirs(self.state)
        script = os.path.join(self.dir, "opt", "agent.py")
        os.makedirs(os.path.dirname(script))
        shutil.copy(AGENT, script)
        if token is not None:
            self.write_token(token + "\n")
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("LABVM_", "PYTHON"))}
        e.update(LABVM_AGENT_TOKEN_FILE=self.token_file, LABVM_STATE_DIR=self.state,
                 LABVM_SETUP_LOG=self.setup_log)
        if listen:
            e["LABVM_AGENT_LISTEN"] = "127.0.0.1:0"
        e.update(env or {})
        with open(self.log, "wb") as logf:
            self.proc = subprocess.Popen([PYTHON, script] + (args or []), env=e,
                                         cwd=self.dir, stdin=subprocess.DEVNULL,
                                         stdout=logf, stderr=logf)
        self.port = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.proc.poll() is None:
            for line in self.log_text().splitlines():
                if "listening on" in line:
                    self.port = int(line.rsplit(":", 1)[1])
                    return
            time.sleep(0.02)
        raise RuntimeError("agent did not start: " + self.log_text())

    def write_token(self, text):
        with open(self.token_file, "w") as f:
            f.write(text)
        os.chmod(self.token_file, 0o600)

    def log_text(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def conn(self, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def req(self, method, path, body=None, token=TOKEN, headers=None, conn=None,
            timeout=30):
        """(status, decoded JSON body, response headers)."""
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = "Bearer " + token
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        c = conn or self.conn(timeout)
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        raw = r.read()
        if conn is None:
            c.close()
        t.eq(r.getheader("Content-Length"), str(len(raw)), "Content-Length")
        t.eq(r.getheader("Content-Type"), "application/json", "Content-Type")
        return r.status, json.loads(raw.decode("utf-8")), r

    def run(self, cmd, timeout_s=None, **kw):
        body = {"cmd": cmd}
        if timeout_s is not None:
            body["timeout_s"] = timeout_s
        status, doc, _ = self.req("POST", "/run", body, **kw)
        t.eq(status, 200, "POST /run status")
        return doc

    def reset_state(self):
        for n in os.listdir(self.state):
            os.unlink(os.path.join(self.state, n))
        if os.path.exists(self.setup_log):
            os.unlink(self.setup_log)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def write(path, data):
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def alive(pid):
    """True while pid runs (a zombie waiting for a reaper counts as gone)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def wait_gone(pid, secs=3.0):
    deadline = time.monotonic() + secs
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


A = Agent("main")


# -- the file ----------------------------------------------------------------

@t.test
def agent_is_one_stdlib_file_for_python37():
    with open(AGENT) as f:
        src = f.read()
    tree = ast.parse(src, feature_version=(3, 7))  # no walrus & co.
    mods = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            t.eq(node.level, 0, "relative import")
            mods.add((node.module or "").split(".")[0])
    t.eq(sorted(m for m in mods if m not in sys.stdlib_module_names), [],
         "imports outside the standard library")
    for newer in ("removeprefix", "removesuffix", "functools.cache"):
        t.ok(newer not in src, "uses a post-3.7 feature: " + newer)
    t.ok(len(src.splitlines()) < 420, "agent.py stays small")


@t.test
def help_lists_the_options():
    r = subprocess.run([PYTHON, AGENT, "--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=10)
    t.eq(r.returncode, 0, "exit code")
    for opt in (b"--listen", b"--token-file", b"--state-dir"):
        t.ok(opt in r.stdout, "--help mentions " + opt.decode())
    r = subprocess.run([PYTHON, AGENT, "--listen", "nonsense"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=10)
    t.ok(r.returncode != 0, "a bad --listen is refused", r.stdout)


@t.test
def listening_marker_names_the_address_once_bound():
    # cloud-init writes the ready flag only once this file is there
    b = Agent("marker")
    try:
        with open(os.path.join(b.state, "agent.listening")) as f:
            t.eq(f.read(), "127.0.0.1:%d\n" % b.port, "state/agent.listening: the address")
        t.eq(b.req("GET", "/ready", token=TOKEN)[0], 503, "and it answers")
    finally:
        b.stop()


# -- the token ---------------------------------------------------------------

@t.test
def missing_or_wrong_token_is_403_right_one_is_accepted():
    for what, kw in [("no header", {"token": None}),
                     ("wrong token", {"token": "nope"}),
                     ("token prefix", {"token": TOKEN[:-1]}),
                     ("token plus more", {"token": TOKEN + "x"}),
                     ("empty bearer", {"token": ""}),
                     ("basic scheme", {"token": None,
                                       "headers": {"Authorization": "Basic " + TOKEN}})]:
        status, doc, _ = A.req("GET", "/ready", **kw)
        t.eq(status, 403, what)
        t.eq(doc.get("error"), "forbidden", what + ": error")
    status, doc, _ = A.req("GET", "/ready")
    t.ok(status in (200, 503), "right token is accepted", status)
    t.eq(doc.get("ready"), False, "ready")
    status, _, _ = A.req("GET", "/ready", token=None,
                         headers={"Authorization": "bearer " + TOKEN})
    t.ok(status in (200, 503), "scheme is case-insensitive", status)
    # without a token nothing else leaks: not 404 nor 405 nor a command run
    marker = os.path.join(A.dir, "ran")
    t.eq(A.req("GET", "/nope", token="x")[0], 403, "unknown path without token")
    t.eq(A.req("POST", "/run", {"cmd": "touch " + marker}, token="x")[0], 403,
         "/run with wrong token")
    t.ok(not os.path.exists(marker), "command did not run")


@t.test
def token_file_is_read_lazily_and_absent_means_403():
    ag = Agent("lazy", token=None)
    try:
        for tok in (TOKEN, "", None):
            t.eq(ag.req("GET", "/ready", token=tok)[0], 403, "no token file, token %r" % tok)
        ag.write_token("")
        t.eq(ag.req("GET", "/ready", token="")[0], 403, "empty token file")
        ag.write_token("\n  " + TOKEN + "  \n")  # written later, with whitespace
        t.eq(ag.req("GET", "/ready")[0], 503, "token file appeared")
        t.eq(ag.req("GET", "/ready", token="wrong")[0], 403, "still checks it")
        ag.write_token("rotated\n")
        t.eq(ag.req("GET", "/ready", token="rotated")[0], 503, "re-read each request")
        t.eq(ag.req("GET", "/ready")[0], 403, "old token refused")
    finally:
        ag.stop()


@t.test
def token_is_never_logged_and_requests_are():
    A.req("GET", "/ready")
    A.req("GET", "/ready", token="wrong-" + TOKEN)
    A.run("true")
    log = A.log_text()
    t.ok(TOKEN not in log, "token in the agent log")
    t.ok("Authorization" not in log and "Bearer" not in log, "headers in the log")
    t.ok("GET /ready 503" in log, "request line logged", log[-500:])
    t.ok("GET /ready 403" in log, "refusal logged")
    t.ok("POST /run 200" in log, "run logged")


# -- /ready --------------------------------------------------------------------

@t.test
def ready_follows_setup_from_booting_to_ready():
    A.reset_state()
    status, doc, _ = A.req("GET", "/ready")
    t.eq((status, doc), (503, {"ready": False, "state": "booting", "exit_code": None,
                               "log_tail": ""}), "before setup")
    write(os.path.join(A.state, "setup.started"), "")
    write(A.setup_log, "installing packages\n")
    status, doc, _ = A.req("GET", "/ready")
    t.eq(status, 503, "running: status")
    t.eq(doc.get("state"), "setup_running", "running: state")
    t.eq(doc.get("exit_code"), None, "running: exit_code")
    t.eq(doc.get("log_tail"), "installing packages\n", "running: log_tail")
    write(os.path.join(A.state, "setup.rc"), "")  # being written
    t.eq(A.req("GET", "/ready")[1].get("state"), "setup_running", "empty rc file")
    write(os.path.join(A.state, "setup.rc"), "0\n")
    status, doc, _ = A.req("GET", "/ready")
    t.eq((status, doc.get("state"), doc.get("exit_code")), (503, "setup_finished", 0),
         "rc 0, no flag yet")
    write(os.path.join(A.state, "ready"), "")
    os.utime(os.path.join(A.state, "ready"), (1700000000.25, 1700000000.25))
    status, doc, _ = A.req("GET", "/ready")
    t.eq((status, doc), (200, {"ready": True, "since": 1700000000.25}), "ready")
    os.unlink(os.path.join(A.state, "ready"))
    t.eq(A.req("GET", "/ready")[0], 503, "flag removed")


@t.test
def ready_reports_setup_failure_with_exit_code_and_log_tail():
    A.reset_state()
    write(os.path.join(A.state, "setup.started"), "")
    lines = ["step %04d: doing things" % i for i in range(500)]
    tail = "E: Unable to locate package nginx-extraz\n"
    write(A.setup_log, ("\n".join(lines) + "\n").encode() + b"bad \xff\xfe bytes\n"
          + b"Progress 10%\rProgress 50%\rProgress 100%\r\n\x1b[31m" + tail.encode())
    write(os.path.join(A.state, "setup.rc"), "100\n")
    status, doc, _ = A.req("GET", "/ready")
    t.eq(status, 503, "status")
    t.eq(doc.get("ready"), False, "ready")
    t.eq(doc.get("state"), "setup_failed", "state")
    t.eq(doc.get("exit_code"), 100, "exit_code")
    lt = doc.get("log_tail", "")
    t.ok(lt.endswith(tail), "log tail ends with the last line", lt[-200:])
    t.ok("step 0000" not in lt, "only the tail of a long log")
    t.ok(1000 <= len(lt.encode()) <= 2100, "about 2 KiB", len(lt.encode()))
    t.ok(lt.startswith("step "), "starts at a whole line", lt[:40])
    t.ok("bad \ufffd\ufffd bytes" in lt, "invalid UTF-8 replaced")
    t.ok("Progress 100%\n" in lt and "Progress 10%" not in lt, "progress redraws folded")
    t.ok("\x1b" not in lt, "terminal escapes removed")
    A.reset_state()


@t.test
def ready_wait_holds_until_the_flag_or_a_failed_setup():
    import threading
    A.reset_state()
    write(os.path.join(A.state, "setup.started"), "")
    flag = os.path.join(A.state, "ready")
    timer = threading.Timer(0.4, lambda: write(flag, ""))
    timer.start()
    try:
        status, doc, _ = A.req("GET", "/ready?wait=20")
    finally:
        timer.cancel()
    t.eq((status, doc.get("ready")), (200, True), "held, then 200 once the flag appeared")
    t.ok(os.path.exists(flag), "the flag exists: the answer waited for it")
    os.unlink(flag)
    status, doc, _ = A.req("GET", "/ready?wait=0.2")
    t.eq((status, doc.get("state")), (503, "setup_running"), "no flag within the wait: 503")
    write(os.path.join(A.state, "setup.rc"), "3\n")
    status, doc, _ = A.req("GET", "/ready?wait=20")
    t.eq((status, doc.get("state"), doc.get("exit_code")), (503, "setup_failed", 3),
         "a failed setup answers at once, with its exit code")
    for bad in ("x", "-1", "61", "nan", ""):
        status, doc, _ = A.req("GET", "/ready?wait=" + bad)
        t.eq((status, doc.get("error")), (400, "bad_request"), "wait=%r: 400" % bad)
    status, _, _ = A.req("GET", "/ready?wait=5", token="wrong")
    t.eq(status, 403, "the same token rule")
    A.reset_state()


# -- /run ----------------------------------------------------------------------

@t.test
def run_returns_exit_code_stdout_stderr():
    doc = A.run("echo out; echo err >&2; exit 7")
    t.eq({k: doc.get(k) for k in ("exit_code", "stdout", "stderr", "timed_out", "truncated")},
         {"exit_code": 7, "stdout": "out\n", "stderr": "err\n", "timed_out": False,
          "truncated": False}, "result")
    t.ok(isinstance(doc.get("duration_ms"), int) and doc["duration_ms"] >= 0,
         "duration_ms", doc.get("duration_ms"))
    t.eq(A.run("true")["exit_code"], 0, "true")
    t.eq(A.run("exit 255")["exit_code"], 255, "exit 255")
    t.eq(A.run("printf 'caf\\303\\251 \\377'")["stdout"], "caf\u00e9 \ufffd", "utf-8 output")
    doc = A.run("pwd; echo $HOME; read x; echo \"[$x]\"")
    want_cwd = "/root" if os.access("/root", os.X_OK) else "/"
    t.eq(doc["stdout"], want_cwd + "\n/root\n[]\n", "cwd, HOME, empty stdin")
    doc = A.run("sleep 0.3", timeout_s=60)
    t.eq((doc["exit_code"], doc["timed_out"]), (0, False),
         "a command within its timeout runs to its end")
    t.ok(250 <= doc["duration_ms"], "duration_ms measures (at least the 0.3 s slept)",
         doc["duration_ms"])


def group_members(pgid):
    """The live processes of process group pgid."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    st = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if st[0] != "Z" and int(st[2]) == pgid:
                out.append(int(d))
    return out


@t.test
def run_timeout_kills_the_whole_process_group():
    pidfile = os.path.join(A.dir, "grandchild.pid")
    doc = A.run("echo started; sh -c 'sleep 60 & echo $! > %s; wait'; echo never" % pidfile,
                timeout_s=3)
    # what ended the wait is the timeout: the shell was killed (-9), so the
    # command never reached its end ("never"), and what it wrote before is kept
    t.eq((doc.get("timed_out"), doc.get("exit_code")), (True, -9), "timed_out, killed")
    t.eq(doc.get("stdout"), "started\n", "output up to the kill, not the command's end")
    pid = int(open(pidfile).read())
    t.ok(wait_gone(pid, 30), "sleeping grandchild %d was killed" % pid)


@t.test
def run_timeout_when_command_closed_its_output():
    pidfile = os.path.join(A.dir, "closed.pid")
    doc = A.run("echo $$ > %s; exec >/dev/null 2>&1; sleep 300; exit 3" % pidfile,
                timeout_s=2)
    # the pipes closed at once, the shell ran on: the timeout ended the wait,
    # not the sleep (that would answer exit 3, not timed out)
    t.eq((doc.get("timed_out"), doc.get("exit_code")), (True, -9), "timed out, killed")
    pgid = int(open(pidfile).read())
    left = group_members(pgid)
    end = time.monotonic() + 30
    while left and time.monotonic() < end:   # SIGKILL is sent; wait for it to land
        time.sleep(0.05)
        left = group_members(pgid)
    t.eq(left, [], "the whole process group was killed")


@t.test
def run_background_process_holding_output_does_not_hang():
    pidfile = os.path.join(A.dir, "bg.pid")
    # the background job holds the pipes and would print "late" after 30 s,
    # well inside the 120 s timeout: an agent that waited for the pipes to
    # close (or for the timeout) would answer with "late" in stdout; the
    # shell's exit must end the wait
    doc = A.run("(sleep 30; echo late) & echo $! > %s; echo started" % pidfile,
                timeout_s=120, timeout=200)
    t.eq((doc.get("exit_code"), doc.get("timed_out"), doc.get("stdout")),
         (0, False, "started\n"), "answered at the shell's exit")
    t.ok(wait_gone(int(open(pidfile).read()), 30), "leftover in the group was killed")
    # one that left the group (setsid) cannot be killed, but must not hang /run
    doc = A.run("setsid sh -c 'sleep 30; echo late' & echo $! > %s; echo x" % pidfile,
                timeout_s=120, timeout=200)
    t.eq((doc.get("exit_code"), doc.get("timed_out"), doc.get("stdout")), (0, False, "x\n"),
         "setsid child: answered at the shell's exit")
    try:
        os.killpg(int(open(pidfile).read()), signal.SIGKILL)   # its own session and group
    except (OSError, ValueError):
        pass


@t.test
def run_large_output_is_capped_without_deadlock():
    # 2 MB to stderr first, then to stdout: reading one pipe at a time deadlocks
    # (the command would then be killed at the timeout: -9, timed out)
    doc = A.run("head -c 2000000 /dev/zero | tr '\\0' e >&2; "
                "head -c 2000000 /dev/zero | tr '\\0' o; echo done >&2; exit 4",
                timeout_s=120, timeout=200)
    t.eq((doc.get("exit_code"), doc.get("timed_out"), doc.get("truncated")),
         (4, False, True), "no deadlock: the command ran to its end (exit 4), truncated")
    t.eq(len(doc.get("stdout", "")), 65536, "stdout capped")
    t.eq(len(doc.get("stderr", "")), 65536, "stderr capped")
    t.eq(set(doc.get("stdout", "")), {"o"}, "stdout content")
    t.eq(set(doc.get("stderr", "")), {"e"}, "stderr content")
    doc = A.run("head -c 65536 /dev/zero | tr '\\0' a")
    t.eq((len(doc["stdout"]), doc["truncated"]), (65536, False), "exactly the cap")


@t.test
def run_rejects_bad_requests():
    cases = [("malformed JSON", b"{cmd: ls", 400),
             ("not an object", b'["ls"]', 400),
             ("missing cmd", b'{"timeout_s": 5}', 400),
             ("cmd not a string", b'{"cmd": ["ls"]}', 400),
             ("empty cmd", b'{"cmd": ""}', 400),
             ("timeout a string", b'{"cmd": "true", "timeout_s": "5"}', 400),
             ("timeout negative", b'{"cmd": "true", "timeout_s": -1}', 400),
             ("timeout boolean", b'{"cmd": "true", "timeout_s": true}', 400),
             ("invalid UTF-8", b'{"cmd": "\xff"}', 400),
             ("empty body", b"", 400)]
    for what, body, want in cases:
        status, doc, _ = A.req("POST", "/run", body)
        t.eq(status, want, what)
        t.ok(isinstance(doc.get("error"), str) and isinstance(doc.get("message"), str),
             what + ": error shape", doc)
    # lenient about Content-Type, and timeout may be a float or huge (capped)
    status, doc, _ = A.req("POST", "/run", b'{"cmd": "echo ok", "timeout_s": 1e9}',
                           headers={"Content-Type": "text/plain"})
    t.eq((status, doc.get("stdout")), (200, "ok\n"), "text/plain body, huge timeout")


@t.test
def oversized_body_is_413_unknown_path_404_wrong_method_405():
    big = json.dumps({"cmd": "true", "pad": "x" * 70000})
    status, doc, r = A.req("POST", "/run", big)
    t.eq((status, doc.get("error")), (413, "too_large"), "70 KB body")
    # over 1 MiB the agent answers 413 without reading the body and closes,
    # so the sender may instead see the connection reset; either way it is
    # refused quickly and the agent carries on
    t0 = time.monotonic()
    try:
        status = A.req("POST", "/run", "x" * (2 * 1024 * 1024))[0]
    except (BrokenPipeError, ConnectionResetError):
        status = "reset"
    t.ok(status in (413, "reset"), "2 MB body refused", status)
    t.eq(A.req("GET", "/ready")[0], 503, "agent still answers")
    for method, path, want, allow in [("GET", "/nope", 404, None),
                                      ("GET", "/", 404, None),
                                      ("GET", "/ready/x", 404, None),
                                      ("GET", "/run", 405, "POST"),
                                      ("PUT", "/run", 405, "POST"),
                                      ("POST", "/ready", 405, "GET"),
                                      ("DELETE", "/ready", 405, "GET")]:
        status, doc, r = A.req(method, path, b"{}" if method != "GET" else None)
        t.eq(status, want, method + " " + path)
        t.ok("error" in doc and "message" in doc, method + " " + path + ": error shape")
        if allow:
            t.eq(r.getheader("Allow"), allow, method + " " + path + ": Allow")
    t.eq(A.req("GET", "/ready?x=1")[0], 503, "query string ignored")


@t.test
def malformed_http_gets_a_json_error():
    s = socket.create_connection(("127.0.0.1", A.port), timeout=10)
    s.sendall(b"GARBAGE\r\n\r\n")
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    t.ok(head.startswith(b"HTTP/1.") and b" 400 " in head.split(b"\r\n")[0], "400", head)
    t.ok("error" in json.loads(body.decode()), "JSON body", body)


# -- connections and concurrency ------------------------------------------------

@t.test
def keep_alive_works_and_refusals_do_not_desync_it():
    c = A.conn()
    try:
        A.req("GET", "/ready", conn=c)
        sock = c.sock
        t.ok(sock is not None, "connection kept open after a response")
        t.eq(A.run("echo 1", conn=c)["stdout"], "1\n", "second request")
        t.ok(c.sock is sock, "same connection reused")
        # refused and rejected requests with a body, then more on the same client
        t.eq(A.req("POST", "/run", {"cmd": "echo no"}, token="bad", conn=c)[0], 403, "403")
        t.eq(A.req("POST", "/nope", {"cmd": "echo no"}, conn=c)[0], 404, "404")
        t.eq(A.req("POST", "/run", "x" * 70000, conn=c)[0], 413, "413")
        t.eq(A.run("echo 2", conn=c)["stdout"], "2\n", "after the refusals")
        t.eq(A.req("GET", "/ready", conn=c)[0], 503, "and again")
    finally:
        c.close()


@t.test
def requests_are_served_concurrently():
    """Six /run commands that each wait for a go file: all six start (served
    at once, not one after another), /ready answers while they all still
    wait, a stalled client blocks nobody; then go, and all six answer."""
    results, errors = {}, []
    gate = tempfile.mkdtemp()

    def one(i):
        try:
            results[i] = A.run(f"touch {gate}/started.{i}; "
                               f"while [ ! -e {gate}/go ]; do sleep 0.05; done; echo {i}",
                               timeout_s=300)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for th in threads:
        th.start()
    try:
        deadline = time.monotonic() + 120
        while (len([n for n in os.listdir(gate) if n.startswith("started.")]) < 6
               and time.monotonic() < deadline):
            time.sleep(0.05)
        started = sorted(n for n in os.listdir(gate) if n.startswith("started."))
        t.eq(len(started), 6, "all six commands run at the same time", started)
        status, _, _ = A.req("GET", "/ready")  # while six commands wait for go
        t.eq(status, 503, "/ready answered while six /run commands are running")
        t.eq(results, {}, "none of them could finish before go")
        # a stalled client (half a request) blocks nobody either
        stalled = socket.create_connection(("127.0.0.1", A.port))
        stalled.sendall(b"POST /run HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
        t.eq(A.req("GET", "/ready")[0], 503, "/ready answered with a stalled client connected")
    finally:
        open(os.path.join(gate, "go"), "w").close()
        for th in threads:
            th.join(300)
    stalled.close()
    t.eq(errors, [], "errors")
    t.eq(sorted(results), list(range(6)), "all answered")
    for i, doc in results.items():
        t.eq((doc["stdout"], doc["exit_code"]), ("%d\n" % i, 0), "result %d" % i)


# -- configuration --------------------------------------------------------------

@t.test
def command_line_overrides_the_environment():
    d = os.path.join(TMP, "cli-files")
    os.makedirs(d)
    tok = os.path.join(d, "tok")
    write(tok, "cli-token\n")
    write(os.path.join(d, "ready"), "")
    ag = Agent("cli", token="env-token", listen=False,
               env={"LABVM_AGENT_LISTEN": "127.0.0.1:1"},  # would fail if used
               args=["--listen", "127.0.0.1:0", "--token-file", tok, "--state-dir", d])
    try:
        t.eq(ag.req("GET", "/ready", token="env-token")[0], 403, "env token file ignored")
        status, doc, _ = ag.req("GET", "/ready", token="cli-token")
        t.eq((status, doc.get("ready")), (200, True), "--token-file and --state-dir used")
    finally:
        ag.stop()


@t.test
def listen_address_comes_from_the_environment():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ag = Agent("envlisten", listen=False, env={"LABVM_AGENT_LISTEN": "127.0.0.1:%d" % port})
    try:
        t.eq(ag.port, port, "port from LABVM_AGENT_LISTEN")
        t.eq(ag.req("GET", "/ready")[0], 503, "answers there")
    finally:
        ag.stop()
    t.eq(ag.proc.returncode, 0, "SIGTERM stops it cleanly")


@t.test
def tty_size_sets_the_console_window_size():
    import fcntl
    import pty
    import struct
    import termios
    master, slave = pty.openpty()
    ag = Agent("ttysize", env={"LABVM_AGENT_CONSOLE_TTY": os.ttyname(slave)})
    try:
        status, doc, _ = ag.req("POST", "/tty-size", {"cols": 43, "rows": 29})
        t.eq(status, 200, "POST /tty-size")
        t.eq((doc.get("cols"), doc.get("rows")), (43, 29), "the size it set")
        rows, cols = struct.unpack("HHHH", fcntl.ioctl(master, termios.TIOCGWINSZ, b"\0" * 8))[:2]
        t.eq((cols, rows), (43, 29), "the tty has that size")
        for bad in ({"cols": 0, "rows": 24}, {"cols": 80}, {"cols": "80", "rows": 24},
                    {"cols": True, "rows": 24}, [80, 24]):
            t.eq(ag.req("POST", "/tty-size", bad)[0], 400, "refused: %r" % (bad,))
        t.eq(ag.req("GET", "/tty-size")[0], 405, "GET /tty-size")
        t.eq(ag.req("POST", "/tty-size", {"cols": 80, "rows": 24}, token="nope")[0], 403, "token needed")
    finally:
        ag.stop()
        os.close(master)
        os.close(slave)
    ag = Agent("ttysize-none", env={"LABVM_AGENT_CONSOLE_TTY": os.path.join(TMP, "no-such-tty")})
    try:
        status, doc, _ = ag.req("POST", "/tty-size", {"cols": 80, "rows": 24})
        t.eq((status, doc.get("error")), (409, "no_console"), "no console: 409 no_console")
    finally:
        ag.stop()


try:
    t.diag("agent python: " + subprocess.run(
        [PYTHON, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        universal_newlines=True).stdout.strip())
    A.stop()
    t.ok(A.proc.returncode == 0, "main agent exited cleanly", A.proc.returncode)
finally:
    shutil.rmtree(TMP, ignore_errors=True)
t.done()
