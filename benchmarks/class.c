/* class.c - `labvm-bench class`: a class against a full lab, the waiting line
 * (issue #20) beside retry-only.
 *
 * --students press Start within --spread seconds of each other against a lab
 * of C seats; each keeps the lab it gets for a time drawn from --hold, then
 * ends it. The same class (the same press times and holds, from --seed) runs
 * in each mode:
 *
 *   retry  the page before the line: 503 capacity_full, wait Retry-After
 *          (or --retry-after) plus a reaction of 0..--reaction s, press again
 *   line   "queue": true: a place in line (202), polled every --poll s as the
 *          page does; the estimate shown on joining is kept
 *
 * Retry-only goes first, so the line's estimate has recent history to learn
 * from. The admission time is the session's own created_at (the server's
 * clock, the same machine's as the press times here): the wait is press ->
 * admission, not press -> the next poll. Figures per mode: the wait (p50, p90,
 * p95, max), out-of-order admissions (pairs where the later press was admitted
 * first, over all pairs: 0 is first come first served), presses per student,
 * the most lab VMs at once (with cluster read access); for the line, the
 * estimate's error (admission - estimate: |err| p50, p95, the signed median)
 * and how often the bound (no_later_than) held. Every session and place it
 * made is ended.
 *
 * Walk-aways (issue #28, --walkaway P): a share of the students (the same
 * ones, at the same moments, in every mode) stop working at a random moment
 * of their hold and never come back; their page stays open and asks as the
 * page does. Working students show activity every --activity s (POST
 * /activity, what typing records). With --idle-lesson the class runs in line
 * mode twice, idle ending off (--lesson) and on (--idle-lesson); figures
 * per mode add the seat utilisation (seat-seconds worked: admission ->
 * stopped working, over seats x first press -> the last working student's
 * end), the idle ends, and the working students ended by mistake (must be
 * 0: the run fails otherwise). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "jsonx.h"

/* ------------------------------------------------------------ the class */

enum hold_kind { HOLD_UNIFORM, HOLD_EXP, HOLD_FIXED };

struct hold {
	enum hold_kind kind;
	double a, b; /* uniform: min, max; exp: mean; fixed: a */
};

static int hold_parse(const char *s, struct hold *h)
{
	char kind[16];
	double a = NAN, b = NAN;
	char tail;
	int n = sscanf(s, "%15[a-z]:%lf:%lf%c", kind, &a, &b, &tail);
	memset(h, 0, sizeof *h);
	if (n == 3 && strcmp(kind, "uniform") == 0 && a >= 0 && b >= a && b <= 86400) {
		*h = (struct hold){HOLD_UNIFORM, a, b};
		return 0;
	}
	if (n == 2 && strcmp(kind, "exp") == 0 && a > 0 && a <= 86400) {
		*h = (struct hold){HOLD_EXP, a, 0};
		return 0;
	}
	if (n == 2 && strcmp(kind, "fixed") == 0 && a >= 0 && a <= 86400) {
		*h = (struct hold){HOLD_FIXED, a, 0};
		return 0;
	}
	fprintf(stderr,
	        "labvm-bench class: --hold %s: expected uniform:MIN:MAX, exp:MEAN or fixed:S "
	        "(seconds, at most 86400)\n",
	        s);
	return -1;
}

static void hold_describe(const struct hold *h, char *out, size_t n)
{
	if (h->kind == HOLD_UNIFORM)
		snprintf(out, n, "%g-%g s (uniform)", h->a, h->b);
	else if (h->kind == HOLD_EXP)
		snprintf(out, n, "exponential, mean %g s", h->a);
	else
		snprintf(out, n, "%g s each", h->a);
}

