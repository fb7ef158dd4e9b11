/* burst.c - `labvm-bench burst`: M users press start at once against
 * capacity C.
 *
 * M threads each open a connection (an authenticated GET /api/lessons), meet
 * at a barrier, and POST at once. Meanwhile a sampler counts the lab VMs in
 * the cluster every --sample-ms with the read token; overshoot is the most it
 * ever saw minus the capacity, and must be 0 (terminating VMs count, as labvm
 * counts them). Every session it started is ended afterwards. A round is
 * run_round (the presses and the samples), summarize_round (the answers,
 * printed and as JSON) and end_round (the sessions it started). */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "jsonx.h"

struct bthread {
	struct burst *b;
	int uidx;
	char user[64];
	long code;
	char err[40];
	char sid[40];
	double sent, answered; /* monotonic */
	double ms, app_ms, kube_ms;
	double capacity, in_use; /* from a capacity_full answer */
};

struct burst {
	const struct opts *o;
	pthread_barrier_t bar;
	const char *lesson;
	/* sampler */
	volatile int sampling;
	double t0;
	struct dvec st, sc; /* sample time (s from t0), count */
	long max_count;
	long failures;
};

static void *burst_worker(void *arg)
{
	struct bthread *t = arg;
	struct burst *b = t->b;
	struct bapi a;
	cJSON *body = jx_obj(), *s = NULL;
	int ready = bapi_init(&a, b->o->url, t->user, bench_password(b->o, t->uidx)) == 0;

	jx_add_str(body, "lesson", b->lesson);
	/* open and authenticate the connection before the barrier */
	if (ready)
		bapi_call(&a, "GET", "/api/lessons", NULL, NULL);
	pthread_barrier_wait(&b->bar);
	if (!ready) {
		bench_copy(t->err, sizeof t->err, "client_error");
		cJSON_Delete(body);
		return NULL;
	}
	t->sent = util_mono_s();
	t->code = bapi_call(&a, "POST", "/api/sessions", body, &s);
	t->answered = util_mono_s();
	t->ms = a.ms;
	t->app_ms = a.st_app_ms;
	t->kube_ms = a.st_kube_ms;
	bench_copy(t->err, sizeof t->err, t->code ? bapi_error_code(s) : "unreachable");
	if (t->code == 201)
		bench_copy(t->sid, sizeof t->sid, kj_str(s, "id"));
	const cJSON *c = kj_get(s, "capacity"), *u = kj_get(s, "in_use");
	t->capacity = cJSON_IsNumber(c) ? c->valuedouble : NAN;
	t->in_use = cJSON_IsNumber(u) ? u->valuedouble : NAN;
	cJSON_Delete(s);
	cJSON_Delete(body);
	bapi_cleanup(&a);
	return NULL;
}

static void *sampler(void *arg)
{
	struct burst *b = arg;
	struct cfg kc;
	struct kube k;
	if (bench_kube(b->o, &kc, &k) < 0)
		return NULL;
	while (b->sampling) {
		double t = util_mono_s();
		long n = bench_count_lab_vms(b->o, &k);
		if (n >= 0) {
			dvec_push(&b->st, t - b->t0);
			dvec_push(&b->sc, (double)n);
			if (n > b->max_count)
				b->max_count = n;
		} else {
			b->failures++;
		}
		double left = b->o->sample_ms / 1000.0 - (util_mono_s() - t);
		if (left > 0) {
			struct timespec ts = {0, (long)(left * 1e9)};
			nanosleep(&ts, NULL);
		}
	}
	bench_kube_free(&kc, &k);
	return NULL;
}

/* wait until the cluster holds at most `want` lab VMs; returns the count */
static long wait_vms(const struct opts *o, struct kube *k, long want, double timeout)
{
	double t0 = util_mono_s();
	long n;
	while ((n = bench_count_lab_vms(o, k)) > want && util_mono_s() - t0 < timeout &&
	       !bench_sleep(0.5))
		;
	return n;
}

