#!/usr/bin/python3
# timeout: 900
"""Multi-machine lessons and the warm pool on real QEMU guests, on this
machine's --guest qemu node (one stack, so the pool VM boots while the
two-machine lesson does: TCG guests are CPU-bound and the node holds four).

Multi-machine lessons (issue #25 item 6): the shipped kubeadm-cluster lesson
(cp 2 GiB / 2 vCPU, worker1 and worker2 1 GiB / 1 vCPU) is admitted and its
three VMs are placed and started on the node; a small two-machine lesson
(test-qemu-pair, 1 GiB / 1 vCPU each: two TCG guests boot in about a minute
on two quiet cores) runs to ready and its machines reach each other by name.

Starts its own stack (tests/lib/qemustack.py; state in .check-qemu-machines
next to $LABVM_STATE, ports from LABVM_QEMU_PORT_BASE + 100, guests on
127.79.0.0/16, environment check-qemu-machines; the test lessons too) and
stops it at the end.

Checks: a session that can never be scheduled on this node (three 12 GiB
machines that must share it) is refused at the press, 409 never_fits naming
the node, with nothing created; kubeadm-cluster is admitted, its three VMs
are scheduled on the one node (its devices.kubevirt.io/kvm holds them) and
their QEMU guests run (then the session is ended: booting three TCG guests
takes minutes); test-qemu-pair turns ready (its setup found both machines by
name), each guest's session NIC comes from KubeVirt's bridge binding (tap and
the CNI veth on the in-pod bridge, the node's lvn bridge behind it) and is
configured by the guest's real cloud-init from the seed's network-config;
from cp's console (labvm-console, as a student types) worker1 resolves by
name to its session address and answers on TCP; ending the session stops
every QEMU. Prints press -> ready.

The warm pool (issue #18; was t920): a claimed pool VM serves exactly one
student. An operator warms the golden lesson with one VM (labvm-pool warm,
then labvm-pool tick until it is ready: real cloud-init, the lesson's setup,
the agent's ready flag), warmed while test-qemu-pair boots. Checks: the press
claims it and is `ready` in its 201 answer (pool true, the pool VM's name,
disk golden); the lesson's file is in place (read through labvm-console's root
shell); grading runs in the guest (README present passes; hello.txt fails,
then passes after writing it through the console); a second student's press
does not get it; ending the session stops its QEMU and deletes the VM, and its
pool row stays `claimed` (never pooled again)."""
import json
import os
import re
import subprocess
import sys
import threading
import time

SRC = os.environ.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRC, "tests", "lib"))
import qemustack  # noqa: E402
from qemustack import (READY_TIMEOUT, S, Console, api_for, guests, qemu_alive,  # noqa: E402
                       run, ticket, wait_until)
from tap import T  # noqa: E402

t = T()
LESSON = "test-qemu-pair"
USER = "student1"
MACHINES = ["cp", "worker1"]
KUBEADM = ["cp", "worker1", "worker2"]
POOL_LESSON = "debian-golden"
POOL_USER, POOL_OTHER = "student2", "student3"   # USER keeps test-qemu-pair meanwhile
SERVER = ("nohup python3 -c \"import socket; s=socket.socket(); "
          "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 6443)); "
          "s.listen(8)\nwhile True:\n c,a=s.accept(); c.sendall(b'{name}:6443'); c.close()\" "
          ">/dev/null 2>&1 &")

skip = qemustack.skip_reason()


def probe(host, tag):
    return (f"python3 -c \"import socket\ntry:\n c=socket.create_connection(('{host}', 6443), 3)"
            f"; print('{tag}=' + c.recv(64).decode())\nexcept OSError as e:\n print('{tag}=ERR')\"")


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


POOL = {"stop": threading.Event()}


def pool_ticker():
    """labvm-pool tick every 2 s (what the operator's timer does) until a pool
    VM is ready: the pool VM boots while the tests go on."""
    while not POOL["stop"].is_set():
        if pool_cmd("tick")[0] == 0:
            vm = psql("SELECT vm_name FROM pool_vms WHERE state = 'ready'")
            if vm:
                POOL["ready"] = vm
                POOL["ready_after"] = time.monotonic() - POOL["t0"]
                return
        POOL["stop"].wait(2)


@t.test(skip=skip)
def stack_with_qemu_guests_starts():
    qemustack.up(t, "-qemu-machines", "lv-qemu-t930-", 100, "check-qemu-machines",
                 "127.79.0.0/16", extra_lessons=True)
    node = S["kube"].request("GET", "/api/v1/nodes").json["items"]
    t.eq(len(node), 1, "one node: this machine")
    alloc = node[0]["status"]["allocatable"]
    t.diag(f"node allocatable: memory {alloc['memory']}, "
           f"devices.kubevirt.io/kvm {alloc['devices.kubevirt.io/kvm']}")
    t.ok(int(alloc["devices.kubevirt.io/kvm"]) >= len(KUBEADM),
         "the node takes a kubeadm-cluster session's machines at once", alloc)


