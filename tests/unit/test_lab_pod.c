/* Which listed Pods are labvm's lab Pods (manifest_is_lab_pod), table-driven:
 * the pods a real cluster has with the lab labels on them. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "manifest.h"
#include "unit.h"

#define LAB                                                                                        \
	"\"labvm.io/lab-session\":\"true\",\"labvm.io/environment\":\"test\","                     \
	"\"labvm.io/session-id\":\"5b0c2f3e-9d8a-4c1e-8f00-0123456789ab\","                        \
	"\"labvm.io/lesson\":\"fresh-disk\""

static const struct {
	const char *name;
	const char *pod;
	int want;
} cases[] = {
    {"a lab Pod with the mark",
     "{\"metadata\":{\"name\":\"lab-1\",\"labels\":{" LAB ",\"labvm.io/lab-pod\":\"true\"}}}", 1},
    {"a lab Pod of the previous release (no mark, no owner)",
     "{\"metadata\":{\"name\":\"lab-1\",\"labels\":{" LAB "}}}", 1},
    /* import-controller.go: every PVC label, CDI's own labels, owned by the PVC */
    {"CDI's importer pod (legacy importer-<pvc>)",
     "{\"metadata\":{\"name\":\"importer-lab-1-disk\",\"labels\":{" LAB
     ",\"app\":\"containerized-data-importer\",\"cdi.kubevirt.io\":\"importer\","
     "\"kubevirt.io/created-by\":\"0d1e\"},\"ownerReferences\":[{\"apiVersion\":\"v1\","
     "\"kind\":\"PersistentVolumeClaim\",\"name\":\"lab-1-disk\",\"uid\":\"u1\","
     "\"controller\":true}]}}",
     0},
    {"CDI's importer pod (populator importer-prime-<uid>)",
     "{\"metadata\":{\"name\":\"importer-prime-u2\",\"labels\":{" LAB
     ",\"app\":\"containerized-data-importer\",\"cdi.kubevirt.io\":\"importer\"},"
     "\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\","
     "\"name\":\"prime-u2\",\"uid\":\"u2\",\"controller\":true}]}}",
     0},
    {"an importer pod without an owner (CDI's ImageStream case) still has cdi.kubevirt.io",
     "{\"metadata\":{\"name\":\"importer-x\",\"labels\":{" LAB
     ",\"cdi.kubevirt.io\":\"importer\"}}}",
     0},
    {"an unmarked pod some controller owns",
     "{\"metadata\":{\"name\":\"x\",\"labels\":{" LAB "},\"ownerReferences\":[{\"apiVersion\":"
     "\"apps/v1\",\"kind\":\"ReplicaSet\",\"name\":\"r\",\"uid\":\"u3\",\"controller\":true}]}}",
     0},
    {"a VM's virt-launcher pod",
     "{\"metadata\":{\"name\":\"virt-launcher-lab-1-abcde\",\"labels\":{" LAB
     ",\"kubevirt.io\":\"virt-launcher\",\"kubevirt.io/created-by\":\"u4\"}}}",
     0},
    {"the mark with another value",
     "{\"metadata\":{\"name\":\"x\",\"labels\":{" LAB ",\"labvm.io/lab-pod\":\"false\"}}}", 0},
    {"no lab-session", "{\"metadata\":{\"name\":\"x\",\"labels\":{\"labvm.io/lesson\":\"a\"}}}", 0},
    {"no labels", "{\"metadata\":{\"name\":\"x\"}}", 0},
    {"not an object", "[]", 0},
};

int main(void)
{
	struct cfg c;
	memset(&c, 0, sizeof c);
	c.label.lab_session = "labvm.io/lab-session";
	c.label.lab_pod = "labvm.io/lab-pod";
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		cJSON *pod = cJSON_Parse(cases[i].pod);
		CHECK(pod != NULL && manifest_is_lab_pod(&c, pod) == cases[i].want, "%s: %s",
		      cases[i].name, cases[i].want ? "a lab Pod" : "not a lab Pod");
		cJSON_Delete(pod);
	}
	return unit_done();
}