struct answer_kind {
	long code;
	char err[40];
	int n;
};

/* One round: M threads POST at the barrier while the sampler counts the lab
 * VMs; before and final are the counts around it (-1 without the cluster).
 * *burst_s: first POST sent to the last answer. */
static void run_round(const struct opts *o, struct kube *k, int have_kube, int rnd, struct burst *b,
                      struct bthread *t, long *before, long *final, double *burst_s)
{
	pthread_t *th = xcalloc((size_t)o->users, sizeof *th);
	pthread_t samp;
	int have_samp = 0;

	*before = -1;
	if (have_kube) {
		*before = wait_vms(o, k, 0, 180);
		if (*before > 0)
			printf("round %d: %ld lab VM(s) still in the cluster (after 180 s); "
			       "capacity left is smaller\n",
			       rnd, *before);
	}
	pthread_barrier_init(&b->bar, NULL, (unsigned)o->users + 1);
	for (int i = 0; i < o->users; i++) {
		t[i].b = b;
		t[i].uidx = i;
		bench_user(o, i, t[i].user);
		if (pthread_create(&th[i], NULL, burst_worker, &t[i]) != 0) {
			fprintf(stderr, "labvm-bench burst: cannot start thread %d\n", i);
			abort(); /* the barrier would never open */
		}
	}
	b->t0 = util_mono_s();
	if (have_kube) {
		b->sampling = 1;
		have_samp = pthread_create(&samp, NULL, sampler, b) == 0;
	}
	pthread_barrier_wait(&b->bar);
	double t_go = util_mono_s();
	for (int i = 0; i < o->users; i++)
		pthread_join(th[i], NULL);
	*burst_s = util_mono_s() - t_go;
	bench_sleep(o->settle_s);
	if (have_samp) {
		b->sampling = 0;
		pthread_join(samp, NULL);
	}
	*final = have_kube ? bench_count_lab_vms(o, k) : -1;
	pthread_barrier_destroy(&b->bar);
	free(th);
}

/* The round's answers (kinds, latencies, the VM counts and the overshoot),
 * printed and appended to rounds; returns the overshoot, LONG_MIN when it
 * was not measured. all_p99 gets the round's p99 latency. */
static long summarize_round(const struct opts *o, int have_kube, int rnd, const struct burst *b,
                            const struct bthread *t, long before, long final, double burst_s,
                            struct dvec *all_p99, cJSON *rounds)
{
	struct answer_kind kinds[16];
	int nk = 0, admitted = 0;
	memset(kinds, 0, sizeof kinds);
	double capacity = o->capacity ? o->capacity : NAN, server_cap = NAN;
	struct dvec lat = {0}, lat201 = {0}, app = {0}, kms = {0};
	for (int i = 0; i < o->users; i++) {
		int j;
		for (j = 0; j < nk; j++)
			if (kinds[j].code == t[i].code && strcmp(kinds[j].err, t[i].err) == 0)
				break;
		if (j == nk && nk < 16) {
			kinds[nk].code = t[i].code;
			bench_copy(kinds[nk].err, sizeof kinds[nk].err, t[i].err);
			kinds[nk++].n = 0;
		}
		if (j < nk)
			kinds[j].n++;
		if (t[i].code == 201)
			admitted++;
		if (isfinite(t[i].capacity))
			server_cap = t[i].capacity;
		if (t[i].code) {
			dvec_push(&lat, t[i].ms);
			if (t[i].code == 201)
				dvec_push(&lat201, t[i].ms);
			if (isfinite(t[i].app_ms))
				dvec_push(&app, t[i].app_ms);
			if (isfinite(t[i].kube_ms))
				dvec_push(&kms, t[i].kube_ms);
		}
	}
	if (!isfinite(capacity))
		capacity = server_cap;
	struct stats ls, l201, as, ks;
	stats_compute(lat.v, lat.n, &ls);
	stats_compute(lat201.v, lat201.n, &l201);
	stats_compute(app.v, app.n, &as);
	stats_compute(kms.v, kms.n, &ks);
	dvec_push(all_p99, ls.p99);

