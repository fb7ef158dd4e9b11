#!/usr/bin/python3
"""labvm's network boundary, proven on the simulator's pod network, fenced as
every stack is from its start (conf/k8s/networkpolicy.yaml applied as an
operator would; the simulator drops what a policy denies, as Calico and
Cilium do): from inside a lab guest, and from its console, another guest's
agent and the backend's ports are dropped and the stand-in internet host is
reachable; from the backend (labvm's processes, which reach the pod network
as the Pod of conf/k8s/labvm-backend.yaml, with its labels) every guest's
agent is reachable and its other ports are not; the reaper CronJob's Pod
reaches the agents too (the pool's and a start's readiness); a student who,
as root, changes the guest's address or routes stays contained; and a policy
that misses the backend (a selector typo) fails a start at setting_up
naming the agent as unreachable. The shipped policies are restored at the
end (timeout: 300)."""
import asyncio
import json
import os
import urllib.parse

import yaml

import nsrelay
from labconsole import Console
from labtest import (Api, Db, Kube, env, np_path, reset_world, restore_fence, shipped_policies,
                     ticket_url, vm_of, wait_until)
from tap import T
import netprobe  # noqa: E402

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
NS = kube.ns
NP = np_path(kube)
SRC = os.environ.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
INTERNET = "203.0.113.10"
POLICIES = shipped_policies()   # lab VMs, lab Pods
POLICY = next(d for d in POLICIES if d["metadata"]["name"] == "labvm-lab-vms")
PROBE = netprobe.script()
MATRIX = []
FRONT = os.environ.get("LABVM_LIGHTTPD_URL") or env("LABVM_URL")


def probe_from(vm, ip, port):
    r = kube.guest_exec(vm, f"python3 /tmp/probe.py {ip} {port}", timeout_s=10)
    return r["stdout"].strip() or r["stderr"].strip()


def probe_host(ip, port):
    return netprobe.connect(ip, port, 2)


def probe_reaper(ip, port):
    """From the reaper CronJob's Pod (its network namespace and labels)."""
    return nsrelay.in_netns(env("LABVM_REAPER_NETNS"), netprobe.connect, ip, port, 2)


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


pods = kube.list("pods", "app.kubernetes.io/name=labvm-backend")
BIP = pods[0]["status"]["podIP"] if pods else None
PORTS = sorted({urllib.parse.urlsplit(os.environ[k]).port for k in
                ("LABVM_URL", "LABVM_LIGHTTPD_URL", "LABVM_APACHE_URL") if os.environ.get(k)})
S = {}


@t.test(name="the stack is fenced as an operator leaves it: conf/k8s/networkpolicy.yaml applied")
def fenced():
    have = {p["metadata"]["name"]: p for p in kube.request("GET", NP).json.get("items", [])}
    for pol in POLICIES:
        name = pol["metadata"]["name"]
        got = have.get(name)
        t.ok(got is not None, f"{name} is in the namespace before any suite applied it",
             sorted(have))
        if got:
            for k in ("podSelector", "policyTypes"):
                t.eq(got["spec"].get(k), pol["spec"].get(k), f"{name}: {k} as shipped")
            t.eq(json.dumps(got["spec"].get("ingress") or [], sort_keys=True),
                 json.dumps(pol["spec"].get("ingress") or [], sort_keys=True),
                 f"{name}: ingress as shipped")


@t.test(name="the backend runs as the Pod of the shipped Deployment, the reaper as a Pod of "
        "the shipped CronJob, each on the pod network with its template's labels")
def backend_pod():
    t.eq(len(pods), 1, "one backend Pod")
    with open(os.path.join(SRC, "conf", "k8s", "labvm-backend.yaml")) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    dep = next(d for d in docs if d.get("kind") == "Deployment")
    want = dep["spec"]["template"]["metadata"]["labels"]
    got = pods[0]["metadata"]["labels"]
    t.eq({k: got.get(k) for k in want}, want, "it carries the Deployment's template labels")
    t.ok(BIP and BIP.startswith("10."), "its address is on the pod network", BIP)
    cj = next(d for d in docs if d.get("kind") == "CronJob")
    want = cj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    ns, name = env("LABVM_REAPER_POD").split("/")
    rp = kube.get("pods", name, ns=ns).json
    got = rp["metadata"]["labels"]
    t.eq({k: got.get(k) for k in want}, want, "the reaper's Pod carries the jobTemplate's labels")
    t.ok(got.get("batch.kubernetes.io/job-name", "").startswith(cj["metadata"]["name"] + "-"),
         "and the Job controller's job-name label", got)
    t.eq(rp["status"]["podIP"], env("LABVM_REAPER_POD_IP"), "an address of its own")
    t.ok(rp["status"]["podIP"] not in (BIP,), "not the backend's", rp["status"]["podIP"])


@t.test(name="with the policy applied, labs start: the backend reaches the agent")
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


