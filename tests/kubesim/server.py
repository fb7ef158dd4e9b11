"""kubesim's HTTPS front: authentication, routing of the real API paths,
discovery, verbs (get/list/watch/create/update/patch/delete), the VMI console
WebSocket, fault injection, and the admin-only /_sim endpoints. Also `main()`,
the command line (see the kubesim script)."""
import argparse
import base64
import hashlib
import json
import os
import secrets
import signal
import socket
import socketserver
import ssl
import struct
import sys
import threading
import time
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler

import apiserver
import errors
import rbac
import tables
import util
from controllers import Controllers
from faults import Faults
import guests
from guests import driver_class
from profiles import Profile
from resources import BY_GVR, GROUPS, KUBEVIRT_SUBRESOURCES, RESOURCES, BY_PLURAL
from schema import Validator
from store import Store

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
K8S_VERSION = {"major": "1", "minor": "30", "gitVersion": "v1.30.0-kubesim",
               "gitCommit": "0000000000000000000000000000000000000000",
               "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
               "goVersion": "go1.22.0", "compiler": "gc", "platform": "linux/amd64"}
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
CONSOLE_PROTO = "plain.kubevirt.io"
PB_OPENAPI = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
BACKEND_SA = ("labs", "labvm-backend")


class Dropped(Exception):
    """Close the connection without an answer."""


# --------------------------------------------------------------------- Sim
class Sim:
    def __init__(self, args):
        self.args = args
        self.state_dir = os.path.abspath(args.state_dir)
        self.log_lock = threading.Lock()
        self.store = Store(history=args.watch_history)
        self.validator = Validator()
        self.authz = rbac.Authorizer(self.store)
        self.api = apiserver.ApiServer(self.store, self.validator, self.authz,
                                       owner_ref_enforcement="OwnerReferencesPermissionEnforcement"
                                       in (args.admission or []))
        self.profile = Profile(args.profile, args.time_scale)
        self.faults = Faults()
        self.tokens = {}
        self.guest_class = driver_class(args.guest)
        self.guest_net = self._guest_net(args.guest_net, args.port)
        # what a node reserves per VMI beyond its memory (KubeVirt's launcher
        # overhead) and how many VMIs a node takes (virt-handler's kvm device
        # count): QEMU guests are real, so their node is this machine
        self.launcher_overhead = args.launcher_overhead
        self.guest_slots = args.max_guests
        self.consoles = {}        # (ns, name) -> WsSession
        self.console_lock = threading.Lock()
        self.requests = 0
        self.started = time.time()
        self.controllers = Controllers(self)

    @staticmethod
    def _guest_net(spec, port):
        if not spec:
            # distinct for every port base this repository uses (16000..25000,
            # 6443); never 127.0/127.1 (localhost). A taken address is skipped
            # anyway (controllers._ip_free), this just avoids the contention.
            return (127, 2 + port % 254)
        try:
            a, b, c, d = spec.split("/")[0].split(".")
            if int(a) != 127:
                raise ValueError
            return (127, int(b))
        except ValueError:
            raise SystemExit(f"kubesim: --guest-net must look like 127.A.0.0/16, not {spec!r}") \
                from None

    def log(self, msg):
        with self.log_lock:
            sys.stderr.write(f"kubesim: {msg.rstrip()}\n")
            sys.stderr.flush()

    def guest_dir(self, ns, name, uid):
        return os.path.join(self.state_dir, "guests", f"{ns}.{name}.{uid[:8]}")

    def user_for(self, token):
        return self.tokens.get(token)

    def new_token(self, user):
        t = secrets.token_urlsafe(32)
        self.tokens[t] = user
        return t

    # ---------------------------------------------------------------- bootstrap
    def bootstrap(self):
        admin = rbac.User("kubesim-admin", ["system:masters"])
        self.admin_token = self.new_token(admin)
        self.backend_token = self.new_token(rbac.sa_user(*BACKEND_SA))
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.api.create(admin, BY_PLURAL["namespaces"], "", {"metadata": {"name": ns}})
        for o in rbac.BUILTIN:
            res = BY_PLURAL[o["kind"].lower() + "s"]
            self.api.create(admin, res, "", util.deep(o))
        for ns in ("default", "kube-system"):
            self.api.create(admin, BY_PLURAL["serviceaccounts"], ns,
                            {"metadata": {"name": "default", "namespace": ns}})
        mem = self.args.node_memory
        kvm = str(self.guest_slots) if self.guest_slots else "1k"
        for i in range(1, self.args.nodes + 1):
            name = f"node-{i}"
            ip = f"127.{self.guest_net[1]}.255.{i}"
            node = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": {
                        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": "amd64", "kubevirt.io/schedulable": "true",
                        "node-role.kubernetes.io/worker": ""}},
                    "spec": {"podCIDR": f"10.244.{i}.0/24"},
                    "status": {"capacity": {"cpu": str(self.args.node_cpus), "memory": mem,
                                            "pods": "110", "devices.kubevirt.io/kvm": kvm,
                                            "ephemeral-storage": "100Gi"},
                               "allocatable": {"cpu": str(self.args.node_cpus), "memory": mem,
                                               "pods": "110", "devices.kubevirt.io/kvm": kvm,
                                               "ephemeral-storage": "100Gi"},
                               "conditions": [{"type": "Ready", "status": "True",
                                               "reason": "KubeletReady",
                                               "message": "kubelet is posting ready status",
                                               "lastHeartbeatTime": util.now_rfc3339(),
                                               "lastTransitionTime": util.now_rfc3339()}],
                               "addresses": [{"type": "InternalIP", "address": ip},
                                             {"type": "Hostname", "address": name}],
                               "nodeInfo": {"kubeletVersion": K8S_VERSION["gitVersion"],
                                            "containerRuntimeVersion": "containerd://1.7.0",
                                            "operatingSystem": "linux", "architecture": "amd64",
                                            "osImage": "Debian GNU/Linux 12 (bookworm)",
                                            "kernelVersion": os.uname().release}}}
            self.api.create(admin, BY_PLURAL["nodes"], "", node, keep_status=True)
        docs = []
        if self.args.rbac:
            docs += load_docs(self.args.rbac)
        for f in self.args.seed or []:
            docs += load_docs(f)
        # namespaces first, then the rest in file order
        docs.sort(key=lambda d: 0 if d.get("kind") == "Namespace" else 1)
        for d in docs:
            ns = (d.get("metadata") or {}).get("namespace")
            if ns and self.store.get("namespaces", "", ns) is None and d.get("kind") != "Namespace":
                self.api.create(admin, BY_PLURAL["namespaces"], "", {"metadata": {"name": ns}})
            self.seed(admin, d)

    def seed(self, admin, d):
        from resources import by_kind
        res = by_kind(d.get("apiVersion", ""), d.get("kind", ""))
        if res is None:
            raise SystemExit(f"kubesim: seed object of unknown kind {d.get('apiVersion')}/"
                             f"{d.get('kind')}")
        ns = (d.get("metadata") or {}).get("namespace") or ("default" if res.namespaced else "")
        if res.plural == "namespaces" and self.store.get("namespaces", "", d["metadata"]["name"]):
            return
        try:
            self.api.create(admin, res, ns, util.deep(d), keep_status=True)
        except errors.ApiError as e:
            raise SystemExit(f"kubesim: seed {res.kind} {ns}/{(d.get('metadata') or {}).get('name')}: "
                             f"{e.message}") from None

    def write_state_files(self, url):
        sd = self.state_dir

        def w(name, text, mode=0o644):
            p = os.path.join(sd, name)
            tmp = p + ".tmp"
            with open(tmp, "w") as f:
                f.write(text)
            os.chmod(tmp, mode)
            os.replace(tmp, p)
        with open(self.ca_crt) as f:
            w("ca.crt", f.read())
        w("admin-token", self.admin_token + "\n")
        w("backend-token", self.backend_token + "\n")
        for name, tok, user in (("kubeconfig", self.admin_token, "kubesim-admin"),
                                ("backend.kubeconfig", self.backend_token, "labvm-backend")):
            w(name, f"""apiVersion: v1
kind: Config
clusters:
- name: kubesim
  cluster:
    server: {url}
    certificate-authority: {os.path.join(sd, 'ca.crt')}
users:
- name: {user}
  user:
    token: {tok}
contexts:
- name: kubesim
  context: {{cluster: kubesim, user: {user}, namespace: labs}}
current-context: kubesim
""")
        w("ready", url + "\n")


