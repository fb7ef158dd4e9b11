"""Helpers for kubesim's own tests: start a private simulator (free port, temp
state dir), a small keep-alive HTTPS JSON client, manifests, waiting."""
import base64
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
KUBESIM = os.path.join(os.path.dirname(HERE), "kubesim")
SRC = os.environ.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
SEED = os.path.join(os.path.dirname(HERE), "seeds", "labs.yaml")
RBAC = os.path.join(SRC, "conf", "k8s", "rbac.yaml")
KUBECTL = os.path.join(SRC, ".cache", "kubernetes-client", "usr", "bin", "kubectl")
NS = "labs"


def free_port():
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if 1024 < p < 65000:
            return p
    raise RuntimeError("no free port")


class Sim:
    """A kubesim process for one test file. Use as a context manager."""

    def __init__(self, *extra, profile="fast", guest="process", seed=True, port=None):
        self.dir = tempfile.mkdtemp(prefix="kubesim-test-")
        self.port = port or free_port()
        argv = [KUBESIM, "--state-dir", self.dir, "--port", str(self.port), "--profile", profile,
                "--guest", guest, "--rbac", RBAC]
        if seed:
            argv += ["--seed", SEED]
        argv += list(extra)
        self.argv = argv
        self.log = open(os.path.join(self.dir, "kubesim.log"), "wb")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 30
        while not os.path.exists(os.path.join(self.dir, "ready")):
            if self.proc.poll() is not None:
                raise RuntimeError("kubesim exited: " + self.logtext())
            if time.monotonic() > deadline:
                raise RuntimeError("kubesim not ready: " + self.logtext())
            time.sleep(0.02)
        self.url = open(os.path.join(self.dir, "ready")).read().strip()
        self.ca = os.path.join(self.dir, "ca.crt")
        self.admin_token = open(os.path.join(self.dir, "admin-token")).read().strip()
        self.backend_token = open(os.path.join(self.dir, "backend-token")).read().strip()
        self.admin = Client(self, self.admin_token)
        self.backend = Client(self, self.backend_token)

    def logtext(self):
        try:
            with open(os.path.join(self.dir, "kubesim.log"), errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def client(self, token):
        return Client(self, token)

    def token(self, user=None, groups=(), sa=None):
        body = {"serviceAccount": sa} if sa else {"user": user, "groups": list(groups)}
        c, o = self.admin.post("/_sim/tokens", body)
        assert c == 201, o
        return o["token"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.stop()

    def exec(self, name, cmd, ns=NS, timeout=10):
        c, o = self.admin.post(f"/_sim/guests/{ns}/{name}/exec", {"cmd": cmd, "timeout_s": timeout})
        if c != 200:
            raise RuntimeError(f"exec {name}: {c} {o}")
        return o

    def exec_pod(self, name, argv, ns=NS, timeout=10):
        """(exit code, stdout, stderr) of argv in the pod, through the exec
        subresource (v4.channel.k8s.io, admin token)."""
        import asyncio
        import json as _json
        import ssl as _ssl
        import urllib.parse as _up
        import websockets as _ws
        q = _up.urlencode([("command", a) for a in argv] + [("stdout", "true"),
                                                              ("stderr", "true")])
        url = self.url.replace("https://", "wss://") + f"/api/v1/namespaces/{ns}/pods/{name}/exec?{q}"

        async def go():
            out = {}
            async with _ws.connect(url, ssl=_ssl.create_default_context(cafile=self.ca),
                                   subprotocols=["v4.channel.k8s.io"], max_size=None,
                                   extra_headers={"Authorization": "Bearer " + self.admin_token}
                                   ) as w:
                try:
                    while True:
                        m = await asyncio.wait_for(w.recv(), timeout)
                        if m:
                            out[m[0]] = out.get(m[0], b"") + m[1:]
                except _ws.ConnectionClosed:
                    pass
            st = _json.loads(out.get(3) or b"{}")
            code = 0 if st.get("status") == "Success" else int(
                ((st.get("details") or {}).get("causes") or [{}])[0].get("message", -1))
            return code, out.get(1, b""), out.get(2, b"")
        return asyncio.run(go())

    def kubeconfig(self, token=None):
        p = os.path.join(self.dir, f"kc-{abs(hash(token or ''))}")
        with open(p, "w") as f:
            f.write(f"""apiVersion: v1
kind: Config
clusters:
- name: s
  cluster: {{server: "{self.url}", certificate-authority: "{self.ca}"}}
users:
- name: u
  user: {{token: "{token or self.admin_token}"}}
contexts:
- name: c
  context: {{cluster: s, user: u, namespace: labs}}
current-context: c
""")
        return p


class Resp:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.raw = body
        try:
            self.json = json.loads(body) if body else None
        except ValueError:
            self.json = None

    def __iter__(self):
        return iter((self.status, self.json))


class Client:
    def __init__(self, sim, token):
        self.sim = sim
        self.token = token
        u = urllib.parse.urlsplit(sim.url)
        self.host, self.port = u.hostname, u.port
        self.ctx = ssl.create_default_context(cafile=sim.ca)
        self.conn = None

    def _conn(self):
        if self.conn is None:
            self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                                    timeout=30)
        return self.conn

    def request(self, method, path, body=None, ctype="application/json", headers=None, raw=None):
        h = {"Accept": "application/json"}
        if self.token is not None:
            h["Authorization"] = "Bearer " + self.token
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
        if data is not None:
            h["Content-Type"] = ctype
        h.update(headers or {})
        for attempt in range(2):
            c = self._conn()
            try:
                c.request(method, path, body=data, headers=h)
                r = c.getresponse()
                b = r.read()
                if r.getheader("Connection", "").lower() == "close":
                    self.close()
                return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, b)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    http.client.CannotSendRequest):
                self.close()
                if attempt:
                    raise
        raise RuntimeError("unreachable")

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def put(self, path, body=None, **kw):
        return self.request("PUT", path, body, **kw)

    def patch(self, path, body, ctype="application/merge-patch+json", **kw):
        return self.request("PATCH", path, body, ctype=ctype, **kw)

    def delete(self, path, body=None, **kw):
        return self.request("DELETE", path, body, **kw)

    def watch(self, path, timeout=10):
        """Open a watch (path includes ?watch=1...). Returns a Watch reading events."""
        return Watch(self, path, timeout)


