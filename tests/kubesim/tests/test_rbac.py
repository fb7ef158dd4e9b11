#!/usr/bin/python3
"""kubesim: authorization from conf/k8s/rbac.yaml (timeout: 120)."""
import yaml

from simlib import NS, RBAC, Sim, secret, vm, wait_for, VMS
from tap import T

t = T()
sim = Sim(guest="none")
A, B = sim.admin, sim.backend
SA = "system:serviceaccount:labs:labvm-backend"

with open(RBAC) as f:
    docs = [d for d in yaml.safe_load_all(f) if d]
role = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "labvm-backend")
GRANTS = set()
for rule in role["rules"]:
    for g in rule.get("apiGroups", []):
        for r in rule.get("resources", []):
            for v in rule.get("verbs", []):
                GRANTS.add((g, r, v))

RES = {  # resource -> (group, collection path, object path of something that exists)
    "secrets": ("", f"/api/v1/namespaces/{NS}/secrets", "rb-sec"),
    "persistentvolumeclaims": ("", f"/api/v1/namespaces/{NS}/persistentvolumeclaims",
                               "golden-debian-12"),
    "pods": ("", f"/api/v1/namespaces/{NS}/pods", "rb-pod"),
    "events": ("", f"/api/v1/namespaces/{NS}/events", "noevent"),
    "virtualmachines": ("kubevirt.io", f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachines",
                        "rb-vm"),
    "virtualmachineinstances": ("kubevirt.io",
                                f"/apis/kubevirt.io/v1/namespaces/{NS}/virtualmachineinstances",
                                "rb-vm"),
    "datavolumes": ("cdi.kubevirt.io", f"/apis/cdi.kubevirt.io/v1beta1/namespaces/{NS}/datavolumes",
                    "nodv"),
}
A.post(RES["secrets"][1], secret("rb-sec", "x"))
A.post(VMS, vm("rb-vm", run_strategy="Always"))
A.post(RES["pods"][1], {"metadata": {"name": "rb-pod"}, "spec": {"containers": [
    {"name": "c", "image": "debian:12", "command": ["sleep", "infinity"]}]}})
wait_for(lambda: A.get(RES["virtualmachineinstances"][1] + "/rb-vm").status == 200, 5)


def attempt(client, verb, res):
    group, coll, name = RES[res]
    if verb == "get":
        return client.get(f"{coll}/{name}")
    if verb == "list":
        return client.get(coll)
    if verb == "watch":
        return client.get(coll + "?watch=1&timeoutSeconds=0")
    if verb == "create":
        return client.post(coll, {"metadata": {"name": "rb-probe-x"}})  # invalid body on purpose
    if verb == "update":
        return client.put(f"{coll}/{name}", {"metadata": {"name": name}})
    if verb == "patch":
        return client.patch(f"{coll}/{name}", {"metadata": {"annotations": {"probe": "1"}}})
    if verb == "delete":
        return client.delete(f"{coll}/does-not-exist")
    if verb == "deletecollection":
        return client.delete(coll + "?labelSelector=nothing%3Dmatches")
    raise ValueError(verb)


GRANTED_ANSWER = {
    "get": (200,), "list": (200,), "watch": (200,),
    "create": (201, 400, 422),   # (the probe body is minimal: created, or refused by validation)
    "update": (200, 409, 422), "patch": (200,),
    "delete": (404,),            # the probe deletes a name that does not exist
    "deletecollection": (200,),
}


@t.test
def backend_matrix_matches_rbac_yaml():
    checked = 0
    for res, (group, _, _) in RES.items():
        for verb in ("get", "list", "watch", "create", "update", "patch", "delete",
                     "deletecollection"):
            allowed = (group, res, verb) in GRANTS
            r = attempt(B, verb, res)
            checked += 1
            if allowed:
                # granted: the request got past authorization to the verb's own
                # answer (a 500 or any error but these would be a failure)
                t.ok(r.status in GRANTED_ANSWER[verb], f"{verb} {res} granted by rbac.yaml",
                     (r.status, r.json))
            else:
                t.eq(r.status, 403, f"{verb} {res} not granted")
                if r.status == 403:
                    t.eq(r.json.get("reason"), "Forbidden", f"{verb} {res} reason")
    t.ok(checked == 56, "matrix size")


