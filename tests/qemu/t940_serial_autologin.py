#!/usr/bin/python3
# timeout: 900
"""Serial autologin on a guest whose getty unit is the pre-v250 one (issue #25).

systemd's serial-getty@.service before v250 runs `agetty ... %I $TERM` with
StandardInput unset (stdin is /dev/null); from v250 (systemd PR #21171) it
runs `agetty ... - $TERM` with StandardInput=tty and TTYPath=/dev/%I
(CONFORMANCE.md "Guests"). Ubuntu 22.04 (systemd 249) and EL8 (239) have the
old unit. Two real QEMU guests (the Debian 12 image, its unit replaced by the
pre-v250 text in the first bootcmd, before getty starts) boot at once:

- one with labvm's cloud-config as it is (fcgi-app/core/cloudinit.c): a root
  shell answers on ttyS0, without a password, and `systemd-analyze verify`
  accepts the unit with the drop-in;
- one with the same cloud-config but the drop-in's old `- $TERM` form: no
  getty on ttyS0 (agetty is handed /dev/null), so no shell.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
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

BIN = os.environ.get("LABVM_BIN") or os.path.join(SRC, "build", "bin")
IMG = os.environ.get("LABVM_GUEST_IMAGE_DIR") or os.path.join(SRC, ".cache", "guest-image")
STATE = tempfile.mkdtemp(prefix="qemu-t940-", dir=os.environ.get("LABVM_STATE") or None)
GUEST = {}

# systemd v249's units/serial-getty@.service.in as installed (no StandardInput,
# no StandardOutput: stdin is /dev/null; agetty opens %I itself)
PRE250_UNIT = r"""[Unit]
Description=Serial Getty on %I
Documentation=man:agetty(8) man:systemd-getty-generator(8)
BindsTo=dev-%i.device
After=dev-%i.device systemd-user-sessions.service plymouth-quit-wait.service getty-pre.target
After=rc-local.service
Before=getty.target
IgnoreOnIsolate=yes
Conflicts=rescue.service
Before=rescue.service

[Service]
ExecStart=-/sbin/agetty -o '-p -- \\u' --keep-baud 115200,57600,38400,9600 %I $TERM
Type=idle
Restart=always
UtmpIdentifier=%I
TTYPath=/dev/%I
TTYReset=yes
TTYVHangup=yes
IgnoreSIGPIPE=no
SendSIGHUP=yes

