#!/usr/bin/python3
# timeout: 1200
"""The warm pool on real QEMU guests (issue #18): a claimed pool VM serves
exactly one student.

Starts its own stack with the simulator's `--guest qemu` (tests/lib/qemustack.py; state in
.check-qemu-pool next to $LABVM_STATE, ports from LABVM_QEMU_PORT_BASE + 50,
guests on 127.78.0.0/16, environment check-qemu-pool) and stops it at the end.
An operator warms the golden lesson with one VM (labvm-pool warm, then
labvm-pool tick until it is ready: real cloud-init, the lesson's setup, the
agent's ready flag). Checks: the press claims it and is `ready` in its 201
answer (pool true, the pool VM's name, disk golden); the lesson's file is in
place (read through labvm-console's root shell); grading runs in the guest
(README present passes; hello.txt fails, then passes after writing it through
the console); a second student's press does not get it; ending the session
stops its QEMU and deletes the VM, and its pool row stays `claimed` (never
pooled again).
"""
import json
import os
import re
import subprocess
import sys
import time

SRC = os.environ.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRC, "tests", "lib"))
import qemustack  # noqa: E402
from qemustack import (READY_TIMEOUT, S, Console, api_for, guests, qemu_alive,  # noqa: E402
                       run, ticket, wait_until)
from tap import T  # noqa: E402

t = T()
LESSON = "debian-golden"
ORDER = ["submitted", "scheduling", "booting", "setting_up", "ready"]

skip = qemustack.skip_reason()


# -------------------------------------------------------------------- tests
def pool_cmd(*args):
    e = dict(os.environ, LABVM_CONF=S["env"]["LABVM_CONF"],
             LABVM_DATABASE=S["env"]["LABVM_DATABASE"])
    r = subprocess.run([os.path.join(S["env"]["LABVM_BIN"], "labvm-pool"), *args], env=e,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    return r.returncode, r.stdout


def psql(sql):
    r = subprocess.run(["psql", "-X", "-Atc", sql, S["env"]["LABVM_DATABASE"]],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    return r.stdout.strip()


@t.test(skip=skip)
def stack_with_qemu_guests_starts():
    # ports from LABVM_QEMU_PORT_BASE + 50, guests on 127.78.0.0/16
    qemustack.up(t, "-qemu-pool", "lv-qemu-t920-", 50, "check-qemu-pool", "127.78.0.0/16")
    t.ok(True, "stack up")


def need_stack():
    t.require("kube" in S, "no stack")


@t.test(skip=skip)
def an_operator_warms_the_lesson_and_a_qemu_pool_vm_becomes_ready():
    need_stack()
    rc, out = pool_cmd("warm", LESSON, "1", "--until", "+1 hour")
    t.eq(rc, 0, "labvm-pool warm", out)
    S["warm"] = re.search(r"warm request (\d+)", out).group(1) if rc == 0 else None
    t0 = time.monotonic()
    ready = wait_until(lambda: pool_cmd("tick")[0] == 0 and psql(
        "SELECT vm_name FROM pool_vms WHERE state = 'ready'"), READY_TIMEOUT, interval=2)
    t.ok(ready, "a pool VM is ready", psql("SELECT vm_name, state, delete_reason, error "
                                          "FROM pool_vms"))
    t.require(bool(ready), "no ready pool VM")
    S["vm"] = ready
    t.diag(f"pool VM {ready} ready {time.monotonic() - t0:.0f} s after the warm request")
    info = guests().get(ready) or {}
    t.eq((info.get("kind"), info.get("state")), ("qemu", "running"), "a QEMU guest")
    S["pid"] = info.get("pid")
    # nothing else competes for the node's two guest slots
    t.eq(pool_cmd("cancel", S["warm"])[0], 0, "the warm request cancelled (no replacement)")


@t.test(skip=skip)
def the_press_claims_it_ready_with_files_console_and_grading():
    need_stack()
    t.require("vm" in S, "no pool VM")
    api = api_for("student1")
    api.end_current()
    t0 = time.monotonic()
    r = api.start(LESSON)
    took = time.monotonic() - t0
    t.eq(r.status, 201, "201", r.json)
    s = r.json
    t.eq((s.get("state"), s.get("pool")), ("ready", True), "ready at the press, from the pool")
    t.eq(s.get("vms", [{}])[0].get("name"), S["vm"], "the pool VM is the session's")
    t.eq(s.get("disk"), {"source": "golden", "fallback_reason": None}, "golden disk recorded")
    t.diag(f"press -> ready answer {took * 1000:.0f} ms")
    S["sid"] = s["id"]
    other = api_for("student2").start(LESSON)
    t.ok(other.status != 201 or not other.json.get("pool"), "another press does not get it")
    if other.status == 201:
        api_for("student2").end(other.json["id"])
    g = api.grade(S["sid"])
    t.eq(g.status, 200, "grade answers", g.json)
    steps = {x["name"]: x["passed"] for x in (g.json or {}).get("steps", [])}
    t.eq(steps, {"README present": True, "hello.txt says hello": False}, "the lesson's steps")

    async def console():
        c = await Console.open("student1", ticket("student1", S["sid"]))
        try:
            if not await c.prompt(90):
                return None, None
            readme = await c.run("cat /root/README")
            await c.run("echo hello > /root/hello.txt")
            who = await c.run("id -un")
            return readme, who
        finally:
            await c.close()
    readme, who = run(console())
    with open(os.path.join(SRC, "conf", "lessons", LESSON + ".json")) as f:
        want = json.load(f)["files"][0]["content"].rstrip("\n")
    t.eq(readme, want, "the lesson's file is in place")
    t.eq(who, "root", "a root shell on the console")
    g = api.grade(S["sid"])
    steps = {x["name"]: x["passed"] for x in (g.json or {}).get("steps", [])}
    t.eq(steps.get("hello.txt says hello"), True, "grading sees the student's work")


@t.test(skip=skip)
def the_end_deletes_it_never_pooled_again():
    need_stack()
    t.require("sid" in S, "no session")
    api = api_for("student1")
    t.eq(api.end(S["sid"]).status, 200, "ended")
    gone = wait_until(lambda: S["kube"].get("virtualmachines", S["vm"]).status == 404, 120)
    t.ok(gone, "the VM is deleted")
    t.ok(wait_until(lambda: not (S.get("pid") and qemu_alive(S["pid"])), 120),
         "its QEMU stopped")
    t.eq(psql(f"SELECT state FROM pool_vms WHERE vm_name = '{S['vm']}'"), "claimed",
         "its pool row stays claimed: never pooled again")
    t.eq(psql("SELECT count(*) FROM pool_vms WHERE state IN ('starting', 'ready')"), "0",
         "no idle pool VM left")


t.done()
