/* The golden-disk decision over PVC objects, table-driven. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "golden.h"
#include "unit.h"

#define IMG "quay.io/containerdisks/debian:12"

static const struct {
	const char *name;
	const char *pvc;
	enum golden_reason want;
} cases[] = {
    {"bound ROX, image matches, import done",
     "{\"metadata\":{\"name\":\"g\",\"annotations\":{\"labvm.io/image\":\"" IMG "\","
     "\"cdi.kubevirt.io/storage.pod.phase\":\"Succeeded\"}},"
     "\"spec\":{\"accessModes\":[\"ReadOnlyMany\"]},\"status\":{\"phase\":\"Bound\"}}",
     GOLDEN_OK},
    {"bound RWX without CDI annotations",
     "{\"metadata\":{\"name\":\"g\",\"annotations\":{\"labvm.io/image\":\"" IMG "\"}},"
     "\"spec\":{\"accessModes\":[\"ReadWriteMany\"]},\"status\":{\"phase\":\"Bound\"}}",
     GOLDEN_OK},
    {"image as a label also counts",
     "{\"metadata\":{\"name\":\"g\",\"labels\":{\"labvm.io/image\":\"" IMG "\"}},"
     "\"spec\":{\"accessModes\":[\"ReadOnlyMany\"]},\"status\":{\"phase\":\"Bound\"}}",
     GOLDEN_OK},
    {"import still running",
     "{\"metadata\":{\"name\":\"g\",\"annotations\":{\"labvm.io/image\":\"" IMG "\","
     "\"cdi.kubevirt.io/storage.pod.phase\":\"Running\"}},"
     "\"spec\":{\"accessModes\":[\"ReadOnlyMany\"]},\"status\":{\"phase\":\"Bound\"}}",
     GOLDEN_IMPORTING},
    {"pending PVC of a CDI import",
     "{\"metadata\":{\"name\":\"g\",\"annotations\":{\"labvm.io/image\":\"" IMG "\","
     "\"cdi.kubevirt.io/storage.import.endpoint\":\"docker://x\"}},"
     "\"spec\":{\"accessModes\":[\"ReadOnlyMany\"]},\"status\":{\"phase\":\"Pending\"}}",
     GOLDEN_IMPORTING},
    {"pending PVC without CDI",
     "{\"metadata\":{\"name\":\"g\",\"annotations\":{\"labvm.io/image\":\"" IMG "\"}},"
     "\"spec\":{\"accessModes\":[\"ReadOnlyMany\"]},\"status\":{\"phase\":\"Pending\"}}",
     GOLDEN_UNAVAILABLE},
    {"ReadWriteOnce only",
     "{\"metadata\":{\"name\":\"g\",\"annotations\":{\"labvm.io/image\":\"" IMG "\"}},"
     "\"spec\":{\"accessModes\":[\"ReadWriteOnce\"]},\"status\":{\"phase\":\"Bound\"}}",
     GOLDEN_SINGLE_NODE},
    {"another image",
     "{\"metadata\":{\"name\":\"g\",\"annotations\":{\"labvm.io/image\":\"quay.io/x:1\"}},"
     "\"spec\":{\"accessModes\":[\"ReadOnlyMany\"]},\"status\":{\"phase\":\"Bound\"}}",
     GOLDEN_IMAGE_MISMATCH},
    {"no image annotation",
     "{\"metadata\":{\"name\":\"g\"},"
     "\"spec\":{\"accessModes\":[\"ReadOnlyMany\"]},\"status\":{\"phase\":\"Bound\"}}",
     GOLDEN_IMAGE_MISMATCH},
    {"being deleted",
     "{\"metadata\":{\"name\":\"g\",\"deletionTimestamp\":\"2026-11-29T10:00:00Z\","
     "\"annotations\":{\"labvm.io/image\":\"" IMG "\"}},"
     "\"spec\":{\"accessModes\":[\"ReadOnlyMany\"]},\"status\":{\"phase\":\"Bound\"}}",
     GOLDEN_DELETING},
    {"not an object", "[]", GOLDEN_UNAVAILABLE},
};

int main(void)
{
	struct cfg c;
	memset(&c, 0, sizeof c);
	c.label.image = "labvm.io/image";
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		cJSON *pvc = cJSON_Parse(cases[i].pvc);
		enum golden_reason got = golden_check_pvc(&c, pvc, IMG);
		CHECK(got == cases[i].want, "%s -> %s", cases[i].name,
		      golden_reason_str(cases[i].want) ? golden_reason_str(cases[i].want)
		                                       : "usable");
		if (got != cases[i].want)
			printf("#   got %s\n",
			       golden_reason_str(got) ? golden_reason_str(got) : "usable");
		cJSON_Delete(pvc);
	}
	const char *names[] = {"not_found",      "forbidden", "importing",  "single_node",
	                       "image_mismatch", "deleting",  "unavailable"};
	for (int r = GOLDEN_NOT_FOUND; r <= GOLDEN_UNAVAILABLE; r++)
		CHECK_STR(golden_reason_str((enum golden_reason)r), names[r - 1],
		          "reason %d has the API's name", r);
	return unit_done();
}
