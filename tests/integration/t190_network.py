#!/usr/bin/python3
"""labvm's network boundary, proven on the simulator's pod network with the
shipped conf/k8s/networkpolicy.yaml applied: from inside a lab guest another
guest's agent and the backend's ports are refused and the stand-in internet
host is reachable; from the backend (labvm's processes, which reach the pod
network as the Pod of conf/k8s/labvm-backend.yaml, with its labels) the
guest's agent is reachable and its other ports are not; a student who, as
root, changes the guest's address or routes stays contained; and a policy
that misses the backend (a selector typo) fails a start at setting_up
naming the agent as unreachable (timeout: 300)."""
import os
import urllib.parse

import yaml

from labtest import Api, Db, Kube, reset_world, vm_of, wait_until
from tap import T
import netprobe  # noqa: E402

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
NS = kube.ns
NP = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"
SRC = os.environ.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
INTERNET = "203.0.113.10"
with open(os.path.join(SRC, "conf", "k8s", "networkpolicy.yaml")) as f:
    POLICIES = [d for d in yaml.safe_load_all(f) if d]   # lab VMs, lab Pods
POLICY = next(d for d in POLICIES if d["metadata"]["name"] == "labvm-lab-vms")
PROBE = netprobe.script()
MATRIX = []


def probe_from(vm, ip, port):
    r = kube.guest_exec(vm, f"python3 /tmp/probe.py {ip} {port}", timeout_s=10)
    return r["stdout"].strip() or r["stderr"].strip()


def probe_host(ip, port):
    return netprobe.connect(ip, port, 2)


def check(src, fn, dst, port, want, what):
    got = fn()
    MATRIX.append((src, dst, port, got))
    t.eq(got, want, f"{src} -> {dst}:{port} {want}: {what}")


def vmi_ip(vm):
    r = kube.get("virtualmachineinstances", vm)
    return r.json["status"]["interfaces"][0]["ipAddress"]


def delete_policies():
    for p in kube.request("GET", NP).json.get("items", []):
        kube.request("DELETE", f"{NP}/{p['metadata']['name']}")


delete_policies()
pods = kube.list("pods", "app.kubernetes.io/name=labvm-backend")
BIP = pods[0]["status"]["podIP"] if pods else None
PORTS = sorted({urllib.parse.urlsplit(os.environ[k]).port for k in
                ("LABVM_URL", "LABVM_LIGHTTPD_URL", "LABVM_APACHE_URL") if os.environ.get(k)})
S = {}


@t.test(name="the backend runs as the Pod of the shipped Deployment, on the pod network")
def backend_pod():
    t.eq(len(pods), 1, "one backend Pod")
    with open(os.path.join(SRC, "conf", "k8s", "labvm-backend.yaml")) as f:
        dep = next(d for d in yaml.safe_load_all(f) if d and d.get("kind") == "Deployment")
    want = dep["spec"]["template"]["metadata"]["labels"]
    got = pods[0]["metadata"]["labels"]
    t.eq({k: got.get(k) for k in want}, want, "it carries the Deployment's template labels")
    t.ok(BIP and BIP.startswith("10."), "its address is on the pod network", BIP)
    for pol in POLICIES:
        r = kube.request("POST", NP, pol)
        t.eq(r.status, 201, f"the shipped NetworkPolicy {pol['metadata']['name']} is accepted",
             r.json)


@t.test(name="with the policy applied, labs still start: the backend reaches the agent")
def labs_start():
    for user in ("student191", "student192"):
        api = Api(user)
        s = api.start("linux-basics").json
        S[user] = (api, s)
    for user, (api, s) in S.items():
        final = api.wait_state(s["id"], ("ready", "failed"), 90)
        t.eq(final["state"], "ready", f"{user}'s lab is ready", final.get("error"))
    for user, (api, s) in S.items():
        vm = vm_of(s)
        kube.guest_exec(vm, "cat > /tmp/probe.py <<'EOF'\n" + PROBE + "EOF\n")


