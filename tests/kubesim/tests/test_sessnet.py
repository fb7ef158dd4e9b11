#!/usr/bin/python3
"""kubesim: session networks (sessnet.py), as the CNI bridge plugin makes
them: an L2 segment is (node, bridge). Guests on one node's bridge share it
(TCP on any port, their MACs as asked); a guest of another bridge, or of the
same bridge name on another node, does not reach them even with an address
of the same subnet; an OVN-Kubernetes layer2 overlay spans the nodes. A
bridge stays on its node after its last guest left (containernetworking/
plugins#282), and conf/node/lvn-bridge-gc.sh, run on the node as a
hostNetwork pod would, deletes exactly labvm's bridges that have no port.
Every address here lives in network namespaces this test creates."""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import sessnet  # noqa: E402
from tap import T  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
GC = os.path.join(REPO, "conf", "node", "lvn-bridge-gc.sh")
t = T()
nets = sessnet.SessionNetworks()
guests = []

SERVER = ("import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, "
          "socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(4)\n"
          "while True:\n c,a=s.accept(); c.sendall(b'hello from '+sys.argv[2].encode()); c.close()")
CLIENT = ("import socket,sys\ntry:\n c=socket.create_connection((sys.argv[1], int(sys.argv[2])), 1.5);"
          " print(c.recv(100).decode())\nexcept OSError as e:\n print('ERR', e)")
BR_A, BR_B = "lvn0123456789ab", "lvnba9876543210"


def guest():
    p = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "unshare", "--net", "--", "sleep",
                          "infinity"])
    sessnet._own_netns(p.pid)
    sessnet.in_netns(p.pid, "ip link set lo up")
    guests.append(p)
    return p


def in_guest(p, argv, **kw):
    return subprocess.run(["nsenter", "-t", str(p.pid), "-n"] + argv, capture_output=True,
                          text=True, **kw)


def serve(g, name, port):
    servers.append(subprocess.Popen(["nsenter", "-t", str(g.pid), "-n", "python3", "-c",
                                     SERVER, str(port), name]))


def reach(g, ip, port):
    return in_guest(g, ["python3", "-c", CLIENT, ip, str(port)], timeout=10).stdout.strip()


def sq(s):
    return "'" + s.replace("'", "'\\''") + "'"


def bridges(node):
    return {b["name"]: b["ports"] for b in nets.bridges().get(node, [])}


g1, g2, g3, g4 = guest(), guest(), guest(), guest()
servers = []


@t.test(name="two guests on one node's bridge: eth1 with the asked MAC and address, any port")
def same_segment():
    nets.attach(g1.pid, "node-1", BR_A, "eth1", "02:1b:00:00:00:01", ["10.200.0.11/24"], "g1")
    nets.attach(g2.pid, "node-1", BR_A, "eth1", "02:1b:00:00:00:02", ["10.200.0.12/24"], "g2")
    link = in_guest(g1, ["ip", "-o", "link", "show", "eth1"]).stdout
    t.ok("02:1b:00:00:00:01" in link, "the MAC", link)
    addr = in_guest(g2, ["ip", "-o", "-4", "addr", "show", "eth1"]).stdout
    t.ok("10.200.0.12/24" in addr, "the address", addr)
    for port in (6443, 10250):
        serve(g2, "g2", port)
    time.sleep(0.5)
    for port in (6443, 10250):
        t.eq(reach(g1, "10.200.0.12", port), "hello from g2", f"g1 -> g2:{port}")
    t.eq(len(bridges("node-1")[BR_A]), 2, "node-1's bridge has two ports")


