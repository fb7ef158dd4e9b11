/* manifest.h - the cluster objects of a lab session, built with cJSON.
 *
 * Every object carries the labels <prefix>/lab-session: "true",
 * <prefix>/session-id, <prefix>/environment and <prefix>/lesson; the VM's
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
	char secret[64]; /* vm + "-cloudinit" */
	char disk[64];   /* vm + "-disk" (DataVolume, disk source datavolume) */
	char files[64];  /* vm + "-files" (a Pod's Secret: lab files and setup) */
};

/* Names derived from a session id (a UUID). */
void lab_names_from_session(struct lab_names *n, const char *session_id);

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
cJSON *manifest_pod_secret(const struct cfg *c, const struct lab_names *n,
                           const struct lesson *l);
/* The Pod: the session's labels, no service-account token, zero
 * capabilities (drop ALL, no privilege escalation, seccomp RuntimeDefault),
 * requests and limits, the Secret mounted read-only at /labvm. Its command
 * copies the files into place, runs setup (output to the log and
 * /run/labvm/setup.log), and only when setup exits 0 writes the ready flag
 * /run/labvm/ready and stays up; otherwise it ends with setup's exit code and
 * the output's tail as termination message. Readiness is an exec probe on
 * the flag, so the Pod's Ready condition is the lab's. restartPolicy Never. */
cJSON *manifest_pod(const struct cfg *c, const struct lab_names *n, const struct lesson *l);

#define POD_READY_FLAG "/run/labvm/ready"
#define POD_CONTAINER  "lab"

#endif
