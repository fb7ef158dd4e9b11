"""Label and field selectors with apimachinery's grammar and semantics
(k8s.io/apimachinery/pkg/labels/selector.go, pkg/fields/selector.go).

Label selector: comma-separated requirements, all of which must hold:
  key=v  key==v  key!=v  key in (a,b)  key notin (a,b)  key  !key
`!=` and `notin` also match objects without the key; values may be empty.
"""
import re

from errors import ApiError

_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_KEY_RE = re.compile(r"^(([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)/)?"
                     + _NAME + "$")
_VAL_RE = re.compile(r"^(" + _NAME + ")?$")


def valid_label_key(k):
    if not isinstance(k, str) or not _KEY_RE.match(k):
        return False
    if "/" in k:
        prefix, name = k.split("/", 1)
        return len(prefix) <= 253 and len(name) <= 63
    return len(k) <= 63


def valid_label_value(v):
    return isinstance(v, str) and len(v) <= 63 and bool(_VAL_RE.match(v))


def _bad(msg):
    return ApiError(400, f"unable to parse requirement: {msg}", "BadRequest")


_TOK = re.compile(r"\s*(==|!=|=|\(|\)|,|!|[^\s=!(),]+)")


def _tokens(s):
    out = []
    pos = 0
    s = s.strip()
    while pos < len(s):
        m = _TOK.match(s, pos)
        if not m:
            raise _bad(f"unexpected character at {pos}")
        out.append(m.group(1))
        pos = m.end()
        while pos < len(s) and s[pos].isspace():
            pos += 1
    return out


class LabelSelector:
    """Parsed label selector; .matches(labels_dict)."""

    def __init__(self, text):
        self.text = text or ""
        self.reqs = self._parse(self.text)

    @staticmethod
    def _parse(text):
        if not text.strip():
            return []
        toks = _tokens(text)
        reqs = []
        i = 0
        n = len(toks)
        kw = {"in", "notin"}

        def key_at(j):
            if j >= n or toks[j] in ("=", "==", "!=", "(", ")", ",", "!"):
                found = toks[j] if j < n else ""
                raise _bad(f"found '{found}', expected: identifier")
            k = toks[j]
            if not valid_label_key(k):
                raise ApiError(400, f'unable to parse requirement: key: Invalid value: "{k}": '
                               "name part must consist of alphanumeric characters, '-', '_' or "
                               "'.', and must start and end with an alphanumeric character",
                               "BadRequest")
            return k

        while i < n:
            if toks[i] == "!":
                k = key_at(i + 1)
                reqs.append((k, "!", None))
                i += 2
            else:
                k = key_at(i)
                i += 1
                if i >= n or toks[i] == ",":
                    reqs.append((k, "exists", None))
                elif toks[i] in ("=", "==", "!="):
                    op = "!=" if toks[i] == "!=" else "="
                    i += 1
                    if i < n and toks[i] not in (",", "(", ")", "=", "==", "!=", "!"):
                        v = toks[i]
                        i += 1
                    else:
                        v = ""
                    if not valid_label_value(v):
                        raise ApiError(400, f'unable to parse requirement: values[0][{k}]: '
                                       f'Invalid value: "{v}": a valid label must be an empty '
                                       "string or consist of alphanumeric characters, '-', '_' "
                                       "or '.', and must start and end with an alphanumeric "
                                       "character", "BadRequest")
                    reqs.append((k, op, v))
                elif toks[i] in kw:
                    op = toks[i]
                    i += 1
                    if i >= n or toks[i] != "(":
                        raise _bad(f"found '{toks[i] if i < n else ''}', expected: '('")
                    i += 1
                    vals = []
                    expect_val = True
                    while True:
                        if i >= n:
                            raise _bad("found '', expected: ')'")
                        t = toks[i]
                        if t == ")":
                            if expect_val and vals:
                                vals.append("")
                            i += 1
                            break
                        if t == ",":
                            if expect_val:
                                vals.append("")
                            expect_val = True
                            i += 1
                            continue
                        if not expect_val:
                            raise _bad(f"found '{t}', expected: ',' or ')'")
                        if not valid_label_value(t):
                            raise _bad(f"invalid label value: \"{t}\"")
                        vals.append(t)
                        expect_val = False
                        i += 1
                    if not vals:
                        raise ApiError(400, "unable to parse requirement: values: Invalid "
                                       "value: []: for 'in', 'notin' operators, values set "
                                       "can't be empty", "BadRequest")
                    reqs.append((k, op, set(vals)))
                else:
                    raise _bad(f"found '{toks[i]}', expected: in, notin, =, ==, !=, gt, lt")
            if i < n:
                if toks[i] != ",":
                    raise _bad(f"found '{toks[i]}', expected: ','")
                i += 1
                if i >= n:
                    raise _bad("found '', expected: identifier")
        return reqs

    def matches(self, labels):
        labels = labels or {}
        for k, op, v in self.reqs:
            has = k in labels
            if op == "exists":
                if not has:
                    return False
            elif op == "!":
                if has:
                    return False
            elif op == "=":
                if not has or labels[k] != v:
                    return False
            elif op == "!=":
                if has and labels[k] == v:
                    return False
            elif op == "in":
                if not has or labels[k] not in v:
                    return False
            elif op == "notin":
                if has and labels[k] in v:
                    return False
        return True

    def empty(self):
        return not self.reqs


