/* helper.c - helper sessions: the ready labs that api (status polling) and
 * console work on, started and ended through the API like a student would. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "jsonx.h"

static int start_with(const struct opts *o, struct bapi *a, const char *lesson, struct helper *h,
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
			h->ready = 1;
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

int bench_helper_start(const struct opts *o, struct bapi *a, const char *lesson, struct helper *h,
                       double timeout)
{
	struct bapi own;
	bench_user(o, h->uidx, h->user);
	if (a)
		return start_with(o, a, lesson, h, timeout);
	if (bapi_init(&own, o->url, h->user, bench_password(o, h->uidx)) < 0)
		return -1;
	int rc = start_with(o, &own, lesson, h, timeout);
	bapi_cleanup(&own);
	return rc;
}

struct hstart {
	const struct opts *o;
	const char *lesson;
	struct helper *h;
	int rc;
};

static void *helper_thread(void *arg)
{
	struct hstart *x = arg;
	x->rc = bench_helper_start(x->o, NULL, x->lesson, x->h, 600);
	return NULL;
}

/* all at once: a start takes the lesson's boot time, not n of them */
int bench_helpers_start(const struct opts *o, const char *lesson, struct helper *h, int n)
{
	struct hstart *x = xcalloc((size_t)n, sizeof *x);
	pthread_t *th = xcalloc((size_t)n, sizeof *th);
	int *joined = xcalloc((size_t)n, sizeof *joined);
	int rc = 0;
	for (int i = 0; i < n; i++) {
		x[i] = (struct hstart){o, lesson, &h[i], -1};
		joined[i] = pthread_create(&th[i], NULL, helper_thread, &x[i]) == 0;
		if (!joined[i])
			helper_thread(&x[i]);
	}
	for (int i = 0; i < n; i++) {
		if (joined[i])
			pthread_join(th[i], NULL);
		if (x[i].rc != 0)
			rc = -1;
	}
	free(x);
	free(th);
	free(joined);
	return rc;
}

static int end_with(struct bapi *a, struct helper *h)
{
	long code = 0;
	char *p = xasprintf("/api/sessions/%s", h->sid);
	for (int i = 0; i < 3 && (code = bapi_call(a, "DELETE", p, NULL, NULL)) != 200; i++)
		fprintf(stderr, "labvm-bench: ending %s's session: %s (retrying)\n", h->user,
		        a->msg[0] ? a->msg : "HTTP error");
	free(p);
	h->ours = 0;
	return code == 200 ? 0 : -1;
}

int bench_helper_end(const struct opts *o, struct bapi *a, struct helper *h)
{
	struct bapi own;
	if (!h->ours || !h->sid[0])
		return 0;
	if (a)
		return end_with(a, h);
	if (bapi_init(&own, o->url, h->user, bench_password(o, h->uidx)) < 0)
		return -1;
	int rc = end_with(&own, h);
	bapi_cleanup(&own);
	return rc;
}
