/* nodefit.c - see nodefit.h. */
#include "nodefit.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"
#include "log.h"
#include "runtime.h"
#include "util.h"

#define MI (1024LL * 1024LL)

long long nodefit_quantity(const char *q)
{
	static const struct {
		const char *suffix;
		long double mult;
	} sfx[] = {
	    {"Ki", 1024.0L},
	    {"Mi", 1048576.0L},
	    {"Gi", 1073741824.0L},
	    {"Ti", 1099511627776.0L},
	    {"Pi", 1125899906842624.0L},
	    {"Ei", 1152921504606846976.0L},
	    {"n", 1e-9L},
	    {"u", 1e-6L},
	    {"m", 1e-3L},
	    {"k", 1e3L},
	    {"M", 1e6L},
	    {"G", 1e9L},
	    {"T", 1e12L},
	    {"P", 1e15L},
	    {"E", 1e18L},
	    {"", 1.0L},
	};
	if (!q || !*q)
		return -1;
	const char *p = q;
	if (*p == '+')
		p++;
	if (!isdigit((unsigned char)*p) && *p != '.')
		return -1;
	long double v = 0;
	int digits = 0;
	while (isdigit((unsigned char)*p)) {
		v = v * 10 + (*p++ - '0');
		digits++;
	}
	if (*p == '.') {
		long double f = 0.1L;
		for (p++; isdigit((unsigned char)*p); p++, f /= 10) {
			v += (*p - '0') * f;
			digits++;
		}
	}
	if (!digits)
		return -1;
	if ((*p == 'e' || *p == 'E') &&
	    (isdigit((unsigned char)p[1]) || p[1] == '-' || p[1] == '+')) {
		char *end;
		long e = strtol(p + 1, &end, 10);
		if (*end || e > 18 || e < -18)
			return -1;
		for (; e > 0; e--)
			v *= 10;
		for (; e < 0; e++)
			v /= 10;
		p = end;
	}
	for (size_t i = 0; i < sizeof sfx / sizeof sfx[0]; i++)
		if (strcmp(p, sfx[i].suffix) == 0) {
			long double r = v * sfx[i].mult; /* >= 0: the cast rounds down */
			return r > 9.2e18L ? -1 : (long long)r;
		}
	return -1;
}

long long nodefit_vm_memory(long long guest, int cpus)
{
	if (cpus < 1)
		cpus = 1;
	/* page tables, virt-launcher-monitor 25Mi, virt-launcher 100Mi,
	 * virtlogd 25Mi, virtqemud 40Mi, QEMU 50Mi, 8Mi per vCPU, the IOThread
	 * 8Mi, video 32Mi (autoattachGraphicsDevice is not set: true) */
	return guest + guest / 512 + 240 * MI + 8 * MI * cpus + 8 * MI + 32 * MI;
}

int nodefit_parse(const cJSON *list, struct nodefit *out)
{
	memset(out, 0, sizeof *out);
	const cJSON *items = cJSON_GetObjectItemCaseSensitive(list, "items");
	if (!cJSON_IsArray(items))
		return -1;
	size_t n = (size_t)cJSON_GetArraySize(items);
	out->nodes = xcalloc(n ? n : 1, sizeof *out->nodes);
	const cJSON *it;
	cJSON_ArrayForEach(it, items)
	{
		struct node_cap *c = &out->nodes[out->n];
		const char *name = kj_str(it, "metadata.name");
		const cJSON *alloc = cJSON_GetObjectItemCaseSensitive(
		    cJSON_GetObjectItemCaseSensitive(it, "status"), "allocatable");
		const cJSON *mem = cJSON_GetObjectItemCaseSensitive(alloc, "memory");
		const cJSON *pods = cJSON_GetObjectItemCaseSensitive(alloc, "pods");
		const cJSON *kvm =
		    cJSON_GetObjectItemCaseSensitive(alloc, "devices.kubevirt.io/kvm");
		snprintf(c->name, sizeof c->name, "%s", name ? name : "?");
		c->memory = cJSON_IsString(mem) ? nodefit_quantity(mem->valuestring) : -1;
		if (c->memory < 0) {
			nodefit_free(out);
			return -1;
		}
		/* the kubelet's default maxPods when the node does not say */
		c->pods = cJSON_IsString(pods) ? nodefit_quantity(pods->valuestring) : 110;
		if (c->pods < 0)
			c->pods = 110;
		c->kvm = cJSON_IsString(kvm) ? nodefit_quantity(kvm->valuestring) : -1;
		out->n++;
	}
	return 0;
}

void nodefit_free(struct nodefit *f)
{
	free(f->nodes);
	f->nodes = NULL;
	f->n = 0;
}

static double gib(long long b)
{
	return (double)b / (double)(1024LL * MI);
}

