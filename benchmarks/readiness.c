/* readiness.c - `labvm-bench readiness`: N students per lesson start a lab
 * through the real HTTP API, at most C at a time, and poll it like the page
 * does until it is ready or failed; then the session is ended.
 *
 * Per session it records the client-side times (request sent -> 201, -> the
 * first poll that saw Running, -> the first poll that saw ready) and the
 * server-side ones (the session's own timestamps minus created_at, the button
 * press on the server), the VMI's own Running transition when the cluster can
 * be read, the disk source and fallback reason, and the failure stage.
 *
 * Lessons are interleaved (job i runs lesson i mod L), so a slow period of
 * the machine hits every lesson alike. A 503 capacity_full is retried (the
 * wait is recorded, not counted in the stage times). Ctrl-C: no new starts,
 * every open session is ended, the partial figures are written. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "jsonx.h"

struct rjob {
	char lesson[64];
	int taken, done;
};

struct rrun {
	struct opts *o;
	pthread_mutex_t mu;
	struct rjob *jobs;
	struct rsample *samples; /* one per job */
	size_t njobs, next;
	/* user pool: indices, least recently used first */
	int *pool;
	int npool, pool_head, pool_len;
	/* progress counters */
	size_t finished, ready, failed, refused, refused_auth, active, busy_users;
	int have_kube;
};

static int pool_take(struct rrun *r)
{
	int u = -1;
	pthread_mutex_lock(&r->mu);
	if (r->pool_len > 0) {
		u = r->pool[r->pool_head];
		r->pool_head = (r->pool_head + 1) % r->npool;
		r->pool_len--;
	}
	pthread_mutex_unlock(&r->mu);
	return u;
}

static void pool_give(struct rrun *r, int u)
{
	pthread_mutex_lock(&r->mu);
	r->pool[(r->pool_head + r->pool_len) % r->npool] = u;
	r->pool_len++;
	pthread_mutex_unlock(&r->mu);
}

static double since_created(const cJSON *s, const char *key, double created)
{
	double t = bench_parse_time(kj_str(s, key));
	return isfinite(t) && isfinite(created) ? t - created : NAN;
}

/* The server side of a sample from the session JSON (the DELETE answer holds
 * every timestamp). */
static void fill_server(struct rsample *x, const cJSON *s)
{
	double created = bench_parse_time(kj_str(s, "created_at"));
	bench_copy(x->created_at, sizeof x->created_at, kj_str(s, "created_at"));
	bench_copy(x->disk_source, sizeof x->disk_source, kj_str(s, "disk.source"));
	/* a pod lesson has no disk: its group is the runtime */
	if (!x->disk_source[0] && kj_str(s, "runtime") && strcmp(kj_str(s, "runtime"), "pod") == 0)
		bench_copy(x->disk_source, sizeof x->disk_source, "pod");
	bench_copy(x->fallback_reason, sizeof x->fallback_reason,
	           kj_str(s, "disk.fallback_reason"));
	x->s_submitted = since_created(s, "submitted_at", created);
	x->s_running = since_created(s, "running_at", created);
	x->s_ready = since_created(s, "ready_at", created);
	if (kj_str(s, "state") && strcmp(kj_str(s, "state"), "failed") == 0)
		x->s_failed = since_created(s, "ended_at", created);
	if (kj_str(s, "error"))
		bench_copy(x->error, sizeof x->error, kj_str(s, "error"));
}

/* The VMI's own Running transition (cluster clock), relative to created_at. */
static double vmi_running(struct rrun *r, struct kube *k, const char *vm, const char *created_at)
{
	char *path = kube_path("virtualmachineinstances", r->o->namespace_, vm);
	cJSON *vmi = NULL;
	double t = NAN;
	if (kube_get(k, path, &vmi) == 200) {
		const cJSON *pt = kj_get(vmi, "status.phaseTransitionTimestamps");
		const cJSON *e;
		cJSON_ArrayForEach(e, pt)
		{
			const char *ph = kj_str(e, "phase");
			if (ph && strcmp(ph, "Running") == 0)
				t = bench_parse_time(kj_str(e, "phaseTransitionTimestamp"));
		}
	}
	cJSON_Delete(vmi);
	free(path);
	return t - bench_parse_time(created_at);
}

