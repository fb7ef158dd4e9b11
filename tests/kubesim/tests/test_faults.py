#!/usr/bin/python3
"""kubesim: fault injection and the /_sim endpoints (timeout: 90)."""
import http.client
import ssl
import socket
import threading
import time

from simlib import SECRETS, VMS, Sim, secret, vm
from tap import T

t = T()
sim = Sim(guest="none")
A, B = sim.admin, sim.backend


def fault(**kw):
    r = A.post("/_sim/faults", kw)
    t.eq(r.status, 201, f"fault accepted {kw}")
    return r.json


@t.test
def status_code_n_times():
    fault(verb="create", resource="virtualmachines", code=503, times=2)
    codes = [B.post(VMS, vm(f"f-{i}", run_strategy="Halted")).status for i in range(3)]
    t.eq(codes, [503, 503, 201], "two failures then success")
    r = B.post(VMS, vm("f-x", run_strategy="Halted"))
    t.eq(r.status, 201, "rule used up")
    fault(verb="get", resource="secrets", code=500, times=1)
    r = B.get(SECRETS + "/whatever")
    t.eq(r.status, 500, "500")
    t.eq((r.json or {}).get("reason"), "InternalError", "500 is a Status with InternalError")
    fault(verb="*", resource="*", code=429, times=1, retry_after=2)
    r = B.get(SECRETS)
    t.eq(r.status, 429, "429")
    t.eq(r.headers.get("retry-after"), "2", "Retry-After")
    t.eq(B.get(SECRETS).status, 200, "then normal")


@t.test
def only_matching_requests():
    fault(verb="list", resource="virtualmachines", code=503, times=1, namespace="labs")
    t.eq(B.get(SECRETS).status, 200, "other resource unaffected")
    t.eq(B.get(VMS + "/f-2").status, 200, "other verb unaffected")
    t.eq(B.get(VMS).status, 503, "matching request fails")
    fault(verb="delete", resource="secrets", name="only-this", code=409, times=1)
    B.post(SECRETS, secret("not-this", "x"))
    t.eq(B.delete(SECRETS + "/not-this").status, 200, "name mismatch unaffected")
    A.delete("/_sim/faults")


@t.test
def delay():
    pvc = "/api/v1/namespaces/labs/persistentvolumeclaims/golden-debian-12"
    fault(verb="get", resource="persistentvolumeclaims", delay_ms=8000, times=1)
    got = {}

    def slow():
        got["r"] = sim.client(sim.backend_token).get(pvc)
    th = threading.Thread(target=slow, daemon=True)
    th.start()
    # the rule fired (used up, so removed) once the simulator matched the request
    deadline = time.monotonic() + 60
    while A.get("/_sim/faults").json["rules"] and time.monotonic() < deadline:
        time.sleep(0.02)
    t.eq(A.get("/_sim/faults").json["rules"], [], "the delayed request was matched")
    # order, not time: a request made after it is answered while it still waits
    t.eq(B.get(pvc).status, 200, "a later request is answered at once")
    t.ok(th.is_alive() and "r" not in got, "... while the delayed one is still held")
    th.join(120)
    t.eq(got.get("r") and got["r"].status, 200, "delay only: the request then succeeds")


@t.test
def drop_connection():
    fault(verb="list", resource="secrets", drop=True, times=1)
    ctx = ssl.create_default_context(cafile=sim.ca)
    c = http.client.HTTPSConnection("127.0.0.1", sim.port, context=ctx, timeout=5)
    c.request("GET", SECRETS, headers={"Authorization": "Bearer " + sim.backend_token})
    try:
        c.getresponse().read()
        dropped = False
    except (http.client.RemoteDisconnected, ConnectionResetError, ssl.SSLError, OSError):
        dropped = True
    c.close()
    t.ok(dropped, "connection dropped without an answer")
    t.eq(B.get(SECRETS).status, 200, "next request fine")