def load_docs(path):
    import yaml
    with open(path) as f:
        text = f.read()
    docs = []
    if path.endswith(".json"):
        d = json.loads(text)
        docs = d if isinstance(d, list) else [d]
    else:
        docs = [d for d in yaml.safe_load_all(text) if d]
    out = []
    for d in docs:
        if isinstance(d, dict) and d.get("kind", "").endswith("List") and "items" in d:
            out.extend(d["items"])
        elif isinstance(d, dict):
            out.append(d)
    return out


# ----------------------------------------------------------------- WebSocket
class WsSession:
    def __init__(self, handler, guest_sock):
        self.h = handler
        self.sock = handler.connection
        self.rfile = handler.rfile
        self.guest = guest_sock
        self.wlock = threading.Lock()
        self.closed = False

    def send(self, opcode, payload=b""):
        n = len(payload)
        if n < 126:
            hdr = struct.pack("!BB", 0x80 | opcode, n)
        elif n < 65536:
            hdr = struct.pack("!BBH", 0x80 | opcode, 126, n)
        else:
            hdr = struct.pack("!BBQ", 0x80 | opcode, 127, n)
        with self.wlock:
            self.h.wfile.write(hdr + payload)
            self.h.wfile.flush()

    def kick(self):
        """Closed because another console connection took over the serial port."""
        if self.closed:
            return
        self.closed = True
        try:
            self.send(0x8, struct.pack("!H", 1000))
        except OSError:
            pass
        for s in (self.guest,):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _read_exact(self, n):
        b = self.rfile.read(n)
        if b is None or len(b) < n:
            raise EOFError
        return b

    def run(self):
        out = threading.Thread(target=self._guest_to_ws, daemon=True)
        out.start()
        cur_op = None
        try:
            while not self.closed:
                b1, b2 = self._read_exact(2)
                fin, op = b1 & 0x80, b1 & 0x0F
                masked, n = b2 & 0x80, b2 & 0x7F
                if n == 126:
                    n = struct.unpack("!H", self._read_exact(2))[0]
                elif n == 127:
                    n = struct.unpack("!Q", self._read_exact(8))[0]
                key = self._read_exact(4) if masked else None
                data = self._read_exact(n) if n else b""
                if key:
                    data = _unmask(data, key)
                if op == 0:
                    op_eff = cur_op
                else:
                    op_eff = op
                    if op in (1, 2):
                        cur_op = op
                if op in (0, 1, 2) and fin:
                    cur_op = None if op != 0 else None
                if op_eff == 2:
                    if data:
                        self.guest.sendall(data)
                elif op == 8:
                    try:
                        self.send(0x8, data[:2] if len(data) >= 2 else b"")
                    except OSError:
                        pass
                    break
                elif op == 9:
                    self.send(0xA, data)
                # text frames and pongs are ignored
        except (EOFError, OSError, ValueError):
            pass
        finally:
            self.closed = True
            try:
                self.guest.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                self.guest.close()
            except OSError:
                pass
            out.join(2)

    def _guest_to_ws(self):
        try:
            while not self.closed:
                data = self.guest.recv(10240)
                if not data:
                    break
                self.send(0x2, data)
        except OSError:
            pass
        if not self.closed:
            self.closed = True
            try:
                self.send(0x8, struct.pack("!H", 1000))
            except OSError:
                pass
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _unmask(data, key):
    n = len(data)
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(k, "big")).to_bytes(n, "big")


