"""The API's request handler: authentication, the routing of the real API
paths, fault injection, and the verbs (get, list, create, update, patch,
delete, deletecollection) on the resources, with their encodings and Table
output. Watch (watch.py), discovery (discovery.py), KubeVirt's subresources
and the console (subresources.py, streams.py) and the admin endpoints
(admin.py) are the Handler's other parts."""
import base64
import json
import secrets
import ssl
import time
import traceback
import urllib.parse

import errors
import operators
import rbac
import tables
import util
from resources import BY_GVR, BY_PLURAL, GROUPS

from .admin import AdminEndpoints
from .discovery import Discovery, group_obj, resource_list
from .httpio import Dropped, HttpIO
from . import reviews
from .podexec import PodExec
from .subresources import KubevirtSubresources
from .watch import Watch


def route_kind(route, q):
    """What a request is, for the ALPN record: rest, watch, console (the
    VMI's), exec (a pod's)."""
    if route.get("verb") == "watch":
        return "watch"
    if route["kind"] == "kvsub" and route.get("sub") == "console":
        return "console"
    if route["kind"] == "podsub" and route.get("sub") == "exec":
        return "exec"
    return "rest"


def kubevirt_verb(method, name):
    """KubeVirt pkg/virt-api/rest/authorizer.go mapHttpVerbToRbacVerb (v1.9.0)."""
    m = method.upper()
    if m == "POST":
        return "create"
    if m in ("GET", "HEAD"):
        return "get" if name else "list"
    if m == "PUT":
        return "update"
    if m == "PATCH":
        return "patch"
    if m == "DELETE":
        return "delete" if name else "deletecollection"
    raise errors.method_not_allowed()


