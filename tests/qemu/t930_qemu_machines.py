#!/usr/bin/python3
# timeout: 900
"""A multi-machine lesson on real QEMU guests (issue #25 item 6): the shipped
kubeadm-cluster lesson (cp 2 GiB / 2 vCPU, worker1 and worker2 1 GiB / 1 vCPU)
on this machine's --guest qemu node.

Starts its own stack (tests/lib/qemustack.py; state in .check-qemu-machines
next to $LABVM_STATE, ports from LABVM_QEMU_PORT_BASE + 100, guests on
127.79.0.0/16, environment check-qemu-machines; the test lessons too) and
stops it at the end.

Checks: a session that can never be scheduled on this node (three 12 GiB
machines that must share it) is refused at the press, 409 never_fits naming
the node, with nothing created; kubeadm-cluster is admitted and its three VMs
are scheduled on the one node (the node's devices.kubevirt.io/kvm holds
them), each QEMU guest with a second NIC on the session network (KubeVirt's
bridge binding: tap and the CNI veth on the in-pod bridge, the node's
lvn bridge behind it), configured by the guest's real cloud-init from the
seed's network-config; the session turns ready (the lesson's setup found
all three machines by name); from cp's console (labvm-console, as a student
types) worker1 and worker2 resolve by name to their session addresses and
answer on TCP; ending the session stops every QEMU. Prints press -> ready."""
import os
import re
import sys
import time

SRC = os.environ.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRC, "tests", "lib"))
import qemustack  # noqa: E402
from qemustack import (READY_TIMEOUT, S, Console, api_for, guests, qemu_alive,  # noqa: E402
                       run, wait_until)
from tap import T  # noqa: E402

t = T()
LESSON = "kubeadm-cluster"
USER = "student1"
MACHINES = ["cp", "worker1", "worker2"]
SERVER = ("nohup python3 -c \"import socket; s=socket.socket(); "
          "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 6443)); "
          "s.listen(8)\nwhile True:\n c,a=s.accept(); c.sendall(b'{name}:6443'); c.close()\" "
          ">/dev/null 2>&1 &")

skip = qemustack.skip_reason()


def probe(host, tag):
    return (f"python3 -c \"import socket\ntry:\n c=socket.create_connection(('{host}', 6443), 3)"
            f"; print('{tag}=' + c.recv(64).decode())\nexcept OSError as e:\n print('{tag}=ERR')\"")


@t.test(skip=skip)
def stack_with_qemu_guests_starts():
    qemustack.up(t, "-qemu-machines", "lv-qemu-t930-", 100, "check-qemu-machines",
                 "127.79.0.0/16", extra_lessons=True)
    node = S["kube"].request("GET", "/api/v1/nodes").json["items"]
    t.eq(len(node), 1, "one node: this machine")
    alloc = node[0]["status"]["allocatable"]
    t.diag(f"node allocatable: memory {alloc['memory']}, "
           f"devices.kubevirt.io/kvm {alloc['devices.kubevirt.io/kvm']}")
    t.ok(int(alloc["devices.kubevirt.io/kvm"]) >= len(MACHINES),
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
def kubeadm_cluster_is_admitted_and_ready_on_qemu_guests():
    need_stack()
    api = api_for(USER)
    t0 = time.monotonic()
    r = api.start(LESSON)
    t.require(r.status == 201, f"admitted: {r}")
    s = r.json
    S["sid"] = s["id"]
    t.eq(sorted(v["machine"] for v in s["vms"]), MACHINES, "three machines")
    s = api.wait_state(s["id"], ("ready", "failed"), READY_TIMEOUT, interval=1)
    took = time.monotonic() - t0
    t.eq(s["state"], "ready", "ready", s.get("error"))
    t.diag(f"press -> ready {took:.0f} s (three TCG guests at once)")
    S["s"] = s
    g = guests()
    for v in s["vms"]:
        info = g.get(v["name"]) or {}
        t.eq((info.get("kind"), info.get("state")), ("qemu", "running"), f"{v['machine']}: QEMU")
        vmi = S["kube"].get("virtualmachineinstances", v["name"]).json
        ifs = {i["name"]: i for i in vmi["status"].get("interfaces", [])}
        t.eq(ifs.get("session", {}).get("ipAddress"), v["network"]["address"].split("/")[0],
             f"{v['machine']}: its session interface and address")
    nodes = {S["kube"].get("virtualmachineinstances", v["name"]).json["status"].get("nodeName")
             for v in s["vms"]}
    t.eq(nodes, {"node-1"}, "all three on the node")


@t.test(skip=skip)
def from_cps_console_the_workers_answer_by_name():
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
            if not await c.prompt(90):
                return None
            got = {"hostname": await c.run("hostname"),
                   "nodes": await c.run("wc -l < /root/lab/nodes"),
                   "hosts": await c.run("getent hosts worker1 worker2 | awk '{print $1}'"),
                   "link": await c.run("ip -o -4 addr show | grep -c " + addr["cp"])}
            for m, tag in (("worker1", "A"), ("worker2", "B")):
                got[m] = await c.run(probe(m, tag), timeout=30)
            return got
        finally:
            await c.close()
    got = run(console())
    t.require(got is not None, "a root prompt on cp's console")
    t.eq(got["hostname"], "cp", "cp's console")
    t.eq(got["nodes"], "3", "the lesson's setup found the three machines by name")
    t.eq((got["hosts"] or "").split(), [addr["worker1"], addr["worker2"]],
         "worker1 and worker2 resolve to their session addresses")
    t.eq(got["link"], "1", "cp has its session address (cloud-init's network-config)")
    t.eq((got["worker1"], got["worker2"]), ("A=worker1:6443", "B=worker2:6443"),
         "both workers answer by name on the session network")


@t.test(skip=skip)
def ending_the_session_stops_every_qemu():
    need_stack()
    t.require("sid" in S, "no session")
    pids = [i.get("pid") for i in guests().values() if i.get("pid")]
    t.eq(api_for(USER).end(S["sid"]).status, 200, "ended")
    t.ok(wait_until(lambda: not S["kube"].lab_vms() and not any(qemu_alive(p) for p in pids),
                    60), "no VM and no QEMU left")


t.done()
