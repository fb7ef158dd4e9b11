#!/usr/bin/python3
"""Every manifest labvm can produce (tool_manifests over the shipped and
test lessons) validates strictly against the upstream schemas, and every
cloud-config parses as cloud-init would and keeps labvm's order: agent
first, lab files, setup, and the ready flag last. The NetworkPolicy in
conf/k8s validates against the networking.k8s.io OpenAPI document."""
import json
import re
import os
import subprocess
import sys
import tempfile
import shutil

import yaml

SRC = os.environ.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRC, "tests", "kubesim"))
sys.path.insert(0, os.path.join(SRC, "tests", "lib"))

import resources  # noqa: E402  (the simulator's resource table)
import schema  # noqa: E402  (the simulator's strict validator)
from tap import T  # noqa: E402

t = T()
BIN = os.environ.get("LABVM_BIN") or os.path.join(SRC, "build", "bin")
TOOL = os.path.join(BIN, "..", "tests", "tool_manifests")

lessons = tempfile.mkdtemp()
for d in ("conf/lessons", "tests/lessons"):
    for n in os.listdir(os.path.join(SRC, d)):
        if os.path.isdir(os.path.join(SRC, d, n)):   # guides/: the lessons' guides
            shutil.copytree(os.path.join(SRC, d, n), os.path.join(lessons, n), dirs_exist_ok=True)
        else:
            shutil.copy(os.path.join(SRC, d, n), lessons)
docs = [json.loads(line) for line in
        subprocess.run([TOOL, lessons], check=True, capture_output=True, text=True).stdout.splitlines()]
shutil.rmtree(lessons)
v = schema.Validator()


@t.test(name="the upstream schemas are present (validation cannot silently pass)")
def schemas_present():
    t.ok(v.kv is not None and v.cdi is not None, "kubevirt and cdi swagger loaded", v.ref)
    t.ok(v.models.mod is not None, "python3-kubernetes models loaded for core kinds")


def resource_of(obj):
    group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
    return resources.BY_KIND[(group, obj["kind"])]


objs = [d for d in docs if d.get("kind") in ("VirtualMachine", "Secret", "Pod",
                                              "NetworkAttachmentDefinition")]
pods = [d for d in docs if d.get("kind") == "Pod"]
cfgs = [d for d in docs if d.get("kind") == "cloud-config"]


@t.test(name=f"{len(objs)} manifests (VMs for every disk source, Secrets, Pods) validate strictly")
def manifests_validate():
    t.require(len(objs) >= 10, f"enough manifests produced: {len(objs)}")
    t.ok({o["kind"] for o in objs} == {"VirtualMachine", "Secret", "Pod",
                                       "NetworkAttachmentDefinition"},
         "VMs, Secrets, the session network's NAD and (pod lessons) Pods",
         {o["kind"] for o in objs})
    kinds = {(o["kind"], next((vol for vol in o.get("spec", {}).get("template", {}).get("spec", {})
                               .get("volumes", []) if vol["name"] == "rootdisk"), {}).keys()
              .__str__()) for o in objs}
    t.ok(any("ephemeral" in k[1] for k in kinds) and any("containerDisk" in k[1] for k in kinds)
         and any("dataVolume" in k[1] for k in kinds), "every root disk kind covered", kinds)
    for o in objs:
        errs = v.validate(resource_of(o), o)
        t.ok(not errs, f"{o['kind']} {o['metadata']['name']} ({o['metadata']['labels'].get('labvm.io/lesson')})",
             [f"{e.path}: {e.msg}" for e in errs])