/* "VMI phase Running, ip 10.0.0.7" for a session that never got ready */
static void vmi_summary(struct rrun *r, struct kube *k, const char *vm, char *out, size_t n)
{
	char *path = kube_path("virtualmachineinstances", r->o->namespace_, vm);
	cJSON *vmi = NULL;
	long code = kube_get(k, path, &vmi);
	if (code == 200)
		snprintf(out, n, "VMI phase %.20s, ip %.40s",
		         kj_str(vmi, "status.phase") ? kj_str(vmi, "status.phase") : "none",
		         kj_str(vmi, "status.interfaces.0.ipAddress")
		             ? kj_str(vmi, "status.interfaces.0.ipAddress")
		             : "none");
	else
		snprintf(out, n, "VMI: HTTP %ld", code);
	cJSON_Delete(vmi);
	free(path);
}

static void end_session(struct bapi *a, const char *sid, cJSON **final)
{
	char *path = xasprintf("/api/sessions/%s", sid);
	for (int i = 0; i < 5; i++) {
		cJSON *o = NULL;
		long code = bapi_call(a, "DELETE", path, NULL, &o);
		if (code == 200) {
			if (final) {
				cJSON_Delete(*final);
				*final = o;
			} else {
				cJSON_Delete(o);
			}
			break;
		}
		cJSON_Delete(o);
		fprintf(stderr, "labvm-bench: ending session %s: %s (retrying)\n", sid,
		        code ? "HTTP error" : a->msg);
		struct timespec ts = {1, 0};
		nanosleep(&ts, NULL); /* not interruptible: this is the cleanup */
	}
	free(path);
}

/* 0 done (the sample says how), 1 the user has an open session of its own
 * (someone else's lab, or a leftover): not touched, take another user */
static int run_job(struct rrun *r, size_t j, int uidx, struct kube *k)
{
	struct opts *o = r->o;
	struct rsample *x = &r->samples[j];
	struct bapi a;
	cJSON *body = jx_obj(), *s = NULL, *last = NULL;
	char sid[40] = "", vm[80] = "";
	double t_req = 0, t_first = util_mono_s();
	long code = 0;
	int busy = 0;

	bench_user(o, uidx, x->user);
	bench_copy(x->lesson, sizeof x->lesson, r->jobs[j].lesson);
	jx_add_str(body, "lesson", x->lesson);
	if (bapi_init(&a, o->url, x->user, bench_password(o, uidx)) < 0) {
		bench_copy(x->start_error, sizeof x->start_error, "client_error");
		cJSON_Delete(body);
		return 0;
	}
	if (o->end_existing) {
		cJSON *cur = NULL;
		if (bapi_call(&a, "GET", "/api/sessions/current", NULL, &cur) == 200 &&
		    kj_str(cur, "id"))
			end_session(&a, kj_str(cur, "id"), NULL);
		cJSON_Delete(cur);
	}

	/* admission: retried while the cluster is full */
	for (;;) {
		t_req = util_mono_s();
		cJSON_Delete(s);
		s = NULL;
		code = bapi_call(&a, "POST", "/api/sessions", body, &s);
		x->http_status = (int)code;
		if (code == 201)
			break;
		const char *err = code ? bapi_error_code(s) : "unreachable";
		bench_copy(x->start_error, sizeof x->start_error, err);
		if (code == 503 && strcmp(err, "capacity_full") == 0 && !bench_stop &&
		    util_mono_s() - t_first < o->admission_timeout_s) {
			double w = o->retry_wait_s;
			if (a.retry_after > 0 && a.retry_after < w)
				w = (double)a.retry_after;
			x->admission_retries++;
			if (bench_sleep(w))
				break;
			continue;
		}
		break;
	}
	x->admission_wait_s = t_req - t_first;
	if (code == 409 && strcmp(bapi_error_code(s), "session_exists") == 0 && !o->end_existing) {
		busy = 1;
		goto out;
	}
	if (code != 201 || !kj_str(s, "id")) {
		if (code == 201)
			bench_copy(x->start_error, sizeof x->start_error, "no_session_id");
		if (!code)
			bench_copy(x->error, sizeof x->error, a.msg);
		pthread_mutex_lock(&r->mu);
		r->refused++;
		if (code == 401 || code == 403)
			r->refused_auth++;
		pthread_mutex_unlock(&r->mu);
		goto out;
	}
	x->start_error[0] = '\0';
	x->c_submitted = util_mono_s() - t_req;
	x->post_app_ms = a.st_app_ms;
	bench_copy(sid, sizeof sid, kj_str(s, "id"));
	bench_copy(vm, sizeof vm, kj_str(s, "vms.0.name"));
	bench_copy(x->session_id, sizeof x->session_id, sid);
	fill_server(x, s);
	last = s;
	s = NULL;

	/* poll like the page: the GET advances readiness on the server */
	char *path = xasprintf("/api/sessions/%s", sid);
	const char *state = "starting";
	while (!bench_stop) {
		if (bench_sleep(o->poll_s))
			break;
		cJSON *g = NULL;
		code = bapi_call(&a, "GET", path, NULL, &g);
		double t = util_mono_s() - t_req;
		x->polls++;
		if (code != 200 || !kj_str(g, "state")) {
			cJSON_Delete(g);
			if (t > o->timeout_s)
				break;
			continue; /* a hiccup of the front end: the page would poll again */
		}
		cJSON_Delete(last);
		last = g;
		state = kj_str(g, "state");
		if (kj_str(g, "running_at") && !isfinite(x->c_running)) {
			x->c_running = t;
			/* a Pod has no VMI: its cluster-side time is not measured */
			if (k && vm[0] &&
			    !(kj_str(g, "runtime") && strcmp(kj_str(g, "runtime"), "pod") == 0))
				x->k_running = vmi_running(r, k, vm, kj_str(g, "created_at"));
		}
		if (strcmp(state, "ready") == 0) {
			x->c_ready = t;
			break;
		}
		if (strcmp(state, "failed") == 0) {
			x->c_failed = t;
			break;
		}
		if (strcmp(state, "ended") == 0)
			break;
		if (t > o->timeout_s)
			break;
	}
	free(path);
	const char *st = kj_str(last, "state");
	if (st && strcmp(st, "starting") == 0)
		bench_copy(x->state, sizeof x->state, bench_stop ? "interrupted" : "timeout");
	else
		bench_copy(x->state, sizeof x->state, st);
	bench_copy(x->stage, sizeof x->stage, kj_str(last, "stage"));
	if (strcmp(x->state, "timeout") == 0) {
		char why[160] = "";
		if (k && vm[0])
			vmi_summary(r, k, vm, why, sizeof why);
		snprintf(x->error, sizeof x->error, "labvm-bench: not ready after %.0f s%s%s",
		         o->timeout_s, why[0] ? "; " : "", why);
	}

	/* end it; the answer carries every timestamp */
	end_session(&a, sid, &last);
	fill_server(x, last);
	bench_copy(x->end_reason, sizeof x->end_reason, kj_str(last, "end_reason"));
	pthread_mutex_lock(&r->mu);
	if (strcmp(x->state, "ready") == 0)
		r->ready++;
	else if (strcmp(x->state, "failed") == 0)
		r->failed++;
	pthread_mutex_unlock(&r->mu);
out:
	cJSON_Delete(last);
	cJSON_Delete(s);
	cJSON_Delete(body);
	bapi_cleanup(&a);
	return busy;
}

