#!/usr/bin/python3
"""The front ends (lighttpd and Apache) in front of labvm, without a browser:
HTTP Basic auth done by the front end (401 before the app), identity from
REMOTE_USER only (forged user headers change nothing), security headers on
every answer, the page's static files (and nothing else from web/), the app's
405/Allow and 415 passing through, and /console/ upgrades reaching the bridge.
"""
import asyncio
import base64
import json
import os
import re
import sys
import uuid

import websockets

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from labclient import Api, Db, Kube, wait_until  # noqa: E402
from tap import T  # noqa: E402

t = T()
ENV = os.environ
PASSWORD = ENV.get("LABVM_PASSWORD", "labvm")
FRONTENDS = [("lighttpd", ENV.get("LABVM_LIGHTTPD_URL")
              or (None if ENV.get("LABVM_APACHE_URL") else ENV.get("LABVM_URL"))),
             ("apache", ENV.get("LABVM_APACHE_URL"))]
USERS = {"lighttpd": ("student61", "student62"), "apache": ("student63", "student64")}
LESSON = "debian-golden"
FORGED = ("X-Remote-User", "Remote-User", "X-Forwarded-User", "Remote_User", "X-Auth-User")
CSP_NEEDS = ["default-src 'self'", "script-src 'self'", "style-src 'self' 'unsafe-inline'",
             "connect-src 'self'", "frame-ancestors 'none'"]

db = Db()
kube = Kube()


def basic(user, password=PASSWORD):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def headers_of(r):
    out = {}
    for k, v in r.headers:
        out.setdefault(k.lower(), []).append(v)
    return out


def check_security_headers(r, what):
    h = headers_of(r)
    for name, want in (("x-content-type-options", "nosniff"), ("x-frame-options", "DENY"),
                       ("referrer-policy", "no-referrer")):
        t.eq(h.get(name), [want], f"{what}: {name}")
    csp = h.get("content-security-policy") or []
    t.eq(len(csp), 1, f"{what}: one Content-Security-Policy")
    csp = csp[0] if csp else ""
    for d in CSP_NEEDS:
        t.ok(d in csp, f"{what}: CSP has {d}", csp)
    script = [p.strip() for p in csp.split(";") if p.strip().startswith("script-src")]
    t.ok(script and "unsafe" not in script[0], f"{what}: no unsafe script-src", csp)
    server = (h.get("server") or [""])[0]
    t.ok(not any(c.isdigit() for c in server), f"{what}: Server header without a version", server)


def end_open(api):
    r = api.current()
    if r.status == 200:
        api.end(r.json["id"])


async def ws_try(url, headers, **kw):
    """Open a console WebSocket; (subprotocol, close code, closed message) or ('refused', status)."""
    try:
        ws = await websockets.connect(url, subprotocols=["labvm-console.v1"], extra_headers=headers,
                                      open_timeout=10, ping_interval=None, close_timeout=2, **kw)
    except websockets.InvalidStatusCode as e:
        return ("refused", e.status_code, None)
    proto = ws.subprotocol
    closed = None
    try:
        while True:
            m = await asyncio.wait_for(ws.recv(), 10)
            if isinstance(m, str):
                j = json.loads(m)
                if j.get("type") == "closed":
                    closed = j
    except websockets.ConnectionClosed as e:
        code = e.rcvd.code if e.rcvd else 1006
    except asyncio.TimeoutError:
        code = None
        await ws.close()
    return (proto, code, closed)


async def ws_console(url, headers):
    """'open' once the bridge says the console is open, else (close code, reason)."""
    try:
        ws = await websockets.connect(url, subprotocols=["labvm-console.v1"], extra_headers=headers,
                                      open_timeout=10, ping_interval=None, close_timeout=2)
    except websockets.InvalidStatusCode as e:
        return ("refused", e.status_code)
    try:
        while True:
            m = await asyncio.wait_for(ws.recv(), 30)
            if isinstance(m, str) and json.loads(m).get("state") == "open":
                await ws.close()
                return "open"
    except websockets.ConnectionClosed as e:
        return (e.rcvd.code, e.rcvd.reason) if e.rcvd else (1006, "")
    except asyncio.TimeoutError:
        await ws.close()
        return "timeout"


