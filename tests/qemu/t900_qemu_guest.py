#!/usr/bin/python3
# timeout: 900
"""Real QEMU guests for the simulator, driven directly (no API yet).

Builds the guest image if needed (tests/kubesim/guest-image/build), then boots
two guests at once with tests/kubesim/qemu_guest.py: one with the
recommended cloud-config, one with the document fcgi-app/core/cloudinit.c
builds, both carrying labvm's own guest agent. Checks readiness through the
forwarded VMI address, the agent's /run, root autologin on the serial
console, the console kick, the guest agent channel, overlay isolation, a
guest-initiated poweroff, and that stop() removes the overlay and QEMU.
"""
import argparse
import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRC, "tests", "lib"))
sys.path.insert(0, os.path.join(SRC, "tests", "kubesim"))
sys.path.insert(0, os.path.join(SRC, "tests", "kubesim", "guest-image"))
from tap import T  # noqa: E402

t = T()
skip = None
if os.geteuid() != 0:
    skip = "needs root"
elif not shutil.which("qemu-system-x86_64") or not shutil.which("qemu-img"):
    skip = "qemu-system-x86 / qemu-utils not installed (tests/deps)"

if skip is None:
    import qemu_guest  # noqa: E402
    import sample  # noqa: E402
    loader = importlib.machinery.SourceFileLoader(
        "try_guest", os.path.join(SRC, "tests", "kubesim", "guest-image", "try-guest"))
    spec = importlib.util.spec_from_loader("try_guest", loader)
    tg = importlib.util.module_from_spec(spec)
    loader.exec_module(tg)

IMG = os.environ.get("LABVM_GUEST_IMAGE_DIR") or os.path.join(SRC, ".cache", "guest-image")
STATE = tempfile.mkdtemp(prefix="qemu-t900-", dir=os.environ.get("LABVM_STATE") or None)


def free_ip_base():
    """127.77.X: a /24 whose .1 and .2 have 8899 free (two checks may run at once)."""
    import socket
    for k in range(200):
        base = f"127.77.{10 + (os.getpid() + k) % 200}"
        try:
            for last in (1, 2):
                with socket.socket() as s:
                    s.bind((f"{base}.{last}", 8899))
            return base
        except OSError:
            continue
    return "127.77.9"


IP_BASE = free_ip_base()
S = {}   # shared between the tests


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for blk in iter(lambda: f.read(1 << 22), b""):
            h.update(blk)
    return h.hexdigest()