# ------------------------------------------------------------------- Handler
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kubesim"
    sys_version = ""
    timeout = 600
    sim = None  # set by serve()

    def setup(self):
        self.request.settimeout(15)
        try:
            self.request.do_handshake()
        except (OSError, ssl.SSLError):
            self.request.close()
            raise
        self.request.settimeout(self.timeout)
        try:
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        super().setup()

    def version_string(self):
        return "kubesim"

    def log_message(self, fmt, *args):
        if self.sim.args.verbose:
            self.sim.log("%s %s" % (self.address_string(), fmt % args))

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except Dropped:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        except (ConnectionError, ssl.SSLError, socket.timeout):
            self.close_connection = True

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def do_HEAD(self):
        self.dispatch("HEAD")

    def do_OPTIONS(self):
        self.dispatch("OPTIONS")

    # ---------------------------------------------------------------- I/O
    def body(self):
        if hasattr(self, "_body"):
            return self._body
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            chunks = []
            while True:
                line = self.rfile.readline(1024)
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline(8)
            self._body = b"".join(chunks)
        else:
            n = int(self.headers.get("Content-Length") or 0)
            if n > 8 * 2**20:
                raise errors.ApiError(413, "Request entity too large: limit is 3145728",
                                      "RequestEntityTooLarge")
            self._body = self.rfile.read(n) if n else b""
        return self._body

    def send_json(self, code, obj, headers=None, raw=None):
        data = raw if raw is not None else util.dumps(obj)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Audit-Id", self.audit_id)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        for w in getattr(self, "warnings", []):
            self.send_header("Warning", f'299 - "{w}"')
        self.end_with(data)

    def end_with(self, data):
        """Headers and body in one write (one TLS record, no Nagle/delayed-ACK stall)."""
        self._headers_buffer.append(b"\r\n")
        out = b"".join(self._headers_buffer)
        self._headers_buffer = []
        if self.command != "HEAD":
            out += data
        self.wfile.write(out)

    def send_error_status(self, e):
        self.send_json(e.code, e.status(), e.headers)

    def send_text(self, code, text, ctype="text/plain; charset=utf-8"):
        data = text.encode() if isinstance(text, str) else text
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_with(data)

    # ------------------------------------------------------------ dispatch
    def dispatch(self, method):
        sim = self.sim
        sim.requests += 1
        self.audit_id = secrets.token_hex(8)
        self.warnings = []
        if hasattr(self, "_body"):
            del self._body
        try:
            self.body()   # always drained, so a refused request leaves the connection usable
        except errors.ApiError as e:
            self.close_connection = True
            return self.send_error_status(e)
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        q = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        try:
            user = self.authenticate()
            if path.startswith("/_sim/") or path == "/_sim":
                if not user.admin:
                    raise errors.ApiError(403, f'forbidden: User "{user.name}" cannot {method.lower()} '
                                          f'path "{path}"', "Forbidden", {})
                return self.sim_endpoint(method, path, q)
            if sim.faults.down:
                raise Dropped()
            route = self.route(method, path, q)
            if route is None:
                return
            self.apply_faults(route)
            self.serve_route(method, route, q, user)
        except Dropped:
            raise
        except errors.ApiError as e:
            self.drain_body()
            self.send_error_status(e)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            raise
        except Exception as e:  # noqa: BLE001
            sim.log("internal error: " + traceback.format_exc())
            self.send_error_status(errors.internal(str(e)))

    def drain_body(self):
        """An error answered before the body was read must still consume it:
        on a keep-alive connection the unread bytes would otherwise be parsed
        as the next request (the real API server always reads the body)."""
        if hasattr(self, "_body"):
            return
        try:
            self.body()
        except Exception:  # noqa: BLE001 - unreadable: do not reuse the connection
            self.close_connection = True

    def authenticate(self):
        auth = self.headers.get("Authorization") or ""
        token = None
        if auth[:7].lower() == "bearer ":
            token = auth[7:].strip()
        if token is None:
            for p in (self.headers.get("Sec-WebSocket-Protocol") or "").split(","):
                p = p.strip()
                if p.startswith("base64url.bearer.authorization.k8s.io."):
                    try:
                        enc = p[len("base64url.bearer.authorization.k8s.io."):]
                        token = base64.urlsafe_b64decode(enc + "=" * (-len(enc) % 4)).decode()
                    except Exception:  # noqa: BLE001
                        token = ""
        if not token:
            raise errors.unauthorized()
        u = self.sim.user_for(token)
        if u is None:
            raise errors.unauthorized()
        return u

    # --------------------------------------------------------------- routes
    def route(self, method, path, q):
        """-> dict(kind=..., ...) or None when already answered."""
        parts = [p for p in path.split("/") if p]
        if path in ("/healthz", "/livez", "/readyz") or path.startswith(("/healthz/", "/livez/",
                                                                         "/readyz/")):
            return {"kind": "nonresource", "path": path, "verb": "get"}
        if path in ("/version", "/version/", "/api", "/api/", "/apis", "/apis/") or \
                path.startswith("/openapi/"):
            return {"kind": "nonresource", "path": path.rstrip("/") or "/", "verb": "get"}
        if not parts or parts[0] not in ("api", "apis"):
            return {"kind": "nonresource", "path": path, "verb": method.lower(), "missing": True}
        if parts[0] == "api":
            if len(parts) < 2:
                return {"kind": "nonresource", "path": path, "verb": "get"}
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) == 2:
                return {"kind": "group", "group": parts[1], "path": path}
            group, version, rest = parts[1], parts[2], parts[3:]
        if not rest:
            return {"kind": "gv", "group": group, "version": version, "path": path}
        ns = None
        if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in (
                "status", "finalize")):
            ns = rest[1]
            rest = rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if len(rest) > 3:
            raise errors.ApiError(404, "the server could not find the requested resource",
                                  "NotFound", {})
        if group == "subresources.kubevirt.io":
            if version not in ("v1", "v1alpha3"):
                raise errors.ApiError(404, "the server could not find the requested resource",
                                      "NotFound", {})
            res = BY_PLURAL.get(plural)
            if res is None or res.group != "kubevirt.io" or not sub or ns is None:
                raise errors.ApiError(404, "the server could not find the requested resource",
                                      "NotFound", {})
            return {"kind": "kvsub", "res": res, "ns": ns, "name": name, "sub": sub,
                    "verb": "get" if method == "GET" else "update", "group": group}
        res = BY_GVR.get((group, version, plural))
        if res is None:
            raise errors.ApiError(404, "the server could not find the requested resource",
                                  "NotFound", {})
        if res.namespaced and ns is None and name is not None:
            raise errors.ApiError(404, "the server could not find the requested resource",
                                  "NotFound", {})
        if not res.namespaced and ns is not None:
            raise errors.ApiError(404, "the server could not find the requested resource",
                                  "NotFound", {})
        if sub and not ((sub == "status" and res.status) or
                        (sub == "finalize" and res.plural == "namespaces")):
            raise errors.ApiError(404, "the server could not find the requested resource",
                                  "NotFound", {})
        watch = q.get("watch") in ("1", "true", "True")
        if method in ("GET", "HEAD"):
            verb = "watch" if watch else ("get" if name else "list")
        elif method == "POST":
            if name:
                raise errors.method_not_allowed()
            verb = "create"
        elif method == "PUT":
            if not name:
                raise errors.method_not_allowed()
            verb = "update"
        elif method == "PATCH":
            if not name:
                raise errors.method_not_allowed()
            verb = "patch"
        elif method == "DELETE":
            verb = "delete" if name else "deletecollection"
        else:
            raise errors.method_not_allowed()
        if res.namespaced and ns is None and verb not in ("list", "watch"):
            raise errors.ApiError(404, "the server could not find the requested resource",
                                  "NotFound", {})
        return {"kind": "resource", "res": res, "ns": ns, "name": name, "sub": sub,
                "verb": verb}

    def apply_faults(self, route):
        if route["kind"] not in ("resource", "kvsub"):
            return
        res = route["res"]
        rule = self.sim.faults.match(route["verb"], res.plural, route.get("sub"),
                                     route.get("ns"), route.get("name"))
        if not rule:
            return
        if rule["delay_ms"]:
            time.sleep(rule["delay_ms"] / 1000.0)
        if rule["drop"]:
            raise Dropped()
        if rule["code"] is not None:
            raise errors.generic(rule["code"], rule.get("message"), res, route.get("name"),
                                 rule.get("retry_after") if rule["code"] in (429, 503) else None)

    def serve_route(self, method, route, q, user):
        sim = self.sim
        k = route["kind"]
        if k == "nonresource":
            a = {"verb": route["verb"], "path": route["path"]}
            if not user.admin and not sim.authz.allowed(user, a):
                raise errors.forbidden(None, None, rbac.forbidden_message(user, a))
            if route.get("missing"):
                return self.send_text(404, "404 page not found\n")
            return self.nonresource(route["path"])
        if k == "group":
            a = {"verb": "get", "path": route["path"]}
            if not user.admin and not sim.authz.allowed(user, a):
                raise errors.forbidden(None, None, rbac.forbidden_message(user, a))
            g = route["group"]
            if g not in GROUPS or g == "":
                return self.send_text(404, "404 page not found\n")
            return self.send_json(200, group_obj(g, kind="APIGroup"))
        if k == "gv":
            a = {"verb": "get", "path": route["path"]}
            if not user.admin and not sim.authz.allowed(user, a):
                raise errors.forbidden(None, None, rbac.forbidden_message(user, a))
            if route["group"] not in GROUPS or route["version"] not in GROUPS[route["group"]]:
                return self.send_text(404, "404 page not found\n")
            return self.send_json(200, resource_list(route["group"], route["version"]))
        if k == "kvsub":
            return self.kubevirt_sub(method, route, q, user)
        res, ns, name, sub, verb = (route[x] for x in ("res", "ns", "name", "sub", "verb"))
        api = sim.api
        api.authorize(user, verb, res, ns, name, sub)
        if verb == "get":
            obj = api.get(res, ns, name)
            return self.send_object(200, res, obj, q)
        if verb == "list":
            items, rv, cont, remaining = api.list(res, ns, q)
            return self.send_list(res, items, rv, cont, remaining, q)
        if verb == "watch":
            return self.watch(res, ns, q, name)
        if verb in ("create", "update"):
            obj = self.decode_body(res)
            if verb == "create":
                dry = q.get("dryRun") == "All"
                out, warnings = api.create(user, res, ns, obj, dry_run=dry)
                self.warnings = warnings
                return self.send_object(201, res, out, q)
            out, warnings = api.update(user, res, ns, name, obj, sub=sub)
            self.warnings = warnings
            return self.send_object(200, res, out, q)
        if verb == "patch":
            ctype = self.headers.get("Content-Type") or ""
            base = ctype.split(";")[0].strip().lower()
            if base == "application/apply-patch+yaml":
                raise errors.unsupported_media(
                    ["application/json-patch+json", "application/merge-patch+json"] +
                    ([] if res.crd else ["application/strategic-merge-patch+json"]))
            out, warnings = api.patch(user, res, ns, name, ctype, self.body(), sub=sub)
            self.warnings = warnings
            return self.send_object(200, res, out, q)
        if verb == "delete":
            opts = self.delete_options(q)
            body, code = api.delete(user, res, ns, name, opts)
            return self.send_json(code, None, raw=sim.store.encode(body))
        if verb == "deletecollection":
            opts = self.delete_options(q)
            items, rv, _, _ = api.list(res, ns, q)
            out = []
            for o in items:
                try:
                    b, _ = api.delete(user, res, ns, o["metadata"]["name"], opts)
                    out.append(b if b.get("kind") != "Status" else o)
                except errors.ApiError as e:
                    if e.code != 404:
                        raise
            return self.send_json(200, {"kind": f"{res.kind}List",
                                        "apiVersion": res.api_version,
                                        "metadata": {"resourceVersion": sim.store.current_rv()},
                                        "items": out})
        raise errors.method_not_allowed()

    def decode_body(self, res):
        ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip().lower()
        body = self.body()
        if ctype in ("application/json", ""):
            try:
                return json.loads(body or b"")
            except ValueError as e:
                raise errors.bad_request(f"couldn't get version/kind; json parse error: {e}") \
                    from None
        if ctype in ("application/yaml", "application/x-yaml"):
            import yaml
            try:
                return yaml.safe_load(body)
            except yaml.YAMLError as e:
                raise errors.bad_request(f"error converting YAML to JSON: {e}") from None
        types = ["application/json", "application/yaml"]
        if not res.crd:
            types.append("application/vnd.kubernetes.protobuf")
        raise errors.unsupported_media(types)

    def delete_options(self, q):
        opts = {}
        body = self.body()
        if body.strip():
            ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
            if ctype not in ("application/json", "", "application/yaml"):
                raise errors.unsupported_media(["application/json", "application/yaml"])
            try:
                opts = json.loads(body)
            except ValueError as e:
                raise errors.bad_request(f"couldn't get version/kind; json parse error: {e}") \
                    from None
            if not isinstance(opts, dict):
                raise errors.bad_request("DeleteOptions must be an object")
            if opts.get("kind") not in (None, "DeleteOptions"):
                raise errors.bad_request(f"expected DeleteOptions, got {opts.get('kind')}")
        for k in ("propagationPolicy",):
            if k in q:
                opts[k] = q[k]
        if "gracePeriodSeconds" in q:
            try:
                opts["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
            except ValueError:
                raise errors.bad_request("gracePeriodSeconds must be an integer") from None
        if "orphanDependents" in q:
            opts["orphanDependents"] = q["orphanDependents"] == "true"
        if q.get("dryRun") == "All" or opts.get("dryRun") == ["All"]:
            opts["dryRun"] = True
        else:
            opts.pop("dryRun", None)
        return opts

    # ------------------------------------------------------------- output
    def wants_table(self):
        acc = self.headers.get("Accept") or ""
        return "as=Table" in acc

    def send_object(self, code, res, obj, q):
        if self.wants_table() and code in (200, 201):
            return self.send_json(code, tables.table(res, [obj], self.sim.store.current_rv(), q),
                                  {"Content-Type": "application/json"} and None)
        return self.send_json(code, None, raw=self.sim.store.encode(obj))

    def send_list(self, res, items, rv, cont, remaining, q):
        if self.wants_table():
            t = tables.table(res, items, rv, q)
            if cont:
                t["metadata"]["continue"] = cont
            return self.send_json(200, t)
        md = {"resourceVersion": rv}
        if cont:
            md["continue"] = cont
            if remaining is not None:
                md["remainingItemCount"] = remaining
        head = util.dumps({"kind": f"{res.kind}List", "apiVersion": res.api_version,
                           "metadata": md})[:-1]
        enc = self.sim.store.encode
        raw = head + b',"items":[' + b",".join(enc(o) for o in items) + b"]}"
        return self.send_json(200, None, raw=raw)

    # -------------------------------------------------------------- watch
    def watch(self, res, ns, q, name=None):
        sim = self.sim
        store = sim.store
        api = sim.api
        ls, fs = api.selectors(res, q)
        if name:
            from labelsel import FieldSelector
            fs = FieldSelector(f"metadata.name={name}", res)
        try:
            timeout = float(q.get("timeoutSeconds") or 1800)
        except ValueError:
            raise errors.bad_request("timeoutSeconds must be a number") from None
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
        rv_s = q.get("resourceVersion") or ""
        nsf = ns if res.namespaced else None

        def visible(o):
            if o is None:
                return False
            if nsf is not None and o["metadata"].get("namespace") != nsf:
                return False
            return api.matches(o, ls, fs)

        initial = []
        expired_rv = None
        with store.lock:
            if rv_s in ("", "0"):
                for o in store.list(res.plural, nsf):
                    if visible(o):
                        initial.append(("ADDED", o))
                pos = store.rv
            else:
                try:
                    pos = int(rv_s)
                except ValueError:
                    raise errors.bad_request(f'resourceVersion: Invalid value: "{rv_s}": must be '
                                             "a non-negative integer") from None
                if store.expired(pos):
                    expired_rv = pos
        self.send_response(200)
        self.send_header("Content-Type", "application/json;stream=watch")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Audit-Id", self.audit_id)
        self.end_headers()

        def chunk(data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        def event(typ, obj):
            chunk(b'{"type":"' + typ.encode() + b'","object":' + store.encode(obj) + b"}\n")

        try:
            if expired_rv is not None:
                st = errors.expired(f"too old resource version: {expired_rv} "
                                    f"({store.oldest_rv + 1})").status()
                chunk(b'{"type":"ERROR","object":' + util.dumps(st) + b"}\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                return
            for typ, o in initial:
                event(typ, o)
            self.wfile.flush()
            deadline = time.monotonic() + timeout
            last_bm = time.monotonic()
            bm_every = 2.0
            while True:
                now = time.monotonic()
                if now >= deadline:
                    break
                if sim.faults.down:
                    raise Dropped()
                out = []
                with store.lock:
                    evs = store.events_after(pos)
                    if not evs:
                        store.cond.wait(min(0.5, deadline - now))
                        evs = store.events_after(pos)
                    if evs and store.expired(pos):
                        st = errors.expired(f"too old resource version: {pos} "
                                            f"({store.oldest_rv + 1})").status()
                        out.append(("ERROR", st))
                        evs = []
                    for rv, typ, plural, obj, old in evs:
                        pos = rv
                        if plural != res.plural:
                            continue
                        if typ == "ADDED":
                            if visible(obj):
                                out.append(("ADDED", obj))
                        elif typ == "MODIFIED":
                            nv, ov = visible(obj), visible(old)
                            if nv and ov:
                                out.append(("MODIFIED", obj))
                            elif nv:
                                out.append(("ADDED", obj))
                            elif ov:
                                out.append(("DELETED", obj))
                        elif typ == "DELETED":
                            if visible(old):
                                out.append(("DELETED", obj))
                    cur_rv = store.rv
                for typ, o in out:
                    if typ == "ERROR":
                        chunk(b'{"type":"ERROR","object":' + util.dumps(o) + b"}\n")
                        self.wfile.write(b"0\r\n\r\n")
                        self.wfile.flush()
                        return
                    event(typ, o)
                if bookmarks and time.monotonic() - last_bm >= bm_every:
                    last_bm = time.monotonic()
                    chunk(util.dumps({"type": "BOOKMARK", "object": {
                        "kind": res.kind, "apiVersion": res.api_version,
                        "metadata": {"resourceVersion": str(max(pos, cur_rv if not out else pos))}}})
                        + b"\n")
                if out or bookmarks:
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True

    # ---------------------------------------------------------- nonresource
    def nonresource(self, path):
        sim = self.sim
        if path in ("/healthz", "/livez", "/readyz") or path.startswith(("/healthz/", "/livez/",
                                                                         "/readyz/")):
            return self.send_text(200, "ok")
        if path == "/version":
            return self.send_json(200, K8S_VERSION)
        if path == "/api":
            return self.send_json(200, {"kind": "APIVersions", "versions": ["v1"],
                                        "serverAddressByClientCIDRs": [{
                                            "clientCIDR": "0.0.0.0/0",
                                            "serverAddress": f"{sim.args.host}:{sim.args.port}"}]})
        if path == "/apis":
            return self.send_json(200, {"kind": "APIGroupList", "apiVersion": "v1",
                                        "groups": [group_obj(g) for g in GROUPS if g]})
        if path == "/openapi/v2":
            acc = self.headers.get("Accept") or ""
            if "protobuf" in acc:
                # An empty OpenAPI document: kubectl then skips client-side validation;
                # the simulator validates every object itself (strict).
                return self.send_text(200, b"", PB_OPENAPI)
            return self.send_json(200, {"swagger": "2.0",
                                        "info": {"title": "Kubernetes",
                                                 "version": K8S_VERSION["gitVersion"]},
                                        "paths": {}, "definitions": {}})
        return self.send_text(404, "404 page not found\n")

    # ------------------------------------------------------ kubevirt subres
    def kubevirt_sub(self, method, route, q, user):
        sim = self.sim
        res, ns, name, sub = route["res"], route["ns"], route["name"], route["sub"]
        a = {"verb": route["verb"], "group": "subresources.kubevirt.io", "resource": res.plural,
             "subresource": sub, "namespace": ns, "name": name}
        if not user.admin and not sim.authz.allowed(user, a):
            raise errors.ApiError(403, f'{res.plural}.subresources.kubevirt.io "{name}" is '
                                  f"forbidden: {rbac.forbidden_message(user, a)}", "Forbidden",
                                  {"name": name, "group": "subresources.kubevirt.io",
                                   "kind": res.plural})
        if res.plural == "virtualmachineinstances" and sub == "console":
            return self.console(ns, name)
        if res.plural == "virtualmachines" and sub in ("start", "stop", "restart") and method == "PUT":
            return self.vm_action(ns, name, sub)
        raise errors.ApiError(404, "the server could not find the requested resource",
                              "NotFound", {})

    def vm_action(self, ns, name, action):
        sim = self.sim
        res = BY_PLURAL["virtualmachines"]
        with sim.store.lock:
            vm = sim.store.get("virtualmachines", ns, name)
            if vm is None:
                raise errors.not_found(res, name)
            n = util.deep(vm)
            spec = n["spec"]
            spec.pop("running", None)
            if action == "start":
                spec["runStrategy"] = "Always"
            elif action == "stop":
                spec["runStrategy"] = "Halted"
            else:
                vmi = sim.store.get("virtualmachineinstances", ns, name)
                if vmi is not None:
                    sim.api.sys_delete("virtualmachineinstances", vmi)
            n["metadata"]["generation"] = n["metadata"].get("generation", 1) + 1
            sim.api.sys_update("virtualmachines", n)
        return self.send_text(202, "")

    def console(self, ns, name):
        sim = self.sim
        res = BY_PLURAL["virtualmachineinstances"]
        with sim.store.lock:
            vmi = sim.store.get("virtualmachineinstances", ns, name)
            if vmi is None:
                raise errors.not_found(res, name)
            uid = vmi["metadata"]["uid"]
            phase = util.dig(vmi, "status", "phase")
            if util.dig(vmi, "spec", "domain", "devices", "autoattachSerialConsole") is False:
                raise errors.ApiError(400, "No serial consoles are present.", "BadRequest")
            if phase == "Failed":
                raise errors.ApiError(409, "VMI is in failed status", "Conflict")
            if phase != "Running":
                raise errors.ApiError(400, "VMI is not running", "BadRequest")
        up = (self.headers.get("Upgrade") or "").lower()
        key = self.headers.get("Sec-WebSocket-Key")
        if up != "websocket" or not key:
            raise errors.ApiError(400, "websocket: the client is not using the websocket "
                                  "protocol: 'upgrade' token not found in 'Connection' header",
                                  "BadRequest")
        guest = None
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            g = sim.controllers.guests.get(uid)
            if g is not None and sim.controllers.guest_state.get(uid) == "running":
                guest = g
                break
            if sim.controllers.guest_state.get(uid) in ("failed", "stopped", "stopping",
                                                       "succeeded"):
                break
            time.sleep(0.02)
        if guest is None:
            raise errors.ApiError(400, "VMI is not running", "BadRequest")
        try:
            gsock = guest.console()
        except Exception as e:  # noqa: BLE001
            raise errors.ApiError(500, f"Internal error occurred: console: {e}",
                                  "InternalError") from None
        protos = [p.strip() for p in (self.headers.get("Sec-WebSocket-Protocol") or "").split(",")]
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        if CONSOLE_PROTO in protos:
            self.send_header("Sec-WebSocket-Protocol", CONSOLE_PROTO)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        self.connection.settimeout(None)
        sess = WsSession(self, gsock)
        with sim.console_lock:
            old = sim.consoles.get((ns, name))
            sim.consoles[(ns, name)] = sess
        if old is not None:
            old.kick()
        try:
            sess.run()
        finally:
            with sim.console_lock:
                if sim.consoles.get((ns, name)) is sess:
                    del sim.consoles[(ns, name)]

    # ------------------------------------------------------------------ /_sim
    def sim_json(self):
        b = self.body()
        if not b.strip():
            return {}
        try:
            return json.loads(b)
        except ValueError as e:
            raise errors.bad_request(f"json parse error: {e}") from None

    def sim_endpoint(self, method, path, q):
        sim = self.sim
        parts = [p for p in path.split("/") if p][1:]
        if parts == ["faults"]:
            if method == "POST":
                body = self.sim_json()
                rules = body if isinstance(body, list) else [body]
                added = [sim.faults.add(r) for r in rules]
                return self.send_json(201, added[0] if len(added) == 1 else {"rules": added})
            if method == "DELETE":
                return self.send_json(200, {"cleared": sim.faults.clear()})
            if method == "GET":
                return self.send_json(200, {"rules": sim.faults.list(), "down": sim.faults.down})
        elif parts == ["down"] and method == "POST":
            sim.faults.down = True
            with sim.store.cond:
                sim.store.cond.notify_all()
            return self.send_json(200, {"down": True})
        elif parts == ["up"] and method == "POST":
            sim.faults.down = False
            return self.send_json(200, {"down": False})
        elif parts == ["state"] and method == "GET":
            with sim.store.lock:
                want = q.get("resource")
                out = {p: list(d.values()) for p, d in sim.store.objs.items()
                       if not want or p == want}
                rv = sim.store.current_rv()
            return self.send_json(200, {"resourceVersion": rv, "objects": out,
                                        "guests": guest_info(sim)})
        elif parts == ["profile"]:
            if method == "POST":
                body = self.sim_json()
                try:
                    sim.profile.set(body.get("profile", sim.profile.name), body.get("time_scale"))
                except ValueError as e:
                    raise errors.bad_request(str(e)) from None
            return self.send_json(200, sim.profile.describe())
        elif parts == ["stats"] and method == "GET":
            return self.send_json(200, stats(sim))
        elif parts == ["guests"] and method == "GET":
            return self.send_json(200, {"guests": guest_info(sim, rss=q.get("rss") in ("1", "true"))})
        elif parts == ["compact"] and method == "POST":
            sim.store.compact()
            return self.send_json(200, {"compactedTo": sim.store.current_rv()})
        elif parts == ["tokens"] and method == "POST":
            body = self.sim_json()
            if body.get("serviceAccount"):
                ns, _, n = body["serviceAccount"].partition("/")
                user = rbac.sa_user(ns, n)
            elif body.get("user"):
                user = rbac.User(body["user"], body.get("groups") or [])
            else:
                raise errors.bad_request("give user (and groups) or serviceAccount (ns/name)")
            return self.send_json(201, {"token": sim.new_token(user), "user": user.name,
                                        "groups": user.groups})
        elif len(parts) == 4 and parts[0] == "guests" and parts[3] == "exec" and method == "POST":
            return self.guest_exec(parts[1], parts[2], self.sim_json())
        raise errors.ApiError(404, f"no such simulator endpoint: {method} {path}", "NotFound", {})

    def guest_exec(self, ns, name, body):
        sim = self.sim
        cmd = body.get("cmd")
        if not isinstance(cmd, str):
            raise errors.bad_request("cmd (a shell command string) is required")
        timeout = float(body.get("timeout_s", 10))
        with sim.store.lock:
            vmi = sim.store.get("virtualmachineinstances", ns, name)
            if vmi is None:
                raise errors.not_found(BY_PLURAL["virtualmachineinstances"], name)
            uid = vmi["metadata"]["uid"]
        # a process guest is started just after its VMI turns Running: give a
        # guest that is still starting a moment instead of a spurious 409
        deadline = time.monotonic() + 10
        while (sim.controllers.guest_state.get(uid) == "starting" and
               time.monotonic() < deadline):
            time.sleep(0.02)
        g = sim.controllers.guests.get(uid)
        if g is None or sim.controllers.guest_state.get(uid) != "running":
            raise errors.ApiError(409, f"the guest of {ns}/{name} is not running", "Conflict")
        try:
            code, out, err = g.exec(cmd, timeout)
        except NotImplementedError as e:
            raise errors.ApiError(501, str(e), "NotImplemented") from None
        return self.send_json(200, {"exit_code": code,
                                    "stdout": out.decode("utf-8", "replace"),
                                    "stderr": err.decode("utf-8", "replace")})


def guest_info(sim, rss=False):
    out = []
    c = sim.controllers
    for uid, state in list(c.guest_state.items()):
        g = c.guests.get(uid)
        key = sim.store.by_uid.get(uid)
        d = {"uid": uid, "state": state, "ip": c.ips.get(uid),
             "vmi": f"{key[1]}/{key[2]}" if key else None,
             "workdir": getattr(g, "workdir", None), "kind": getattr(g, "kind", None)}
        if getattr(g, "kind", None) == "qemu":
            d.update(pid=g.pid, overlay=g.overlay_path, accel=g.accel,
                     memory_mib=g.memory_mib, cpus=g.cpus, error=g.error)
        if rss and g is not None:
            try:
                d["rss_bytes"] = g.rss()
            except Exception:  # noqa: BLE001
                d["rss_bytes"] = None
        out.append(d)
    return out


def self_rss():
    return guests.status_kb("self", "VmRSS") * 1024


def stats(sim):
    with sim.store.lock:
        counts = {p: len(d) for p, d in sim.store.objs.items()}
        rv = sim.store.current_rv()
    return {"rss_bytes": self_rss(), "objects": counts, "resourceVersion": rv,
            "requests": sim.requests, "threads": threading.active_count(),
            "guests": sum(1 for s in sim.controllers.guest_state.values() if s == "running"),
            "controller_passes": sim.controllers.passes,
            "uptime_s": round(time.time() - sim.started, 3), "profile": sim.profile.describe()}


def group_obj(g, kind=None):
    vs = GROUPS[g]
    o = {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
         "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}}
    if kind:
        o = {"kind": kind, "apiVersion": "v1", **o}
    return o


def resource_list(group, version):
    out = []
    if group == "subresources.kubevirt.io":
        for name, verb in KUBEVIRT_SUBRESOURCES:
            kind = "VirtualMachineInstance" if name.startswith("virtualmachineinstances") \
                else "VirtualMachine"
            out.append({"name": name, "singularName": "", "namespaced": True, "kind": kind,
                        "verbs": [verb]})
    for r in RESOURCES:
        if r.group != group or r.version != version:
            continue
        d = {"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
             "kind": r.kind, "verbs": r.verbs,
             "storageVersionHash": base64.b64encode(hashlib.sha256(
                 f"{r.group}/{r.version}/{r.kind}".encode()).digest()[:8]).decode()}
        if r.short:
            d["shortNames"] = r.short
        if r.categories:
            d["categories"] = r.categories
        out.append(d)
        if r.status:
            out.append({"name": f"{r.plural}/status", "singularName": "",
                        "namespaced": r.namespaced, "kind": r.kind,
                        "verbs": ["get", "patch", "update"]})
        if r.plural == "namespaces":
            out.append({"name": "namespaces/finalize", "singularName": "", "namespaced": False,
                        "kind": "Namespace", "verbs": ["update"]})
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version, "resources": out}


class TLSServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, ssl.SSLError, socket.timeout, OSError, Dropped)):
            return
        super().handle_error(request, client_address)


def serve(sim, ctx):
    Handler.sim = sim
    srv = TLSServer((sim.args.host, sim.args.port), Handler, bind_and_activate=False)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True, do_handshake_on_connect=False)
    srv.server_bind()
    srv.server_activate()
    return srv


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="kubesim", description="A Kubernetes + KubeVirt + CDI API "
                                 "simulator with real guests (labvm's test cluster).")
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--port", type=int, default=6443)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--profile", default="fast", choices=["fast", "realistic"])
    ap.add_argument("--time-scale", type=float, default=1.0)
    ap.add_argument("--guest", default="process", choices=["process", "qemu", "none"])
    ap.add_argument("--guest-net", default=None,
                    help="127.A.0.0/16 (default 127.(20 + port %% 200).0.0/16)")
    ap.add_argument("--rbac", default=None,
                    help="RBAC objects to load (default: conf/k8s/rbac.yaml of this repo)")
    ap.add_argument("--no-rbac", action="store_true", help="load no RBAC file")
    ap.add_argument("--seed", action="append", default=[])
    ap.add_argument("--nodes", type=int, default=None,
                    help="default 4; 1 with --guest qemu (the node is this machine)")
    ap.add_argument("--node-memory", default=None,
                    help="default 32Gi; with --guest qemu this machine's memory less 1 GiB")
    ap.add_argument("--node-cpus", type=int, default=None,
                    help="default 16; with --guest qemu this machine's CPUs")
    ap.add_argument("--max-guests", type=int, default=None,
                    help="VMIs a node runs at once (its devices.kubevirt.io/kvm); default "
                         "1000, with --guest qemu under TCG the node's CPUs")
    ap.add_argument("--guest-image-dir", default=None,
                    help="--guest qemu: the image folder (default .cache/guest-image, "
                         "built at start when missing or stale)")
    ap.add_argument("--watch-history", type=int, default=5000,
                    help="events kept for watches; older resourceVersions get 410 Expired")
    ap.add_argument("--admission", action="append", default=[],
                    help="extra admission plugins: OwnerReferencesPermissionEnforcement")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    if a.rbac is None and not a.no_rbac:
        d = os.path.join(REPO, "conf", "k8s", "rbac.yaml")
        a.rbac = d if os.path.exists(d) else None
    if a.no_rbac:
        a.rbac = None
    if a.time_scale <= 0:
        ap.error("--time-scale must be > 0")
    if a.guest == "qemu":
        import qemu_guest
        cap = qemu_guest.node_capacity()
        a.accel = qemu_guest.accelerator()
        defaults = {"nodes": 1, "node_memory": f"{cap['memory_mib']}Mi", "node_cpus": cap["cpus"],
                    "max_guests": cap["cpus"] if a.accel == "tcg" else 0}
        a.launcher_overhead = qemu_guest.host_overhead_mib(accel=a.accel) * 2**20
    else:
        a.accel = None
        defaults = {"nodes": 4, "node_memory": "32Gi", "node_cpus": 16, "max_guests": 0}
        a.launcher_overhead = 200 * 2**20
    for k, v in defaults.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.nodes < 1:
        ap.error("--nodes must be >= 1")
    if a.max_guests < 0:
        ap.error("--max-guests must be >= 0 (0: no limit but memory)")
    return a


