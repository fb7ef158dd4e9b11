/* perms.h - every Kubernetes permission labvm uses, in one table.
 *
 * THE table the shipped RBAC must match: conf/k8s/rbac.yaml grants exactly
 * these verbs, no more and no fewer. Each row says which object of rbac.yaml
 * grants it (the Role labvm-backend, the ClusterRole labvm-nodes, the Role and
 * ClusterRole labvm-doctor, all bound to the ServiceAccount labvm-backend), or
 * that the cluster grants it to every authenticated user (PERM_BY_CLUSTER:
 * Kubernetes' system:basic-user and system:discovery, KubeVirt's
 * kubevirt.io:default), in which case rbac.yaml must not. tests/unit/
 * test_perms.py holds the two to each other in both directions
 * (`labvm-doctor --permissions` prints this table); labvm-doctor asks the API
 * server about each verb with a SelfSubjectAccessReview. A new cluster call in
 * labvm adds its row here and its rule to rbac.yaml. */
#ifndef LABVM_CORE_PERMS_H
#define LABVM_CORE_PERMS_H

#include <stddef.h>

enum perm_grant {
	PERM_BACKEND = 0,    /* Role labvm-backend (the lab namespace): labvm cannot work without */
	PERM_NODES,          /* ClusterRole labvm-nodes: optional (never_fits at the press) */
	PERM_DOCTOR,         /* Role labvm-doctor (the lab namespace): the doctor's own reads */
	PERM_DOCTOR_CLUSTER, /* ClusterRole labvm-doctor: the doctor's own cluster-wide reads */
	PERM_BY_CLUSTER, /* granted by the cluster to everyone authenticated; not in rbac.yaml */
	PERM_GRANT_N
};

enum perm_scope {
	PERM_NAMESPACED = 0, /* asked in the lab namespace */
	PERM_CLUSTER_SCOPED, /* no namespace (nodes, the access reviews, cdis, all-namespace lists)
	                      */
	PERM_OWN_NAMESPACE,  /* the lab namespace object itself: get namespaces/<it>, which the API
	                      * server authorizes in that namespace (requestinfo.go), so a Role may
	                      * grant it */
};

struct perm {
	enum perm_grant grant;
	const char *group;    /* API group ("" the core group) */
	const char *resource; /* plural, "/subresource" appended */
	const char *verbs;    /* space separated, as the rule lists them */
	enum perm_scope scope;
	const char *who;  /* the programs that make the call */
	const char *what; /* what fails without it, in plain words */
	const char *by;   /* PERM_BY_CLUSTER: the cluster's ClusterRole that grants it */
};

extern const struct perm perm_table[];
extern const size_t perm_count;

/* "Role" / "ClusterRole" / "" (PERM_BY_CLUSTER) */
const char *perm_grant_kind(enum perm_grant g);
/* "labvm-backend", "labvm-nodes", "labvm-doctor"; "" for PERM_BY_CLUSTER (the row's by) */
const char *perm_grant_name(enum perm_grant g);
/* 1 when labvm fails without the row (FAIL), 0 when it only loses a feature (warn) */
int perm_grant_required(enum perm_grant g);

#endif