for fe, base in FRONTENDS:
    if not base:
        t.test(lambda: None, name=f"{fe}: front end", skip=f"no {fe} front end in this stack")
        continue
    A, B = USERS[fe]
    api_a, api_b = Api(A, base=base), Api(B, base=base)
    anon = Api(None, base=base)

    @t.test(name=f"{fe}: no, wrong or unknown credentials: 401 from the front end, not the app")
    def unauthenticated(base=base, anon=anon):
        cases = [("GET", "/"), ("GET", "/index.html"), ("GET", "/app.js"), ("GET", "/api/lessons"),
                 ("GET", "/api/sessions/current"), ("POST", "/api/sessions"),
                 ("GET", "/api/healthz"), ("GET", "/console/" + str(uuid.uuid4()))]
        creds = [("no", None), ("a wrong password", basic("student1", "wrong")),
                 ("an unknown user", basic("nosuchuser", PASSWORD)),
                 ("malformed", "Basic !!!notbase64"), ("Bearer", "Bearer abc")]
        for i, (method, path) in enumerate(cases):
            # every case without credentials; the others on a few paths (lighttpd
            # delays each failed login by about a second)
            for kind, cred in creds if i % 3 == 0 else creds[:1]:
                h = {"Authorization": cred} if cred else {}
                # a header naming a user is no login either
                h.update({"X-Remote-User": "student1", "Remote-User": "student1"})
                r = anon.request(method, path, body={} if method == "POST" else None, headers=h)
                what = f"{method} {path} with {kind} credentials"
                if kind == "malformed":
                    t.ok(r.status in (400, 401), f"{what}: refused", r.status)   # lighttpd: 400
                else:
                    t.eq(r.status, 401, what)
                    www = r.header("WWW-Authenticate") or ""
                    t.ok(www.startswith("Basic") and 'realm="labvm"' in www, f"{what}: Basic challenge", www)
                t.ok('"unauthenticated"' not in r.body and "lessons" not in r.body,
                     f"{what}: answered by the front end", r.body[:200])
                check_security_headers(r, what)

    @t.test(name=f"{fe}: security headers on every answer (page, API, errors)")
    def security_headers(api=api_a):
        for method, path, want in [("GET", "/", 200), ("GET", "/app.js", 200),
                                   ("GET", "/vendor/xterm.js", 200), ("GET", "/api/lessons", 200),
                                   ("GET", "/api/sessions/current", 404), ("GET", "/nope.html", 404),
                                   ("GET", "/package.json", 403), ("PUT", "/api/sessions", 405)]:
            r = api.request(method, path)
            t.eq(r.status, want, f"{method} {path}")
            check_security_headers(r, f"{method} {path}")

    @t.test(name=f"{fe}: the page's static files with their types; nothing else from web/")
    def static_files(api=api_a):
        for path, ctype in [("/", "text/html"), ("/index.html", "text/html"),
                            ("/app.js", "text/javascript"), ("/i18n.js", "text/javascript"),
                            ("/text.js", "text/javascript"), ("/api.js", "text/javascript"),
                            ("/session.js", "text/javascript"), ("/console.js", "text/javascript"),
                            ("/lab.js", "text/javascript"), ("/guidepane.js", "text/javascript"),
                            ("/guide.js", "text/javascript"), ("/guide.css", "text/css"),
                            ("/app.css", "text/css"), ("/vendor/xterm.js", "javascript"),
                            ("/vendor/xterm.css", "text/css")]:
            r = api.request("GET", path)
            t.eq(r.status, 200, f"GET {path}")
            ct = r.header("Content-Type") or ""
            t.ok(ctype in ct, f"GET {path}: Content-Type", ct)
            if ctype in ("text/html", "text/javascript", "text/css") and path != "/vendor/xterm.js":
                t.ok("utf-8" in ct.lower(), f"GET {path}: charset utf-8", ct)
        page = api.request("GET", "/").body
        # xterm.js and its CSS come later, when a lab starts (app.js loads them,
        # and the lab's own scripts)
        for ref in ("/app.js", "/i18n.js", "/text.js", "/api.js", "/app.css"):
            t.ok(f'"{ref}"' in page, f"index.html loads {ref}")
        t.ok("<script>" not in page and not re.search(r"\son[a-z]+=", page), "no inline script in index.html")
        t.ok("cdn" not in page.lower() and "https://" not in page, "nothing loaded from elsewhere")
        for path in ("/package.json", "/package-lock.json", "/node_modules/@xterm/xterm/package.json",
                     "/node_modules/@xterm/xterm/lib/xterm.js", "/.gitignore", "/vendor/.x"):
            r = api.request("GET", path)
            t.ok(r.status in (403, 404), f"GET {path} refused", r.status)
            t.ok('"name"' not in r.body and "Terminal" not in r.body, f"GET {path}: no content", r.body[:100])

    @t.test(name=f"{fe}: identity is REMOTE_USER only: forged user headers change nothing")
    def forged_identity(api_a=api_a, api_b=api_b, A=A, B=B):
        end_open(api_a)
        end_open(api_b)
        try:
            r = api_a.start(LESSON)
            t.require(r.status == 201, f"A starts a lab: {r}")
            sid = r.json["id"]
            t.eq(db.one("SELECT user_name FROM sessions WHERE id = %s", sid), (A,),
                 "the session belongs to the Basic-auth user")
            as_a = {h: A for h in FORGED}
            # B claiming to be A
            r = api_b.request("GET", "/api/sessions/current", headers=as_a)
            t.eq((r.status, (r.json or {}).get("error")), (404, "no_session"), "B's current, claiming A")
            for method, path, body in [("GET", f"/api/sessions/{sid}", None),
                                       ("POST", f"/api/sessions/{sid}/grade", {}),
                                       ("POST", f"/api/sessions/{sid}/console-ticket", {}),
                                       ("DELETE", f"/api/sessions/{sid}", None)]:
                r = api_b.request(method, path, body=body, headers=as_a)
                t.eq(r.status, 404, f"B {method} {path} claiming A")
            r = api_a.get(sid)
            t.ok(r.status == 200 and r.json["state"] in ("starting", "ready"),
                 "A's session is untouched", r)
            # A claiming to be B still sees A's own session
            r = api_a.request("GET", "/api/sessions/current", headers={h: B for h in FORGED})
            t.eq((r.status, (r.json or {}).get("id")), (200, sid), "A's current, claiming B")
            # a start by B claiming A is B's own start (not a 409 with A's session)
            r = api_b.request("POST", "/api/sessions", body={"lesson": LESSON}, headers=as_a)
            t.eq(r.status, 201, "B's start, claiming A, starts B's own lab")
            if r.status == 201:
                t.eq(db.one("SELECT user_name FROM sessions WHERE id = %s", r.json["id"]), (B,),
                     "that session belongs to B")
        finally:
            end_open(api_a)
            end_open(api_b)

    @t.test(name=f"{fe}: the app's 405 with Allow, 415 and 404 pass through unchanged")
    def passthrough(api=api_a):
        for method, path, allow in [("PUT", "/api/sessions", "POST"), ("DELETE", "/api/lessons", "GET"),
                                    ("PATCH", "/api/sessions/current", "GET")]:
            r = api.request(method, path)
            t.eq(r.status, 405, f"{method} {path}")
            t.eq((r.json or {}).get("error"), "method_not_allowed", f"{method} {path}: the app's answer")
            t.ok(allow in (r.header("Allow") or ""), f"{method} {path}: Allow", r.header("Allow"))
        r = api.request("POST", "/api/sessions", raw=b'{"lesson":"x"}',
                        headers={"Content-Type": "text/plain"})
        t.eq((r.status, (r.json or {}).get("error")), (415, "unsupported_media_type"), "text/plain POST")
        r = api.request("POST", "/api/sessions", raw=b"lesson=x",
                        headers={"Content-Type": "application/x-www-form-urlencoded"})
        t.eq(r.status, 415, "a form POST (the CSRF case) is refused")
        r = api.request("GET", "/api/nope")
        t.eq((r.status, (r.json or {}).get("error")), (404, "not_found"), "unknown API route")
        t.eq(r.header("Cache-Control"), "no-store", "the app's Cache-Control on API answers")

    @t.test(name=f"{fe}: /console/ upgrades reach the bridge (bad ticket: 4401); no login: 401")
    def console_upgrade(base=base, A=A):
        url = base.replace("http://", "ws://") + f"/console/{uuid.uuid4()}?ticket=forged"
        loop = asyncio.new_event_loop()
        try:
            proto, code, closed = loop.run_until_complete(ws_try(url, {"Authorization": basic(A)}))
            t.eq(proto, "labvm-console.v1", "the bridge's subprotocol came back through the front end")
            t.eq(code, 4401, "closed by the bridge: bad ticket")
            t.ok(closed and closed.get("code") == 4401, "the bridge's closed message arrived", closed)
            r = loop.run_until_complete(ws_try(url, {"X-Remote-User": A}))
            t.eq(r[:2], ("refused", 401), "no login: the front end refuses the upgrade")
        finally:
            loop.close()

    @t.test(name=f"{fe}: a leaked console ticket of A's opens nothing for B, whatever Forwarded "
                 "header B adds; A's own opens whatever Forwarded A adds")
    def leaked_ticket(base=base, api_a=api_a, api_b=api_b, A=A, B=B):
        end_open(api_a)
        try:
            r = api_a.start("linux-basics")
            t.require(r.status == 201, f"A starts a lab: {r}")
            sid = r.json["id"]
            t.require(api_a.wait_state(sid, "ready", 120)["state"] == "ready", "ready")
            ws = base.replace("http://", "ws://")
            crafted = [f'for=x;remote_user={A};a="', f'remote_user="{A}"', f'remote_user={A}',
                       f'for=1.2.3.4;remote_user="{A}", for=127.0.0.1;remote_user="{A}"',
                       f'remote_user="{A}\\"', f'remote_user="{A}";remote_user="{A}"',
                       f'for=x;remote_user={A};a="\\"', None]
            loop = asyncio.new_event_loop()
            try:
                for h in crafted:
                    url = ws + api_a.ticket(sid).json["url"]      # A's ticket, leaked to B
                    hdr = {"Authorization": basic(B), **({"Forwarded": h} if h else {})}
                    got = loop.run_until_complete(ws_console(url, hdr))
                    t.eq(got, (4403, "ticket not for this user"), f"B with A's ticket, Forwarded {h}")
                own = f'for=x;remote_user={B};a="'
                url = ws + api_a.ticket(sid).json["url"]
                got = loop.run_until_complete(ws_console(url, {"Authorization": basic(A),
                                                               "Forwarded": own}))
                t.eq(got, "open", f"A with A's ticket, Forwarded {own}: A's console opens")
            finally:
                loop.close()
        finally:
            end_open(api_a)

    @t.test(name=f"{fe}: the bridge logs the address the front end saw (its own "
                 "X-Forwarded-For element), never a client's X-Forwarded-For or Forwarded")
    def peer_logged(base=base, A=A):
        # the browser connects from 127.0.0.2: what the front end saw and
        # appended; the front end itself reaches the bridge from 127.0.0.1
        log = os.path.join(ENV["LABVM_STATE"], "logs", "console.log")
        loop = asyncio.new_event_loop()
        try:
            for xff in ("6.6.6.6", "6.6.6.6, 7.7.7.7", None):
                sid = str(uuid.uuid4())
                url = base.replace("http://", "ws://") + f"/console/{sid}?ticket=forged"
                hdr = {"Authorization": basic(A), "Forwarded": "for=6.6.6.6"}
                if xff:
                    hdr["X-Forwarded-For"] = xff
                got = loop.run_until_complete(ws_try(url, hdr, local_addr=("127.0.0.2", 0)))
                t.eq(got[1], 4401, f"X-Forwarded-For {xff}: refused (a bad ticket)")

                def line(sid=sid):
                    with open(log, errors="replace") as f:
                        return next((x for x in f if sid in x and "refused" in x), None)
                got = wait_until(line, 20, 0.1, "the bridge's refusal line")
                t.ok(got and "(peer 127.0.0.2)" in got and "6.6.6.6" not in got
                     and "7.7.7.7" not in got,
                     f"X-Forwarded-For {xff}: the peer logged is the browser's address as the "
                     "front end saw it", got)
        finally:
            loop.close()

# nothing of ours is left in the cluster
@t.test(name="cleanup: no session of this suite left open, no VM left")
def cleanup():
    for fe, base in FRONTENDS:
        if base:
            for u in USERS[fe]:
                end_open(Api(u, base=base))
    users = [u for fe, _ in FRONTENDS for u in USERS[fe]]
    open_ = db.query("SELECT id FROM sessions WHERE user_name = ANY(%s) AND state IN ('starting','ready')",
                     users)
    t.eq(open_, [], "no open sessions")
    ids = [r[0] for r in db.query("SELECT id::text FROM sessions WHERE user_name = ANY(%s)", users)]
    left = wait_until(lambda: not [v for v in kube.lab_vms()
                                   if v["metadata"]["labels"].get("labvm.io/session-id") in ids] or None,
                      30, 0.2, "VMs of this suite deleted") if ids else True
    t.ok(left, "no VM of this suite is left")


t.done()
