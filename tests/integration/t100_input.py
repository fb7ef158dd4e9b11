#!/usr/bin/python3
"""Bad input gets a clear error and loses nothing: every rejection of the
API table, through each front end, plus the app's own 401 without a user
(straight to the FastCGI socket, as no front end lets that through)."""
import json
import os
import subprocess

from labtest import Api, Db, Kube, env, frontends, reset_world
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)


def err(r, status, code, what):
    t.eq(r.status, status, f"{what}: status")
    body = r.json or {}
    t.eq(body.get("error"), code, f"{what}: error code")
    t.ok(isinstance(body.get("message"), str) and body.get("message"), f"{what}: a message", r)
    t.ok((r.header("Content-Type") or "").startswith("application/json"), f"{what}: JSON")


for fe, url in frontends():
    api = Api("student111", base=url)

    @t.test(name=f"{fe}: malformed JSON, wrong shapes and missing fields are 400")
    def bad_json():
        for raw in (b"{", b"not json", b"[1,2", b'{"lesson":'):
            r = api.request("POST", "/api/sessions", raw=raw,
                            headers={"Content-Type": "application/json"})
            err(r, 400, "bad_request", f"body {raw!r}")
        for body in ({}, {"lesson": 5}, {"lesson": ""}, ["linux-basics"], "linux-basics",
                     {"lessons": "linux-basics"}):
            err(api.request("POST", "/api/sessions", body), 400, "bad_request", f"body {body!r}")

    @t.test(name=f"{fe}: a body that is not application/json is 415 (the CSRF guard)")
    def wrong_type():
        for ct in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x",
                   "application/jsonp"):
            r = api.request("POST", "/api/sessions", raw=b'{"lesson":"linux-basics"}',
                            headers={"Content-Type": ct})
            err(r, 415, "unsupported_media_type", ct)
        r = api.request("POST", "/api/sessions", raw=b'{"lesson":"linux-basics"}')
        err(r, 415, "unsupported_media_type", "no Content-Type")
        t.eq(api.current().status, 404, "nothing was started")

    @t.test(name=f"{fe}: a body over 64 KiB is 413")
    def too_large():
        big = json.dumps({"lesson": "linux-basics", "pad": "x" * (64 * 1024)}).encode()
        r = api.request("POST", "/api/sessions", raw=big,
                        headers={"Content-Type": "application/json"})
        err(r, 413, "too_large", "65 KiB body")
        ok = json.dumps({"lesson": "nope", "pad": "x" * (60 * 1024)}).encode()
        r = api.request("POST", "/api/sessions", raw=ok,
                        headers={"Content-Type": "application/json"})
        err(r, 404, "unknown_lesson", "60 KiB body is read")

    @t.test(name=f"{fe}: unknown lesson 404, unknown route 404, wrong method 405")
    def routes():
        err(api.start("no-such-lesson"), 404, "unknown_lesson", "unknown lesson")
        err(api.request("GET", "/api/nope"), 404, "not_found", "unknown route")
        err(api.request("GET", "/api/sessions/x/y/z"), 404, "not_found", "deep path")
        r = api.request("PUT", "/api/sessions", {"lesson": "linux-basics"})
        err(r, 405, "method_not_allowed", "PUT /api/sessions")
        t.eq(r.header("Allow"), "POST", "Allow header")
        r = api.request("POST", "/api/lessons", {})
        err(r, 405, "method_not_allowed", "POST /api/lessons")
        t.eq(r.header("Allow"), "GET", "Allow header")
        r = api.request("PATCH", "/api/sessions/00000000-0000-4000-8000-000000000000", {})
        err(r, 405, "method_not_allowed", "PATCH a session")
        t.ok(set((r.header("Allow") or "").replace(" ", "").split(",")) == {"GET", "DELETE"},
             "Allow lists GET and DELETE", r.header("Allow"))
        t.eq(api.current().status, 404, "nothing was started by any of these")

    @t.test(name=f"{fe}: GET /api/lessons lists the lessons")
    def lessons():
        r = api.lessons()
        t.eq(r.status, 200, "status")
        ls = {l["id"]: l for l in r.json["lessons"]}
        t.ok({"linux-basics", "debian-golden", "broken-setup"} <= set(ls), "demo lessons", ls.keys())
        t.eq({k: ls["linux-basics"][k] for k in ("runtime", "minutes")},
             {"runtime": "vm", "minutes": 60}, "fields")
        t.eq(ls["k8s-pod-intro"]["runtime"], "pod", "pod runtime listed")
        ja = ls["linux-basics"].get("i18n", {}).get("ja", {})
        t.ok(ja.get("title") and ja.get("description") and ja["title"] != ls["linux-basics"]["title"],
             "a Japanese title and description", ja)
        t.ok("i18n" not in ls["test-short"], "no translation block when a lesson has none")

    @t.test(name=f"{fe}: GET /api/healthz reports database and cluster")
    def health():
        r = api.request("GET", "/api/healthz")
        t.eq((r.status, r.json), (200, {"db": "ok", "cluster": "ok"}), "healthy")


