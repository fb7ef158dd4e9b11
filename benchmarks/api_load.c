/* api_load.c - `labvm-bench api`: GET load through the front end.
 *
 * C keep-alive connections (one thread and libcurl handle each) send GETs
 * back to back for a warm-up, then for the measured duration; req/s is the
 * answers completed inside the measured window over its length, the latency
 * is client side (request to last byte), and the app time is the answer's
 * own Server-Timing. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "jsonx.h"

struct load {
	const struct opts *o;
	const char *path_fmt; /* "/api/sessions/%s" or a fixed path */
	struct helper *helpers;
	int nhelpers;
	double t_measure, t_end; /* monotonic */
	pthread_mutex_t mu;
	struct dvec lat, app;
	long statuses[6]; /* 0 (no answer), 1xx..5xx */
	long ok;
	long done_total;
	int expect;
};

struct lthread {
	struct load *l;
	int i;
};

static void *load_worker(void *arg)
{
	struct lthread *t = arg;
	struct load *l = t->l;
	const struct helper *h = &l->helpers[t->i % l->nhelpers];
	struct bapi a;
	struct dvec lat = {0}, app = {0};
	long st[6] = {0}, ok = 0, total = 0;
	char *path = strstr(l->path_fmt, "%s") ? xasprintf("/api/sessions/%s", h->sid)
	                                       : xstrdup(l->path_fmt);

	if (bapi_init(&a, l->o->url, h->user, bench_password(l->o, h->uidx)) < 0) {
		free(path);
		return NULL;
	}
	while (!bench_stop) {
		double t0 = util_mono_s();
		if (t0 >= l->t_end)
			break;
		long code = bapi_call(&a, "GET", path, NULL, NULL);
		double t1 = util_mono_s();
		total++;
		if (t0 < l->t_measure || t1 > l->t_end)
			continue;
		st[code >= 100 && code < 600 ? code / 100 : 0]++;
		if (code == l->expect)
			ok++;
		dvec_push(&lat, a.ms);
		if (isfinite(a.st_app_ms))
			dvec_push(&app, a.st_app_ms);
	}
	pthread_mutex_lock(&l->mu);
	for (size_t i = 0; i < lat.n; i++)
		dvec_push(&l->lat, lat.v[i]);
	for (size_t i = 0; i < app.n; i++)
		dvec_push(&l->app, app.v[i]);
	for (int i = 0; i < 6; i++)
		l->statuses[i] += st[i];
	l->ok += ok;
	l->done_total += total;
	pthread_mutex_unlock(&l->mu);
	dvec_free(&lat);
	dvec_free(&app);
	free(path);
	bapi_cleanup(&a);
	return NULL;
}

static const struct {
	const char *name;
	const char *path;
	const char *shown;
	int expect;
} TARGETS[] = {
    {"status", "/api/sessions/%s", "GET /api/sessions/{id} (ready)", 200},
    {"lessons", "/api/lessons", "GET /api/lessons", 200},
    {"current", "/api/sessions/current", "GET /api/sessions/current", 200},
    {"healthz", "/api/healthz", "GET /api/healthz", 200},
};
#define NTARGETS (sizeof TARGETS / sizeof TARGETS[0])

static int target_index(const char *name)
{
	for (size_t k = 0; k < NTARGETS; k++)
		if (strcmp(TARGETS[k].name, name) == 0)
			return (int)k;
	return -1;
}

