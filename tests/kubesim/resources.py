"""The API resources the simulator serves: group, version, kind, scope, verbs,
short names, subresources. One table, used by discovery, routing, RBAC and
validation."""


class Resource:
    def __init__(self, group, version, plural, kind, namespaced=True, short=(), singular=None,
                 verbs=("create", "delete", "deletecollection", "get", "list", "patch",
                        "update", "watch"), status=False, categories=(), crd=False,
                 schema=None, model=None, printer=None, review=False):
        self.group = group
        self.version = version
        self.plural = plural
        self.kind = kind
        self.namespaced = namespaced
        self.short = list(short)
        self.singular = singular or kind.lower()
        self.verbs = list(verbs)
        self.status = status          # has a /status subresource
        self.categories = list(categories)
        self.crd = crd                # custom resource (merge-patch only, no SMP)
        self.schema = schema          # swagger definition name (kubevirt/cdi)
        self.model = model            # python3-kubernetes model class name (core kinds)
        self.review = review          # a virtual resource: create only, answered, never stored

    @property
    def api_version(self):
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def gv_path(self):
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def __repr__(self):
        return f"<Resource {self.plural}.{self.group or 'core'}>"


RO = ("get", "list", "watch")
ALL = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")

RESOURCES = [
    Resource("", "v1", "namespaces", "Namespace", namespaced=False, short=["ns"], status=True,
             verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
             model="V1Namespace"),
    Resource("", "v1", "nodes", "Node", namespaced=False, short=["no"], status=True,
             model="V1Node"),
    Resource("", "v1", "pods", "Pod", short=["po"], status=True, categories=["all"],
             model="V1Pod"),
    Resource("", "v1", "secrets", "Secret", model="V1Secret"),
    Resource("", "v1", "configmaps", "ConfigMap", short=["cm"], model="V1ConfigMap"),
    Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", short=["pvc"],
             status=True, model="V1PersistentVolumeClaim"),
    Resource("", "v1", "events", "Event", short=["ev"], model="CoreV1Event"),
    Resource("", "v1", "serviceaccounts", "ServiceAccount", short=["sa"],
             model="V1ServiceAccount"),
    Resource("kubevirt.io", "v1", "virtualmachines", "VirtualMachine", short=["vm", "vms"],
             status=True, categories=["all"], crd=True, schema="v1.VirtualMachine"),
    Resource("kubevirt.io", "v1", "virtualmachineinstances", "VirtualMachineInstance",
             short=["vmi", "vmis"], status=True, categories=["all"], crd=True,
             schema="v1.VirtualMachineInstance"),
    # the operators' own custom resources (tests/kubesim/operators.py installs one of each)
    Resource("kubevirt.io", "v1", "kubevirts", "KubeVirt", short=["kv", "kvs"], status=True,
             crd=True, schema="v1.KubeVirt"),
    Resource("cdi.kubevirt.io", "v1beta1", "cdis", "CDI", namespaced=False, short=["cdi", "cdis"],
             status=True, crd=True, schema="v1beta1.CDI"),
    # the access reviews (server/reviews.py): POSTed, evaluated, answered, not stored
    Resource("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview",
             namespaced=False, verbs=("create",), model="V1SelfSubjectAccessReview",
             review=True),
    Resource("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview",
             namespaced=False, verbs=("create",), review=True),
    Resource("cdi.kubevirt.io", "v1beta1", "datavolumes", "DataVolume", short=["dv", "dvs"],
             status=True, categories=["all"], crd=True, schema="v1beta1.DataVolume"),
    Resource("k8s.cni.cncf.io", "v1", "network-attachment-definitions",
             "NetworkAttachmentDefinition", short=["nad", "net-attach-def"], crd=True,
             singular="network-attachment-definition", schema="v1.NetworkAttachmentDefinition"),
    Resource("", "v1", "services", "Service", short=["svc"], status=True, categories=["all"],
             model="V1Service"),
    Resource("apps", "v1", "deployments", "Deployment", short=["deploy"], status=True,
             categories=["all"], model="V1Deployment"),
    Resource("batch", "v1", "cronjobs", "CronJob", short=["cj"], status=True,
             categories=["all"], model="V1CronJob"),
    Resource("batch", "v1", "jobs", "Job", status=True, categories=["all"], model="V1Job"),
    Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", short=["netpol"],
             schema="io.k8s.api.networking.v1.NetworkPolicy"),
    Resource("rbac.authorization.k8s.io", "v1", "roles", "Role", model="V1Role"),
    Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding",
             model="V1RoleBinding"),
    Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole",
             namespaced=False, model="V1ClusterRole"),
    Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
             namespaced=False, model="V1ClusterRoleBinding"),
]

BY_GVR = {(r.group, r.version, r.plural): r for r in RESOURCES}
BY_PLURAL = {r.plural: r for r in RESOURCES}
BY_KIND = {(r.group, r.kind): r for r in RESOURCES}

# group -> [versions]; the first is the preferred one.
GROUPS = {}
for _r in RESOURCES:
    GROUPS.setdefault(_r.group, [])
    if _r.version not in GROUPS[_r.group]:
        GROUPS[_r.group].append(_r.version)
GROUPS["subresources.kubevirt.io"] = ["v1"]

# Subresources served under subresources.kubevirt.io/v1 (only console is implemented;
# the others are listed in discovery as the real virt-api does).
KUBEVIRT_SUBRESOURCES = [
    ("virtualmachineinstances/console", "get"),
    ("virtualmachineinstances/vnc", "get"),
    ("virtualmachineinstances/guestosinfo", "get"),
    ("virtualmachines/start", "update"),
    ("virtualmachines/stop", "update"),
    ("virtualmachines/restart", "update"),
]


def lookup(group, version, plural):
    return BY_GVR.get((group, version, plural))


def by_kind(api_version, kind):
    group = api_version.split("/")[0] if "/" in api_version else ""
    return BY_KIND.get((group, kind))
