"""Fault injection for the API (never for /_sim): rules matched by verb,
resource, namespace and name; each returns a status code, adds delay and/or
drops the connection, for N times or with a probability.

Effects beyond a plain status (tests/kubesim/CONFORMANCE.md cites each):
- `apf`: API Priority and Fairness rejects the request: 429, `Retry-After`
  (`retry_after`, default 1), the X-Kubernetes-PF-* UID headers and the
  plain-text body of k8s.io/apiserver's tooManyRequests(); `code: 429` with
  `retry_after` is instead the Status form (apimachinery NewTooManyRequests:
  `details.retryAfterSeconds`, the header from it).
- `after`: the request takes effect first, then the answer is the fault's
  (an answer lost after the work was done, as a 504 from the timeout filter
  or a proxy in between): never APF's own behaviour, which rejects before.
- `watch`: `end` ends the watch at once (200, no event: an apiserver that
  shuts down, or whose watch channel closed), `error` sends one ERROR event
  (an InternalError Status, as etcd3's transformErrorToEvent) and ends."""
import random
import threading

import errors

VERBS = ("create", "list", "get", "delete", "deletecollection", "patch", "update", "watch", "*")


class Faults:
    def __init__(self, seed=None):
        self.lock = threading.Lock()
        self.rules = []
        self.next_id = 1
        self.rng = random.Random(seed)
        self.down = False

    def add(self, r):
        if not isinstance(r, dict):
            raise errors.bad_request("a fault rule is a JSON object")
        known = {"verb", "resource", "code", "delay_ms", "drop", "times", "probability",
                 "namespace", "name", "message", "retry_after", "apf", "after", "watch"}
        extra = set(r) - known
        if extra:
            raise errors.bad_request(f"unknown fault field(s): {', '.join(sorted(extra))}")
        verb = r.get("verb", "*")
        if verb not in VERBS:
            raise errors.bad_request(f"verb must be one of {', '.join(VERBS)}")
        code = r.get("code")
        if code is not None and (not isinstance(code, int) or not 100 <= code <= 599):
            raise errors.bad_request("code must be an HTTP status code")
        delay = r.get("delay_ms", 0) or 0
        if not isinstance(delay, (int, float)) or delay < 0:
            raise errors.bad_request("delay_ms must be a non-negative number")
        drop = bool(r.get("drop", False))
        apf = bool(r.get("apf", False))
        after = bool(r.get("after", False))
        wf = r.get("watch")
        if wf is not None and (wf not in ("end", "error") or verb != "watch"):
            raise errors.bad_request('watch must be "end" or "error", with verb "watch"')
        if apf and code not in (None, 429):
            raise errors.bad_request("apf answers 429: give no other code")
        if after and (code is None and not apf or verb in ("watch", "*")):
            raise errors.bad_request("after needs code or apf, and a verb other than watch")
        ra = r.get("retry_after")
        if ra is not None and (not isinstance(ra, int) or not 0 <= ra <= 3600):
            raise errors.bad_request("retry_after must be whole seconds (0..3600)")
        if code is None and not delay and not drop and not apf and wf is None:
            raise errors.bad_request("a fault needs at least one effect: code, delay_ms, drop, "
                                     "apf or watch")
        times = r.get("times")
        if times is not None and (not isinstance(times, int) or times < 1):
            raise errors.bad_request("times must be a positive integer")
        p = r.get("probability", 1.0)
        if not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise errors.bad_request("probability must be between 0 and 1")
        rule = {"id": None, "verb": verb, "resource": r.get("resource", "*"), "code": code,
                "delay_ms": delay, "drop": drop, "times": times, "probability": float(p),
                "namespace": r.get("namespace"), "name": r.get("name"),
                "message": r.get("message"), "retry_after": ra, "apf": apf, "after": after,
                "watch": wf, "hits": 0}
        with self.lock:
            rule["id"] = self.next_id
            self.next_id += 1
            self.rules.append(rule)
        return rule

    def clear(self):
        with self.lock:
            n = len(self.rules)
            self.rules = []
            return n

    def list(self):
        with self.lock:
            return [dict(r) for r in self.rules]

    def match(self, verb, resource, sub, ns, name):
        """The first matching rule that fires (its times count is used up), or None."""
        full = f"{resource}/{sub}" if sub else resource
        with self.lock:
            for r in self.rules:
                if r["verb"] not in ("*", verb):
                    continue
                rr = r["resource"]
                if rr != "*" and rr != full:
                    continue
                if r["namespace"] is not None and r["namespace"] != ns:
                    continue
                if r["name"] is not None and r["name"] != name:
                    continue
                if r["probability"] < 1.0 and self.rng.random() >= r["probability"]:
                    continue
                r["hits"] += 1
                if r["times"] is not None:
                    r["times"] -= 1
                    if r["times"] <= 0:
                        self.rules.remove(r)
                return dict(r)
        return None
