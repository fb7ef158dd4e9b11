"""What the QEMU suites (tests/qemu/t910_qemu_api.py, t920_qemu_pool.py) share:
their own stack with the simulator's `--guest qemu` (tests/lib/labstack.py; its
state next to $LABVM_STATE, ports from LABVM_QEMU_PORT_BASE, stopped at exit
whatever happens), the simulator's guests, and a root console through the
front end and labvm-console.

A suite imports what it uses; S is the state its tests share (S["env"], the
stack's environment, and S["kube"], an admin client, once up() has run)."""
import asyncio
import atexit
import base64
import hashlib
import os
import re
import shutil
import signal
import sys
import tempfile
import time

import labstack
from labclient import Api, Kube

SRC = os.environ.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
PROTO = "labvm-console.v1"
PROMPT = re.compile(rb"root@[^\r\n]*# (\x1b\[[0-9;?]*[a-zA-Z])*$")
IMG = os.environ.get("LABVM_GUEST_IMAGE_DIR") or os.path.join(SRC, ".cache", "guest-image")
READY_TIMEOUT = 420       # two TCG guests on 2 loaded cores: 1-3 min each

S = {}        # shared between a suite's tests
stack = None


def skip_reason():
    """Why the QEMU suites cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root"
    if not shutil.which("qemu-system-x86_64") or not shutil.which("qemu-img"):
        return "qemu-system-x86 / qemu-utils not installed (tests/deps)"
    import importlib.util
    if importlib.util.find_spec("websockets") is None:
        return "python3-websockets not installed"
    return None


def state_dir(suffix, tmp_prefix):
    """$LABVM_STATE + suffix (.check-qemu next to the check's .check,
    .check-asan-qemu for check-asan), else a temporary folder."""
    base = os.environ.get("LABVM_STATE")
    if base:
        return os.path.abspath(base).rstrip("/") + suffix
    return tempfile.mkdtemp(prefix=tmp_prefix)


def free_port_base(offset=0):
    """LABVM_QEMU_PORT_BASE (18600) + offset, or the next base whose five ports
    are all free (another check may be running)."""
    first = int(os.environ.get("LABVM_QEMU_PORT_BASE", 18600)) + offset
    for k in range(10):
        b = first + 10 * k
        if all(labstack.port_free(p) for p in labstack.ports_for(b).values()):
            return b
    return first


def up(t, suffix, tmp_prefix, port_offset, environment, guest_net, kube_args=(),
       extra_lessons=False):
    """Start the suite's stack (stopping one left over by an interrupted run):
    S["env"], S["kube"] (namespace labs). The first start builds the guest
    image when it is missing or stale. kube_args: more simulator options."""
    global stack
    base = free_port_base(port_offset)
    sd = state_dir(suffix, tmp_prefix)
    stack = labstack.Stack(sd, port_base=base, guest="qemu", frontend="lighttpd",
                           environment=environment, guest_net=guest_net,
                           extra_lessons=extra_lessons, kube_args=kube_args)
    if stack.running_any():      # left over by an interrupted run
        stack.down()
    t0 = time.monotonic()
    S["env"] = stack.up()
    t.diag(f"stack up in {time.monotonic() - t0:.1f} s (port base {base}, state {sd})")
    S["kube"] = Kube(url=S["env"]["LABVM_KUBE_URL"],
                     token_file=S["env"]["LABVM_KUBE_ADMIN_TOKEN_FILE"],
                     ca=S["env"]["LABVM_KUBE_CA"])
    S["kube"].ns = "labs"


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