def need_stack():
    t.require("kube" in S, "no stack")


@t.test(skip=skip)
def a_session_that_never_fits_the_node_is_refused_at_the_press():
    need_stack()
    api = api_for(USER)
    api.end_current()
    r = api.start("test-multi-never-fits")
    t.eq((r.status, r.json.get("error")), (409, "never_fits"), "refused at once", r.json)
    t.ok(re.search(r"its 3 machines share one node and together need \d+\.\d GiB of memory and "
                   r"3 VM slots; the largest node, node-1, has", r.json.get("message", "")),
         "names the need and the node", r.json)
    t.eq(S["kube"].lab_vms(), [], "nothing created")


@t.test(skip=skip)
def kubeadm_cluster_is_admitted_and_its_three_guests_start():
    need_stack()
    api = api_for(USER)
    r = api.start("kubeadm-cluster")
    t.require(r.status == 201, f"admitted: {r}")
    s = r.json
    try:
        t.eq(sorted(v["machine"] for v in s["vms"]), sorted(KUBEADM), "three machines")
        names = {v["name"] for v in s["vms"]}

        def running():
            g = guests()
            return all((g.get(n) or {}).get("state") == "running" for n in names) and g
        g = wait_until(running, 120, interval=1)
        t.ok(g, "three QEMU guests run at once", {n: (guests().get(n) or {}).get("state")
                                                   for n in names})
        for v in s["vms"]:
            vmi = S["kube"].get("virtualmachineinstances", v["name"]).json
            t.eq((vmi.get("status") or {}).get("nodeName"), "node-1", f"{v['machine']}: placed")
        cp = next(v["name"] for v in s["vms"] if v["machine"] == "cp")
        info = (g or {}).get(cp) or {}
        t.diag(f"kubeadm-cluster's cp: QEMU {info.get('cpus')} vCPU, "
               f"{info.get('memory_mib')} MiB")
        cur = api.get(s["id"]).json
        t.eq(cur["state"], "starting", "the session starts (no machine failed)", cur.get("error"))
    finally:
        api.end(s["id"])
    t.ok(wait_until(lambda: not S["kube"].lab_vms(), 60), "ended: its VMs are gone")


@t.test(skip=skip)
def an_operator_warms_the_golden_lesson():
    """(t920) One pool VM, warmed now: it boots while test-qemu-pair does."""
    need_stack()
    rc, out = pool_cmd("warm", POOL_LESSON, "1", "--until", "+1 hour")
    t.eq(rc, 0, "labvm-pool warm", out)
    POOL["warm"] = re.search(r"warm request (\d+)", out).group(1) if rc == 0 else None
    POOL["t0"] = time.monotonic()
    POOL["thread"] = threading.Thread(target=pool_ticker, daemon=True)
    POOL["thread"].start()


@t.test(skip=skip)
def a_two_machine_lesson_is_ready_on_qemu_guests():
    need_stack()
    api = api_for(USER)
    t0 = time.monotonic()
    r = api.start(LESSON)
    t.require(r.status == 201, f"admitted: {r}")
    s = r.json
    S["sid"] = s["id"]
    t.eq(sorted(v["machine"] for v in s["vms"]), MACHINES, "two machines")
    s = api.wait_state(s["id"], ("ready", "failed"), READY_TIMEOUT, interval=1)
    took = time.monotonic() - t0
    t.eq(s["state"], "ready", "ready", s.get("error"))
    t.diag(f"press -> ready {took:.0f} s (two TCG guests at once)")
    S["s"] = s
    g = guests()
    for v in s["vms"]:
        info = g.get(v["name"]) or {}
        t.eq((info.get("kind"), info.get("state")), ("qemu", "running"), f"{v['machine']}: QEMU")
        with open(os.path.join(os.path.dirname(info.get("overlay") or "/x"), "qemu.cmd")) as f:
            qcmd = f.read()
        t.ok(re.search(r"-netdev tap,id=s0,ifname=tap[0-9a-f]{11},script=no,downscript=no "
                       r"-device virtio-net-pci,netdev=s0,romfile=,mac=02:1b:", qcmd),
             f"{v['machine']}: a second NIC, on a tap, for the session network", qcmd[-400:])


@t.test(skip=skip)
def from_cps_console_worker1_answers_by_name():
    need_stack()
    t.require("s" in S, "the session did not get ready")
    s = S["s"]
    addr = {v["machine"]: v["network"]["address"].split("/")[0] for v in s["vms"]}
    for v in s["vms"][1:]:
        out = S["kube"].guest_exec(v["name"], SERVER.format(name=v["machine"]), timeout_s=30)
        t.eq(out.get("exit_code"), 0, f"a TCP server on {v['machine']}", out)
    time.sleep(1.0)

    async def console():
        c = await Console.open(USER, qemustack.ticket(USER, s["id"]))
        try:
            if not await c.prompt(120):
                return None
            got = {"hostname": await c.run("hostname"),
                   "nodes": await c.run("wc -l < /root/lab/nodes"),
                   "hosts": await c.run("getent hosts worker1 | awk '{print $1}'"),
                   "link": await c.run("ip -o -4 addr show | grep -c ' " + addr["cp"] + "/'")}
            got["worker1"] = await c.run(probe("worker1", "A"), timeout=30)
            return got
        finally:
            await c.close()
    got = run(console())
    t.require(got is not None, "a root prompt on cp's console")
    t.eq(got["hostname"], "cp", "cp's console")
    t.eq(got["nodes"], "2", "the lesson's setup found both machines by name")
    t.eq(got["hosts"], addr["worker1"], "worker1 resolves to its session address")
    t.eq(got["link"], "1", "cp has its session address (cloud-init's network-config)")
    t.eq(got["worker1"], "A=worker1:6443", "worker1 answers by name on the session network")


