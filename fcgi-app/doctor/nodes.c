/* nodes.c - labvm-doctor's check 4: the nodes that can run VMs, the memory
 * on them against vm_capacity (pod_capacity) of each lesson, and that every
 * lesson's session fits the session network's rule. The rules are
 * core/nodefit.c's, the ones labvm.fcgi applies at the press (KubeVirt's
 * launcher overhead, same-node sessions on one node). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doctor.h"
#include "nodefit.h"
#include "runtime.h"
#include "util.h"

struct node_info {
	char name[64];
	int ready, unschedulable, kubevirt;      /* KubeVirt's kubevirt.io/schedulable=true */
	long long mem, pods, kvm;                /* allocatable (kvm: -1 none) */
	long long mem_used, pods_used, kvm_used; /* by the lab namespace's pods there */
};

#define MAX_NODES 4096

static int node_ready(const cJSON *n)
{
	const cJSON *c;
	cJSON_ArrayForEach(c, kj_get(n, "status.conditions"))
	{
		const char *t = kj_str(c, "type"), *s = kj_str(c, "status");
		if (t && s && strcmp(t, "Ready") == 0)
			return strcmp(s, "True") == 0;
	}
	return 0;
}

static long long quantity_of(const cJSON *map, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(map, key);
	return cJSON_IsString(v) ? nodefit_quantity(v->valuestring) : -1;
}

/* The lab namespace's running pods, charged to their nodes (what the
 * backend's Role lets it see; other namespaces' pods are not visible). */
static void charge_pods(struct doc *d, struct node_info *ns, size_t n)
{
	char *path = xasprintf("/api/v1/namespaces/%s/pods", d->cfg.namespace_);
	cJSON *list = NULL;
	if (kube_get(&d->x.kube, path, &list) == 200) {
		const cJSON *p;
		cJSON_ArrayForEach(p, kj_get(list, "items"))
		{
			const char *node = kj_str(p, "spec.nodeName"),
			           *ph = kj_str(p, "status.phase");
			if (!node || (ph && (!strcmp(ph, "Succeeded") || !strcmp(ph, "Failed"))))
				continue;
			for (size_t i = 0; i < n; i++) {
				if (strcmp(ns[i].name, node) != 0)
					continue;
				const cJSON *c;
				cJSON_ArrayForEach(c, kj_get(p, "spec.containers"))
				{
					const cJSON *rq = kj_get(c, "resources.requests");
					long long m = quantity_of(rq, "memory");
					long long k = quantity_of(rq, "devices.kubevirt.io/kvm");
					ns[i].mem_used += m > 0 ? m : 0;
					ns[i].kvm_used += k > 0 ? k : 0;
				}
				ns[i].pods_used++;
			}
		}
	}
	cJSON_Delete(list);
	free(path);
}

/* How many of l's VMs (Pods) the nodes have room for now; *each the memory
 * one asks for (a same-node session: *each is the whole session's). */
static long long room_for(const struct node_info *ns, size_t n, const int *use,
                          const struct lesson *l, int same_node, int emulation, long long *each)
{
	int vm = runtime_of(l->runtime)->kvm;
	size_t nm = lesson_nmachines(l);
	long long biggest = 0, total = 0;
	for (size_t i = 0; i < nm; i++) {
		const struct lesson *m = lesson_machine(l, i);
		long long q = nodefit_quantity(m->memory);
		long long need = vm ? nodefit_vm_memory(q, m->cpus) : q;
		total += need;
		if (need > biggest)
			biggest = need;
	}
	int together = vm && same_node && nm > 1;
	*each = together ? total : biggest;
	long long room = 0;
	for (size_t i = 0; i < n; i++) {
		if (!use[i] || *each <= 0)
			continue;
		long long fm = ns[i].mem - ns[i].mem_used, fp = ns[i].pods - ns[i].pods_used;
		long long k = fm > 0 ? fm / *each : 0;
		long long per = together ? (long long)nm : 1;
		if (fp / per < k)
			k = fp / per;
		if (vm && !emulation && ns[i].kvm >= 0 && (ns[i].kvm - ns[i].kvm_used) / per < k)
			k = (ns[i].kvm - ns[i].kvm_used) / per;
		room += (k > 0 ? k : 0) * per;
	}
	return room;
}

/* The tightest lesson of one kind (VM or Pod) against its capacity: FAIL
 * lines for those that do not fit, one ok line for the tightest one. */