@t.test(name="from inside a lab: other guests' agents and the backend dropped, internet open")
def from_a_guest():
    vm1, vm2 = vm_of(S["student191"][1]), vm_of(S["student192"][1])
    ip2 = vmi_ip(vm2)
    check("guest", lambda: probe_from(vm1, ip2, 8899), "other guest", 8899, "timeout",
          "another guest's agent (dropped, as a real CNI does)")
    check("guest", lambda: probe_from(vm1, ip2, 22), "other guest", 22, "timeout",
          "any other port of it")
    for port in PORTS + [8080, 7682]:
        check("guest", lambda: probe_from(vm1, BIP, port), "backend", port, "timeout",
              "the backend's ports")
    check("guest", lambda: probe_from(vm1, env("LABVM_REAPER_POD_IP"), 8899), "reaper Pod",
          8899, "timeout", "the reaper's Pod")
    check("guest", lambda: probe_from(vm1, INTERNET, 80), "internet", 80, "open",
          "the stand-in internet host")
    check("guest", lambda: probe_from(vm1, INTERNET, 443), "internet", 443, "open",
          "the stand-in internet host (443)")


@t.test(name="typed into a lab's console: a connect to another lab's agent gets no answer")
def from_a_console():
    api, s = S["student191"]
    ip2 = vmi_ip(vm_of(S["student192"][1]))

    async def go():
        c = await Console.open(FRONT, ticket_url(api, s["id"]), "student191")
        try:
            if not await c.opened(60):
                return "console not open: " + bytes(c.out[-200:]).decode("utf-8", "replace")
            # (the quotes keep the typed line's echo from matching the answer)
            await c.send(f"echo R=$(python3 /tmp/probe.py {ip2} 8899 3)=E''ND\r".encode())
            await c.until(lambda x: b"=END\r\n" in x.out, 30)
            text = bytes(c.out).decode("utf-8", "replace")
            j = text.rfind("=END\r\n")
            i = text.rfind("R=", 0, j)
            return text[i + 2:j] if 0 <= i < j else text[-300:]
        finally:
            await c.close()
    got = asyncio.new_event_loop().run_until_complete(go())
    MATRIX.append(("console", "other guest", 8899, got))
    t.eq(got, "timeout", "the other lab's agent does not answer (the seed's promise: root "
         "never leaves the VM)")


@t.test(name="from the backend: every guest's agent open, its other ports dropped")
def from_the_backend():
    vm1 = vm_of(S["student191"][1])
    ip1 = vmi_ip(vm1)
    kube.guest_exec(vm1, "nohup python3 -m http.server 8080 >/dev/null 2>&1 &")
    wait_until(lambda: probe_from(vm1, "127.0.0.1", 8080) == "open", 10, 0.2,
               "a student's server on 8080")
    for user in ("student191", "student192"):
        ip = vmi_ip(vm_of(S[user][1]))
        check("backend", lambda: probe_host(ip, 8899), f"{user}'s guest", 8899, "open",
              "the agent")
    check("backend", lambda: probe_host(ip1, 8080), "guest", 8080, "timeout",
          "a port the student opened (open inside the guest)")
    for user, (api, s) in S.items():
        g = api.grade(s["id"])
        t.eq(g.status, 200, f"grading {user}'s lab goes through its agent", g.json)


@t.test(name="from the reaper CronJob's Pod: every guest's agent open, its other ports dropped")
def from_the_reaper():
    for user in ("student191", "student192"):
        ip = vmi_ip(vm_of(S[user][1]))
        check("reaper Pod", lambda: probe_reaper(ip, 8899), f"{user}'s guest", 8899, "open",
              "the agent (the pool's and a start's readiness)")
    ip1 = vmi_ip(vm_of(S["student191"][1]))
    check("reaper Pod", lambda: probe_reaper(ip1, 8080), "guest", 8080, "timeout",
          "a port the student opened")


@t.test(name="a student who is root changes address and routes: still contained")
def tampered():
    vm1, vm2 = vm_of(S["student191"][1]), vm_of(S["student192"][1])
    ip1, ip2 = vmi_ip(vm1), vmi_ip(vm2)
    net = ip1.rsplit(".", 1)[0]
    kube.guest_exec(vm1, f"ip route add {ip2}/32 dev eth0; ip route add 0.0.0.0/1 dev eth0; "
                    "ip route add 128.0.0.0/1 dev eth0; ip neigh flush all")
    check("tampered guest", lambda: probe_from(vm1, ip2, 8899), "other guest", 8899, "timeout",
          "on-link routes to the other guest change nothing")
    check("tampered guest", lambda: probe_from(vm1, BIP, PORTS[0]), "backend", PORTS[0],
          "timeout", "nor to the backend")
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
    restore_fence(kube)


@t.test(name="connection matrix")
def matrix():
    for src, dst, port, got in MATRIX:
        t.diag(f"{src:>14} -> {dst}:{port} {got}")
    t.ok(True)


restore_fence(kube)
reset_world(kube, db)
t.done()
