#!/usr/bin/python3
"""The smaller edges of issue #13: console tickets single-use across two
bridges and across a bridge restart, the ticket's user compared with the
user the front end logged in; the reaper lists metadata only, so a backlog
of large Secrets does not stop it; a minimum orphan grace; lesson minutes
count from ready and --check refuses lessons shorter than their start
deadlines; fcgi_listen on loopback unless FCGI_WEB_SERVER_ADDRS (timeout: 300)."""
import asyncio
import base64
import os
import shutil
import socket
import subprocess
import time

import websockets

from fcgiclient import LabFcgi, fcgi_request
from labtest import reaper_argv, Api, Db, Kube, env, reset_world, wait_until
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
BIN = env("LABVM_BIN")
STATE = env("LABVM_STATE")
BASE = int(os.environ.get("LABVM_PORT_BASE", "18000"))
PROTO = "labvm-console.v1"


def own_conf(name, overrides):
    """The stack's labvm.conf with overrides, in a file of this suite's own."""
    d = os.path.join(STATE, "t340")
    os.makedirs(d, exist_ok=True)
    lines = []
    with open(env("LABVM_CONF")) as f:
        for line in f:
            if line.split("=", 1)[0].strip() not in overrides:
                lines.append(line.rstrip("\n"))
    lines += [f"{k} = {v}" for k, v in overrides.items()]
    p = os.path.join(d, name)
    with open(p, "w") as f:
        f.write("\n".join(lines) + "\n")
    return p


class Bridge:
    """A second labvm-console on its own port (same database and key)."""

    def __init__(self, port):
        self.port = port
        self.conf = own_conf(f"console-{port}.conf", {"console_listen": f"127.0.0.1:{port}"})
        self.proc = None

    def start(self):
        self.log = open(os.path.join(STATE, "t340", f"console-{self.port}.log"), "ab")
        self.proc = subprocess.Popen([os.path.join(BIN, "labvm-console")],
                                     env=dict(os.environ, LABVM_CONF=self.conf),
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 1).close()
                return self
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("labvm-console did not start")
                time.sleep(0.05)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.log.close()


async def _open(port, url, user):
    """Open a console directly at a bridge, as a front end that logged in
    `user` would; the close code, or 'open' once the bridge says so."""
    h = {"Forwarded": f'for=127.0.0.1;remote_user="{user}"'} if user else {}
    try:
        ws = await websockets.connect(f"ws://127.0.0.1:{port}{url}", subprotocols=[PROTO],
                                      extra_headers=h, open_timeout=10, close_timeout=2)
    except websockets.InvalidStatusCode as e:
        return f"http {e.status_code}"
    try:
        while True:
            m = await asyncio.wait_for(ws.recv(), 15)
            if isinstance(m, str) and '"open"' in m:
                await ws.close()
                return "open"
    except websockets.ConnectionClosed as e:
        return e.rcvd.code if e.rcvd else 1006


def console(port, url, user):
    return asyncio.run(_open(port, url, user))


lab = {}


@t.test(name="setup: a ready lab")
def setup():
    api = Api("student341")
    s = api.start("linux-basics").json
    api.wait_state(s["id"], "ready", 60)
    lab.update(api=api, id=s["id"])


def ticket_url():
    r = lab["api"].ticket(lab["id"])
    assert r.status == 200, r
    return r.json["url"]


@t.test(name="a console ticket is single-use across two bridges and across a bridge restart")
def single_use():
    main_port = int(env("LABVM_CONSOLE_URL").rsplit(":", 1)[1].split("/")[0])
    b2 = Bridge(BASE + 160).start()
    try:
        url = ticket_url()
        t.eq(console(main_port, url, "student341"), "open", "first use on the stack's bridge")
        t.eq(console(b2.port, url, "student341"), 4401, "the same ticket on a second bridge")
        url = ticket_url()
        t.eq(console(b2.port, url, "student341"), "open", "a new ticket on the second bridge")
        b2.stop()
        b2.start()
        t.eq(console(b2.port, url, "student341"), 4401, "the same ticket after its restart")
    finally:
        b2.stop()