static void capacity(struct doc *d, const struct node_info *ns, size_t n, const int *use, int vm,
                     int same_node, int emulation, const int *never)
{
	int cap = vm ? d->cfg.vm_capacity : d->cfg.pod_capacity;
	const char *key = vm ? "vm_capacity" : "pod_capacity", *what = vm ? "VMs" : "Pods";
	const struct lesson *tight = NULL;
	long long tight_room = 0, tight_each = 0;
	int bad = 0;
	for (size_t i = 0; i < d->lessons.n; i++) {
		const struct lesson *l = &d->lessons.v[i];
		if (runtime_of(l->runtime)->kvm != vm || never[i])
			continue; /* a lesson that never fits has its own line */
		long long each;
		long long room = room_for(ns, n, use, l, same_node, emulation, &each);
		char g[32];
		doc_gib(g, sizeof g, each);
		if (room < cap) {
			char fix[256];
			snprintf(
			    fix, sizeof fix,
			    "lower %s to %lld, or give the nodes more memory (or free what other "
			    "workloads take there)",
			    key, room);
			doc_line(d, DOC_FAIL, fix,
			         "a full class of lesson %s does not fit: %s %d, room for %lld of "
			         "its %s "
			         "now (%s each%s)",
			         l->id, key, cap, room, what, g,
			         vm && same_node && lesson_nmachines(l) > 1
			             ? " session, on one node"
			             : "");
			bad++;
		}
		if (!tight || room < tight_room) {
			tight = l;
			tight_room = room;
			tight_each = each;
		}
	}
	if (tight && !bad) {
		char g[32];
		doc_gib(g, sizeof g, tight_each);
		doc_line(
		    d, DOC_OK, NULL,
		    "%s %d fits every %s lesson: the tightest, %s (%s %s), has room for %lld of "
		    "its %s now",
		    key, cap, vm ? "VM" : "Pod", tight->id, g,
		    vm ? (same_node && lesson_nmachines(tight) > 1
		              ? "a session on one node"
		              : "a VM with KubeVirt's overhead")
		       : "a Pod",
		    tight_room, what);
	}
}