@t.test(name="from inside a lab: other guests' agents and the backend refused, internet open")
def from_a_guest():
    vm1, vm2 = vm_of(S["student191"][1]), vm_of(S["student192"][1])
    ip2 = vmi_ip(vm2)
    check("guest", lambda: probe_from(vm1, ip2, 8899), "other guest", 8899, "refused",
          "another guest's agent")
    check("guest", lambda: probe_from(vm1, ip2, 22), "other guest", 22, "refused",
          "any other port of it")
    for port in PORTS + [8080, 7682]:
        check("guest", lambda: probe_from(vm1, BIP, port), "backend", port, "refused",
              "the backend's ports")
    check("guest", lambda: probe_from(vm1, INTERNET, 80), "internet", 80, "open",
          "the stand-in internet host")
    check("guest", lambda: probe_from(vm1, INTERNET, 443), "internet", 443, "open",
          "the stand-in internet host (443)")


@t.test(name="from the backend: the guest's agent open, its other ports refused")
def from_the_backend():
    vm1 = vm_of(S["student191"][1])
    ip1 = vmi_ip(vm1)
    kube.guest_exec(vm1, "nohup python3 -m http.server 8080 >/dev/null 2>&1 &")
    wait_until(lambda: probe_from(vm1, "127.0.0.1", 8080) == "open", 10, 0.2,
               "a student's server on 8080")
    check("backend", lambda: probe_host(ip1, 8899), "guest", 8899, "open", "the agent")
    check("backend", lambda: probe_host(ip1, 8080), "guest", 8080, "refused",
          "a port the student opened (open inside the guest)")
    api, s = S["student191"]
    g = api.grade(s["id"])
    t.eq(g.status, 200, "grading goes through the agent", g.json)


@t.test(name="a student who is root changes address and routes: still contained")
def tampered():
    vm1, vm2 = vm_of(S["student191"][1]), vm_of(S["student192"][1])
    ip1, ip2 = vmi_ip(vm1), vmi_ip(vm2)
    net = ip1.rsplit(".", 1)[0]
    kube.guest_exec(vm1, f"ip route add {ip2}/32 dev eth0; ip route add 0.0.0.0/1 dev eth0; "
                    "ip route add 128.0.0.0/1 dev eth0; ip neigh flush all")
    check("tampered guest", lambda: probe_from(vm1, ip2, 8899), "other guest", 8899, "refused",
          "on-link routes to the other guest change nothing")
    check("tampered guest", lambda: probe_from(vm1, BIP, PORTS[0]), "backend", PORTS[0],
          "refused", "nor to the backend")
    kube.guest_exec(vm1, f"ip addr flush dev eth0; ip addr add {net}.250/24 dev eth0; "
                    f"ip route replace default via {net}.1")
    check("tampered guest", lambda: probe_from(vm1, ip2, 8899), "other guest", 8899, "timeout",
          "another address: its packets are dropped at its port")
    check("tampered guest", lambda: probe_from(vm1, INTERNET, 80), "internet", 80, "timeout",
          "even to the internet")
    kube.guest_exec(vm1, f"ip addr flush dev eth0; ip addr add {ip2}/24 dev eth0; "
                    f"ip route replace default via {net}.1")
    check("tampered guest", lambda: probe_from(vm1, BIP, PORTS[0]), "backend", PORTS[0],
          "timeout", "taking the other guest's address")
    check("backend", lambda: probe_host(ip2, 8899), "other guest", 8899, "open",
          "the other guest's agent is still its own")
    api, s = S["student192"]
    t.eq(api.grade(s["id"]).status, 200, "the other lab still grades")
    for user, (api, s) in S.items():
        api.end(s["id"])


@t.test(name="a policy that misses the backend fails the start at setting_up: agent unreachable")
def policy_typo():
    delete_policies()
    bad = yaml.safe_load(yaml.safe_dump(POLICY))
    bad["metadata"]["name"] = "labvm-lab-vms-typo"
    bad["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"][
        "app.kubernetes.io/name"] = "labvm-backnd"
    r = kube.request("POST", NP, bad)
    t.eq(r.status, 201, "the typo is a valid policy", r.json)
    api = Api("student193")
    s = api.start("test-never-ready").json
    final = api.wait_state(s["id"], ("ready", "failed"), 60)
    t.eq((final["state"], final.get("stage")), ("failed", "setting_up"),
         "failed at setting_up", final)
    err = final.get("error") or ""
    t.ok("agent at" in err and "unreachable" in err, "the error names the agent as unreachable",
         err)
    delete_policies()


@t.test(name="connection matrix")
def matrix():
    for src, dst, port, got in MATRIX:
        t.diag(f"{src:>14} -> {dst}:{port} {got}")
    t.ok(True)


delete_policies()
reset_world(kube, db)
t.done()
