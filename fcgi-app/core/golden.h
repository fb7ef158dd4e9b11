/* golden.h - may a `disk: golden` lesson use its golden PVC?
 *
 * Usable only when the PVC exists and is readable, is Bound and not still
 * importing (CDI's cdi.kubevirt.io/storage.pod.phase, where present, is
 * Succeeded), allows ReadOnlyMany or ReadWriteMany (VMs land on many nodes),
 * carries <prefix>/image (annotation, or label) equal to the lesson's image,
 * and has no deletionTimestamp. Otherwise the VM boots from the
 * containerDisk, silently for the student, and the reason is recorded. */
#ifndef LABVM_CORE_GOLDEN_H
#define LABVM_CORE_GOLDEN_H

#include <cjson/cJSON.h>

#include "config.h"
#include "kube.h"
#include "lesson.h"

enum golden_reason {
	GOLDEN_OK = 0,
	GOLDEN_NOT_FOUND,
	GOLDEN_FORBIDDEN,
	GOLDEN_IMPORTING,
	GOLDEN_SINGLE_NODE,
	GOLDEN_IMAGE_MISMATCH,
	GOLDEN_DELETING,
	GOLDEN_UNAVAILABLE,
};

/* The decision over a PVC object as the API returned it (pure). */
enum golden_reason golden_check_pvc(const struct cfg *c, const cJSON *pvc, const char *image);
/* GET the lesson's PVC and decide; detail (may be NULL) gets a log-worthy note. */
enum golden_reason golden_check(struct kube *k, const struct cfg *c, const struct lesson *l,
                                char *detail, size_t detail_len);
/* "not_found", "forbidden", ... (NULL for GOLDEN_OK) */
const char *golden_reason_str(enum golden_reason r);

#endif
