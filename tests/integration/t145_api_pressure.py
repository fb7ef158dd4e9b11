#!/usr/bin/python3
# timeout: 420
"""The API server under pressure, as a real one behaves (tests/kubesim/CONFORMANCE.md,
"API server"): API Priority and Fairness rejects with 429 and Retry-After
(its text answer, or a TooManyRequests Status with details.retryAfterSeconds);
a watch ends at once or opens with an ERROR event; the projected service-account
token rotates and the old one stops working.

labvm retries a 429 within the start's deadline (two lock waits and seven
calls), honouring Retry-After, for the Secret and VM creates and the capacity
count, and never creates twice (a create whose answer was lost is found by
name); a storm past the deadline is 503 cluster_unavailable with nothing
left; the reaper's lists are retried the same way; the event stream's driver
backs off from watches that prove nothing (counted: the watch requests the
simulator saw, against a bound of one per second, which the old hot loop
exceeded a hundredfold); labvm.fcgi, labvm-console and labvm-reaper go on
across a token rotation."""
import asyncio
import os
import subprocess
import time

from fcgiclient import LabFcgi
from labclient import Kube
from labconsole import Console
from labtest import Api, Db, env, reset_world, secret_of, vm_of, wait_until
from sse import Stream, events_path
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
BIN = env("LABVM_BIN")


def lab_objects():
    vms = [v["metadata"]["name"] for v in kube.lab_vms()]
    secrets = [s["metadata"]["name"] for s in kube.list("secrets", "labvm.io/lab-session=true")]
    return vms, secrets


def rules():
    return kube.request("GET", "/_sim/faults").json["rules"]


def nothing_left(user, what):
    t.eq(db.one("SELECT count(*) FROM sessions WHERE user_name = %s AND state IN "
                "('starting', 'ready')", user), (0,), f"{what}: no active session row")
    try:
        wait_until(lambda: lab_objects() == ([], []), 20, what="no lab VM or Secret")
        t.ok(True, f"{what}: nothing left in the cluster")
    except TimeoutError:
        t.fail(f"{what}: left behind: {lab_objects()}")