@t.test(name="the same bridge name on another node is another segment: no uplink")
def other_node():
    nets.attach(g3.pid, "node-2", BR_A, "eth1", "02:1b:00:00:00:03", ["10.200.0.13/24"], "g3")
    t.ok(reach(g3, "10.200.0.12", 6443).startswith("ERR"), "node-2's guest does not reach g2")
    serve(g3, "g3", 6443)
    time.sleep(0.3)
    t.ok(reach(g1, "10.200.0.13", 6443).startswith("ERR"), "nor g1 it")
    a, b = nets.domains["node-1"].holder.pid, nets.domains["node-2"].holder.pid
    t.ok(os.readlink(f"/proc/{a}/ns/net") != os.readlink(f"/proc/{b}/ns/net"),
         "two nodes, two namespaces")


@t.test(name="another bridge on the same node (same subnet) does not reach them; nor they it")
def other_segment():
    nets.attach(g4.pid, "node-1", BR_B, "eth1", "02:1b:00:00:00:04", ["10.200.0.14/24"], "g4")
    t.ok(reach(g4, "10.200.0.12", 6443).startswith("ERR"), "g4 -> g2 fails")
    serve(g4, "g4", 6443)
    time.sleep(0.3)
    t.ok(reach(g1, "10.200.0.14", 6443).startswith("ERR"), "g1 -> g4 fails")


@t.test(name="an OVN-Kubernetes layer2 overlay is one segment whatever the nodes")
def overlay():
    br = sessnet.overlay_bridge("labs-net-x")
    nets.attach(g1.pid, sessnet.OVERLAY, br, "eth2", None, ["10.201.0.11/24"], "g1")
    nets.attach(g3.pid, sessnet.OVERLAY, br, "eth2", None, ["10.201.0.13/24"], "g3")
    t.eq(reach(g1, "10.201.0.13", 6443), "hello from g3", "g1 (node-1) -> g3 (node-2)")


@t.test(name="a bridge outlives its last guest (plugins#282); the GC script deletes only those")
def leak_and_gc():
    nets.detach("g4")
    t.eq(bridges("node-1").get(BR_B), [], "node-1 keeps g4's bridge, without a port")
    nets.detach("g3")
    t.eq(bridges("node-2").get(BR_A), [], "node-2 keeps its bridge too")
    t.eq(len(bridges("node-1").get(BR_A, [])), 2, "the bridge in use keeps its ports")
    # not labvm's: a bridge of another name, and one of labvm's form in use
    rc, _, err = nets.node_exec("node-1", "ip link add cni0 type bridge && "
                                "ip link add lvnzzzzzzzzzzzz type bridge")
    t.eq(rc, 0, "other bridges made", err)
    with open(GC) as f:
        script = f.read()
    rc, out, err = nets.node_exec("node-1", f"LVN_GC_GRACE=1 sh -c {sq(script)}")
    t.eq((rc, out.split()), (0, ["deleted", BR_B]), "node-1: only the empty lvn bridge", err)
    t.eq(sorted(bridges("node-1")), sorted([BR_A, "cni0", "lvnzzzzzzzzzzzz"]),
         "the bridge in use, cni0 and a name not of labvm's form stay")
    rc, out, err = nets.node_exec("node-2", f"LVN_GC_GRACE=1 sh -c {sq(script)}")
    t.eq((rc, out.split(), bridges("node-2")), (0, ["deleted", BR_A], {}), "node-2: its one",
         err)
    # the next pod on that NAD makes the bridge again (ensureBridge)
    nets.attach(g3.pid, "node-2", BR_A, "eth3", None, ["10.200.0.23/24"], "g3")
    t.eq(len(bridges("node-2").get(BR_A, [])), 1, "the plugin makes it again on ADD")


@t.test(name="a bridge name that is not an interface name is refused; a node is needed")
def bad_bridge():
    for args, want in (((g1.pid, "node-1", "x" * 16, "eth2"), "bad bridge name"),
                       ((g1.pid, None, BR_A, "eth2"), "no node")):
        try:
            nets.attach(*args, None, [], "g1")
            t.ok(False, f"refused: {want}")
        except sessnet.SessionNetError as e:
            t.ok(want in str(e), f"refused: {want}", str(e))


for p in servers + guests:
    p.kill()
    p.wait()
nets.stop()
t.done()