@t.test(name="the bridge compares the ticket's user with the user the front end logged in")
def user_check():
    main_port = int(env("LABVM_CONSOLE_URL").rsplit(":", 1)[1].split("/")[0])
    t.eq(console(main_port, ticket_url(), "student342"), 4403, "another logged-in user: 4403")
    t.eq(console(main_port, ticket_url(), None), 4403, "no Forwarded remote_user: 4403")
    h = 'remote_user="student341", for=127.0.0.1;remote_user="student342"'

    async def spoof():
        ws = await websockets.connect(f"ws://127.0.0.1:{main_port}{ticket_url()}",
                                      subprotocols=[PROTO], extra_headers={"Forwarded": h},
                                      open_timeout=10, close_timeout=2)
        try:
            while True:
                await asyncio.wait_for(ws.recv(), 15)
        except websockets.ConnectionClosed as e:
            return e.rcvd.code if e.rcvd else 1006
    t.eq(asyncio.run(spoof()), 4403, "an earlier Forwarded element (the client's) does not count")
    t.eq(console(main_port, ticket_url(), "student341"), "open", "the right user opens it")


@t.test(name="/console-stats answers local callers only: a request carrying X-Forwarded-For "
             "or Forwarded (anything a front end passed on) gets 404")
def stats_local_only():
    import urllib.error
    import urllib.request
    main_port = int(env("LABVM_CONSOLE_URL").rsplit(":", 1)[1].split("/")[0])

    def get(headers):
        req = urllib.request.Request(f"http://127.0.0.1:{main_port}/console-stats", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code
    t.eq(get({}), 200, "a local caller gets the statistics")
    t.eq(get({"X-Forwarded-For": "127.0.0.1"}), 404, "with X-Forwarded-For: 404")
    t.eq(get({"Forwarded": "for=127.0.0.1"}), 404, "with Forwarded: 404")


@t.test(name="teardown of the lab")
def teardown():
    lab["api"].end(lab["id"])


@t.test(name="the reaper lists metadata only: a backlog of 40 MiB of orphan Secrets is "
             "reaped, not an answer too large")
def reaper_backlog():
    envname = env("LABVM_ENVIRONMENT")
    blob = base64.b64encode(os.urandom(1 << 20)).decode()
    names = [f"lab-t340-{i:02d}-cloudinit" for i in range(30)]
    for n in names:
        r = kube.create("secrets", {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": n, "labels": {"labvm.io/lab-session": "true",
                                               "labvm.io/environment": envname,
                                               "labvm.io/session-id": "gone"}},
            "data": {"userdata": blob}})
        assert r.status == 201, r
    conf = own_conf("reaper.conf", {"kube_timeout_ms": "3000", "capacity_lock_timeout_ms": "1000",
                                    "orphan_grace_s": "33"})
    time.sleep(34)  # older than the grace
    r = subprocess.run(reaper_argv(), env=dict(os.environ, LABVM_CONF=conf),
                       capture_output=True, text=True, timeout=120)
    t.eq(r.returncode, 0, "the reaper ran", (r.stdout + r.stderr)[-600:])
    left = [s["metadata"]["name"] for s in kube.list("secrets", "labvm.io/lab-session=true")
            if s["metadata"]["name"] in names and not s["metadata"].get("deletionTimestamp")]
    t.eq(left, [], "every orphan Secret deleted")
    for n in left:
        kube.delete("secrets", n)


@t.test(name="orphan grace: orphan_grace_s shorter than the longest start is refused; "
             "--grace 0 never races a start in flight (its user lock is held)")