@t.test(skip=skip)
def image_builds_and_is_cached():
    build = os.path.join(SRC, "tests", "kubesim", "guest-image", "build")
    t0 = time.monotonic()
    r = subprocess.run([build, "--out", IMG], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    t.diag(f"image ready after {time.monotonic() - t0:.1f} s: {last}")
    t.require(r.returncode == 0, f"build failed:\n{r.stdout[-3000:]}")
    base = os.path.realpath(os.path.join(IMG, "base.img"))
    st = os.stat(base)
    t.eq(oct(st.st_mode & 0o777), "0o444", "base.img mode")
    with open(base, "rb") as f:
        f.seek(1024 + 0x38)
        t.eq(f.read(2), b"\x53\xef", "base.img is a raw ext4 filesystem (superblock magic)")
    for leaf in ("vmlinuz", "initrd-tiny.img", "recipe.sha256"):
        t.ok(os.path.getsize(os.path.join(IMG, leaf)) > 0, f"{leaf} present")
    # the second run finds the stamp and does nothing
    t0 = time.monotonic()
    r = subprocess.run([build, "--out", IMG], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    took = time.monotonic() - t0
    t.ok(r.returncode == 0 and "up to date" in r.stdout, "second build is a no-op", r.stdout)
    t.ok(took < 10, f"cached build took {took:.1f} s")
    r = subprocess.run([build, "--out", IMG, "--check"], stdout=subprocess.PIPE, text=True)
    t.eq(r.returncode, 0, "--check says up to date")
    S["base"] = base
    S["base_sum"] = sha256(base)


@t.test(skip=skip)
def accelerator_and_limits():
    hw = os.path.isdir("/sys/module/kvm_intel") or os.path.isdir("/sys/module/kvm_amd")
    if not os.environ.get("LABVM_QEMU_ACCEL"):
        want = "kvm" if hw and os.access("/dev/kvm", os.R_OK | os.W_OK) else "tcg"
        t.eq(qemu_guest.accelerator(), want, "accelerator (kvm_pvm alone means TCG)")
    g = qemu_guest.QemuGuest("limits", os.path.join(STATE, "limits"), b"", "127.77.9.99",
                             memory_mib=10**7, cpus=64)
    cap = qemu_guest.node_capacity()
    t.ok(g.cpus <= (os.cpu_count() or 1), f"cpus clamped: {g.cpus}")
    t.ok(g.memory_mib <= cap["memory_mib"], f"memory clamped: {g.memory_mib} <= {cap['memory_mib']}")
    g.stop()   # never started: harmless
    t.ok(not g.alive(), "a guest never started is not alive")


def ready_pair():
    if "guests" in S:
        return S["guests"]
    args = argparse.Namespace(memory=1024, cpus=1)
    gs = [tg.boot("paira", f"{IP_BASE}.1", STATE, args, "b", log=t.diag),
          tg.boot("pairb", f"{IP_BASE}.2", STATE, args, "labvm", log=t.diag)]
    S["guests"] = gs
    S["res"] = {g.name: {"name": g.name} for g in gs}
    S["ready"] = dict(zip((g.name for g in gs), sample.wait_all_ready(gs, timeout=400)))
    return gs


@t.test(skip=skip)
def two_guests_become_ready():
    t.require("base" in S, "no image")
    gs = ready_pair()
    for g in gs:
        st, body = sample.agent_get(g.ip, g.agent_port, "/ready", "wrong-token")
        ok = S["ready"][g.name]
        t.ok(ok, f"{g.name} ready through {g.ip}:{g.agent_port}",
             g.marks.get("died") or g.serial_log()[-1500:].decode("utf-8", "replace"))
        if ok:
            t.eq(st, 403, f"{g.name}: a wrong token is refused")
            t.diag(f"{g.name} ({g.variant}): agent {g.marks.get('agent', 0):.1f} s, "
                   f"ready {g.marks['ready']:.1f} s, RSS {g.rss() >> 20} MiB")


@t.test(skip=skip)
def console_agent_and_isolation():
    gs = S.get("guests") or []
    t.require(gs and all(S["ready"].values()), "guests not ready")
    for g in gs:
        r = S["res"][g.name]
        tg.check(g, r)
        t.diag(f"{g.name}: prompt {r.get('prompt')} s, guest uses {r.get('guest_used_mb')} MiB, "
               f"QEMU RSS {r.get('rss_mb')} MiB")
    for g in gs:
        r = S["res"][g.name]
        t.ok(r.get("agent_run_ok"), f"{g.name}: agent /run", r.get("agent_run_error"))
        t.ok(r.get("prompt"), f"{g.name}: root prompt on the console without a password")
        t.ok(r.get("console_hello"), f"{g.name}: echo hello through the console", r.get("console_error"))
        t.ok(r.get("console_root"), f"{g.name}: console user is root")
        t.ok(r.get("console_kick"), f"{g.name}: a second console() disconnects the first")
        t.ok(r.get("exec_hostname_ok"), f"{g.name}: exec through the guest agent; hostname = VMI name")
        t.ok(r.get("marker_written"), f"{g.name}: wrote its marker")
        t.ok("status: done" in r.get("systemd_cloudinit", ""), f"{g.name}: cloud-init done",
             r.get("systemd_cloudinit"))
    a, b = gs
    rc, out, err = a.exec("echo out; echo err >&2; exit 3", timeout=20)
    t.eq((rc, out, err), (3, b"out\n", b"err\n"), "exec: exit code, stdout, stderr")
    rc, _, _ = a.exec("sleep 5", timeout=1)
    t.eq(rc, 124, "exec past its timeout")
    c = sample.Console(a.console(replay=True))
    c.read_some()
    t.ok(b"login" in c.buf or b"root@" in c.buf, "console(replay=True) starts with recent output",
         c.buf[-200:])
    c.close()
    for g, other in ((a, b), (b, a)):
        rc, _, _ = g.exec(f"test -e /root/written-by-{other.name}", timeout=20)
        t.ok(rc != 0, f"{g.name} does not see {other.name}'s write")


@t.test(skip=skip)
def guest_poweroff_ends_qemu():
    gs = S.get("guests") or []
    t.require(len(gs) == 2 and gs[1].alive(), "no running guest")
    g = gs[1]
    g.exec("systemctl poweroff", timeout=10)
    deadline = time.monotonic() + 60
    while g.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    t.ok(not g.alive(), "QEMU exits when the guest powers off")
    t.eq(g.exit_code(), 0, "QEMU exit code")


@t.test(skip=skip)
def stop_removes_overlay_and_qemu():
    gs = S.get("guests") or []
    t.require(gs, "no guests")
    for g in gs:
        pid, overlay = g.pid, g.overlay_path
        t.ok(os.path.exists(overlay) or not g.alive(), f"{g.name}: overlay exists while it runs")
        t0 = time.monotonic()
        clean = g.stop(timeout=15)
        took = time.monotonic() - t0
        t.diag(f"{g.name}: stop {took:.1f} s, powered off by itself: {clean}")
        t.ok(not os.path.exists(overlay), f"{g.name}: overlay removed")
        t.ok(not os.path.exists(g.seed_path), f"{g.name}: seed removed")
        t.ok(not os.path.exists(f"/proc/{pid}"), f"{g.name}: QEMU process gone")
        g.stop()   # idempotent
    t.ok(gs[0].exit_code() is not None, "paira: QEMU ended")
    t.eq(sha256(S["base"]), S["base_sum"], "base.img unchanged")


@t.test(skip=skip)
def cleanup():
    for g in S.get("guests") or []:
        g.stop(timeout=0)
    shutil.rmtree(STATE, ignore_errors=True)


t.done()
