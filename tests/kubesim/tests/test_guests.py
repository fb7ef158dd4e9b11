#!/usr/bin/python3
"""kubesim: process guests run the cloud-config in an isolated copy-on-write
root; deleting the VM kills them (timeout: 120)."""
import base64
import os
import shutil
import time
import urllib.request

from simlib import SECRETS, VMIS, VMS, Sim, cloud_config, secret, vm, wait_for, wait_running
from tap import T

t = T()
sim = Sim()
A, B = sim.admin, sim.backend
MARK = f"kubesim-test-{os.getpid()}"

AGENT = r"""import http.server, os
host, port = os.environ["LABVM_AGENT_LISTEN"].rsplit(":", 1)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("ready" if os.path.exists("/var/lib/labvm/ready") else "not-ready").encode()
        self.send_response(200 if body == b"ready" else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer((host, int(port)), H).serve_forever()
"""

WRITE = f"""- path: /opt/agent.py
  encoding: b64
  content: {base64.b64encode(AGENT.encode()).decode()}
  permissions: '0750'
- path: /etc/{MARK}/plain.txt
  content: |
    plain text
  permissions: '0600'
  owner: daemon:daemon
- path: /root/deferred.txt
  content: deferred
  defer: true
"""
RUNCMD = [
    "mkdir -p /var/lib/labvm",
    ["sh", "-c", "echo order:runcmd:$(cat /root/deferred.txt 2>/dev/null) >> /root/order"],
    "false",
    "nohup python3 /opt/agent.py >/var/log/agent.log 2>&1 &",
    "setsid sleep 1000 &",
    "echo listen=$LABVM_AGENT_LISTEN > /root/env.txt",
    f"touch /tmp/{MARK}-tmp /etc/{MARK}/written-by-guest",
    "touch /var/lib/labvm/ready",
]
BOOT = ["echo order:bootcmd:$(test -e /opt/agent.py && echo files || echo nofiles) >> /root/order"]