	printf("\nround %d: %d POSTs in %.2f s (first sent to last answer)\n", rnd, o->users,
	       burst_s);
	printf("  answers:");
	for (int j = 0; j < nk; j++)
		printf("%s %ld%s%s x%d", j ? "," : "", kinds[j].code, kinds[j].err[0] ? " " : "",
		       kinds[j].err, kinds[j].n);
	printf("\n  latency ms (all answers): p50 %.1f, p90 %.1f, p99 %.1f, max %.1f; "
	       "201 only: p50 %.1f, p99 %.1f\n",
	       ls.p50, ls.p90, ls.p99, ls.max, l201.p50, l201.p99);
	printf("  server time ms (Server-Timing): app p50 %.1f, p99 %.1f; kube p50 %.1f, "
	       "p99 %.1f\n",
	       as.p50, as.p99, ks.p50, ks.p99);
	long overshoot = LONG_MIN;
	if (have_kube) {
		overshoot = isfinite(capacity) ? b->max_count - (long)capacity : LONG_MIN;
		printf("  lab VMs: %ld before, max %ld during (%zu samples, %ld failed), %ld "
		       "after %.0f s; capacity %s",
		       before, b->max_count, b->sc.n, b->failures, final, o->settle_s,
		       isfinite(capacity) ? "" : "unknown");
		if (isfinite(capacity))
			printf("%.0f%s", capacity,
			       isfinite(server_cap) && o->capacity && server_cap != o->capacity
			           ? " (the server said otherwise!)"
			           : "");
		printf("\n");
		if (overshoot != LONG_MIN)
			printf("  overshoot (max VMs - capacity): %ld  -> %s\n", overshoot,
			       overshoot > 0 ? "OVERSHOOT: capacity not strict" : "ok (0 or less)");
		if (isfinite(capacity) && before >= 0 && admitted < (long)capacity - before)
			printf("  note: %d admitted, although %ld were free\n", admitted,
			       (long)capacity - before);
	}
	cJSON *e = jx_obj();
	jx_add_num(e, "round", rnd);
	bench_jnum(e, "burst_s", burst_s, 3);
	cJSON *ans = jx_add_arr(e, "answers");
	for (int j = 0; j < nk; j++) {
		cJSON *a = jx_obj();
		jx_add_num(a, "status", (double)kinds[j].code);
		jx_add_str(a, "error", kinds[j].err[0] ? kinds[j].err : NULL);
		jx_add_num(a, "count", kinds[j].n);
		jx_push(ans, a);
	}
	jx_add_num(e, "admitted", admitted);
	jx_put(e, "latency_ms", bench_stats_json(&ls, 2, 0));
	jx_put(e, "latency_201_ms", bench_stats_json(&l201, 2, 0));
	jx_put(e, "app_ms", bench_stats_json(&as, 2, 0));
	jx_put(e, "kube_ms", bench_stats_json(&ks, 2, 0));
	if (isfinite(capacity))
		jx_add_num(e, "capacity", capacity);
	else
		jx_add_null(e, "capacity");
	if (have_kube) {
		jx_add_num(e, "vms_before", (double)before);
		jx_add_num(e, "vms_max", (double)b->max_count);
		jx_add_num(e, "vms_final", (double) final);
		if (overshoot != LONG_MIN)
			jx_add_num(e, "overshoot", (double)overshoot);
		else
			jx_add_null(e, "overshoot");
		jx_add_num(e, "samples", (double)b->sc.n);
		jx_add_num(e, "sample_failures", (double)b->failures);
		cJSON *series = jx_add_arr(e, "vm_count_series");
		for (size_t i = 0; i < b->sc.n; i++) {
			cJSON *pt = jx_arr();
			jx_push(pt, cJSON_CreateNumber(bench_round(b->st.v[i], 3)));
			jx_push(pt, cJSON_CreateNumber(b->sc.v[i]));
			jx_push(series, pt);
		}
	}
	jx_push(rounds, e);
	dvec_free(&lat);
	dvec_free(&lat201);
	dvec_free(&app);
	dvec_free(&kms);
	return overshoot;
}

