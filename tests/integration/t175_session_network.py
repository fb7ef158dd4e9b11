#!/usr/bin/python3
# timeout: 300
"""The session network on the simulator's pod network: from cp's serial
console (through labvm-console, as the student types), worker1 and worker2
answer by name on the session network on any port; another session's
machines do not, not even when a root student there takes an address of
this session's subnet (each session is its own L2 segment).

The simulator's nodes are as a real cluster's (issue #25 item 2): the CNI
bridge plugin's bridge is per node with no uplink, and the scheduler spreads
pods (least allocated). So this holds only because labvm keeps a session's
machines on one node (a required pod affinity on the session id): the three
share a node, the second session starts on another one. The bridge plugin
never deletes a bridge (containernetworking/plugins#282): ending the sessions
leaves each session's lvn bridge on its node, without ports, and
conf/node/lvn-bridge-gc.sh, run on each node as the README tells operators
to, deletes exactly those.

With `session_network = ovn-layer2` (a labvm.fcgi of this test's own) the
NAD is an OVN-Kubernetes layer2 network, which spans the nodes: no
affinity, the machines spread, and still reach each other by name."""
import asyncio
import base64
import json
import os
import re
import time

import websockets

from fcgiclient import LabFcgi
from labtest import Api, Kube, env, reset_world
from tap import T

t = T()
kube = Kube()
reset_world(kube)
SERVER = ("nohup python3 -c \"import socket,sys; s=socket.socket(); "
          "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
          "s.bind(('0.0.0.0', {port})); s.listen(8)\nwhile True:\n c,a=s.accept(); "
          "c.sendall(b'{name}:{port}'); c.close()\" >/dev/null 2>&1 &")


def probe(host, port, tag):
    """A shell line: connect to host:port, print TAG=<answer or ERR>."""
    return (f"python3 -c \"import socket\ntry:\n c=socket.create_connection(('{host}', {port}), 2); "
            f"print('{tag}=' + c.recv(64).decode())\nexcept OSError as e:\n print('{tag}=ERR')\"")


async def console_run(user, url, lines, tags, timeout=30):
    pw = env("LABVM_PASSWORD", "labvm")
    auth = "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()
    ws = await websockets.connect(env("LABVM_URL").replace("http://", "ws://") + url,
                                  subprotocols=["labvm-console.v1"],
                                  extra_headers={"Authorization": auth}, open_timeout=10,
                                  ping_interval=None, close_timeout=2)
    out = b""
    try:
        for line in lines:
            await ws.send(b"\r" + line.encode() + b"\r")
        end = time.monotonic() + timeout
        while not all(re.search(rf"[\r\n]{t_}=[^\s']+".encode(), out) for t_ in tags):
            m = await asyncio.wait_for(ws.recv(), max(0.1, end - time.monotonic()))
            if isinstance(m, bytes):
                out += m
    finally:
        await ws.close()
    text = out.decode("utf-8", "replace")
    return {t_: re.findall(rf"[\r\n]{t_}=([^\s']+)", text)[-1] for t_ in tags}


loop = asyncio.new_event_loop()
labs = {}
placed = {}      # user -> the node of the session's machines


@t.test(name="two 3-machine sessions ready; servers on two ports of each worker")
def setup():
    for user in ("student361", "student362"):
        api = Api(user)
        r = api.start("test-multi")
        t.eq(r.status, 201, f"{user} started", r.json)
        s = api.wait_state(r.json["id"], "ready", 60)
        t.eq(s["state"], "ready", f"{user}'s session ready", s.get("error"))
        labs[user] = (api, s)
        for v in s["vms"][1:]:
            for port in (6443, 10250):
                kube.guest_exec(v["name"], SERVER.format(port=port, name=v["machine"]))
    time.sleep(0.5)


def nodes_of(s):
    return {v["machine"]: (kube.get("virtualmachineinstances", v["name"]).json.get("status")
                           or {}).get("nodeName") for v in s["vms"]}


@t.test(name="each session's machines share one node; the two sessions are on two nodes")
def placement():
    a, b = (nodes_of(labs[u][1]) for u in ("student361", "student362"))
    t.eq(len(set(a.values())), 1, "student361's three machines on one node", a)
    t.eq(len(set(b.values())), 1, "student362's three machines on one node", b)
    t.ok(set(a.values()) != set(b.values()), "least allocated: the second session elsewhere",
         (a, b))
    placed.update({u: next(iter(nodes_of(labs[u][1]).values()))
                   for u in ("student361", "student362")})


@t.test(name="from cp's console: worker1 and worker2 answer by name, on any port")
def by_name():
    api, s = labs["student361"]
    url = api.ticket(s["id"]).json["url"]
    got = loop.run_until_complete(console_run("student361", url, [
        "getent hosts worker1 | sed 's/^/H1=/'",
        probe("worker1", 6443, "A"), probe("worker1", 10250, "B"),
        probe("worker2", 6443, "C"), probe("worker2", 10250, "D")], ["H1", "A", "B", "C", "D"]))
    w1 = next(v for v in s["vms"] if v["machine"] == "worker1")["network"]["address"]
    t.eq(got["H1"], w1.split("/")[0], "worker1 resolves to its session address")
    t.eq([got[k] for k in "ABCD"], ["worker1:6443", "worker1:10250", "worker2:6443",
                                    "worker2:10250"], "both workers, both ports")


