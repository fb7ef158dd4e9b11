"""What the KubeVirt and CDI operators leave in a cluster they installed,
beyond the API groups: their custom resources (the KubeVirt CR in namespace
kubevirt, the cluster-scoped CDI CR) with the status a finished deployment
reports, and KubeVirt's kubevirt.io:default ClusterRole, which lets every
authenticated user read the KubeVirt CR and virt-api's version endpoint.

- KubeVirt CR: kubevirt.io/v1 KubeVirt "kubevirt" (KubeVirt
  staging/src/kubevirt.io/api/core/v1/types.go v1.9.0: KubeVirtStatus
  2681-2700, phases 2707-2716); `spec.configuration.developerConfiguration.
  useEmulation` (types.go:3638-3640) from `--kubevirt-emulation`, read live by
  the launcher pods (controllers/kubevirt/launcher.py: with it, no
  devices.kubevirt.io/kvm request; pkg/virt-controller/services/
  renderresources.go:478).
- kubevirt.io:default: pkg/virt-operator/resource/generate/rbac/cluster.go
  v1.9.0:119-190 (get, list on kubevirts; get, list on subresources.kubevirt.io
  version and guestfs; bound to system:authenticated).
- virt-api's version: GET /apis/subresources.kubevirt.io/v1/version answers
  kubevirt.io/client-go/version Info (pkg/virt-api/api.go:423; no check of
  virt-api's own, rest/authorizer.go:60 noAuthEndpoints; kube-apiserver's RBAC
  check still applies, as for any aggregated API).
- CDI CR: cdi.kubevirt.io/v1beta1 CDI "cdi" (containerized-data-importer
  v1.66.0, staging/src/kubevirt.io/controller-lifecycle-operator-sdk/api:
  Status phase, observedVersion, operatorVersion, targetVersion). CDI grants
  no default read of it (pkg/operator/resources/cluster/rbac.go: only
  cdiconfigs and storageprofiles to system:authenticated)."""
import util

KUBEVIRT_VERSION = "v1.9.0"
KUBEVIRT_COMMIT = "f20534373b1a9237666760e2e3f5f27486c4da96"
CDI_VERSION = "v1.66.0"
KUBEVIRT_NS = "kubevirt"


def kubevirt_version_info():
    """kubevirt.io/client-go/version.Info as virt-api answers it."""
    return {"gitVersion": KUBEVIRT_VERSION, "gitCommit": KUBEVIRT_COMMIT,
            "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "go1.24.0", "compiler": "gc", "platform": "linux/amd64"}


def _conds(now, probe="lastProbeTime"):
    """Available, not Progressing, not Degraded (KubeVirt's KubeVirtCondition
    has lastProbeTime; CDI's conditions v1.Condition lastHeartbeatTime)."""
    return [{"type": "Available", "status": "True", "reason": "AllComponentsReady",
             "message": "All components are ready.", probe: now,
             "lastTransitionTime": now},
            {"type": "Progressing", "status": "False", "reason": "AllComponentsReady",
             "message": "All components are ready.", probe: now,
             "lastTransitionTime": now},
            {"type": "Degraded", "status": "False", "reason": "AllComponentsReady",
             "message": "All components are ready.", probe: now,
             "lastTransitionTime": now}]


def docs(args):
    """The objects to create at bootstrap, in order."""
    now = util.now_rfc3339()
    unserved = set(getattr(args, "no_api", None) or ())
    out = [{"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": KUBEVIRT_NS,
                         "labels": {"kubernetes.io/metadata.name": KUBEVIRT_NS}}}]
    if "kubevirt.io" not in unserved:
        out.append({
            "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": KUBEVIRT_NS},
            "spec": {"certificateRotateStrategy": {},
                     "configuration": {"developerConfiguration": {
                         "useEmulation": bool(getattr(args, "kubevirt_emulation", False))}},
                     "customizeComponents": {}, "imagePullPolicy": "IfNotPresent",
                     "workloadUpdateStrategy": {}},
            "status": {"phase": "Deployed", "conditions": _conds(now),
                       "operatorVersion": KUBEVIRT_VERSION,
                       "targetKubeVirtVersion": KUBEVIRT_VERSION,
                       "observedKubeVirtVersion": KUBEVIRT_VERSION,
                       "targetKubeVirtRegistry": "quay.io/kubevirt",
                       "observedKubeVirtRegistry": "quay.io/kubevirt",
                       "defaultArchitecture": "amd64"}})
    out += [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "kubevirt.io:default",
                      "labels": {"kubevirt.io": "", "kubernetes.io/bootstrapping": "rbac-defaults"},
                      "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
         "rules": [{"apiGroups": ["kubevirt.io"], "resources": ["kubevirts"],
                    "verbs": ["get", "list"]},
                   {"apiGroups": ["subresources.kubevirt.io"], "resources": ["version", "guestfs"],
                    "verbs": ["get", "list"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "kubevirt.io:default", "labels": {"kubevirt.io": ""},
                      "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "kubevirt.io:default"},
         "subjects": [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                       "name": "system:authenticated"}]},
    ]
    if "cdi.kubevirt.io" not in unserved:
        out.append({
            "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDI",
            "metadata": {"name": "cdi"},
            "spec": {"imagePullPolicy": "IfNotPresent", "infra": {}, "workload": {}},
            "status": {"phase": "Deployed", "conditions": _conds(now, "lastHeartbeatTime"),
                       "operatorVersion": CDI_VERSION, "targetVersion": CDI_VERSION,
                       "observedVersion": CDI_VERSION}})
    return out


def install(sim, admin):
    for d in docs(sim.args):
        sim.seed(admin, d)


def emulation(store):
    """The KubeVirt CR's useEmulation (virt-config AllowEmulation): False
    without a CR."""
    for kv in store.list("kubevirts"):
        return bool(util.dig(kv, "spec", "configuration", "developerConfiguration",
                             "useEmulation"))
    return False