def grace_min():
    conf = own_conf("grace.conf", {"orphan_grace_s": "5"})
    r = subprocess.run([os.path.join(BIN, "labvm.fcgi"), "--check"],
                       env=dict(os.environ, LABVM_CONF=conf), capture_output=True, text=True)
    t.ok(r.returncode != 0 and "orphan_grace_s" in r.stderr and "longest start" in r.stderr,
         "orphan_grace_s = 5 refused", r.stderr[-300:])
    envname = env("LABVM_ENVIRONMENT")
    name = "lab-t340-inflight-cloudinit"
    r = kube.create("secrets", {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "labels": {"labvm.io/lab-session": "true",
                                              "labvm.io/environment": envname,
                                              "labvm.io/session-id": "in-flight"}},
        "data": {"userdata": "eA=="}})
    assert r.status == 201, r
    reaper = reaper_argv("--grace", "0")
    e = dict(os.environ, LABVM_CONF=env("LABVM_CONF"))
    holder = Db()  # a start in flight: its user's lock (sql/locks.md 7301)
    holder.query("BEGIN")
    holder.query("SELECT pg_advisory_xact_lock(7301, hashtext('check/student344'))")
    try:
        r = subprocess.run(reaper, env=e, capture_output=True, text=True, timeout=120)
    finally:
        holder.query("ROLLBACK")
        holder.close()
    t.eq(r.returncode, 0, "the reaper ran", (r.stdout + r.stderr)[-300:])
    t.ok("(lesson kubeadm-cluster) and a start is in flight: grace 180 s this run"
         in r.stdout + r.stderr, "the grace of the largest lesson's start (3 machines: 180 s)",
         (r.stdout + r.stderr)[-300:])
    t.eq(kube.get("secrets", name).status, 200, "a start in flight: the young object is kept")
    r = subprocess.run(reaper, env=e, capture_output=True, text=True, timeout=120)
    s = kube.get("secrets", name)
    t.ok(s.status == 404 or s.json["metadata"].get("deletionTimestamp"),
         "no start in flight: --grace 0 reaps it", (r.stdout + r.stderr)[-300:])


@t.test(name="orphan grace for the largest lesson: enough for one machine but not for "
             "kubeadm-cluster's three is refused by --check (naming the lesson and the minimum) "
             "and warned about at start; enough for three passes; one-machine lessons need less")
def grace_machines():
    # kube_timeout 3 s, lock 1 s: one machine 2 + 7 x 3 + 10 = 33 s; three 2 + 16 x 3 + 10 = 60 s
    over = {"kube_timeout_ms": "3000", "capacity_lock_timeout_ms": "1000"}
    fcgi = os.path.join(BIN, "labvm.fcgi")

    def check(name, extra):
        r = subprocess.run([fcgi, "--check"], env=dict(os.environ, LABVM_CONF=own_conf(
            name, dict(over, **extra))), capture_output=True, text=True)
        return r.returncode, r.stdout + r.stderr
    rc, out = check("grace40.conf", {"orphan_grace_s": "40"})
    t.ok(rc != 0 and 'lesson "kubeadm-cluster"' in out and "3 machines: 60 s" in out
         and "orphan_grace_s = 60 or more" in out, "40 s refused for kubeadm-cluster", out[-400:])
    rc, out = check("grace60.conf", {"orphan_grace_s": "60"})
    t.eq(rc, 0, "60 s accepted", out[-400:])
    d = os.path.join(STATE, "t340", "lessons-single")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    src = os.path.join(env("LABVM_SRC"), "conf", "lessons")
    shutil.copy(os.path.join(src, "linux-basics.json"), d)
    shutil.copytree(os.path.join(src, "guides", "linux-basics"), os.path.join(d, "guides", "linux-basics"))
    rc, out = check("grace40single.conf", {"orphan_grace_s": "40", "lessons_dir": d})
    t.eq(rc, 0, "40 s is enough when every lesson has one machine", out[-400:])
    with LabFcgi(dict(over, orphan_grace_s="40")) as f:
        t.ok(f.request("GET", "/api/healthz").status in (200, 503), "labvm.fcgi serves with it")
        with open(os.path.join(f.dir, "labvm.fcgi.log")) as lf:
            log = lf.read()
    t.ok('orphan_grace_s 40 is shorter than the longest start of lesson "kubeadm-cluster"' in log
         and "warn" in log, "and warns at start", log[-600:])


