#!/usr/bin/python3
# timeout: 300
"""What the front ends pass on to labvm's backends, from the real configs
(conf/lighttpd/labvm.conf.in, conf/apache/labvm.conf.in rendered by
tests/lib/labstack.py as for the stack) with the backends swapped for
recorders: labvm.fcgi for tests/lib/fcgi_recorder.py (a FastCGI responder
that writes down its parameters), labvm-console for a WebSocket server that
writes down the upgrade request's headers. Issue #26: the student's password
(Authorization: Basic, item 14) reaches neither backend; a client's own
Forwarded header never reaches the console (item 2: the bridge reads the
user from the front end's element only), whatever the client put in it; the
front end's X-Forwarded-For ends with the address it saw itself (item 15).
"""
import asyncio
import json
import os
import re
import threading
import urllib.request

import websockets

import labstack
from labconsole import auth
from tap import T

t = T()
SRC = os.environ.get("LABVM_SRC") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
STATE = os.path.join(os.environ["LABVM_STATE"], "t705")
BASE = int(os.environ.get("LABVM_PORT_BASE", "18000")) + 500   # lighttpd +580, Apache +590
RECORDER_PORT = BASE - 500 + 170
USER = "student70"
# what a client adds, as the student B with a ticket of A's would
CRAFTED = ['for=x;remote_user=student71;a="', 'remote_user="student71"',
           'for=1.2.3.4;remote_user="student71", for=127.0.0.1;remote_user="student71"',
           'remote_user="student71\\"', 'remote_user=student71;remote_user=student71']


class ConsoleRecorder:
    """A WebSocket server on RECORDER_PORT: each upgrade's headers, then a close."""

    def __init__(self, port):
        self.seen = []
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def handler(ws, path):
            await ws.close()

        async def process_request(path, headers):
            with self.lock:
                self.seen.append((path, [(k, v) for k, v in headers.raw_items()]))
            return None

        async def main():
            self.server = await websockets.serve(handler, "127.0.0.1", port,
                                                 process_request=process_request,
                                                 subprotocols=["labvm-console.v1"])
            ready.set()
            await self.server.wait_closed()

        self.th = threading.Thread(target=lambda: self.loop.run_until_complete(main()),
                                   daemon=True)
        self.th.start()
        if not ready.wait(15):
            raise RuntimeError("console recorder did not start")

    def take(self):
        with self.lock:
            out, self.seen = self.seen, []
        return out

    def close(self):
        self.loop.call_soon_threadsafe(self.server.close)
        self.th.join(10)


def fake_bin():
    d = os.path.join(STATE, "bin")
    os.makedirs(d, exist_ok=True)
    exe = os.path.join(d, "labvm.fcgi")
    with open(exe, "w") as f:
        f.write("#!/bin/sh\nexec /usr/bin/python3 "
                f"{os.path.join(SRC, 'tests', 'lib', 'fcgi_recorder.py')} "
                f"--out {os.path.join(STATE, 'api-seen.jsonl')}\n")
    os.chmod(exe, 0o755)
    return d


def api_seen():
    try:
        with open(os.path.join(STATE, "api-seen.jsonl")) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    os.unlink(os.path.join(STATE, "api-seen.jsonl"))
    return [json.loads(x) for x in lines]


def get(url, headers):
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


async def ws_open(url, headers):
    try:
        ws = await websockets.connect(url, subprotocols=["labvm-console.v1"],
                                      extra_headers=headers, open_timeout=15, close_timeout=2)
    except websockets.InvalidStatusCode as e:
        return f"http {e.status_code}"
    try:
        await asyncio.wait_for(ws.recv(), 10)
    except (websockets.ConnectionClosed, asyncio.TimeoutError):
        pass
    await ws.close()
    return "upgraded"


def elements(fwd):
    """RFC 7239 elements of a Forwarded value, each a dict (quoted values
    unescaped); None when it does not parse."""
    tok = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
    val = rf'(?:{tok}|"(?:[^"\\]|\\.)*")'
    pair = rf"({tok})=({val})"
    out = []
    for el in re.split(r"\s*,\s*(?=(?:[^\"]*\"[^\"]*\")*[^\"]*$)", fwd.strip()):
        d = {}
        for p in el.split(";"):
            m = re.fullmatch(pair, p)
            if not m:
                return None
            v = m.group(2)
            if v.startswith('"'):
                v = re.sub(r"\\(.)", r"\1", v[1:-1])
            d[m.group(1).lower()] = v
        out.append(d)
    return out


