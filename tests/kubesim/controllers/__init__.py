"""The cluster's controllers, simulated, one module per component:

    namespaces.py        the namespace controller (deleting a namespace's content)
    storage.py           the PVC binder and the pvc-protection finalizer
    cdi.py               CDI's DataVolume controller (import phases, PVC annotations)
    kubevirt/vm.py       virt-controller: VM -> VMI, printableStatus, VM deletion
    kubevirt/vmi.py      virt-controller: VMI -> virt-launcher pod -> Scheduled
    kubevirt/launcher.py the virt-launcher pod a VMI gets
    kubevirt/handler.py  virt-handler: the domain (guest), Running, its end, the agent
    kubelet.py           pods on nodes: secrets, volume attach, image pulls, start, stop
    scheduler.py         the default scheduler (memory, devices.kubevirt.io/kvm, selectors)
    gc.py                the garbage collector (ownerReferences, Foreground, Orphan)
    runtime.py           the node's guest runtime (guest drivers on worker threads)
    network.py           the pods' addresses (the pod CIDR)
    netpol.py            NetworkPolicy enforcement (nftables, podnet.py)
    base.py              the Controller base class, conditions, owner references

Level-triggered: one thread (Controllers) runs every controller's
reconcile(store) in turn, under the store lock, whenever the store changes or
a delay falls due; delays come from the profile. Guests are started and
stopped by the runtime's worker threads, never under the store lock.

A new controller subclasses base.Controller, implements reconcile(store), and
takes its place in Controllers.steps."""
import threading
import time
import traceback

from .cdi import DataVolumeController
from .gc import GarbageCollector
from .kubelet import Kubelet
from .kubevirt import VirtHandler, VMController, VMIController
from .namespaces import NamespaceController
from .netpol import NetworkPolicyController
from .network import Ipam
from .runtime import GuestRuntime
from .scheduler import Scheduler
from .storage import PVCBinder

__all__ = ["Controllers"]


class Controllers:
    def __init__(self, sim):
        self.sim = sim
        self.api = sim.api
        self.store = sim.store
        self.profile = sim.profile
        self.due = {}              # (uid, stage) -> monotonic time
        self.wake = threading.Event()
        self.stopping = False
        self.passes = 0
        self.pods_by_owner = {}    # per pass: controller uid -> pod
        self.ipam = Ipam(sim.podnet.pool)
        self.runtime = GuestRuntime(sim, self.ipam, self.wake)
        # what the server shows (/_sim/guests, the console, exec)
        self.guests = self.runtime.guests
        self.guest_state = self.runtime.state
        self.ips = self.ipam.ips
        self.namespaces = NamespaceController(self)
        self.pvc_binder = PVCBinder(self)
        self.cdi = DataVolumeController(self)
        self.vm = VMController(self)
        self.handler = VirtHandler(self)
        self.vmi = VMIController(self)
        self.kubelet = Kubelet(self)
        self.scheduler = Scheduler(self)
        self.gc = GarbageCollector(self)
        # --no-policy-enforcement: a CNI without NetworkPolicy support (flannel
        # alone): the policies are stored and served, nothing enforces them
        self.netpol = None if getattr(sim.args, "no_policy_enforcement", False) else \
            NetworkPolicyController(self)
        # one pass, in this order; a VM's status follows its VMI (and that
        # VMI's pod) within the same pass
        self.steps = [self.namespaces.reconcile, self.pvc_binder.reconcile, self.cdi.reconcile,
                      self.vm.reconcile, self.handler.reconcile, self.vmi.reconcile,
                      self.kubelet.reconcile, self.scheduler.reconcile,
                      self.vm.reconcile_status, self.gc.reconcile] + \
            ([self.netpol.reconcile] if self.netpol else [])
        self.store.listeners.append(lambda *a: self.wake.set())
        self.thread = threading.Thread(target=self._loop, name="controllers", daemon=True)

    def start(self):
        self.thread.start()
        if self.runtime.real:
            threading.Thread(target=self.handler.agent_probe_loop, name="guest-agent-probe",
                             daemon=True).start()

    # ------------------------------------------------------------ timing
    def ready(self, uid, stage, delay):
        """True once the named delay (profile key or seconds) for (uid, stage) has passed."""
        k = (uid, stage)
        t = self.due.get(k)
        now = time.monotonic()
        if t is None:
            d = self.profile.delay(delay) if isinstance(delay, str) else float(delay)
            self.due[k] = now + d
            return d <= 0
        return now >= t


    def _loop(self):
        while not self.stopping:
            now = time.monotonic()
            future = [t for t in self.due.values() if t > now]
            timeout = min(0.5, max(0.0, min(future) - now)) if future else 0.5
            self.wake.wait(timeout)
            time.sleep(0.005)   # coalesce bursts of changes into one pass
            self.wake.clear()
            if self.stopping:
                return
            try:
                with self.store.lock:
                    self.reconcile()
                self.passes += 1
            except Exception:  # noqa: BLE001
                self.sim.log("controllers: " + traceback.format_exc())
                time.sleep(0.05)

    # -------------------------------------------------------- reconcile
    def reconcile(self):
        self.pods_by_owner = {}
        for p in self.store.list("pods"):
            for o in p["metadata"].get("ownerReferences") or []:
                if o.get("controller"):
                    self.pods_by_owner[o.get("uid")] = p
        for step in self.steps:
            step(self.store)
        live = set(self.store.by_uid)
        if len(self.due) > 0:
            for k in [k for k in self.due if k[0] not in live and not k[0].startswith("node:")]:
                del self.due[k]
        self.runtime.forget(live)

    # ------------------------------------------------------------ guests
    def check_guests(self):
        """Notice guests that died on their own (the health thread, off the store lock)."""
        self.runtime.check()

    def stop_all(self):
        self.stopping = True
        self.wake.set()
        self.runtime.stop_all()