@t.test(name="--check refuses a lesson whose minutes are shorter than its start deadlines")
def check_minutes():
    d = os.path.join(STATE, "t340", "lessons")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(d, "short.json"), "w") as f:
        f.write('{"id": "short", "title": "t", "runtime": "vm", "minutes": 2, '
                '"image": "quay.io/containerdisks/debian:12", "running_timeout_s": 100, '
                '"ready_timeout_s": 100}')
    conf = own_conf("short.conf", {"lessons_dir": d})
    r = subprocess.run([os.path.join(BIN, "labvm.fcgi"), "--check"],
                       env=dict(os.environ, LABVM_CONF=conf), capture_output=True, text=True)
    t.ok(r.returncode != 0 and "minutes" in r.stderr and "200 s" in r.stderr,
         "refused, naming minutes and the deadlines", r.stderr[-300:])


@t.test(name="minutes count from ready: a start slower than created_at + minutes is not "
             "ended; at ready expires_at is ready_at + minutes")
def expiry_from_ready():
    api = Api("student343")
    s = api.start("test-hold").json
    wait_until(lambda: api.get(s["id"]).json["stage"] == "setting_up", 60, 0.1, "setting_up")
    # as if the start had taken longer than the lesson's 10 minutes
    db.query("UPDATE sessions SET created_at = created_at - interval '11 minutes', "
             "expires_at = expires_at - interval '11 minutes' WHERE id = %s", s["id"])
    g = api.get(s["id"]).json
    t.eq((g["state"], g["end_reason"]), ("starting", None), "still starting, not expired", g)
    kube.guest_exec(s["vms"][0]["name"], "touch /root/go")
    g = api.wait_state(s["id"], "ready", 30)
    left = db.one("SELECT extract(epoch from expires_at - ready_at) FROM sessions WHERE id = %s",
                  s["id"])[0]
    t.ok(abs(float(left) - 600) < 2, "expires_at = ready_at + 10 minutes", left)
    api.end(s["id"])


def fcgi_request_from(src, port, params):
    import fcgiclient
    real = socket.create_connection
    socket.create_connection = lambda addr, timeout=None: real(addr, timeout, (src, 0))
    try:
        return fcgiclient.fcgi_request(("127.0.0.1", port), params, b"", 10)
    finally:
        socket.create_connection = real


def local_addrs(port):
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                         text=True).stdout
    return [line.split()[3] for line in out.splitlines() if line.strip()]


@t.test(name="fcgi_listen: a bare port binds loopback only; another address needs "
             "FCGI_WEB_SERVER_ADDRS, and libfcgi then refuses other peers")
def listen_loopback():
    port = BASE + 165
    with LabFcgi({"fcgi_listen": f":{port}"}, port=port):
        t.eq(local_addrs(port), [f"127.0.0.1:{port}"], "listening on 127.0.0.1 only")
    exe = os.path.join(BIN, "labvm.fcgi")
    e = dict(os.environ, LABVM_CONF=env("LABVM_CONF"))
    e.pop("FCGI_WEB_SERVER_ADDRS", None)
    r = subprocess.run([exe, "--listen", f"0.0.0.0:{port}"], env=e, capture_output=True,
                       text=True, timeout=10)
    t.ok(r.returncode == 2 and "FCGI_WEB_SERVER_ADDRS" in r.stderr,
         "0.0.0.0 without FCGI_WEB_SERVER_ADDRS is refused", r.stderr[-300:])
    e["FCGI_WEB_SERVER_ADDRS"] = "127.0.0.2"
    p = subprocess.Popen([exe, "--listen", f"0.0.0.0:{port}"], env=e,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: local_addrs(port), 10, 0.05, "listening")
        params = {"REQUEST_METHOD": "GET", "REQUEST_URI": "/api/healthz"}

        def from_(src):
            try:
                return fcgi_request_from(src, port, params)
            except (ConnectionError, OSError) as ex:
                return repr(ex)
        t.ok(isinstance(from_("127.0.0.1"), str), "a peer not listed is dropped")
        t.eq(from_("127.0.0.2")[0], 200, "the listed peer is served")
    finally:
        p.terminate()
        p.wait(10)


reset_world(kube, db)
t.done()