def fcgi(method, uri, user=None, body=b"", ctype="application/json"):
    sock = os.path.join(env("LABVM_STATE"), "run", "labvm-fcgi-apache.sock")
    e = {"REQUEST_METHOD": method, "REQUEST_URI": uri, "SCRIPT_NAME": uri,
         "CONTENT_LENGTH": str(len(body)), "CONTENT_TYPE": ctype, "SERVER_PROTOCOL": "HTTP/1.1",
         "GATEWAY_INTERFACE": "CGI/1.1", "SERVER_NAME": "localhost", "SERVER_PORT": "80"}
    if user is not None:
        e["REMOTE_USER"] = user
    out = subprocess.run(["cgi-fcgi", "-bind", "-connect", sock], input=body, env=e,
                         capture_output=True, timeout=20).stdout.decode()
    head, _, payload = out.partition("\r\n\r\n")
    status = int(head.split("\r\n")[0].split()[1]) if head.startswith("Status:") else 200
    return status, json.loads(payload) if payload.strip() else None


@t.test(name="labvm.fcgi itself: no REMOTE_USER is 401 unauthenticated; empty user too")
def no_user():
    for user in (None, ""):
        st, body = fcgi("GET", "/api/sessions/current", user)
        t.eq(st, 401, f"status for REMOTE_USER={user!r}")
        t.eq((body or {}).get("error"), "unauthenticated", "error code")
    st, body = fcgi("POST", "/api/sessions", None, b'{"lesson":"linux-basics"}')
    t.eq(st, 401, "no start without a user")
    st, body = fcgi("GET", "/api/sessions/current", "student112")
    t.eq((st, body.get("error")), (404, "no_session"), "with a user it answers")


@t.test(name="labvm.fcgi itself: a short body (Content-Length larger than sent) is 400")
def short_body():
    sock = os.path.join(env("LABVM_STATE"), "run", "labvm-fcgi-apache.sock")
    e = {"REQUEST_METHOD": "POST", "REQUEST_URI": "/api/sessions", "CONTENT_LENGTH": "100",
         "CONTENT_TYPE": "application/json", "REMOTE_USER": "student113"}
    out = subprocess.run(["cgi-fcgi", "-bind", "-connect", sock], input=b'{"lesson":',
                         env=e, capture_output=True, timeout=20).stdout.decode()
    t.ok(out.startswith("Status: 400"), "400 for a truncated body", out[:200])


@t.test(name="nothing was started by any bad request")
def nothing_left():
    t.eq(db.one("SELECT count(*) FROM sessions WHERE user_name LIKE 'student11%%' "
                "AND state IN ('starting','ready')"), (0,), "no active session")
    t.eq(len(kube.lab_vms()), 0, "no lab VM in the cluster")


t.done()
