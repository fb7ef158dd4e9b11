"""The apiserver's verbs on the object store, independent of HTTP: get, list,
create, update, patch, delete (with propagation, finalizers, graceful pod
deletion), and the system writes the simulated controllers use. Raises
errors.ApiError with the real reasons and messages."""
import base64
import json
import random
import time

import admission
import errors
import patch as patchmod
import rbac
import util
from labelsel import FieldSelector, LabelSelector
from resources import BY_PLURAL, by_kind
from store import mark_deleting

GEN_CHARS = "bcdfghjklmnpqrstvwxz2456789"
SERVER_META = ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
               "deletionGracePeriodSeconds", "generation", "selfLink", "managedFields")


class ApiServer:
    def __init__(self, store, validator, authz, owner_ref_enforcement=False):
        self.store = store
        self.validator = validator
        self.authz = authz
        self.owner_ref_enforcement = owner_ref_enforcement

    # ------------------------------------------------------------ authz
    def authorize(self, user, verb, res, ns, name=None, sub=None):
        a = {"verb": verb, "group": res.group, "resource": res.plural, "subresource": sub,
             "namespace": ns if res.namespaced else "", "name": name}
        if res.plural == "namespaces" and name:
            # /api/v1/namespaces/NAME is in namespace NAME for authorization
            # (k8s.io/apiserver pkg/endpoints/request/requestinfo.go:194-196):
            # a Role in NAME may grant get on it
            a["namespace"] = name
        if user.admin:
            return
        if not self.authz.allowed(user, a):
            raise errors.forbidden(res, name, rbac.forbidden_message(user, a))

    def can(self, user, verb, group, resource, ns, name=None, sub=None):
        if user.admin:
            return True
        return self.authz.allowed(user, {"verb": verb, "group": group, "resource": resource,
                                         "subresource": sub, "namespace": ns, "name": name})

    # ------------------------------------------------------------- read
    def get(self, res, ns, name):
        o = self.store.get(res.plural, ns if res.namespaced else "", name)
        if o is None:
            raise errors.not_found(res, name)
        return o

    def selectors(self, res, q):
        ls = LabelSelector(q.get("labelSelector", ""))
        fs = FieldSelector(q.get("fieldSelector", ""), res)
        return ls, fs

    @staticmethod
    def matches(obj, ls, fs):
        return ls.matches((obj.get("metadata") or {}).get("labels")) and fs.matches(obj)

    def list(self, res, ns, q):
        ls, fs = self.selectors(res, q)
        limit = int(q.get("limit") or 0) if str(q.get("limit") or "0").isdigit() else 0
        cont = q.get("continue")
        start_after = None
        with self.store.lock:
            rv = self.store.current_rv()
            if cont:
                try:
                    tok = json.loads(base64.urlsafe_b64decode(cont + "==").decode())
                    start_after = tuple(tok["start"])
                    if self.store.expired(int(tok["rv"])):
                        raise errors.expired("The provided continue parameter is too old to "
                                             "display a consistent list result. You can start a "
                                             "new list without the continue parameter, or use the "
                                             "continue token in this response to retrieve the "
                                             "remainder of the results. Continuing with the "
                                             "provided token results in an inconsistent list - "
                                             "objects that were created, modified, or deleted "
                                             "between the time the first chunk was returned and "
                                             "now may show up in the list.")
                except errors.ApiError:
                    raise
                except Exception:  # noqa: BLE001
                    raise errors.bad_request("continue key is not valid: illegal base64 data") \
                        from None
            name = fs.name_equals()
            if name is not None and ns is not None:
                o = self.store.get(res.plural, ns if res.namespaced else "", name)
                objs = [o] if o is not None else []
            else:
                objs = self.store.list(res.plural, ns if res.namespaced else None)
        items = []
        next_key = None
        remaining = 0
        for o in objs:
            md = o["metadata"]
            key = (md.get("namespace", ""), md["name"])
            if start_after is not None and key <= start_after:
                continue
            if not self.matches(o, ls, fs):
                continue
            if limit and len(items) >= limit:
                remaining += 1
                continue
            items.append(o)
            if limit and len(items) == limit:
                next_key = key
        contv = None
        if limit and remaining and next_key is not None:
            contv = base64.urlsafe_b64encode(json.dumps(
                {"rv": int(rv), "start": list(next_key)}).encode()).decode().rstrip("=")
        return items, rv, contv, (remaining if contv else None)

    # ------------------------------------------------------------ write
    def _decode_check(self, res, obj, name_hint, update=False):
        """Schema + type checks (400 for unknown fields / bad JSON types)."""
        if not isinstance(obj, dict):
            raise errors.bad_request(f"{res.kind} in version \"{res.version}\" cannot be handled "
                                     f"as a {res.kind}: json: cannot unmarshal into Go value of "
                                     f"type struct")
        av, kind = obj.get("apiVersion"), obj.get("kind")
        if kind is not None and kind != res.kind:
            raise errors.bad_request(f"{kind} in version \"{av}\" cannot be handled as a "
                                     f"{res.kind}: no kind \"{kind}\" is registered for version "
                                     f"\"{res.api_version}\"" if not by_kind(av or "", kind) else
                                     f"the API version in the data ({av}) does not match the "
                                     f"expected API version ({res.api_version})"
                                     if av != res.api_version else
                                     f"{kind} in version \"{av}\" cannot be handled as a {res.kind}")
        if av is not None and av != res.api_version:
            raise errors.bad_request(f"the API version in the data ({av}) does not match the "
                                     f"expected API version ({res.api_version})")
        if res.crd and (kind is None or av is None):
            what = "Kind" if kind is None else "apiVersion"
            raise errors.bad_request(f"Object '{what}' is missing in '{util.dumps(obj).decode()[:200]}'")
        obj["apiVersion"] = res.api_version
        obj["kind"] = res.kind
        md = obj.get("metadata")
        if md is None:
            obj["metadata"] = md = {}
        elif not isinstance(md, dict):
            raise errors.bad_request(f"{res.kind} in version \"{res.version}\" cannot be handled "
                                     f"as a {res.kind}: json: cannot unmarshal into Go struct "
                                     f"field {res.kind}.metadata of type v1.ObjectMeta")
        errs = self.validator.validate(res, obj)
        unknown = [e for e in errs if e.kind == "unknown"]
        typ = [e for e in errs if e.kind != "unknown"]
        if unknown:
            raise errors.bad_request(
                f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: '
                "strict decoding error: " + ", ".join(f'unknown field "{e.path}"' for e in unknown))
        if typ:
            if res.crd:
                raise errors.invalid(res, name_hint, [
                    ("FieldValueTypeInvalid" if e.kind == "type" else "FieldValueInvalid", e.path,
                     f"Invalid value: {json.dumps(e.value)[:80]}: {e.path} in body {e.msg}")
                    for e in typ])
            e = typ[0]
            raise errors.bad_request(
                f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: '
                f"json: cannot unmarshal {Validator_json_type(e.value)} into Go struct field "
                f"{res.kind}.{e.path} ({e.msg})")
        if res.plural == "secrets":
            bad = admission.decode_secret_data(obj)
            if bad:
                raise errors.bad_request(f'Secret in version "v1" cannot be handled as a Secret: '
                                         f"{bad}")

    def _semantic(self, res, obj, name, warnings, creating, old=None):
        causes = []
        admission.check_meta(res, obj, causes, creating)
        if res.plural == "secrets":
            admission.validate_secret(obj, causes)
            if old is not None:
                if (old.get("type") or "Opaque") != (obj.get("type") or "Opaque"):
                    causes.append(("FieldValueInvalid", "type", f'Invalid value: "{obj.get("type")}": field is immutable'))
                if old.get("immutable") and (old.get("data") != obj.get("data")):
                    causes.append(("FieldValueForbidden", "data",
                                   "Forbidden: field is immutable when `immutable` is set"))
        elif res.plural == "networkpolicies":
            admission.validate_netpol(obj, causes)
        elif res.plural in ("deployments", "cronjobs", "jobs") or (res.plural == "pods" and creating):
            admission.validate_workload(res, obj, causes)
        elif res.plural == "persistentvolumeclaims":
            admission.validate_pvc(obj, causes)
            if old is not None and old.get("spec") != obj.get("spec") and \
                    (old.get("spec") or {}).get("accessModes") != (obj.get("spec") or {}).get("accessModes"):
                causes.append(("FieldValueForbidden", "spec", "Forbidden: spec is immutable after "
                               "creation except resources.requests for bound claims"))
        if old is not None:
            omd, nmd = old["metadata"], obj["metadata"]
            if omd.get("deletionTimestamp"):
                added = set(nmd.get("finalizers") or []) - set(omd.get("finalizers") or [])
                if added:
                    causes.append(("FieldValueForbidden", "metadata.finalizers",
                                   "Forbidden: no new finalizers can be added if the object is "
                                   "being deleted, found new finalizers " + json.dumps(sorted(added))))
        if causes:
            raise errors.invalid(res, name, causes)
        hook = []
        if res.plural == "virtualmachines":
            admission.validate_vm(obj, hook, warnings)
        elif res.plural == "virtualmachineinstances" and creating:
            admission.validate_vmi_spec(obj.get("spec"), "spec", hook)
        elif res.plural == "datavolumes" and creating:
            admission.validate_dv(obj, hook)
        if hook:
            raise admission.webhook_error(res, hook)

    def _owner_refs_admission(self, user, res, ns, name, obj, old):
        if not self.owner_ref_enforcement or user.admin:
            return
        new_refs = (obj.get("metadata") or {}).get("ownerReferences") or []
        old_refs = ((old or {}).get("metadata") or {}).get("ownerReferences") or []
        if new_refs == old_refs:
            return
        if not self.can(user, "delete", res.group, res.plural, ns, name):
            raise errors.forbidden(res, name, "cannot set an ownerRef on a resource you can't "
                                   "delete: " + rbac.forbidden_message(user, {
                                       "verb": "delete", "group": res.group,
                                       "resource": res.plural, "namespace": ns}))
        olds = {(o.get("uid"), bool(o.get("blockOwnerDeletion"))) for o in old_refs}
        for o in new_refs:
            if o.get("blockOwnerDeletion") and (o.get("uid"), True) not in olds:
                ores = by_kind(o.get("apiVersion", ""), o.get("kind", ""))
                group = ores.group if ores else o.get("apiVersion", "").rpartition("/")[0]
                plural = ores.plural if ores else o.get("kind", "").lower() + "s"
                if not self.can(user, "update", group, plural, ns, o.get("name"), "finalizers"):
                    raise errors.ApiError(422, f'{errors.qualified(res)} "{name}" is forbidden: '
                                          "cannot set blockOwnerDeletion if an ownerReference "
                                          "refers to a resource you can't set finalizers on: " +
                                          rbac.forbidden_message(user, {
                                              "verb": "update", "group": group,
                                              "resource": plural, "subresource": "finalizers",
                                              "namespace": ns}), "Forbidden", {})

    def _check_namespace(self, res, ns, name):
        if not res.namespaced:
            return
        nso = self.store.get("namespaces", "", ns)
        if nso is None:
            raise errors.ApiError(404, f'namespaces "{ns}" not found', "NotFound",
                                  {"name": ns, "kind": "namespaces"})
        if nso["metadata"].get("deletionTimestamp"):
            raise errors.forbidden(res, name, f"unable to create new content in namespace {ns} "
                                   "because it is being terminated")

    def create(self, user, res, ns, obj, dry_run=False, keep_status=False):
        warnings = []
        md_in = obj.get("metadata") if isinstance(obj, dict) else None
        name_hint = (md_in or {}).get("name") or (md_in or {}).get("generateName") or ""
        self._decode_check(res, obj, name_hint)
        md = obj["metadata"]
        if res.namespaced:
            if md.get("namespace") and md["namespace"] != ns:
                raise errors.bad_request("the namespace of the provided object does not match "
                                         "the namespace sent on the request")
            md["namespace"] = ns
        else:
            md.pop("namespace", None)
        if md.get("resourceVersion"):
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        for k in SERVER_META:
            if k != "resourceVersion":
                md.pop(k, None)
        if res.status and not keep_status:
            obj.pop("status", None)
        self._semantic(res, obj, md.get("name") or md.get("generateName", ""), warnings, True)
        self._owner_refs_admission(user, res, ns, md.get("name"), obj, None)
        self._defaults(res, obj)
        for attempt in range(8):
            if not md.get("name"):
                md["name"] = md["generateName"] + "".join(random.choice(GEN_CHARS)
                                                          for _ in range(5))
                gen = True
            else:
                gen = False
            with self.store.lock:
                self._check_namespace(res, ns, md["name"])
                if self.store.get(res.plural, ns if res.namespaced else "", md["name"]):
                    if gen:
                        md["name"] = ""
                        continue
                    raise errors.already_exists(res, md["name"])
                md["uid"] = util.new_uid()
                md["creationTimestamp"] = util.now_rfc3339()
                if res.crd or res.plural in ("pods", "namespaces", "nodes"):
                    md["generation"] = 1
                if dry_run:
                    md["resourceVersion"] = ""
                    return obj, warnings
                return self.store.add(res.plural, obj), warnings
        raise errors.ApiError(500, f"Internal error occurred: failed to allocate a name for "
                               f"{res.plural} with prefix {md.get('generateName')}",
                               "ServerTimeout", {"kind": res.plural})

    def _defaults(self, res, obj):
        if res.plural == "secrets":
            obj.setdefault("type", "Opaque")
        elif res.plural == "namespaces":
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj.setdefault("status", {"phase": "Active"})
            obj["metadata"].setdefault("labels", {})
            obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = obj["metadata"].get("name", "")
        elif res.plural == "persistentvolumeclaims":
            spec = obj.setdefault("spec", {})
            spec.setdefault("volumeMode", "Filesystem")
            spec.setdefault("storageClassName", "standard")
            obj.setdefault("status", {"phase": "Pending"})
        elif res.plural == "pods":
            spec = obj.setdefault("spec", {})
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("schedulerName", "default-scheduler")
            spec.setdefault("dnsPolicy", "ClusterFirst")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            obj.setdefault("status", {"phase": "Pending", "qosClass": "Burstable"})
        elif res.plural in ("virtualmachines", "virtualmachineinstances", "datavolumes"):
            obj.setdefault("status", {})
            if res.plural == "virtualmachineinstances":
                obj["status"] = {"phase": "Pending"} if not obj["status"] else obj["status"]
                spec = obj.get("spec") or {}
                dom = spec.setdefault("domain", {})
                dom.setdefault("firmware", {}).setdefault("uuid", util.new_uid())
                dom.setdefault("machine", {}).setdefault("type", "q35")
        elif res.plural == "events":
            obj.setdefault("count", 1)
            obj.setdefault("type", "Normal")

    def update(self, user, res, ns, name, obj, sub=None, from_patch=False, patch_rv=None):
        warnings = []
        if not isinstance(obj, dict):
            raise errors.bad_request("invalid object")
        self._decode_check(res, obj, name, update=True)
        md = obj["metadata"]
        if md.get("name") and md["name"] != name:
            raise errors.bad_request(f"the name of the object ({md['name']}) does not match the "
                                     f"name on the URL ({name})")
        md["name"] = name
        if res.namespaced:
            if md.get("namespace") and md["namespace"] != ns:
                raise errors.bad_request("the namespace of the provided object does not match "
                                         "the namespace sent on the request")
            md["namespace"] = ns
        with self.store.lock:
            old = self.store.get(res.plural, ns if res.namespaced else "", name)
            if old is None:
                raise errors.not_found(res, name)
            omd = old["metadata"]
            rv = patch_rv if from_patch else md.get("resourceVersion")
            if rv:
                if rv != omd["resourceVersion"]:
                    raise errors.conflict(res, name)
            elif not from_patch and res.crd:
                raise errors.invalid(res, name, [("FieldValueInvalid", "metadata.resourceVersion",
                                                  "Invalid value: 0x0: must be specified for an "
                                                  "update")])
            if md.get("uid") and md["uid"] != omd["uid"]:
                raise errors.ApiError(409, f"Precondition failed: UID in precondition: "
                                      f"{md['uid']}, UID in object meta: {omd['uid']}",
                                      "Conflict", {"name": name, "kind": res.plural})
            for k in ("uid", "creationTimestamp", "deletionTimestamp",
                      "deletionGracePeriodSeconds", "generation"):
                if k in omd:
                    md[k] = omd[k]
                else:
                    md.pop(k, None)
            if res.status:
                if sub == "status":
                    new = util.deep(old)
                    new["status"] = obj.get("status")
                    if new["status"] is None:
                        new.pop("status")
                    obj = new
                    md = obj["metadata"]
                else:
                    if "status" in old:
                        obj["status"] = old["status"]
                    else:
                        obj.pop("status", None)
            if res.plural == "namespaces" and sub != "finalize":
                obj["spec"] = old.get("spec")
            if sub != "status":
                self._semantic(res, obj, name, warnings, False, old)
                self._owner_refs_admission(user, res, ns, name, obj, old)
            if res.plural == "secrets":
                obj.setdefault("type", old.get("type", "Opaque"))
            cmp_new = {k: v for k, v in obj.items() if k != "metadata"}
            cmp_old = {k: v for k, v in old.items() if k != "metadata"}
            nm = {k: v for k, v in md.items() if k != "resourceVersion"}
            om = {k: v for k, v in omd.items() if k != "resourceVersion"}
            if cmp_new == cmp_old and nm == om:
                return old, warnings
            if "generation" in omd:
                spec_new = {k: v for k, v in obj.items() if k not in ("metadata", "status")}
                spec_old = {k: v for k, v in old.items() if k not in ("metadata", "status")}
                if spec_new != spec_old:
                    md["generation"] = omd["generation"] + 1
            out, removed = self.store.put(res.plural, obj)
            return out, warnings

    def patch(self, user, res, ns, name, ctype, body, sub=None):
        ctype = (ctype or "").split(";")[0].strip().lower()
        try:
            p = json.loads(body or b"null")
        except ValueError as e:
            raise errors.bad_request(f"error decoding patch: {e}") from None
        with self.store.lock:
            old = self.store.get(res.plural, ns if res.namespaced else "", name)
            if old is None:
                raise errors.not_found(res, name)
            try:
                if ctype == "application/merge-patch+json":
                    if not isinstance(p, dict):
                        raise patchmod.PatchError("json: cannot unmarshal array into Go value of "
                                                  "type map[string]interface {}", 400)
                    new = patchmod.merge_patch(old, p)
                elif ctype == "application/json-patch+json":
                    new = patchmod.json_patch(old, p)
                elif ctype == "application/strategic-merge-patch+json" and not res.crd:
                    if not isinstance(p, dict):
                        raise patchmod.PatchError("json: cannot unmarshal array into Go value of "
                                                  "type map[string]interface {}", 400)
                    new = patchmod.strategic_merge_patch(old, p)
                else:
                    types = ["application/json-patch+json", "application/merge-patch+json"]
                    if not res.crd:
                        types.append("application/strategic-merge-patch+json")
                    raise errors.unsupported_media(types)
            except patchmod.PatchError as e:
                if e.code == 400:
                    raise errors.bad_request(str(e)) from None
                raise errors.ApiError(422, str(e), "Invalid", {}) from None
            if not isinstance(new, dict):
                raise errors.bad_request("patched object is not an object")
            new = util.deep(new)
            prv = None
            if isinstance(p, dict):
                prv = (p.get("metadata") or {}).get("resourceVersion") if isinstance(
                    p.get("metadata"), dict) else None
            elif isinstance(p, list):
                for op in p:
                    if isinstance(op, dict) and op.get("path") == "/metadata/resourceVersion" and \
                            op.get("op") in ("add", "replace"):
                        prv = op.get("value")
            md = new.setdefault("metadata", {})
            md["resourceVersion"] = old["metadata"]["resourceVersion"]
            if prv:
                md["resourceVersion"] = prv
            return self.update(user, res, ns, name, new, sub=sub, from_patch=True, patch_rv=prv)

    # ----------------------------------------------------------- delete
    def delete(self, user, res, ns, name, opts):
        """Returns (body, code)."""
        prop = opts.get("propagationPolicy")
        if prop is None and opts.get("orphanDependents") is not None:
            prop = "Orphan" if opts["orphanDependents"] else "Background"
        if prop not in (None, "Orphan", "Background", "Foreground"):
            raise errors.invalid(res, name, [("FieldValueNotSupported", "propagationPolicy",
                                              f'Unsupported value: "{prop}": supported values: '
                                              '"Foreground", "Background", "Orphan", "nil"')])
        grace = opts.get("gracePeriodSeconds")
        pre = opts.get("preconditions") or {}
        dry = bool(opts.get("dryRun"))
        with self.store.lock:
            old = self.store.get(res.plural, ns if res.namespaced else "", name)
            if old is None:
                raise errors.not_found(res, name)
            omd = old["metadata"]
            if pre.get("uid") and pre["uid"] != omd["uid"]:
                raise errors.ApiError(409, f"Precondition failed: UID in precondition: "
                                      f"{pre['uid']}, UID in object meta: {omd['uid']}",
                                      "Conflict", {"name": name, "kind": res.plural})
            if pre.get("resourceVersion") and pre["resourceVersion"] != omd["resourceVersion"]:
                raise errors.ApiError(409, f"Precondition failed: ResourceVersion in precondition:"
                                      f" {pre['resourceVersion']}, ResourceVersion in object meta:"
                                      f" {omd['resourceVersion']}", "Conflict",
                                      {"name": name, "kind": res.plural})
            if dry:
                return old, 200
            return self.sys_delete(res, old, prop, grace)

    def sys_delete(self, res, old, prop=None, grace=None):
        """Delete as the apiserver does; returns (body, code)."""
        if isinstance(res, str):
            res = BY_PLURAL[res]
        with self.store.lock:
            cur = self.store.get(res.plural, old["metadata"].get("namespace", ""),
                                 old["metadata"]["name"])
            if cur is None:
                raise errors.not_found(res, old["metadata"]["name"])
            new = util.deep(cur)
            md = new["metadata"]
            fins = list(md.get("finalizers") or [])
            if prop == "Foreground" and "foregroundDeletion" not in fins:
                fins.append("foregroundDeletion")
                if "orphan" in fins:
                    fins.remove("orphan")
            elif prop == "Orphan" and "orphan" not in fins:
                fins.append("orphan")
                if "foregroundDeletion" in fins:
                    fins.remove("foregroundDeletion")
            graceful = False
            if res.plural == "pods":
                g = grace if grace is not None else (new.get("spec") or {}).get(
                    "terminationGracePeriodSeconds", 30)
                phase = (new.get("status") or {}).get("phase")
                if (new.get("spec") or {}).get("nodeName") and g and g > 0 and \
                        phase not in ("Succeeded", "Failed"):
                    graceful = True
            elif res.plural == "namespaces":
                graceful = True
                new.setdefault("status", {})["phase"] = "Terminating"
            if fins or graceful:
                if md.get("deletionTimestamp") and fins == (cur["metadata"].get("finalizers") or []):
                    return cur, 200
                if fins:
                    md["finalizers"] = fins
                if res.plural == "pods":
                    g = grace if grace is not None else (new.get("spec") or {}).get(
                        "terminationGracePeriodSeconds", 30)
                    mark_deleting(new, time.time() + (g or 0), g)
                else:
                    mark_deleting(new, None, 0)
                out, _ = self.store.put(res.plural, new)
                return out, 200
            gone = self.store.remove(res.plural, cur)
            if res.crd or res.plural == "pods":
                return gone, 200
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "details": {"name": md["name"], **({"group": res.group} if res.group else {}),
                                "kind": res.plural, "uid": md["uid"]}}, 200

    # ------------------------------------------------- system writes
    def sys_create(self, plural, obj):
        res = BY_PLURAL[plural]
        md = obj["metadata"]
        with self.store.lock:
            if not md.get("name"):
                while True:
                    md["name"] = md["generateName"] + "".join(random.choice(GEN_CHARS)
                                                              for _ in range(5))
                    if not self.store.get(plural, md.get("namespace", ""), md["name"]):
                        break
            elif self.store.get(plural, md.get("namespace", ""), md["name"]):
                raise errors.already_exists(res, md["name"])
            md.setdefault("uid", util.new_uid())
            md.setdefault("creationTimestamp", util.now_rfc3339())
            if res.crd or plural in ("pods",):
                md.setdefault("generation", 1)
            return self.store.add(plural, obj)

    def sys_update(self, plural, obj):
        """Store a changed copy of an object (caller made it with util.deep). Skips no-ops."""
        with self.store.lock:
            md = obj["metadata"]
            cur = self.store.get(plural, md.get("namespace", ""), md["name"])
            if cur is None or cur["metadata"].get("uid") != md.get("uid"):
                return None
            md["resourceVersion"] = cur["metadata"]["resourceVersion"]
            if cur == obj:
                return cur
            return self.store.put(plural, obj)[0]

    def event(self, obj, etype, reason, message, component):
        """Record an Event about obj, aggregating repeats like client-go's recorder."""
        md = obj["metadata"]
        ns = md.get("namespace") or "default"
        now = util.now_rfc3339()
        key = (md.get("uid"), reason, message)
        if not hasattr(self, "_events"):
            self._events = {}
        with self.store.lock:
            ek = self._events.get(key)
            e = self.store.get("events", *ek) if ek else None
            if e is not None:
                n = util.deep(e)
                n["count"] = (n.get("count") or 1) + 1
                n["lastTimestamp"] = now
                return self.store.put("events", n)[0]
            ev = {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{md['name']}.{int(time.time() * 1e9):x}"[:253],
                             "namespace": ns},
                "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                                   "name": md["name"], "namespace": md.get("namespace"),
                                   "uid": md.get("uid"),
                                   "resourceVersion": md.get("resourceVersion")},
                "reason": reason, "message": message, "type": etype,
                "source": {"component": component},
                "firstTimestamp": now, "lastTimestamp": now, "count": 1,
                "reportingComponent": component, "reportingInstance": "",
            }
            if ev["involvedObject"]["namespace"] is None:
                del ev["involvedObject"]["namespace"]
            out = self.sys_create("events", ev)
            if len(self._events) > 50000:
                self._events.clear()
            self._events[key] = (ns, out["metadata"]["name"])
            return out


def Validator_json_type(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "null"
