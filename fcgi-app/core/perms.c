/* perms.c - see perms.h. One row per rule of conf/k8s/rbac.yaml (same
 * resources, same verbs), in the file's order. */
#include "perms.h"

#define FCGI   "labvm.fcgi"
#define REAPER "labvm-reaper"
#define POOL   "labvm-pool"
#define BRIDGE "labvm-console"
#define DOCTOR "labvm-doctor"

const struct perm perm_table[] = {
    /* Role labvm-backend */
    {PERM_BACKEND, "", "secrets", "get list create patch delete", PERM_NAMESPACED,
     FCGI ", " REAPER ", " POOL,
     "no lab starts: the cloud-init and lab-file Secrets are created per machine, owned by it "
     "(patch), deleted with it, and listed by the reaper for orphans",
     NULL},
    {PERM_BACKEND, "", "persistentvolumeclaims", "get", PERM_NAMESPACED, FCGI ", " POOL,
     "golden lessons never use their golden disk (the PVC cannot be read)", NULL},
    {PERM_BACKEND, "kubevirt.io", "virtualmachines", "get list create patch delete",
     PERM_NAMESPACED, FCGI ", " REAPER ", " POOL,
     "no VM lab starts, none is counted against vm_capacity, ended and orphaned VMs are not "
     "deleted, a warm pool VM is not handed to a student",
     NULL},
    {PERM_BACKEND, "kubevirt.io", "virtualmachineinstances", "get list watch", PERM_NAMESPACED,
     FCGI ", " REAPER ", " POOL ", " BRIDGE,
     "no VM lab becomes ready (its phase and address are read from the VMI), the event "
     "stream cannot follow a start",
     NULL},
    {PERM_BACKEND, "", "pods", "get list create delete", PERM_NAMESPACED, FCGI ", " REAPER,
     "no Pod lab starts, is counted against pod_capacity, becomes ready or is deleted", NULL},
    {PERM_BACKEND, "", "pods/exec", "get create", PERM_NAMESPACED, FCGI ", " BRIDGE,
     "Pod terminals and Pod grading are refused: a WebSocket exec is an HTTP GET, authorized "
     "as get (1.34) and as get and create (1.35, AuthorizePodWebsocketUpgradeCreatePermission)",
     NULL},
    {PERM_BACKEND, "k8s.cni.cncf.io", "network-attachment-definitions", "create list delete",
     PERM_NAMESPACED, FCGI ", " REAPER,
     "no multi-machine lab starts (its session network is a NetworkAttachmentDefinition), "
     "and the reaper cannot find leftover ones",
     NULL},
    {PERM_BACKEND, "subresources.kubevirt.io", "virtualmachineinstances/console", "get",
     PERM_NAMESPACED, BRIDGE, "no VM lab's terminal opens (the serial console)", NULL},
    /* ClusterRole labvm-nodes */
    {PERM_NODES, "", "nodes", "get list", PERM_CLUSTER_SCOPED, FCGI ", " DOCTOR,
     "a lesson no node can hold is not refused at the press (never_fits): it waits out "
     "running_timeout_s as Unschedulable; the doctor cannot check the nodes",
     NULL},
    /* Role labvm-doctor */
    {PERM_DOCTOR, "", "namespaces", "get", PERM_OWN_NAMESPACE, DOCTOR,
     "the doctor reads the lab namespace itself (else it tells from a dry-run create)", NULL},
    {PERM_DOCTOR, "batch", "cronjobs", "get", PERM_NAMESPACED, DOCTOR,
     "the doctor cannot see whether the reaper's CronJob runs", NULL},
    {PERM_DOCTOR, "networking.k8s.io", "networkpolicies", "list", PERM_NAMESPACED, DOCTOR,
     "the doctor cannot see whether labvm's NetworkPolicies (the fence between labs) are "
     "applied",
     NULL},
    /* ClusterRole labvm-doctor */
    {PERM_DOCTOR_CLUSTER, "cdi.kubevirt.io", "cdis", "list", PERM_CLUSTER_SCOPED, DOCTOR,
     "the doctor cannot read CDI's version (CDI grants no read of its CR by default)", NULL},
    /* granted by the cluster to everyone authenticated */
    {PERM_BY_CLUSTER, "authorization.k8s.io", "selfsubjectaccessreviews", "create",
     PERM_CLUSTER_SCOPED, DOCTOR, "the doctor cannot ask what it may do", "system:basic-user"},
    {PERM_BY_CLUSTER, "authentication.k8s.io", "selfsubjectreviews", "create", PERM_CLUSTER_SCOPED,
     DOCTOR, "the doctor cannot say whom the token authenticates", "system:basic-user"},
    {PERM_BY_CLUSTER, "kubevirt.io", "kubevirts", "list", PERM_CLUSTER_SCOPED, DOCTOR,
     "the doctor cannot read KubeVirt's version and its emulation setting", "kubevirt.io:default"},
    {PERM_BY_CLUSTER, "subresources.kubevirt.io", "version", "get", PERM_CLUSTER_SCOPED, DOCTOR,
     "the doctor cannot ask virt-api for KubeVirt's version", "kubevirt.io:default"},
};

const size_t perm_count = sizeof perm_table / sizeof perm_table[0];

const char *perm_grant_kind(enum perm_grant g)
{
	switch (g) {
	case PERM_BACKEND:
	case PERM_DOCTOR:
		return "Role";
	case PERM_NODES:
	case PERM_DOCTOR_CLUSTER:
		return "ClusterRole";
	default:
		return "";
	}
}

const char *perm_grant_name(enum perm_grant g)
{
	switch (g) {
	case PERM_BACKEND:
		return "labvm-backend";
	case PERM_NODES:
		return "labvm-nodes";
	case PERM_DOCTOR:
	case PERM_DOCTOR_CLUSTER:
		return "labvm-doctor";
	default:
		return "";
	}
}

int perm_grant_required(enum perm_grant g)
{
	return g == PERM_BACKEND;
}
