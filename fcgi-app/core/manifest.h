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
	char secret[64]; /* vm + "-cloudinit" */
	char disk[64];   /* vm + "-disk" (DataVolume, disk source datavolume) */
	/* a pool VM (pool.c): labelled <prefix>/pool = the lesson and
	 * <prefix>/lesson-hash = this instead of <prefix>/session-id */
	char pool_hash[41];
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

#endif
