#!/usr/bin/python3
"""The one table of the permissions labvm uses (fcgi-app/core/perms.c, as
`labvm-doctor --permissions` prints it) and the shipped RBAC
(conf/k8s/rbac.yaml) agree in both directions: every verb the table gives a
Role or ClusterRole is granted there, nothing there is missing from the
table, what the cluster itself grants (system:basic-user, kubevirt.io:default)
is not in the file, and each role is bound to the ServiceAccount the backend,
the reaper and the doctor run as. LABVM_RBAC names another file to check
(the test of the test: a Role without a verb fails here)."""
import json
import os
import subprocess
import sys

import yaml

SRC = os.environ.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRC, "tests", "lib"))
from tap import T  # noqa: E402

t = T()
BIN = os.environ.get("LABVM_BIN") or os.path.join(SRC, "build", "bin")
RBAC = os.environ.get("LABVM_RBAC") or os.path.join(SRC, "conf", "k8s", "rbac.yaml")
SA = ("labvm-backend", "labs")

table = json.loads(subprocess.run([os.path.join(BIN, "labvm-doctor"), "--permissions"],
                                  check=True, capture_output=True, text=True).stdout)
with open(RBAC) as f:
    docs = [d for d in yaml.safe_load_all(f) if d]
roles = {(d["kind"], d["metadata"]["name"]): d for d in docs
         if d.get("kind") in ("Role", "ClusterRole")}


def granted(role):
    """(apiGroup, resource, verb) of every rule of a Role or ClusterRole."""
    out = set()
    for r in role.get("rules") or []:
        for g in r.get("apiGroups") or []:
            for res in r.get("resources") or []:
                for v in r.get("verbs") or []:
                    out.add((g, res, v))
    return out


def wanted(kind, name):
    return {(p["apiGroup"], p["resource"], v) for p in table
            if p["kind"] == kind and p["name"] == name for v in p["verbs"]}


@t.test(name="the table names Roles and ClusterRoles that rbac.yaml has, and only those")
def same_roles():
    in_table = {(p["kind"], p["name"]) for p in table if p["kind"]}
    t.eq(sorted(in_table), sorted(roles), "the same set of roles")
    t.ok(("Role", "labvm-backend") in in_table, "the backend's Role is one", sorted(in_table))


@t.test(name="rbac.yaml grants every verb of the table (none missing)")
def none_missing():
    for key in sorted({(p["kind"], p["name"]) for p in table if p["kind"]}):
        missing = wanted(*key) - granted(roles.get(key, {}))
        t.eq(sorted(missing), [], f"{key[0]} {key[1]}: nothing missing")


@t.test(name="rbac.yaml grants nothing the table does not list (none extra)")
def none_extra():
    for key, role in sorted(roles.items()):
        extra = granted(role) - wanted(*key)
        t.eq(sorted(extra), [], f"{key[0]} {key[1]}: nothing extra")
        wild = [r for r in role.get("rules") or [] if "*" in (r.get("verbs") or []) +
                (r.get("resources") or []) + (r.get("apiGroups") or [])]
        t.eq(wild, [], f"{key[0]} {key[1]}: no wildcards")
        t.ok(all("nonResourceURLs" not in r and "resourceNames" not in r
                 for r in role.get("rules") or []), f"{key[0]} {key[1]}: plain rules")


@t.test(name="what the cluster grants everyone is in the table, not in rbac.yaml")
def by_cluster():
    rows = [p for p in table if p["granted_by_cluster"]]
    t.ok(rows and all(not p["kind"] and not p["name"] for p in rows),
         "rows of system:basic-user and kubevirt.io:default name no role of ours", rows)
    everything = set().union(*(granted(r) for r in roles.values()))
    for p in rows:
        for v in p["verbs"]:
            t.ok((p["apiGroup"], p["resource"], v) not in everything,
                 f"{v} {p['resource']} ({p['granted_by_cluster']}) is not granted by rbac.yaml")


@t.test(name="each role is bound to the ServiceAccount labvm-backend, Roles in its namespace")
def bound():
    for (kind, name), role in sorted(roles.items()):
        bk = "RoleBinding" if kind == "Role" else "ClusterRoleBinding"
        ns = role["metadata"].get("namespace")
        b = [d for d in docs if d.get("kind") == bk and d["roleRef"]["kind"] == kind and
             d["roleRef"]["name"] == name and d["metadata"].get("namespace") == ns and
             {"kind": "ServiceAccount", "name": SA[0], "namespace": SA[1]} in d["subjects"]]
        t.eq(len(b), 1, f"{kind} {name}: one {bk} to {SA[1]}/{SA[0]}")
        if kind == "Role":
            t.eq(ns, SA[1], f"Role {name} in the lab namespace")


@t.test(name="the table's scopes match the roles' (a Role's rows are namespaced)")
def scopes():
    for p in table:
        if p["kind"] == "Role":
            t.ok(p["scope"] in ("namespace", "the namespace itself"), f"{p['resource']}", p)
        elif p["kind"] == "ClusterRole":
            t.eq(p["scope"], "cluster", f"{p['resource']}")
    exec_ = [p for p in table if p["resource"] == "pods/exec"]
    t.eq([sorted(p["verbs"]) for p in exec_], [["create", "get"]],
         "a WebSocket exec: get and create on pods/exec (1.34 and 1.35)")


t.done()
