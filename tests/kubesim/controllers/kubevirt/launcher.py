"""The virt-launcher pod virt-controller renders for a VMI: the compute
container (the VM's memory plus the launcher overhead, one
devices.kubevirt.io/kvm), one container per containerDisk image, the VMI's
volumes as pod volumes (PVCs, DataVolumes' PVCs, the cloud-init Secret), the
VMI's labels plus KubeVirt's, its nodeSelector and affinity."""
import multus
import util
from util import dig

from ..base import owner_ref
from .common import LAUNCHER_IMAGE, launcher_overhead, mem_request


def launcher_pod(vmi, overhead=None, emulation=False):
    """The pod to create (generateName virt-launcher-NAME-), owned by the VMI.
    overhead: bytes a node reserves beyond the VM's memory (None: KubeVirt's
    own estimate, launcher_overhead()). emulation: the KubeVirt CR's
    useEmulation: no devices.kubevirt.io/kvm is asked for (KubeVirt
    pkg/virt-controller/services/renderresources.go:478, v1.9.0), so nodes
    without /dev/kvm take the VM."""
    if overhead is None:
        overhead = launcher_overhead(vmi.get("spec") or {})
    md = vmi["metadata"]
    name = md["name"]
    labels = dict(md.get("labels") or {})
    labels.update({"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": md["uid"],
                   "vm.kubevirt.io/name": name.split(".")[0][:63],
                   "vmi.kubevirt.io/id": name[:63]})
    spec = vmi.get("spec") or {}
    mem = mem_request(spec)
    volumes = []
    images = []
    for v in spec.get("volumes") or []:
        vn = v.get("name")
        if v.get("containerDisk"):
            images.append(v["containerDisk"].get("image", ""))
            volumes.append({"name": vn, "emptyDir": {}})
        elif dig(v, "ephemeral", "persistentVolumeClaim", "claimName"):
            volumes.append({"name": vn, "persistentVolumeClaim": {
                "claimName": v["ephemeral"]["persistentVolumeClaim"]["claimName"],
                "readOnly": True}})
        elif dig(v, "persistentVolumeClaim", "claimName"):
            volumes.append({"name": vn, "persistentVolumeClaim": {
                "claimName": v["persistentVolumeClaim"]["claimName"]}})
        elif dig(v, "dataVolume", "name"):
            volumes.append({"name": vn, "persistentVolumeClaim": {
                "claimName": v["dataVolume"]["name"]}})
        elif v.get("cloudInitNoCloud") is not None:
            ref = dig(v, "cloudInitNoCloud", "secretRef", "name")
            if ref:
                volumes.append({"name": f"{vn}-udata", "secret": {"secretName": ref}})
    volumes.append({"name": "ephemeral-disks", "emptyDir": {}})
    containers = [{"name": "compute", "image": LAUNCHER_IMAGE,
                   "command": ["/usr/bin/virt-launcher-monitor", "--qemu-timeout", "240s",
                               "--name", name, "--uid", md["uid"], "--namespace",
                               md.get("namespace")],
                   "resources": {"requests": {"memory": str(mem + overhead),
                                              "cpu": "100m",
                                              "devices.kubevirt.io/kvm": "1"},
                                 "limits": {"devices.kubevirt.io/kvm": "1"}}}]
    if emulation:
        for k in ("requests", "limits"):
            containers[0]["resources"][k].pop("devices.kubevirt.io/kvm")
        if not containers[0]["resources"]["limits"]:
            del containers[0]["resources"]["limits"]
    for i, img in enumerate(images):
        containers.append({"name": f"volume{i}", "image": img,
                           "command": ["/usr/bin/container-disk"],
                           "resources": {"requests": {"memory": "1M", "cpu": "10m"}}})
    node_sel = dict(spec.get("nodeSelector") or {})
    node_sel["kubevirt.io/schedulable"] = "true"
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"generateName": f"virt-launcher-{name}-",
                        "namespace": md.get("namespace"), "labels": labels,
                        "annotations": {"kubevirt.io/domain": name,
                                        "kubevirt.io/migrationTransportUnix": "true",
                                        "kubectl.kubernetes.io/default-container": "compute"},
                        "ownerReferences": [owner_ref(vmi)]},
           "spec": {"containers": containers, "volumes": volumes, "nodeSelector": node_sel,
                    "hostname": spec.get("hostname") or name.split(".")[0][:63],
                    "restartPolicy": "Never", "schedulerName": "default-scheduler",
                    "terminationGracePeriodSeconds": 30, "automountServiceAccountToken": False,
                    "dnsPolicy": "ClusterFirst", "priority": 0,
                    "securityContext": {"runAsUser": 107, "runAsNonRoot": True}},
           "status": {"phase": "Pending", "qosClass": "Burstable"}}
    if dig(spec, "affinity"):
        pod["spec"]["affinity"] = util.deep(spec["affinity"])
    nets = multus.networks_annotation(vmi)
    if nets:
        pod["metadata"]["annotations"][multus.NETWORKS_ANNOTATION] = nets
    return pod