/* splitmix64: a small reproducible stream per student */
static uint64_t rng_next(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* [0, 1) */
static double rng_unit(uint64_t *x)
{
	return (double)(rng_next(x) >> 11) * 0x1.0p-53;
}

static double hold_draw(const struct hold *h, uint64_t *x)
{
	double u = rng_unit(x);
	switch (h->kind) {
	case HOLD_UNIFORM:
		return h->a + u * (h->b - h->a);
	case HOLD_EXP:
		return -h->a * log(1.0 - u);
	case HOLD_FIXED:
		break;
	}
	return h->a;
}

static double wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ----------------------------------------------------------- one student */

static void end_path(struct bapi *a, const char *sid)
{
	char *p = xasprintf("/api/sessions/%s", sid);
	for (int i = 0; i < 3; i++) {
		long code = bapi_call(a, "DELETE", p, NULL, NULL);
		if (code == 200 || code == 404 || code == 409)
			break;
	}
	free(p);
}

/* a bench user's open session (or place) from an earlier run: ended */
static void end_open(struct bapi *a)
{
	cJSON *s = NULL;
	long code = bapi_call(a, "GET", "/api/sessions/current", NULL, &s);
	const char *id = code == 200 ? kj_str(s, "id") : NULL;
	if (id)
		end_path(a, id);
	cJSON_Delete(s);
}

/* the session's created_at (the admission, server clock), else now */
static double admission_time(const cJSON *s)
{
	double t = bench_parse_time(kj_str(s, "created_at"));
	return isfinite(t) ? t : wall_s();
}

/* Waits in line until admitted: 0, or -1 (s->err). */
static int wait_in_line(struct student *s, struct bapi *a, double deadline)
{
	const struct opts *o = s->r->o;
	char *path = xasprintf("/api/sessions/%s", s->sid);
	int rc = -1;
	for (;;) {
		if (bench_sleep(o->place_poll_s)) {
			bench_copy(s->err, sizeof s->err, "interrupted");
			break;
		}
		cJSON *g = NULL;
		long code = bapi_call(a, "GET", path, NULL, &g);
		const char *st = code == 200 ? kj_str(g, "state") : NULL;
		if (st && (strcmp(st, "starting") == 0 || strcmp(st, "ready") == 0)) {
			s->admitted = admission_time(g);
			s->seen = wall_s();
			cJSON_Delete(g);
			rc = 0;
			break;
		}
		if (!st || strcmp(st, "queued") != 0) {
			bench_fmt_cut(s->err, sizeof s->err, "the place: %ld %s %s", code,
			              st ? st : bapi_error_code(g),
			              kj_str(g, "message") ? kj_str(g, "message") : a->msg);
			cJSON_Delete(g);
			break;
		}
		cJSON_Delete(g);
		if (wall_s() > deadline) {
			bench_fmt_cut(s->err, sizeof s->err, "still in line after %.0f s",
			              o->timeout_s);
			break;
		}
	}
	free(path);
	return rc;
}

static void press_until_admitted(struct student *s, struct bapi *a)
{
	const struct opts *o = s->r->o;
	cJSON *body = jx_obj();
	double deadline;

	jx_add_str(body, "lesson", s->r->lesson);
	if (s->r->line)
		jx_add_bool(body, "queue", 1);
	s->pressed = wall_s();
	deadline = s->pressed + o->timeout_s;
	while (!bench_stop) {
		cJSON *ans = NULL;
		s->tries++;
		long code = bapi_call(a, "POST", "/api/sessions", body, &ans);
		const char *err = code ? bapi_error_code(ans) : "unreachable";
		if (code == 201) {
			bench_copy(s->sid, sizeof s->sid, kj_str(ans, "id"));
			s->admitted = admission_time(ans);
			s->seen = wall_s();
			cJSON_Delete(ans);
			break;
		}
		if (code == 202 && kj_str(ans, "id")) {
			const cJSON *pos = kj_get(ans, "queue.position");
			bench_copy(s->sid, sizeof s->sid, kj_str(ans, "id"));
			s->joined = 1;
			s->position = cJSON_IsNumber(pos) ? (long)pos->valuedouble : 0;
			s->estimate = bench_parse_time(kj_str(ans, "queue.estimate"));
			s->bound = bench_parse_time(kj_str(ans, "queue.no_later_than"));
			cJSON_Delete(ans);
			if (wait_in_line(s, a, deadline) < 0) {
				end_path(a, s->sid); /* out of the line */
				s->sid[0] = '\0';
			}
			break;
		}
		if (code == 503 &&
		    (strcmp(err, "capacity_full") == 0 || strcmp(err, "capacity_busy") == 0)) {
			double w = o->retry_after_s > 0  ? o->retry_after_s
			           : a->retry_after >= 0 ? (double)a->retry_after
			                                 : 30;
			cJSON_Delete(ans);
			w += rng_unit(&s->rng) * o->reaction_s;
			if (wall_s() + w > deadline) {
				bench_fmt_cut(s->err, sizeof s->err, "no lab after %.0f s",
				              o->timeout_s);
				break;
			}
			if (bench_sleep(w))
				break;
			continue;
		}
		bench_fmt_cut(s->err, sizeof s->err, "start: %ld %s %s", code, err,
		              kj_str(ans, "message") ? kj_str(ans, "message") : a->msg);
		cJSON_Delete(ans);
		break;
	}
	if (bench_stop && !s->err[0] && !isfinite(s->admitted))
		bench_copy(s->err, sizeof s->err, "interrupted");
	cJSON_Delete(body);
}

/* The session's state and end reason now (GET), and the session JSON (*out,
 * the caller's) when 200. */
static const char *look(struct bapi *a, const char *sid, cJSON **out)
{
	char *p = xasprintf("/api/sessions/%s", sid);
	*out = NULL;
	long code = bapi_call(a, "GET", p, NULL, out);
	free(p);
	return code == 200 ? kj_str(*out, "state") : NULL;
}

static int active_state(const char *st)
{
	return st && (strcmp(st, "starting") == 0 || strcmp(st, "ready") == 0);
}

/* A walk-away's page, still open: it asks as web/lab.js does, every 20 s,
 * at the moment a warning is due (warning_s before the next of idle_ends_at
 * and expires_at), every 3 s while the banner shows, and at the end, until
 * the session ends (idle or expired). */
static void open_page(struct student *s, struct bapi *a)
{
	double give_up = wall_s() + s->r->o->timeout_s;
	while (!bench_stop && wall_s() < give_up) {
		cJSON *g;
		const char *st = look(a, s->sid, &g);
		if (st && !active_state(st)) {
			const char *why = kj_str(g, "end_reason");
			s->idle_end = why && strcmp(why, "idle") == 0;
			cJSON_Delete(g);
			return;
		}
		double now = wall_s(), next = now + 20;
		const cJSON *w = kj_get(g, "warning");
		if (cJSON_IsObject(w)) {
			double ends = bench_parse_time(kj_str(w, "ends_at"));
			next = fmin(now + 3, isfinite(ends) ? ends + 0.5 : now + 3);
		} else if (g) {
			double ie = bench_parse_time(kj_str(g, "idle_ends_at"));
			double ex = bench_parse_time(kj_str(g, "expires_at"));
			double end =
			    fmin(isfinite(ie) ? ie : INFINITY, isfinite(ex) ? ex : INFINITY);
			const cJSON *ws = kj_get(g, "warning_s");
			double warn = cJSON_IsNumber(ws) ? ws->valuedouble : 0;
			if (isfinite(end))
				next = fmin(next, fmax(now + 0.2, end - warn));
		}
		cJSON_Delete(g);
		bench_sleep(fmax(0.2, next - wall_s()));
	}
}

/* The lab, admitted: a working student works (activity every --activity s)
 * for the hold, then ends it; a walk-away stops at walk_frac of the hold and
 * leaves the page open. */
static void work(struct student *s, struct bapi *a)
{
	const struct opts *o = s->r->o;
	double until = s->seen + s->hold;
	double stop = s->walks ? s->seen + s->walk_frac * s->hold : until;
	char *path = xasprintf("/api/sessions/%s/activity", s->sid);
	cJSON *empty = jx_obj();
	int lost = 0;
	while (!bench_stop && wall_s() < stop) {
		if (bench_sleep(fmin(o->activity_s, fmax(0, stop - wall_s()))))
			break;
		if (wall_s() >= stop)
			break;
		cJSON *ans = NULL;
		long code = bapi_call(a, "POST", path, empty, &ans);
		cJSON_Delete(ans);
		if (code == 409) {
			/* not ready yet (starting), or ended under a working student */
			cJSON *g;
			const char *st = look(a, s->sid, &g);
			if (st && !active_state(st)) {
				const char *why = kj_str(g, "end_reason");
				s->idle_end = why && strcmp(why, "idle") == 0;
				s->mistake = s->idle_end;
				lost = 1;
			}
			cJSON_Delete(g);
			if (lost)
				break;
		}
	}
	cJSON_Delete(empty);
	free(path);
	s->left = wall_s();
	if (lost)
		return;
	if (s->walks) {
		open_page(s, a);
		end_path(a, s->sid); /* what the run leaves: nothing */
		return;
	}
	end_path(a, s->sid);
}

static void *student_thread(void *arg)
{
	struct student *s = arg;
	const struct opts *o = s->r->o;
	struct bapi a;
	int ok = bapi_init(&a, o->url, s->user, bench_password(o, s->i)) == 0;

	if (ok)
		end_open(&a);
	pthread_barrier_wait(&s->r->bar);
	if (!ok) {
		bench_copy(s->err, sizeof s->err, "client set-up failed");
		return NULL;
	}
	if (!bench_sleep(s->r->t0 + s->offset - wall_s()))
		press_until_admitted(s, &a);
	if (isfinite(s->admitted))
		work(s, &a);
	bapi_cleanup(&a);
	return NULL;
}

static void *sampler(void *arg)
{
	struct crun *r = arg;
	struct cfg kc;
	struct kube k;
	if (bench_kube(r->o, &kc, &k) < 0)
		return NULL;
	while (r->sampling) {
		long n = bench_count_lab_vms(r->o, &k);
		if (n >= 0) {
			r->samples++;
			if (n > r->most)
				r->most = n;
		} else {
			r->sample_failures++;
		}
		struct timespec ts = {0, 200 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	bench_kube_free(&kc, &k);
	return NULL;
}

/* ------------------------------------------------------------- one run */

static int run_mode(struct opts *o, const char *lesson, const struct hold *h, int line, int idle,
                    struct msum *m, cJSON *modes)
{
	int n = o->students;
	struct crun r;
	struct student *st = xcalloc((size_t)n, sizeof *st);
	pthread_t *th = xcalloc((size_t)n, sizeof *th);
	pthread_t samp;
	int have_samp;

	memset(&r, 0, sizeof r);
	r.o = o;
	r.lesson = lesson;
	r.line = line;
	r.idle = idle;
	m->mode = idle == 1 ? "idle-on" : idle == 0 ? "idle-off" : line ? "line" : "retry";
	m->shown = idle == 1   ? "idle ending on"
	           : idle == 0 ? "idle ending off"
	           : line      ? "the line"
	                       : "retry-only";
	pthread_barrier_init(&r.bar, NULL, (unsigned)n + 1);
	for (int i = 0; i < n; i++) {
		struct student *s = &st[i];
		uint64_t x = (uint64_t)o->seed * 1000003ULL + (uint64_t)i;
		s->r = &r;
		s->i = i;
		bench_user(o, i, s->user);
		s->offset = rng_unit(&x) * o->spread_s;
		s->hold = hold_draw(h, &x);
		/* the same students walk away, at the same moments, in every mode */
		s->walks = rng_unit(&x) < o->walkaway;
		s->walk_frac = rng_unit(&x);
		s->left = NAN;
		s->rng = x ^ 0x5eedULL;
		s->pressed = s->admitted = s->seen = s->estimate = s->bound = NAN;
		if (pthread_create(&th[i], NULL, student_thread, s) != 0) {
			fprintf(stderr, "labvm-bench class: cannot start thread %d\n", i);
			abort(); /* the barrier would never open */
		}
	}
	r.sampling = 1;
	have_samp = pthread_create(&samp, NULL, sampler, &r) == 0;
	r.t0 = wall_s() + 1; /* set before the barrier opens: read after it */
	pthread_barrier_wait(&r.bar);
	double t_mono = util_mono_s();
	struct progress p;
	progress_start(&p, m->mode, 0, o->quiet);
	for (int i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		char extra[64];
		snprintf(extra, sizeof extra, "%d of %d students done", i + 1, n);
		progress_show(&p, (size_t)(util_mono_s() - t_mono), extra, 0);
	}
	progress_end(&p);
	r.sampling = 0;
	if (have_samp)
		pthread_join(samp, NULL);
	pthread_barrier_destroy(&r.bar);
	class_summarize(&r, st, n, m);
	jx_push(modes, class_mode_json(m, st, n, r.t0));
	printf("%s: %d of %d students got a lab (%d errors)%s%s, %.0f s\n", m->shown, m->got, n,
	       m->errors, m->errors ? "; first: " : "", m->errors ? m->first_err : "",
	       util_mono_s() - t_mono);
	fflush(stdout);
	free(st);
	free(th);
	return m->errors ? -1 : 0;
}

/* ----------------------------------------------------------------- main */

int cmd_class(struct opts *o)
{
	const char *lesson = o->lesson ? o->lesson : "linux-basics";
	struct hold h;
	int modes[2], nm = 0, rc = 0;
	char hs[64];

	if (!o->url) {
		fprintf(stderr, "labvm-bench class: no --url (or LABVM_URL)\n");
		return 2;
	}
	if (hold_parse(o->hold, &h) < 0)
		return 2;
	int idle_pair = o->idle_lesson != NULL;
	if (idle_pair) {
		/* the same class in line mode, idle ending off then on */
		modes[nm++] = 1;
		modes[nm++] = 1;
	} else if (strcmp(o->mode, "both") == 0) {
		modes[nm++] = 0;
		modes[nm++] = 1;
	} else if (strcmp(o->mode, "retry") == 0) {
		modes[nm++] = 0;
	} else if (strcmp(o->mode, "line") == 0) {
		modes[nm++] = 1;
	} else {
		fprintf(stderr, "labvm-bench class: --mode %s: expected line, retry or both\n",
		        o->mode);
		return 2;
	}
	if (bench_users_load(o) < 0)
		return 2;
	if (o->students > bench_user_count(o)) {
		fprintf(stderr, "labvm-bench class: --students %d but only %d users\n", o->students,
		        bench_user_count(o));
		return 2;
	}
	hold_describe(&h, hs, sizeof hs);
	printf("labvm-bench class: %d students press Start (%s) within %g s, each keeps the lab "
	       "%s, seed %d, against %s\n",
	       o->students, lesson, o->spread_s, hs, o->seed, o->url);
	if (o->walkaway > 0 || idle_pair)
		printf(
		    "walk-aways: %.0f%% of the students stop at a random moment of their hold and "
		    "never come back (the page stays open); working students' activity every %g "
		    "s%s%s\n",
		    o->walkaway * 100, o->activity_s, idle_pair ? "; idle ending on: " : "",
		    idle_pair ? o->idle_lesson : "");
	if (o->capacity)
		printf("seats: %d (expected)\n", o->capacity);
	printf("retry-only: wait %s + 0-%g s, press again; the line: the place polled every %g s\n",
	       o->retry_after_s > 0 ? "--retry-after" : "Retry-After", o->reaction_s,
	       o->place_poll_s);
	fflush(stdout);

	cJSON *root = jx_obj(), *jm;
	jx_add_str(root, "command", "class");
	jx_add_str(root, "url", o->url);
	jx_add_str(root, "lesson", lesson);
	jx_add_num(root, "students", o->students);
	if (o->capacity)
		jx_add_num(root, "capacity", o->capacity);
	else
		jx_add_null(root, "capacity");
	jx_add_str(root, "hold", o->hold);
	jx_add_num(root, "spread_s", o->spread_s);
	jx_add_num(root, "seed", o->seed);
	jx_add_num(root, "poll_s", o->place_poll_s);
	jx_add_num(root, "reaction_s", o->reaction_s);
	if (o->retry_after_s > 0)
		jx_add_num(root, "retry_after_s", o->retry_after_s);
	else
		jx_add_null(root, "retry_after_s");
	jx_add_str(root, "wait",
	           "press (the first POST) to admission (the session's created_at), s; "
	           "percentiles by linear interpolation");
	jx_add_str(root, "out_of_order",
	           "pairs where the later press was admitted first, over all pairs of students "
	           "who got a lab");
	jx_add_str(root, "estimate_error", "admission - the estimate shown on joining, s");
	jm = jx_add_arr(root, "modes");

	struct msum m[2];
	memset(m, 0, sizeof m);
	for (int k = 0; k < nm && !bench_stop; k++)
		if (run_mode(o, idle_pair && k == 1 ? o->idle_lesson : lesson, &h, modes[k],
		             idle_pair ? k : -1, &m[k], jm) < 0)
			rc = 1;
	if (idle_pair && !bench_stop && isfinite(m[0].wait_p95) && m[0].wait_p95 > 0)
		printf(
		    "\nidle ending on: line wait p95 %.1f s vs %.1f s off (%.0f%% lower; target: "
		    "at least 40%% lower); working students ended by mistake: %d (must be 0)\n",
		    m[1].wait_p95, m[0].wait_p95, 100.0 * (1 - m[1].wait_p95 / m[0].wait_p95),
		    m[1].mistakes);
	if (idle_pair) {
		jx_add_str(root, "idle_lesson", o->idle_lesson);
		bench_jnum(root, "walkaway", o->walkaway, 3);
		bench_jnum(root, "activity_s", o->activity_s, 2);
		if (isfinite(m[0].wait_p95) && m[0].wait_p95 > 0)
			bench_jnum(root, "wait_p95_reduction_pct",
			           100.0 * (1 - m[1].wait_p95 / m[0].wait_p95), 1);
		if (m[1].mistakes)
			rc = 1;
	}
	if (!bench_stop)
		class_print_table(m, nm, o);
	printf("\nwait = press -> admission (the session's created_at); out-of-order = pairs where "
	       "the later\npress was admitted first (0: first come, first served); the estimate "
	       "is the one shown\non joining the line. Students, front end, labvm.fcgi and the "
	       "cluster share this\nmachine's cores.\n");
	if (bench_write_figures(o, root) < 0)
		rc = 1;
	cJSON_Delete(root);
	if (bench_stop)
		rc = 130;
	return rc;
}
