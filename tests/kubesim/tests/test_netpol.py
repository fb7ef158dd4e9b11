#!/usr/bin/python3
"""kubesim: the pod network and NetworkPolicy enforcement (not labvm's policy:
tests/integration/t190_network.py proves that one). A denied connection is
dropped (a timeout for the client), as on Calico and Cilium; the
simulator's own guards (the node, an address no pod holds) refuse at once. Guests a and b in `labs`,
c in `other` (labelled team=x), each serving TCP 8899, 8080 and an echo on
7000; the stand-in internet host serves 80 (timeout: 240)."""
import base64
import time

from simlib import NS, Sim, cloud_config, secret, vm, wait_for, wait_running
from tap import T
import netprobe  # noqa: E402

t = T()
sim = Sim()
A = sim.admin
INTERNET = "203.0.113.10"
NP = "/apis/networking.k8s.io/v1/namespaces/{}/networkpolicies"

SERVERS = r"""import socket, socketserver, threading
class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        while True:
            d = self.request.recv(100)
            if not d:
                return
            self.request.sendall(d)
class Hello(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(b"hello\n")
class S(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
for port, h in ((8899, Hello), (8080, Hello), (7000, Echo)):
    threading.Thread(target=S(("0.0.0.0", port), h).serve_forever, daemon=True).start()
open("/tmp/servers-up", "w").close()
threading.Event().wait()
"""
PROBE = netprobe.script()
# a connection held open across a policy change: one echo now, one after /tmp/go
HOLD = r"""import socket, sys, os, time
s = socket.create_connection((sys.argv[1], 7000), timeout=5)
s.sendall(b"1"); open("/tmp/r1", "w").write(s.recv(10).decode())
while not os.path.exists("/tmp/go"):
    time.sleep(0.05)
try:
    s.sendall(b"2"); open("/tmp/r2", "w").write(s.recv(10).decode() or "closed")
except OSError as e:
    open("/tmp/r2", "w").write("error %s" % e)
"""


def b64file(path, text):
    return (f"- path: {path}\n  encoding: b64\n  content: "
            f"{base64.b64encode(text.encode()).decode()}\n")


UD = cloud_config(["nohup python3 /opt/servers.py >/var/log/servers.log 2>&1 &"],
                  b64file("/opt/servers.py", SERVERS) + b64file("/opt/probe.py", PROBE) +
                  b64file("/opt/hold.py", HOLD))


def vmi_ip(name, ns=NS):
    r = A.get(f"/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{name}")
    if r.status != 200:
        return None
    return ((r.json.get("status") or {}).get("interfaces") or [{}])[0].get("ipAddress")


def vmi_phase(name, ns=NS):
    r = A.get(f"/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{name}")
    return (r.json.get("status") or {}).get("phase") if r.status == 200 else None


def probe(src, ip, port):
    ns = "other" if src == "c" else NS
    r = sim.exec(src, f"python3 /opt/probe.py {ip} {port} 1", ns=ns)
    return r["stdout"].strip() or r["stderr"].strip()


def host_probe(ip, port):
    return netprobe.connect(ip, port, 1)


def expect(src, dst, port, want, what):
    ip = INTERNET if dst == "internet" else IP.get(dst) or vmi_ip(dst)
    fn = (lambda: host_probe(ip, port)) if src == "host" else (lambda: probe(src, ip, port))
    try:
        got = wait_for(lambda: fn() == want and want, 6, interval=0.2, what=what)
    except TimeoutError:
        got = fn()
    MATRIX.append((src, dst, port, got))
    t.eq(got, want, f"{src} -> {dst}:{port} {want}: {what}")


def policy(name, spec, ns=NS):
    c, o = A.post(NP.format(ns), {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                                  "metadata": {"name": name, "namespace": ns}, "spec": spec})
    assert c == 201, (c, o)


MATRIX = []
IP = {}


def setup():
    A.post("/api/v1/namespaces", {"metadata": {"name": "other", "labels": {"team": "x"}}})
    for name, ns, labels in (("a", NS, {"role": "a"}), ("b", NS, {"role": "b"}),
                             ("c", "other", {"role": "c"})):
        c, o = A.post(f"/api/v1/namespaces/{ns}/secrets", secret(name, UD, ns=ns))
        assert c == 201, o
        v = vm(name, name, labels=labels, ns=ns, disk="container")
        c, o = A.post(f"/apis/kubevirt.io/v1/namespaces/{ns}/virtualmachines", v)
        assert c == 201, o
    for n in ("a", "b"):
        wait_running(sim, n, 20)
    wait_for(lambda: vmi_phase("c", "other") == "Running", 30, what="c Running")
    for n, ns in (("a", NS), ("b", NS), ("c", "other")):
        IP[n] = vmi_ip(n, ns)
        wait_for(lambda: sim.exec(n, "test -e /tmp/servers-up", ns=ns)["exit_code"] == 0, 20,
                 what=f"{n}'s servers")


try:
    setup()
except BaseException:
    sim.stop()   # never leave the simulator running
    raise