int cmd_api(struct opts *o)
{
	int *names = NULL;
	int nnames = 0, rc = 0;
	struct helper *h = NULL;
	int nh = 0;
	char *copyt = xstrdup(o->targets), *save = NULL;

	if (!o->url) {
		fprintf(stderr, "labvm-bench api: no --url (or LABVM_URL)\n");
		free(copyt);
		return 2;
	}
	for (char *t = strtok_r(copyt, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int k = target_index(t);
		if (k < 0) {
			fprintf(stderr,
			        "labvm-bench api: unknown target %s (status, lessons, "
			        "current, healthz)\n",
			        t);
			free(copyt);
			free(names);
			return 2;
		}
		names = xrealloc(names, sizeof *names * (size_t)(nnames + 1));
		names[nnames++] = k;
	}
	if (bench_users_load(o) < 0 || !nnames) {
		free(copyt);
		free(names);
		return 2;
	}
	const char *lesson = o->lesson ? o->lesson : "debian-golden";
	nh = o->sessions;
	h = xcalloc((size_t)nh, sizeof *h);
	for (int i = 0; i < nh; i++)
		h[i].uidx = i;
	printf("labvm-bench api: %d connections, %.0f s per target after %.0f s warm-up, against "
	       "%s\n",
	       o->connections, o->duration_s, o->warmup_s, o->url);
	printf("users %d (each with a ready %s session for \"status\" and \"current\")\n", nh,
	       lesson);
	fflush(stdout);
	if (bench_helpers_start(o, lesson, h, nh) < 0) {
		rc = 1;
		goto cleanup;
	}

	cJSON *root = jx_obj(), *res = jx_add_arr(root, "targets");
	jx_add_str(root, "command", "api");
	jx_add_str(root, "url", o->url);
	jx_add_num(root, "connections", o->connections);
	jx_add_num(root, "duration_s", o->duration_s);
	jx_add_num(root, "warmup_s", o->warmup_s);
	jx_add_str(root, "latency",
	           "client side, request to last byte, ms; percentiles by linear "
	           "interpolation");
	jx_add_str(root, "app", "the answer's Server-Timing app;dur (labvm.fcgi's own time), ms");
	printf("\n  %-8s %-32s %8s %9s %7s %8s %8s %8s %8s %8s %8s\n", "target", "request",
	       "answers", "req/s", "errors", "p50 ms", "p90 ms", "p99 ms", "max ms", "app p50",
	       "app p99");
	for (int ti = 0; ti < nnames && !bench_stop; ti++) {
		int k = names[ti];
		struct load l;
		memset(&l, 0, sizeof l);
		l.o = o;
		l.path_fmt = TARGETS[k].path;
		l.helpers = h;
		l.nhelpers = nh;
		l.expect = TARGETS[k].expect;
		pthread_mutex_init(&l.mu, NULL);
		double t0 = util_mono_s();
		l.t_measure = t0 + o->warmup_s;
		l.t_end = l.t_measure + o->duration_s;
		pthread_t *th = xcalloc((size_t)o->connections, sizeof *th);
		struct lthread *la = xcalloc((size_t)o->connections, sizeof *la);
		int started = 0;
		for (int i = 0; i < o->connections; i++) {
			la[i].l = &l;
			la[i].i = i;
			if (pthread_create(&th[i], NULL, load_worker, &la[i]) != 0)
				break;
			started++;
		}
		struct progress p;
		progress_start(&p, TARGETS[k].name, (size_t)(o->warmup_s + o->duration_s),
		               o->quiet);
		while (util_mono_s() < l.t_end && !bench_stop) {
			progress_show(&p, (size_t)(util_mono_s() - t0), "seconds", 0);
			bench_sleep(0.2);
		}
		for (int i = 0; i < started; i++)
			pthread_join(th[i], NULL);
		progress_end(&p);
		struct stats ls, as;
		stats_compute(l.lat.v, l.lat.n, &ls);
		stats_compute(l.app.v, l.app.n, &as);
		long errors = (long)l.lat.n - l.ok;
		double rps = (double)l.lat.n / o->duration_s;
		printf("  %-8s %-32s %8zu %9.0f %7ld %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f\n",
		       TARGETS[k].name, TARGETS[k].shown, l.lat.n, rps, errors, ls.p50, ls.p90,
		       ls.p99, ls.max, as.p50, as.p99);
		fflush(stdout);
		cJSON *e = jx_obj();
		jx_add_str(e, "target", TARGETS[k].name);
		jx_add_str(e, "request", TARGETS[k].shown);
		jx_add_num(e, "answers", (double)l.lat.n);
		bench_jnum(e, "req_per_s", rps, 1);
		jx_add_num(e, "errors", (double)errors);
		cJSON *sc = jx_add_obj(e, "status_classes");
		static const char *const cls[6] = {"none", "1xx", "2xx", "3xx", "4xx", "5xx"};
		for (int i = 0; i < 6; i++)
			if (l.statuses[i])
				jx_add_num(sc, cls[i], (double)l.statuses[i]);
		jx_put(e, "latency_ms", bench_stats_json(&ls, 3, 0));
		jx_put(e, "app_ms", bench_stats_json(&as, 3, 0));
		jx_push(res, e);
		dvec_free(&l.lat);
		dvec_free(&l.app);
		pthread_mutex_destroy(&l.mu);
		free(th);
		free(la);
		if (errors)
			rc = 1;
	}
	printf("\nreq/s = answers completed in the measured window / its length; latency is client "
	       "side\n(request to last byte); app = the answer's Server-Timing (labvm.fcgi's own "
	       "time).\nerrors = answers other than 200. Load generator, front end, labvm.fcgi and "
	       "PostgreSQL\nshare this machine's cores.\n");
	if (bench_write_figures(o, root) < 0)
		rc = 1;
	cJSON_Delete(root);
cleanup:
	for (int i = 0; i < nh; i++)
		bench_helper_end(o, NULL, &h[i]);
	free(h);
	free(names);
	free(copyt);
	if (bench_stop)
		rc = 130;
	return rc;
}
