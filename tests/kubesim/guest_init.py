# The init (PID 1) of a simulated guest. It runs inside the guest's mount, UTS
# and PID namespaces, chrooted into the copy-on-write root, started by
# guests.ProcessGuest as `python3 -I -S -c <this file>` with the plan (JSON,
# made by cloudinit.plan) on standard input. It sleeps the boot delay, runs
# cloud-init's stages (output to /var/log/cloud-init-output.log), then reaps
# orphans forever. Standard library only, no site packages.
import base64
import json
import os
import pwd
import grp
import signal
import subprocess
import sys
import time

START = time.monotonic()
plan = json.loads(sys.stdin.buffer.read() or b"{}")
fd = os.open("/dev/null", os.O_RDONLY)
os.dup2(fd, 0)
os.close(fd)
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "HOME": "/root", "LANG": "C.UTF-8", "USER": "root", "LOGNAME": "root"}
ENV.update(plan.get("env") or {})
os.environ.clear()
os.environ.update(ENV)
os.chdir("/")
signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
signal.signal(signal.SIGINT, signal.SIG_IGN)

for d in ("/var/log", "/var/lib/cloud/instance/scripts", "/run/cloud-init"):
    os.makedirs(d, exist_ok=True)
LOG = open("/var/log/cloud-init-output.log", "ab", buffering=0)


def log(msg):
    line = (msg.rstrip("\n") + "\n").encode()
    LOG.write(line)
    try:
        sys.stdout.buffer.write(line)
        sys.stdout.flush()
    except OSError:
        pass


def run_script(path, what):
    try:
        r = subprocess.run(["/bin/sh", path], stdin=subprocess.DEVNULL, stdout=LOG,
                           stderr=subprocess.STDOUT, env=ENV, cwd="/")
        if r.returncode != 0:
            log(f"{what} failed: Unexpected error while running command.\n"
                f"Command: ['/bin/sh', '{path}']\nExit code: {r.returncode}")
    except OSError as e:
        log(f"{what} failed: {e}")


def write_files(files):
    for f in files:
        path = f["path"]
        try:
            os.makedirs(os.path.dirname(path) or "/", exist_ok=True)
            data = base64.b64decode(f["content"])
            with open(path, "ab" if f.get("append") else "wb") as out:
                out.write(data)
            os.chmod(path, f.get("mode", 0o644))
            owner = f.get("owner") or "root:root"
            u, _, g = owner.partition(":")
            try:
                uid = pwd.getpwnam(u).pw_uid if u else 0
                gid = grp.getgrnam(g).gr_gid if g else pwd.getpwuid(uid).pw_gid
                os.chown(path, uid, gid)
            except (KeyError, OSError) as e:
                log(f"write_files: cannot chown {path} to {owner}: {e}")
        except OSError as e:
            log(f"write_files: failed writing {path}: {e}")


try:
    hostname = plan.get("hostname") or "localhost"
    with open("/etc/hostname", "w") as f:
        f.write(hostname + "\n")
except OSError:
    pass

delay = float(plan.get("boot_delay") or 0)
if delay > 0:
    time.sleep(delay)

t0 = time.time()
log(f"Cloud-init v. 22.4.2 running 'init' at {time.strftime('%a, %d %b %Y %H:%M:%S +0000', time.gmtime())}."
    f" Up {time.monotonic() - START:.2f} seconds.")
for e in plan.get("errors") or []:
    log(e)
if plan.get("bootcmd"):
    p = "/var/lib/cloud/instance/bootcmd"
    with open(p, "w") as f:
        f.write("\n".join(plan["bootcmd"]) + "\n")
    run_script(p, "bootcmd")
write_files([f for f in plan.get("write_files") or [] if not f.get("defer")])
runcmd = "/var/lib/cloud/instance/scripts/runcmd"
if plan.get("runcmd"):
    with open(runcmd, "w") as f:
        f.write("#!/bin/sh\n" + "\n".join(plan["runcmd"]) + "\n")
    os.chmod(runcmd, 0o700)
log(f"Cloud-init v. 22.4.2 running 'modules:final' at "
    f"{time.strftime('%a, %d %b %Y %H:%M:%S +0000', time.gmtime())}. Up {time.monotonic() - START:.2f} seconds.")
write_files([f for f in plan.get("write_files") or [] if f.get("defer")])
if plan.get("script"):
    p = "/var/lib/cloud/instance/scripts/part-001"
    with open(p, "wb") as f:
        f.write(base64.b64decode(plan["script"]))
    os.chmod(p, 0o700)
    try:
        r = subprocess.run([p], stdin=subprocess.DEVNULL, stdout=LOG, stderr=subprocess.STDOUT,
                           env=ENV, cwd="/")
        if r.returncode:
            log(f"Failed to run module scripts_user (scripts in /var/lib/cloud/instance/scripts)")
    except OSError as e:
        log(f"scripts_user failed: {e}")
if plan.get("runcmd"):
    run_script(runcmd, "scripts_user")
up = time.monotonic() - START
msg = plan.get("final_message") or ("Cloud-init v. 22.4.2 finished at $TIMESTAMP. Datasource "
                                   "DataSourceNoCloud [seed=/dev/vdb][dsmode=net].  Up $UPTIME seconds")
msg = msg.replace("$TIMESTAMP", time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime())) \
         .replace("$UPTIME", f"{up:.2f}").replace("$VERSION", "22.4.2")
log(msg)
with open("/var/lib/cloud/instance/boot-finished", "w") as f:
    f.write(f"{up:.2f} - {time.ctime()} - v. 22.4.2\n")
with open("/run/cloud-init/result.json", "w") as f:
    json.dump({"v1": {"datasource": "DataSourceNoCloud", "errors": []}}, f)

# From here on PID 1 only reaps orphans: hand over to a tiny shell loop (dash's
# wait reaps any child, adopted orphans included) so that an idle guest costs
# well under a MiB instead of a Python interpreter.
LOG.close()
sys.stdout.flush()
try:
    os.execv("/bin/sh", ["init", "-c", "trap '' HUP INT TERM; while :; do sleep 86400 & wait $!; done"])
except OSError:
    pass
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
while True:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass
    signal.sigtimedwait([signal.SIGCHLD], 60)