static void *worker(void *arg)
{
	struct rrun *r = arg;
	struct cfg kc;
	struct kube k;
	int have_kube = r->have_kube && bench_kube(r->o, &kc, &k) == 0;

	while (!bench_stop) {
		pthread_mutex_lock(&r->mu);
		size_t j = r->next < r->njobs ? r->next++ : r->njobs;
		if (j < r->njobs) {
			r->jobs[j].taken = 1;
			r->active++;
		}
		pthread_mutex_unlock(&r->mu);
		if (j >= r->njobs)
			break;
		for (;;) {
			int u = pool_take(r);
			if (u < 0 && !bench_stop) {
				/* the others hold the rest: wait for one to come back */
				pthread_mutex_lock(&r->mu);
				int others = r->active > 1;
				pthread_mutex_unlock(&r->mu);
				if (others && !bench_sleep(0.2))
					continue;
			}
			if (u < 0) { /* every user left has a session of its own */
				struct rsample *x = &r->samples[j];
				bench_copy(x->lesson, sizeof x->lesson, r->jobs[j].lesson);
				bench_copy(x->start_error, sizeof x->start_error, "no_free_user");
				pthread_mutex_lock(&r->mu);
				r->refused++;
				pthread_mutex_unlock(&r->mu);
				break;
			}
			rsample_init(&r->samples[j], (int)j);
			if (run_job(r, j, u, have_kube ? &k : NULL) == 0) {
				pool_give(r, u);
				break;
			}
			/* not given back: its owner's session stays as it is */
			pthread_mutex_lock(&r->mu);
			r->busy_users++;
			pthread_mutex_unlock(&r->mu);
			fprintf(stderr,
			        "\nlabvm-bench: %s has an open session of its own: not "
			        "touched, another user takes over\n",
			        r->samples[j].user);
		}
		pthread_mutex_lock(&r->mu);
		r->jobs[j].done = 1;
		r->active--;
		r->finished++;
		pthread_mutex_unlock(&r->mu);
	}
	if (have_kube)
		bench_kube_free(&kc, &k);
	return NULL;
}

