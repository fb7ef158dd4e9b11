#!/usr/bin/python3
"""labvm.conf: the defaults hold when a key is absent (vm_capacity 8,
retry_after_s 30), an unknown key is an error for every binary, and
`labvm.fcgi --check` validates the configuration and every lesson. The test
stack always writes vm_capacity, so these run their own labvm.fcgi (on a
FastCGI socket, spoken to with cgi-fcgi) against the stack's database and
simulator, with keys removed from the stack's labvm.conf."""
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

from labtest import PREFIX, Db, Kube, env, reset_world, wait_until
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
BIN = env("LABVM_BIN")
FCGI = os.path.join(BIN, "labvm.fcgi")
TMP = tempfile.mkdtemp(prefix="t105-")


def conf(drop=(), add=None, name="labvm.conf"):
    """The stack's labvm.conf without the keys in drop, plus add."""
    out = []
    with open(env("LABVM_CONF")) as f:
        for line in f:
            key = line.split("=", 1)[0].strip() if "=" in line and not line.startswith("#") else None
            if key not in drop:
                out.append(line.rstrip("\n"))
    for k, v in (add or {}).items():
        out.append(f"{k} = {v}")
    path = os.path.join(TMP, name)
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
    return path


def keys_of(path):
    with open(path) as f:
        return {ln.split("=", 1)[0].strip() for ln in f if "=" in ln and not ln.startswith("#")}