def prepare_qemu(args):
    """--guest qemu: the tools and the guest image (built now when missing or
    stale: about 80 s the first time, nothing when current)."""
    import shutil
    import qemu_guest
    missing = [t for t in ("qemu-system-x86_64", "qemu-img", "cloud-localds")
               if not shutil.which(t)]
    if missing:
        raise SystemExit(f"kubesim: --guest qemu needs {', '.join(missing)} (Debian packages "
                         "qemu-system-x86 qemu-utils cloud-image-utils; tests/deps installs them)")
    d = args.guest_image_dir or qemu_guest.DEFAULT_IMAGE_DIR
    t0 = time.monotonic()
    print(f"kubesim: guest image {d}: building when needed", file=sys.stderr, flush=True)
    try:
        qemu_guest.build_image(d, log=sys.stderr)
    except qemu_guest.GuestError as e:
        raise SystemExit(f"kubesim: {e}") from None
    if not qemu_guest.image_ready(d):
        raise SystemExit(f"kubesim: no guest image in {d} after the build")
    args.guest_image_dir = d
    print(f"kubesim: guest image ready after {time.monotonic() - t0:.1f} s; QEMU guests use "
          f"{args.accel.upper()}, at most {args.max_guests or 'any number of'} at once per node, "
          f"{args.launcher_overhead >> 20} MiB host overhead each", file=sys.stderr, flush=True)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.makedirs(args.state_dir, exist_ok=True)
    sd = os.path.abspath(args.state_dir)
    for f in ("ready",):
        try:
            os.unlink(os.path.join(sd, f))
        except FileNotFoundError:
            pass
    import shutil
    shutil.rmtree(os.path.join(sd, "guests"), ignore_errors=True)
    os.makedirs(os.path.join(sd, "guests"), exist_ok=True)
    if args.guest == "qemu":
        prepare_qemu(args)
    from tls import make_certs
    sim = Sim(args)
    sim.ca_crt, crt, key = make_certs(sd, args.host)
    sim.bootstrap()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    ctx.set_alpn_protocols(["http/1.1"])
    try:
        srv = serve(sim, ctx)
    except OSError as e:
        raise SystemExit(f"kubesim: cannot listen on {args.host}:{args.port}: {e}") from None
    sim.controllers.start()

    def health():
        while True:
            time.sleep(0.3)
            try:
                sim.controllers.check_guests()
            except Exception:  # noqa: BLE001
                pass
    threading.Thread(target=health, daemon=True, name="guest-health").start()
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True,
                         name="http")
    t.start()
    host = args.host if ":" not in args.host else f"[{args.host}]"
    url = f"https://{host}:{args.port}"
    sim.write_state_files(url)
    print(f"kubesim: ready {url}", flush=True)

    done = threading.Event()

    def on_signal(signum, frame):
        done.set()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not done.wait(1):
        pass
    sim.log("stopping: guests first")
    threading.Thread(target=srv.shutdown, daemon=True).start()
    sim.controllers.stop_all()
    try:
        os.unlink(os.path.join(sd, "ready"))
    except OSError:
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