void check_nodes(struct doc *d)
{
	if (!doc_api(d)) {
		doc_line(d, DOC_WARN, NULL, "not checked: the API server cannot be used (check 1)");
		return;
	}
	cJSON *list = NULL;
	long code = kube_get(&d->x.kube, "/api/v1/nodes", &list);
	if (code != 200) {
		doc_line(d, DOC_WARN,
		         "apply conf/k8s/rbac.yaml (the ClusterRole labvm-nodes: get, list nodes)",
		         "the nodes cannot be read (%s): capacity is not checked, and labvm cannot "
		         "refuse a lesson no node can hold at the press (never_fits)",
		         d->x.kube.msg);
		cJSON_Delete(list);
		return;
	}
	size_t n = 0, total = (size_t)cJSON_GetArraySize(kj_get(list, "items"));
	if (total > MAX_NODES)
		total = MAX_NODES;
	struct node_info *ns = xcalloc(total ? total : 1, sizeof *ns);
	int *vmuse = xcalloc(total ? total : 1, sizeof *vmuse);
	int *poduse = xcalloc(total ? total : 1, sizeof *poduse);
	const cJSON *it;
	cJSON_ArrayForEach(it, kj_get(list, "items"))
	{
		if (n >= total)
			break;
		struct node_info *x = &ns[n++];
		const cJSON *alloc = kj_get(it, "status.allocatable");
		snprintf(x->name, sizeof x->name, "%s",
		         kj_str(it, "metadata.name") ? kj_str(it, "metadata.name") : "?");
		x->ready = node_ready(it);
		x->unschedulable = cJSON_IsTrue(kj_get(it, "spec.unschedulable"));
		const cJSON *lab = cJSON_GetObjectItemCaseSensitive(kj_get(it, "metadata.labels"),
		                                                    "kubevirt.io/schedulable");
		x->kubevirt = cJSON_IsString(lab) && strcmp(lab->valuestring, "true") == 0;
		x->mem = quantity_of(alloc, "memory");
		x->pods = quantity_of(alloc, "pods");
		if (x->pods < 0)
			x->pods = 110;
		x->kvm = quantity_of(alloc, "devices.kubevirt.io/kvm");
	}
	charge_pods(d, ns, n);
	int emulation = doc_emulation(d);
	int need_vm = !d->have_lessons || doc_need_vms(d);
	size_t nvm = 0, npod = 0, nkvm0 = 0, nlabel = 0;
	long long vm_alloc = 0, vm_free = 0;
	char vmnames[256] = "";
	for (size_t i = 0; i < n; i++) {
		struct node_info *x = &ns[i];
		int up = x->ready && !x->unschedulable && x->mem > 0;
		poduse[i] = up;
		npod += up;
		if (up && x->kubevirt && (emulation || x->kvm > 0)) {
			vmuse[i] = 1;
			nvm++;
			vm_alloc += x->mem;
			vm_free += x->mem - x->mem_used;
			size_t len = strlen(vmnames);
			if (nvm <= 6)
				snprintf(vmnames + len, sizeof vmnames - len, "%s%s",
				         len ? ", " : "", x->name);
			else if (nvm == 7)
				snprintf(vmnames + len, sizeof vmnames - len, ", ...");
		}
		nkvm0 += up && x->kvm <= 0;
		nlabel += up && !x->kubevirt;
	}
	const char *kvcr =
	    d->kubevirt ? "" : " (the KubeVirt CR cannot be read: useEmulation taken as off)";
	if (need_vm && !nvm) {
		char why[256];
		if (!npod)
			snprintf(why, sizeof why, "none of the %zu nodes is Ready and schedulable",
			         n);
		else if (nkvm0 == npod)
			snprintf(
			    why, sizeof why,
			    "none of the %zu nodes has devices.kubevirt.io/kvm allocatable "
			    "(KubeVirt "
			    "finds no /dev/kvm there) and the KubeVirt CR's useEmulation is off%s",
			    npod, kvcr);
		else
			snprintf(
			    why, sizeof why,
			    "no Ready node has both devices.kubevirt.io/kvm allocatable and "
			    "KubeVirt's label kubevirt.io/schedulable=true (%zu lack the label: "
			    "virt-handler does not run there)",
			    nlabel);
		doc_line(
		    d, DOC_FAIL,
		    "give the nodes hardware virtualisation (/dev/kvm; nested virtualisation on "
		    "cloud VMs) and KubeVirt's virt-handler; on a trial cluster only, set "
		    "spec.configuration.developerConfiguration.useEmulation: true in the KubeVirt "
		    "CR (guests several times slower)",
		    "no node can run a VM: %s; every VM lab would wait out running_timeout_s as "
		    "Unschedulable",
		    why);
	} else if (need_vm) {
		char a[32], f[32];
		doc_gib(a, sizeof a, vm_alloc);
		doc_gib(f, sizeof f, vm_free);
		doc_line(d, DOC_OK, NULL,
		         "%zu of %zu nodes run VMs (%s%s): %s allocatable, %s free after the lab "
		         "namespace's pods (other namespaces' pods are not visible to labvm)",
		         nvm, n,
		         emulation ? "KubeVirt's useEmulation: " : "devices.kubevirt.io/kvm: ",
		         vmnames, a, f);
		if (emulation)
			doc_line(d, DOC_WARN,
			         "for a class, nodes with /dev/kvm and useEmulation off in the "
			         "KubeVirt CR",
			         "the KubeVirt CR's useEmulation is on: guests run under software "
			         "emulation (QEMU TCG), several times slower than with KVM");
	}
	int same_node = !d->cfg.session_net_ovn;
	if (!d->have_lessons) {
		doc_line(d, DOC_WARN, "see check 5",
		         "the lessons cannot be loaded: their fit is not checked");
	} else {
		/* never fits: nodefit's own verdict, over allocatable (what the press uses) */
		struct nodefit f = {0};
		f.nodes = xcalloc(n ? n : 1, sizeof *f.nodes);
		int *never = xcalloc(d->lessons.n ? d->lessons.n : 1, sizeof *never);
		int nnever = 0, multi = 0;
		for (size_t i = 0; i < d->lessons.n; i++) {
			const struct lesson *l = &d->lessons.v[i];
			int vm = runtime_of(l->runtime)->kvm;
			f.n = 0;
			for (size_t j = 0; j < n; j++) {
				if (!(vm ? vmuse[j] : poduse[j]))
					continue;
				struct node_cap *c = &f.nodes[f.n++];
				snprintf(c->name, sizeof c->name, "%s", ns[j].name);
				c->memory = ns[j].mem;
				c->pods = ns[j].pods;
				/* software emulation: no kvm device asked for, no slot count */
				c->kvm = vm && !emulation ? ns[j].kvm : -1;
			}
			if (!f.n) {
				never[i] = 1; /* said above: no node runs them */
				continue;
			}
			char why[512];
			multi += lesson_nmachines(l) > 1;
			if (!nodefit_check(&f, l, same_node, why, sizeof why)) {
				never[i] = 1;
				nnever++;
				doc_line(
				    d, DOC_FAIL,
				    same_node && lesson_nmachines(l) > 1
				        ? "give a node the memory for the whole session, make the "
				          "lesson's machines smaller, or use session_network = "
				          "ovn-layer2 (its machines may then spread over the nodes)"
				        : "make the lesson smaller (memory) or the nodes bigger",
				    "lesson %s: %s (labvm refuses it at the press: never_fits)",
				    l->id, why);
			}
		}
		if (multi && !nnever)
			doc_line(d, DOC_OK, NULL,
			         "session_network %s: every multi-machine lesson fits (%s)",
			         d->cfg.session_network,
			         same_node ? "all of a session's machines on one node"
			                   : "each machine on some node");
		nodefit_free(&f);
		if (nvm)
			capacity(d, ns, n, vmuse, 1, same_node, emulation, never);
		if (npod)
			capacity(d, ns, n, poduse, 0, same_node, emulation, never);
		free(never);
	}
	free(ns);
	free(vmuse);
	free(poduse);
	cJSON_Delete(list);
}
