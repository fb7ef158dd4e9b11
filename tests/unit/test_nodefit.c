/* nodefit.h: Kubernetes quantities, KubeVirt's launcher memory, and the
 * "never fits" verdict over node lists, table-driven. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "nodefit.h"
#include "unit.h"

#define MI (1024LL * 1024LL)
#define GI (1024LL * MI)

static const struct {
	const char *q;
	long long want;
} quantities[] = {
    {"512Mi", 512 * MI},
    {"2Gi", 2 * GI},
    {"16303244Ki", 16303244LL * 1024},
    {"1k", 1000},
    {"110", 110},
    {"1.5Gi", 3 * GI / 2},
    {"100m", 0},
    {"1500m", 1},
    {"1e3", 1000},
    {"32G", 32000000000LL},
    {"", -1},
    {"Gi", -1},
    {"12Gb", -1},
    {"-1", -1},
    {"0.5", 0},
};

static cJSON *nodes(const char *json)
{
	cJSON *o = cJSON_Parse(json);
	if (!o) {
		printf("# bad JSON in the test: %s\n", json);
		exit(2);
	}
	return o;
}

#define NODE(name, mem, kvm)                                                                       \
	"{\"metadata\":{\"name\":\"" name "\"},\"status\":{\"allocatable\":{\"memory\":\"" mem     \
	"\",\"pods\":\"110\"" kvm "}}}"
#define KVM(n) ",\"devices.kubevirt.io/kvm\":\"" n "\""

int main(void)
{
	for (size_t i = 0; i < sizeof quantities / sizeof quantities[0]; i++) {
		long long got = nodefit_quantity(quantities[i].q);
		CHECK(got == quantities[i].want, "quantity \"%s\" = %lld", quantities[i].q,
		      quantities[i].want);
		if (got != quantities[i].want)
			printf("#   got %lld\n", got);
	}
	/* KubeVirt's estimate for a 2Gi 2-vCPU VM: 2Gi + 4Mi + 240Mi + 16Mi + 8Mi + 32Mi */
	CHECK(nodefit_vm_memory(2 * GI, 2) == 2 * GI + 300 * MI, "launcher memory of 2Gi/2 vCPU");

	struct lesson m[3];
	memset(m, 0, sizeof m);
	char *names[] = {"cp", "worker1", "worker2"};
	char *mems[] = {"2Gi", "1Gi", "1Gi"};
	int cpus[] = {2, 1, 1};
	for (int i = 0; i < 3; i++) {
		m[i].machine = names[i];
		m[i].memory = mems[i];
		m[i].cpus = cpus[i];
	}
	struct lesson multi = {
	    .id = "k", .memory = "2Gi", .cpus = 2, .machines = m, .nmachines = 3};
	struct lesson big = {.id = "b", .memory = "1Ti", .cpus = 1};
	struct lesson pod = {.id = "p", .runtime = RUNTIME_POD, .memory = "20Gi", .cpus = 1};
	char why[512];
	struct nodefit f;

	/* this machine's QEMU profile before #25: one 23 GiB node, 2 VM slots */
	cJSON *l = nodes("{\"items\":[" NODE("node-1", "23552Mi", KVM("2")) "]}");
	CHECK(nodefit_parse(l, &f) == 0 && f.n == 1, "a NodeList parses");
	CHECK(nodefit_check(&f, &multi, 1, why, sizeof why) == 0, "3 machines, 2 slots: never");
	CHECK(strstr(why, "its 3 machines share one node and together need 4.9 GiB of memory and "
	                  "3 VM slots; the largest node, node-1, has 23.0 GiB allocatable and 2 "
	                  "VM slots") != NULL,
	      "the answer names the need and the node");
	printf("#   %s\n", why);
	CHECK(nodefit_check(&f, &multi, 0, why, sizeof why) == 1,
	      "on a spanning network each machine alone fits");
	nodefit_free(&f);
	cJSON_Delete(l);

	/* four 8 GiB nodes: 3 x 3Gi fit each, never together */
	struct lesson m3[3];
	memcpy(m3, m, sizeof m3);
	for (int i = 0; i < 3; i++)
		m3[i].memory = "3Gi";
	struct lesson wide = multi;
	wide.machines = m3;
	l = nodes("{\"items\":[" NODE("a", "8Gi", KVM("1k")) "," NODE("b", "8Gi", KVM("1k")) "]}");
	nodefit_parse(l, &f);
	CHECK(nodefit_check(&f, &wide, 1, why, sizeof why) == 0, "9 GiB on one 8 GiB node: never");
	CHECK(nodefit_check(&f, &multi, 1, why, sizeof why) == 1, "4.9 GiB on one node: fits");
	CHECK(nodefit_check(&f, &big, 0, why, sizeof why) == 0 &&
	          strstr(why, "its VM needs 1026.3 GiB") &&
	          strstr(why, "the largest node, a, has 8.0 GiB"),
	      "1Ti alone: never, named (%s)", why);
	CHECK(nodefit_check(&f, &pod, 0, why, sizeof why) == 0 && strstr(why, "its Pod needs 20.0"),
	      "a 20Gi Pod: never");
	nodefit_free(&f);
	cJSON_Delete(l);

	/* a big node without KubeVirt runs no VM; lab Pods may use it */
	l = nodes("{\"items\":[" NODE("small", "4Gi", KVM("110")) "," NODE("big", "64Gi", "") "]}");
	nodefit_parse(l, &f);
	CHECK(nodefit_check(&f, &wide, 1, why, sizeof why) == 0 && strstr(why, "node, small,"),
	      "VMs only on nodes with devices.kubevirt.io/kvm");
	CHECK(nodefit_check(&f, &pod, 0, why, sizeof why) == 1, "a Pod fits the big node");
	nodefit_free(&f);
	cJSON_Delete(l);

	/* no node has the kvm device: software emulation, every node counts */
	l = nodes("{\"items\":[" NODE("e", "16Gi", "") "]}");
	nodefit_parse(l, &f);
	CHECK(nodefit_check(&f, &wide, 1, why, sizeof why) == 1, "emulation: no slot count");
	nodefit_free(&f);
	cJSON_Delete(l);

	l = nodes("{\"items\":[{\"metadata\":{\"name\":\"x\"},\"status\":{}}]}");
	CHECK(nodefit_parse(l, &f) == -1, "a node without allocatable memory: no verdict");
	cJSON_Delete(l);
	l = nodes("{\"kind\":\"Status\"}");
	CHECK(nodefit_parse(l, &f) == -1, "not a NodeList: no verdict");
	cJSON_Delete(l);
	return unit_done();
}
