/* facts.c - labvm-doctor's cluster facts (doctor.h doc_*()): each asked of
 * the API server once per run and remembered, for every check that reads it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doctor.h"
#include "jsonx.h"
#include "util.h"

/* ------------------------------------------------------------------ facts */

int doc_api(struct doc *d)
{
	if (d->api >= 0)
		return d->api;
	/* who the token is (authentication.k8s.io/v1 SelfSubjectReview, GA in
	 * 1.28); a cluster without it: any authenticated read says as much */
	cJSON *req = jx_obj(), *out = NULL;
	jx_add_str(req, "apiVersion", "authentication.k8s.io/v1");
	jx_add_str(req, "kind", "SelfSubjectReview");
	long code = kube_call(&d->x.kube, "POST",
	                      "/apis/authentication.k8s.io/v1/selfsubjectreviews", req, NULL, &out);
	cJSON_Delete(req);
	if (code == 201 || code == 200) {
		const char *u = kj_str(out, "status.userInfo.username");
		snprintf(d->user, sizeof d->user, "%s", u ? u : "");
		d->api = 1;
	} else if (code == 403 || code == 404) {
		/* authenticated (403: it may not ask; 404: too old to answer) */
		cJSON_Delete(out);
		out = NULL;
		long c2 = kube_get(&d->x.kube, "/api", &out);
		d->api = c2 == 200;
		if (!d->api)
			snprintf(d->api_why, sizeof d->api_why, "%s", d->x.kube.msg);
	} else {
		snprintf(d->api_why, sizeof d->api_why, "%s", d->x.kube.msg);
		d->api = 0;
	}
	cJSON_Delete(out);
	return d->api;
}

void doc_fetch_groups(struct doc *d)
{
	if (d->groups || !doc_api(d))
		return;
	cJSON *out = NULL;
	if (kube_get(&d->x.kube, "/apis", &out) == 200)
		d->groups = out;
	else
		cJSON_Delete(out);
}

const cJSON *doc_group(struct doc *d, const char *group)
{
	doc_fetch_groups(d);
	const cJSON *it;
	cJSON_ArrayForEach(it, kj_get(d->groups, "groups"))
	{
		const char *n = kj_str(it, "name");
		if (n && strcmp(n, group) == 0)
			return it;
	}
	return NULL;
}

int doc_group_has_version(const cJSON *g, const char *version)
{
	const cJSON *v;
	cJSON_ArrayForEach(v, kj_get(g, "versions"))
	{
		const char *s = kj_str(v, "version");
		if (s && strcmp(s, version) == 0)
			return 1;
	}
	return 0;
}

int doc_serves(struct doc *d, const char *group, const char *version, const char *resource)
{
	if (!doc_api(d))
		return 0;
	char *path =
	    *group ? xasprintf("/apis/%s/%s", group, version) : xasprintf("/api/%s", version);
	cJSON *out = NULL;
	int found = 0;
	if (kube_get(&d->x.kube, path, &out) == 200) {
		const cJSON *r;
		cJSON_ArrayForEach(r, kj_get(out, "resources"))
		{
			const char *n = kj_str(r, "name");
			if (n && strcmp(n, resource) == 0)
				found = 1;
		}
	}
	cJSON_Delete(out);
	free(path);
	return found;
}

const cJSON *doc_kubevirt(struct doc *d)
{
	if (d->kubevirt_asked || !doc_api(d))
		return d->kubevirt;
	d->kubevirt_asked = 1;
	cJSON *out = NULL;
	d->kubevirt_code = kube_get(&d->x.kube, "/apis/kubevirt.io/v1/kubevirts", &out);
	const cJSON *items = kj_get(out, "items");
	if (d->kubevirt_code == 200 && cJSON_GetArraySize(items) > 0)
		d->kubevirt = cJSON_Duplicate(cJSON_GetArrayItem(items, 0), 1);
	cJSON_Delete(out);
	return d->kubevirt;
}

int doc_emulation(struct doc *d)
{
	const cJSON *v = kj_get(doc_kubevirt(d), "spec.configuration.developerConfiguration."
	                                         "useEmulation");
	return cJSON_IsTrue(v);
}
