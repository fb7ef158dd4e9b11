#!/usr/bin/python3
"""kubesim --backend-pod FILE --backend-netns: the backend Deployment's Pod
as a sandbox of its own on the pod network (an address of the pod CIDR, a
network namespace held by the simulator, named in STATE/backend-pod.json),
policed by its labels like any pod; the node address is then the node's
again (tests/integration/t195_backend_pod.py runs labvm inside it). The
CronJob of the same file (the reaper) is created too, and a Pod of its Job
is a sandbox of its own (STATE/reaper-pod.json), with the jobTemplate's
labels and the Job controller's: policies see the reaper as the reaper, not
as the backend. A denied connection is dropped, as on Calico and Cilium."""
import ipaddress
import json
import os
import socket

import nsrelay
from simlib import NS, PODS, SRC, Sim, cloud_config, secret, vm, wait_for, wait_running
from tap import T
import netprobe  # noqa: E402

t = T()
sim = Sim("--backend-pod", os.path.join(SRC, "conf", "k8s", "labvm-backend.yaml"),
          "--backend-netns")
A = sim.admin
SEL = "app.kubernetes.io%2Fname%3Dlabvm-backend"
SERVER = ("nohup python3 -c 'import http.server as h; h.HTTPServer((\"0.0.0.0\", 8899), "
          "h.SimpleHTTPRequestHandler).serve_forever()' >/dev/null 2>&1 &")
INFO = {}


def connect(ip, port):
    return netprobe.connect(ip, port, 3)


def from_pod(ip, port):
    return nsrelay.in_netns(INFO["netns"], connect, ip, port)


def from_reaper(ip, port):
    return nsrelay.in_netns(REAPER["netns"], connect, ip, port)


REAPER = {}


def setup():
    with open(os.path.join(sim.dir, "backend-pod.json")) as f:
        INFO.update(json.load(f))
    with open(os.path.join(sim.dir, "reaper-pod.json")) as f:
        REAPER.update(json.load(f))
    c, o = A.post(f"/api/v1/namespaces/{NS}/secrets", secret("a", cloud_config([SERVER])))
    assert c == 201, o
    c, o = A.post(f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines",
                  vm("a", "a", labels={"role": "a"}, disk="container"))
    assert c == 201, o
    wait_running(sim, "a", 20)
    r = A.get(f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstances/a")
    INFO["a"] = r.json["status"]["interfaces"][0]["ipAddress"]
    wait_for(lambda: connect(INFO["a"], 8899) == "open", 20, 0.1, "a's server")


try:
    setup()
except BaseException:
    sim.stop()
    raise


@t.test
def the_pod_is_a_sandbox_of_its_own():
    pods = A.get(f"{PODS}?labelSelector={SEL}").json["items"]
    t.eq(len(pods), 1, "one backend Pod")
    st = pods[0]["status"]
    net = ipaddress.ip_network(INFO["pod_cidr"])
    t.eq(st["podIP"], INFO["ip"], "status.podIP is the address backend-pod.json names")
    t.ok(ipaddress.ip_address(st["podIP"]) in net and st["podIP"] != INFO["node_ip"],
         "an address of the pod CIDR, not the node's", st)
    node = A.get("/api/v1/nodes/node-1").json
    t.eq(st["hostIP"], node["status"]["addresses"][0]["address"], "hostIP is node-1's")
    t.eq(INFO["netns"], f"/proc/{INFO['pid']}/ns/net", "the netns is its holder's")
    t.ok(os.readlink(INFO["netns"]) != os.readlink("/proc/self/ns/net"),
         "a network namespace other than the host's")
    addrs = nsrelay.in_netns(INFO["netns"], lambda: [n for _, n in socket.if_nameindex()])
    t.eq(sorted(addrs), ["eth0", "lo"], "lo and eth0 only")
    t.ok(st["podIP"] != INFO["a"], "not a guest's address")


@t.test
def policed_by_its_labels():
    c, o = A.post(f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies", {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "from-backend", "namespace": NS},
        "spec": {"podSelector": {"matchLabels": {"role": "a"}}, "ingress": [{
            "from": [{"podSelector": {"matchLabels": {
                "app.kubernetes.io/name": "labvm-backend"}}}],
            "ports": [{"port": 8899}]}]}})
    t.eq(c, 201, "the policy is created", o)
    a = INFO["a"]
    t.eq(wait_for(lambda: from_pod(a, 8899) == "open" and "open", 10, 0.1,
                  "the Pod admitted"), "open", "the Pod reaches a:8899")
    name = A.get(f"{PODS}?labelSelector={SEL}").json["items"][0]["metadata"]["name"]
    r = A.patch(f"{PODS}/{name}", {"metadata": {"labels": {"app.kubernetes.io/name": "x"}}})
    t.eq(r.status, 200, "relabelled", r.json)
    t.eq(wait_for(lambda: from_pod(a, 8899) == "timeout" and "timeout", 20, 0.1,
                  "the Pod dropped"), "timeout",
         "relabelled, the Pod's connects are dropped (no reset: it waits out its timeout)")
    t.eq(connect(a, 8899), "open", "the node (the host's .254) is not the Pod: still allowed")
    r = A.patch(f"{PODS}/{name}", {"metadata": {"labels": {
        "app.kubernetes.io/name": "labvm-backend"}}})
    t.eq(r.status, 200, "labels restored", r.json)
    t.eq(wait_for(lambda: from_pod(a, 8899) == "open" and "open", 10, 0.1,
                  "the Pod admitted again"), "open", "admitted again")



