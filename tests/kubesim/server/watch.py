"""Watch: a chunked stream of ADDED/MODIFIED/DELETED events from the store's
history (`resourceVersion`, selectors, `timeoutSeconds`, bookmarks), ERROR
410 Expired for a version older than the kept history (as the watch cache
answers: 200, then the ERROR event)."""
import ssl
import time

import errors
import util
from labelsel import FieldSelector

from .httpio import Dropped


class Watch:
    def watch(self, res, ns, q, name=None):
        sim = self.sim
        store = sim.store
        api = sim.api
        ls, fs = api.selectors(res, q)
        if name:
            fs = FieldSelector(f"metadata.name={name}", res)
        try:
            timeout = float(q.get("timeoutSeconds") or 1800)
        except ValueError:
            raise errors.bad_request("timeoutSeconds must be a number") from None
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
        rv_s = q.get("resourceVersion") or ""
        nsf = ns if res.namespaced else None

        def visible(o):
            if o is None:
                return False
            if nsf is not None and o["metadata"].get("namespace") != nsf:
                return False
            return api.matches(o, ls, fs)

        initial = []
        expired_rv = None
        with store.lock:
            if rv_s in ("", "0"):
                for o in store.list(res.plural, nsf):
                    if visible(o):
                        initial.append(("ADDED", o))
                pos = store.rv
            else:
                try:
                    pos = int(rv_s)
                except ValueError:
                    raise errors.bad_request(f'resourceVersion: Invalid value: "{rv_s}": must be '
                                             "a non-negative integer") from None
                if store.expired(pos):
                    expired_rv = pos
        self.send_response(200)
        self.send_header("Content-Type", "application/json;stream=watch")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Audit-Id", self.audit_id)
        self.end_headers()

        def chunk(data):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        def event(typ, obj):
            chunk(b'{"type":"' + typ.encode() + b'","object":' + store.encode(obj) + b"}\n")

        try:
            if self.watch_fault == "end":
                # the watch ends at once, no event (k8s.io/apiserver v0.34
                # pkg/endpoints/handlers/watch.go HandleHTTP: ServerShuttingDownCh,
                # or the watcher's result channel closed)
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                return
            if self.watch_fault == "error":
                # the storage's watch failed: one ERROR event, then the end
                # (pkg/storage/etcd3/watcher.go transformErrorToEvent)
                st = errors.internal("etcdserver: request timed out").status()
                chunk(b'{"type":"ERROR","object":' + util.dumps(st) + b"}\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                return
            if expired_rv is not None:
                st = errors.expired(f"too old resource version: {expired_rv} "
                                    f"({store.oldest_rv + 1})").status()
                chunk(b'{"type":"ERROR","object":' + util.dumps(st) + b"}\n")
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                return
            for typ, o in initial:
                event(typ, o)
            self.wfile.flush()
            deadline = time.monotonic() + timeout
            last_bm = time.monotonic()
            bm_every = 2.0
            while True:
                now = time.monotonic()
                if now >= deadline:
                    break
                if sim.faults.down:
                    raise Dropped()
                out = []
                with store.lock:
                    evs = store.events_after(pos)
                    if not evs:
                        store.cond.wait(min(0.5, deadline - now))
                        evs = store.events_after(pos)
                    if evs and store.expired(pos):
                        st = errors.expired(f"too old resource version: {pos} "
                                            f"({store.oldest_rv + 1})").status()
                        out.append(("ERROR", st))
                        evs = []
                    for rv, typ, plural, obj, old in evs:
                        pos = rv
                        if plural != res.plural:
                            continue
                        if typ == "ADDED":
                            if visible(obj):
                                out.append(("ADDED", obj))
                        elif typ == "MODIFIED":
                            nv, ov = visible(obj), visible(old)
                            if nv and ov:
                                out.append(("MODIFIED", obj))
                            elif nv:
                                out.append(("ADDED", obj))
                            elif ov:
                                out.append(("DELETED", obj))
                        elif typ == "DELETED":
                            if visible(old):
                                out.append(("DELETED", obj))
                    cur_rv = store.rv
                for typ, o in out:
                    if typ == "ERROR":
                        chunk(b'{"type":"ERROR","object":' + util.dumps(o) + b"}\n")
                        self.wfile.write(b"0\r\n\r\n")
                        self.wfile.flush()
                        return
                    event(typ, o)
                if bookmarks and time.monotonic() - last_bm >= bm_every:
                    last_bm = time.monotonic()
                    chunk(util.dumps({"type": "BOOKMARK", "object": {
                        "kind": res.kind, "apiVersion": res.api_version,
                        "metadata": {"resourceVersion": str(max(pos, cur_rv if not out else pos))}}})
                        + b"\n")
                if out or bookmarks:
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True