@t.test
def forbidden_message_format():
    r = B.get(f"/api/v1/namespaces/{NS}/events")
    t.eq(r.json.get("message"), f'events is forbidden: User "{SA}" cannot list resource "events" '
         f'in API group "" in the namespace "{NS}"', "list message")
    r = B.put(f"{VMS}/rb-vm", A.get(f"{VMS}/rb-vm").json)
    t.eq(r.json.get("message"), f'virtualmachines.kubevirt.io "rb-vm" is forbidden: User "{SA}" '
         f'cannot update resource "virtualmachines" in API group "kubevirt.io" in the namespace '
         f'"{NS}"', "named object message")
    t.eq(r.json.get("details"), {"name": "rb-vm", "group": "kubevirt.io",
                                 "kind": "virtualmachines"}, "details")
    r = B.get("/api/v1/namespaces")
    t.eq(r.json.get("message"), f'namespaces is forbidden: User "{SA}" cannot list '
         'resource "namespaces" in API group "" at the cluster scope',
         "cluster-scope message")


@t.test(name="the ClusterRole labvm-nodes: the backend reads the nodes, nothing more")
def nodes_read_only():
    t.eq(B.get("/api/v1/nodes").status, 200, "list nodes (the admission's fit check)")
    t.eq(B.get("/api/v1/nodes/node-1").status, 200, "get a node")
    r = B.patch("/api/v1/nodes/node-1", {"spec": {"unschedulable": True}})
    t.eq(r.status, 403, "no cordoning", r.json)
    t.eq(B.delete("/api/v1/nodes/node-1").status, 403, "no deleting")


@t.test
def only_the_lab_namespace():
    t.eq(B.get("/api/v1/namespaces/default/secrets").status, 403, "default namespace denied")
    t.eq(B.get("/api/v1/secrets").status, 403, "all-namespaces list denied")
    t.eq(B.get("/apis/kubevirt.io/v1/virtualmachines").status, 403, "cluster-wide VMs denied")


@t.test
def what_labvm_does_is_allowed():
    s = secret("rb-flow", "#cloud-config\n")
    t.eq(B.post(RES["secrets"][1], s).status, 201, "create secret")
    r = B.post(VMS, vm("rb-flow", "rb-flow"))
    t.eq(r.status, 201, "create VM")
    uid = r.json["metadata"]["uid"]
    r = B.patch(RES["secrets"][1] + "/rb-flow", {"metadata": {"ownerReferences": [{
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "rb-flow", "uid": uid,
        "controller": False}]}})
    t.eq(r.status, 200, "patch the owner reference into the secret")
    t.eq(B.get(f"{VMS}?labelSelector=labvm.io%2Flab-session%3Dtrue").status, 200, "list VMs")
    t.eq(B.get(RES["persistentvolumeclaims"][1] + "/golden-debian-12").status, 200, "get PVC")
    wait_for(lambda: B.get(RES["virtualmachineinstances"][1] + "/rb-flow").status == 200, 5)
    t.eq(B.get(RES["virtualmachineinstances"][1]).status, 200, "list VMIs")
    t.eq(B.get(RES["secrets"][1] + "?labelSelector=labvm.io%2Flab-session").status, 200,
         "list secrets (reaper)")
    t.eq(B.delete(f"{VMS}/rb-flow").status, 200, "delete VM")
    r = B.delete(RES["secrets"][1] + "/rb-flow")
    t.ok(r.status in (200, 404), "delete secret (or already collected with its VM)", r.status)
    # a pod lesson: files Secret, Pod, owner, count, exec (console and grading), delete
    t.eq(B.post(RES["secrets"][1], secret("rb-pflow", "x")).status, 201, "create pod secret")
    r = B.post(RES["pods"][1], {"metadata": {"name": "rb-pflow"}, "spec": {"containers": [
        {"name": "lab", "image": "debian:12", "command": ["sleep", "infinity"]}]}})
    t.eq(r.status, 201, "create Pod")
    r = B.patch(RES["secrets"][1] + "/rb-pflow", {"metadata": {"ownerReferences": [{
        "apiVersion": "v1", "kind": "Pod", "name": "rb-pflow", "uid": r.json["metadata"]["uid"],
        "controller": False}]}})
    t.eq(r.status, 200, "the Secret owned by the Pod")
    t.eq(B.get(RES["pods"][1] + "?labelSelector=labvm.io%2Flab-session%3Dtrue%2C%21kubevirt.io")
         .status, 200, "count lab Pods")
    t.eq(B.get(RES["pods"][1] + "/rb-pflow").status, 200, "get the Pod (readiness)")
    # pods/exec: past authorization (400: the probe asks for no stream); the
    # WebSocket's GET is authorized as get (1.34), SPDY's POST as create
    t.eq(B.post(RES["pods"][1] + "/rb-pflow/exec?command=true").status, 400, "exec allowed")
    t.eq(B.get(RES["pods"][1] + "/rb-pflow/exec?command=true").status, 400,
         "exec by GET (the WebSocket's, authorized as get) allowed")
    t.eq(B.get(RES["pods"][1] + "/rb-pflow/log").status, 403, "pods/log is not granted")
    t.eq(B.delete(RES["pods"][1] + "/rb-pflow").status, 200, "delete Pod")


