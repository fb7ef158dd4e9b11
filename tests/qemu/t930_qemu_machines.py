#!/usr/bin/python3
# timeout: 900
"""Multi-machine lessons on real QEMU guests (issue #25 item 6), on this
machine's --guest qemu node: the shipped kubeadm-cluster lesson (cp 2 GiB /
2 vCPU, worker1 and worker2 1 GiB / 1 vCPU) is admitted and its three VMs are
placed and started on the node; a small two-machine lesson (test-qemu-pair,
1 GiB / 1 vCPU each: two TCG guests boot in about a minute on two quiet
cores) runs to ready and its machines reach each other by name.

Starts its own stack (tests/lib/qemustack.py; state in .check-qemu-machines
next to $LABVM_STATE, ports from LABVM_QEMU_PORT_BASE + 100, guests on
127.79.0.0/16, environment check-qemu-machines; the test lessons too) and
stops it at the end.

Checks: a session that can never be scheduled on this node (three 12 GiB
machines that must share it) is refused at the press, 409 never_fits naming
the node, with nothing created; kubeadm-cluster is admitted, its three VMs
are scheduled on the one node (its devices.kubevirt.io/kvm holds them) and
their QEMU guests run, each with a second NIC (then the session is ended:
booting three TCG guests takes minutes); test-qemu-pair turns ready (its
setup found both machines by name), each guest's session NIC comes from
KubeVirt's bridge binding (tap and the CNI veth on the in-pod bridge, the
node's lvn bridge behind it) and is configured by the guest's real
cloud-init from the seed's network-config; from cp's console
(labvm-console, as a student types) worker1 resolves by name to its session
address and answers on TCP; ending the session stops every QEMU. Prints
press -> ready."""
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
LESSON = "test-qemu-pair"
USER = "student1"
MACHINES = ["cp", "worker1"]
KUBEADM = ["cp", "worker1", "worker2"]
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
def ending_the_session_stops_every_qemu():
    need_stack()
    t.require("sid" in S, "no session")
    pids = [i.get("pid") for i in guests().values() if i.get("pid")]
    t.eq(api_for(USER).end(S["sid"]).status, 200, "ended")
    t.ok(wait_until(lambda: not S["kube"].lab_vms() and not any(qemu_alive(p) for p in pids),
                    60), "no VM and no QEMU left")


t.done()
