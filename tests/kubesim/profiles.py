"""Delay profiles. Each delay is log-normal: median m seconds, spread s (the
sigma of the underlying normal), clipped to [m/5, m*5]; the whole profile is
multiplied by the time-scale factor.

`realistic` follows the field notes (KUBEVIRT-FACTS.md section i and the
design notes): VM create -> VMI Running about 15-20 s with a fresh image pull,
guest boot (Running -> cloud-init) 15-25 s, a fresh per-VM disk import several
minutes, containerDisk pull seconds to tens of seconds, golden ephemeral
volume near zero. `fast` keeps the same shape for tests: a VM is Running well
within a second."""
import math
import random
import threading

PROFILES = {
    "fast": {
        "vmi_create": (0.01, 0.3),      # VM controller reacts, creates the VMI
        "pod_create": (0.01, 0.3),      # VMI controller renders the launcher pod
        "schedule": (0.01, 0.3),        # scheduler binds the pod
        "image_pull": (0.15, 0.4),      # containerDisk, first pull on the node
        "image_cached": (0.01, 0.3),    # containerDisk already on the node
        "volume_attach": (0.01, 0.3),   # PVC (ephemeral golden, RWX/ROX) attach + mount
        "container_start": (0.03, 0.3), # launcher container starts
        "domain_start": (0.05, 0.3),    # virt-handler defines and starts the domain
        "guest_boot": (0.18, 0.3),      # Running -> cloud-init starts in the guest
        "pvc_bind": (0.02, 0.3),        # dynamic provisioning of a new PVC
        "dv_import": (1.0, 0.2),        # CDI import of a per-VM disk
        "vm_shutdown": (0.3, 0.2),      # guest shutdown after VMI deletion
        "pod_terminate": (0.05, 0.3),   # kubelet tears the pod down
        "attach_retry": (0.2, 0.0),     # Multi-Attach / FailedMount retry period
        "cdi_requeue": (0.1, 0.0),      # CDI re-reads a running import (RequeueAfter 2 s)
    },
    "realistic": {
        "vmi_create": (0.25, 0.4),
        "pod_create": (0.4, 0.4),
        "schedule": (0.8, 0.5),
        "image_pull": (9.0, 0.6),
        "image_cached": (0.8, 0.4),
        "volume_attach": (0.3, 0.5),
        "container_start": (4.0, 0.3),
        "domain_start": (7.0, 0.3),
        "guest_boot": (19.0, 0.15),
        "pvc_bind": (1.5, 0.4),
        "dv_import": (240.0, 0.35),
        "vm_shutdown": (4.0, 0.3),
        "pod_terminate": (1.5, 0.3),
        "attach_retry": (2.0, 0.0),
        "cdi_requeue": (2.0, 0.0),
    },
}


class Profile:
    def __init__(self, name="fast", time_scale=1.0, seed=None):
        self.lock = threading.Lock()
        self.rng = random.Random(seed)
        self.set(name, time_scale)

    def set(self, name, time_scale=None):
        if name not in PROFILES:
            raise ValueError(f"unknown profile {name!r} (fast, realistic)")
        with self.lock:
            self.name = name
            if time_scale is not None:
                if time_scale <= 0:
                    raise ValueError("time_scale must be > 0")
                self.time_scale = float(time_scale)

    def delay(self, what):
        with self.lock:
            m, s = PROFILES[self.name][what]
            if s > 0:
                d = m * math.exp(self.rng.gauss(0, s))
                d = min(max(d, m / 5), m * 5)
            else:
                d = m
            return d * self.time_scale

    def describe(self):
        return {"profile": self.name, "time_scale": self.time_scale,
                "delays": {k: {"median_s": v[0], "sigma": v[1]}
                           for k, v in PROFILES[self.name].items()}}