def match_label_selector_obj(sel, labels):
    """The structured form: {matchLabels, matchExpressions}."""
    if sel is None:
        return False
    labels = labels or {}
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in sel.get("matchExpressions") or []:
        k, op, vals = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(k) not in vals:
            return False
        if op == "NotIn" and k in labels and labels[k] in vals:
            return False
        if op == "Exists" and k not in labels:
            return False
        if op == "DoesNotExist" and k in labels:
            return False
    return True


# Field selectors ------------------------------------------------------------

COMMON_FIELDS = ("metadata.name", "metadata.namespace")
FIELDS = {
    "pods": COMMON_FIELDS + ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                             "spec.serviceAccountName", "status.phase", "status.podIP",
                             "status.nominatedNodeName"),
    "events": COMMON_FIELDS + ("involvedObject.kind", "involvedObject.namespace",
                               "involvedObject.name", "involvedObject.uid",
                               "involvedObject.apiVersion", "involvedObject.resourceVersion",
                               "involvedObject.fieldPath", "reason", "reportingComponent",
                               "source", "type"),
    "secrets": COMMON_FIELDS + ("type",),
    "namespaces": COMMON_FIELDS + ("status.phase",),
    "nodes": COMMON_FIELDS + ("spec.unschedulable",),
    "persistentvolumeclaims": COMMON_FIELDS,
}


def _split_unescaped(s, sep):
    parts, cur, esc = [], [], False
    for ch in s:
        if esc:
            cur.append(ch)
            esc = False
        elif ch == "\\":
            cur.append(ch)
            esc = True
        elif ch == sep:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _unescape(v):
    out, esc = [], False
    for ch in v:
        if esc:
            if ch not in "\\,=":
                raise ApiError(400, f"invalid field selector: invalid escape sequence: \\{ch}",
                               "BadRequest")
            out.append(ch)
            esc = False
        elif ch == "\\":
            esc = True
        else:
            out.append(ch)
    return "".join(out)


def _field_value(obj, field):
    if field == "source":
        return ((obj.get("source") or {}).get("component")) or ""
    cur = obj
    for p in field.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(p)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


class FieldSelector:
    def __init__(self, text, res):
        self.reqs = []
        text = text or ""
        if not text.strip():
            return
        allowed = FIELDS.get(res.plural, COMMON_FIELDS)
        for part in _split_unescaped(text, ","):
            if not part:
                continue
            idx, op = _find_op(part)
            if idx < 0:
                raise ApiError(400, f"invalid selector: '{text}'; can't understand '{part}'",
                               "BadRequest")
            f, v = part[:idx], part[idx + len(op):]
            f = f.strip()
            if f not in allowed:
                if res.crd:
                    raise ApiError(400, f'"{f}" is not a known field selector: only '
                                   '"metadata.name", "metadata.namespace"', "BadRequest")
                raise ApiError(400, f'field label not supported: {f}', "BadRequest")
            self.reqs.append((f, "!=" if op == "!=" else "=", _unescape(v)))

    def matches(self, obj):
        for f, op, v in self.reqs:
            got = _field_value(obj, f)
            if (got == v) != (op == "="):
                return False
        return True

    def name_equals(self):
        for f, op, v in self.reqs:
            if f == "metadata.name" and op == "=":
                return v
        return None


def _find_op(part):
    """Index and text of the first unescaped operator (!=, ==, =) in part."""
    i = 0
    while i < len(part):
        ch = part[i]
        if ch == "\\":
            i += 2
            continue
        if part.startswith("!=", i):
            return i, "!="
        if part.startswith("==", i):
            return i, "=="
        if ch == "=":
            return i, "="
        i += 1
    return -1, ""