/* End the sessions the round started. */
static void end_round(const struct opts *o, const struct bthread *t)
{
	int ended = 0;
	for (int i = 0; i < o->users; i++) {
		struct helper h = {.uidx = t[i].uidx, .ours = t[i].code == 201};
		if (!h.ours || !t[i].sid[0])
			continue;
		bench_copy(h.user, sizeof h.user, t[i].user);
		bench_copy(h.sid, sizeof h.sid, t[i].sid);
		bench_helper_end(o, NULL, &h);
		ended++;
	}
	printf("  ended the %d session(s) it started\n", ended);
	fflush(stdout);
}

int cmd_burst(struct opts *o)
{
	struct cfg kc;
	struct kube k;
	int have_kube, rc = 0;
	const char *lesson = o->lesson ? o->lesson : "debian-golden";

	if (!o->url) {
		fprintf(stderr, "labvm-bench burst: no --url (or LABVM_URL)\n");
		return 2;
	}
	if (bench_users_load(o) < 0)
		return 2;
	if (o->users > bench_user_count(o)) {
		fprintf(stderr, "labvm-bench burst: --users %d but only %d users\n", o->users,
		        bench_user_count(o));
		return 2;
	}
	have_kube = bench_kube(o, &kc, &k) == 0;
	printf("labvm-bench burst: %d users press start (%s) at once, %d round(s), against %s\n",
	       o->users, lesson, o->rounds, o->url);
	if (!have_kube)
		printf(
		    "no cluster read access (--kube-url, --kube-token-file, --kube-ca): overshoot "
		    "not measured\n");
	fflush(stdout);

	cJSON *root = jx_obj(), *rounds = jx_add_arr(root, "rounds");
	jx_add_str(root, "command", "burst");
	jx_add_str(root, "url", o->url);
	jx_add_str(root, "lesson", lesson);
	jx_add_num(root, "users", o->users);
	jx_add_num(root, "sample_ms", o->sample_ms);
	jx_add_str(root, "latency",
	           "client side, POST sent to last byte, ms; percentiles by linear "
	           "interpolation");
	struct dvec all_p99 = {0};
	long worst_overshoot = LONG_MIN;

	for (int rnd = 1; rnd <= o->rounds && !bench_stop; rnd++) {
		struct burst b;
		long before, final;
		double burst_s;
		memset(&b, 0, sizeof b);
		b.o = o;
		b.lesson = lesson;
		struct bthread *t = xcalloc((size_t)o->users, sizeof *t);
		run_round(o, &k, have_kube, rnd, &b, t, &before, &final, &burst_s);
		long overshoot = summarize_round(o, have_kube, rnd, &b, t, before, final, burst_s,
		                                 &all_p99, rounds);
		if (have_kube && overshoot > worst_overshoot)
			worst_overshoot = overshoot;
		if (overshoot != LONG_MIN && overshoot > 0)
			rc = 1;
		end_round(o, t);
		dvec_free(&b.st);
		dvec_free(&b.sc);
		free(t);
	}
	if (have_kube) {
		wait_vms(o, &k, 0, 120);
		bench_kube_free(&kc, &k);
	}
	if (o->rounds > 1 && all_p99.n) {
		struct stats s;
		stats_compute(all_p99.v, all_p99.n, &s);
		printf("\nover %zu rounds: p99 latency median %.1f ms (min %.1f, max %.1f); worst "
		       "overshoot %ld\n",
		       all_p99.n, s.p50, s.min, s.max, worst_overshoot);
	}
	dvec_free(&all_p99);
	if (worst_overshoot != LONG_MIN)
		jx_add_num(root, "worst_overshoot", (double)worst_overshoot);
	if (bench_write_figures(o, root) < 0)
		rc = 1;
	cJSON_Delete(root);
	if (bench_stop)
		rc = 130;
	return rc;
}