@t.test
def pod_network():
    t.ok(all(IP[n].startswith(f"10.{sim.port >> 8}.{sim.port & 255}.") for n in IP),
         "addresses from the simulator's pod CIDR", IP)
    pod = A.get(f"/api/v1/namespaces/{NS}/pods?labelSelector=role%3Da").json["items"][0]
    t.eq(pod["status"]["podIP"], IP["a"], "the launcher pod's IP is the VMI's")
    out = sim.exec("a", "ip -4 -o addr show; ip route")["stdout"]
    t.ok(f"inet {IP['a']}/24" in out and "eth0" in out,
         "the guest has its own eth0 with the address", out)
    t.ok("127.0.0.1" in out and out.count("inet ") == 2, "and only lo besides", out)
    expect("a", "b", 8899, "open", "no policy: everything open")
    expect("c", "a", 8080, "open", "no policy: across namespaces")
    expect("a", "internet", 80, "open", "the internet host")
    expect("host", "a", 8899, "open", "the node reaches pods")
    t.eq(probe("a", "10.%d.%d.254" % (sim.port >> 8, sim.port & 255), sim.port), "refused",
         "pods never reach the node (the host)")


@t.test
def validation():
    bad = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
           "metadata": {"name": "bad"}, "spec": {"podSelector": {}, "polcyTypes": ["Ingress"]}}
    c, o = A.post(NP.format(NS), bad)
    t.eq(c, 400, "unknown field refused (strict)", o)
    t.ok("polcyTypes" in o.get("message", ""), "naming it", o)
    bad["spec"] = {"podSelector": {}, "policyTypes": ["Inbound"]}
    c, o = A.post(NP.format(NS), bad)
    t.eq(c, 422, "bad policyTypes", o)
    t.ok('Unsupported value: "Inbound"' in o.get("message", ""), "apiserver's wording", o)
    bad["spec"] = {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {
        "cidr": "10.0.0.0/8", "except": ["192.168.0.0/16"]}}]}]}
    c, o = A.post(NP.format(NS), bad)
    t.eq(c, 422, "except outside the cidr", o)
    bad["spec"] = {"podSelector": {}, "ingress": [{"ports": [{"port": 80, "protocol": "ICMP"}]}]}
    c, o = A.post(NP.format(NS), bad)
    t.eq(c, 422, "bad protocol", o)
    r = A.get("/apis/networking.k8s.io/v1")
    t.ok(any(x["name"] == "networkpolicies" for x in r.json["resources"]),
         "discovery lists networkpolicies", r.json)


@t.test
def ingress_deny_then_allow():
    sim.exec("a", "rm -f /tmp/r1 /tmp/r2 /tmp/go; "
             f"nohup python3 /opt/hold.py {IP['b']} >/tmp/hold.log 2>&1 &")
    wait_for(lambda: sim.exec("a", "cat /tmp/r1")["stdout"] == "1", 10, what="held connection")
    policy("b-deny", {"podSelector": {"matchLabels": {"role": "b"}}, "policyTypes": ["Ingress"]})
    expect("a", "b", 8899, "timeout", "default deny once selected")
    expect("a", "b", 7000, "timeout", "all ports")
    expect("host", "b", 8899, "open", "the node is always allowed")
    expect("b", "a", 8899, "open", "egress of b is not isolated")
    sim.exec("a", "touch /tmp/go")
    r2 = wait_for(lambda: sim.exec("a", "cat /tmp/r2")["stdout"], 10, what="held connection")
    t.eq(r2, "2", "a connection established before the policy goes on (conntrack)")
    policy("b-from-a", {"podSelector": {"matchLabels": {"role": "b"}},
                        "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "a"}}}],
                                     "ports": [{"port": 8899}]}]})
    expect("a", "b", 8899, "open", "podSelector + port allows")
    expect("a", "b", 8080, "timeout", "another port still denied")
    expect("c", "b", 8899, "timeout", "podSelector means the policy's namespace only")
    policy("b-from-team-x", {"podSelector": {"matchLabels": {"role": "b"}},
                             "ingress": [{"from": [{"namespaceSelector": {
                                 "matchLabels": {"team": "x"}}}],
                                 "ports": [{"port": 8000, "endPort": 8100}]}]})
    expect("c", "b", 8080, "open", "policies add up: namespaceSelector + endPort range")
    expect("c", "b", 8899, "timeout", "outside that range from there")
    expect("a", "b", 8899, "open", "the first allow still holds")
    expect("a", "b", 8080, "timeout", "namespaceSelector does not cover labs")
    policy("b-from-internet", {"podSelector": {"matchLabels": {"role": "b"}},
                               "ingress": [{"from": [{"ipBlock": {
                                   "cidr": "203.0.113.0/24", "except": ["203.0.113.10/32"]}}]}]})
    r = sim.exec("b", "true")
    t.eq(r["exit_code"], 0, "b still runs")
    expect("a", "b", 7000, "timeout", "an ipBlock for another range adds nothing here")