@t.test(skip=skip)
def a_qemu_pool_vm_becomes_ready():
    need_stack()
    t.require(POOL.get("warm"), "no warm request")
    POOL["thread"].join(READY_TIMEOUT)
    POOL["stop"].set()
    ready = POOL.get("ready")
    t.ok(ready, "a pool VM is ready", psql("SELECT vm_name, state, delete_reason, error "
                                          "FROM pool_vms"))
    t.require(bool(ready), "no ready pool VM")
    t.diag(f"pool VM {ready} ready {POOL['ready_after']:.0f} s after the warm request")
    info = guests().get(ready) or {}
    t.eq((info.get("kind"), info.get("state")), ("qemu", "running"), "a QEMU guest")
    POOL["pid"] = info.get("pid")
    # nothing else takes the node's guest slots
    t.eq(pool_cmd("cancel", POOL["warm"])[0], 0, "the warm request cancelled (no replacement)")


@t.test(skip=skip)
def the_press_claims_it_ready_with_files_console_and_grading():
    need_stack()
    t.require("ready" in POOL, "no pool VM")
    api = api_for(POOL_USER)
    api.end_current()
    t0 = time.monotonic()
    r = api.start(POOL_LESSON)
    took = time.monotonic() - t0
    t.eq(r.status, 201, "201", r.json)
    s = r.json
    t.eq((s.get("state"), s.get("pool")), ("ready", True), "ready at the press, from the pool")
    t.eq(s.get("vms", [{}])[0].get("name"), POOL["ready"], "the pool VM is the session's")
    t.eq(s.get("disk"), {"source": "golden", "fallback_reason": None}, "golden disk recorded")
    t.diag(f"press -> ready answer {took * 1000:.0f} ms")
    POOL["sid"] = s["id"]
    other = api_for(POOL_OTHER).start(POOL_LESSON)
    t.ok(other.status != 201 or not other.json.get("pool"), "another press does not get it")
    if other.status == 201:
        api_for(POOL_OTHER).end(other.json["id"])
    g = api.grade(POOL["sid"])
    t.eq(g.status, 200, "grade answers", g.json)
    steps = {x["name"]: x["passed"] for x in (g.json or {}).get("steps", [])}
    t.eq(steps, {"README present": True, "hello.txt says hello": False}, "the lesson's steps")

    async def console():
        c = await Console.open(POOL_USER, ticket(POOL_USER, POOL["sid"]))
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
    with open(os.path.join(SRC, "conf", "lessons", POOL_LESSON + ".json")) as f:
        want = json.load(f)["files"][0]["content"].rstrip("\n")
    t.eq(readme, want, "the lesson's file is in place")
    t.eq(who, "root", "a root shell on the console")
    g = api.grade(POOL["sid"])
    steps = {x["name"]: x["passed"] for x in (g.json or {}).get("steps", [])}
    t.eq(steps.get("hello.txt says hello"), True, "grading sees the student's work")


@t.test(skip=skip)
def the_end_deletes_it_never_pooled_again():
    need_stack()
    t.require("sid" in POOL, "no session")
    api = api_for(POOL_USER)
    t.eq(api.end(POOL["sid"]).status, 200, "ended")
    gone = wait_until(lambda: S["kube"].get("virtualmachines", POOL["ready"]).status == 404, 120)
    t.ok(gone, "the VM is deleted")
    t.ok(wait_until(lambda: not (POOL.get("pid") and qemu_alive(POOL["pid"])), 120),
         "its QEMU stopped")
    t.eq(psql(f"SELECT state FROM pool_vms WHERE vm_name = '{POOL['ready']}'"), "claimed",
         "its pool row stays claimed: never pooled again")
    t.eq(psql("SELECT count(*) FROM pool_vms WHERE state IN ('starting', 'ready')"), "0",
         "no idle pool VM left")


@t.test(skip=skip)
def ending_the_session_stops_every_qemu():
    need_stack()
    t.require("sid" in S, "no session")
    pids = [i.get("pid") for i in guests().values() if i.get("pid")]
    t.eq(api_for(USER).end(S["sid"]).status, 200, "ended")
    t.ok(wait_until(lambda: not S["kube"].lab_vms() and not any(qemu_alive(p) for p in pids),
                    60), "no VM and no QEMU left")


t.done()
