#!/usr/bin/python3
"""Admission: capacity is counted in the cluster and strict under
concurrency; one session per user under a double click."""
import threading

from labtest import PREFIX, Api, Db, Kube, env, reset_world, users, wait_until
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
CAPACITY = 8


def parallel(calls):
    """Run the callables at the same instant; return their results in order."""
    out = [None] * len(calls)
    gate = threading.Barrier(len(calls))

    def run(i, fn):
        gate.wait()
        out[i] = fn()
    ths = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(calls)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    return out


def foreign_vm(name, environment="elsewhere", finalizers=None):
    vm = {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name, "labels": {f"{PREFIX}/lab-session": "true",
                                              f"{PREFIX}/environment": environment}},
        "spec": {"runStrategy": "Halted", "template": {"spec": {
            "domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}}}},
    }
    if finalizers:
        vm["metadata"]["finalizers"] = finalizers
    r = kube.create("virtualmachines", vm)
    if r.status != 201:
        raise AssertionError(f"creating {name}: {r}")


@t.test(name="40 users start at once with capacity 8: exactly 8 created, 32 capacity_full")
def burst():
    us = users(121, 40)
    apis = [Api(u) for u in us]
    rs = parallel([lambda a=a: a.start("linux-basics") for a in apis])
    codes = [r.status for r in rs]
    t.eq(codes.count(201), CAPACITY, "201 answers")
    t.eq(codes.count(503), 40 - CAPACITY, "503 answers")
    full = [r for r in rs if r.status == 503]
    t.ok(all(r.json.get("error") == "capacity_full" for r in full), "all are capacity_full",
         {r.json.get("error") for r in full})
    t.ok(all(r.json.get("capacity") == CAPACITY and r.json.get("in_use") >= CAPACITY for r in full),
         "capacity and in_use in the answer", full[0].json if full else None)
    t.ok(all(r.header("Retry-After") and int(r.header("Retry-After")) > 0 for r in full),
         "Retry-After on every refusal")
    vms = kube.lab_vms()
    t.eq(len(vms), CAPACITY, "VMs in the cluster")
    created = {r.json["id"] for r in rs if r.status == 201}
    t.eq({v["metadata"]["labels"][f"{PREFIX}/session-id"] for v in vms}, created,
         "the VMs are the created sessions'")
    t.eq(db.one("SELECT count(*) FROM sessions WHERE state IN ('starting','ready') "
                "AND environment = %s", env("LABVM_ENVIRONMENT")), (CAPACITY,),
         "active session rows")
    for a, r in zip(apis, rs):
        if r.status == 201:
            a.end(r.json["id"])


@t.test(name="one user, 10 parallel starts: one session, nine 409 naming it")
def double_click():
    reset_world(kube, db)
    apis = [Api("student170") for _ in range(10)]
    rs = parallel([lambda a=a: a.start("linux-basics") for a in apis])
    ok = [r for r in rs if r.status == 201]
    t.eq(len(ok), 1, "one 201")
    conflicts = [r for r in rs if r.status == 409]
    t.eq(sorted(r.status for r in rs), [201] + [409] * 9, "one 201 and nine 409")
    sid = ok[0].json["id"] if ok else None
    t.ok(all(r.json.get("error") == "session_exists" and r.json["session"]["id"] == sid
             for r in conflicts), "each 409 names the one session")
    t.eq(len(kube.lab_vms()), 1, "one VM")
    t.eq(db.one("SELECT count(*) FROM sessions WHERE user_name = 'student170' "
                "AND state IN ('starting', 'ready')"), (1,), "one active row")
    if sid:
        apis[0].end(sid)


@t.test(name="capacity counts another environment's VM and a terminating one")
def counts_foreign_and_terminating():
    reset_world(kube, db)
    for i in range(6):
        foreign_vm(f"foreign-{i}")
    foreign_vm("terminating-0", environment=env("LABVM_ENVIRONMENT"), finalizers=["labvm.test/hold"])
    kube.delete("virtualmachines", "terminating-0")
    vm = kube.get("virtualmachines", "terminating-0").json
    t.ok(vm["metadata"].get("deletionTimestamp"), "the held VM is terminating")
    a, b = Api("student171"), Api("student172")
    r = a.start("linux-basics")
    t.eq(r.status, 201, "7 in use: the 8th start is admitted")
    r2 = b.start("linux-basics")
    t.eq(r2.status, 503, "then the cluster is full")
    t.eq((r2.json or {}).get("in_use"), 8, "in_use counts 6 foreign + 1 terminating + 1 lab")
    if r.status == 201:
        a.end(r.json["id"])
    kube.patch("virtualmachines", "terminating-0", {"metadata": {"finalizers": None}})
    wait_until(lambda: len(kube.lab_vms()) <= 6, 20, what="the two VMs gone")
    r3 = b.start("linux-basics")
    t.eq(r3.status, 201, "room again once the terminating VM is gone and one lab ended")
    if r3.status == 201:
        b.end(r3.json["id"])


@t.test(name="admission waits for the capacity lock; a full cluster is refused without waiting")
def lock_and_precheck():
    reset_world(kube, db)
    holder = Db()
    holder.query("SELECT pg_advisory_lock(7302, 0)")   # the admissions' capacity lock
    try:
        result = {}
        th = threading.Thread(target=lambda: result.setdefault("r", Api("student173").start("linux-basics")))
        th.start()
        # the start is queued on the lock: PostgreSQL shows its backend waiting for
        # exactly this advisory lock (not merely a thread that has not returned yet)

        def waiting():
            return holder.one("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                              "AND classid = 7302 AND objid = 0 AND objsubid = 2 "
                              "AND NOT granted")[0]
        try:
            n = wait_until(waiting, 60, 0.1, "a backend waiting for the capacity lock")
        except TimeoutError as e:
            n = 0
            t.diag(str(e))
        t.eq(n, 1, "with room, a start waits for the lock another admission holds")
        t.ok(th.is_alive() and "r" not in result, "and has not answered meanwhile")
        for i in range(CAPACITY):
            foreign_vm(f"filler-{i}")
        # the lock is held until this request has returned: were it queued for
        # the lock, it would time out here instead of answering
        r = Api("student174", timeout=10).start("linux-basics")
        t.eq((r.status, (r.json or {}).get("error")), (503, "capacity_full"),
             "full: refused while the lock is held")
    finally:
        holder.query("SELECT pg_advisory_unlock(7302, 0)")
        holder.close()
    th.join(20)
    r = result.get("r")
    t.eq((r.status, (r.json or {}).get("error")) if r else None, (503, "capacity_full"),
         "the waiting start, counted under the lock, sees the cluster full too")


reset_world(kube, db)
t.done()
