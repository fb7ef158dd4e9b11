/* poolbench.c - `labvm-bench readiness --pool P`: press-to-ready with a warm
 * pool beside cold starts, in the same run (issue #18).
 *
 * Per lesson: --n cold presses one after the other (no pool), then an
 * operator warms the lesson with P VMs (POST /api/operator/pool) and --n
 * presses follow, each once the pool has a ready VM again (that wait is not
 * counted: it is the pool's refill, not a student's). press-to-ready is
 * labvm-bench's clock from sending the POST to the first answer that shows
 * the session ready (the 201 itself for a pool hit; a poll every --poll s
 * otherwise, like the page). With --class U: U students press at once
 * against a pool of P of the first lesson (a class starting), the lab VMs in
 * the cluster sampled every 20 ms meanwhile: how many were instant, how long
 * the rest took, the peak against the capacity.
 *
 * The operator (--operator, the users' password) must be in labvm.conf's
 * `operators`. Warm requests are cancelled at the end. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "jsonx.h"

struct press {
	double s; /* press-to-ready seconds, NAN when it never got ready */
	int hit;  /* a pool VM */
	int refused;
	char disk[32];
};

/* One press of lesson by user ui: start, poll to ready, end. */
static void press(struct opts *o, int ui, const char *lesson, struct press *p)
{
	char user[64];
	struct bapi a;
	cJSON *body = jx_obj(), *s = NULL;
	char sid[40] = "";

	memset(p, 0, sizeof *p);
	p->s = NAN;
	bench_user(o, ui, user);
	if (bapi_init(&a, o->url, user, bench_password(o, ui)) < 0) {
		cJSON_Delete(body);
		return;
	}
	jx_add_str(body, "lesson", lesson);
	double t0 = util_mono_s();
	for (;;) {
		cJSON_Delete(s);
		s = NULL;
		long code = bapi_call(&a, "POST", "/api/sessions", body, &s);
		if (code == 201)
			break;
		if (code == 409 && kj_str(s, "session.id")) {
			/* a bench user's leftover: end it, press again (not counted) */
			char *path = xasprintf("/api/sessions/%s", kj_str(s, "session.id"));
			bapi_call(&a, "DELETE", path, NULL, NULL);
			free(path);
			t0 = util_mono_s();
			continue;
		}
		if (code == 503 && strcmp(bapi_error_code(s), "capacity_full") == 0 &&
		    util_mono_s() - t0 < o->admission_timeout_s && !bench_sleep(o->retry_wait_s))
			continue;
		p->refused = 1;
		goto out;
	}
	bench_copy(sid, sizeof sid, kj_str(s, "id"));
	bench_copy(p->disk, sizeof p->disk, kj_str(s, "disk.source"));
	p->hit = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "pool"));
	const char *st = kj_str(s, "state");
	char *path = xasprintf("/api/sessions/%s", sid);
	while (st && strcmp(st, "ready") != 0) {
		if (strcmp(st, "starting") != 0 || bench_stop ||
		    util_mono_s() - t0 > o->timeout_s || bench_sleep(o->poll_s)) {
			st = NULL;
			break;
		}
		cJSON_Delete(s);
		s = NULL;
		if (bapi_call(&a, "GET", path, NULL, &s) != 200)
			continue;
		st = kj_str(s, "state");
	}
	if (st)
		p->s = util_mono_s() - t0;
	free(path);
out:
	cJSON_Delete(s);
	cJSON_Delete(body);
	if (sid[0]) {
		char *pth = xasprintf("/api/sessions/%s", sid);
		bapi_call(&a, "DELETE", pth, NULL, NULL);
		free(pth);
	}
	bapi_cleanup(&a);
}

/* The operator's view of a lesson's pool: ready VMs, or -1. */
static int pool_ready(struct bapi *op, const char *lesson)
{
	cJSON *g = NULL, *it;
	int n = -1;
	if (bapi_call(op, "GET", "/api/operator/pool", NULL, &g) == 200) {
		n = 0;
		cJSON_ArrayForEach(it, kj_get(g, "lessons"))
		{
			const char *l = kj_str(it, "lesson");
			const cJSON *r = cJSON_GetObjectItemCaseSensitive(it, "ready");
			if (l && strcmp(l, lesson) == 0 && cJSON_IsNumber(r))
				n = r->valueint;
		}
	}
	cJSON_Delete(g);
	return n;
}

static int wait_pool(struct opts *o, struct bapi *op, const char *lesson, int want)
{
	double t0 = util_mono_s();
	while (!bench_stop && util_mono_s() - t0 < o->timeout_s) {
		if (pool_ready(op, lesson) >= want)
			return 0;
		bench_sleep(0.25);
	}
	fprintf(stderr, "labvm-bench: the pool of %s did not reach %d ready VMs\n", lesson, want);
	return -1;
}

