#!/usr/bin/python3
"""The warm pool (issue #18): a press claims a ready pool VM atomically and is
ready at once; pool VMs count against capacity and yield their seats to
students; stale and failing pool VMs are replaced; the reaper leaves healthy
pool VMs alone and reclaims the others, of its own environment only.

timeout: 900"""
import json
import os
import re
import subprocess
import threading
import time
import uuid

import utf8text
from fcgiclient import LabFcgi
from labtest import PREFIX, Api, Db, Kube, env, frontends, reset_world, users, wait_until, reaper_argv
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
ENV = env("LABVM_ENVIRONMENT")
BIN = env("LABVM_BIN")
LESSONS = os.path.join(env("LABVM_STATE"), "lessons")
CAPACITY = 8
OP = Api("operator")


def run(exe, *args, conf=None):
    e = dict(os.environ, LABVM_CONF=conf or env("LABVM_CONF"))
    argv = reaper_argv(*args) if exe == "labvm-reaper" else [os.path.join(BIN, exe), *args]
    r = subprocess.run(argv, env=e, capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def tick():
    rc, out = run("labvm-pool", "tick")
    assert rc == 0, out
    return out


def count(out, key):
    m = re.search(rf"\b{key}=(\d+)", out)
    return int(m.group(1)) if m else None


def rows(lesson=None, states=("starting", "ready")):
    q = ("SELECT vm_name, state, lesson_hash, delete_reason FROM pool_vms "
         "WHERE environment = %s AND state = ANY(%s)")
    args = [ENV, list(states)]
    if lesson:
        q += " AND lesson = %s"
        args.append(lesson)
    return db.query(q + " ORDER BY created_at", *args)


def wait_ready(lesson, n, timeout=90):
    """Tick until the lesson has n ready pool VMs."""
    def check():
        tick()
        return len([r for r in rows(lesson) if r[1] == "ready"]) >= n
    wait_until(check, timeout=timeout, interval=0.3, what=f"{n} ready pool VMs of {lesson}")


def warm(lesson, n, **kw):
    body = {"lesson": lesson, "count": n, **kw}
    r = OP.request("POST", "/api/operator/pool", body)
    assert r.status == 201, r
    return r.json["id"]


def cold_reset():
    reset_world(kube, db)


def parallel(calls):
    out = [None] * len(calls)
    gate = threading.Barrier(len(calls))

    def go(i, fn):
        gate.wait()
        out[i] = fn()
    ths = [threading.Thread(target=go, args=(i, fn)) for i, fn in enumerate(calls)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    return out


class Watch:
    """Samples the cluster's lab VMs (every environment, terminating ones
    included) the whole time, for the capacity invariant."""

    def __init__(self):
        self.max = 0
        self.stop = False
        self.k = Kube()
        self.th = threading.Thread(target=self.loop)
        self.th.start()

    def loop(self):
        while not self.stop:
            self.max = max(self.max, len(self.k.lab_vms()))
            time.sleep(0.02)

    def done(self):
        self.stop = True
        self.th.join()
        return self.max


@t.test(name="operators only: 403 for a student, 400/404 for bad requests, 201 and the pool")
def operator_api():
    st = Api("student171")
    t.eq(st.request("GET", "/api/operator/pool").status, 403, "student GET")
    t.eq(st.request("POST", "/api/operator/pool", {"lesson": "linux-basics", "count": 1}).status,
         403, "student POST")
    t.eq(OP.request("POST", "/api/operator/pool", {"lesson": "linux-basics"}).status, 400,
         "no count")
    t.eq(OP.request("POST", "/api/operator/pool", {"lesson": "nope", "count": 1}).status, 404,
         "unknown lesson")
    r = OP.request("POST", "/api/operator/pool",
                   {"lesson": "linux-basics", "count": 1, "from": "tomorrow-ish"})
    t.eq(r.status, 400, "a time PostgreSQL cannot read", r.json)
    r = OP.request("POST", "/api/operator/pool",
                   {"lesson": "linux-basics", "count": 1, "from": "+1 hour", "until": "+2 hours"})
    t.eq(r.status, 201, "a class tomorrow: 201", r.json)
    g = OP.request("GET", "/api/operator/pool")
    t.eq(g.status, 200, "GET")
    w = [x for x in g.json["warm"] if x["id"] == r.json["id"]]
    t.ok(w and w[0]["active"] is False, "listed, not active yet", g.json)
    t.eq(rows("linux-basics"), [], "a request from the future makes no VM now")
    t.eq(OP.request("DELETE", f"/api/operator/pool/{r.json['id']}").status, 200, "cancel")
    t.eq(OP.request("DELETE", f"/api/operator/pool/{r.json['id']}").status, 404, "cancel again")


@t.test(name="claim race: 8 presses across both front ends, one ready pool VM: exactly one gets it")
def claim_race():
    cold_reset()
    wid = warm("linux-basics", 1)
    wait_ready("linux-basics", 1)
    pool_vm = rows("linux-basics")[0][0]
    fes = [url for _, url in frontends()]
    us = users(172, CAPACITY)  # the pool VM's seat and 7 cold starts: every press fits
    apis = [Api(u, base=fes[i % len(fes)]) for i, u in enumerate(us)]
    OP.request("DELETE", f"/api/operator/pool/{wid}")  # no replacement competes
    rs = parallel([lambda a=a: a.start("linux-basics") for a in apis])
    t.eq([r.status for r in rs], [201] * CAPACITY, "every press started a lab")
    hits = [r.json for r in rs if r.json.get("pool")]
    t.eq(len(hits), 1, "exactly one press got the pool VM", [r.json.get("pool") for r in rs])
    h = hits[0] if hits else {}
    t.eq((h.get("state"), h.get("stage")), ("ready", "ready"), "ready at the press")
    t.eq(h.get("vms", [{}])[0].get("name"), pool_vm, "the pool VM is the session's VM")
    t.ok(h.get("disk", {}).get("source") == "containerdisk", "disk recorded", h.get("disk"))
    t.ok(all(r.json["state"] == "starting" and not r.json["pool"] for r in rs
             if r.json is not h), "the others are cold starts")
    row = db.one("SELECT state, session_id::text FROM pool_vms WHERE vm_name = %s", pool_vm)
    t.eq(row, ("claimed", h.get("id")), "the row names the one session")
    labels = kube.get("virtualmachines", pool_vm).json["metadata"]["labels"]
    t.eq(labels.get(f"{PREFIX}/session-id"), h.get("id"), "the VM is relabelled")
    t.ok(f"{PREFIX}/pool" not in labels and f"{PREFIX}/lesson-hash" not in labels,
         "no pool marker left on the VM", labels)
    for a, r in zip(apis, rs):
        a.end(r.json["id"])
    wait_until(lambda: kube.get("virtualmachines", pool_vm).status == 404, timeout=30,
               what="the claimed VM deleted at the end")
    t.eq(db.one("SELECT state FROM pool_vms WHERE vm_name = %s", pool_vm), ("claimed",),
         "never returned to the pool")


@t.test(name="capacity: claims, refills and cold starts at once never exceed the capacity")
def capacity_mixed():
    cold_reset()
    warm("linux-basics", 4)
    wait_ready("linux-basics", 4)
    watch = Watch()
    us = users(182, 12)
    apis = [Api(u) for u in us]
    lessons = ["linux-basics"] * 6 + ["test-slow-setup"] * 6
    rs = parallel([lambda a=a, l=l: a.start(l) for a, l in zip(apis, lessons)])
    time.sleep(1.5)  # the refills after the claims
    tick()
    peak = watch.done()
    codes = [r.status for r in rs]
    hits = [r for r in rs if r.status == 201 and r.json.get("pool")]
    t.eq(len(hits), 4, "the four pool VMs were claimed", codes)
    t.ok(peak <= CAPACITY, f"never more than {CAPACITY} lab VMs (peak {peak})")
    t.ok(codes.count(201) <= CAPACITY and codes.count(201) + codes.count(503) == 12,
         "201 or capacity_full", codes)
    t.ok(all(r.json.get("error") == "capacity_full" for r in rs if r.status == 503),
         "refusals are capacity_full")
    active = db.one("SELECT count(*) FROM sessions WHERE environment = %s "
                    "AND state IN ('starting', 'ready')", ENV)[0]
    t.ok(active + len(rows()) <= CAPACITY, "sessions plus idle pool VMs fit the capacity",
         (active, rows()))
    names = {v["metadata"]["name"] for v in kube.lab_vms()}
    mine = db.query("SELECT v.vm_name FROM sessions s JOIN session_vms v ON v.session_id = s.id "
                    "WHERE s.environment = %s AND s.state IN ('starting', 'ready')", ENV)
    t.eq([m[0] for m in mine if m[0] not in names], [],
         "every student's VM is still there (the pool's upkeep never deletes a claimed VM)")
    for a, r in zip(apis, rs):
        if r.status == 201:
            a.end(r.json["id"])


@t.test(name="seats yield: every seat held by lesson A's pool, a cold start of B is admitted")
def pool_yields():
    cold_reset()
    warm("linux-basics", CAPACITY)
    wait_ready("linux-basics", CAPACITY)
    t.eq(len(kube.lab_vms()), CAPACITY, "the pool holds every seat")
    st = Api("student195")
    r = st.start("test-slow-setup")
    t.eq(r.status, 201, "B's cold start admitted", r.json)
    t.eq(r.json.get("pool"), False, "a cold start")
    y = db.query("SELECT vm_name FROM pool_vms WHERE environment = %s "
                 "AND delete_reason = 'yielded'", ENV)
    t.eq(len(y), 1, "one pool VM of A yielded its seat")
    t.ok(len(kube.lab_vms()) <= CAPACITY, "capacity kept")
    out = tick()
    t.eq((count(out, "created"), count(out, "held")), (0, 1),
         "the pool does not take the seat back at once", out)
    t.eq(len(rows("linux-basics")), CAPACITY - 1, "A's pool shrank by one")
    if r.status == 201:
        st.end(r.json["id"])


def write_lesson(name, doc):
    with open(os.path.join(LESSONS, name), "w") as f:
        json.dump(doc, f)


@t.test(name="freshness: a changed lesson's pool is replaced, a removed lesson's pool deleted")
def lesson_change():
    cold_reset()
    with open(os.path.join(LESSONS, "linux-basics.json")) as f:
        doc = json.load(f)
    doc["id"] = "pool-change"
    doc["warm"] = 2  # the lesson asks for its pool itself
    path = os.path.join(LESSONS, "pool-change.json")
    try:
        write_lesson("pool-change.json", doc)
        wait_ready("pool-change", 2)
        old = rows("pool-change")
        t.eq(len(old), 2, "warm: 2 made two pool VMs")
        vm = kube.get("virtualmachines", old[0][0]).json
        lab = vm["metadata"]["labels"]
        t.eq((lab.get(f"{PREFIX}/pool"), lab.get(f"{PREFIX}/lesson-hash")),
             ("pool-change", old[0][2]), "pool marker and content hash labels")
        t.ok(f"{PREFIX}/session-id" not in lab, "no session id")
        doc["files"] = doc.get("files", []) + [{"path": "/root/new.txt", "content": "v2\n"}]
        write_lesson("pool-change.json", doc)
        out = tick()
        t.eq(count(out, "stale"), 2, "both pool VMs of the old lesson retired", out)
        new = rows("pool-change")
        t.ok(len(new) == 2 and not {r[0] for r in new} & {r[0] for r in old}
             and all(r[2] != old[0][2] for r in new), "two new VMs with the new hash", new)
        wait_until(lambda: all(kube.get("virtualmachines", r[0]).status == 404 for r in old),
                   timeout=30, what="old pool VMs deleted")
        os.unlink(path)
        out = tick()
        t.eq((count(out, "stale"), count(out, "created")), (2, 0),
             "a removed lesson: its pool deleted, nothing made", out)
        t.eq(db.query("SELECT DISTINCT delete_reason FROM pool_vms WHERE lesson = 'pool-change' "
                      "ORDER BY 1"), [("lesson_changed",), ("lesson_gone",)], "reasons recorded")
    finally:
        if os.path.exists(path):
            os.unlink(path)


@t.test(name="a pool VM whose setup fails is deleted and counted, never claimed")
def setup_fails():
    cold_reset()
    wid = warm("broken-setup", 1)
    failed = 0

    def check():
        nonlocal failed
        failed += count(tick(), "failed") or 0
        return failed >= 1
    wait_until(check, timeout=60, interval=0.3, what="the pool VM's setup failure seen")
    r = db.one("SELECT delete_reason, error FROM pool_vms WHERE lesson = 'broken-setup' "
               "AND state = 'deleted' AND delete_reason = 'setup_failed' LIMIT 1")
    t.eq(r[0] if r else None, "setup_failed", "deleted with reason setup_failed")
    t.ok(r and "exit code 3" in (r[1] or ""), "the setup's exit code recorded", r)
    t.eq(db.one("SELECT count(*) FROM pool_vms WHERE lesson = 'broken-setup' "
                "AND ready_at IS NOT NULL"), (0,), "none of them was ever ready")
    g = OP.request("GET", "/api/operator/pool").json
    t.ok(any(x["lesson"] == "broken-setup" and x["failed"] >= 1 for x in g["lessons"]),
         "counted in the operators' view", g["lessons"])
    OP.request("DELETE", f"/api/operator/pool/{wid}")
    st = Api("student196")
    s = st.start("broken-setup")
    t.eq(s.json.get("pool"), False, "a press for it is a cold start")
    if s.status == 201:
        st.end(s.json["id"])


@t.test(name="a pool VM whose setup fails with multi-byte output across the 1023-byte cut is "
             "retired (its error cut before the character) and deleted; the tick succeeds, "
             "the pool does not grow")
def setup_fails_utf8():
    cold_reset()
    out, rc = utf8text.setup_output("test-setup-utf8")
    full = ("the lab setup failed with exit code %d: " % rc
            + utf8text.agent_log_tail(out)).encode()
    t.require(utf8text.splits_at(full, 1023), "the lesson's output straddles byte 1023")
    wid = warm("test-setup-utf8", 1)
    try:
        def retired():
            tick()  # exit status 0: the retire's row was written
            return db.one("SELECT vm_name, error FROM pool_vms WHERE lesson = 'test-setup-utf8' "
                          "AND state = 'deleted' AND delete_reason = 'setup_failed' LIMIT 1")
        row = wait_until(retired, timeout=120, interval=0.3, what="the failing pool VM retired")
        t.eq((row[1] or "").encode(), utf8text.clean_cut(full, 1023),
             "its error: the message cut before the character that did not fit")
        wait_until(lambda: kube.get("virtualmachines", row[0]).status == 404, timeout=30,
                   what="the retired VM deleted")
        t.ok(len(rows("test-setup-utf8")) <= 1, "one pool VM at a time (target 1), not one "
             "more failing VM per tick", rows("test-setup-utf8"))
    finally:
        OP.request("DELETE", f"/api/operator/pool/{wid}")
    tick()
    t.eq(rows("test-setup-utf8"), [], "cancelled: nothing left")


@t.test(name="the pool lock held elsewhere (a long tick): a claim answers and its worker "
             "serves the next request while the lock is still held")
def claim_lock_held():
    cold_reset()
    wid = warm("linux-basics", 1)
    wait_ready("linux-basics", 1)
    holder = Db()  # another tick (the reaper's, another claim's) holds the pool lock
    holder.query("SELECT pg_advisory_lock(7304, hashtext(%s))", ENV)
    sid = None
    try:
        with LabFcgi(threads=1) as f:  # one worker: a stalled one serves nobody
            r = f.request("POST", "/api/sessions", "student385", {"lesson": "linux-basics"})
            t.eq((r.status, (r.json or {}).get("pool")), (201, True), "the claim answered", r)
            sid = (r.json or {}).get("id")
            g = f.request("GET", f"/api/sessions/{sid}", "student385", timeout=30)
            t.eq((g.status, (g.json or {}).get("state")), (200, "ready"),
                 "the next request answered by the same worker")
            h = f.request("GET", "/api/healthz", None, timeout=30)
            t.ok(h.status in (200, 503), "and the one after", h)
            held = holder.one("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                              "AND classid = 7304 AND granted AND pid = pg_backend_pid()")
            t.eq(held, (1,), "the lock was held all along")
    finally:
        holder.query("SELECT pg_advisory_unlock_all()")
        holder.close()
        OP.request("DELETE", f"/api/operator/pool/{wid}")
        if sid:
            Api("student385").end(sid)


def fillers(n, kind="virtualmachines"):
    """n lab objects of another environment that hold seats (counted by every
    environment's admission) and run nothing: halted VMs, unschedulable Pods."""
    names = []
    for _ in range(n):
        name = "lab-" + uuid.uuid4().hex
        labels = {f"{PREFIX}/lab-session": "true", f"{PREFIX}/environment": "t182-filler"}
        if kind == "pods":
            obj = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
                   "spec": {"nodeSelector": {"t182": "nowhere"},
                            "containers": [{"name": "lab", "image": "docker.io/library/debian:12"}]}}
        else:
            obj = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                   "metadata": {"name": name, "labels": labels},
                   "spec": {"runStrategy": "Halted", "template": {"spec": {
                       "domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}}}}}
        r = kube.create(kind, obj)
        assert r.status == 201, r
        names.append(name)
    return names


def drop(names, kind="virtualmachines"):
    for n in names:
        kube.delete(kind, n)


def yielded():
    return db.one("SELECT count(*) FROM pool_vms WHERE environment = %s "
                  "AND delete_reason = 'yielded'", ENV)[0]


@t.test(name="yield only what makes the start fit: a 3-machine start short by 3 with 2 idle "
             "pool VMs deletes none (pressed 3 times); with 4 idle it takes 3 and starts")
def yield_multi():
    cold_reset()
    wid = warm("linux-basics", 2)
    wait_ready("linux-basics", 2)
    OP.request("DELETE", f"/api/operator/pool/{wid}")  # no refill competes
    fill = fillers(CAPACITY - 2)
    st = Api("student386")
    try:
        codes = [st.start("test-multi") for _ in range(3)]
        t.eq([(r.status, (r.json or {}).get("error")) for r in codes],
             [(503, "capacity_full")] * 3, "refused for capacity each time")
        t.eq((yielded(), len(rows("linux-basics"))), (0, 2),
             "no pool VM deleted for a start that could not fit anyway")
        drop(fill[:2])
        wait_until(lambda: len(kube.lab_vms()) == CAPACITY - 2, timeout=30, what="two seats free")
        wid = warm("linux-basics", 4)  # the first request was cancelled: a target of 4
        wait_ready("linux-basics", 4)
        OP.request("DELETE", f"/api/operator/pool/{wid}")
        r = st.start("test-multi")
        t.eq(r.status, 201, "4 idle pool VMs, 3 seats short: admitted", r.json)
        t.eq((yielded(), len(rows("linux-basics"))), (3, 1), "exactly 3 yielded, 1 kept")
        if r.status == 201:
            st.end(r.json["id"])
    finally:
        drop(fill)


@t.test(name="yield only what makes the start fit: a start with the line ahead of it deletes "
             "no pool VM")
def yield_line():
    cold_reset()
    wid = warm("linux-basics", 2)
    wait_ready("linux-basics", 2)
    OP.request("DELETE", f"/api/operator/pool/{wid}")
    fill = fillers(CAPACITY - 2)
    a, b = Api("student387"), Api("student388")
    qid = None
    try:
        r = a.request("POST", "/api/sessions", {"lesson": "test-multi", "queue": True})
        t.eq(r.status, 202, "a 3-machine start joins the line", r.json)
        qid = (r.json or {}).get("id")
        before = (yielded(), len(rows("linux-basics")))
        r = b.start("linux-basics")
        t.eq((r.status, (r.json or {}).get("error"), (r.json or {}).get("queued")),
             (503, "capacity_full", 3), "a press behind the line is refused", r.json)
        t.eq((yielded(), len(rows("linux-basics"))), before,
             "no pool VM deleted for it: the seat would be the line's")
        t.eq(before, (0, 2), "nor for the 3-machine start")
    finally:
        if qid:
            a.end(qid)
        drop(fill)


@t.test(name="a Pod lesson's start refused for pod_capacity deletes no pool VM (a VM seat "
             "is no Pod seat)")
def yield_pod():
    cold_reset()
    wid = warm("linux-basics", 1)
    wait_ready("linux-basics", 1)
    OP.request("DELETE", f"/api/operator/pool/{wid}")
    cap = int(re.search(r"(?m)^pod_capacity = (\d+)$", open(env("LABVM_CONF")).read()).group(1))
    fill = fillers(cap, "pods")
    try:
        r = Api("student389").start("k8s-pod-intro")
        t.eq((r.status, (r.json or {}).get("error")), (503, "capacity_full"), "refused", r.json)
        t.eq((yielded(), len(rows("linux-basics"))), (0, 1), "the pool VM kept")
    finally:
        drop(fill, "pods")


@t.test(name="reaper: healthy pool VMs kept, unowned and vanished ones reclaimed, own environment only")
def reaper():
    cold_reset()
    warm("linux-basics", 2)
    wait_ready("linux-basics", 2)
    healthy = [r[0] for r in rows("linux-basics")]

    def pool_vm(name, environment):
        r = kube.create("virtualmachines", {
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": name, "labels": {
                f"{PREFIX}/lab-session": "true", f"{PREFIX}/environment": environment,
                f"{PREFIX}/lesson": "linux-basics", f"{PREFIX}/pool": "linux-basics",
                f"{PREFIX}/lesson-hash": "0" * 40}},
            "spec": {"runStrategy": "Halted", "template": {"spec": {
                "domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}}}}})
        assert r.status == 201, r
    mine = "lab-" + uuid.uuid4().hex
    theirs = "lab-" + uuid.uuid4().hex
    pool_vm(mine, ENV)
    pool_vm(theirs, "elsewhere")
    # one healthy pool VM vanishes behind the pool's back
    kube.delete("virtualmachines", healthy[1])
    wait_until(lambda: kube.get("virtualmachines", healthy[1]).status == 404, timeout=30,
               what="VM gone")
    rc, out = run("labvm-reaper", "--grace", "0")
    t.eq(rc, 0, "reaper ok", out)
    t.eq(kube.get("virtualmachines", healthy[0]).status, 200, "a healthy pool VM is not an orphan")
    t.eq(kube.get("virtualmachines", mine).status in (404,) or
         kube.get("virtualmachines", mine).json["metadata"].get("deletionTimestamp") is not None,
         True, "a pool-labelled VM the pool does not own is reclaimed")
    t.eq(kube.get("virtualmachines", theirs).status, 200, "another environment's pool VM untouched")
    t.eq((count(out, "pool_vanished"), count(out, "pool_created")), (1, 1),
         "the vanished one is counted and replaced", out)
    kube.delete("virtualmachines", theirs)
    cold_reset()


@t.test(name="a warm pool only the reaper tends turns ready: the reaper, as its CronJob's Pod, "
        "reaches the pool VMs' agents")
def reaper_only():
    # as on a cluster where no operator looks at the pool: no labvm-pool tick,
    # no GET /api/operator/pool; only the CronJob's runs (its own Pod, its labels)
    cold_reset()
    warm("linux-basics", 2)
    outs = []

    def ready_by_reaper():
        rc, out = run("labvm-reaper", "--grace", "0")
        outs.append(out.strip().splitlines()[-1] if out.strip() else f"rc={rc}")
        return len([r for r in rows("linux-basics") if r[1] == "ready"]) >= 2
    try:
        wait_until(ready_by_reaper, timeout=120, interval=1.0,
                   what="2 ready pool VMs, made ready by the reaper alone")
        ok = True
    except TimeoutError:
        ok = False
    t.ok(ok, "both pool VMs ready after reaper runs alone", outs[-3:])
    t.ok(sum(count(o, "pool_ready") or 0 for o in outs) >= 2,
         "the reaper's runs counted them ready (pool_ready)", outs[-3:])
    gone = [r for r in rows("linux-basics", states=("deleted",)) if r[3] == "not_ready"]
    t.eq(gone, [], "none retired as not ready")
    cold_reset()


t.done()
