/* helper.c - helper sessions: the ready labs that api (status polling) and
 * console work on, started and ended through the API like a student would. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "jsonx.h"

int bench_helper_start(const struct opts *o, struct bapi *a, const char *lesson, struct helper *h,
                       double timeout)
{
	cJSON *body = jx_obj(), *s = NULL;
	int rc = -1;

	jx_add_str(body, "lesson", lesson);
	double t0 = util_mono_s();
	for (;;) {
		cJSON_Delete(s);
		s = NULL;
		long code = bapi_call(a, "POST", "/api/sessions", body, &s);
		if (code == 201) {
			h->ours = 1;
			break;
		}
		if (code == 409 && kj_str(s, "session.id")) {
			const char *id = kj_str(s, "session.id");
			if (o->end_existing) {
				char *p = xasprintf("/api/sessions/%s", id);
				bapi_call(a, "DELETE", p, NULL, NULL);
				free(p);
				continue;
			}
			/* the user's own open session: use it, leave it open */
			cJSON *inner = cJSON_DetachItemFromObjectCaseSensitive(s, "session");
			cJSON_Delete(s);
			s = inner;
			break;
		}
		if (code == 503 && strcmp(bapi_error_code(s), "capacity_full") == 0 &&
		    util_mono_s() - t0 < timeout && !bench_sleep(2))
			continue;
		fprintf(stderr, "labvm-bench: %s cannot start %s: %ld %s%s\n", h->user, lesson,
		        code, code ? bapi_error_code(s) : "", code ? "" : a->msg);
		goto out;
	}
	bench_copy(h->sid, sizeof h->sid, kj_str(s, "id"));
	bench_copy(h->vm, sizeof h->vm, kj_str(s, "vms.0.name"));
	char *path = xasprintf("/api/sessions/%s", h->sid);
	while (!bench_stop && util_mono_s() - t0 < timeout) {
		cJSON *g = NULL;
		long code = bapi_call(a, "GET", path, NULL, &g);
		const char *st = code == 200 ? kj_str(g, "state") : NULL;
		if (st && strcmp(st, "ready") == 0) {
			rc = 0;
			cJSON_Delete(g);
			break;
		}
		if (st && strcmp(st, "starting") != 0) {
			fprintf(stderr, "labvm-bench: %s's %s session is %s: %s\n", h->user, lesson,
			        st, kj_str(g, "error") ? kj_str(g, "error") : "");
			cJSON_Delete(g);
			break;
		}
		cJSON_Delete(g);
		bench_sleep(0.5);
	}
	free(path);
	if (rc < 0 && h->ours && h->sid[0]) {
		char *p = xasprintf("/api/sessions/%s", h->sid);
		bapi_call(a, "DELETE", p, NULL, NULL);
		free(p);
		h->ours = 0;
	}
out:
	cJSON_Delete(s);
	cJSON_Delete(body);
	return rc;
}

int bench_helper_end(struct bapi *a, struct helper *h)
{
	long code = 0;
	if (!h->ours || !h->sid[0])
		return 0;
	char *p = xasprintf("/api/sessions/%s", h->sid);
	for (int i = 0; i < 3 && (code = bapi_call(a, "DELETE", p, NULL, NULL)) != 200; i++)
		fprintf(stderr, "labvm-bench: ending %s's session: %s (retrying)\n", h->user,
		        a->msg[0] ? a->msg : "HTTP error");
	free(p);
	h->ours = 0;
	return code == 200 ? 0 : -1;
}
