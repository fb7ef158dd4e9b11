#!/usr/bin/python3
# timeout: 300
"""labvm as the Pod of its shipped Deployment (tests/stack --backend pod,
`make demo BACKEND=pod`): this suite starts a stack of its own (state
STATE/t195, ports LABVM_PORT_BASE+300) where the simulator runs the Pod of
conf/k8s/labvm-backend.yaml as a network namespace of its own on the pod
network and labvm.fcgi, both front ends and labvm-console run inside it,
reaching PostgreSQL and the API server through relays (tests/lib/nsrelay.py)
and reached by the host the same way; conf/k8s/networkpolicy.yaml is applied.

Proven: the processes live in the Pod's network namespace, whose eth0 has
the Pod's status.podIP (of the pod CIDR, not the node's address); a lab
starts, gets ready, its console relays bytes, grades and ends through the
front end; the guest's agent sees labvm's connections come from the Pod's
address; the matrix of allowed and dropped connections (a denial is a
drop, as on Calico and Cilium); and with the Pod relabelled so that the
policy's selector misses it (the "typo in a selector" fault), the agent does
not answer labvm and a start fails at setting_up naming the agent as
unreachable, not a hang."""
import asyncio
import atexit
import ipaddress
import json
import os
import socket
import subprocess
import sys

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import labstack  # noqa: E402
import nsrelay  # noqa: E402
from labclient import Api, Kube, wait_until  # noqa: E402
from labconsole import Console  # noqa: E402
from tap import T  # noqa: E402
import netprobe  # noqa: E402

t = T()
SRC = labstack.SRC
BASE = int(os.environ.get("LABVM_PORT_BASE", "18000")) + 300
STATE = os.path.join(os.environ.get("LABVM_STATE") or os.path.join(SRC, ".check"), "t195")
LABEL = "app.kubernetes.io/name"
with open(os.path.join(SRC, "conf", "k8s", "labvm-backend.yaml")) as f:
    DEPLOYMENT = next(d for d in yaml.safe_load_all(f) if d and d.get("kind") == "Deployment")
TEMPLATE_LABELS = DEPLOYMENT["spec"]["template"]["metadata"]["labels"]
PROBE = netprobe.script()
MATRIX = []
S = {}

stack = labstack.Stack(STATE, port_base=BASE, frontend="both", backend="pod", capacity=4)
stack.down()          # a run of this suite that was killed left it up
atexit.register(stack.down)
ENV = {}


def connect(ip, port):
    return netprobe.connect(ip, port, 2)


def from_backend(ip, port):
    """A connection made inside the backend Pod's network namespace."""
    return nsrelay.in_netns(ENV["LABVM_BACKEND_NETNS"], connect, ip, port)


def from_guest(vm, ip, port):
    r = kube.guest_exec(vm, f"python3 /tmp/probe.py {ip} {port}", timeout_s=10)
    return r["stdout"].strip() or r["stderr"].strip()


def check(src, fn, dst, port, want, what):
    got = fn()
    MATRIX.append((src, dst, port, got))
    t.eq(got, want, f"{src} -> {dst}:{port} {want}: {what}")


def netns_of(pid):
    return os.readlink(f"/proc/{pid}/ns/net")


