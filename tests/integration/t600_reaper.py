#!/usr/bin/python3
"""labvm-reaper: every lab machine is reclaimed, and never someone else's."""
import os
import re
import subprocess
import tempfile
import time
import uuid

from labtest import PREFIX, Api, Db, Kube, cordon, env, reset_world, vm_of, wait_until, reaper_argv
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
ENV = env("LABVM_ENVIRONMENT")


def conf_for(environment):
    with open(env("LABVM_CONF")) as f:
        text = f.read()
    text = re.sub(r"(?m)^environment = .*$", f"environment = {environment}", text)
    fd, path = tempfile.mkstemp(suffix=".conf")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def reap(*args, conf=None):
    e = dict(os.environ, LABVM_CONF=conf or env("LABVM_CONF"))
    r = subprocess.run(reaper_argv(*args), env=e, capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def summary(out, key):
    m = re.search(rf"\b{key}=(\d+)", out)
    return int(m.group(1)) if m else None


def lab_vm(name, environment=ENV, session=None, marker=True):
    labels = {f"{PREFIX}/environment": environment}
    if marker:
        labels[f"{PREFIX}/lab-session"] = "true"
    labels[f"{PREFIX}/session-id"] = session or str(uuid.uuid4())
    r = kube.create("virtualmachines", {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name, "labels": labels},
        "spec": {"runStrategy": "Halted", "template": {"spec": {
            "domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}}}}})
    assert r.status == 201, r
    return labels


def lab_secret(name, environment=ENV, session=None, marker=True):
    labels = {f"{PREFIX}/environment": environment,
              f"{PREFIX}/session-id": session or str(uuid.uuid4())}
    if marker:
        labels[f"{PREFIX}/lab-session"] = "true"
    r = kube.create("secrets", {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "labels": labels},
        "data": {"userdata": "I2Nsb3VkLWNvbmZpZwo="}})
    assert r.status == 201, r


def exists(kind, name):
    r = kube.get(kind, name)
    return r.status == 200 and not r.json["metadata"].get("deletionTimestamp")


@t.test(name="an expired session is reclaimed: VM and Secret gone, row ended (expired)")
def expired():
    api = Api("student301")
    s = api.wait_state(api.start("test-short").json["id"], ("ready",), 60)
    db.query("UPDATE sessions SET expires_at = now() - interval '1 second' WHERE id = %s", s["id"])
    rc, out = reap()
    t.eq(rc, 0, "exit status", out)
    t.eq(summary(out, "expired"), 1, "summary counts it", out)
    row = db.one("SELECT state, end_reason, ended_at IS NOT NULL FROM sessions WHERE id = %s",
                 s["id"])
    t.eq(row, ("ended", "expired", True), "the row")
    t.eq(kube.get("secrets", vm_of(s) + "-cloudinit").status, 404, "Secret deleted explicitly")
    t.ok(not exists("virtualmachines", vm_of(s)), "VM deleted")


@t.test(name="a stuck start fails at its deadline without any browser polling")
def stuck():
    api = Api("student302")
    cordon(kube)        # nothing can be placed: the start waits in scheduling
    try:
        s = api.start("test-unschedulable").json
        rc, out = reap()
        t.eq(db.one("SELECT state FROM sessions WHERE id = %s", s["id"]), ("starting",),
             "not before the deadline")
        time.sleep(3.5)
        rc, out = reap()
    finally:
        cordon(kube, False)
    t.eq(rc, 0, "exit status", out)
    t.eq(summary(out, "failed_stuck"), 1, "summary counts it", out)
    row = db.one("SELECT state, error FROM sessions WHERE id = %s", s["id"])
    t.eq(row[0], "failed", "failed")
    t.ok(row[1] and row[1].startswith("scheduling:"), "with the stage in the error", row[1])
    wait_until(lambda: not exists("virtualmachines", vm_of(s)), 15, what="VM deleted")


@t.test(name="no browser polling, an agent the student replaced answers bytes that are not "
             "UTF-8: the reaper fails the session (U+FFFD in their place, exit 0), its VM goes; "
             "the next run has nothing left to do")
def reaper_bad_bytes():
    api = Api("student391")
    s = api.start("test-setup-badbytes").json

    def failed():
        rc, out = reap()
        row = db.one("SELECT state, error FROM sessions WHERE id = %s", s["id"])
        return (rc, out, row) if row[0] != "starting" else None
    rc, out, row = wait_until(failed, 120, 0.5, "the reaper failing the session")
    t.eq((rc, summary(out, "errors"), summary(out, "failed_stuck")), (0, 0, 1),
         "exit 0, no errors, counted", out[-500:])
    t.eq(row[0], "failed", "failed")
    t.ok((row[1] or "").startswith("setting_up: the lab setup failed with exit code 9: bad "
                                   "\ufffd bytes \ufffd\ufffd "), "U+FFFD in place", row[1])
    wait_until(lambda: not exists("virtualmachines", vm_of(s)), 30, what="VM deleted")
    rc, out = reap()
    t.eq((rc, summary(out, "errors")), (0, 0), "the next run: no error left", out[-300:])


@t.test(name="an orphan VM of this environment is deleted after the grace period, not before")
def orphan_vm():
    lab_vm("orphan-vm-1")
    rc, out = reap("--grace", "4")
    t.eq(rc, 0, "exit status", out)
    t.ok(exists("virtualmachines", "orphan-vm-1"), "kept while younger than the grace")
    t.eq(summary(out, "kept_young"), 1, "reported as kept", out)
    time.sleep(4.5)
    rc, out = reap("--grace", "4")
    t.eq(summary(out, "orphan_vms"), 1, "deleted as an orphan", out)
    wait_until(lambda: not exists("virtualmachines", "orphan-vm-1"), 15, what="orphan VM gone")
    t.ok("orphan-vm-1" in out and "orphan" in out, "the deletion is logged with its reason")


@t.test(name="an orphan Secret (no owner GC happened) is deleted")
def orphan_secret():
    lab_secret("orphan-secret-1")
    rc, out = reap("--grace", "0")
    t.eq((rc, summary(out, "orphan_secrets")), (0, 1), "deleted", out)
    t.eq(kube.get("secrets", "orphan-secret-1").status, 404, "gone")


@t.test(name="Secrets: an orphan younger than the grace (a start in flight) is kept, then reaped; "
             "another environment's and an unmarked one are never touched")
def secrets_grace_and_scope():
    # a start in flight creates its Secret before its session row commits: a
    # Secret whose session id has no row yet must survive a run within the grace
    inflight = str(uuid.uuid4())
    lab_secret("inflight-secret-1", session=inflight)
    lab_secret("prod-secret-2", environment="prod")
    lab_secret("unmarked-secret-1", marker=False)
    try:
        rc, out = reap("--grace", "4")
        t.eq(rc, 0, "exit status", out)
        t.eq(kube.get("secrets", "inflight-secret-1").status, 200,
             "the young Secret of a start in flight is kept")
        t.eq(summary(out, "orphan_secrets"), 0, "no Secret deleted", out)
        t.ok((summary(out, "kept_young") or 0) >= 1, "reported as kept young", out)
        time.sleep(4.5)   # older than the grace now, however slow the run was
        rc, out = reap("--grace", "4")
        t.eq((rc, summary(out, "orphan_secrets")), (0, 1), "then deleted as an orphan", out)
        t.eq(kube.get("secrets", "inflight-secret-1").status, 404, "gone")
        rc, out = reap("--grace", "0")
        t.eq(rc, 0, "exit status", out)
        t.eq(kube.get("secrets", "prod-secret-2").status, 200, "another environment's kept")
        t.eq(kube.get("secrets", "unmarked-secret-1").status, 200,
             "a Secret without the lab-session marker kept")
    finally:
        for n in ("inflight-secret-1", "prod-secret-2", "unmarked-secret-1"):
            kube.delete("secrets", n)


@t.test(name="objects of another environment, or without the marker, are never touched")
def other_env():
    lab_vm("prod-vm-1", environment="prod")
    lab_secret("prod-secret-1", environment="prod")
    lab_vm("unmarked-vm-1", marker=False)
    rc, out = reap("--grace", "0")
    t.eq(rc, 0, "exit status", out)
    t.ok(exists("virtualmachines", "prod-vm-1"), f"a {ENV} reaper leaves prod's VM alone")
    t.ok(exists("secrets", "prod-secret-1"), f"and prod's Secret")
    t.ok(exists("virtualmachines", "unmarked-vm-1"), "and a VM without the lab-session marker")
    # vice versa: a prod reaper leaves this environment's orphan alone
    lab_vm("check-vm-1")
    prod = conf_for("prod")
    try:
        rc, out = reap("--grace", "0", conf=prod)
        t.eq(rc, 0, "prod reaper runs", out)
        t.ok(exists("virtualmachines", "check-vm-1"), f"a prod reaper leaves {ENV}'s VM alone")
        t.ok(not exists("virtualmachines", "prod-vm-1"), "and reaps its own orphan")
    finally:
        os.unlink(prod)
    for n in ("prod-vm-1", "unmarked-vm-1", "check-vm-1"):
        kube.delete("virtualmachines", n)
    kube.delete("secrets", "prod-secret-1")


@t.test(name="a session whose VM vanished from the cluster is marked failed")
def vanished():
    api = Api("student303")
    s = api.wait_state(api.start("linux-basics").json["id"], ("ready",), 60)
    kube.delete("virtualmachines", vm_of(s))
    wait_until(lambda: kube.get("virtualmachines", vm_of(s)).status == 404, 15,
               what="VM gone")
    rc, out = reap()
    t.eq((rc, summary(out, "vanished")), (0, 1), "counted", out)
    row = db.one("SELECT state, error FROM sessions WHERE id = %s", s["id"])
    t.eq(row[0], "failed", "failed")
    t.ok("disappeared" in (row[1] or ""), "with a clear error", row[1])


@t.test(name="two reapers: while one holds the lock, another exits at once saying so")
def singleton():
    holder = Db()
    holder.query("SELECT pg_advisory_lock(7303, hashtext(%s))", ENV)
    try:
        # the lock is released only after this run has returned: a reaper that
        # waited for it would never return (reap() gives up after 120 s)
        try:
            rc, out = reap()
        except subprocess.TimeoutExpired as e:
            rc, out = None, f"still waiting after {e.timeout} s"
        held = holder.one("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                          "AND classid = 7303 AND granted AND pid = pg_backend_pid()")[0]
    finally:
        holder.query("SELECT pg_advisory_unlock(7303, hashtext(%s))", ENV)
        holder.close()
    t.eq(held, 1, "the other holder still had the lock when this run returned")
    t.eq(rc, 0, "exit status 0 (not an error)")
    t.ok("holds the lock" in out, "says so", out)
    # two at the same instant: both finish, at most one does the work
    e = dict(os.environ, LABVM_CONF=env("LABVM_CONF"))
    ps = [subprocess.Popen(reaper_argv(), env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True) for _ in range(2)]
    outs = [p.communicate(timeout=60)[0] for p in ps]
    t.eq([p.returncode for p in ps], [0, 0], "both exit 0", outs)


@t.test(name="a failing cluster list: nothing deleted, non-zero exit")
def list_fails():
    lab_vm("orphan-vm-2")
    lab_secret("orphan-secret-2")
    for resource in ("virtualmachines", "secrets"):
        kube.fault(verb="list", resource=resource, code=503)
        try:
            rc, out = reap("--grace", "0")
        finally:
            kube.clear_faults()
        t.ok(rc != 0, f"{resource} list failing: non-zero exit", out)
        t.ok("status=incomplete" in out, "the summary says so", out)
        t.ok(exists("virtualmachines", "orphan-vm-2"), "the orphan VM is still there")
        t.eq(kube.get("secrets", "orphan-secret-2").status, 200, "and the orphan Secret")
    rc, out = reap("--grace", "0")
    t.eq(rc, 0, "with the cluster back, the run completes", out)
    t.ok(not exists("virtualmachines", "orphan-vm-2"), "and reaps the orphan")


@t.test(name="--dry-run prints what it would do and changes nothing")
def dry_run():
    lab_vm("orphan-vm-3")
    api = Api("student304")
    # minutes count from ready: a ready session expires (a starting one has its deadlines)
    s = api.wait_state(api.start("linux-basics").json["id"], "ready", 60)
    db.query("UPDATE sessions SET expires_at = now() - interval '1 second' WHERE id = %s", s["id"])
    rc, out = reap("--dry-run", "--grace", "0")
    t.eq(rc, 0, "exit status", out)
    t.ok("would delete VM orphan-vm-3" in out, "names the orphan", out)
    t.ok(f"would end session {s['id']}" in out, "names the expired session", out)
    t.ok(exists("virtualmachines", "orphan-vm-3"), "the orphan is still there")
    t.eq(db.one("SELECT state FROM sessions WHERE id = %s", s["id"]), ("ready",),
         "the session is untouched")
    rc, out = reap("--grace", "0")
    t.ok(not exists("virtualmachines", "orphan-vm-3"), "a real run then reaps")


@t.test(name="a malformed --grace is refused (it must never mean grace 0)")
def bad_grace():
    lab_vm("orphan-vm-5")
    for bad in ("abc", "-1", "10s", ""):
        rc, out = reap("--grace", bad)
        t.eq(rc, 2, f"--grace {bad!r}: usage error", out)
    t.ok(exists("virtualmachines", "orphan-vm-5"), "the young orphan is untouched")
    kube.delete("virtualmachines", "orphan-vm-5")


@t.test(name="the database unreachable: non-zero exit, nothing touched")
def db_down():
    lab_vm("orphan-vm-4")
    bad = conf_for(ENV)
    with open(bad) as f:
        text = f.read()
    text = re.sub(r"(?m)^database = .*$", "database = postgresql://labvm@127.0.0.1:1/labvm", text)
    with open(bad, "w") as f:
        f.write(text)
    try:
        rc, out = reap("--grace", "0", conf=bad)
    finally:
        os.unlink(bad)
    t.ok(rc != 0, "non-zero exit", out)
    t.ok(exists("virtualmachines", "orphan-vm-4"), "nothing deleted")
    t.ok("postgresql://" not in out, "the conninfo is not logged")
    kube.delete("virtualmachines", "orphan-vm-4")


reset_world(kube, db)
t.done()