@t.test(name=f"{len(pods)} lab Pods: zero capabilities, no token, limits, the flag probe")
def lab_pods():
    t.ok(len(pods) >= 3, "pod lessons produce Pods", len(pods))
    for p in pods:
        name = p["metadata"]["labels"]["labvm.io/lesson"]
        spec = p["spec"]
        c = spec["containers"][0]
        t.eq(set(p["metadata"]["labels"]), {"labvm.io/lab-session", "labvm.io/session-id",
                                            "labvm.io/environment", "labvm.io/lesson",
                                            "labvm.io/lab-pod"},
             f"{name}: the four labels and the lab-pod mark")
        t.eq(p["metadata"]["labels"]["labvm.io/lab-pod"], "true", f"{name}: lab-pod true")
        t.eq(spec["automountServiceAccountToken"], False, f"{name}: no token")
        t.eq(spec["restartPolicy"], "Never", f"{name}: never restarted")
        sc = c["securityContext"]
        t.eq((sc["capabilities"], sc["allowPrivilegeEscalation"], sc["privileged"],
              sc["seccompProfile"]), ({"drop": ["ALL"]}, False, False, {"type": "RuntimeDefault"}),
             f"{name}: zero capabilities")
        t.ok(c["resources"]["requests"]["memory"] and c["resources"]["limits"]["memory"],
             f"{name}: requests and limits")
        t.eq(c["readinessProbe"]["exec"]["command"], ["test", "-e", "/run/labvm/ready"],
             f"{name}: readiness is the flag")
        script = c["command"][2]
        t.ok(script.index("setup.sh") < script.index(": > /run/labvm/ready"),
             f"{name}: the flag after setup")
        vol = spec["volumes"][0]["secret"]
        t.eq(vol["secretName"], p["metadata"]["name"] + "-files", f"{name}: its Secret")
        t.ok(all(not it["path"].startswith("/") and ".." not in it["path"].split("/")
                 for it in vol.get("items", [])), f"{name}: item paths are relative")


@t.test(name="only lab Pods carry the lab-pod mark (never a VM, its templates or a Secret)")
def lab_pod_mark_on_pods_only():
    def label_sets(o):
        yield o["kind"], o["metadata"].get("labels") or {}
        spec = o.get("spec") or {}
        yield "template", (spec.get("template") or {}).get("metadata", {}).get("labels") or {}
        for d in spec.get("dataVolumeTemplates") or []:
            yield "dataVolumeTemplate", (d.get("metadata") or {}).get("labels") or {}
    marked = sorted({k for o in objs for k, ls in label_sets(o) if "labvm.io/lab-pod" in ls})
    t.eq(marked, ["Pod"], "the mark is on Pods alone")
    dvts = [d for o in objs for d in (o.get("spec") or {}).get("dataVolumeTemplates") or []]
    t.ok(dvts, "datavolume lessons produce dataVolumeTemplates", len(dvts))


@t.test(name="a schema violation is caught (the validator is not a no-op)")
def validator_bites():
    vm = json.loads(json.dumps(next(o for o in objs if o["kind"] == "VirtualMachine")))
    vm["spec"]["template"]["spec"]["domain"]["cpu"]["corez"] = 1
    t.ok(v.validate(resource_of(vm), vm), "an unknown field is an error")
    vm = json.loads(json.dumps(next(o for o in objs if o["kind"] == "VirtualMachine")))
    vm["spec"]["runStrategy"] = 5
    t.ok(v.validate(resource_of(vm), vm), "a mistyped field is an error")


@t.test(name="no manifest carries inline user-data; every VM uses the Secret")
def no_inline():
    for o in objs:
        if o["kind"] != "VirtualMachine":
            continue
        ci = [vol for vol in o["spec"]["template"]["spec"]["volumes"] if "cloudInitNoCloud" in vol]
        multi = "labvm.io/machine" in o["metadata"]["labels"]
        t.eq([list(c["cloudInitNoCloud"]) for c in ci],
             [["secretRef", "networkDataSecretRef"] if multi else ["secretRef"]],
             o["metadata"]["name"])