def http_get(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, str(e)


B.post(SECRETS, secret("g-1", cloud_config(RUNCMD, WRITE, bootcmd=BOOT)))
t0 = time.monotonic()
B.post(VMS, vm("g-1", "g-1"))


@t.test
def guest_runs_cloud_config_and_agent():
    wait_running(sim, "g-1")
    ip = A.get(VMIS + "/g-1").json["status"]["interfaces"][0]["ipAddress"]
    code = wait_for(lambda: http_get(f"http://{ip}:8899/ready")[0] == 200, 10,
                    what="agent ready on the VMI address")
    t.ok(code, "the agent listens on LABVM_AGENT_LISTEN and the ready flag exists")
    took = time.monotonic() - t0
    t.diag(f"create -> agent ready: {took:.2f}s")
    out = sim.exec("g-1", "cat /root/env.txt /root/order; stat -c '%a %U:%G' /opt/agent.py "
                   f"/etc/{MARK}/plain.txt; cat /etc/{MARK}/plain.txt /root/deferred.txt")
    lines = out["stdout"].splitlines()
    t.eq(lines[0], "listen=0.0.0.0:8899", "LABVM_AGENT_LISTEN in the guest environment")
    t.ok(f"inet {ip}/24" in sim.exec("g-1", "ip -4 addr show eth0")["stdout"],
         "the VMI's address is the guest's own eth0")
    t.eq(lines[1:3], ["order:bootcmd:nofiles", "order:runcmd:deferred"],
         "cloud-init order: bootcmd, write_files, deferred write_files, runcmd")
    t.eq(lines[3], "750 root:root", "permissions and default owner")
    t.eq(lines[4], "600 daemon:daemon", "owner")
    t.eq(lines[5:7], ["plain text", "deferred"], "file contents")
    log = sim.exec("g-1", "cat /var/log/cloud-init-output.log")["stdout"]
    t.ok("finished at" in log, "cloud-init output log with the final message")
    t.ok("running 'init'" in log and "running 'modules:final'" in log, "stages logged")
    t.eq(sim.exec("g-1", "hostname")["stdout"].strip(), "g-1", "hostname is the VM name")
    t.eq(sim.exec("g-1", "test -e /var/lib/cloud/instance/boot-finished")["exit_code"], 0,
         "boot-finished")


@t.test
def guest_is_isolated():
    t.ok(not os.path.exists(f"/etc/{MARK}"), "guest writes do not reach the host")
    t.ok(not os.path.exists(f"/tmp/{MARK}-tmp"), "guest /tmp is private")
    t.eq(sim.exec("g-1", f"ls /tmp/{MARK}-tmp")["exit_code"], 0, "but the guest sees its /tmp")
    ps = sim.exec("g-1", "ps -e -o pid=,comm=")["stdout"].split("\n")
    pids = [int(x.split()[0]) for x in ps if x.strip()]
    t.ok(1 in pids and max(pids) < 200, "own PID namespace", ps)
    t.ok(len(pids) < 15, "only the guest's processes are visible", ps)
    r = sim.exec("g-1", f"ls {sim.dir} 2>&1; cat {sim.dir}/admin-token 2>&1")
    t.ok("admin-token" not in r["stdout"] or "denied" in r["stdout"] or
         "No such" in r["stdout"], "the simulator's state dir is hidden", r["stdout"])
    r = sim.exec("g-1", "echo hi > /etc/guest-only && cat /etc/guest-only")
    t.eq(r["stdout"], "hi\n", "the guest can write anywhere")
    t.ok(not os.path.exists("/etc/guest-only"), "host unchanged")


@t.test
def second_guest_gets_its_own_address_and_root():
    B.post(SECRETS, secret("g-2", cloud_config(["touch /root/only-g2"])))
    B.post(VMS, vm("g-2", "g-2"))
    wait_running(sim, "g-2")
    wait_for(lambda: sim.exec("g-2", "test -e /root/only-g2")["exit_code"] == 0, 10)
    ip1 = A.get(VMIS + "/g-1").json["status"]["interfaces"][0]["ipAddress"]
    ip2 = A.get(VMIS + "/g-2").json["status"]["interfaces"][0]["ipAddress"]
    t.ok(ip1 != ip2, "distinct addresses", (ip1, ip2))
    t.eq(sim.exec("g-1", "test -e /root/only-g2")["exit_code"], 1, "roots are separate")
    port = sim.port
    t.ok(ip1.startswith(f"10.{port >> 8}.{port & 255}."), "default pod CIDR from the port", ip1)


@t.test
def exec_endpoint():
    r = sim.exec("g-1", "echo out; echo err >&2; exit 3")
    t.eq((r["exit_code"], r["stdout"], r["stderr"]), (3, "out\n", "err\n"), "exit code and output")
    r = sim.exec("g-1", "sleep 5", timeout=0.5)
    t.eq(r["exit_code"], 124, "timeout")
    c, o = A.post("/_sim/guests/labs/nope/exec", {"cmd": "true"})
    t.eq(c, 404, "unknown VMI")


def guest_pids(workdir_hint):
    """Host pids of processes whose root is inside a guest overlay of this simulator."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            root = os.readlink(f"/proc/{d}/root")
        except OSError:
            continue
        if root.startswith(workdir_hint):
            out.append(int(d))
    return out


@t.test
def deleting_the_vm_kills_everything():
    hint = os.path.join(sim.dir, "guests")
    before = guest_pids(hint)
    t.ok(len(before) >= 4, "guest processes visible from the host", before)
    ip = A.get(VMIS + "/g-1").json["status"]["interfaces"][0]["ipAddress"]
    B.delete(VMS + "/g-1")
    wait_for(lambda: A.get(VMS + "/g-1").status == 404, 10, what="VM gone")
    left = [p for p in guest_pids(hint) if os.readlink(f"/proc/{p}/root").find(".g-1.") >= 0]
    t.eq(left, [], "no process of the guest survives (even setsid'd ones)")
    t.ok(http_get(f"http://{ip}:8899/ready")[0] is None, "agent gone")
    dirs = [d for d in os.listdir(hint) if ".g-1." in d]
    t.eq(dirs, [], "the copy-on-write layer is removed")


@t.test
def inline_user_data_and_userData_key():
    r = B.post(VMS, vm("g-3", userdata="#cloud-config\nruncmd:\n- touch /root/inline\n"))
    t.eq(r.status, 201, "inline userData")
    B.post(SECRETS, secret("g-4", "#cloud-config\nruncmd:\n- touch /root/camel\n", key="userData"))
    B.post(VMS, vm("g-4", "g-4"))
    wait_running(sim, "g-3")
    wait_running(sim, "g-4")
    wait_for(lambda: sim.exec("g-3", "test -e /root/inline")["exit_code"] == 0, 10, what="inline")
    wait_for(lambda: sim.exec("g-4", "test -e /root/camel")["exit_code"] == 0, 10, what="userData")
    t.ok(True, "both user-data sources run")


@t.test(name="exec right after a guest starts runs inside it or is refused, never on the host "
             "(the window before the guest's init has entered its own root)")
def exec_before_chroot():
    import sys
    import tempfile
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from guests import GuestError, ProcessGuest
    marks = []
    for i in range(5):
        wd = tempfile.mkdtemp(prefix="kubesim-early-")
        g = ProcessGuest(f"early-{i}", wd, "#cloud-config\n", "127.0.0.1")
        mark = f"/var/tmp/{MARK}-early-{i}"
        marks.append(mark)
        g.start()
        try:
            ran = None
            for _ in range(200):
                try:
                    ran = g.exec(f"touch {mark} && echo in", timeout=10)
                    break
                except GuestError:
                    time.sleep(0.01)
            t.ok(ran is not None and ran[0] == 0 and ran[1] == b"in\n",
                 f"guest {i}: the exec ran (once the guest was up)", ran)
        finally:
            g.stop()
            shutil.rmtree(wd, ignore_errors=True)
    escaped = [m for m in marks if os.path.exists(m)]
    for m in escaped:
        os.unlink(m)
    t.eq(escaped, [], "no exec wrote to the host's file system")


@t.test
def stop_kills_guests_on_sigterm():
    hint = os.path.join(sim.dir, "guests")
    t.ok(guest_pids(hint), "guests running before SIGTERM")
    sim.proc.terminate()
    sim.proc.wait(120)
    t.ok(sim.proc.poll() is not None, "exits on SIGTERM")
    time.sleep(0.2)
    t.eq(guest_pids(hint), [], "no guest outlives the simulator")


sim.stop()
t.done()
