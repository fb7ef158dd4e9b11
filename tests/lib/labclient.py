"""Clients for labvm's tests and benchmarks: the HTTP API (as a student,
through the front end with HTTP Basic auth), the cluster (the simulator,
with the admin token) and the database.

    from labclient import Api, Kube, Db, env, wait_until
    api = Api(user="student1")
    st, s = api.start("linux-basics")
    s = api.wait_state(s["id"], "ready")
"""
import base64
import http.client
import json
import os
import ssl
import time
import urllib.parse


def env(name, default=None):
    v = os.environ.get(name, default)
    if v is None:
        raise RuntimeError(f"{name} is not set (run through tests/run, or source .check/env)")
    return v


def wait_until(fn, timeout=30.0, interval=0.1, what="condition"):
    """Call fn until it returns a truthy value; return it, or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"{what} not reached within {timeout}s (last: {last!r})")


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body
        try:
            self.json = json.loads(body) if body else None
        except ValueError:
            self.json = None

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def __repr__(self):
        return f"<{self.status} {self.body[:300]!r}>"


class Api:
    """The student API through a front end (lighttpd by default)."""

    def __init__(self, user="student1", password=None, base=None, timeout=30):
        self.base = base or env("LABVM_URL")
        u = urllib.parse.urlsplit(self.base)
        self.host, self.port = u.hostname, u.port or 80
        self.prefix = u.path.rstrip("/")
        self.user = user
        self.password = password if password is not None else os.environ.get("LABVM_PASSWORD", "labvm")
        self.timeout = timeout
        self._conn = None

    def _connection(self):
        if self._conn is None:
            self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self._conn

    def request(self, method, path, body=None, headers=None, raw=None, auth=True):
        h = {"Accept": "application/json"}
        if auth and self.user:
            cred = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            h["Authorization"] = f"Basic {cred}"
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        if headers:
            h.update(headers)
        for attempt in range(2):
            c = self._connection()
            try:
                c.request(method, self.prefix + path, body=data, headers=h)
                r = c.getresponse()
                out = Response(r.status, r.getheaders(), r.read().decode("utf-8", "replace"))
                if r.getheader("Connection", "").lower() == "close":
                    self.close()
                return out
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- the API ------------------------------------------------------
    def lessons(self):
        return self.request("GET", "/api/lessons")

    def start(self, lesson):
        return self.request("POST", "/api/sessions", {"lesson": lesson})

    def current(self):
        return self.request("GET", "/api/sessions/current")

    def get(self, sid):
        return self.request("GET", f"/api/sessions/{sid}")

    def end(self, sid):
        return self.request("DELETE", f"/api/sessions/{sid}")

    def grade(self, sid):
        return self.request("POST", f"/api/sessions/{sid}/grade", {})

    def ticket(self, sid, machine=None):
        return self.request("POST", f"/api/sessions/{sid}/console-ticket",
                            {"machine": machine} if machine else {})

    def wait_state(self, sid, states=("ready",), timeout=60, interval=0.2):
        """Poll GET /api/sessions/{sid} (which advances readiness) until its
        state is one of states; returns the session. Raises on timeout."""
        if isinstance(states, str):
            states = (states,)
        last = {}

        def check():
            r = self.get(sid)
            if r.status != 200:
                raise AssertionError(f"GET session: {r}")
            last["s"] = r.json
            return r.json if r.json["state"] in states else None
        try:
            return wait_until(check, timeout, interval, f"session {sid} in {states}")
        except TimeoutError:
            raise TimeoutError(f"session {sid} not in {states} after {timeout}s: {last.get('s')}")

    def end_current(self):
        r = self.current()
        if r.status == 200:
            self.end(r.json["id"])


class Kube:
    """The cluster API (the simulator) with the admin token."""

    def __init__(self, url=None, token_file=None, ca=None, token=None, timeout=30):
        url = url or env("LABVM_KUBE_URL")
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port or 443
        if token is None:
            with open(token_file or env("LABVM_KUBE_ADMIN_TOKEN_FILE")) as f:
                token = f.read().strip()
        self.token = token
        self.ctx = ssl.create_default_context(cafile=ca or env("LABVM_KUBE_CA"))
        self.timeout = timeout
        self.ns = os.environ.get("LABVM_NAMESPACE", "labs")
        self._conn = None

    def request(self, method, path, body=None, content_type="application/json"):
        h = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = content_type
        for attempt in range(2):
            if self._conn is None:
                self._conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                                         timeout=self.timeout)
            try:
                self._conn.request(method, path, body=data, headers=h)
                r = self._conn.getresponse()
                return Response(r.status, r.getheaders(), r.read().decode("utf-8", "replace"))
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    http.client.CannotSendRequest):
                self._conn.close()
                self._conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    @staticmethod
    def path(kind, ns=None, name=None):
        group = {"virtualmachines": "/apis/kubevirt.io/v1",
                 "virtualmachineinstances": "/apis/kubevirt.io/v1",
                 "datavolumes": "/apis/cdi.kubevirt.io/v1beta1",
                 "network-attachment-definitions": "/apis/k8s.cni.cncf.io/v1"}.get(kind, "/api/v1")
        p = f"{group}/namespaces/{ns}/{kind}" if ns else f"{group}/{kind}"
        return f"{p}/{name}" if name else p

    def get(self, kind, name, ns=None):
        return self.request("GET", self.path(kind, ns or self.ns, name))

    def list(self, kind, selector=None, ns=None):
        p = self.path(kind, ns or self.ns)
        if selector:
            p += "?labelSelector=" + urllib.parse.quote(selector)
        r = self.request("GET", p)
        if r.status != 200:
            raise AssertionError(f"list {kind}: {r}")
        return r.json["items"]

    def create(self, kind, obj, ns=None):
        return self.request("POST", self.path(kind, ns or self.ns), obj)

    def delete(self, kind, name, ns=None, propagation="Background"):
        return self.request("DELETE", self.path(kind, ns or self.ns, name),
                            {"kind": "DeleteOptions", "apiVersion": "v1",
                             "propagationPolicy": propagation})

    def patch(self, kind, name, patch, ns=None):
        return self.request("PATCH", self.path(kind, ns or self.ns, name), patch,
                            "application/merge-patch+json")

    # -- simulator admin ------------------------------------------------
    def fault(self, **rule):
        r = self.request("POST", "/_sim/faults", rule)
        if r.status not in (200, 201):
            raise AssertionError(f"adding fault {rule}: {r}")
        return r

    def clear_faults(self):
        return self.request("DELETE", "/_sim/faults")

    def down(self):
        return self.request("POST", "/_sim/down")

    def up(self):
        return self.request("POST", "/_sim/up")

    def guest_exec(self, vmi, cmd, timeout_s=10, ns=None):
        r = self.request("POST", f"/_sim/guests/{ns or self.ns}/{vmi}/exec",
                         {"cmd": cmd, "timeout_s": timeout_s})
        if r.status != 200:
            raise AssertionError(f"guest exec in {vmi}: {r}")
        return r.json

    def lab_vms(self, selector=None):
        sel = "labvm.io/lab-session=true" + ("," + selector if selector else "")
        return self.list("virtualmachines", sel)


class Db:
    """The labvm database (psycopg2, autocommit)."""

    def __init__(self, dsn=None):
        import psycopg2  # Debian's python3-psycopg2
        self.conn = psycopg2.connect(dsn or env("LABVM_DATABASE"))
        self.conn.autocommit = True

    def query(self, sql, *args):
        with self.conn.cursor() as c:
            c.execute(sql, args)
            return c.fetchall() if c.description else []

    def one(self, sql, *args):
        rows = self.query(sql, *args)
        return rows[0] if rows else None

    def close(self):
        self.conn.close()
