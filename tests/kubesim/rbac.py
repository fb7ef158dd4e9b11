"""Authentication (bearer tokens) and RBAC authorization with Kubernetes'
semantics: Roles/ClusterRoles and their bindings are ordinary objects in the
store (loaded from --rbac, e.g. conf/k8s/rbac.yaml), so what the backend may do
is exactly what that file grants. Built in: cluster-admin for group
system:masters, system:discovery for every authenticated user."""
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
        with self.store.lock:
            for b in self.store.list("clusterrolebindings"):
                if any(_subject_matches(s, user) for s in b.get("subjects") or []):
                    for rule in self._rules(b.get("roleRef") or {}, ""):
                        if _rule_allows(rule, a):
                            return True
            ns = a.get("namespace")
            if ns and a.get("path") is None:
                for b in self.store.list("rolebindings", ns):
                    if any(_subject_matches(s, user) for s in b.get("subjects") or []):
                        for rule in self._rules(b.get("roleRef") or {}, ns):
                            if "nonResourceURLs" in rule and not rule.get("resources"):
                                continue
                            if _rule_allows(rule, a):
                                return True
        return False


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
