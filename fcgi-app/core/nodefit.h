/* nodefit.h - can a lesson's session ever be scheduled on this cluster?
 *
 * From the nodes' allocatable resources (GET /api/v1/nodes; RBAC: the
 * ClusterRole labvm-nodes in conf/k8s/rbac.yaml): memory, pods and
 * devices.kubevirt.io/kvm (one per VM; a node without it runs no VM unless
 * no node has it, KubeVirt's software emulation). A VM's launcher pod asks
 * its memory plus KubeVirt's overhead estimate (kubevirt/kubevirt
 * pkg/hypervisor/kvm/hypervisorbackend.go GetMemoryOverhead: guest/512 +
 * 240Mi + 8Mi per vCPU + 8Mi IOThread + 32Mi video); a lab Pod asks its
 * memory. A session whose machines must share a node (session_network
 * same-node) needs one node with room for all of them; otherwise each
 * machine needs some node. What is counted is allocatable, not what is free
 * now: "never fits" is certain (an estimate that is too low only lets the
 * cluster say Unschedulable later), a full cluster is not this check's. */
#ifndef LABVM_CORE_NODEFIT_H
#define LABVM_CORE_NODEFIT_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "kube.h"
#include "lesson.h"

struct node_cap {
	char name[64];
	long long memory; /* bytes allocatable */
	long long pods;
	long long kvm; /* devices.kubevirt.io/kvm allocatable; -1 none */
};

struct nodefit {
	struct node_cap *nodes;
	size_t n;
};

/* A Kubernetes quantity ("512Mi", "1k", "16303244Ki", "1.5Gi", "100m") in
 * units (rounded down); -1 when it is not one. */
long long nodefit_quantity(const char *q);
/* What a VM's launcher pod requests for memory (bytes). */
long long nodefit_vm_memory(long long guest_bytes, int cpus);
/* Parse a NodeList. 0 ok, -1 not a NodeList or a node without a readable
 * allocatable memory (the check is then not made). */
int nodefit_parse(const cJSON *list, struct nodefit *out);
void nodefit_free(struct nodefit *f);
/* 1 when the lesson's session fits on some node (or several), 0 when it
 * never can: why gets a sentence naming the need and the best node. */
int nodefit_check(const struct nodefit *f, const struct lesson *l, int same_node, char *why,
                  size_t whylen);

/* The same against the cluster's nodes (cached for a minute per process):
 * 1 fits, 0 never (why), -1 unknown: the nodes cannot be read (no RBAC for
 * them, the API down; why says), and the cluster decides as before. */
int nodefit_lesson(struct kube *k, const struct lesson *l, int same_node, char *why, size_t whylen);
/* Drop the cached nodes (tests). */
void nodefit_forget(void);

#endif
