"""Authentication (bearer tokens) and RBAC authorization with Kubernetes'
semantics: Roles/ClusterRoles and their bindings are ordinary objects in the
store (loaded from --rbac, e.g. conf/k8s/rbac.yaml), so what the backend may do
is exactly what that file grants. Built in: cluster-admin for group
system:masters, system:discovery and system:basic-user (its own access
reviews: SelfSubjectAccessReview, SelfSubjectReview) for every authenticated
user (kubernetes plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go;
testdata/cluster-roles.yaml, cluster-role-bindings.yaml)."""
import fnmatch

BUILTIN = [
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
     "metadata": {"name": "cluster-admin", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
     "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
               {"nonResourceURLs": ["*"], "verbs": ["*"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
     "metadata": {"name": "cluster-admin", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                 "name": "cluster-admin"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                   "name": "system:masters"}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
     "metadata": {"name": "system:discovery", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
     "rules": [{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez",
                                    "/openapi", "/openapi/*", "/readyz", "/version",
                                    "/version/"], "verbs": ["get"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
     "metadata": {"name": "system:discovery", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                 "name": "system:discovery"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                   "name": "system:authenticated"}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
     "metadata": {"name": "system:basic-user", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
     "rules": [{"apiGroups": ["authorization.k8s.io"],
                "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                "verbs": ["create"]},
               {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"],
                "verbs": ["create"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
     "metadata": {"name": "system:basic-user", "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                 "name": "system:basic-user"},
     "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                   "name": "system:authenticated"}]},
]


class User:
    def __init__(self, name, groups, uid=""):
        self.name = name
        self.groups = list(groups)
        if "system:authenticated" not in self.groups:
            self.groups.append("system:authenticated")
        self.uid = uid

    @property
    def admin(self):
        return "system:masters" in self.groups


def sa_user(ns, name):
    return User(f"system:serviceaccount:{ns}:{name}",
                ["system:serviceaccounts", f"system:serviceaccounts:{ns}"])


def _subject_matches(s, user):
    kind = s.get("kind")
    if kind == "User":
        return s.get("name") == user.name
    if kind == "Group":
        return s.get("name") in user.groups
    if kind == "ServiceAccount":
        return user.name == f"system:serviceaccount:{s.get('namespace', '')}:{s.get('name')}"
    return False


def _rule_allows(rule, a):
    verbs = rule.get("verbs") or []
    if "*" not in verbs and a["verb"] not in verbs:
        return False
    if a.get("path") is not None:   # non-resource request
        for u in rule.get("nonResourceURLs") or []:
            if u == "*" or u == a["path"] or (u.endswith("*") and a["path"].startswith(u[:-1])):
                return True
        return False
    groups = rule.get("apiGroups")
    if groups is None or ("*" not in groups and a["group"] not in groups):
        return False
    res = a["resource"] + ("/" + a["subresource"] if a.get("subresource") else "")
    rs = rule.get("resources") or []
    ok = False
    for r in rs:
        if r == "*" or r == res:
            ok = True
        elif a.get("subresource") and r == "*/" + a["subresource"]:
            ok = True
        elif not a.get("subresource") and "/" not in r and fnmatch.fnmatchcase(res, r) and "*" in r:
            ok = True
    if not ok:
        return False
    names = rule.get("resourceNames") or []
    if names and a.get("name") not in names:
        return False
    return True


class Authorizer:
    def __init__(self, store):
        self.store = store

    def _rules(self, ref, ns):
        kind, name = ref.get("kind"), ref.get("name")
        if kind == "ClusterRole":
            r = self.store.get("clusterroles", "", name)
        elif kind == "Role":
            r = self.store.get("roles", ns, name)
        else:
            r = None
        return (r or {}).get("rules") or []

    def allowed(self, user, a):
        """a: {verb, group, resource, subresource, namespace, name} or {verb, path}."""
        return self.decide(user, a)[0]

    def decide(self, user, a):
        """(allowed, reason): the reason as the RBAC authorizer words it
        (kubernetes plugin/pkg/auth/authorizer/rbac/rbac.go authorizingVisitor:
        "RBAC: allowed by " + the binding's describer, pkg/registry/rbac/
        validation/rule.go); "" when no rule allows (DecisionNoOpinion)."""
        with self.store.lock:
            for b in self.store.list("clusterrolebindings"):
                s = next((s for s in b.get("subjects") or [] if _subject_matches(s, user)), None)
                if s is not None:
                    ref = b.get("roleRef") or {}
                    for rule in self._rules(ref, ""):
                        if _rule_allows(rule, a):
                            return True, (f'RBAC: allowed by ClusterRoleBinding '
                                          f'"{b["metadata"]["name"]}" of {ref.get("kind")} '
                                          f'"{ref.get("name")}" to {_describe(s, "")}')
            ns = a.get("namespace")
            if ns and a.get("path") is None:
                for b in self.store.list("rolebindings", ns):
                    s = next((s for s in b.get("subjects") or [] if _subject_matches(s, user)),
                             None)
                    if s is not None:
                        ref = b.get("roleRef") or {}
                        for rule in self._rules(ref, ns):
                            if "nonResourceURLs" in rule and not rule.get("resources"):
                                continue
                            if _rule_allows(rule, a):
                                return True, (f'RBAC: allowed by RoleBinding '
                                              f'"{b["metadata"]["name"]}/{ns}" of '
                                              f'{ref.get("kind")} "{ref.get("name")}" to '
                                              f'{_describe(s, ns)}')
        return False, ""


def _describe(s, binding_ns):
    """pkg/registry/rbac/validation/rule.go describeSubject."""
    if s.get("kind") == "ServiceAccount":
        return f'ServiceAccount "{s.get("name")}/{s.get("namespace") or binding_ns}"'
    return f'{s.get("kind")} "{s.get("name")}"'


def forbidden_message(user, a):
    """k8s.io/apiserver responsewriters.forbiddenMessage."""
    if a.get("path") is not None:
        return f'User "{user.name}" cannot {a["verb"]} path "{a["path"]}"'
    res = a["resource"] + ("/" + a["subresource"] if a.get("subresource") else "")
    if a.get("namespace"):
        return (f'User "{user.name}" cannot {a["verb"]} resource "{res}" in API group '
                f'"{a["group"]}" in the namespace "{a["namespace"]}"')
    return (f'User "{user.name}" cannot {a["verb"]} resource "{res}" in API group '
            f'"{a["group"]}" at the cluster scope')