class Watch:
    def __init__(self, client, path, timeout):
        self.conn = http.client.HTTPSConnection(client.host, client.port, context=client.ctx,
                                                timeout=timeout)
        self.conn.request("GET", path, headers={"Authorization": "Bearer " + client.token})
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.ctype = self.resp.getheader("Content-Type")
        self.buf = b""

    def next(self):
        """The next event (dict) or None at the end of the stream."""
        while b"\n" not in self.buf:
            try:
                chunk = self.resp.read1(65536)
            except (socket.timeout, TimeoutError):
                return None
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def events(self, n, until=None):
        out = []
        while len(out) < n:
            e = self.next()
            if e is None:
                break
            out.append(e)
        return out

    def close(self):
        self.conn.close()


def wait_for(fn, timeout=10, interval=0.02, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out waiting for {what} (last: {last!r})")


LAB = {"labvm.io/lab-session": "true"}

AUTOLOGIN = """- path: /etc/systemd/system/serial-getty@ttyS0.service.d/override.conf
  content: |
    [Service]
    ExecStart=
    ExecStart=-/sbin/agetty --autologin root --keep-baud 115200,38400,9600 %I $TERM
"""


def cloud_config(runcmd=(), write_files="", autologin=True, bootcmd=()):
    s = "#cloud-config\nwrite_files:\n" + (AUTOLOGIN if autologin else "") + write_files
    if not autologin and not write_files:
        s = "#cloud-config\n"
    if bootcmd:
        s += "bootcmd:\n" + "".join(f"- {json.dumps(c)}\n" for c in bootcmd)
    if runcmd:
        s += "runcmd:\n" + "".join(f"- {json.dumps(c)}\n" for c in runcmd)
    return s


def secret(name, userdata, labels=None, ns=NS, key="userdata"):
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": ns, "labels": dict(labels or LAB)},
            "type": "Opaque",
            "data": {key: base64.b64encode(userdata.encode()).decode()}}


def vm(name, secret_name=None, labels=None, disk="golden", memory="1Gi", image=None, ns=NS,
       run_strategy="Always", node=None, userdata=None, claim="golden-debian-12"):
    labels = dict(labels or LAB)
    if disk == "golden":
        root = {"name": "root", "ephemeral": {"persistentVolumeClaim": {
            "claimName": claim, "readOnly": True}}}
    elif disk == "pvc":
        root = {"name": "root", "persistentVolumeClaim": {"claimName": claim}}
    elif disk == "dv":
        root = {"name": "root", "dataVolume": {"name": claim}}
    else:
        root = {"name": "root", "containerDisk": {"image": image or
                                                  "quay.io/containerdisks/debian:12"}}
    volumes = [root]
    disks = [{"name": "root", "disk": {"bus": "virtio"}}]
    if secret_name or userdata is not None:
        ci = {"secretRef": {"name": secret_name}} if secret_name else {"userData": userdata}
        volumes.append({"name": "cloudinit", "cloudInitNoCloud": ci})
        disks.append({"name": "cloudinit", "disk": {"bus": "virtio"}})
    spec = {"domain": {"cpu": {"cores": 1}, "resources": {"requests": {"memory": memory}},
                       "devices": {"disks": disks,
                                   "interfaces": [{"name": "default", "masquerade": {}}]}},
            "networks": [{"name": "default", "pod": {}}], "volumes": volumes}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"runStrategy": run_strategy,
                     "template": {"metadata": {"labels": labels}, "spec": spec}}}


VMS = f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines"
VMIS = f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstances"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"
PODS = f"/api/v1/namespaces/{NS}/pods"
PVCS = f"/api/v1/namespaces/{NS}/persistentvolumeclaims"
EVENTS = f"/api/v1/namespaces/{NS}/events"
DVS = f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{NS}/datavolumes"


def phase(sim, name, ns=NS):
    r = sim.admin.get(f"/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{name}")
    if r.status != 200:
        return None
    return (r.json.get("status") or {}).get("phase")


def wait_running(sim, name, timeout=10):
    return wait_for(lambda: phase(sim, name) == "Running", timeout, what=f"{name} Running")


def events_for(sim, name, ns=NS):
    r = sim.admin.get(f"/api/v1/namespaces/{ns}/events")
    return [e for e in r.json["items"] if e["involvedObject"]["name"] == name or
            e["involvedObject"]["name"].startswith(f"virt-launcher-{name}-")]


def console_url(sim, name, ns=NS):
    return (sim.url.replace("https://", "wss://") +
            f"/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{name}/console")
