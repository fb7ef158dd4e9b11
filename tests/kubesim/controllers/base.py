"""What every controller shares: the Controller base class (a `reconcile(store)`
step run under the store lock, with the manager's named delays), conditions,
owner references and resource requests."""
import util
from util import dig, parse_quantity

GI = 2**30
MI = 2**20
PVC_PROTECTION = "kubernetes.io/pvc-protection"
KVM_DEVICE = "devices.kubevirt.io/kvm"
FAILING_IMAGE = "doesnotexist"


def cond(ctype, status, reason="", message="", probe=False):
    c = {"type": ctype, "status": status, "lastProbeTime": None,
         "lastTransitionTime": util.now_rfc3339()}
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def set_condition(conds, new):
    """Replace the condition of new's type, keeping lastTransitionTime when the status
    did not change. Returns the new list."""
    out = []
    found = False
    for c in conds or []:
        if c.get("type") == new["type"]:
            found = True
            if c.get("status") == new["status"] and c.get("reason") == new.get("reason") and \
                    c.get("message") == new.get("message"):
                out.append(c)
            else:
                if c.get("status") == new["status"]:
                    new = dict(new, lastTransitionTime=c.get("lastTransitionTime"))
                out.append(new)
        else:
            out.append(c)
    if not found:
        out.append(new)
    return out


def get_condition(obj, ctype):
    for c in dig(obj, "status", "conditions") or []:
        if c.get("type") == ctype:
            return c
    return None


def pod_mem(pod):
    return pod_request(pod, "memory")


def pod_request(pod, resource):
    total = 0
    for c in dig(pod, "spec", "containers") or []:
        q = dig(c, "resources", "requests", resource)
        if q is not None:
            try:
                total += int(parse_quantity(q))
            except ValueError:
                pass
    return total


def owner_ref(obj, controller=True):
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": controller, "blockOwnerDeletion": True}


def controlled_by(obj, owner_uid):
    for o in dig(obj, "metadata", "ownerReferences") or []:
        if o.get("uid") == owner_uid and o.get("controller"):
            return True
    return False



class Controller:
    """One control loop of the cluster. The manager (controllers.Controllers)
    calls reconcile(store) once per pass, in a fixed order, with the store lock
    held; a controller acts through self.api (sys_create/sys_update/sys_delete,
    events) and never blocks. Delays: self.ready(uid, stage, profile key or
    seconds) is True once that much time has passed since first asked; a
    controller that must wake up at a given moment puts it in self.due."""
    name = ""

    def __init__(self, mgr):
        self.mgr = mgr
        self.sim = mgr.sim
        self.api = mgr.api
        self.store = mgr.store
        self.profile = mgr.profile
        self.due = mgr.due         # (uid, stage) -> monotonic time (shared by all)

    def ready(self, uid, stage, delay):
        return self.mgr.ready(uid, stage, delay)

    def reconcile(self, store):
        raise NotImplementedError