class Handler(Watch, Discovery, KubevirtSubresources, PodExec, AdminEndpoints, HttpIO):
    sim = None  # set by app.serve()

    # ------------------------------------------------------------ dispatch
    def dispatch(self, method):
        sim = self.sim
        sim.requests += 1
        self.audit_id = secrets.token_hex(8)
        self.warnings = []
        self.after_fault = None
        self.watch_fault = None
        if hasattr(self, "_body"):
            del self._body
        try:
            self.body()   # always drained, so a refused request leaves the connection usable
        except errors.ApiError as e:
            self.close_connection = True
            return self.send_error_status(e)
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        q = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        try:
            user = self.authenticate()
            if path.startswith("/_sim/") or path == "/_sim":
                if not user.admin:
                    raise errors.ApiError(403, f'forbidden: User "{user.name}" cannot {method.lower()} '
                                          f'path "{path}"', "Forbidden", {})
                return self.sim_endpoint(method, path, q)
            if sim.faults.down:
                raise Dropped()
            route = self.route(method, path, q)
            if route is None:
                return
            self.count_alpn(route_kind(route, q))
            self.apply_faults(route)
            self.serve_route(method, route, q, user)
        except Dropped:
            raise
        except errors.ApiError as e:
            self.drain_body()
            self.send_error_status(e)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            raise
        except Exception as e:  # noqa: BLE001
            sim.log("internal error: " + traceback.format_exc())
            self.send_error_status(errors.internal(str(e)))


    def authenticate(self):
        auth = self.headers.get("Authorization") or ""
        token = None
        if auth[:7].lower() == "bearer ":
            token = auth[7:].strip()
        if token is None:
            for p in (self.headers.get("Sec-WebSocket-Protocol") or "").split(","):
                p = p.strip()
                if p.startswith("base64url.bearer.authorization.k8s.io."):
                    try:
                        enc = p[len("base64url.bearer.authorization.k8s.io."):]
                        token = base64.urlsafe_b64decode(enc + "=" * (-len(enc) % 4)).decode()
                    except Exception:  # noqa: BLE001
                        token = ""
        if not token:
            raise errors.unauthorized()
        u = self.sim.user_for(token)
        if u is None:
            raise errors.unauthorized()
        return u

    # --------------------------------------------------------------- routes
    def route(self, method, path, q):
        """-> dict(kind=..., ...) or None when already answered."""
        parts = [p for p in path.split("/") if p]
        if path in ("/healthz", "/livez", "/readyz") or path.startswith(("/healthz/", "/livez/",
                                                                         "/readyz/")):
            return {"kind": "nonresource", "path": path, "verb": "get"}
        if path in ("/version", "/version/", "/api", "/api/", "/apis", "/apis/") or \
                path.startswith("/openapi/"):
            return {"kind": "nonresource", "path": path.rstrip("/") or "/", "verb": "get"}
        if not parts or parts[0] not in ("api", "apis"):
            return {"kind": "nonresource", "path": path, "verb": method.lower(), "missing": True}
        if parts[0] == "api":
            if len(parts) < 2:
                return {"kind": "nonresource", "path": path, "verb": "get"}
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) == 2:
                return {"kind": "group", "group": parts[1], "path": path}
            group, version, rest = parts[1], parts[2], parts[3:]
        if group in self.sim.unserved:
            # not installed (kubesim --no-api): what a cluster without the CRDs
            # or the APIService answers
            if not rest:
                return {"kind": "gv", "group": group, "version": version, "path": path}
            raise errors.ApiError(404, "the server could not find the requested resource",
                                  "NotFound", {})
        if not rest:
            return {"kind": "gv", "group": group, "version": version, "path": path}
        if group == "subresources.kubevirt.io" and rest == ["version"] and \
                version in ("v1", "v1alpha3"):
            # virt-api's version (operators.py): kube-apiserver authorizes the
            # aggregated request as `get version` in subresources.kubevirt.io
            return {"kind": "kvversion", "verb": "get", "path": path}
        ns = None
        if rest[0] == "namespaces" and len(rest) >= 3 and not (len(rest) == 3 and rest[2] in (
                "status", "finalize")):
            ns = rest[1]
            rest = rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if len(rest) > 3:
            raise errors.ApiError(404, "the server could not find the requested resource",
                                  "NotFound", {})
        if group == "subresources.kubevirt.io":
            if version not in ("v1", "v1alpha3"):
                raise errors.ApiError(404, "the server could not find the requested resource",
                                      "NotFound", {})
            res = BY_PLURAL.get(plural)
            if res is None or res.group != "kubevirt.io" or not sub or ns is None:
                raise errors.ApiError(404, "the server could not find the requested resource",
                                      "NotFound", {})
            # virt-api authorizes its subresources itself, from the HTTP method
            # (KubeVirt pkg/virt-api/rest/authorizer.go mapHttpVerbToRbacVerb):
            # the console's WebSocket GET is `get`, whatever the Kubernetes version
            return {"kind": "kvsub", "res": res, "ns": ns, "name": name, "sub": sub,
                    "verb": kubevirt_verb(method, name), "group": group}
        res = BY_GVR.get((group, version, plural))
        if res is None:
            raise errors.ApiError(404, "the server could not find the requested resource",
                                  "NotFound", {})
        if res.namespaced and ns is None and name is not None:
            raise errors.ApiError(404, "the server could not find the requested resource",
                                  "NotFound", {})
        if not res.namespaced and ns is not None:
            raise errors.ApiError(404, "the server could not find the requested resource",
                                  "NotFound", {})
        if sub and not ((sub == "status" and res.status) or
                        (sub == "finalize" and res.plural == "namespaces") or
                        (sub in ("exec", "log") and res.plural == "pods" and name)):
            raise errors.ApiError(404, "the server could not find the requested resource",
                                  "NotFound", {})
        if sub in ("exec", "log") and res.plural == "pods":
            if sub == "exec" and method not in ("GET", "POST"):
                raise errors.method_not_allowed()
            if sub == "log" and method != "GET":
                raise errors.method_not_allowed()
            # the verb is the HTTP method's (k8s.io/apiserver
            # pkg/endpoints/request/requestinfo.go: GET -> get, POST -> create):
            # a WebSocket exec (GET) is `get pods/exec`, SPDY (POST) `create`;
            # from 1.35 the AuthorizePodWebsocketUpgradeCreatePermission gate
            # (beta, on) also requires `create` for the GET (kubernetes#134577)
            also = ["create"] if sub == "exec" and method == "GET" and \
                self.sim.version >= (1, 35) else []
            return {"kind": "podsub", "res": res, "ns": ns, "name": name, "sub": sub,
                    "verb": "create" if method == "POST" else "get", "also": also}
        watch = q.get("watch") in ("1", "true", "True")
        if method in ("GET", "HEAD"):
            verb = "watch" if watch else ("get" if name else "list")
        elif method == "POST":
            if name:
                raise errors.method_not_allowed()
            verb = "create"
        elif method == "PUT":
            if not name:
                raise errors.method_not_allowed()
            verb = "update"
        elif method == "PATCH":
            if not name:
                raise errors.method_not_allowed()
            verb = "patch"
        elif method == "DELETE":
            verb = "delete" if name else "deletecollection"
        else:
            raise errors.method_not_allowed()
        if res.namespaced and ns is None and verb not in ("list", "watch"):
            raise errors.ApiError(404, "the server could not find the requested resource",
                                  "NotFound", {})
        return {"kind": "resource", "res": res, "ns": ns, "name": name, "sub": sub,
                "verb": verb}

    def apply_faults(self, route):
        if route["kind"] not in ("resource", "kvsub", "podsub"):
            return
        res = route["res"]
        rule = self.sim.faults.match(route["verb"], res.plural, route.get("sub"),
                                     route.get("ns"), route.get("name"))
        if not rule:
            return
        if rule["delay_ms"]:
            time.sleep(rule["delay_ms"] / 1000.0)
        if rule["drop"]:
            raise Dropped()
        if rule.get("watch"):
            self.watch_fault = rule["watch"]     # watch.py: end at once, or an ERROR event
            return
        err = None
        if rule.get("apf"):
            err = errors.apf_rejected(rule.get("retry_after"))
        elif rule["code"] is not None:
            err = errors.generic(rule["code"], rule.get("message"), res, route.get("name"),
                                 rule.get("retry_after") if rule["code"] in (429, 503) else None)
        if err is not None:
            if rule.get("after"):
                self.after_fault = err           # answered instead of the result
                return
            raise err

    def serve_route(self, method, route, q, user):
        sim = self.sim
        k = route["kind"]
        if k == "nonresource":
            a = {"verb": route["verb"], "path": route["path"]}
            if not user.admin and not sim.authz.allowed(user, a):
                raise errors.forbidden(None, None, rbac.forbidden_message(user, a))
            if route.get("missing"):
                return self.send_text(404, "404 page not found\n")
            return self.nonresource(route["path"])
        if k == "group":
            a = {"verb": "get", "path": route["path"]}
            if not user.admin and not sim.authz.allowed(user, a):
                raise errors.forbidden(None, None, rbac.forbidden_message(user, a))
            g = route["group"]
            if g not in GROUPS or g == "" or g in sim.unserved:
                return self.send_text(404, "404 page not found\n")
            return self.send_json(200, group_obj(g, kind="APIGroup"))
        if k == "gv":
            a = {"verb": "get", "path": route["path"]}
            if not user.admin and not sim.authz.allowed(user, a):
                raise errors.forbidden(None, None, rbac.forbidden_message(user, a))
            if route["group"] not in GROUPS or route["version"] not in GROUPS[route["group"]] \
                    or route["group"] in sim.unserved:
                return self.send_text(404, "404 page not found\n")
            return self.send_json(200, resource_list(route["group"], route["version"]))
        if k == "kvversion":
            a = {"verb": "get", "group": "subresources.kubevirt.io", "resource": "version",
                 "subresource": None, "namespace": "", "name": None}
            if not user.admin and not sim.authz.allowed(user, a):
                raise errors.forbidden(None, None, rbac.forbidden_message(user, a))
            if method not in ("GET", "HEAD"):
                raise errors.method_not_allowed()
            return self.send_json(200, operators.kubevirt_version_info())
        if k == "kvsub":
            return self.kubevirt_sub(method, route, q, user)
        if k == "podsub":
            return self.pod_sub(method, route, user)
        res, ns, name, sub, verb = (route[x] for x in ("res", "ns", "name", "sub", "verb"))
        api = sim.api
        api.authorize(user, verb, res, ns, name, sub)
        if res.review:
            # SelfSubjectAccessReview, SelfSubjectReview: create only, answered (reviews.py)
            if verb != "create":
                raise errors.method_not_allowed()
            return self.send_json(201, reviews.answer(sim, res, user, self.decode_body(res)))
        if verb == "get":
            obj = api.get(res, ns, name)
            return self.send_object(200, res, obj, q)
        if verb == "list":
            items, rv, cont, remaining = api.list(res, ns, q)
            return self.send_list(res, items, rv, cont, remaining, q)
        if verb == "watch":
            return self.watch(res, ns, q, name)
        if verb in ("create", "update"):
            obj = self.decode_body(res)
            if verb == "create":
                dry = q.get("dryRun") == "All"
                out, warnings = api.create(user, res, ns, obj, dry_run=dry)
                self.warnings = warnings
                return self.send_object(201, res, out, q)
            out, warnings = api.update(user, res, ns, name, obj, sub=sub)
            self.warnings = warnings
            return self.send_object(200, res, out, q)
        if verb == "patch":
            ctype = self.headers.get("Content-Type") or ""
            base = ctype.split(";")[0].strip().lower()
            if base == "application/apply-patch+yaml":
                raise errors.unsupported_media(
                    ["application/json-patch+json", "application/merge-patch+json"] +
                    ([] if res.crd else ["application/strategic-merge-patch+json"]))
            out, warnings = api.patch(user, res, ns, name, ctype, self.body(), sub=sub)
            self.warnings = warnings
            return self.send_object(200, res, out, q)
        if verb == "delete":
            opts = self.delete_options(q)
            body, code = api.delete(user, res, ns, name, opts)
            return self.send_json(code, None, raw=sim.store.encode(body))
        if verb == "deletecollection":
            opts = self.delete_options(q)
            items, rv, _, _ = api.list(res, ns, q)
            out = []
            for o in items:
                try:
                    b, _ = api.delete(user, res, ns, o["metadata"]["name"], opts)
                    out.append(b if b.get("kind") != "Status" else o)
                except errors.ApiError as e:
                    if e.code != 404:
                        raise
            return self.send_json(200, {"kind": f"{res.kind}List",
                                        "apiVersion": res.api_version,
                                        "metadata": {"resourceVersion": sim.store.current_rv()},
                                        "items": out})
        raise errors.method_not_allowed()

    def decode_body(self, res):
        ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip().lower()
        body = self.body()
        if ctype in ("application/json", ""):
            try:
                return json.loads(body or b"")
            except ValueError as e:
                raise errors.bad_request(f"couldn't get version/kind; json parse error: {e}") \
                    from None
        if ctype in ("application/yaml", "application/x-yaml"):
            import yaml
            try:
                return yaml.safe_load(body)
            except yaml.YAMLError as e:
                raise errors.bad_request(f"error converting YAML to JSON: {e}") from None
        types = ["application/json", "application/yaml"]
        if not res.crd:
            types.append("application/vnd.kubernetes.protobuf")
        raise errors.unsupported_media(types)

    def delete_options(self, q):
        opts = {}
        body = self.body()
        if body.strip():
            ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip()
            if ctype not in ("application/json", "", "application/yaml"):
                raise errors.unsupported_media(["application/json", "application/yaml"])
            try:
                opts = json.loads(body)
            except ValueError as e:
                raise errors.bad_request(f"couldn't get version/kind; json parse error: {e}") \
                    from None
            if not isinstance(opts, dict):
                raise errors.bad_request("DeleteOptions must be an object")
            if opts.get("kind") not in (None, "DeleteOptions"):
                raise errors.bad_request(f"expected DeleteOptions, got {opts.get('kind')}")
        for k in ("propagationPolicy",):
            if k in q:
                opts[k] = q[k]
        if "gracePeriodSeconds" in q:
            try:
                opts["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
            except ValueError:
                raise errors.bad_request("gracePeriodSeconds must be an integer") from None
        if "orphanDependents" in q:
            opts["orphanDependents"] = q["orphanDependents"] == "true"
        if q.get("dryRun") == "All" or opts.get("dryRun") == ["All"]:
            opts["dryRun"] = True
        else:
            opts.pop("dryRun", None)
        return opts

    # ------------------------------------------------------------- output
    def wants_table(self):
        acc = self.headers.get("Accept") or ""
        return "as=Table" in acc

    def wants_meta(self, listing):
        """Accept: application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1
        (client-go's metadata client): the first media range the server can
        give decides, as in the real API server's content negotiation; a
        PartialObjectMetadata range alone that does not fit is 406."""
        acc = self.headers.get("Accept") or ""
        want = "PartialObjectMetadataList" if listing else "PartialObjectMetadata"
        refused = False
        for rng in acc.split(","):
            parts = [x.strip() for x in rng.split(";")]
            params = dict(x.split("=", 1) for x in parts[1:] if "=" in x)
            as_ = params.get("as")
            if as_ is None:
                if parts[0] in ("application/json", "application/*", "*/*", ""):
                    return False
                continue
            if as_ == "Table":
                return False
            if as_.startswith("PartialObjectMetadata"):
                if as_ == want and params.get("g") == "meta.k8s.io" and \
                        params.get("v") in ("v1", "v1beta1"):
                    return params["v"]
                refused = True
        if refused:
            raise errors.ApiError(406, f"only the following media types are accepted: "
                                  f"application/json;as={want};g=meta.k8s.io;v=v1, "
                                  "application/json", "NotAcceptable", {})
        return False

    @staticmethod
    def partial(obj, v):
        return {"kind": "PartialObjectMetadata", "apiVersion": f"meta.k8s.io/{v}",
                "metadata": obj.get("metadata", {})}

    def send_object(self, code, res, obj, q):
        meta = self.wants_meta(False) if code in (200, 201) else False
        if meta:
            return self.send_json(code, self.partial(obj, meta))
        if self.wants_table() and code in (200, 201):
            return self.send_json(code, tables.table(res, [obj], self.sim.store.current_rv(), q),
                                  {"Content-Type": "application/json"} and None)
        return self.send_json(code, None, raw=self.sim.store.encode(obj))

    def send_list(self, res, items, rv, cont, remaining, q):
        if self.wants_table():
            t = tables.table(res, items, rv, q)
            if cont:
                t["metadata"]["continue"] = cont
            return self.send_json(200, t)
        md = {"resourceVersion": rv}
        if cont:
            md["continue"] = cont
            if remaining is not None:
                md["remainingItemCount"] = remaining
        meta = self.wants_meta(True)
        if meta:
            return self.send_json(200, {"kind": "PartialObjectMetadataList",
                                        "apiVersion": f"meta.k8s.io/{meta}", "metadata": md,
                                        "items": [self.partial(o, meta) for o in items]})
        head = util.dumps({"kind": f"{res.kind}List", "apiVersion": res.api_version,
                           "metadata": md})[:-1]
        enc = self.sim.store.encode
        raw = head + b',"items":[' + b",".join(enc(o) for o in items) + b"]}"
        return self.send_json(200, None, raw=raw)