def reaper():
    r = subprocess.run([os.path.join(BIN, "labvm-reaper")], env=dict(os.environ),
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


@t.test(name="a start survives 429s on the Secret and VM creates (APF's text and the Status "
             "form): 201, one VM, one Secret, each rejection retried")
def creates_retried():
    api = Api("student391")
    api.end_current()
    kube.fault(verb="create", resource="secrets", apf=True, retry_after=1, times=2)
    kube.fault(verb="create", resource="virtualmachines", code=429, retry_after=1, times=2)
    try:
        r = api.start("linux-basics")
        left = rules()
    finally:
        kube.clear_faults()
    t.eq(r.status, 201, "the start went through", r)
    t.eq(left, [], "every 429 was met (the rules are used up)")
    if r.status == 201:
        t.eq(lab_objects(), ([vm_of(r.json)], [secret_of(r.json)]), "exactly one VM and Secret")
        s = api.wait_state(r.json["id"], ("ready", "failed"), 90)
        t.eq(s["state"], "ready", "and it gets ready", s.get("error"))
        api.end(r.json["id"])
    nothing_left("student391", "after the end")


@t.test(name="a start survives 429s on the capacity count")
def count_retried():
    api = Api("student392")
    api.end_current()
    kube.fault(verb="list", resource="virtualmachines", apf=True, retry_after=1, times=3)
    try:
        r = api.start("linux-basics")
        left = rules()
    finally:
        kube.clear_faults()
    t.eq(r.status, 201, "admitted after the count was retried", r)
    t.eq(left, [], "the three rejections were met")
    if r.status == 201:
        api.end(r.json["id"])
    nothing_left("student392", "after the end")


@t.test(name="a create whose answer was lost after it took effect is not made twice: found "
             "by name, the start goes on")
def never_twice():
    api = Api("student393")
    api.end_current()
    kube.fault(verb="create", resource="virtualmachines", code=429, after=True, times=1)
    kube.fault(verb="create", resource="secrets", apf=True, after=True, times=1)
    try:
        r = api.start("linux-basics")
    finally:
        kube.clear_faults()
    t.eq(r.status, 201, "the start went through (a second create would be 409 AlreadyExists)",
         r)
    if r.status == 201:
        t.eq(lab_objects(), ([vm_of(r.json)], [secret_of(r.json)]), "one VM, one Secret")
        owners = kube.get("secrets", secret_of(r.json)).json["metadata"].get("ownerReferences")
        t.eq([o["name"] for o in owners or []], [vm_of(r.json)], "the Secret owned by that VM")
        api.end(r.json["id"])
    nothing_left("student393", "after the end")


@t.test(name="a 429 storm past the start's deadline: 503 cluster_unavailable, bounded "
             "retries, nothing left behind")
def storm():
    # a labvm.fcgi of this suite's own, with a short deadline: 2 x 500 ms + 7 x 1 s
    with LabFcgi({"kube_timeout_ms": "1000", "capacity_lock_timeout_ms": "500"}) as f:
        r = kube.fault(verb="create", resource="virtualmachines", apf=True, retry_after=1)
        rid = r.json["id"]
        try:
            a = f.request("POST", "/api/sessions", "student394", {"lesson": "linux-basics"})
            hits = [x["hits"] for x in rules() if x["id"] == rid]
        finally:
            kube.clear_faults()
    t.eq((a.status, (a.json or {}).get("error")), (503, "cluster_unavailable"), "refused", a)
    t.ok(hits and 2 <= hits[0] <= 9, "retried, at most 8 times (KUBE_RETRY_MAX)", hits)
    nothing_left("student394", "storm")


@t.test(name="the reaper's lists survive 429s: its run completes")
def reaper_lists():
    rc, out = reaper()
    t.require(rc == 0 and "status=ok" in out, f"a quiet reaper run first: {out[-500:]}")
    kube.fault(verb="list", resource="secrets", apf=True, retry_after=1, times=2)
    kube.fault(verb="list", resource="virtualmachines", code=429, retry_after=1, times=1)
    try:
        rc, out = reaper()
        left = rules()
    finally:
        kube.clear_faults()
    t.eq(rc, 0, "exit 0", out[-800:])
    t.ok("status=ok" in out and "listing" not in out, "status=ok, no list failed", out[-800:])
    t.eq(left, [], "every rejection was met")


def watch_storm(user, how):
    """Start a lab while every VMI watch ends at once (how=end) or opens with
    an ERROR event (error), with a stream open on it, the cluster slowed so
    the VMI takes seconds to run: (watches seen, seconds the stream was open,
    final state)."""
    api = Api(user)
    api.end_current()
    kube.request("POST", "/_sim/profile", {"time_scale": 12})
    rid = kube.fault(verb="watch", resource="virtualmachineinstances", watch=how).json["id"]
    try:
        r = api.start("linux-basics")
        t.require(r.status == 201, f"start: {r}")
        t0 = time.monotonic()
        st = Stream(events_path(r.json["id"]), user, timeout=60)
        last = None
        while time.monotonic() - t0 < 40:
            e = st.next()
            if e is None:
                break
            last = e.json["state"]
        took = time.monotonic() - t0
        st.close()
        hits = [x["hits"] for x in rules() if x["id"] == rid]
    finally:
        kube.clear_faults()
        kube.request("POST", "/_sim/profile", {"time_scale": 1})
    api.end(r.json["id"])
    return (hits or [0])[0], took, last


for how in ("end", "error"):
    @t.test(name=f"watches that {'end at once' if how == 'end' else 'open with an ERROR event'}:"
                 " the stream's driver backs off (at most one watch a second)")
    def backoff(how=how):
        n, took, last = watch_storm("student395", how)
        t.eq(last, "ready", "the start still gets ready (the GET of every round sees it)")
        t.ok(n >= 1, "the fault was met", n)
        t.ok(n <= 10 + took, f"{n} watches in {took:.1f} s: within 10 + 1/s "
             "(a hot loop makes hundreds a second)", n)
        t.diag(f"{how}: {n} watches in {took:.1f} s")


@t.test(name="the backend's token rotates mid-session and the old one is refused: status, "
             "grading, a new console and the reaper go on; the open console too")
def token_rotation():
    pod_api, vm_api = Api("student396"), Api("student397")
    for a in (pod_api, vm_api):
        a.end_current()
    p = pod_api.wait_state(pod_api.start("k8s-pod-intro").json["id"], ("ready", "failed"), 90)
    v = vm_api.wait_state(vm_api.start("linux-basics").json["id"], ("ready", "failed"), 90)
    t.require(p["state"] == "ready" and v["state"] == "ready",
              f"both labs ready: {p.get('error')} {v.get('error')}")
    base = env("LABVM_URL")
    loop = asyncio.new_event_loop()
    run = loop.run_until_complete
    old_console = run(Console.open(base, vm_api.ticket(v["id"]).json["url"], "student397"))
    t.require(run(old_console.opened(20)), "a console open before the rotation")
    with open(env("LABVM_KUBE_BACKEND_TOKEN_FILE")) as f:
        old = f.read().strip()
    r = kube.request("POST", "/_sim/tokens/rotate", {"old_valid_s": 1})
    t.eq(r.status, 200, "rotated", r)
    probe = Kube(token=old)
    wait_until(lambda: probe.request("GET", probe.path("secrets", probe.ns)).status == 401, 15,
               what="the old token refused")
    t.ok(True, "the old token is refused now (401)")
    s = vm_api.get(v["id"])
    t.eq((s.status, s.json.get("state"), s.json.get("error")), (200, "ready", None),
         "status GET: still ready", s)
    g = pod_api.grade(p["id"])
    t.eq((g.status, [x.get("exit_code") for x in (g.json or {}).get("steps", [])]),
         (200, [1, 2]), "grading by exec works with the new token", g)
    c = run(Console.open(base, vm_api.ticket(v["id"]).json["url"], "student397"))
    ok = run(c.opened(20))
    t.ok(ok, "a new console opens", c.ctl)
    if ok:
        run(c.send(b"echo rot''ated-new\r"))
        t.ok(run(c.until(lambda x: b"rotated-new" in x.out, 15)), "and relays")
        run(c.close())
    pt = run(Console.open(base, pod_api.ticket(p["id"]).json["url"], "student396"))
    t.ok(run(pt.opened(20)), "a new Pod terminal opens (exec through labvm-console)", pt.ctl)
    run(pt.close())
    rc, out = reaper()
    t.ok(rc == 0 and "status=ok" in out, "the reaper runs with the new token", out[-500:])
    # the console opened before: authenticated once, at its handshake
    alive = old_console.code is None
    if alive:
        run(old_console.send(b"echo rot''ated-old\r"))
        alive = run(old_console.until(lambda x: b"rotated-old" in x.out, 10))
    t.diag(f"the console opened before the rotation {'still relays' if alive else 'ended'}")
    run(old_console.close())
    loop.close()
    pod_api.end(p["id"])
    vm_api.end(v["id"])


t.done()
