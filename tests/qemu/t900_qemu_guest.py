#!/usr/bin/python3
# timeout: 900
"""Real QEMU guests for the simulator: the image and the driver, without a boot.

Builds the guest image if needed (tests/kubesim/guest-image/build; once per
CI run, the later suites find it current; tests/run starts that build in the
background at the start of the run, and this suite's build waits for it on
the build's lock), then checks the driver
(tests/kubesim/qemu_guest.py) where no guest has to boot: the accelerator
choice, memory and vCPU limits, the overlay on the read-only base, a QEMU that
fails at start-up (a taken agent address), and stop() removing the overlay,
seed and sockets. Booted guests (real cloud-init, agent, console, grading,
isolation, guest poweroff, stop) are t910's, through labvm's API; the
standalone `tests/kubesim/guest-image/try-guest` measures boots.
"""
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRC, "tests", "lib"))
sys.path.insert(0, os.path.join(SRC, "tests", "kubesim"))
from tap import T  # noqa: E402

t = T()
skip = None
if os.geteuid() != 0:
    skip = "needs root"
elif not shutil.which("qemu-system-x86_64") or not shutil.which("qemu-img"):
    skip = "qemu-system-x86 / qemu-utils not installed (tests/deps)"

if skip is None:
    import qemu_guest  # noqa: E402

IMG = os.environ.get("LABVM_GUEST_IMAGE_DIR") or os.path.join(SRC, ".cache", "guest-image")
STATE = tempfile.mkdtemp(prefix="qemu-t900-", dir=os.environ.get("LABVM_STATE") or None)
S = {}


def free_ip():
    """127.77.X.1 with 8899 free (other checks may use the range)."""
    for k in range(200):
        ip = f"127.77.{10 + (os.getpid() + k) % 200}.1"
        try:
            with socket.socket() as s:
                s.bind((ip, 8899))
            return ip
        except OSError:
            continue
    return "127.77.9.1"


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
    before = {n: os.stat(os.path.join(IMG, n)).st_mtime_ns
              for n in ("base.img", "vmlinuz", "initrd-tiny.img", "recipe.sha256")}
    r = subprocess.run([build, "--out", IMG], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t.ok(r.returncode == 0 and "up to date" in r.stdout, "second build is a no-op", r.stdout)
    after = {n: os.stat(os.path.join(IMG, n)).st_mtime_ns for n in before}
    t.eq(after, before, "the cached build rewrote nothing")
    r = subprocess.run([build, "--out", IMG, "--check"], stdout=subprocess.PIPE, text=True)
    t.eq(r.returncode, 0, "--check says up to date")
    t.ok(qemu_guest.image_ready(IMG), "image_ready()")
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
    t.ok(qemu_guest.host_overhead_mib(accel="tcg") > qemu_guest.host_overhead_mib(accel="kvm"),
         "TCG costs more host memory per guest (its translation cache)")
    g.stop()   # never started: harmless
    t.ok(not g.alive(), "a guest never started is not alive")


@t.test(skip=skip)
def start_makes_an_overlay_and_stop_removes_it():
    t.require("base" in S, "no image")
    ip = free_ip()
    g = qemu_guest.QemuGuest("ovl", os.path.join(STATE, "ovl"), b"#cloud-config\n{}\n", ip,
                             memory_mib=256, cpus=1,
                             disk={"kind": "ephemeral", "claimName": "golden-debian-12"})
    try:
        g.start()
        t.ok(g.alive(), "QEMU runs")
        r = subprocess.run(["qemu-img", "info", "-U", "--output=json", g.overlay_path],
                           stdout=subprocess.PIPE, text=True)
        info = json.loads(r.stdout or "{}")
        t.eq((info.get("format"), os.path.realpath(info.get("backing-filename") or "")),
             ("qcow2", S["base"]), "the root disk is a qcow2 overlay on base.img")
        t.ok(os.path.exists(g.seed_path), "the NoCloud seed is there")
        cmd = open(os.path.join(g.workdir, "qemu.cmd")).read()
        t.ok(f"hostfwd=tcp:{ip}:8899-:8899" in cmd, "the agent port is forwarded from the VMI address")
        t.ok("org.qemu.guest_agent.0" in cmd, "the QEMU guest agent channel")
        # a second guest on the same agent address fails at start, and says why
        g2 = qemu_guest.QemuGuest("taken", os.path.join(STATE, "taken"), b"", ip, memory_mib=256)
        try:
            g2.start()
            t.fail("a taken agent address did not fail the start")
        except qemu_guest.GuestError as e:
            t.ok("exited at once" in str(e), "GuestError from the start", str(e)[:300])
        t.ok(not g2.alive() and not os.path.exists(g2.overlay_path),
             "the failed guest left no QEMU and no overlay")
        pid, overlay = g.pid, g.overlay_path
    finally:
        g.stop(timeout=1)
    t.ok(not g.alive(), "stop() returns with QEMU gone")
    t.ok(not os.path.exists(overlay), "overlay removed")
    t.ok(not os.path.exists(g.seed_path), "seed removed")
    t.ok(not os.path.exists(f"/proc/{pid}"), "QEMU process gone")
    t.ok(os.path.exists(g.log_path), "qemu.log kept")
    g.stop()   # idempotent
    t.eq(sha256(S["base"]), S["base_sum"], "base.img unchanged")


shutil.rmtree(STATE, ignore_errors=True)
t.done()
