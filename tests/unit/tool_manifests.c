/* tool_manifests LESSONS_DIR: print, one JSON document per line, every
 * manifest labvm can produce for these lessons (Secret, and the VM for every
 * disk source the lesson can end up with; for a pod lesson its Secret and
 * Pod), plus the cloud-config of each
 * lesson as {"kind":"cloud-config","lesson":ID,"userdata":TEXT}. The Python
 * test tests/unit/test_manifests.py validates them against the upstream
 * schemas and parses the cloud-config as cloud-init would. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cloudinit.h"
#include "config.h"
#include "jsonx.h"
#include "lesson.h"
#include "manifest.h"

static void emit(cJSON *o)
{
	char *s = jx_print(o);
	puts(s);
	cJSON_free(s);
	cJSON_Delete(o);
}

int main(int argc, char **argv)
{
	struct cfg c;
	struct lessons ls;
	char err[512];
	struct lab_names n;

	if (argc != 2) {
		fprintf(stderr, "usage: tool_manifests LESSONS_DIR\n");
		return 2;
	}
	memset(&c, 0, sizeof c);
	c.environment = "check";
	c.namespace_ = "labs";
	c.label.lab_session = "labvm.io/lab-session";
	c.label.session_id = "labvm.io/session-id";
	c.label.environment = "labvm.io/environment";
	c.label.lesson = "labvm.io/lesson";
	c.label.image = "labvm.io/image";
	c.label.machine = "labvm.io/machine";
	c.label.lab_pod = "labvm.io/lab-pod";
	if (lessons_load(argv[1], &ls, err, sizeof err) < 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	lab_names_from_session(&n, "0b7e6c1a-8d3c-4c41-9a55-3f0b7a1c2d3e");
	for (size_t i = 0; i < ls.n; i++) {
		const struct lesson *l = &ls.v[i];
		if (l->runtime == RUNTIME_POD) {
			emit(manifest_pod_secret(&c, &n, l));
			emit(manifest_pod(&c, &n, l));
			continue;
		}
		if (l->nmachines) {
			/* a session of several machines: the NAD, then each machine's
			 * cloud-config (with /etc/hosts), Secret (with network data), VM */
			const char *sid = "0b7e6c1a-8d3c-4c41-9a55-3f0b7a1c2d3e";
			struct lab_names mn;
			lab_names_for_machine(&mn, sid, l->machines[0].machine);
			emit(manifest_nad(&c, &mn, l->id));
			for (size_t j = 0; j < l->nmachines; j++) {
				const struct lesson *m = &l->machines[j];
				struct machine_net net;
				lab_names_for_machine(&mn, sid, m->machine);
				session_net_plan(sid, j, &net);
				char *ud = cloudinit_build_hosts(
				    m, "tok3n-for-the-test", "10.1.2.11 cp\n10.1.2.12 worker1\n");
				char *nd = manifest_network_data(&net);
				cJSON *doc = jx_obj();
				jx_add_str(doc, "kind", "cloud-config");
				jx_add_str(doc, "lesson", l->id);
				jx_add_str(doc, "machine", m->machine);
				jx_add_str(doc, "userdata", ud);
				jx_add_str(doc, "networkdata", nd);
				emit(doc);
				emit(manifest_secret_net(&c, &mn, l, ud, nd));
				free(ud);
				free(nd);
				emit(manifest_vm_net(&c, &mn, m, m->disk, &net));
			}
			continue;
		}
		char *ud = cloudinit_build(l, "tok3n-for-the-test");
		cJSON *doc = jx_obj();
		jx_add_str(doc, "kind", "cloud-config");
		jx_add_str(doc, "lesson", l->id);
		jx_add_str(doc, "userdata", ud);
		emit(doc);
		emit(manifest_secret(&c, &n, l, ud));
		free(ud);
		emit(manifest_vm(&c, &n, l, l->disk));
		if (l->disk != DISK_CONTAINERDISK) /* the silent fallback */
			emit(manifest_vm(&c, &n, l, DISK_CONTAINERDISK));
	}
	emit(manifest_owner_patch(n.vm, "3f0b7a1c-2d3e-4c41-9a55-0b7e6c1a8d3c"));
	emit(manifest_pod_owner_patch(n.vm, "3f0b7a1c-2d3e-4c41-9a55-0b7e6c1a8d3c"));
	lessons_free(&ls);
	return 0;
}
