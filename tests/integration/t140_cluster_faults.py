#!/usr/bin/python3
"""A cluster that is down or fails at any step of a start: the student gets
503 cluster_unavailable, no active session row remains and nothing is left
in the cluster. Then the same student can start normally."""
from labtest import Api, Db, Kube, reset_world, wait_until
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
api = Api("student190")


def nothing_left(what):
    t.eq(db.one("SELECT count(*) FROM sessions WHERE user_name = 'student190' "
                "AND state IN ('starting', 'ready')"), (0,), f"{what}: no active session row")
    try:
        wait_until(lambda: not kube.lab_vms() and not kube.list("secrets", "labvm.io/lab-session=true"),
                   15, what="no lab VM or Secret")
        t.ok(True)
    except TimeoutError:
        t.fail(f"{what}: lab objects left behind: "
               f"{[v['metadata']['name'] for v in kube.lab_vms()]} / "
               f"{[s['metadata']['name'] for s in kube.list('secrets', 'labvm.io/lab-session=true')]}")


STEPS = [
    # counted twice: before queueing for the capacity lock, and under it
    ("counting VMs fails", dict(verb="list", resource="virtualmachines", code=503, times=2)),
    ("creating the Secret fails", dict(verb="create", resource="secrets", code=500)),
    ("creating the VM fails", dict(verb="create", resource="virtualmachines", code=500)),
    # libcurl retries a request once on a reused connection that died before
    # answering, so one drop is recovered transparently: drop twice
    ("creating the VM: connection dropped", dict(verb="create", resource="virtualmachines",
                                                 drop=True, times=2)),
    ("owning the Secret fails", dict(verb="patch", resource="secrets", code=503)),
    ("creating the Secret is refused (403)", dict(verb="create", resource="secrets", code=403)),
]

for what, rule in STEPS:
    @t.test(name=f"{what}: 503 cluster_unavailable and nothing left")
    def step(what=what, rule=rule):
        kube.fault(**dict({"times": 1}, **rule))
        try:
            r = api.start("linux-basics")
        finally:
            kube.clear_faults()
        t.eq(r.status, 503, "status")
        t.eq((r.json or {}).get("error"), "cluster_unavailable", "error code")
        nothing_left(what)


@t.test(name="one dropped connection while creating the VM is retried: the start works")
def one_drop():
    kube.fault(verb="create", resource="virtualmachines", drop=True, times=1)
    try:
        r = api.start("linux-basics")
    finally:
        kube.clear_faults()
    t.eq(r.status, 201, "status")
    if r.status == 201:
        t.eq(len(kube.lab_vms()), 1, "exactly one VM")
        api.end(r.json["id"])
    nothing_left("after ending")


@t.test(name="the whole API down: start 503, healthz 503; back up: start works")
def api_down():
    kube.down()
    try:
        r = api.start("linux-basics")
        h = api.request("GET", "/api/healthz")
    finally:
        kube.up()
    t.eq((r.status, (r.json or {}).get("error")), (503, "cluster_unavailable"), "start refused")
    t.eq(h.status, 503, "healthz reports it")
    t.eq((h.json or {}).get("db"), "ok", "the database is fine")
    t.ok((h.json or {}).get("cluster") not in (None, "ok"), "the cluster is not", h.json)
    nothing_left("API down")
    r = api.start("linux-basics")
    t.eq(r.status, 201, "after recovery the start works")
    if r.status == 201:
        api.end(r.json["id"])


@t.test(name="a slow API (delay) still answers; the start succeeds")
def slow():
    kube.fault(verb="create", resource="virtualmachines", delay_ms=1500, times=1)
    try:
        r = api.start("linux-basics")
    finally:
        kube.clear_faults()
    t.eq(r.status, 201, "a 1.5 s slower create is within the timeout")
    if r.status == 201:
        api.end(r.json["id"])


reset_world(kube, db)
t.done()