@t.test(name="a session of several machines: one NAD (a private bridge), each VM on it")
def session_network():
    nads = [o for o in objs if o["kind"] == "NetworkAttachmentDefinition"]
    t.ok(nads, "a NetworkAttachmentDefinition is produced")
    for nad in nads:
        conf = json.loads(nad["spec"]["config"])
        t.eq((conf["type"], conf["name"]), ("bridge", nad["metadata"]["name"]),
             "a bridge CNI config named after the NAD")
        t.ok(len(conf["bridge"]) <= 15, "the bridge name fits a Linux interface name",
             conf["bridge"])
        t.ok("labvm.io/machine" not in nad["metadata"]["labels"]
             and nad["metadata"]["labels"]["labvm.io/lab-session"] == "true",
             "labelled like the session's objects (no machine label)")
        bad = json.loads(json.dumps(nad))
        bad["spec"]["bridge"] = "x"
        t.ok(v.validate(resource_of(bad), bad), "an unknown spec field is an error")
        bad["spec"] = {"config": {"type": "bridge"}}
        t.ok(v.validate(resource_of(bad), bad), "a config that is not a string is an error")
    vms = [o for o in objs if o["kind"] == "VirtualMachine" and
           "labvm.io/machine" in o["metadata"]["labels"]]
    t.ok(len(vms) >= 3, "machines' VMs", len(vms))
    for vm in vms:
        spec = vm["spec"]["template"]["spec"]
        m = vm["metadata"]["labels"]["labvm.io/machine"]
        t.eq(vm["spec"]["template"]["metadata"]["labels"]["labvm.io/machine"], m,
             "the machine label reaches the VMI")
        t.eq(vm["metadata"]["name"].rsplit("-", 1)[-1] if m.count("-") == 0 else m, m,
             "the VM's name ends in the machine's")
        t.eq(spec["hostname"], m, "hostname is the machine's name")
        nets = {n["name"]: n for n in spec["networks"]}
        ifs = {i["name"]: i for i in spec["domain"]["devices"]["interfaces"]}
        t.eq(sorted(nets), ["default", "session"], "pod network and session network")
        t.eq(nets["session"]["multus"]["networkName"], nads[0]["metadata"]["name"],
             "the session network is the NAD")
        t.ok("bridge" in ifs["session"] and "masquerade" in ifs["default"],
             "bridge binding on the session network, masquerade on the pod network")
    nd = [d for d in cfgs if d.get("networkdata")]
    for d in nd:
        n = yaml.safe_load(d["networkdata"])
        t.eq(n["version"], 2, f"{d['machine']}: network config version 2")
        addrs = [a for e in n["ethernets"].values() for a in e.get("addresses", [])]
        t.eq(len(addrs), 1, f"{d['machine']}: one static address", addrs)
        run = [" ".join(c) for c in yaml.safe_load(d["userdata"])["runcmd"]]
        t.ok("/etc/hosts" in run[0] and "worker1" in run[0],
             f"{d['machine']}: the session's names go to /etc/hosts before the setup", run[0])


CLOUD_INIT_KEYS = {"bootcmd", "write_files", "runcmd"}


@t.test(name=f"{len(cfgs)} cloud-configs: agent first, lab files, setup, ready flag last")
def cloud_configs():
    vm_lessons = sorted(json.load(open(os.path.join(SRC, d, n)))["id"]
                        for d in ("conf/lessons", "tests/lessons")
                        for n in os.listdir(os.path.join(SRC, d)) if n.endswith(".json")
                        and json.load(open(os.path.join(SRC, d, n))).get("runtime", "vm") == "vm")
    t.require(len(vm_lessons) >= 9, f"the VM lessons are found: {vm_lessons}")
    t.eq(sorted({d["lesson"] for d in cfgs}), vm_lessons,
         "a cloud-config for every VM lesson (one per machine), each checked")
    agent = open(os.path.join(SRC, "fcgi-app", "guest", "agent.py")).read()
    for d in cfgs:
        ud = d["userdata"]
        lesson = json.load(open(next(os.path.join(SRC, p, f"{d['lesson']}.json")
                                     for p in ("conf/lessons", "tests/lessons")
                                     if os.path.exists(os.path.join(SRC, p, f"{d['lesson']}.json")))))
        t.ok(ud.startswith("#cloud-config\n"), f"{d['lesson']}: #cloud-config header")
        cc = yaml.safe_load(ud)
        t.eq(set(cc), CLOUD_INIT_KEYS, f"{d['lesson']}: only modules cloud-init runs")
        files = cc["write_files"]
        paths = [f["path"] for f in files]
        lfiles = lesson.get("files", [])
        if d.get("machine"):
            m = next(m for m in lesson["machines"] if m["name"] == d["machine"])
            lfiles = m.get("files", lfiles)
        want = (["/etc/labvm/agent-token"]
                + [f["path"] for f in lfiles] + ["/opt/labvm/setup.sh"])
        t.eq(paths, want, f"{d['lesson']}: write_files order (the agent comes with bootcmd)")
        t.eq(files[0]["permissions"], "0600", f"{d['lesson']}: token file mode")
        boot0 = cc["bootcmd"][0][2]
        t.ok("serial-getty@ttyS0.service.d/autologin.conf" in boot0 and "--autologin root" in boot0
             and "ExecStart=\nExecStart=-/sbin/agetty -o '-p -f -- \\\\u'" in boot0,
             f"{d['lesson']}: bootcmd writes the autologin drop-in first (clears ExecStart)", boot0)
        t.ok("--autologin root %I $TERM\n" in boot0 and " - $TERM" not in boot0,
             f"{d['lesson']}: agetty is given the tty (%I), not stdin (-: systemd >= 250 only)",
             boot0)
        t.ok(all(isinstance(f["permissions"], str) for f in files),
             f"{d['lesson']}: modes stay strings (YAML would read 0644 as a number)")
        t.ok(all(isinstance(c, list) for c in cc["bootcmd"] + cc["runcmd"]),
             f"{d['lesson']}: commands are argv lists")
        boot1 = cc["bootcmd"][1][2]
        t.ok("agent.py" in boot1 and "python3 -I -S /opt/labvm/agent.py" in boot1,
             f"{d['lesson']}: the agent starts in bootcmd", boot1[-400:])
        here = re.search(r"cat > /opt/labvm/agent\.py\.new <<'LABVM_AGENT_EOF'\n(.*?)^LABVM_AGENT_EOF$",
                         boot1, re.S | re.M)
        t.ok(here is not None and here.group(1) == agent,
             f"{d['lesson']}: bootcmd writes the agent verbatim (here-document)")
        run = [" ".join(c) for c in cc["runcmd"]]
        t.ok("setup.sh" in run[-2] and "setup.rc" in run[-2], f"{d['lesson']}: setup then its rc")
        t.ok(run[-1].startswith("sh -c [ \"$(cat /var/lib/labvm/setup.rc") and
             run[-1].endswith("touch /var/lib/labvm/ready"),
             f"{d['lesson']}: the last line creates the flag only after setup exited 0", run[-1])
        t.ok("while [ ! -e /var/lib/labvm/agent.listening ]" in run[-1]
             and "rm -f /var/lib/labvm/agent.listening" in boot1,
             f"{d['lesson']}: ... and once the agent listens (its marker, cleared at boot)", run[-1])