[Install]
WantedBy=getty.target
"""
INSTALL_PRE250 = ("cat > /etc/systemd/system/serial-getty@.service <<'T940_EOF'\n" +
                  PRE250_UNIT + "T940_EOF\n")


def free_ip():
    for k in range(200):
        ip = f"127.81.{10 + (os.getpid() + k) % 200}.1"
        try:
            with socket.socket() as s:
                s.bind((ip, 8899))
            return ip
        except OSError:
            continue
    raise RuntimeError("no free 127.81.x.1:8899")


def labvm_cloud_config():
    """The user-data labvm writes for linux-basics (tool_manifests: cloudinit.c)."""
    # the shipped lessons folder as it is: a lesson names files beside it (its guide)
    r = subprocess.run([os.path.join(BIN, "..", "tests", "tool_manifests"),
                        os.path.join(SRC, "conf", "lessons")], capture_output=True, text=True)
    t.require(r.returncode == 0, f"tool_manifests conf/lessons: exit {r.returncode}: "
              f"{r.stderr.strip()[-600:]}")
    for line in r.stdout.splitlines():
        o = json.loads(line)
        if o.get("kind") == "cloud-config" and o.get("lesson") == "linux-basics":
            return o["userdata"]
    raise AssertionError("tool_manifests wrote no cloud-config for linux-basics")


def with_pre250_unit(userdata, old_dropin=False):
    head, _, body = userdata.partition("\n")
    doc = json.loads(body)
    boot = doc["bootcmd"]
    i = next(k for k, c in enumerate(boot) if "serial-getty@ttyS0.service.d" in json.dumps(c))
    if old_dropin:
        # the drop-in before the fix: agetty's "-" (stdin as the tty)
        boot[i] = [re.sub(r"(--autologin root) \S+ \$TERM", r"\1 - $TERM", a) for a in boot[i]]
    boot.insert(0, ["sh", "-c", INSTALL_PRE250])
    return head + "\n" + json.dumps(doc)


def dropin_line(userdata):
    m = re.search(r"ExecStart=-/sbin/agetty[^\n]*", userdata)
    return m.group(0) if m else ""


def shell_answers(g, seconds):
    """True when a shell on ttyS0 runs `echo T940$((6*7))-$(id -u)` and prints T94042-0."""
    s = g.console(replay=True)
    s.settimeout(0.5)
    seen = b""
    deadline = time.monotonic() + seconds
    last_send = 0.0
    try:
        while time.monotonic() < deadline:
            if time.monotonic() - last_send > 2:
                s.sendall(b"\recho T940$((6*7))-$(id -u); tty\r")
                last_send = time.monotonic()
            try:
                b = s.recv(4096)
                if not b:
                    break
                seen += b
            except socket.timeout:
                pass
            if b"T94042-0" in seen:
                return True, seen
    finally:
        s.close()
    return False, seen


@t.test(skip=skip)
def boot_two_guests_with_the_old_unit():
    t.require(qemu_guest.image_ready(IMG), f"the guest image is in {IMG} (t900 builds it)")
    ud = labvm_cloud_config()
    t.diag("labvm's drop-in: " + dropin_line(ud))
    for name, old in (("new", False), ("old", True)):
        data = with_pre250_unit(ud, old_dropin=old)
        g = qemu_guest.QemuGuest(f"t940-{name}", os.path.join(STATE, name), data, free_ip(),
                                 memory_mib=512, cpus=1, image_dir=IMG,
                                 disk={"kind": "ephemeral", "claimName": "golden-debian-12"})
        g.start()
        GUEST[name] = (g, data)
    for name, (g, data) in GUEST.items():
        # bootcmd (the unit, the drop-in, daemon-reload) has run once
        # cloud-init's first stages are done
        rc, out, err = g.exec("cloud-init status --wait >/dev/null; "
                              "systemctl cat serial-getty@ttyS0.service", timeout=420)
        text = out.decode(errors="replace")
        t.ok("ExecStart=-/sbin/agetty -o '-p -- \\\\u' --keep-baud 115200,57600,38400,9600 "
             "%I $TERM" in text and "StandardInput" not in text,
             f"{name}: the guest runs the pre-v250 unit, with labvm's drop-in", text[-1500:])


@t.test(skip=skip)
def labvm_dropin_gives_a_root_shell():
    t.require("new" in GUEST, "no guest")
    g, data = GUEST["new"]
    ok, seen = shell_answers(g, 120)
    t.ok(ok, "a root shell answers on ttyS0 (no login, no password)", seen[-600:])
    t.ok(b"/dev/ttyS0" in seen, "on ttyS0 itself", seen[-300:])
    rc, out, err = g.exec("systemd-analyze verify --man=no serial-getty@ttyS0.service 2>&1; "
                          "echo rc=$?", timeout=60)
    text = out.decode(errors="replace")
    t.ok(text.strip().endswith("rc=0"), "systemd-analyze verify accepts unit and drop-in", text)
    t.ok("autologin.conf" not in text, "no complaint about the drop-in", text)


@t.test(skip=skip)
def old_dropin_gives_no_getty():
    t.require("old" in GUEST, "no guest")
    g, data = GUEST["old"]
    t.ok("--autologin root - $TERM" in dropin_line(data), "the old `-` form", dropin_line(data))
    ok, seen = shell_answers(g, 20)
    t.ok(not ok, "no shell answers on ttyS0", seen[-600:])
    rc, out, err = g.exec("journalctl -b -u serial-getty@ttyS0.service --no-pager | tail -5; "
                          "systemctl show -p NRestarts serial-getty@ttyS0.service", timeout=30)
    text = out.decode(errors="replace")
    t.ok(re.search(r"NRestarts=[1-9]", text) or "not a tty" in text or "failed" in text,
         "agetty fails on /dev/null and is restarted", text)


@t.test(skip=skip)
def stop_the_guests():
    for name, (g, _) in GUEST.items():
        g.stop()
        t.ok(not g.alive(), f"{name}: stopped")
    shutil.rmtree(STATE, ignore_errors=True)


t.done()
