#!/usr/bin/python3
"""kubesim: session networks (sessnet.py): guests attached to one NAD share
an L2 segment (TCP on any port, their MACs as asked), guests of another NAD
do not reach them even with addresses of the same subnet; a segment nobody
uses any more is taken down. Every address here lives in network namespaces
this test creates."""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import sessnet  # noqa: E402
from tap import T  # noqa: E402

t = T()
nets = sessnet.SessionNetworks()
guests = []

SERVER = ("import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, "
          "socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', int(sys.argv[1]))); s.listen(4)\n"
          "while True:\n c,a=s.accept(); c.sendall(b'hello from '+sys.argv[2].encode()); c.close()")
CLIENT = ("import socket,sys\ntry:\n c=socket.create_connection((sys.argv[1], int(sys.argv[2])), 1.5);"
          " print(c.recv(100).decode())\nexcept OSError as e:\n print('ERR', e)")


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


g1, g2, g3 = guest(), guest(), guest()
servers = []


@t.test(name="two guests on one NAD: eth1 with the asked MAC and address, TCP on any port")
def same_segment():
    nets.attach(g1.pid, "nad-a", "lvnaaaa", "eth1", "02:1b:00:00:00:01", ["10.200.0.11/24"], "g1")
    nets.attach(g2.pid, "nad-a", "lvnaaaa", "eth1", "02:1b:00:00:00:02", ["10.200.0.12/24"], "g2")
    link = in_guest(g1, ["ip", "-o", "link", "show", "eth1"]).stdout
    t.ok("02:1b:00:00:00:01" in link, "the MAC", link)
    addr = in_guest(g2, ["ip", "-o", "-4", "addr", "show", "eth1"]).stdout
    t.ok("10.200.0.12/24" in addr, "the address", addr)
    for port in (6443, 10250):
        servers.append(subprocess.Popen(["nsenter", "-t", str(g2.pid), "-n", "python3", "-c",
                                         SERVER, str(port), "g2"]))
    time.sleep(0.5)
    for port in (6443, 10250):
        out = in_guest(g1, ["python3", "-c", CLIENT, "10.200.0.12", str(port)], timeout=10).stdout
        t.eq(out.strip(), "hello from g2", f"g1 -> g2:{port}")


@t.test(name="a guest of another NAD (same subnet) does not reach them; nor they it")
def other_segment():
    nets.attach(g3.pid, "nad-b", "lvnbbbb", "eth1", "02:1b:00:00:00:03", ["10.200.0.13/24"], "g3")
    out = in_guest(g3, ["python3", "-c", CLIENT, "10.200.0.12", "6443"], timeout=10).stdout
    t.ok(out.startswith("ERR"), "g3 -> g2 fails", out)
    out = in_guest(g1, ["python3", "-c", CLIENT, "10.200.0.13", "6443"], timeout=10).stdout
    t.ok(out.startswith("ERR"), "g1 -> g3 fails", out)
    a, b = nets.segments["nad-a"].holder.pid, nets.segments["nad-b"].holder.pid
    t.ok(os.readlink(f"/proc/{a}/ns/net") != os.readlink(f"/proc/{b}/ns/net"),
         "two segments, two namespaces")


@t.test(name="a segment goes when its last guest detaches")
def teardown():
    h = nets.segments["nad-b"].holder
    nets.detach("g3")
    t.ok("nad-b" not in nets.segments and h.poll() is not None, "nad-b's namespace is gone")
    nets.detach("g1")
    t.ok("nad-a" in nets.segments, "nad-a stays while g2 is attached")
    nets.detach("g2")
    t.ok(not nets.segments, "no segment left")


@t.test(name="a bridge name that is not an interface name is refused")
def bad_bridge():
    try:
        nets.attach(g1.pid, "nad-c", "x" * 16, "eth2", None, [], "g1")
        t.ok(False, "refused")
    except sessnet.SessionNetError as e:
        t.ok("bad bridge name" in str(e), "refused", str(e))


for p in servers + guests:
    p.kill()
    p.wait()
nets.stop()
t.done()
