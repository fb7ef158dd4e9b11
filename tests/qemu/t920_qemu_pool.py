#!/usr/bin/python3
# timeout: 1200
"""The warm pool on real QEMU guests (issue #18): a claimed pool VM serves
exactly one student.

Starts its own stack with the simulator's `--guest qemu` (state in
.check-qemu-pool next to $LABVM_STATE, ports from LABVM_QEMU_PORT_BASE + 50,
guests on 127.78.0.0/16, environment check-qemu-pool) and stops it at the end.
An operator warms the golden lesson with one VM (labvm-pool warm, then
labvm-pool tick until it is ready: real cloud-init, the lesson's setup, the
agent's ready flag). Checks: the press claims it and is `ready` in its 201
answer (pool true, the pool VM's name, disk golden); the lesson's file is in
place (read through labvm-console's root shell); grading runs in the guest
(README present passes; hello.txt fails, then passes after writing it through
the console); a second student's press does not get it; ending the session
stops its QEMU and deletes the VM, and its pool row stays `claimed` (never
pooled again).
"""
import asyncio
import atexit
import base64
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRC, "tests", "lib"))
import labstack  # noqa: E402
from labclient import Api, Kube  # noqa: E402
from tap import T  # noqa: E402

t = T()
LESSON = "debian-golden"
ORDER = ["submitted", "scheduling", "booting", "setting_up", "ready"]
PROTO = "labvm-console.v1"
PROMPT = re.compile(rb"root@[^\r\n]*# (\x1b\[[0-9;?]*[a-zA-Z])*$")
IMG = os.environ.get("LABVM_GUEST_IMAGE_DIR") or os.path.join(SRC, ".cache", "guest-image")
READY_TIMEOUT = 420       # two TCG guests on 2 loaded cores: 1-3 min each

skip = None
if os.geteuid() != 0:
    skip = "needs root"
elif not shutil.which("qemu-system-x86_64") or not shutil.which("qemu-img"):
    skip = "qemu-system-x86 / qemu-utils not installed (tests/deps)"
else:
    import importlib.util
    if importlib.util.find_spec("websockets") is None:
        skip = "python3-websockets not installed"

S = {}        # shared between the tests
stack = None


def state_dir():
    """.check-qemu next to the check's .check (.check-asan-qemu for check-asan),
    else a temporary folder."""
    base = os.environ.get("LABVM_STATE")
    if base:
        return os.path.abspath(base).rstrip("/") + "-qemu-pool"
    return tempfile.mkdtemp(prefix="lv-qemu-t920-")


def free_port_base():
    """18600 (LABVM_QEMU_PORT_BASE), or the next base whose five ports are all
    free (another check may be running)."""
    first = int(os.environ.get("LABVM_QEMU_PORT_BASE", 18600)) + 50
    for k in range(10):
        b = first + 10 * k
        if all(labstack.port_free(p) for p in labstack.ports_for(b).values()):
            return b
    return first


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for blk in iter(lambda: f.read(1 << 22), b""):
            h.update(blk)
    return h.hexdigest()