def run(argv, path, timeout=60):
    r = subprocess.run(argv, env=dict(os.environ, LABVM_CONF=path), capture_output=True,
                       text=True, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


class Fcgi:
    """labvm.fcgi --listen SOCKET with a given labvm.conf."""

    def __init__(self, path):
        self.sock = os.path.join(TMP, f"fcgi-{os.getpid()}-{time.monotonic_ns()}.sock")
        self.log = open(os.path.join(env("LABVM_STATE"), "logs", "t105-fcgi.log"), "ab")
        self.p = subprocess.Popen([FCGI, "--listen", self.sock], env=dict(os.environ, LABVM_CONF=path),
                                  stdout=self.log, stderr=subprocess.STDOUT)
        wait_until(lambda: os.path.exists(self.sock) or self.p.poll() is not None, 60,
                   what="labvm.fcgi listening")
        if self.p.poll() is not None:
            raise AssertionError(f"labvm.fcgi exited with {self.p.returncode}")

    def request(self, method, uri, user, body=b""):
        e = {"REQUEST_METHOD": method, "REQUEST_URI": uri, "SCRIPT_NAME": uri,
             "CONTENT_LENGTH": str(len(body)), "CONTENT_TYPE": "application/json",
             "SERVER_PROTOCOL": "HTTP/1.1", "GATEWAY_INTERFACE": "CGI/1.1",
             "SERVER_NAME": "localhost", "SERVER_PORT": "80", "REMOTE_USER": user,
             "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        out = subprocess.run(["cgi-fcgi", "-bind", "-connect", self.sock], input=body, env=e,
                             capture_output=True, timeout=120).stdout.decode()
        head, _, payload = out.partition("\r\n\r\n")
        lines = head.split("\r\n")
        status = int(lines[0].split()[1]) if lines[0].startswith("Status:") else 200
        headers = {ln.split(":", 1)[0].lower(): ln.split(":", 1)[1].strip()
                   for ln in lines if ":" in ln}
        return status, headers, (json.loads(payload) if payload.strip() else None)

    def close(self):
        self.p.terminate()
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.log.close()


def foreign_vm(name):
    r = kube.create("virtualmachines", {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name, "labels": {f"{PREFIX}/lab-session": "true",
                                              f"{PREFIX}/environment": "t105-elsewhere"}},
        "spec": {"runStrategy": "Halted", "template": {"spec": {
            "domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}}}}})
    if r.status != 201:
        raise AssertionError(f"creating {name}: {r}")


@t.test(name="labvm.fcgi --check: the stack's configuration and lessons are valid (exit 0)")
def check_ok():
    rc, out = run([FCGI, "--check"], env("LABVM_CONF"))
    t.eq(rc, 0, "exit status", out)


@t.test(name="an unknown key is an error for labvm.fcgi --check, labvm.fcgi, the reaper and "
             "the console bridge, naming the key")
def unknown_key():
    bad = conf(add={"vm_capacityy": "8"}, name="unknown.conf")
    rc, out = run([FCGI, "--check"], bad)
    t.ok(rc != 0, "--check refuses it", out)
    t.ok("vm_capacityy" in out, "and names the key", out)
    rc, out = run([FCGI, "--listen", os.path.join(TMP, "never.sock")], bad)
    t.ok(rc != 0, "labvm.fcgi does not start with it", out)
    rc, out = run([os.path.join(BIN, "labvm-reaper"), "--dry-run"], bad)
    t.ok(rc != 0 and "vm_capacityy" in out, "the reaper refuses it", out)
    console = os.path.join(BIN, "labvm-console")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bad2 = conf(drop=("console_listen",), add={"console_listen": f"127.0.0.1:{port}",
                                              "vm_capacityy": "8"}, name="unknown2.conf")
    try:
        rc, out = run([console], bad2, timeout=30)
    except subprocess.TimeoutExpired:
        rc, out = None, "still running after 30 s"
    t.ok(rc not in (None, 0) and "vm_capacityy" in out, "labvm-console refuses it", (rc, out))


@t.test(name="labvm.fcgi --check refuses a broken lesson and a bad value")
def check_refuses():
    lessons = os.path.join(TMP, "lessons")
    shutil.copytree(os.path.join(env("LABVM_SRC"), "conf", "lessons"), lessons)
    with open(os.path.join(lessons, "broken.json"), "w") as f:
        f.write('{"id": "broken", "title": ')
    rc, out = run([FCGI, "--check"], conf(drop=("lessons_dir",), add={"lessons_dir": lessons},
                                          name="lessons.conf"))
    t.ok(rc != 0, "a lesson file that is not JSON", out)
    t.ok("broken" in out, "named", out)
    rc, out = run([FCGI, "--check"], conf(drop=("vm_capacity",), add={"vm_capacity": "many"},
                                          name="value.conf"))
    t.ok(rc != 0 and "vm_capacity" in out, "vm_capacity = many", out)


@t.test(name="without vm_capacity and retry_after_s: capacity 8 (the 8th VM admitted, the 9th "
             "refused) and Retry-After 30")
def defaults():
    path = conf(drop=("vm_capacity", "retry_after_s"), name="defaults.conf")
    t.require(not ({"vm_capacity", "retry_after_s"} & keys_of(path)), "the keys are absent")
    rc, out = run([FCGI, "--check"], path)
    t.eq(rc, 0, "valid without them", out)
    reset_world(kube, db)
    fc = Fcgi(path)
    try:
        for i in range(7):
            foreign_vm(f"t105-filler-{i}")
        st, _, body = fc.request("POST", "/api/sessions", "student131", b'{"lesson":"linux-basics"}')
        t.eq(st, 201, "7 VMs in the cluster: the 8th is admitted", body)
        st, h, body = fc.request("POST", "/api/sessions", "student132", b'{"lesson":"linux-basics"}')
        t.eq((st, (body or {}).get("error")), (503, "capacity_full"), "8 in use: the 9th is refused")
        t.eq((body or {}).get("capacity"), 8, "capacity 8 in the answer", body)
        t.eq(h.get("retry-after"), "30", "Retry-After: the default 30 s", h)
    finally:
        fc.close()
        for i in range(7):
            kube.delete("virtualmachines", f"t105-filler-{i}")
        reset_world(kube, db)


shutil.rmtree(TMP, ignore_errors=True)
t.done()