@t.test(name="another session's machines cannot reach them on the session network")
def isolated():
    _, a = labs["student361"]
    api_b, b = labs["student362"]
    a_w1 = next(v for v in a["vms"] if v["machine"] == "worker1")["network"]["address"]
    ip = a_w1.split("/")[0]
    net = ip.rsplit(".", 1)[0]
    url = api_b.ticket(b["id"]).json["url"]
    got = loop.run_until_complete(console_run("student362", url, [
        probe(ip, 6443, "X"),
        # root in B's cp takes an address of A's subnet on its session interface
        f"ip addr add {net}.99/24 dev eth1; echo ADDED=$?",
        probe(ip, 6443, "Y"), probe(ip, 10250, "Z"),
        probe("worker1", 6443, "OWN")], ["X", "ADDED", "Y", "Z", "OWN"], timeout=40))
    t.eq(got["X"], "ERR", "B's cp does not reach A's worker1")
    t.eq(got["ADDED"], "0", "root in B's cp took an address of A's subnet")
    t.eq((got["Y"], got["Z"]), ("ERR", "ERR"), "still not: another L2 segment")
    t.eq(got["OWN"], "worker1:6443", "B's cp reaches its own worker1")


@t.test(name="ending the sessions takes the session networks down")
def teardown():
    for api, s in labs.values():
        t.eq(api.end(s["id"]).status, 200, "ended")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and kube.lab_vms():
        time.sleep(0.2)
    t.eq(kube.lab_vms(), [], "no VM left")


def node_bridges():
    r = kube.request("GET", "/_sim/nodes/bridges")
    t.require(r.status == 200, f"/_sim/nodes/bridges: {r}")
    return {n: {b["name"]: b["ports"] for b in brs} for n, brs in r.json["nodes"].items()}


def lvn(sid):
    return "lvn" + sid.replace("-", "")[:12]


@t.test(name="the bridges outlive the sessions (plugins#282); the documented clean-up deletes them")
def leaked_bridges():
    t.require(len(placed) == 2, "the sessions ran")
    br = node_bridges()
    for u in ("student361", "student362"):
        node, name = placed[u], lvn(labs[u][1]["id"])
        t.eq(br.get(node, {}).get(name), [], f"{u}'s bridge {name} stays on {node}, no port")
        others = [n for n, b in br.items() if n != node and name in b]
        t.eq(others, [], f"{u}'s bridge is on no other node")
    with open(os.path.join(env("LABVM_SRC"), "conf", "node", "lvn-bridge-gc.sh")) as f:
        script = f.read()
    for node in sorted(br):      # every node that ever had a session network
        r = kube.request("POST", f"/_sim/nodes/{node}/exec",
                         {"cmd": "LVN_GC_GRACE=1 sh -c '" + script.replace("'", "'\\''") + "'"})
        t.eq((r.status, r.json.get("exit_code")), (200, 0), f"the clean-up ran on {node}",
             r.json)
    after = node_bridges()
    for u in ("student361", "student362"):
        t.ok(lvn(labs[u][1]["id"]) not in after.get(placed[u], {}), f"{u}'s bridge is gone")
    left = {n: [b for b, ports in brs.items() if b.startswith("lvn") and not ports]
            for n, brs in after.items()}
    t.eq({n: b for n, b in left.items() if b}, {}, "no unused lvn bridge left on any node")

@t.test(name="session_network = ovn-layer2: an OVN layer2 NAD, no affinity, spread, reachable")
def ovn_layer2():
    reset_world(kube)
    user = "student363"
    with LabFcgi({"session_network": "ovn-layer2"}) as f:
        r = f.request("POST", "/api/sessions", user, {"lesson": "test-multi"})
    t.require(r.status == 201, f"started through an ovn-layer2 labvm.fcgi: {r}")
    sid = r.json["id"]
    api = Api(user)
    try:
        nad = kube.list("network-attachment-definitions", f"labvm.io/session-id={sid}")[0]
        conf = json.loads(nad["spec"]["config"])
        t.eq((conf["type"], conf["topology"], conf["netAttachDefName"], conf["name"]),
             ("ovn-k8s-cni-overlay", "layer2", f"labs/{nad['metadata']['name']}",
              nad["metadata"]["name"]), "an OVN-Kubernetes layer2 NAD naming itself")
        vms = kube.list("virtualmachines", f"labvm.io/session-id={sid}")
        t.eq([v["spec"]["template"]["spec"].get("affinity") for v in vms], [None] * 3,
             "no pod affinity")
        s = api.wait_state(sid, "ready", 60)
        t.require(s["state"] == "ready", f"ready: {s.get('error')}")
        where = nodes_of(s)
        t.ok(len(set(where.values())) > 1, "the machines spread over the nodes", where)
        for v in s["vms"][1:]:
            kube.guest_exec(v["name"], SERVER.format(port=6443, name=v["machine"]))
        time.sleep(0.5)
        cp = next(v["name"] for v in s["vms"] if v["machine"] == "cp")
        out = [kube.guest_exec(cp, probe(m, 6443, "P"))["stdout"].strip() for m in ("worker1", "worker2")]
        t.eq(out, ["P=worker1:6443", "P=worker2:6443"], "cp reaches both workers by name")
    finally:
        api.end(sid)


t.done()