static long warm(struct bapi *op, const char *lesson, int count)
{
	cJSON *b = jx_obj(), *out = NULL;
	jx_add_str(b, "lesson", lesson);
	jx_add_num(b, "count", count);
	jx_add_str(b, "until", "+6 hours");
	long code = bapi_call(op, "POST", "/api/operator/pool", b, &out);
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(out, "id");
	long r = code == 201 && cJSON_IsNumber(id) ? (long)id->valuedouble : -1;
	if (r < 0)
		fprintf(stderr, "labvm-bench: warming %s as %s: %ld %s\n", lesson, op->user, code,
		        code ? bapi_error_code(out) : op->msg);
	cJSON_Delete(b);
	cJSON_Delete(out);
	return r;
}

static void unwarm(struct bapi *op, long id)
{
	char *p = xasprintf("/api/operator/pool/%ld", id);
	bapi_call(op, "DELETE", p, NULL, NULL);
	free(p);
	bapi_call(op, "GET", "/api/operator/pool", NULL, NULL); /* a tick: the surplus goes */
}

struct figs {
	size_t n, hits, refused, failed;
	double p50, p95, p99, max;
};

static void figures(const struct press *p, size_t n, int only_hits, int only_misses, struct figs *f)
{
	struct dvec v = {0};
	memset(f, 0, sizeof *f);
	for (size_t i = 0; i < n; i++) {
		if ((only_hits && !p[i].hit) || (only_misses && p[i].hit))
			continue;
		f->hits += p[i].hit;
		f->refused += p[i].refused;
		if (isfinite(p[i].s))
			dvec_push(&v, p[i].s);
		else if (!p[i].refused)
			f->failed++;
	}
	f->n = v.n;
	f->p50 = f->p95 = f->p99 = f->max = NAN;
	if (v.n) {
		qsort(v.v, v.n, sizeof *v.v, stats_cmp_double);
		f->p50 = stats_pct(v.v, v.n, 50);
		f->p95 = stats_pct(v.v, v.n, 95);
		f->p99 = stats_pct(v.v, v.n, 99);
		f->max = v.v[v.n - 1];
	}
	dvec_free(&v);
}

static cJSON *figs_json(const char *lesson, const char *mode, const char *disk,
                        const struct figs *f)
{
	cJSON *o = jx_obj();
	jx_add_str(o, "lesson", lesson);
	jx_add_str(o, "mode", mode);
	jx_add_str(o, "disk", disk);
	jx_add_num(o, "n", (double)f->n);
	jx_add_num(o, "pool_hits", (double)f->hits);
	jx_add_num(o, "refused", (double)f->refused);
	jx_add_num(o, "failed", (double)f->failed);
	const char *k[4] = {"p50_s", "p95_s", "p99_s", "max_s"};
	double v[4] = {f->p50, f->p95, f->p99, f->max};
	for (int i = 0; i < 4; i++) {
		if (isfinite(v[i]))
			jx_add_num(o, k[i], round(v[i] * 1000) / 1000);
		else
			jx_add_null(o, k[i]);
	}
	return o;
}

static void print_row(const char *lesson, const char *mode, const char *disk, const struct figs *f)
{
	printf("%-16s %-5s %-14s %4zu %5zu %9.3f %9.3f %9.3f %9.3f\n", lesson, mode, disk, f->n,
	       f->hits, f->p50, f->p95, f->p99, f->max);
	fflush(stdout);
}

/* --class: U presses at once, a sampler counting the cluster's lab VMs */
struct cls {
	struct opts *o;
	struct kube *k;
	const char *lesson;
	struct press *p;
	int base, done_flag;
	long peak;
	size_t samples;
	pthread_barrier_t gate;
};

struct cls_arg {
	struct cls *c;
	int i;
};

static void *cls_press(void *arg)
{
	struct cls_arg *a = arg;
	pthread_barrier_wait(&a->c->gate);
	press(a->c->o, a->c->base + a->i, a->c->lesson, &a->c->p[a->i]);
	return NULL;
}

static void *cls_sample(void *arg)
{
	struct cls *c = arg;
	while (!__atomic_load_n(&c->done_flag, __ATOMIC_SEQ_CST)) {
		long n = bench_count_lab_vms(c->o, c->k);
		if (n > c->peak)
			c->peak = n;
		c->samples++;
		bench_sleep(0.02);
	}
	return NULL;
}