@t.test
def egress_rules():
    policy("a-out", {"podSelector": {"matchLabels": {"role": "a"}}, "policyTypes": ["Egress"],
                     "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0",
                                                     "except": ["10.0.0.0/8"]}}]}]})
    expect("a", "internet", 80, "open", "ipBlock allows the internet")
    expect("a", "b", 8899, "timeout", "ipBlock except: b's ingress allows a, a's egress not")
    expect("a", "c", 8080, "timeout", "nor other pods")
    expect("host", "a", 8899, "open", "the node still reaches a (ingress not isolated)")
    policy("a-out-c", {"podSelector": {"matchLabels": {"role": "a"}}, "policyTypes": ["Egress"],
                       "egress": [{"to": [{"namespaceSelector": {},
                                           "podSelector": {"matchLabels": {"role": "c"}}}],
                                   "ports": [{"protocol": "TCP", "port": 8080}]}]})
    expect("a", "c", 8080, "open", "namespaceSelector {} + podSelector: c in any namespace")
    expect("a", "c", 8899, "timeout", "only that port")
    policy("deny-all-other", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
           ns="other")
    expect("a", "c", 8080, "timeout", "c's ingress now isolated with no rule")
    expect("c", "internet", 80, "timeout", "c's egress too")
    A.delete(NP.format("other") + "/deny-all-other")
    expect("a", "c", 8080, "open", "deleting the policy lifts it")


@t.test
def tampering_root_is_contained():
    # b, as root, takes another address and adds routes: its packets are dropped
    # at its bridge port (only its own address may leave it)
    sim.exec("b", "ip addr flush dev eth0; ip addr add %s/24 dev eth0; "
             "ip route add default dev eth0 || true" % IP["a"].rsplit(".", 1)[0] + ".200")
    expect("b", "internet", 80, "timeout", "a changed address gets nowhere")
    sim.exec("b", "ip addr flush dev eth0; ip addr add %s/24 dev eth0; "
             "ip route add default via %s" % (IP["a"], IP["a"].rsplit(".", 1)[0] + ".1"))
    expect("b", "c", 8080, "timeout", "nor does taking a's address")


@t.test
def a_new_guest_is_never_reachable_before_its_policy():
    # the policy exists first; from the moment the new guest has an address
    # until its servers run, a (no egress policy of its own left) never gets in
    A.delete(NP.format(NS) + "/a-out")
    A.delete(NP.format(NS) + "/a-out-c")
    policy("d-deny", {"podSelector": {"matchLabels": {"role": "d"}}, "policyTypes": ["Ingress"]})
    c, o = A.post(f"/api/v1/namespaces/{NS}/secrets", secret("d", UD))
    assert c == 201, o
    c, o = A.post(f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines",
                  vm("d", "d", labels={"role": "d"}, disk="container"))
    assert c == 201, o
    ip = wait_for(lambda: vmi_ip("d"), 20, what="d's address")
    seen = set()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        seen.add(probe("a", ip, 8899))
        if sim.exec("d", "test -e /tmp/servers-up")["exit_code"] == 0:
            break
    seen.add(probe("a", ip, 8899))
    t.ok(seen and "open" not in seen and seen <= {"refused", "timeout"},
         "never open: refused while no pod has the address, then dropped", seen)
    expect("host", "d", 8899, "open", "while its servers run (the node gets in)")


@t.test
def the_gateway_keeps_its_mac_while_guests_come_and_go():
    gw = "10.%d.%d.1" % (sim.port >> 8, sim.port & 255)
    want = "0a:58:" + ":".join("%02x" % int(b) for b in gw.split("."))

    def gw_mac():
        # forget the entry, make the guest ask again (a connection to the gateway)
        sim.exec("a", f"ip neigh flush dev eth0; python3 /opt/probe.py {gw} 9")
        out = sim.exec("a", f"ip neigh show {gw}")["stdout"]
        return out.split("lladdr ")[1].split()[0] if "lladdr " in out else out

    t.eq(gw_mac(), want, "the gateway's MAC is fixed (0a:58 and its address)")
    for i in range(3):
        name = f"m{i}"
        c, o = A.post(f"/api/v1/namespaces/{NS}/secrets", secret(name, UD))
        assert c == 201, o
        c, o = A.post(f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines",
                      vm(name, name, labels={"role": name}, disk="container"))
        assert c == 201, o
        wait_running(sim, name, 30)
    for i in range(3):
        A.delete(f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines/m{i}")
    wait_for(lambda: not any(vmi_phase(f"m{i}") for i in range(3)), 30, what="m* gone")
    t.eq(gw_mac(), want, "unchanged after guests came and went (a bridge left to itself "
         "takes its lowest port's MAC and the guests' entries then point nowhere)")
    expect("host", "a", 8899, "open", "a fresh connection from the node right after")


@t.test
def matrix():
    for src, dst, port, got in MATRIX:
        t.diag(f"{src:>5} -> {dst}:{port} {got}")
    t.ok(True, "matrix printed")


sim.stop()
t.done()