NP_CHECK = []   # the NetworkPolicy validator, for dns_variants


@t.test(name="every pod of labvm-backend.yaml that calls agents is admitted to 8899 by its labels")
def agent_callers_admitted():
    import labelsel
    k8s = os.path.join(SRC, "conf", "k8s")
    docs = [d for d in yaml.safe_load_all(open(os.path.join(k8s, "labvm-backend.yaml"))) if d]
    dep = next(d for d in docs if d.get("kind") == "Deployment")
    cj = next(d for d in docs if d.get("kind") == "CronJob")
    callers = {"the backend Deployment's pods": dep["spec"]["template"]["metadata"]["labels"],
               "the reaper CronJob's pods":
               cj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]}
    vms = next(d for d in yaml.safe_load_all(open(os.path.join(k8s, "networkpolicy.yaml")))
               if d and d["metadata"]["name"] == "labvm-lab-vms")
    for what, labels in callers.items():
        ok = any(p.get("port") == 8899 for r in vms["spec"]["ingress"] for p in r["ports"]
                 if any(set(peer) == {"podSelector"} and
                        labelsel.match_label_selector_obj(peer["podSelector"], labels)
                        for peer in r.get("from") or []))
        t.ok(ok, f"{what} ({labels.get('app.kubernetes.io/name')}) reach the agent", labels)