static void describe(struct opts *o, struct rset *rs, const char *profile, double scale,
                     const char *when, double secs)
{
	cJSON *m = jx_obj();
	struct buf d = {0};
	jx_add_str(m, "command", "readiness");
	jx_add_str(m, "url", o->url);
	cJSON *ls = jx_add_arr(m, "lessons");
	for (int i = 0; i < o->nlessons; i++)
		jx_push_str(ls, o->lessons[i]);
	jx_add_num(m, "n_per_lesson", o->n);
	jx_add_num(m, "concurrency", o->concurrency);
	jx_add_num(m, "poll_s", o->poll_s);
	jx_add_str(m, "profile", profile);
	if (isfinite(scale))
		jx_add_num(m, "time_scale", scale);
	else
		jx_add_null(m, "time_scale");
	jx_add_str(m, "when", when);
	jx_add_num(m, "duration_s", round(secs * 10) / 10);
	jx_add_bool(m, "interrupted", bench_stop != 0);
	buf_printf(&d, "readiness: %d x (", o->n);
	for (int i = 0; i < o->nlessons; i++)
		buf_printf(&d, "%s%s", i ? ", " : "", o->lessons[i]);
	buf_printf(&d, "), concurrency %d, poll %.2g s; ", o->concurrency, o->poll_s);
	if (isfinite(scale))
		buf_printf(&d, "simulator profile %s, time scale %g", profile, scale);
	else
		buf_printf(&d, "cluster: %s", profile);
	jx_add_str(m, "description", d.p);
	buf_free(&d);
	rs->meta = m;
}

