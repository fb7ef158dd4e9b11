"""The object store: every API object, a global resourceVersion counter, a
bounded event history for watches, and the delete/finalizer/owner rules that
the apiserver applies itself.

Objects are plain dicts that are never changed once stored: a writer builds a
new dict (util.deep(old) then edits) and calls put(); readers may keep and
serialize references without copying. One re-entrant lock guards everything;
`cond` wakes watchers."""
import bisect
import threading
import time

import util


class Store:
    def __init__(self, history=5000):
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.rv = 1
        self.objs = {}          # plural -> {(ns, name): obj}
        self.by_uid = {}        # uid -> (plural, ns, name)
        self.hist = []          # [(rv, type, plural, obj, old)]
        self.hist_rvs = []      # rvs of hist, for bisect
        self.max_hist = history
        self.oldest_rv = 1      # events with rv > oldest_rv are all kept ... (see expired())
        self.listeners = []
        self.json_cache = {}    # (uid, rv) -> bytes
        self.closed = False

    # ------------------------------------------------------------ reads
    def get(self, plural, ns, name):
        return self.objs.get(plural, {}).get((ns or "", name))

    def list(self, plural, ns=None):
        d = self.objs.get(plural, {})
        if ns is None:
            return [d[k] for k in sorted(d)]
        return [d[k] for k in sorted(d) if k[0] == ns]

    def by_uid_get(self, uid):
        k = self.by_uid.get(uid)
        if not k:
            return None
        return self.get(*k)

    def current_rv(self):
        return str(self.rv)

    def encode(self, obj):
        """JSON bytes of a stored object, cached per (uid, resourceVersion)."""
        md = obj.get("metadata") or {}
        key = (md.get("uid"), md.get("resourceVersion"))
        if key[0] is None:
            return util.dumps(obj)
        b = self.json_cache.get(key)
        if b is None:
            b = util.dumps(obj)
            if len(self.json_cache) > 20000:
                self.json_cache.clear()
            self.json_cache[key] = b
        return b

    # ----------------------------------------------------------- writes
    def _next_rv(self):
        self.rv += 1
        return self.rv

    def _record(self, typ, plural, obj, old):
        rv = int(obj["metadata"]["resourceVersion"])
        self.hist.append((rv, typ, plural, obj, old))
        self.hist_rvs.append(rv)
        if len(self.hist) > self.max_hist + max(10, self.max_hist // 10):
            drop = len(self.hist) - self.max_hist
            self.oldest_rv = self.hist_rvs[drop - 1]
            del self.hist[:drop]
            del self.hist_rvs[:drop]
        for fn in self.listeners:
            fn(typ, plural, obj, old)
        self.cond.notify_all()

    def compact(self):
        """Forget the whole event history (as an etcd compaction would)."""
        with self.lock:
            self.oldest_rv = self.rv
            self.hist = []
            self.hist_rvs = []

    def add(self, plural, obj):
        """Store a new object (metadata.uid/creationTimestamp set by the caller)."""
        with self.lock:
            md = obj["metadata"]
            md["resourceVersion"] = str(self._next_rv())
            key = (md.get("namespace", ""), md["name"])
            self.objs.setdefault(plural, {})[key] = obj
            self.by_uid[md["uid"]] = (plural, key[0], key[1])
            self._record("ADDED", plural, obj, None)
            return obj

    def put(self, plural, obj):
        """Replace a stored object; if it is being deleted and has no finalizers left,
        remove it. Returns (obj, removed)."""
        with self.lock:
            md = obj["metadata"]
            key = (md.get("namespace", ""), md["name"])
            old = self.objs.get(plural, {}).get(key)
            if old is None:
                raise KeyError(key)
            if md.get("deletionTimestamp") and not md.get("finalizers"):
                return self.remove(plural, obj), True
            md["resourceVersion"] = str(self._next_rv())
            self.objs[plural][key] = obj
            self._record("MODIFIED", plural, obj, old)
            return obj, False

    def remove(self, plural, obj):
        with self.lock:
            md = obj["metadata"]
            key = (md.get("namespace", ""), md["name"])
            old = self.objs.get(plural, {}).pop(key, None)
            if old is None:
                return None
            self.by_uid.pop(old["metadata"].get("uid"), None)
            gone = util.deep(obj) if obj is not old else util.deep(old)
            gone["metadata"]["resourceVersion"] = str(self._next_rv())
            self._record("DELETED", plural, gone, old)
            return gone

    # ------------------------------------------------------------ watch
    def expired(self, rv):
        return rv < self.oldest_rv

    def events_after(self, rv):
        """Events with resourceVersion > rv (caller holds the lock)."""
        i = bisect.bisect_right(self.hist_rvs, rv)
        return self.hist[i:]

    def wait(self, timeout):
        with self.cond:
            self.cond.wait(timeout)


def mark_deleting(obj, now=None, grace=None):
    md = obj["metadata"]
    if not md.get("deletionTimestamp"):
        md["deletionTimestamp"] = util.now_rfc3339(now)
        md["deletionGracePeriodSeconds"] = 0 if grace is None else grace
    return obj


def now():
    return time.time()