@t.test
def console_subresource():
    path = (f"/apis/subresources.kubevirt.io/v1/namespaces/{NS}/virtualmachineinstances/rb-vm/"
            "console")
    r = B.get(path)
    # past authorization: the handler itself answers (400 BadRequest: no WebSocket
    # upgrade, or the VMI is not running yet), never 403, 404 or 500
    t.eq((r.status, r.json.get("reason")), (400, "BadRequest"),
         "backend may get virtualmachineinstances/console (the handler answers)")
    other = sim.client(sim.token(sa="labs/someone-else"))
    r = other.get(path)
    t.eq(r.status, 403, "another service account may not")
    t.eq(r.json.get("message"),
         'virtualmachineinstances.subresources.kubevirt.io "rb-vm" is forbidden: User '
         '"system:serviceaccount:labs:someone-else" cannot get resource '
         '"virtualmachineinstances/console" in API group "subresources.kubevirt.io" in the '
         'namespace "labs"', "KubeVirt's 403 text")
    r = other.get(f"/api/v1/namespaces/{NS}/secrets")
    t.eq(r.status, 403, "an unbound service account gets nothing")
    t.eq(other.get("/version").status, 200, "but discovery (system:discovery)")


@t.test
def roles_are_live_objects():
    """A RoleBinding created through the API takes effect (RBAC is data, as in Kubernetes)."""
    tok = sim.token(user="alice")
    alice = sim.client(tok)
    t.eq(alice.get(f"/api/v1/namespaces/{NS}/pods").status, 403, "before")
    A.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles",
           {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]})
    A.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings",
           {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "alice-pods"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                        "name": "pod-reader"},
            "subjects": [{"kind": "User", "name": "alice",
                          "apiGroup": "rbac.authorization.k8s.io"}]})
    t.eq(alice.get(f"/api/v1/namespaces/{NS}/pods").status, 200, "after")
    t.eq(alice.get(f"/api/v1/namespaces/{NS}/pods/x").status, 403, "get is still denied")


def bind_verbs(admin, who, resource, group, verbs):
    """A Role granting verbs on resource (in group) and its RoleBinding to user who."""
    admin.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles",
               {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": who},
                "rules": [{"apiGroups": [group], "resources": [resource], "verbs": verbs}]})
    admin.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings",
               {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": who},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                            "name": who},
                "subjects": [{"kind": "User", "name": who,
                              "apiGroup": "rbac.authorization.k8s.io"}]})


VERB_SETS = {"get": ["get"], "create": ["create"], "both": ["get", "create"]}


def exec_matrix(s):
    """{(verbs, method): status} for pods/exec on the running pod rb-pod, and
    {verbs: status} for the VMI console (GET), on simulator s."""
    a = s.admin
    a.post(f"/api/v1/namespaces/{NS}/pods", {"metadata": {"name": "rb-pod"}, "spec": {
        "containers": [{"name": "c", "image": "debian:12", "command": ["sleep", "infinity"]}]}})
    a.post(VMS, vm("rb-vm", run_strategy="Always"))
    out, console = {}, {}
    for k, verbs in VERB_SETS.items():
        bind_verbs(a, f"exec-{k}", "pods/exec", "", verbs)
        bind_verbs(a, f"console-{k}", "virtualmachineinstances/console",
                   "subresources.kubevirt.io", verbs)
        c = s.client(s.token(f"exec-{k}"))
        path = f"/api/v1/namespaces/{NS}/pods/rb-pod/exec?command=true"
        out[(k, "GET")] = c.get(path).status
        out[(k, "POST")] = c.post(path).status
        c = s.client(s.token(f"console-{k}"))
        console[k] = c.get(f"/apis/subresources.kubevirt.io/v1/namespaces/{NS}/"
                           "virtualmachineinstances/rb-vm/console").status
    return out, console


