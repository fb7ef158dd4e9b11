/* cluster.c - the cluster on the admin (read) token: a kube client, the lab
 * VM count (burst's overshoot, class's most at once) and, on the simulator
 * only, its delay profile. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "jsonx.h"

int bench_kube(const struct opts *o, struct cfg *c, struct kube *k)
{
	memset(c, 0, sizeof *c);
	memset(k, 0, sizeof *k);
	if (!o->kube_url || !o->kube_token_file || !o->kube_ca)
		return -1;
	c->kube_api = xstrdup(o->kube_url);
	size_t n = strlen(c->kube_api);
	while (n && c->kube_api[n - 1] == '/')
		c->kube_api[--n] = '\0';
	c->kube_token_file = xstrdup(o->kube_token_file);
	c->kube_ca_file = xstrdup(o->kube_ca);
	c->namespace_ = xstrdup(o->namespace_);
	c->kube_timeout_ms = 10000;
	if (kube_init(k, c) < 0) {
		fprintf(stderr, "labvm-bench: cluster client: %s\n", k->msg);
		bench_kube_free(c, k);
		return -1;
	}
	return 0;
}

void bench_kube_free(struct cfg *c, struct kube *k)
{
	if (k->h)
		kube_cleanup(k);
	free(c->kube_api);
	free(c->kube_token_file);
	free(c->kube_ca_file);
	free(c->namespace_);
	memset(c, 0, sizeof *c);
}

long bench_count_lab_vms(const struct opts *o, struct kube *k)
{
	char *path = kube_path("virtualmachines", o->namespace_, NULL);
	char *sel = xasprintf("%s/lab-session=true", o->label_prefix);
	long n;
	long code = kube_count(k, path, sel, &n);
	free(sel);
	free(path);
	return code == 200 ? n : -1;
}

int bench_sim_profile(struct kube *k, const char *name, double time_scale, char *out_name, size_t n,
                      double *out_scale)
{
	cJSON *body = NULL, *res = NULL;
	long code;
	if (name) {
		body = jx_obj();
		jx_add_str(body, "profile", name);
		jx_add_num(body, "time_scale", time_scale);
		code = kube_call(k, "POST", "/_sim/profile", body, NULL, &res);
	} else {
		code = kube_get(k, "/_sim/profile", &res);
	}
	cJSON_Delete(body);
	const char *p = kj_str(res, "profile");
	const cJSON *ts = kj_get(res, "time_scale");
	int rc = code == 200 && p && cJSON_IsNumber(ts) ? 0 : -1;
	if (rc == 0) {
		if (out_name)
			snprintf(out_name, n, "%s", p);
		if (out_scale)
			*out_scale = ts->valuedouble;
	}
	cJSON_Delete(res);
	return rc;
}