def qemu_alive(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"qemu-system" in f.read()
    except OSError:
        return False


def wait_until(fn, timeout, interval=0.2):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(interval)


def guests():
    """The simulator's guests: {vmi name: info} (pid, overlay, state, ...)."""
    r = S["kube"].request("GET", "/_sim/guests?rss=1")
    if r.status != 200:
        raise AssertionError(f"/_sim/guests: {r}")
    return {g["vmi"].split("/", 1)[1]: g for g in r.json["guests"] if g.get("vmi")}


def secs(s, a, b):
    """Seconds between two of a session's timestamps."""
    from datetime import datetime
    f = "%Y-%m-%dT%H:%M:%S.%fZ"
    return (datetime.strptime(s[b], f) - datetime.strptime(s[a], f)).total_seconds()


def api_for(user):
    return Api(user, base=S["env"]["LABVM_URL"], timeout=60)


# ------------------------------------------------------------------ console
class Console:
    """A browser-side console connection through the front end and labvm-console."""

    def __init__(self, ws):
        self.ws = ws
        self.out = bytearray()
        self.code = None

    @classmethod
    async def open(cls, user, url):
        import websockets
        front = S["env"]["LABVM_URL"].replace("http://", "ws://")
        cred = base64.b64encode(f"{user}:{labstack.PASSWORD}".encode()).decode()
        ws = await websockets.connect(front + url, subprotocols=[PROTO],
                                      extra_headers={"Authorization": "Basic " + cred},
                                      open_timeout=15, ping_interval=None, max_size=None,
                                      close_timeout=2)
        return cls(ws)

    async def until(self, pred, timeout):
        import websockets
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
                return pred(self)
            if isinstance(m, bytes):
                self.out += m
        return True

    async def prompt(self, timeout):
        """A fresh root prompt: Enter until one comes (nothing is replayed on connect)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            n = len(self.out)
            await self.ws.send(b"\r")
            if await self.until(lambda c: PROMPT.search(bytes(c.out[n:][-96:])) is not None,
                                min(5, max(0.1, end - time.monotonic()))):
                return True
            if self.code is not None:
                return False
        return False

    async def run(self, cmd, timeout=30):
        """Run cmd in the shell; returns its output (between two markers) or None."""
        tag = f"m{os.getpid()}x{int(time.monotonic() * 1000) % 100000}"
        n = len(self.out)
        # the markers are printed by printf, so the echoed command line never matches them
        await self.ws.send(f"printf '%s\\n' {tag}B; {cmd}; printf '%s\\n' {tag}E\r".encode())
        # (the echoed line has "<tag>B;", the output "<tag>B\r\n")
        pat = re.compile(rb"%sB\r\n(.*?)%sE\r\n" % (tag.encode(), tag.encode()), re.S)
        ok = await self.until(lambda c: pat.search(bytes(c.out[n:])) is not None, timeout)
        if not ok:
            return None
        out = pat.search(bytes(self.out[n:])).group(1)
        return out.decode("utf-8", "replace").replace("\r\n", "\n").rstrip("\n")

    async def close(self):
        await self.ws.close()


LOOP = asyncio.new_event_loop()


def run(coro):
    return LOOP.run_until_complete(coro)


def ticket(user, sid):
    r = api_for(user).ticket(sid)
    if r.status != 200:
        raise AssertionError(f"console-ticket: {r}")
    return r.json["url"]


def stack_down():
    if stack is not None:
        try:
            stack.down()
        except Exception as e:  # noqa: BLE001
            print(f"# stack down: {e}", flush=True)


def on_signal(signum, frame):
    sys.exit(1)      # atexit stops the stack (tests/run's timeout sends SIGTERM)


atexit.register(stack_down)
signal.signal(signal.SIGTERM, on_signal)


# -------------------------------------------------------------------- tests
def pool_cmd(*args):
    e = dict(os.environ, LABVM_CONF=S["env"]["LABVM_CONF"],
             LABVM_DATABASE=S["env"]["LABVM_DATABASE"])
    r = subprocess.run([os.path.join(S["env"]["LABVM_BIN"], "labvm-pool"), *args], env=e,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    return r.returncode, r.stdout


def psql(sql):
    r = subprocess.run(["psql", "-X", "-Atc", sql, S["env"]["LABVM_DATABASE"]],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    return r.stdout.strip()


@t.test(skip=skip)
def stack_with_qemu_guests_starts():
    global stack
    base = free_port_base()
    sd = state_dir()
    stack = labstack.Stack(sd, port_base=base, guest="qemu", frontend="lighttpd",
                           environment="check-qemu-pool", guest_net="127.78.0.0/16",
                           extra_lessons=False)
    if stack.running_any():      # left over by an interrupted run
        stack.down()
    t0 = time.monotonic()
    S["env"] = stack.up()
    t.diag(f"stack up in {time.monotonic() - t0:.1f} s (port base {base}, state {sd})")
    S["kube"] = Kube(url=S["env"]["LABVM_KUBE_URL"],
                     token_file=S["env"]["LABVM_KUBE_ADMIN_TOKEN_FILE"],
                     ca=S["env"]["LABVM_KUBE_CA"])
    S["kube"].ns = "labs"
    t.ok(True, "stack up")


def need_stack():
    t.require("kube" in S, "no stack")


@t.test(skip=skip)
def an_operator_warms_the_lesson_and_a_qemu_pool_vm_becomes_ready():
    need_stack()
    rc, out = pool_cmd("warm", LESSON, "1", "--until", "+1 hour")
    t.eq(rc, 0, "labvm-pool warm", out)
    S["warm"] = re.search(r"warm request (\d+)", out).group(1) if rc == 0 else None
    t0 = time.monotonic()
    ready = wait_until(lambda: pool_cmd("tick")[0] == 0 and psql(
        "SELECT vm_name FROM pool_vms WHERE state = 'ready'"), READY_TIMEOUT, interval=2)
    t.ok(ready, "a pool VM is ready", psql("SELECT vm_name, state, delete_reason, error "
                                          "FROM pool_vms"))
    t.require(bool(ready), "no ready pool VM")
    S["vm"] = ready
    t.diag(f"pool VM {ready} ready {time.monotonic() - t0:.0f} s after the warm request")
    info = guests().get(ready) or {}
    t.eq((info.get("kind"), info.get("state")), ("qemu", "running"), "a QEMU guest")
    S["pid"] = info.get("pid")
    # nothing else competes for the node's two guest slots
    t.eq(pool_cmd("cancel", S["warm"])[0], 0, "the warm request cancelled (no replacement)")


@t.test(skip=skip)
def the_press_claims_it_ready_with_files_console_and_grading():
    need_stack()
    t.require("vm" in S, "no pool VM")
    api = api_for("student1")
    api.end_current()
    t0 = time.monotonic()
    r = api.start(LESSON)
    took = time.monotonic() - t0
    t.eq(r.status, 201, "201", r.json)
    s = r.json
    t.eq((s.get("state"), s.get("pool")), ("ready", True), "ready at the press, from the pool")
    t.eq(s.get("vms", [{}])[0].get("name"), S["vm"], "the pool VM is the session's")
    t.eq(s.get("disk"), {"source": "golden", "fallback_reason": None}, "golden disk recorded")
    t.diag(f"press -> ready answer {took * 1000:.0f} ms")
    S["sid"] = s["id"]
    other = api_for("student2").start(LESSON)
    t.ok(other.status != 201 or not other.json.get("pool"), "another press does not get it")
    if other.status == 201:
        api_for("student2").end(other.json["id"])
    g = api.grade(S["sid"])
    t.eq(g.status, 200, "grade answers", g.json)
    steps = {x["name"]: x["passed"] for x in (g.json or {}).get("steps", [])}
    t.eq(steps, {"README present": True, "hello.txt says hello": False}, "the lesson's steps")

    async def console():
        c = await Console.open("student1", ticket("student1", S["sid"]))
        try:
            if not await c.prompt(90):
                return None, None
            readme = await c.run("cat /root/README")
            await c.run("echo hello > /root/hello.txt")
            who = await c.run("id -un")
            return readme, who
        finally:
            await c.close()
    readme, who = run(console())
    with open(os.path.join(SRC, "conf", "lessons", LESSON + ".json")) as f:
        want = json.load(f)["files"][0]["content"].rstrip("\n")
    t.eq(readme, want, "the lesson's file is in place")
    t.eq(who, "root", "a root shell on the console")
    g = api.grade(S["sid"])
    steps = {x["name"]: x["passed"] for x in (g.json or {}).get("steps", [])}
    t.eq(steps.get("hello.txt says hello"), True, "grading sees the student's work")


@t.test(skip=skip)
def the_end_deletes_it_never_pooled_again():
    need_stack()
    t.require("sid" in S, "no session")
    api = api_for("student1")
    t.eq(api.end(S["sid"]).status, 200, "ended")
    gone = wait_until(lambda: S["kube"].get("virtualmachines", S["vm"]).status == 404, 120)
    t.ok(gone, "the VM is deleted")
    t.ok(wait_until(lambda: not (S.get("pid") and qemu_alive(S["pid"])), 120),
         "its QEMU stopped")
    t.eq(psql(f"SELECT state FROM pool_vms WHERE vm_name = '{S['vm']}'"), "claimed",
         "its pool row stays claimed: never pooled again")
    t.eq(psql("SELECT count(*) FROM pool_vms WHERE state IN ('starting', 'ready')"), "0",
         "no idle pool VM left")


t.done()