@t.test
def pods_exec_verbs_by_kubernetes_version():
    """1.34 (the default): the WebSocket exec (GET) is `get pods/exec`, SPDY's
    POST `create` (requestinfo.go); 1.35+ (AuthorizePodWebsocketUpgradeCreatePermission,
    beta, on): the GET needs `get` and `create`. The VMI console is virt-api's
    own: GET is `get` on both (KubeVirt authorizer.go)."""
    t.eq(A.get("/version").json.get("gitVersion"), "v1.34.0+kubesim", "/version: 1.34")
    ex, con = exec_matrix(sim)
    # 400: past authorization (no stream requested); 403: refused
    t.eq(ex, {("get", "GET"): 400, ("get", "POST"): 403, ("create", "GET"): 403,
              ("create", "POST"): 400, ("both", "GET"): 400, ("both", "POST"): 400},
         "1.34: GET needs get, POST needs create")
    t.eq({k: v != 403 for k, v in con.items()}, {"get": True, "create": False, "both": True},
         "1.34: the console GET needs get", con)
    with Sim("--k8s-version", "1.35", guest="none") as s35:
        t.eq(s35.admin.get("/version").json.get("minor"), "35", "/version: 1.35")
        ex, con = exec_matrix(s35)
        t.eq(ex, {("get", "GET"): 403, ("get", "POST"): 403, ("create", "GET"): 403,
                  ("create", "POST"): 400, ("both", "GET"): 400, ("both", "POST"): 400},
             "1.35: GET needs get and create, POST create")
        t.eq({k: v != 403 for k, v in con.items()}, {"get": True, "create": False, "both": True},
             "1.35: the console GET still needs get only", con)
        r = s35.client(s35.token("exec-get")).get(
            f"/api/v1/namespaces/{NS}/pods/rb-pod/exec?command=true")
        t.eq(r.json.get("message"), 'pods "rb-pod" is forbidden: User "exec-get" cannot create '
             'resource "pods/exec" in API group "" in the namespace "labs"',
             "1.35: the refusal names create")
        # the shipped Role (get and create on pods/exec) works on both
        r = s35.backend.get(f"/api/v1/namespaces/{NS}/pods/rb-pod/exec?command=true")
        t.eq(r.status, 400, "1.35: rbac.yaml's backend may exec by GET", r.json)


SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def ssar(client, spec):
    return client.post(SSAR, {"apiVersion": "authorization.k8s.io/v1",
                              "kind": "SelfSubjectAccessReview", "spec": spec})