@t.test
def probability():
    fault(verb="get", resource="nodes", code=503, probability=0.5)
    codes = [A.get("/api/v1/nodes/node-1").status for _ in range(200)]
    n = codes.count(503)
    t.ok(50 < n < 150, f"about half fail ({n}/200)")
    A.delete("/_sim/faults")
    t.eq(A.get("/api/v1/nodes/node-1").status, 200, "cleared")


@t.test
def list_and_clear_and_validation():
    fault(verb="watch", code=500)
    r = A.get("/_sim/faults")
    t.eq(len(r.json["rules"]), 1, "listed")
    r = A.delete("/_sim/faults")
    t.eq(r.json, {"cleared": 1}, "cleared")
    t.eq(A.post("/_sim/faults", {"verb": "get"}).status, 400, "a rule needs an effect")
    t.eq(A.post("/_sim/faults", {"verb": "frob", "code": 500}).status, 400, "bad verb")
    t.eq(B.post("/_sim/faults", {"code": 500}).status, 403, "admin only")


@t.test
def faults_do_not_touch_sim_endpoints():
    fault(verb="*", resource="*", code=503)
    t.eq(A.get("/_sim/state").status, 200, "/_sim unaffected")
    t.eq(B.get(SECRETS).status, 503, "API affected")
    A.delete("/_sim/faults")


@t.test
def down_and_up():
    t.eq(A.post("/_sim/down").status, 200, "down")
    ctx = ssl.create_default_context(cafile=sim.ca)
    c = http.client.HTTPSConnection("127.0.0.1", sim.port, context=ctx, timeout=5)
    try:
        c.request("GET", "/version", headers={"Authorization": "Bearer " + sim.admin_token})
        c.getresponse().read()
        answered = True
    except (http.client.RemoteDisconnected, ConnectionResetError, ssl.SSLError, OSError):
        answered = False
    c.close()
    t.ok(not answered, "every API request is dropped while down")
    t.eq(A.get("/_sim/state").status, 200, "/_sim still answers")
    t.eq(A.post("/_sim/up").status, 200, "up")
    t.eq(B.get(SECRETS).status, 200, "API back")


@t.test
def watch_dropped_when_down():
    # the watch's own timeout is an hour and the client waits up to 120 s for
    # data: only the API going down ends the stream (EOF or a reset, never a
    # read timeout)
    w = A.watch(SECRETS + "?watch=1&timeoutSeconds=3600", timeout=120)
    A.post("/_sim/down")
    end = None
    try:
        while True:
            chunk = w.resp.read1(65536)
            if not chunk:
                end = "eof"
                break
    except (socket.timeout, TimeoutError):
        end = None
    except Exception as e:  # noqa: BLE001 - a broken stream is what we want
        end = repr(e)
    A.post("/_sim/up")
    t.ok(end is not None, "open watches end when the API goes down (not a read timeout)", end)


@t.test
def state_profile_stats_tokens():
    r = A.get("/_sim/state")
    t.ok("virtualmachines" in r.json["objects"] and r.json["resourceVersion"], "state dump")
    r = A.post("/_sim/profile", {"profile": "realistic", "time_scale": 0.1})
    t.eq((r.json["profile"], r.json["time_scale"]), ("realistic", 0.1), "profile switched")
    t.eq(A.post("/_sim/profile", {"profile": "nope"}).status, 400, "unknown profile")
    A.post("/_sim/profile", {"profile": "fast", "time_scale": 1})
    r = A.get("/_sim/stats")
    t.ok(r.json["rss_bytes"] > 0 and r.json["requests"] > 0, "stats")
    tok = sim.token(user="bob", groups=["devs"])
    t.eq(sim.client(tok).get("/version").status, 200, "minted token authenticates")



