"""Discovery and the other non-resource paths: /version, /api, /apis,
/apis/GROUP, /api/v1 and /apis/GROUP/VERSION (APIGroup, APIResourceList),
/openapi/v2, /healthz, /livez, /readyz."""
import base64
import hashlib

from resources import GROUPS, KUBEVIRT_SUBRESOURCES, RESOURCES

# --k8s-version: the Kubernetes minor the simulator behaves as (1.34 by
# default, the release labvm targets); what differs between minors is listed
# where it is modelled (pods/exec authorization: handlers.py)
K8S_VERSIONS = ("1.34", "1.35")


def k8s_version(v="1.34"):
    """/version's answer (k8s.io/apimachinery pkg/version Info) for minor v."""
    major, minor = v.split(".")
    return {"major": major, "minor": minor, "gitVersion": f"v{major}.{minor}.0+kubesim",
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.24.0", "compiler": "gc", "platform": "linux/amd64"}


K8S_VERSION = k8s_version()
PB_OPENAPI = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


class Discovery:
    def nonresource(self, path):
        sim = self.sim
        if path in ("/healthz", "/livez", "/readyz") or path.startswith(("/healthz/", "/livez/",
                                                                         "/readyz/")):
            return self.send_text(200, "ok")
        if path == "/version":
            return self.send_json(200, sim.version_info)
        if path == "/api":
            return self.send_json(200, {"kind": "APIVersions", "versions": ["v1"],
                                        "serverAddressByClientCIDRs": [{
                                            "clientCIDR": "0.0.0.0/0",
                                            "serverAddress": (f"[{sim.args.host}]" if ":" in sim.args.host
                                                                  else sim.args.host) +
                                                 f":{sim.args.port}"}]})
        if path == "/apis":
            return self.send_json(200, {"kind": "APIGroupList", "apiVersion": "v1",
                                        "groups": [group_obj(g) for g in GROUPS
                                                   if g and g not in sim.unserved]})
        if path == "/openapi/v2":
            acc = self.headers.get("Accept") or ""
            if "protobuf" in acc:
                # An empty OpenAPI document: kubectl then skips client-side validation;
                # the simulator validates every object itself (strict).
                return self.send_text(200, b"", PB_OPENAPI)
            return self.send_json(200, {"swagger": "2.0",
                                        "info": {"title": "Kubernetes",
                                                 "version": sim.version_info["gitVersion"]},
                                        "paths": {}, "definitions": {}})
        return self.send_text(404, "404 page not found\n")


def group_obj(g, kind=None):
    vs = GROUPS[g]
    o = {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
         "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}}
    if kind:
        o = {"kind": kind, "apiVersion": "v1", **o}
    return o


def resource_list(group, version):
    out = []
    if group == "subresources.kubevirt.io":
        for name, verb in KUBEVIRT_SUBRESOURCES:
            kind = "VirtualMachineInstance" if name.startswith("virtualmachineinstances") \
                else "VirtualMachine"
            out.append({"name": name, "singularName": "", "namespaced": True, "kind": kind,
                        "verbs": [verb]})
    for r in RESOURCES:
        if r.group != group or r.version != version:
            continue
        d = {"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
             "kind": r.kind, "verbs": r.verbs,
             "storageVersionHash": base64.b64encode(hashlib.sha256(
                 f"{r.group}/{r.version}/{r.kind}".encode()).digest()[:8]).decode()}
        if r.short:
            d["shortNames"] = r.short
        if r.categories:
            d["categories"] = r.categories
        out.append(d)
        if r.status:
            out.append({"name": f"{r.plural}/status", "singularName": "",
                        "namespaced": r.namespaced, "kind": r.kind,
                        "verbs": ["get", "patch", "update"]})
        if r.plural == "namespaces":
            out.append({"name": "namespaces/finalize", "singularName": "", "namespaced": False,
                        "kind": "Namespace", "verbs": ["update"]})
    return {"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version, "resources": out}

