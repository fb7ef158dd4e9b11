#!/usr/bin/python3
"""kubesim --dns kube-dns,nodelocal,openshift: the cluster's DNS endpoints
(a CoreDNS Pod k8s-app=kube-dns in kube-system on 53, NodeLocal DNSCache on
169.254.20.10:53, OpenShift's dns-default Pod in openshift-dns on 5353), and
which of them labvm's shipped policies admit from a lab VM: with
conf/k8s/networkpolicy.yaml alone (the default) only kube-dns; with
conf/k8s/dns/nodelocaldns.yaml added, NodeLocal DNSCache too; with
conf/k8s/dns/openshift.yaml added, OpenShift's DNS too. A denied query is
dropped (a timeout), as on Calico and Cilium (timeout: 240)."""
import base64
import json
import os

import yaml

from simlib import NS, SRC, Sim, cloud_config, secret, vm, wait_for, wait_running
from tap import T
import netprobe  # noqa: E402

t = T()
K8S = os.path.join(SRC, "conf", "k8s")
sim = Sim("--dns", "kube-dns,nodelocal,openshift",
          "--seed", os.path.join(K8S, "networkpolicy.yaml"))
A = sim.admin
NP = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"
DNS = {}
MATRIX = []


def b64file(path, text):
    return (f"- path: {path}\n  encoding: b64\n  content: "
            f"{base64.b64encode(text.encode()).decode()}\n")


def setup():
    with open(os.path.join(sim.dir, "cluster-dns.json")) as f:
        DNS.update(json.load(f))
    ud = cloud_config(["touch /tmp/up"], b64file("/opt/probe.py", netprobe.script()))
    c, o = A.post(f"/api/v1/namespaces/{NS}/secrets", secret("a", ud))
    assert c == 201, o
    # a lab VM as labvm makes one: its launcher pod is what the fence selects
    c, o = A.post(f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines",
                  vm("a", "a", disk="container"))
    assert c == 201, o
    wait_running(sim, "a", 30)
    wait_for(lambda: sim.exec("a", "test -e /tmp/up")["exit_code"] == 0, 20, what="a's probe")


try:
    setup()
except BaseException:
    sim.stop()
    raise


def query(mode, proto):
    d = DNS[mode]
    r = sim.exec("a", f"python3 /opt/probe.py dns {d['ip']} {d['port']} 2 {proto}")
    return r["stdout"].strip() or r["stderr"].strip()


def expect(mode, want, what):
    for proto in ("udp", "tcp"):
        try:
            got = wait_for(lambda: (lambda g: g if g.startswith(want) else None)(
                query(mode, proto)), 8, 0.2, what)
        except TimeoutError:
            got = query(mode, proto)
        MATRIX.append((STAGE[0], mode, proto, got))
        t.ok(got.startswith(want), f"{STAGE[0]}: {mode} over {proto}: {want} ({what})", got)


def apply(path):
    with open(path) as f:
        for d in yaml.safe_load_all(f):
            if d:
                c, o = A.post(NP, d)
                assert c == 201, (c, o)


def delete(path):
    with open(path) as f:
        for d in yaml.safe_load_all(f):
            if d:
                A.delete(f"{NP}/{d['metadata']['name']}")


STAGE = ["default"]


@t.test
def the_endpoints_are_pods_of_their_namespaces():
    t.eq(sorted(DNS), ["kube-dns", "nodelocal", "openshift"], "three endpoints", DNS)
    want = {"kube-dns": ("kube-system", {"k8s-app": "kube-dns"}, 53),
            "openshift": ("openshift-dns", {"dns.operator.openshift.io/daemonset-dns": "default"},
                          5353),
            "nodelocal": ("kube-system", {"k8s-app": "node-local-dns"}, 53)}
    for mode, (ns, labels, port) in want.items():
        pns, name = DNS[mode]["pod"].split("/")
        p = A.get(f"/api/v1/namespaces/{pns}/pods/{name}").json
        t.eq(pns, ns, f"{mode}: in {ns}")
        t.eq({k: (p["metadata"].get("labels") or {}).get(k) for k in labels}, labels,
             f"{mode}: labelled {labels}")
        t.eq(DNS[mode]["port"], port, f"{mode}: port {port}")
        t.eq(p["status"]["phase"], "Running", f"{mode}: Running")
    nl = A.get("/api/v1/namespaces/{}/pods/{}".format(*DNS["nodelocal"]["pod"].split("/"))).json
    t.eq(nl["spec"].get("hostNetwork"), True, "NodeLocal DNSCache is a hostNetwork pod")
    t.eq(DNS["nodelocal"]["ip"], "169.254.20.10", "answering on 169.254.20.10")


@t.test
def a_guest_resolves_through_the_cluster_dns():
    # the kubelet's ClusterFirst resolv.conf (by DHCP inside a VM): the kube-dns
    # pod, the namespace's search domains; resolved past the fence
    conf = sim.exec("a", "cat /etc/resolv.conf")["stdout"]
    t.ok(f"nameserver {DNS['kube-dns']['ip']}" in conf, "nameserver: the kube-dns pod", conf)
    t.ok(f"search {NS}.svc.cluster.local svc.cluster.local cluster.local" in conf,
         "search domains of the namespace", conf)
    r = sim.exec("a", "getent ahostsv4 example.org | head -1")
    t.ok(r["stdout"].startswith("203.0.113.10"), "a name resolves (through the fence)", r)


@t.test
def unfenced_every_endpoint_answers():
    # the endpoints work: without any policy each one answers
    saved = A.get(NP).json["items"]
    for p in saved:
        A.delete(f"{NP}/{p['metadata']['name']}")
    STAGE[0] = "no policy"
    try:
        for mode in ("kube-dns", "nodelocal", "openshift"):
            expect(mode, "answer 203.0.113.10", "the endpoint answers")
    finally:
        apply(os.path.join(K8S, "networkpolicy.yaml"))


@t.test
def the_default_policy_admits_kube_dns_only():
    STAGE[0] = "networkpolicy.yaml"
    expect("kube-dns", "answer", "k8s-app=kube-dns in kube-system, port 53")
    expect("nodelocal", "timeout", "169.254.0.0/16 is excepted and it is no kube-dns pod")
    expect("openshift", "timeout", "another namespace, labels and port")


@t.test
def the_nodelocal_variant_adds_nodelocal_dnscache():
    STAGE[0] = "+ dns/nodelocaldns.yaml"
    f = os.path.join(K8S, "dns", "nodelocaldns.yaml")
    apply(f)
    expect("nodelocal", "answer", "169.254.20.10:53 admitted")
    expect("kube-dns", "answer", "kube-dns still (policies add up)")
    expect("openshift", "timeout", "still not OpenShift's")
    delete(f)
    STAGE[0] = "- dns/nodelocaldns.yaml"
    expect("nodelocal", "timeout", "taken back")


@t.test
def the_openshift_variant_adds_openshift_dns():
    STAGE[0] = "+ dns/openshift.yaml"
    f = os.path.join(K8S, "dns", "openshift.yaml")
    apply(f)
    expect("openshift", "answer", "openshift-dns dns-default pods on 5353 admitted")
    expect("nodelocal", "timeout", "not NodeLocal DNSCache")
    delete(f)


@t.test
def matrix():
    for stage, mode, proto, got in MATRIX:
        t.diag(f"{stage:>24}  {mode:>9}/{proto}: {got}")
    t.ok(True, "matrix printed")


sim.stop()
t.done()
