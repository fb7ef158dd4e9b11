"""What the KubeVirt controllers share: the virt-launcher figures, the
finalizers, a VMI's memory and a VM's run strategy."""
import util
from util import dig, parse_quantity

from ..base import MI, controlled_by, set_condition

LAUNCHER_OVERHEAD = 200 * MI
LAUNCHER_IMAGE = "quay.io/kubevirt/virt-launcher:v1.5.0"
VM_FINALIZER = "kubevirt.io/virtualMachineControllerFinalize"
VMI_FINALIZERS = ["kubevirt.io/virtualMachineControllerFinalize",
                  "kubevirt.io/foregroundDeleteVirtualMachine"]
KV = "kubevirt.io/v1"


def launcher_overhead(vmi_spec):
    """KubeVirt's memory overhead of a VMI's launcher pod (kubevirt/kubevirt
    pkg/hypervisor/kvm/hypervisorbackend.go GetMemoryOverhead, x86-64, the
    parts a lab VM has): the page tables (guest memory / 512), the fixed
    25Mi + 100Mi + 25Mi + 40Mi + 50Mi of virt-launcher-monitor, virt-launcher,
    virtlogd, virtqemud and QEMU, 8Mi per vCPU, 8Mi for the IOThread, and
    32Mi of video RAM (autoattachGraphicsDevice defaults to true)."""
    cpu = dig(vmi_spec, "domain", "cpu") or {}
    vcpus = 1
    if cpu:
        vcpus = max(1, int(cpu.get("cores") or 1) * int(cpu.get("sockets") or 1) *
                    int(cpu.get("threads") or 1))
    graphics = dig(vmi_spec, "domain", "devices", "autoattachGraphicsDevice")
    return (mem_request(vmi_spec) // 512 + (25 + 100 + 25 + 40 + 50) * MI + 8 * MI * vcpus +
            8 * MI + (32 * MI if graphics is None or graphics else 0))


def mem_request(vmi_spec):
    q = dig(vmi_spec, "domain", "resources", "requests", "memory") or \
        dig(vmi_spec, "domain", "memory", "guest") or \
        dig(vmi_spec, "domain", "resources", "limits", "memory") or "0"
    try:
        return int(parse_quantity(q))
    except ValueError:
        return 0


def run_strategy(vm):
    spec = vm.get("spec") or {}
    rs = spec.get("runStrategy")
    if rs:
        return rs
    if spec.get("running") is True:
        return "Always"
    return "Halted"



def launcher_of(mgr, vmi):
    """The VMI's virt-launcher pod (controlled by it), or None. mgr.pods_by_owner
    indexes the pods by their controller's uid once per pass."""
    uid = vmi["metadata"]["uid"]
    p = mgr.pods_by_owner.get(uid)
    if p is not None:
        cur = mgr.store.get("pods", p["metadata"].get("namespace", ""), p["metadata"]["name"])
        if cur is not None and controlled_by(cur, uid):
            return cur
    return None


def vmi_status(api, vmi, phase=None, **changes):
    """Write the VMI's status: a new phase (with its phaseTransitionTimestamp),
    conditions= to set, drop_conditions= to remove, other fields as given.
    Returns the object as stored."""
    n = util.deep(vmi)
    st = n.setdefault("status", {})
    if phase and st.get("phase") != phase:
        st["phase"] = phase
        st.setdefault("phaseTransitionTimestamps", []).append(
            {"phase": phase, "phaseTransitionTimestamp": util.now_micro()})
    conds = changes.pop("conditions", None)
    if conds:
        cl = st.get("conditions") or []
        for c in conds:
            cl = set_condition(cl, c)
        st["conditions"] = cl
    drop = changes.pop("drop_conditions", ())
    if drop:
        st["conditions"] = [c for c in st.get("conditions") or [] if c.get("type") not in drop]
    st.update(changes)
    if n != vmi:
        return api.sys_update("virtualmachineinstances", n)
    return vmi
