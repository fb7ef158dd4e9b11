"""Small helpers shared by the simulator's modules: time stamps, quantities,
JSON encoding, deep copies."""
import copy
import datetime
import json
import re
import time
import uuid

_QSUFFIX = {
    "": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
    "m": 10**-3, "u": 10**-6, "n": 10**-9,
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
}
_QRE = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE]([+-]?[0-9]+))?$")


def parse_quantity(q):
    """A Kubernetes quantity ("1Gi", "500m", "1e3", 1024) as a float; ValueError if malformed."""
    if isinstance(q, bool):
        raise ValueError("quantity")
    if isinstance(q, (int, float)):
        return float(q)
    if not isinstance(q, str):
        raise ValueError("quantity")
    m = _QRE.match(q.strip())
    if not m:
        raise ValueError(f"quantities must match the regular expression "
                         f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    num = float(m.group(1))
    if m.group(3) is not None:
        return num * (10 ** int(m.group(3)))
    return num * _QSUFFIX[m.group(2) or ""]


def valid_quantity(q):
    try:
        parse_quantity(q)
        return True
    except ValueError:
        return False


def mib(n_bytes):
    return n_bytes / 2**20


def now_rfc3339(t=None):
    t = time.time() if t is None else t
    return datetime.datetime.fromtimestamp(int(t), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro(t=None):
    t = time.time() if t is None else t
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(s):
    try:
        s = s.replace("Z", "+00:00")
        return datetime.datetime.fromisoformat(s).timestamp()
    except (ValueError, AttributeError):
        return None


def new_uid():
    return str(uuid.uuid4())


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def deep(obj):
    """A deep copy of a JSON-like value (faster than copy.deepcopy for plain data)."""
    t = type(obj)
    if t is dict:
        return {k: deep(v) for k, v in obj.items()}
    if t is list:
        return [deep(v) for v in obj]
    if t in (str, int, float, bool) or obj is None:
        return obj
    return copy.deepcopy(obj)


def dig(obj, *path, default=None):
    for p in path:
        if isinstance(obj, dict):
            obj = obj.get(p)
        elif isinstance(obj, list) and isinstance(p, int) and -len(obj) <= p < len(obj):
            obj = obj[p]
        else:
            return default
        if obj is None:
            return default
    return obj


def human_age(created, now=None):
    t = parse_rfc3339(created or "")
    if t is None:
        return "<unknown>"
    d = int((now or time.time()) - t)
    if d < 0:
        d = 0
    if d < 120:
        return f"{d}s"
    if d < 600:
        return f"{d // 60}m{d % 60}s" if d % 60 else f"{d // 60}m"
    if d < 3 * 3600:
        return f"{d // 60}m"
    if d < 8 * 3600:
        h, m = divmod(d // 60, 60)
        return f"{h}h{m}m" if m else f"{h}h"
    if d < 48 * 3600:
        return f"{d // 3600}h"
    return f"{d // 86400}d"