os.makedirs(STATE, exist_ok=True)
stack = labstack.Stack(STATE, port_base=BASE, frontend="both", bindir=fake_bin())
stack.ports["console"] = RECORDER_PORT
recorder = ConsoleRecorder(RECORDER_PORT)
FRONTS = []


@t.test(name="setup: lighttpd and Apache from the real configs, backends swapped for recorders")
def setup():
    for fe in ("lighttpd", "apache"):
        getattr(stack, f"{fe}_up")()
        FRONTS.append((fe, stack.url(fe)))
    for fe, url in FRONTS:
        st, _ = get(url + "/api/healthz", {"Authorization": auth(USER)})
        t.eq(st, 200, f"{fe}: the recorder answers behind it")
    api_seen()


for fe_i, fe in enumerate(("lighttpd", "apache")):
    @t.test(name=f"{fe}: the API gets no Authorization and no client Forwarded; REMOTE_USER "
                 "is the login")
    def api_headers(fe_i=fe_i, fe=fe):
        url = FRONTS[fe_i][1]
        for crafted in CRAFTED:
            st, _ = get(url + "/api/lessons", {
                "Authorization": auth(USER), "Proxy-Authorization": auth("student71"),
                "Forwarded": crafted, "X-Forwarded-For": "6.6.6.6"})
            t.eq(st, 200, f"{crafted}: answered")
        seen = api_seen()
        t.eq(len(seen), len(CRAFTED), "one request each reached the API")
        for p in seen:
            t.eq(p.get("REMOTE_USER"), [USER], "REMOTE_USER is the user who logged in")
            t.eq([k for k in p if "AUTHORIZATION" in k], [],
                 "no Authorization or Proxy-Authorization parameter", sorted(p))
            t.ok("student71" not in json.dumps(p), "nothing the client claimed reaches the API",
                 p.get("HTTP_FORWARDED"))

    @t.test(name=f"{fe}: the console's upgrade gets no Authorization; its Forwarded is the "
                 "front end's own element, whatever the client sent; X-Forwarded-For ends "
                 "with the front end's peer")
    def console_headers(fe_i=fe_i, fe=fe):
        url = FRONTS[fe_i][1].replace("http://", "ws://") + "/console/x?ticket=t"
        recorder.take()
        loop = asyncio.new_event_loop()
        try:
            for crafted in CRAFTED + [None]:
                h = {"Authorization": auth(USER), "Proxy-Authorization": auth("student71"),
                     "X-Forwarded-For": "6.6.6.6"}
                if crafted:
                    h["Forwarded"] = crafted
                t.eq(loop.run_until_complete(ws_open(url, h)), "upgraded",
                     f"{crafted}: the upgrade reached the recorder")
        finally:
            loop.close()
        seen = recorder.take()
        t.eq(len(seen), len(CRAFTED) + 1, "one upgrade each reached the bridge's port")
        for path, hdrs in seen:
            names = [k.lower() for k, _ in hdrs]
            t.ok("authorization" not in names and "proxy-authorization" not in names,
                 "no Authorization or Proxy-Authorization header", names)
            fwd = [v for k, v in hdrs if k.lower() == "forwarded"]
            t.eq(len(fwd), 1, "one Forwarded header", fwd)
            els = elements(fwd[0]) if fwd else None
            t.ok(els, "it is RFC 7239 grammar", fwd)
            if els:
                t.eq(els[-1].get("remote_user"), USER, "its last element names the login", fwd)
                t.ok(all("remote_user" not in e for e in els[:-1]),
                     "no other element names a user", fwd)
            t.ok("student71" not in " ".join(v for _, v in hdrs),
                 "nothing the client claimed reaches the bridge", hdrs)
            xff = [v for k, v in hdrs if k.lower() == "x-forwarded-for"]
            t.ok(len(xff) == 1 and xff[0].split(",")[-1].strip() == "127.0.0.1",
                 "X-Forwarded-For's last element is the address the front end saw", xff)


@t.test(name="teardown: the private front ends stop")
def teardown():
    for fe in ("apache", "apache-fcgi", "lighttpd"):
        stack.stop(fe)
    recorder.close()
    t.ok(not stack.running("lighttpd") and not stack.running("apache"), "stopped")


t.done()
