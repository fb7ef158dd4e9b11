"""meta.k8s.io/v1 Table answers (what `kubectl get` asks for with
Accept: application/json;as=Table...), with the columns of the real printers
and of KubeVirt's/CDI's additionalPrinterColumns."""
import base64

from util import dig, human_age


def _col(name, typ="string", fmt="", desc="", prio=0):
    return {"name": name, "type": typ, "format": fmt, "description": desc or name,
            "priority": prio}


def _pod_row(o):
    cs = dig(o, "status", "containerStatuses") or []
    total = len(dig(o, "spec", "containers") or [])
    ready = sum(1 for c in cs if c.get("ready"))
    status = dig(o, "status", "phase") or "Pending"
    for c in cs:
        w = dig(c, "state", "waiting", "reason")
        if w:
            status = w
            break
    if dig(o, "metadata", "deletionTimestamp"):
        status = "Terminating"
    return [f"{ready}/{total}", status, sum(c.get("restartCount", 0) for c in cs),
            human_age(dig(o, "metadata", "creationTimestamp")), dig(o, "status", "podIP") or "<none>",
            dig(o, "spec", "nodeName") or "<none>"]


COLUMNS = {
    "pods": ([_col("Ready"), _col("Status"), _col("Restarts", "string"), _col("Age"),
              _col("IP", prio=1), _col("Node", prio=1)], _pod_row),
    "secrets": ([_col("Type"), _col("Data", "integer"), _col("Age")],
                lambda o: [o.get("type", "Opaque"), len(o.get("data") or {}),
                           human_age(dig(o, "metadata", "creationTimestamp"))]),
    "persistentvolumeclaims": (
        [_col("Status"), _col("Volume"), _col("Capacity"), _col("Access Modes"),
         _col("StorageClass"), _col("Age")],
        lambda o: [dig(o, "status", "phase") or "Pending", dig(o, "spec", "volumeName") or "",
                   dig(o, "status", "capacity", "storage") or "",
                   ",".join({"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX",
                             "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}.get(m, m)
                            for m in dig(o, "status", "accessModes") or []),
                   dig(o, "spec", "storageClassName") or "",
                   human_age(dig(o, "metadata", "creationTimestamp"))]),
    "namespaces": ([_col("Status"), _col("Age")],
                   lambda o: [dig(o, "status", "phase") or "Active",
                              human_age(dig(o, "metadata", "creationTimestamp"))]),
    "nodes": ([_col("Status"), _col("Roles"), _col("Age"), _col("Version")],
              lambda o: ["Ready", "worker", human_age(dig(o, "metadata", "creationTimestamp")),
                         dig(o, "status", "nodeInfo", "kubeletVersion") or ""]),
    "events": ([_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message")],
               lambda o: [human_age(o.get("lastTimestamp")), o.get("type"), o.get("reason"),
                          f'{(dig(o, "involvedObject", "kind") or "").lower()}/'
                          f'{dig(o, "involvedObject", "name")}', o.get("message")]),
    "virtualmachines": ([_col("Age", "date"), _col("Status"), _col("Ready")],
                        lambda o: [human_age(dig(o, "metadata", "creationTimestamp")),
                                   dig(o, "status", "printableStatus") or "",
                                   str(bool(dig(o, "status", "ready"))).capitalize()]),
    "virtualmachineinstances": (
        [_col("Age", "date"), _col("Phase"), _col("IP"), _col("NodeName"), _col("Ready")],
        lambda o: [human_age(dig(o, "metadata", "creationTimestamp")),
                   dig(o, "status", "phase") or "",
                   dig(o, "status", "interfaces", 0, "ipAddress") or "",
                   dig(o, "status", "nodeName") or "",
                   next((c.get("status") for c in dig(o, "status", "conditions") or []
                         if c.get("type") == "Ready"), "False")]),
    "datavolumes": ([_col("Phase"), _col("Progress"), _col("Restarts", "integer"), _col("Age")],
                    lambda o: [dig(o, "status", "phase") or "", dig(o, "status", "progress") or "",
                               dig(o, "status", "restartCount") or 0,
                               human_age(dig(o, "metadata", "creationTimestamp"))]),
}


def table(res, items, rv, q):
    cols, fn = COLUMNS.get(res.plural, ([_col("Age")], lambda o: [
        human_age(dig(o, "metadata", "creationTimestamp"))]))
    include = q.get("includeObject", "Metadata")
    rows = []
    for o in items:
        if include == "Object":
            obj = o
        elif include == "None":
            obj = None
        else:
            obj = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                   "metadata": o.get("metadata")}
        row = {"cells": [o["metadata"]["name"]] + fn(o)}
        if obj is not None:
            row["object"] = obj
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv},
            "columnDefinitions": [_col("Name", fmt="name", desc="Name must be unique within a "
                                       "namespace.")] + cols,
            "rows": rows}


_ = base64