@t.test(name="SelfSubjectAccessReview: the same decision the request itself gets, in the real shape")
def self_subject_access_review():
    agree = 0
    for res, (group, _, _) in RES.items():
        for verb in ("get", "list", "watch", "create", "update", "patch", "delete",
                     "deletecollection"):
            r = ssar(B, {"resourceAttributes": {"namespace": NS, "verb": verb, "group": group,
                                                "resource": res}})
            if r.status != 201:
                t.fail(f"review of {verb} {res}: {r.status} {r.json}")
                continue
            allowed = r.json["status"]["allowed"]
            agree += allowed == (attempt(B, verb, res).status != 403)
    t.eq(agree, 56, "the review agrees with the request on every verb of the matrix")
    r = ssar(B, {"resourceAttributes": {"namespace": NS, "verb": "get", "resource": "pods",
                                        "subresource": "exec"}})
    t.eq(r.status, 201, "201 Created (answered, not stored)", r.json)
    t.eq((r.json.get("kind"), r.json.get("apiVersion")),
         ("SelfSubjectAccessReview", "authorization.k8s.io/v1"), "the kind and version")
    t.eq(r.json["spec"], {"resourceAttributes": {"namespace": NS, "verb": "get",
                                                 "resource": "pods", "subresource": "exec"}},
         "the spec as sent")
    t.eq(r.json["status"], {"allowed": True, "reason": 'RBAC: allowed by RoleBinding '
                            '"labvm-backend/labs" of Role "labvm-backend" to ServiceAccount '
                            '"labvm-backend/labs"'}, "allowed, with RBAC's reason")
    r = ssar(B, {"resourceAttributes": {"verb": "list", "resource": "nodes"}})
    t.eq(r.json["status"]["reason"], 'RBAC: allowed by ClusterRoleBinding "labvm-nodes" of '
         'ClusterRole "labvm-nodes" to ServiceAccount "labvm-backend/labs"', "a cluster grant")
    r = ssar(B, {"resourceAttributes": {"namespace": NS, "verb": "get", "resource": "pods",
                                        "subresource": "log"}})
    t.eq(r.json["status"], {"allowed": False}, "denied: allowed false, no reason, no denied "
         "(RBAC has no opinion)")
    r = ssar(B, {"nonResourceAttributes": {"path": "/version", "verb": "get"}})
    t.eq(r.json["status"].get("allowed"), True, "a path (system:discovery)", r.json)
    r = ssar(B, {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}})
    t.eq(r.json["status"].get("allowed"), False, "another path")
    other = sim.client(sim.token(sa="labs/someone-else"))
    r = ssar(other, {"resourceAttributes": {"namespace": NS, "verb": "get", "resource": "pods",
                                            "subresource": "exec"}})
    t.eq((r.status, r.json["status"]["allowed"]), (201, False),
         "evaluated for the caller's token (system:basic-user lets anyone ask)")
    r = ssar(B, {})
    t.eq(r.status, 422, "neither attributes: Invalid", r.json)
    t.ok("exactly one of nonResourceAttributes or resourceAttributes must be specified"
         in r.json.get("message", ""), "the validation's words", r.json)
    r = ssar(B, {"resourceAttributes": {"verb": "get"}, "nonResourceAttributes": {"verb": "get"}})
    t.eq(r.status, 422, "both: Invalid")
    r = ssar(B, {"resourceAttributes": {"verb": "get", "resourse": "pods"}})
    t.eq(r.status, 400, "an unknown field (strict)", r.json)
    r = B.post(SSAR, {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                      "metadata": {"name": "x"},
                      "spec": {"resourceAttributes": {"verb": "get", "resource": "pods"}}})
    t.eq(r.status, 422, "metadata must be empty", r.json)
    t.eq(B.get(SSAR).status, 403, "nothing to list (create only)")
    t.eq(A.get(SSAR).status, 405, "not even for the admin")
    t.eq(A.get("/_sim/state?resource=selfsubjectaccessreviews").json["objects"], {},
         "never stored")
    r = B.post("/apis/authentication.k8s.io/v1/selfsubjectreviews",
               {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    t.eq((r.status, r.json["status"]["userInfo"]["username"]), (201, SA),
         "SelfSubjectReview: whom the token authenticates", r.json)
    t.ok("system:serviceaccounts:labs" in r.json["status"]["userInfo"]["groups"], "its groups")


@t.test(name="GET namespaces/NAME is authorized in namespace NAME: a Role there may grant it")
def namespace_in_its_own_namespace():
    t.eq(B.get(f"/api/v1/namespaces/{NS}").status, 200,
         "the backend reads its namespace (Role labvm-doctor)")
    r = B.get("/api/v1/namespaces/default")
    t.eq(r.status, 403, "not another one")
    t.eq(r.json.get("message"), f'namespaces "default" is forbidden: User "{SA}" cannot get '
         'resource "namespaces" in API group "" in the namespace "default"',
         "the refusal names the namespace as the request's")
    r = ssar(B, {"resourceAttributes": {"namespace": NS, "verb": "get", "resource": "namespaces",
                                        "name": NS}})
    t.eq(r.json["status"].get("allowed"), True, "the review agrees", r.json)


@t.test
def sim_endpoints_are_admin_only():
    r = B.get("/_sim/state")
    t.eq(r.status, 403, "backend on /_sim")
    t.eq(r.json.get("kind"), "Status", "403 Status")
    t.eq(sim.client(None).get("/_sim/state").status, 401, "no token on /_sim")
    t.eq(A.get("/_sim/state").status, 200, "admin on /_sim")


sim.stop()
t.done()