def descendants(pid):
    """pid and every process under it."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def exe_name(pid):
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return ""


def backend_pod():
    pods = kube.list("pods", f"{LABEL}=labvm-backend")
    return pods


def relabel(value):
    name = ENV["LABVM_BACKEND_POD"].split("/", 1)[1]
    r = kube.patch("pods", name, {"metadata": {"labels": {LABEL: value}}})
    t.eq(r.status, 200, f"the backend Pod relabelled {LABEL}={value}", r.json)


@t.test(name="the stack comes up with the backend as a Pod (--backend pod)")
def up():
    env = stack.up()
    ENV.update(env)
    os.environ.update(env)       # Api, Kube, Console: this suite's stack
    t.eq(env.get("LABVM_BACKEND"), "pod", "the stack says its backend is a Pod")
    t.ok(env.get("LABVM_BACKEND_NETNS"), "and which network namespace is the Pod's")
    for fe in ("lighttpd", "apache"):
        # through the relay into the Pod, and out of it to PostgreSQL and the API server
        r = Api("student1", base=env[f"LABVM_{fe.upper()}_URL"]).request("GET", "/api/healthz")
        t.eq((r.status, r.json), (200, {"db": "ok", "cluster": "ok"}),
             f"{fe}'s /api/healthz: database and cluster reached from the Pod")


if ENV.get("LABVM_BACKEND") != "pod":
    t.done()                  # (the stack is down: atexit)
kube = Kube()
POD_CIDR = json.load(open(stack.path("kubesim", "backend-pod.json")))["pod_cidr"]
NODE_IP = str(list(ipaddress.ip_network(POD_CIDR).hosts())[-1])


@t.test(name="the backend Pod: the Deployment's labels, an address of the pod CIDR, its own netns")
def the_pod():
    pods = backend_pod()
    t.eq(len(pods), 1, "one Pod of the backend Deployment")
    p = pods[0]
    got = p["metadata"]["labels"]
    t.eq({k: got.get(k) for k in TEMPLATE_LABELS}, TEMPLATE_LABELS,
         "it carries the Deployment's template labels")
    ip = p["status"].get("podIP")
    t.eq(ip, ENV["LABVM_BACKEND_POD_IP"], "status.podIP is the address the stack joined")
    t.ok(ip and ipaddress.ip_address(ip) in ipaddress.ip_network(POD_CIDR) and ip != NODE_IP,
         f"an address of the pod CIDR {POD_CIDR}, not the node's {NODE_IP}", ip)
    ns = ENV["LABVM_BACKEND_NETNS"]
    t.ok(os.readlink(ns) != netns_of("self"), "a network namespace other than the host's")
    addrs = nsrelay.in_netns(ns, lambda: socket.if_nameindex())
    t.ok(any(n == "eth0" for _, n in addrs), "with an eth0", addrs)
    r = subprocess.run(["nsenter", f"--net={ns}", "ip", "-4", "-o", "addr", "show",
                        "dev", "eth0"], capture_output=True, text=True)
    t.ok(f" {ip}/" in r.stdout, "eth0 has the Pod's address", r.stdout + r.stderr)


@t.test(name="labvm.fcgi, the front ends and labvm-console live in the Pod's network namespace")
def processes():
    pod_ns = os.readlink(ENV["LABVM_BACKEND_NETNS"])
    fcgi = {}
    for name in ("console", "lighttpd", "apache-fcgi", "apache"):
        pid = stack.running(name)
        t.ok(pid, f"{name} runs")
        if not pid:
            continue
        tree = descendants(pid)
        outside = [(p, exe_name(p)) for p in tree if netns_of(p) != pod_ns]
        t.eq(outside, [], f"{name} (PID {pid}) and its {len(tree) - 1} children are in the "
             "Pod's network namespace")
        fcgi[name] = [p for p in tree if exe_name(p) == "labvm.fcgi"]
    t.ok(stack.running("console") and exe_name(stack.running("console")) == "labvm-console",
         "the console PID is labvm-console itself")
    t.ok(fcgi.get("lighttpd"), "lighttpd's labvm.fcgi processes are among them", fcgi)
    t.ok(fcgi.get("apache-fcgi"), "Apache's labvm.fcgi (spawn-fcgi) is among them", fcgi)
    relay = stack.running("relay")
    t.eq(netns_of(relay), netns_of("self"), "the relay itself runs in the host's namespace")


@t.test(name="start -> ready -> console -> grade through the front end")
def lab():
    api = Api("student1")
    r = api.start("linux-basics")
    t.eq(r.status, 201, "the start is accepted", r.json)
    s = r.json
    final = api.wait_state(s["id"], ("ready", "failed"), 120)
    t.eq(final["state"], "ready", "the lab gets ready", final.get("error"))
    S["a"] = (api, final)
    tk = api.ticket(s["id"])
    t.eq(tk.status, 200, "a console ticket", tk.json)

    async def console():
        c = await Console.open(ENV["LABVM_URL"], tk.json["url"], "student1")
        ok = await c.opened(60)
        if not ok:
            return False, bytes(c.out), c.ctl
        await c.send(b"\r")
        await c.send(b"echo hello > /root/hello.txt; echo t195-$((6*7))\r")
        ok = await c.until(lambda x: b"t195-42" in x.out, 60)
        out = bytes(c.out)
        await c.close()
        return ok, out, c.ctl
    ok, out, ctl = asyncio.new_event_loop().run_until_complete(console())
    t.ok(ok, "the console relays bytes both ways (a command and its output)", (out[-300:], ctl))
    # the grade sees what was typed on the console: both went through the Pod
    g = api.grade(s["id"])
    t.eq(g.status, 200, "grading goes through the agent", g.json)
    steps = {st.get("name"): st.get("passed") for st in (g.json or {}).get("steps") or []}
    t.eq(steps.get("hello.txt says hello"), True,
         "the grade (through the agent) sees the file written on the console", g.json)


@t.test(name="the guest's agent sees labvm's connections come from the backend Pod's address")
def agent_peer():
    api, s = S["a"]
    vm = s["vms"][0]["name"]
    log = kube.guest_exec(vm, "cat /var/log/labvm-agent.log")["stdout"]
    peers = {}
    for line in log.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[1] == "agent:":
            peers[parts[2]] = peers.get(parts[2], 0) + 1
    t.ok(peers, "the agent logged requests", log[-500:])
    t.eq(sorted(peers), [ENV["LABVM_BACKEND_POD_IP"]],
         f"every request came from the Pod's address ({peers})")


@t.test(name="the connection matrix with the shipped policy")
def matrix_allowed():
    api, s = S["a"]
    vm = s["vms"][0]["name"]
    ip = kube.get("virtualmachineinstances", vm).json["status"]["interfaces"][0]["ipAddress"]
    S["vm"], S["ip"] = vm, ip
    kube.guest_exec(vm, "cat > /tmp/probe.py <<'EOF'\n" + PROBE + "EOF\n")
    kube.guest_exec(vm, "nohup python3 -m http.server 8080 >/dev/null 2>&1 &")
    wait_until(lambda: from_guest(vm, "127.0.0.1", 8080) == "open", 10, 0.2,
               "a student's server on 8080")
    check("backend Pod", lambda: from_backend(ip, 8899), "guest", 8899, "open", "the agent")
    check("backend Pod", lambda: from_backend(ip, 8080), "guest", 8080, "timeout",
          "a port the student opened (dropped, as a real CNI does)")
    check("node", lambda: connect(ip, 8080), "guest", 8080, "open",
          "the same port from the node (the exemption the API documents): it is open")
    # a listener of the test's own inside the backend Pod, on all its addresses
    bip = ENV["LABVM_BACKEND_POD_IP"]

    def listen():
        ls = socket.socket()
        ls.bind(("0.0.0.0", 0))
        ls.listen(8)
        return ls
    ls = nsrelay.in_netns(ENV["LABVM_BACKEND_NETNS"], listen)
    port = ls.getsockname()[1]
    try:
        check("node", lambda: connect(bip, port), "backend Pod", port, "open",
              "a port open on the backend Pod")
        check("guest", lambda: from_guest(vm, bip, port), "backend Pod", port, "timeout",
              "the same port from the lab (its egress policy)")
    finally:
        ls.close()
    fe = int(ENV["LABVM_URL"].rsplit(":", 1)[1])
    check("host", lambda: connect("127.0.0.1", fe), "front end via relay", fe, "open",
          "the front end on the host's loopback")
    check("guest", lambda: from_guest(vm, bip, fe), "backend Pod", fe, "timeout",
          "the front end's port from the lab")


@t.test(name="the Pod relabelled so the policy misses it: agent dropped, a start fails at "
        "setting_up naming the agent")
def relabelled():
    vm, ip = S["vm"], S["ip"]
    relabel("labvm-backnd")
    wait_until(lambda: from_backend(ip, 8899) == "timeout", 30, 0.2,
               "the policy no longer admits the Pod")
    check("relabelled Pod", lambda: from_backend(ip, 8899), "guest", 8899, "timeout",
          "the agent, once the selector misses the Pod")
    check("node", lambda: connect(ip, 8899), "guest", 8899, "open",
          "the agent is up (from the node)")
    api = Api("student2")
    s = api.start("test-never-ready").json
    final = api.wait_state(s["id"], ("ready", "failed"), 90)
    t.eq((final["state"], final.get("stage")), ("failed", "setting_up"), "failed at setting_up",
         final)
    err = final.get("error") or ""
    t.ok("agent at" in err and "unreachable" in err, "the error names the agent as unreachable",
         err)
    relabel(TEMPLATE_LABELS[LABEL])
    wait_until(lambda: from_backend(ip, 8899) == "open", 30, 0.2,
               "the policy admits the Pod again")
    check("backend Pod", lambda: from_backend(ip, 8899), "guest", 8899, "open",
          "the agent, labels restored")
    a, sa = S["a"]
    r = a.end(sa["id"])
    t.ok(r.status in (200, 204), "the lab ends through the front end", r)
    wait_until(lambda: kube.get("virtualmachines", vm).status == 404, 60, 0.2,
               "the lab's VM is gone")


@t.test(name="connection matrix")
def matrix():
    for src, dst, port, got in MATRIX:
        t.diag(f"{src:>14} -> {dst}:{port} {got}")
    t.ok(MATRIX)


@t.test(name="the stack goes down")
def down():
    stack.down()
    t.ok(not stack.running_any(), "nothing of it runs")


t.done()