int nodefit_check(const struct nodefit *f, const struct lesson *l, int same_node, char *why,
                  size_t whylen)
{
	size_t nm = lesson_nmachines(l);
	int vm = runtime_of(l->runtime)->kvm; /* a VM: a kvm device and the launcher's overhead */
	/* nodes for VMs: those with KubeVirt's device plugin (kvm); none with
	 * it at all: software emulation, every node, no slot count */
	int any_kvm = 0;
	for (size_t i = 0; vm && i < f->n; i++)
		any_kvm |= f->nodes[i].kvm >= 0;
	const struct node_cap *best = NULL;
	for (size_t i = 0; i < f->n; i++) {
		const struct node_cap *c = &f->nodes[i];
		if (vm && any_kvm && c->kvm <= 0)
			continue;
		if (!best || c->memory > best->memory)
			best = c;
	}
	if (!best) {
		snprintf(why, whylen,
		         "this lesson can never run here: no node of the cluster runs virtual "
		         "machines (none has allocatable devices.kubevirt.io/kvm)");
		return 0;
	}
	long long total = 0, biggest = 0;
	size_t big_i = 0;
	for (size_t i = 0; i < nm; i++) {
		const struct lesson *m = lesson_machine(l, i);
		long long q = nodefit_quantity(m->memory);
		long long need = vm ? nodefit_vm_memory(q, m->cpus) : q;
		total += need;
		if (need > biggest) {
			biggest = need;
			big_i = i;
		}
	}
	int together = vm && same_node && nm > 1;
	long long want = together ? total : biggest;
	long long slots = together ? (long long)nm : 1;
	for (size_t i = 0; i < f->n; i++) {
		const struct node_cap *c = &f->nodes[i];
		if (vm && any_kvm && c->kvm <= 0)
			continue;
		if (c->memory >= want && c->pods >= slots && (!vm || !any_kvm || c->kvm >= slots))
			return 1;
	}
	char slot_note[96] = "";
	if (vm && any_kvm)
		snprintf(slot_note, sizeof slot_note, " and %lld VM slots", best->kvm);
	if (together)
		snprintf(why, whylen,
		         "this lesson can never run here: its %zu machines share one node and "
		         "together need %.1f GiB of memory and %lld VM slots; the largest node, "
		         "%s, has %.1f GiB allocatable%s",
		         nm, gib(want), slots, best->name, gib(best->memory), slot_note);
	else if (nm > 1)
		snprintf(why, whylen,
		         "this lesson can never run here: machine %s needs %.1f GiB of memory; the "
		         "largest node, %s, has %.1f GiB allocatable",
		         lesson_machine(l, big_i)->machine, gib(want), best->name,
		         gib(best->memory));
	else
		snprintf(why, whylen,
		         "this lesson can never run here: its %s needs %.1f GiB of memory; the "
		         "largest node, %s, has %.1f GiB allocatable",
		         vm ? "VM" : "Pod", gib(want), best->name, gib(best->memory));
	return 0;
}

/* The nodes, read at most once per NODEFIT_TTL_S per process (every thread
 * shares them): the check costs one list now and then, not one per press. */
#define NODEFIT_TTL_S 60.0

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static struct nodefit cache;
static double cache_at = -1e9;
static long cache_code = -1; /* the last list's HTTP status (0: unreachable) */
static char cache_msg[sizeof((struct kube *)0)->msg];

int nodefit_lesson(struct kube *k, const struct lesson *l, int same_node, char *why, size_t whylen)
{
	pthread_mutex_lock(&cache_mu);
	double now = util_mono_s();
	if (now - cache_at >= NODEFIT_TTL_S) {
		cJSON *list = NULL;
		long code = kube_get(k, "/api/v1/nodes", &list);
		struct nodefit fresh;
		if (code == 200 && nodefit_parse(list, &fresh) < 0) {
			code = -2;
			snprintf(k->msg, sizeof k->msg,
			         "a node without readable allocatable memory");
		}
		cJSON_Delete(list);
		if (code != cache_code && code == 200)
			log_info("node fit: the nodes are read (%zu)", fresh.n);
		else if (code != cache_code)
			log_warn("node fit: cannot read the nodes (%s): lessons that can never be "
			         "scheduled are not refused at the press",
			         k->msg);
		nodefit_free(&cache);
		if (code == 200)
			cache = fresh;
		else
			snprintf(cache_msg, sizeof cache_msg, "%s", k->msg);
		cache_code = code;
		cache_at = now;
	}
	int rc = -1;
	if (cache_code == 200)
		rc = nodefit_check(&cache, l, same_node, why, whylen);
	else
		snprintf(why, whylen, "the nodes could not be read: %s", cache_msg);
	pthread_mutex_unlock(&cache_mu);
	return rc;
}

void nodefit_forget(void)
{
	pthread_mutex_lock(&cache_mu);
	nodefit_free(&cache);
	cache_at = -1e9;
	cache_code = -1;
	pthread_mutex_unlock(&cache_mu);
}