@t.test
def the_reaper_is_a_pod_of_the_cronjob_with_its_labels():
    import yaml
    with open(os.path.join(SRC, "conf", "k8s", "labvm-backend.yaml")) as f:
        cj = next(d for d in yaml.safe_load_all(f) if d and d.get("kind") == "CronJob")
    r = A.get(f"/apis/batch/v1/namespaces/{NS}/cronjobs/{cj['metadata']['name']}")
    t.eq(r.status, 200, "the CronJob is created", r.json)
    want = cj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    sel = ",".join(f"{k}={v}" for k, v in want.items()).replace("/", "%2F")
    pods = A.get(f"{PODS}?labelSelector={sel}").json["items"]
    t.eq(len(pods), 1, "one Pod of its Job", [p["metadata"]["name"] for p in pods])
    p = pods[0] if pods else {"metadata": {}, "status": {}}
    labels = p["metadata"].get("labels") or {}
    job = labels.get("batch.kubernetes.io/job-name", "")
    t.ok(job.startswith(cj["metadata"]["name"] + "-") and labels.get("job-name") == job,
         "the Job controller's job-name labels", labels)
    t.ok(labels.get("batch.kubernetes.io/controller-uid") and
         labels.get("controller-uid") == labels.get("batch.kubernetes.io/controller-uid"),
         "and controller-uid", labels)
    t.ok("app.kubernetes.io/name" in labels and labels["app.kubernetes.io/name"] != "labvm-backend",
         "not the backend's labels", labels)
    t.eq(p["metadata"].get("name"), REAPER["name"], "reaper-pod.json names it")
    t.eq(p["status"].get("podIP"), REAPER["ip"], "at the address reaper-pod.json names")
    t.ok(REAPER["ip"] not in (INFO["ip"], INFO["node_ip"]), "an address of its own", REAPER)
    t.ok(os.readlink(REAPER["netns"]) not in (os.readlink(INFO["netns"]),
                                              os.readlink("/proc/self/ns/net")),
         "a network namespace of its own")


@t.test
def the_reaper_is_policed_by_its_own_labels_and_denial_is_a_drop():
    a = INFO["a"]
    # from-backend (above) admits only app.kubernetes.io/name=labvm-backend to a:8899
    t.eq(from_pod(a, 8899), "open", "the backend Pod is admitted")
    t.eq(from_reaper(a, 8899), "timeout",
         "the reaper's Pod is not: its connect is dropped and waits out its timeout")
    c, o = A.post(f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies", {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "from-reaper", "namespace": NS},
        "spec": {"podSelector": {"matchLabels": {"role": "a"}}, "ingress": [{
            "from": [{"podSelector": {"matchLabels": {
                "app.kubernetes.io/name": "labvm-reaper"}}}],
            "ports": [{"port": 8899}]}]}})
    t.eq(c, 201, "a policy for the reaper's label", o)
    t.eq(wait_for(lambda: from_reaper(a, 8899) == "open" and "open", 10, 0.1,
                  "the reaper admitted"), "open", "admitted by its own label")
    t.eq(from_reaper(a, 8080), "timeout", "only to that port")


sim.stop()
t.done()