@t.test
def apf_rejection_and_status_429():
    """APF (k8s.io/apiserver priority-and-fairness.go -> tooManyRequests): 429,
    Retry-After, the PF UID headers, a text/plain body; the Status form
    (apimachinery NewTooManyRequests) carries details.retryAfterSeconds."""
    fault(verb="create", resource="secrets", apf=True, retry_after=3, times=1)
    r = B.post(SECRETS, secret("apf-1", "x"))
    t.eq(r.status, 429, "APF: 429")
    t.eq(r.headers.get("retry-after"), "3", "Retry-After")
    t.ok(r.headers.get("x-kubernetes-pf-flowschema-uid") and
         r.headers.get("x-kubernetes-pf-prioritylevel-uid"), "the flow schema and priority level")
    t.eq((r.headers.get("content-type"), r.raw), ("text/plain; charset=utf-8",
         b"Too many requests, please try again later.\n"), "http.Error's text, not a Status")
    t.eq(B.get(SECRETS + "/apf-1").status, 404, "the rejected create did not happen")
    fault(verb="list", resource="virtualmachines", code=429, retry_after=2, times=1)
    r = B.get(VMS)
    t.eq((r.status, r.headers.get("retry-after"), (r.json or {}).get("reason"),
          ((r.json or {}).get("details") or {}).get("retryAfterSeconds")),
         (429, "2", "TooManyRequests", 2), "Status form: details.retryAfterSeconds and the header")
    t.eq(A.post("/_sim/faults", {"verb": "get", "apf": True, "code": 500}).status, 400,
         "apf is 429 only")


@t.test
def after_the_request_took_effect():
    fault(verb="create", resource="secrets", code=429, after=True, times=1)
    r = B.post(SECRETS, secret("after-1", "x"))
    t.eq(r.status, 429, "the answer is the fault's")
    t.eq(B.get(SECRETS + "/after-1").status, 200, "but the Secret was created")
    t.eq(B.post(SECRETS, secret("after-1", "x")).status, 409, "a second create: AlreadyExists")
    t.eq(A.post("/_sim/faults", {"verb": "watch", "code": 500, "after": True}).status, 400,
         "no after on a watch")


def watch_lines(path):
    r = A.get(path)
    return r.status, [ln for ln in r.raw.split(b"\n") if ln]


@t.test
def watch_ends_at_once_or_sends_error():
    import json
    path = "/api/v1/namespaces/labs/secrets?watch=true&timeoutSeconds=30"
    B.post(SECRETS, secret("w-1", "x"))
    fault(verb="watch", resource="secrets", watch="end", times=2)
    t0 = time.monotonic()
    st, lines = watch_lines(path)
    t.eq((st, lines), (200, []), "end: 200 and no event, not even the existing objects")
    st, lines = watch_lines(path)
    t.ok(time.monotonic() - t0 < 20, "ended long before timeoutSeconds")
    fault(verb="watch", resource="secrets", watch="error", times=1)
    st, lines = watch_lines(path)
    t.eq(st, 200, "error: 200")
    ev = [json.loads(ln) for ln in lines]
    t.eq([e["type"] for e in ev], ["ERROR"], "one ERROR event first and only")
    t.eq((ev[0]["object"]["kind"], ev[0]["object"]["code"], ev[0]["object"]["reason"]),
         ("Status", 500, "InternalError"), "an InternalError Status")
    rules = A.get("/_sim/faults").json["rules"]
    t.eq(rules, [], "both rules used up (times)")
    r = fault(verb="watch", resource="secrets", watch="end")
    for _ in range(3):
        watch_lines(path)
    hits = [x["hits"] for x in A.get("/_sim/faults").json["rules"] if x["id"] == r["id"]]
    t.eq(hits, [3], "an unlimited rule counts the watches it ended (hits)")
    A.delete("/_sim/faults")
    t.eq(A.post("/_sim/faults", {"verb": "list", "watch": "end"}).status, 400,
         "watch faults need verb watch")


sim.stop()
t.done()
