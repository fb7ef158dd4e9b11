"""The garbage collector: dependents whose owners are all gone are deleted
(ownerReferences), Foreground deletion waits for the blocking dependents,
Orphan strips the owner from them; and the apiserver's --event-ttl (1 h)."""
import time

import util

from .base import Controller


class GarbageCollector(Controller):
    name = "garbage-collector"

    def __init__(self, mgr):
        super().__init__(mgr)
        self._last_event_ttl = 0

    def reconcile(self, store):
        self.gc()

    def gc(self):
        objs = []
        for plural, d in self.store.objs.items():
            if plural == "events":
                continue
            for o in d.values():
                objs.append((plural, o))
        now = time.monotonic()
        if now - getattr(self, "_last_event_ttl", 0) > 30:
            # the apiserver's --event-ttl (1 h)
            self._last_event_ttl = now
            limit = time.time() - 3600
            for e in list(self.store.objs.get("events", {}).values()):
                ts = util.parse_rfc3339(e.get("lastTimestamp") or "")
                if ts is not None and ts < limit:
                    self.store.remove("events", e)
        deps = {}
        for plural, o in objs:
            for ref in o["metadata"].get("ownerReferences") or []:
                deps.setdefault(ref.get("uid"), []).append((plural, o))
        # owners being deleted in the foreground / orphaning
        for plural, o in objs:
            md = o["metadata"]
            if not md.get("deletionTimestamp"):
                continue
            fins = md.get("finalizers") or []
            uid = md["uid"]
            if "orphan" in fins:
                for dp, d in deps.get(uid, []):
                    cur = self.store.get(dp, d["metadata"].get("namespace", ""), d["metadata"]["name"])
                    if cur is None:
                        continue
                    n = util.deep(cur)
                    n["metadata"]["ownerReferences"] = [r for r in n["metadata"].get(
                        "ownerReferences") or [] if r.get("uid") != uid]
                    if not n["metadata"]["ownerReferences"]:
                        del n["metadata"]["ownerReferences"]
                    self.api.sys_update(dp, n)
                n = util.deep(o)
                n["metadata"]["finalizers"] = [f for f in fins if f != "orphan"]
                self.api.sys_update(plural, n)
            elif "foregroundDeletion" in fins:
                blocking = 0
                for dp, d in deps.get(uid, []):
                    cur = self.store.get(dp, d["metadata"].get("namespace", ""), d["metadata"]["name"])
                    if cur is None:
                        continue
                    if any(r.get("uid") == uid and r.get("blockOwnerDeletion")
                           for r in cur["metadata"].get("ownerReferences") or []):
                        blocking += 1
                    if not cur["metadata"].get("deletionTimestamp"):
                        self.api.sys_delete(dp, cur, "Foreground")
                if blocking == 0:
                    n = util.deep(o)
                    n["metadata"]["finalizers"] = [f for f in fins if f != "foregroundDeletion"]
                    self.api.sys_update(plural, n)
        # dependents whose owners are all gone
        for plural, o in objs:
            md = o["metadata"]
            refs = md.get("ownerReferences")
            if not refs or md.get("deletionTimestamp"):
                continue
            cur = self.store.get(plural, md.get("namespace", ""), md["name"])
            if cur is not o:
                continue
            alive = []
            for r in refs:
                owner = self.store.by_uid_get(r.get("uid"))
                if owner is not None:
                    alive.append(r)
            if not alive:
                try:
                    self.api.sys_delete(plural, o)
                except Exception:  # noqa: BLE001
                    pass
            elif len(alive) != len(refs):
                n = util.deep(o)
                n["metadata"]["ownerReferences"] = alive
                self.api.sys_update(plural, n)