int bench_pool_run(struct opts *o, struct kube *k, const char *profile)
{
	struct bapi op;
	cJSON *out = jx_obj(), *rows = jx_add_arr(out, "rows");
	int rc = 0, ui = 0;
	char when[32];

	if (bapi_init(&op, o->url, o->operator_name, o->password) < 0)
		return 1;
	bench_fmt_time((double)time(NULL), when);
	printf("labvm-bench readiness --pool %d: per lesson %d cold presses, then %d with a warm "
	       "pool of %d\n(one after the other) against %s; cluster: %s\n",
	       o->pool, o->n, o->n, o->pool, o->url, profile);
	jx_add_str(out, "started", when);
	jx_add_str(out, "cluster", profile);
	jx_add_num(out, "pool", o->pool);
	printf("\n%-16s %-5s %-14s %4s %5s %9s %9s %9s %9s\n", "lesson", "mode", "disk", "n",
	       "hits", "p50_s", "p95_s", "p99_s", "max_s");
	int users = bench_user_count(o);
	for (int li = 0; li < o->nlessons && !bench_stop; li++) {
		const char *lesson = o->lessons[li];
		struct press *cold = xcalloc((size_t)o->n, sizeof *cold);
		struct press *hot = xcalloc((size_t)o->n, sizeof *hot);
		struct figs fc, fh;
		for (int i = 0; i < o->n && !bench_stop; i++)
			press(o, ui++ % users, lesson, &cold[i]);
		long wid = warm(&op, lesson, o->pool);
		if (wid < 0) {
			rc = 1;
		} else {
			for (int i = 0; i < o->n && !bench_stop; i++) {
				if (wait_pool(o, &op, lesson, 1) < 0) {
					rc = 1;
					break;
				}
				press(o, ui++ % users, lesson, &hot[i]);
			}
			unwarm(&op, wid);
		}
		figures(cold, (size_t)o->n, 0, 0, &fc);
		figures(hot, (size_t)o->n, 1, 0, &fh);
		const char *disk = cold[0].disk[0] ? cold[0].disk : "?";
		print_row(lesson, "cold", disk, &fc);
		print_row(lesson, "pool", hot[0].disk[0] ? hot[0].disk : disk, &fh);
		if (isfinite(fc.p50) && isfinite(fh.p50) && fh.p50 > 0)
			printf(
			    "%-16s pool p50 is %.0fx faster than cold (%zu of %d presses hit the "
			    "pool)\n",
			    "", fc.p50 / fh.p50, fh.hits, o->n);
		cJSON *rc1 = figs_json(lesson, "cold", disk, &fc);
		cJSON *rc2 = figs_json(lesson, "pool", disk, &fh);
		if (isfinite(fc.p50) && isfinite(fh.p50) && fh.p50 > 0)
			jx_add_num(rc2, "speedup_p50", round(fc.p50 / fh.p50));
		jx_push(rows, rc1);
		jx_push(rows, rc2);
		free(cold);
		free(hot);
	}

	if (o->class_users > 0 && !bench_stop) {
		struct cls c;
		memset(&c, 0, sizeof c);
		c.o = o;
		c.k = k;
		c.lesson = o->lessons[0];
		c.base = ui % users;
		int u = o->class_users;
		c.p = xcalloc((size_t)u, sizeof *c.p);
		long wid = warm(&op, c.lesson, o->pool);
		if (wid >= 0 && wait_pool(o, &op, c.lesson, o->pool) == 0) {
			pthread_t *th = xcalloc((size_t)u, sizeof *th);
			struct cls_arg *args = xcalloc((size_t)u, sizeof *args);
			pthread_t sampler;
			int have_sampler = k && pthread_create(&sampler, NULL, cls_sample, &c) == 0;
			pthread_barrier_init(&c.gate, NULL, (unsigned)u);
			for (int i = 0; i < u; i++) {
				args[i].c = &c;
				args[i].i = i;
				pthread_create(&th[i], NULL, cls_press, &args[i]);
			}
			for (int i = 0; i < u; i++)
				pthread_join(th[i], NULL);
			__atomic_store_n(&c.done_flag, 1, __ATOMIC_SEQ_CST);
			if (have_sampler)
				pthread_join(sampler, NULL);
			pthread_barrier_destroy(&c.gate);
			struct figs fi, fr;
			figures(c.p, (size_t)u, 1, 0, &fi);
			figures(c.p, (size_t)u, 0, 1, &fr);
			printf(
			    "\nclass start: %d presses at once, pool of %d (%s): %zu instant "
			    "(p50 %.3f s, max %.3f s); the other %zu ready after p50 %.3f s, max "
			    "%.3f s; %zu refused, %zu failed; peak lab VMs in the cluster %ld "
			    "(%zu samples)\n",
			    u, o->pool, c.lesson, fi.n, fi.p50, fi.max, fr.n, fr.p50, fr.max,
			    fi.refused + fr.refused, fi.failed + fr.failed, c.peak, c.samples);
			cJSON *cj = jx_add_obj(out, "class");
			jx_add_str(cj, "lesson", c.lesson);
			jx_add_num(cj, "presses", u);
			jx_add_num(cj, "pool", o->pool);
			jx_put(cj, "instant", figs_json(c.lesson, "pool", "", &fi));
			jx_put(cj, "rest", figs_json(c.lesson, "cold", "", &fr));
			jx_add_num(cj, "peak_lab_vms", (double)c.peak);
			free(th);
			free(args);
		} else {
			rc = 1;
		}
		if (wid >= 0)
			unwarm(&op, wid);
		free(c.p);
	}
	char *path = xasprintf("%s/%s-pool.json", o->out_dir, o->name ? o->name : "readiness");
	if (bench_mkdirs(o->out_dir) == 0) {
		FILE *f = fopen(path, "w");
		char *s = jx_print(out);
		if (f) {
			fprintf(f, "%s\n", s);
			fclose(f);
			printf("\nwrote %s\n", path);
		}
		cJSON_free(s);
	}
	free(path);
	cJSON_Delete(out);
	bapi_cleanup(&op);
	return bench_stop ? 130 : rc;
}
