#!/usr/bin/python3
"""Starting and ending a lab through each front end: the session row, the
VM and the cloud-init Secret in the cluster, labels, ownership, deletion."""
import base64
import http.client

import yaml

from labtest import Api, Db, Kube, PREFIX, env, frontends, reset_world, secret_of, vm_of
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
ENV = env("LABVM_ENVIRONMENT")


def check_labels(obj, sid, lesson, what):
    labels = obj["metadata"].get("labels", {})
    t.eq(labels.get(f"{PREFIX}/lab-session"), "true", f"{what}: lab-session marker")
    t.eq(labels.get(f"{PREFIX}/session-id"), sid, f"{what}: session-id label")
    t.eq(labels.get(f"{PREFIX}/environment"), ENV, f"{what}: environment label")
    t.eq(labels.get(f"{PREFIX}/lesson"), lesson, f"{what}: lesson label")


for fe, url in frontends():
    api = Api("student101", base=url)
    state = {}

    @t.test(name=f"{fe}: POST /api/sessions answers 201 with a starting VM session")
    def start():
        r = api.start("linux-basics")
        t.require(r.status == 201, f"status 201, got {r}")
        s = r.json
        state["s"] = s
        t.eq(s["lesson"], "linux-basics", "lesson")
        t.eq(s["runtime"], "vm", "runtime recorded")
        t.ok(s["state"] in ("starting", "ready"), "state starting", s["state"])
        t.eq(s["disk"], {"source": "containerdisk", "fallback_reason": None}, "disk")
        t.ok(s["created_at"] and s["submitted_at"] and s["created_at"] <= s["submitted_at"],
             "created_at <= submitted_at", s)
        t.ok(s["expires_at"] > s["created_at"], "expires after creation")
        t.eq(len(s["vms"]), 1, "one VM")
        t.ok(s["created_at"].endswith("Z"), "RFC 3339 UTC times", s["created_at"])
        row = db.one("SELECT user_name, runtime, state, environment FROM sessions WHERE id = %s",
                     s["id"])
        t.eq(row, ("student101", "vm", "starting", ENV), "the database row")

    @t.test(name=f"{fe}: the VM exists, labelled on VM and template, with the Secret as cloud-init")
    def vm_present():
        s = state["s"]
        r = kube.get("virtualmachines", vm_of(s))
        t.require(r.status == 200, f"VM exists: {r}")
        vm = r.json
        check_labels(vm, s["id"], "linux-basics", "VM")
        tmpl = vm["spec"]["template"]
        check_labels(tmpl, s["id"], "linux-basics", "VM template")
        t.eq(vm["spec"].get("runStrategy"), "Always", "runStrategy")
        t.ok("running" not in vm["spec"], "no deprecated spec.running")
        vols = {v["name"]: v for v in tmpl["spec"]["volumes"]}
        t.eq(vols["cloudinitdisk"]["cloudInitNoCloud"], {"secretRef": {"name": secret_of(s)}},
             "cloud-init through secretRef, never inline")
        t.eq(vols["rootdisk"]["containerDisk"]["image"], "quay.io/containerdisks/debian:12",
             "containerDisk root")
        t.eq(tmpl["spec"]["domain"]["resources"]["requests"]["memory"], "1Gi", "memory")
        ifs = tmpl["spec"]["domain"]["devices"]["interfaces"]
        t.eq(ifs, [{"name": "default", "masquerade": {}}], "masquerade on the pod network")

    @t.test(name=f"{fe}: the Secret is labelled, owned by the VM, and holds the cloud-config")
    def secret_present():
        s = state["s"]
        r = kube.get("secrets", secret_of(s))
        t.require(r.status == 200, f"Secret exists: {r}")
        sec = r.json
        check_labels(sec, s["id"], "linux-basics", "Secret")
        vm = kube.get("virtualmachines", vm_of(s)).json
        owners = sec["metadata"].get("ownerReferences", [])
        # every field, exactly: blockOwnerDeletion false needs no update on the
        # VM's finalizers (which rbac.yaml does not grant), no controller claim
        t.eq(owners, [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                       "name": vm_of(s), "uid": vm["metadata"]["uid"],
                       "blockOwnerDeletion": False}], "owner reference to the VM")
        ud = base64.b64decode(sec["data"]["userdata"]).decode()
        t.ok(ud.startswith("#cloud-config\n"), "a cloud-config document")
        cc = yaml.safe_load(ud)
        paths = [f["path"] for f in cc["write_files"]]
        t.ok(paths.index("/etc/labvm/agent-token") < paths.index("/root/lab/README")
             < paths.index("/opt/labvm/setup.sh"), "token, then lab files, then setup", paths)
        t.ok("cat > /opt/labvm/agent.py.new" in " ".join(cc["bootcmd"][1])
             and "/opt/labvm/agent.py" not in paths,
             "the agent comes with bootcmd (started before write_files)", paths)
        tok = [f for f in cc["write_files"] if f["path"] == "/etc/labvm/agent-token"][0]
        t.eq(tok["permissions"], "0600", "token file mode")
        t.ok(len(tok["content"]) >= 32, "a long token")
        t.eq(db.one("SELECT agent_token FROM session_vms WHERE session_id = %s", s["id"]),
             (tok["content"].strip(),), "the token the API uses for this VM's agent")
        last = cc["runcmd"][-1]
        t.ok("/var/lib/labvm/ready" in " ".join(last) and "setup.rc" in " ".join(last),
             "the ready flag is the last line, conditional on setup", last)
        t.ok(len(ud) > 2048, "larger than KubeVirt's inline limit (hence the Secret)", len(ud))

    @t.test(name=f"{fe}: a second start names the open session (409)")
    def second_start():
        r = api.start("debian-golden")
        t.eq(r.status, 409, "status")
        t.eq((r.json or {}).get("error"), "session_exists", "error code")
        t.eq(((r.json or {}).get("session") or {}).get("id"), state["s"]["id"], "names the open one")

    @t.test(name=f"{fe}: GET current and by id answer the session; another user gets 404")
    def read():
        sid = state["s"]["id"]
        t.eq(api.current().json["id"], sid, "current")
        t.eq(api.get(sid).status, 200, "by id")
        other = Api("student102", base=url)
        t.eq(other.get(sid).status, 404, "someone else's session does not exist")
        t.eq(other.end(sid).status, 404, "nor can it be ended by them")
        t.eq(other.grade(sid).status, 404, "nor graded")
        t.eq(other.ticket(sid).status, 404, "nor ticketed")
        t.eq(api.get("00000000-0000-4000-8000-000000000000").status, 404, "unknown id")
        t.eq(api.get("not-a-uuid").status, 404, "malformed id")

    @t.test(name=f"{fe}: DELETE ends the session and deletes VM and Secret; idempotent")
    def end():
        s = state["s"]
        r = api.end(s["id"])
        t.eq(r.status, 200, "status")
        t.eq(r.json["state"], "ended", "state")
        t.eq(r.json["end_reason"], "user", "end_reason")
        t.ok(r.json["ended_at"], "ended_at set")
        t.eq(kube.get("secrets", secret_of(s)).status, 404, "Secret deleted explicitly")
        vm = kube.get("virtualmachines", vm_of(s))
        t.ok(vm.status == 404 or vm.json["metadata"].get("deletionTimestamp"),
             "VM deleted (or terminating)", vm.status)
        r2 = api.end(s["id"])
        t.eq((r2.status, r2.json["state"]), (200, "ended"), "a second DELETE is harmless")
        t.eq(api.current().status, 404, "no current session any more")
        t.eq(db.one("SELECT deleted_at IS NOT NULL FROM session_vms WHERE session_id = %s",
                    s["id"]), (True,), "the VM row is marked deleted")