int cmd_readiness(struct opts *o)
{
	struct rrun r;
	struct rset rs;
	char prev_profile[32] = "", profile[64] = "unknown (not a simulator, or no cluster access)";
	double prev_scale = NAN, scale = NAN;
	struct cfg kc;
	struct kube k;
	int have_kube, rc = 0;
	char when[32];

	memset(&r, 0, sizeof r);
	memset(&rs, 0, sizeof rs);
	if (!o->url) {
		fprintf(stderr, "labvm-bench readiness: no --url (or LABVM_URL)\n");
		return 2;
	}
	if (!o->nlessons) {
		o->lessons = xmalloc(sizeof *o->lessons);
		o->lessons[0] = xstrdup("debian-golden");
		o->nlessons = 1;
	}
	if (bench_users_load(o) < 0)
		return 2;
	if (o->concurrency > bench_user_count(o)) {
		fprintf(stderr,
		        "labvm-bench readiness: --concurrency %d needs as many users (%d)\n",
		        o->concurrency, bench_user_count(o));
		return 2;
	}

	have_kube = bench_kube(o, &kc, &k) == 0;
	if (!have_kube && o->sim_profile) {
		fprintf(stderr, "labvm-bench readiness: --sim-profile needs --kube-url, "
		                "--kube-token-file and --kube-ca (the simulator's admin token)\n");
		return 2;
	}
	if (have_kube) {
		if (bench_sim_profile(&k, NULL, 0, prev_profile, sizeof prev_profile,
		                      &prev_scale) == 0) {
			snprintf(profile, sizeof profile, "%s", prev_profile);
			scale = prev_scale;
		} else {
			snprintf(profile, sizeof profile, "a real cluster (no /_sim/profile)");
		}
		if (o->sim_profile) {
			if (bench_sim_profile(&k, o->sim_profile, o->sim_time_scale, profile,
			                      sizeof profile, &scale) < 0) {
				fprintf(stderr,
				        "labvm-bench readiness: setting the simulator profile "
				        "failed: %s\n",
				        k.msg[0] ? k.msg : "not a simulator?");
				bench_kube_free(&kc, &k);
				return 1;
			}
		}
	}

	if (o->pool > 0) {
		/* the warm pool beside cold starts (poolbench.c) */
		rc = bench_pool_run(o, have_kube ? &k : NULL, profile);
		if (have_kube && o->sim_profile && prev_profile[0])
			bench_sim_profile(&k, prev_profile, prev_scale, NULL, 0, NULL);
		if (have_kube)
			bench_kube_free(&kc, &k);
		return rc;
	}
	r.o = o;
	r.have_kube = have_kube;
	pthread_mutex_init(&r.mu, NULL);
	r.njobs = (size_t)o->n * (size_t)o->nlessons;
	r.jobs = xcalloc(r.njobs, sizeof *r.jobs);
	r.samples = xcalloc(r.njobs, sizeof *r.samples);
	for (size_t j = 0; j < r.njobs; j++)
		bench_copy(r.jobs[j].lesson, sizeof r.jobs[j].lesson,
		           o->lessons[j % (size_t)o->nlessons]);
	r.npool = bench_user_count(o);
	r.pool = xcalloc((size_t)r.npool, sizeof *r.pool);
	for (int i = 0; i < r.npool; i++)
		r.pool[i] = i;
	r.pool_len = r.npool;

	int nthreads = o->concurrency < (int)r.njobs ? o->concurrency : (int)r.njobs;
	pthread_t *th = xcalloc((size_t)nthreads, sizeof *th);
	double t0 = util_mono_s();
	bench_fmt_time((double)time(NULL), when);
	printf("labvm-bench readiness: %zu sessions (%d per lesson: ", r.njobs, o->n);
	for (int i = 0; i < o->nlessons; i++)
		printf("%s%s", i ? ", " : "", o->lessons[i]);
	printf("), concurrency %d, poll %.2g s, against %s\n", nthreads, o->poll_s, o->url);
	if (!have_kube)
		printf("cluster: no read access (no cluster-side Running times)\n");
	else if (isfinite(scale))
		printf("cluster: simulator profile %s, time scale %g\n", profile, scale);
	else
		printf("cluster: %s\n", profile);
	fflush(stdout);

	for (size_t j = 0; j < r.njobs; j++)
		rsample_init(&r.samples[j], (int)j);
	int started = 0;
	for (int i = 0; i < nthreads; i++)
		if (pthread_create(&th[i], NULL, worker, &r) == 0)
			started++;
		else
			break;
	struct progress p;
	progress_start(&p, "readiness", r.njobs, o->quiet);
	for (;;) {
		char extra[160];
		pthread_mutex_lock(&r.mu);
		size_t fin = r.finished, act = r.active;
		snprintf(extra, sizeof extra, "%zu in flight, %zu ready, %zu failed, %zu refused",
		         act, r.ready, r.failed, r.refused);
		int all = fin == r.njobs || (bench_stop && act == 0);
		pthread_mutex_unlock(&r.mu);
		progress_show(&p, fin, extra, all);
		if (all)
			break;
		struct timespec ts = {0, 200 * 1000000L};
		nanosleep(&ts, NULL);
	}
	for (int i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	progress_end(&p);
	double secs = util_mono_s() - t0;

	if (have_kube && o->sim_profile && prev_profile[0])
		bench_sim_profile(&k, prev_profile, prev_scale, NULL, 0, NULL);
	if (have_kube)
		bench_kube_free(&kc, &k);

	for (size_t j = 0; j < r.njobs; j++) {
		if (!r.jobs[j].done)
			continue;
		struct rsample *d = rset_add(&rs);
		*d = r.samples[j];
	}
	describe(o, &rs, profile, scale, when, secs);
	rset_summarize(&rs);
	printf("\n%s\n%zu sessions in %.1f s. Times in seconds: server = the session's own "
	       "timestamps from the\nbutton press (created_at); running/ready are set by the poll "
	       "that saw them (poll %.2g s).\ncluster = the VMI's Running transition; client = "
	       "labvm-bench's clock from sending the POST.\nPercentiles by linear interpolation; "
	       "stdev is the sample standard deviation.\n",
	       kj_str(rs.meta, "description"), rs.n, secs, o->poll_s);
	rset_print(&rs, stdout, 1);
	if (r.busy_users)
		printf("\n%zu user(s) skipped: they had an open session of their own (not touched; "
		       "--end-existing ends them)\n",
		       r.busy_users);
	if (r.refused) {
		printf("\n%zu start(s) refused: not measured%s\n", r.refused,
		       r.refused_auth ? " (401/403: check the user names and the password)" : "");
		rc = 1;
	}
	if (rset_write(&rs, o->out_dir, o->name, "labvm readiness") < 0)
		rc = 1;
	if (rs.order_violations)
		rc = 1;
	if (bench_stop)
		rc = 130;
	rset_free(&rs);
	free(th);
	free(r.jobs);
	free(r.samples);
	free(r.pool);
	pthread_mutex_destroy(&r.mu);
	return rc;
}
