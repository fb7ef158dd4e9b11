"""The namespace controller: a Namespace being deleted (deletionTimestamp)
deletes everything in it, then goes itself once nothing is left."""
from .base import Controller


class NamespaceController(Controller):
    name = "namespace-controller"

    def reconcile(self, store):
        for ns in store.list("namespaces"):
            self.namespace(ns)

    def namespace(self, ns):
        md = ns["metadata"]
        if not md.get("deletionTimestamp"):
            return
        name = md["name"]
        left = 0
        for plural, objs in list(self.store.objs.items()):
            if plural in ("namespaces", "nodes", "clusterroles", "clusterrolebindings"):
                continue
            for (ons, _), o in list(objs.items()):
                if ons != name:
                    continue
                left += 1
                if not o["metadata"].get("deletionTimestamp"):
                    try:
                        self.api.sys_delete(plural, o)
                    except Exception:  # noqa: BLE001
                        pass
        if left == 0:
            self.store.remove("namespaces", ns)

