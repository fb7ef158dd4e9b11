/* manifest.h - the cluster objects of a lab session, built with cJSON.
 *
 * Every object carries the labels <prefix>/lab-session: "true",
 * <prefix>/session-id (a pool VM: <prefix>/pool and <prefix>/lesson-hash
 * instead), <prefix>/environment and <prefix>/lesson; the VM's
 * template carries them too, so they reach the VMI and the virt-launcher pod.
 * tests/unit/test_manifest.c validates every manifest this file can produce
 * against KubeVirt's OpenAPI schema. */
#ifndef LABVM_CORE_MANIFEST_H
#define LABVM_CORE_MANIFEST_H

#include <cjson/cJSON.h>

#include "config.h"
#include "lesson.h"

struct lab_names {
	char session_id[37];
	char vm[64];     /* "lab-" + the session id without dashes */
	char secret[96]; /* vm + "-cloudinit" */
	char disk[96];   /* vm + "-disk" (DataVolume, disk source datavolume) */
	char files[96];  /* vm + "-files" (a Pod's Secret: lab files and setup) */
	/* a session of several machines: the machine's name (in the VM name,
	 * its label and its hostname) and the session network's NAD */
	char machine[MACHINE_NAME_MAX + 1];
	char network[64]; /* "lab-" + hex + "-net" */
	/* a pool VM (pool.c): labelled <prefix>/pool = the lesson and
	 * <prefix>/lesson-hash = this instead of <prefix>/session-id */
	char pool_hash[41];
};

/* Names derived from a session id (a UUID). */
void lab_names_from_session(struct lab_names *n, const char *session_id);
/* The names of one machine of a multi-machine session: VM "lab-<hex>-<machine>". */
void lab_names_for_machine(struct lab_names *n, const char *session_id, const char *machine);

/* A machine's place on the session network. */
struct machine_net {
	char mac_pod[18]; /* the pod-network interface's MAC ("default") */
	char mac_net[18]; /* the session-network interface's MAC ("session") */
	char address[24]; /* its static address, CIDR */
};

/* The session network's addresses: 10.<128 + a>.<b>.0/24 from the session id
 * (a different /24 per session, mostly), machine i at .(11 + i); the MACs
 * are locally administered, from the session id and i. */
void session_net_plan(const char *session_id, size_t i, struct machine_net *out);
/* The session network: a NetworkAttachmentDefinition whose CNI config is a
 * bridge private to the session on its node (session_network same-node), or
 * an OVN-Kubernetes layer2 network spanning the nodes (ovn-layer2); no IPAM
 * either way (the guests' addresses come from cloud-init network data). */
cJSON *manifest_nad(const struct cfg *c, const struct lab_names *n, const char *lesson_id);
/* cloud-init network data (version 2) for a machine: DHCP on the pod
 * network, the static address on the session network; malloc'd. */
char *manifest_network_data(const struct machine_net *m);
/* The Secret with the network data as well (key networkdata), when given. */
cJSON *manifest_secret_net(const struct cfg *c, const struct lab_names *n, const struct lesson *l,
                           const char *userdata, const char *networkdata);
/* The VirtualMachine of a machine on the session network (m NULL: as
 * manifest_vm). With session_network same-node its template asks for a
 * required pod affinity to the session id (topology kubernetes.io/hostname). */
cJSON *manifest_vm_net(const struct cfg *c, const struct lab_names *n, const struct lesson *l,
                       enum lesson_disk disk, const struct machine_net *m);

cJSON *manifest_labels(const struct cfg *c, const struct lab_names *n, const char *lesson_id);
/* The cloud-init Secret; userdata is the whole document. */
cJSON *manifest_secret(const struct cfg *c, const struct lab_names *n, const struct lesson *l,
                       const char *userdata);
/* The VirtualMachine; disk is the root disk actually used (after golden fallback). */
cJSON *manifest_vm(const struct cfg *c, const struct lab_names *n, const struct lesson *l,
                   enum lesson_disk disk);
/* Merge patch making the Secret owned by the VM (garbage collected with it). */
cJSON *manifest_owner_patch(const char *vm_name, const char *vm_uid);
/* The same for a Pod's Secret, owned by the Pod. */
cJSON *manifest_pod_owner_patch(const char *pod_name, const char *pod_uid);

/* Pod lessons. The Secret holds the setup script (key "setup.sh") and each
 * lab file (keys "f0", "f1", ... projected to files/<path> with its mode). */
cJSON *manifest_pod_secret(const struct cfg *c, const struct lab_names *n, const struct lesson *l);
/* The Pod: the session's labels, no service-account token, zero
 * capabilities (drop ALL, no privilege escalation, seccomp RuntimeDefault),
 * requests and limits, the Secret mounted read-only at /labvm. Its command
 * copies the files into place, runs setup (output to the log and
 * /run/labvm/setup.log), and only when setup exits 0 writes the ready flag
 * /run/labvm/ready and stays up; otherwise it ends with setup's exit code and
 * the output's tail as termination message. Readiness is an exec probe on
 * the flag, so the Pod's Ready condition is the lab's. restartPolicy Never. */
cJSON *manifest_pod(const struct cfg *c, const struct lab_names *n, const struct lesson *l);

/* Whether a listed Pod (metadata is enough) is a lab Pod labvm created. Only
 * those carry <prefix>/lab-pod: "true": labvm sets it on the Pod alone, never
 * on a VM, its template or a dataVolumeTemplate, so no other controller can
 * copy it. (A DataVolume's labels reach CDI's importer pod through its PVC,
 * the lab labels included; a VM's reach its virt-launcher pod.) Until the next
 * release a Pod of the previous one, which has no mark, still counts when it
 * carries <prefix>/lab-session=true and none of kubevirt.io (launchers),
 * cdi.kubevirt.io (every CDI pod) or a controller ownerReference (labvm never
 * sets one on its Pods). */
int manifest_is_lab_pod(const struct cfg *c, const cJSON *pod);

#define POD_READY_FLAG "/run/labvm/ready"
#define POD_CONTAINER  "lab"

#endif
