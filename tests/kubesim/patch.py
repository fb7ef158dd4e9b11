"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and, for
built-in kinds, strategic merge patch (lists merged by their patchMergeKey,
the $patch / $retainKeys / $deleteFromPrimitiveList / $setElementOrder
directives)."""
import util


class PatchError(Exception):
    def __init__(self, msg, code=422):
        super().__init__(msg)
        self.code = code


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return util.deep(patch)
    if not isinstance(target, dict):
        target = {}
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _ptr(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f'json patch path "{path}" must start with "/"', 400)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc, parts, op):
    cur = doc
    for p in parts[:-1]:
        if isinstance(cur, dict):
            if p not in cur:
                raise PatchError(f"{op} operation does not apply: doc is missing path: "
                                 f'"/{"/".join(parts)}": missing value')
            cur = cur[p]
        elif isinstance(cur, list):
            try:
                cur = cur[int(p)]
            except (ValueError, IndexError):
                raise PatchError(f"{op} operation does not apply: doc is missing path: "
                                 f'"/{"/".join(parts)}": missing value') from None
        else:
            raise PatchError(f"{op} operation does not apply: doc is missing path")
    return cur


def json_patch(doc, ops):
    if not isinstance(ops, list):
        raise PatchError("json: cannot unmarshal object into Go value of type jsonpatch.Patch", 400)
    doc = util.deep(doc)
    for o in ops:
        if not isinstance(o, dict) or "op" not in o:
            raise PatchError("Unexpected kind: missing op", 400)
        op = o["op"]
        if op not in ("add", "remove", "replace", "move", "copy", "test"):
            raise PatchError(f"Unexpected kind: {op}", 400)
        parts = _ptr(o.get("path", ""))
        if op in ("add", "replace", "test") and "value" not in o:
            raise PatchError(f"{op} operation does not apply: missing value", 400)
        if op in ("move", "copy"):
            src = _ptr(o.get("from", ""))
            val = _get(doc, src, op)
            if op == "move":
                doc = _remove(doc, src, op)
            doc = _add(doc, parts, util.deep(val), op)
        elif op == "add":
            doc = _add(doc, parts, util.deep(o["value"]), op)
        elif op == "remove":
            doc = _remove(doc, parts, op)
        elif op == "replace":
            _get(doc, parts, op)
            doc = _remove(doc, parts, op)
            doc = _add(doc, parts, util.deep(o["value"]), op)
        elif op == "test":
            got = _get(doc, parts, op)
            if got != o["value"]:
                raise PatchError(f'testing value {o.get("path")} failed: test failed')
    return doc


def _get(doc, parts, op):
    if not parts:
        return doc
    cur = _walk(doc, parts, op)
    last = parts[-1]
    try:
        if isinstance(cur, dict):
            return cur[last]
        if isinstance(cur, list):
            return cur[int(last)]
    except (KeyError, ValueError, IndexError):
        pass
    raise PatchError(f'{op} operation does not apply: doc is missing key: /{"/".join(parts)}: '
                     "missing value")


def _add(doc, parts, val, op):
    if not parts:
        return val
    cur = _walk(doc, parts, op)
    last = parts[-1]
    if isinstance(cur, dict):
        cur[last] = val
    elif isinstance(cur, list):
        if last == "-":
            cur.append(val)
        else:
            try:
                i = int(last)
            except ValueError:
                raise PatchError(f"{op} operation does not apply: invalid index") from None
            if i < 0 or i > len(cur):
                raise PatchError(f"{op} operation does not apply: index out of bounds")
            cur.insert(i, val)
    else:
        raise PatchError(f"{op} operation does not apply: doc is missing path")
    return doc


def _remove(doc, parts, op):
    if not parts:
        return None
    cur = _walk(doc, parts, op)
    last = parts[-1]
    try:
        if isinstance(cur, dict):
            del cur[last]
            return doc
        if isinstance(cur, list):
            del cur[int(last)]
            return doc
    except (KeyError, ValueError, IndexError):
        pass
    raise PatchError(f'{op} operation does not apply: doc is missing path: "/{"/".join(parts)}"'
                     ": missing value")


# patchMergeKey of the lists in the built-in kinds the simulator serves
MERGE_KEYS = {
    "ownerReferences": "uid", "containers": "name", "initContainers": "name",
    "ephemeralContainers": "name", "volumes": "name", "volumeMounts": "mountPath",
    "env": "name", "ports": "containerPort", "conditions": "type", "imagePullSecrets": "name",
    "tolerations": None, "subjects": None, "rules": None, "finalizers": "$primitive",
    "hostAliases": "ip", "containerStatuses": "name", "volumeDevices": "devicePath",
    "topologySpreadConstraints": "topologyKey", "readinessGates": None,
}


def strategic_merge_patch(target, patch, key=None):
    if not isinstance(patch, dict):
        return util.deep(patch)
    if not isinstance(target, dict):
        target = {}
    if patch.get("$patch") == "replace":
        p = {k: v for k, v in patch.items() if k != "$patch"}
        return util.deep(p)
    if patch.get("$patch") == "delete":
        return None
    out = dict(target)
    retain = patch.get("$retainKeys")
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys"):
            continue
        if k.startswith("$setElementOrder/"):
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            name = k.split("/", 1)[1]
            if isinstance(out.get(name), list) and isinstance(v, list):
                out[name] = [x for x in out[name] if x not in v]
            continue
        if v is None:
            out.pop(k, None)
            continue
        mk = MERGE_KEYS.get(k)
        if isinstance(v, list) and mk and isinstance(out.get(k), list):
            if mk == "$primitive":
                cur = list(out[k])
                for x in v:
                    if x not in cur:
                        cur.append(x)
                out[k] = cur
            else:
                out[k] = _merge_list(out[k], v, mk)
        elif isinstance(v, list):
            out[k] = [_strip(x) for x in v if not (isinstance(x, dict) and x.get("$patch") == "delete")]
        elif isinstance(v, dict):
            r = strategic_merge_patch(out.get(k), v, k)
            if r is None:
                out.pop(k, None)
            else:
                out[k] = r
        else:
            out[k] = v
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    return out


def _strip(x):
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if not k.startswith("$")}
    return util.deep(x)


def _merge_list(cur, patch, mk):
    out = [util.deep(x) for x in cur]
    for item in patch:
        if not isinstance(item, dict) or mk not in item:
            out.append(_strip(item))
            continue
        idx = next((i for i, x in enumerate(out) if isinstance(x, dict) and x.get(mk) == item[mk]),
                   None)
        if item.get("$patch") == "delete":
            if idx is not None:
                del out[idx]
            continue
        if idx is None:
            out.append(_strip(item))
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out