@t.test(name="the NetworkPolicy in conf/k8s validates against networking.k8s.io/v1")
def network_policy():
    ref = v.ref
    doc = json.load(open(os.path.join(ref, "k8s-networking.k8s.io-v1-openapi.json")))
    comps = doc["components"]["schemas"]

    def check(s, val, path, errs):
        while "$ref" in s:
            s = comps[s["$ref"].split("/")[-1]]
        if "allOf" in s:
            for sub in s["allOf"]:
                check(sub, val, path, errs)
            return
        typ = s.get("type")
        if s.get("x-kubernetes-int-or-string") or s.get("format") == "int-or-string":
            if not isinstance(val, (int, str)):
                errs.append(f"{path}: want int or string")
            return
        if typ == "object" or "properties" in s:
            if not isinstance(val, dict):
                errs.append(f"{path}: want object")
                return
            props = s.get("properties", {})
            for k, x in val.items():
                if k in props:
                    check(props[k], x, f"{path}.{k}", errs)
                elif "additionalProperties" in s:
                    check(s["additionalProperties"], x, f"{path}.{k}", errs)
                else:
                    errs.append(f"{path}.{k}: unknown field")
            for k in s.get("required", []):
                if k not in val:
                    errs.append(f"{path}.{k}: required")
        elif typ == "array":
            if not isinstance(val, list):
                errs.append(f"{path}: want array")
                return
            for i, x in enumerate(val):
                check(s.get("items", {}), x, f"{path}[{i}]", errs)
        elif typ == "string" and not isinstance(val, str):
            errs.append(f"{path}: want string")
        elif typ == "integer" and not (isinstance(val, int) and not isinstance(val, bool)):
            errs.append(f"{path}: want integer")
        elif typ == "boolean" and not isinstance(val, bool):
            errs.append(f"{path}: want boolean")
    name = next(k for k in comps if k.endswith("networking.v1.NetworkPolicy"))
    for npol in yaml.safe_load_all(open(os.path.join(SRC, "conf", "k8s", "networkpolicy.yaml"))):
        errs = []
        check({"$ref": f"#/components/schemas/{name}"}, npol, "", errs)
        t.ok(not errs, f"NetworkPolicy {npol['metadata']['name']}", errs)
        spec = npol["spec"]
        t.eq(sorted(spec["policyTypes"]), ["Egress", "Ingress"], "both directions isolated")
        pods_only = {"key": "kubevirt.io", "operator": "Exists"} not in \
            spec["podSelector"].get("matchExpressions", [])
        t.eq([p["port"] for r in spec.get("ingress", []) for p in r["ports"]],
             [] if pods_only else [8899],
             "lab Pods: no ingress at all" if pods_only else "ingress only to the agent port")
        sel = spec["podSelector"]
        if npol["metadata"]["name"] == "labvm-lab-pods":
            t.eq(sel, {"matchLabels": {"labvm.io/lab-pod": "true"}},
                 "lab Pods are selected by their mark alone")
        elif pods_only:
            t.ok({"key": "cdi.kubevirt.io", "operator": "DoesNotExist"} in
                 sel.get("matchExpressions", []) and
                 {"key": "labvm.io/lab-pod", "operator": "DoesNotExist"} in
                 sel.get("matchExpressions", []),
                 "the unmarked Pods' policy selects no CDI pod and no marked Pod", sel)
        bad = dict(npol, spec=dict(spec, podSelectr={}))
        errs = []
        check({"$ref": f"#/components/schemas/{name}"}, bad, "", errs)
        t.ok(errs, "a misspelt field would be caught")
    NP_CHECK.append(lambda obj, errs: check({"$ref": f"#/components/schemas/{name}"}, obj, "",
                                            errs))


@t.test(name="the DNS variants in conf/k8s/dns add DNS egress only, for exactly the fenced pods")
def dns_variants():
    k8s = os.path.join(SRC, "conf", "k8s")
    fence = [d for d in yaml.safe_load_all(open(os.path.join(k8s, "networkpolicy.yaml"))) if d]
    sels = [json.dumps(f["spec"]["podSelector"], sort_keys=True) for f in fence]
    # the default DNS rule is one and the same in both fence policies
    dns_rules = [[r for r in f["spec"]["egress"] if r.get("ports")] for f in fence]
    t.eq(len({json.dumps(r, sort_keys=True) for r in dns_rules}), 1,
         "both fence policies have the same DNS rule", dns_rules)
    files = sorted(f for f in os.listdir(os.path.join(k8s, "dns")) if f.endswith(".yaml"))
    t.eq(files, ["nodelocaldns.yaml", "openshift.yaml"], "the shipped variants")
    for fn in files:
        docs = [d for d in yaml.safe_load_all(open(os.path.join(k8s, "dns", fn))) if d]
        t.eq(sorted(json.dumps(d["spec"]["podSelector"], sort_keys=True) for d in docs),
             sorted(sels), f"{fn}: one policy per fence policy, with its selector")
        for d in docs:
            errs = []
            if NP_CHECK:
                NP_CHECK[0](d, errs)
            t.ok(NP_CHECK and not errs, f"{fn}: {d['metadata']['name']} validates", errs)
            spec = d["spec"]
            t.eq(spec.get("policyTypes"), ["Egress"], f"{fn}: egress only (isolates nothing new)")
            t.ok("ingress" not in spec, f"{fn}: no ingress rule")
            ports = {(p.get("protocol"), p.get("port")) for r in spec["egress"] for p in r["ports"]}
            t.ok(ports and {p for _, p in ports} <= {53, 5353} and
                 {pr for pr, _ in ports} == {"UDP", "TCP"}, f"{fn}: DNS ports only", ports)
            for r in spec["egress"]:
                for peer in r["to"]:
                    cidr = (peer.get("ipBlock") or {}).get("cidr", "")
                    t.ok(cidr.endswith("/32") if cidr else
                         bool(peer.get("namespaceSelector") and peer.get("podSelector")),
                         f"{fn}: a /32 or a namespace's pods, never a wide peer", peer)


t.done()