def agent_ready(ip, token):
    c = http.client.HTTPConnection(ip, 8899, timeout=30)
    try:
        c.request("GET", "/ready", headers={"Authorization": f"Bearer {token}"})
        r = c.getresponse()
        return r.status
    finally:
        c.close()


@t.test(name="every VM gets its own agent token; one VM's agent refuses another's token")
def per_vm_tokens():
    apis = [Api(u) for u in ("student103", "student104", "student105")]
    ss = []
    for a in apis:
        r = a.start("linux-basics")
        t.require(r.status == 201, f"start: {r}")
        ss.append(r.json)
    toks = []
    for s in ss:
        sec = kube.get("secrets", secret_of(s)).json
        cc = yaml.safe_load(base64.b64decode(sec["data"]["userdata"]).decode())
        toks.append([f for f in cc["write_files"]
                     if f["path"] == "/etc/labvm/agent-token"][0]["content"].strip())
    t.eq(len(set(toks)), 3, "three VMs, three different tokens", toks)
    t.ok(all(len(x) >= 32 for x in toks), "each long")
    ready = [a.wait_state(s["id"], ("ready", "failed"), 180) for a, s in zip(apis, ss)]
    t.require(all(s["state"] == "ready" for s in ready), f"ready: {[s.get('error') for s in ready]}")
    ips = [db.one("SELECT ip FROM session_vms WHERE session_id = %s", s["id"])[0] for s in ss]
    t.eq(len(set(ips)), 3, "three guests", ips)
    for i, ip in enumerate(ips):
        t.eq(agent_ready(ip, toks[i]), 200, f"VM {i}'s agent takes its own token")
        for j in range(3):
            if j != i:
                t.eq(agent_ready(ip, toks[j]), 403, f"VM {i}'s agent refuses VM {j}'s token")
    for a, s in zip(apis, ss):
        a.end(s["id"])


@t.test(name="the simulator enforces OwnerReferencesPermissionEnforcement: the backend may not "
             "set blockOwnerDeletion on a VM (so the passing starts above prove rbac.yaml)")
def owner_ref_enforcement():
    backend = Kube(token_file=env("LABVM_KUBE_BACKEND_TOKEN_FILE"))
    name = "t110-owner-check"
    kube.delete("secrets", name)
    r = backend.create("secrets", {"apiVersion": "v1", "kind": "Secret",
                                   "metadata": {"name": name}, "data": {"x": "eA=="}})
    t.require(r.status == 201, f"the backend creates a Secret: {r}")
    vm = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "some-vm",
          "uid": "00000000-0000-4000-8000-000000000001"}
    try:
        r = backend.patch("secrets", name, {"metadata": {"ownerReferences": [
            dict(vm, blockOwnerDeletion=True)]}})
        t.eq(r.status, 422, "blockOwnerDeletion true without update on virtualmachines/finalizers")
        t.ok("cannot set blockOwnerDeletion" in r.body, "the plugin's message", r.body[:300])
        r = backend.patch("secrets", name, {"metadata": {"ownerReferences": [
            dict(vm, blockOwnerDeletion=False)]}})
        t.eq(r.status, 200, "blockOwnerDeletion false, as labvm sends it, is allowed", r)
    finally:
        kube.delete("secrets", name)


reset_world(kube, db)
t.done()
