/* canary.c - labvm-doctor's check 6: two canary labs end to end (issue #31).
 *
 * Two sessions of a small built-in lesson (canary_lesson.c) start at once
 * in environment "<environment>-doctor": labels, Secrets, session rows and
 * deadlines are labvm's own, so the reaper of every other environment
 * leaves them alone and a reaper of that environment reaps them. Each is
 * made as a press makes one (core/provision.c's plan, session_create(),
 * provision() under the capacity lock, session_advance() to ready) and
 *   - reaches ready: its VMI Running, then the agent's ready flag;
 *   - opens its console through labvm-console itself: a ticket signed with
 *     ticket_key_file (the key labvm.fcgi signs with and the bridge checks)
 *     for the session's user, sent straight to the bridge as the front end
 *     sends it (the Forwarded remote_user); the shell answers a sum;
 *   - runs the lesson's grader step through the agent, as a grade does;
 *   - tries the fence from inside (the probe, a lab file): the other
 *     canary's agent, the API server and the backend Pod must not answer,
 *     the internet should;
 *   - is ended (end reason "user", a student's End) and reclaimed: nothing left.
 * Each stage is timed and the times printed. Whatever fails, both are ended. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "canary.h"
#include "jsonx.h"
#include "locks.h"
#include "log.h"
#include "provision.h"
#include "queue.h"
#include "session.h"
#include "session_change.h"
#include "ticket.h"
#include "util.h"

#define NCANARY 2

/* SIGINT, SIGTERM (a Job's activeDeadlineSeconds, ^C): stop waiting and end
 * the canaries (canary_console.c defines the flag benchmarks/ws.c reads). */
extern volatile sig_atomic_t bench_stop;
static void on_stop(int sig)
{
	(void)sig;
	bench_stop = 1;
}

struct canary {
	int n; /* 1, 2 */
	char user[32];
	char sid[37];
	char vm[64];
	char ip[64];
	int started, ready, ended, reclaimed;
	double t_press, t_submitted, t_running, t_ready, t_end; /* monotonic seconds */
	double d_console, d_grade, d_fence, d_end;              /* durations, -1: it failed */
	char err[1200];
};

struct run {
	struct doc *d;
	struct cfg cc; /* the doctor's environment's config */
	struct lessons ls;
	struct labctx x;
	const struct runtime_ops *rt;
	struct canary c[NCANARY];
	int signals; /* on_stop() installed */
	struct sigaction old_int, old_term;
};

static double now_epoch(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One canary's start, as a press: the plan, the row and the objects in one
 * transaction under the capacity lock. 0, or -1 with c->err. */
static int canary_start(struct run *r, struct canary *c)
{
	struct labctx *x = &r->x;
	struct lab_plan p;
	char why[1024];
	int rc = -1;

	lab_plan_init(&p, &r->ls.v[0]);
	c->t_press = util_mono_s();
	if (util_uuid4(c->sid) < 0 || lab_plan_name(&p, c->sid) < 0) {
		snprintf(c->err, sizeof c->err, "no randomness available");
		goto out;
	}
	lab_plan_disks(x, &p, "labvm-doctor");
	/* the start's discipline: the seats counted in the cluster under the
	 * capacity lock, waited for at most capacity_lock_timeout_ms */
	const char *pk[1] = {p.rt->capacity_key};
	char lt[64];
	snprintf(lt, sizeof lt, "SET LOCAL lock_timeout = %d", x->cfg->capacity_lock_timeout_ms);
	if (db_begin(&x->db) < 0 || db_cmd(&x->db, lt, 0, NULL) < 0 ||
	    db_cmd(&x->db, "SELECT pg_advisory_xact_lock(" LOCK_CAPACITY ", $1::int)", 1, pk) < 0) {
		snprintf(c->err, sizeof c->err, "the capacity lock: %s", x->db.msg);
		goto out;
	}
	long in_use = 0, code = lab_count(x, p.rt, &in_use);
	if (code != 200 || in_use + 1 > p.rt->capacity(x->cfg)) {
		if (code != 200)
			snprintf(c->err, sizeof c->err,
			         "the lab VMs could not be counted (HTTP %ld: %s)", code,
			         x->kube.msg);
		else
			snprintf(c->err, sizeof c->err, "vm_capacity %d is full (%ld in use)",
			         p.rt->capacity(x->cfg), in_use);
		goto out;
	}
	if (session_create(x, &p, c->user, now_epoch()) < 0) {
		snprintf(c->err, sizeof c->err, "the database: %s", x->db.msg);
		goto out;
	}
	if (provision(x, &p, why, sizeof why) < 0) {
		snprintf(c->err, sizeof c->err, "its VM could not be created: %s", why);
		goto out;
	}
	if (session_mark_submitted(x, c->sid) < 0 || db_commit(&x->db) < 0) {
		snprintf(c->err, sizeof c->err, "the database: %s", x->db.msg);
		goto out;
	}
	p.created = 0;
	snprintf(c->vm, sizeof c->vm, "%s", p.vms[0].names.vm);
	c->started = 1;
	c->t_submitted = util_mono_s();
	rc = 0;
out:
	if (rc < 0) {
		if (p.created)
			provision_undo(x, &p);
		db_rollback(&x->db);
	}
	lab_plan_free(&p);
	return rc;
}

/* Move every started canary on until each is ready or failed, or the
 * lesson's two deadlines (and a margin) have passed. */
static void canary_wait_ready(struct run *r)
{
	const struct lesson *l = &r->ls.v[0];
	double end = util_mono_s() + l->running_timeout_s + l->ready_timeout_s + 15;
	for (;;) {
		int waiting = 0;
		for (int i = 0; i < NCANARY; i++) {
			struct canary *c = &r->c[i];
			struct session s;
			if (!c->started || c->ready || c->err[0])
				continue;
			if (session_load(&r->x, c->sid, &s) != SESSION_FOUND) {
				snprintf(c->err, sizeof c->err,
				         "its session row could not be read: %s", r->x.db.msg);
				continue;
			}
			session_advance(&r->x, &s);
			if (s.running_at && !c->t_running)
				c->t_running = util_mono_s();
			if (s.state == SESSION_READY) {
				c->ready = 1;
				c->t_ready = util_mono_s();
				if (!c->t_running)
					c->t_running = c->t_ready;
				if (s.nvms && s.vms[0].ip)
					snprintf(c->ip, sizeof c->ip, "%s", s.vms[0].ip);
			} else if (s.state == SESSION_FAILED || s.state == SESSION_ENDED) {
				snprintf(c->err, sizeof c->err, "it %s at stage %s: %s",
				         s.state == SESSION_FAILED ? "failed" : "ended",
				         session_stage_str(s.stage),
				         s.error ? s.error : "no error given");
			} else {
				waiting = 1;
			}
			session_free(&s);
		}
		if (!waiting)
			return;
		if (bench_stop) {
			for (int i = 0; i < NCANARY; i++)
				if (r->c[i].started && !r->c[i].ready && !r->c[i].err[0])
					snprintf(
					    r->c[i].err, sizeof r->c[i].err,
					    "interrupted (SIGINT or SIGTERM) while it started");
			return;
		}
		if (util_mono_s() > end) {
			for (int i = 0; i < NCANARY; i++)
				if (r->c[i].started && !r->c[i].ready && !r->c[i].err[0])
					snprintf(r->c[i].err, sizeof r->c[i].err,
					         "not ready within %d s (running_timeout_s %d, "
					         "ready_timeout_s %d)",
					         l->running_timeout_s + l->ready_timeout_s + 15,
					         l->running_timeout_s, l->ready_timeout_s);
			return;
		}
		usleep(100 * 1000);
	}
}

/* The canary's session, loaded, with its machine's agent address read from
 * its VMI now (the runtime's agent_at). 0, or -1 with why. */
static int canary_inside(struct run *r, struct canary *c, struct session *s, char *why, size_t n)
{
	int checked = 0;
	if (session_load(&r->x, c->sid, s) != SESSION_FOUND) {
		snprintf(why, n, "its session row could not be read");
		return -1;
	}
	if (!s->nvms || r->rt->agent_at(&r->x, s, &s->vms[0], &checked, why, n) < 0) {
		if (!s->nvms)
			snprintf(why, n, "it has no machine");
		session_free(s);
		return -1;
	}
	snprintf(c->ip, sizeof c->ip, "%s", s->vms[0].ip);
	return 0;
}

/* A command in the canary's guest through its agent (the grader's path).
 * The agent's answer in *res, 0; -1 with why. */
static int canary_run(struct run *r, struct canary *c, const char *cmd, int timeout_s, cJSON **res,
                      char *why, size_t n)
{
	struct session s;
	if (canary_inside(r, c, &s, why, n) < 0)
		return -1;
	int rc = agent_run(&r->x.agent, s.vms[0].ip, r->cc.agent_port, s.vms[0].token, cmd,
	                   timeout_s, (timeout_s + 5) * 1000L, res);
	if (rc < 0)
		snprintf(why, n, "its agent at %s:%d: %s", s.vms[0].ip, r->cc.agent_port,
		         r->x.agent.msg);
	session_free(&s);
	return rc;
}

static void canary_grade(struct run *r, struct canary *c)
{
	struct doc *d = r->d;
	const struct grader_step *gs = &r->ls.v[0].steps[0];
	cJSON *res = NULL;
	char why[600];
	double t = util_mono_s();
	c->d_grade = -1;
	if (canary_run(r, c, gs->command, 10, &res, why, sizeof why) < 0) {
		doc_line(d, DOC_FAIL,
		         "the backend must reach the labs' agents on agent_port: the policy "
		         "labvm-lab-vms admits the backend's Pod (conf/k8s/networkpolicy.yaml)",
		         "canary %d's grader step could not run: %s", c->n, why);
	} else {
		const cJSON *ec = cJSON_GetObjectItemCaseSensitive(res, "exit_code");
		if (cJSON_IsNumber(ec) && ec->valueint == 0)
			c->d_grade = util_mono_s() - t;
		else
			doc_line(
			    d, DOC_FAIL,
			    "the guest image must run cloud-init's runcmd and python3 (the agent)",
			    "canary %d's grader step \"%s\" failed (exit %d): %s", c->n, gs->name,
			    cJSON_IsNumber(ec) ? ec->valueint : -1,
			    kj_str(res, "stderr") ? kj_str(res, "stderr") : "");
	}
	cJSON_Delete(res);
}

/* End the canary as the student's End does; canary_reclaim() then waits
 * until no object with its session id is left: the VM, its VMI, the
 * launcher Pod, the Secret. */
static void canary_end(struct run *r, struct canary *c)
{
	struct labctx *x = &r->x;
	struct session s;
	c->t_end = util_mono_s();
	if (!c->started || c->ended)
		return;
	c->ended = 1;
	if (session_load(x, c->sid, &s) == SESSION_FOUND) {
		if (session_active(&s))
			session_finish(x, &s, SESSION_ENDED, "user", NULL);
		session_free(&s);
	}
	/* no row to end (the database went away): its objects stay for the next
	 * run's sweep, or a reaper of this environment */
}

/* Wait until no object with its session id is left (60 s at most). */
static void canary_reclaim(struct run *r, struct canary *c)
{
	struct labctx *x = &r->x;
	double t = c->t_end;
	if (!c->started)
		return;
	char sel[200];
	snprintf(sel, sizeof sel, "%s=%s", r->cc.label.session_id, c->sid);
	static const char *const kinds[] = {"virtualmachines", "virtualmachineinstances", "pods",
	                                    "secrets"};
	double end = util_mono_s() + 60;
	for (;;) {
		long left = 0, code = 200;
		for (size_t k = 0; k < sizeof kinds / sizeof kinds[0] && code == 200; k++) {
			char *path = kube_path(kinds[k], r->cc.namespace_, NULL);
			long n = 0;
			code = kube_count(&x->kube, path, sel, &n);
			left += n;
			free(path);
		}
		if (code == 200 && left == 0) {
			c->reclaimed = 1;
			c->d_end = util_mono_s() - t;
			return;
		}
		if (util_mono_s() > end) {
			if (code != 200)
				snprintf(
				    c->err, sizeof c->err,
				    "whether its objects are gone could not be read (HTTP %ld: %s)",
				    code, x->kube.msg);
			else
				snprintf(c->err, sizeof c->err,
				         "%ld of its objects (%s) were still in the cluster 60 s "
				         "after its "
				         "end",
				         left, sel);
			return;
		}
		usleep(100 * 1000);
	}
}

static void fmt_s(char *out, size_t n, double s)
{
	if (s < 0)
		snprintf(out, n, "FAILED");
	else
		snprintf(out, n, s < 10 ? "%.1f s" : "%.0f s", s);
}

static void canary_times(struct run *r, struct canary *c)
{
	char a[16], b[16], e[16], f[16], g[16], h[16], k[16];
	fmt_s(a, sizeof a, c->t_submitted - c->t_press);
	fmt_s(b, sizeof b, c->t_running - c->t_submitted);
	fmt_s(e, sizeof e, c->t_ready - c->t_running);
	fmt_s(f, sizeof f, c->d_console);
	fmt_s(g, sizeof g, c->d_grade);
	fmt_s(h, sizeof h, c->d_fence);
	fmt_s(k, sizeof k, c->d_end);
	doc_line(r->d, DOC_OK, NULL,
	         "canary %d (session %.8s, VM %s on %s): submitted %s, VMI Running %s later, "
	         "agent ready %s later, console %s, grader %s, fence %s, ended and reclaimed %s",
	         c->n, c->sid, c->vm, r->cc.environment, a, b, e, f, g, h, k);
}

/* Both probes at once, each from its own thread with its own agent client
 * (a dropped connection costs the probe's whole timeout: run one after the
 * other, the fence would take twice as long). The addresses and tokens are
 * read first, in this thread, as every agent call reads them. */
struct fence_job {
	struct agent a;
	struct session s;
	int loaded;
	int port;
	char *cmd;
	int rc;
	cJSON *res;
	double took;
};

static void *fence_thread(void *arg)
{
	struct fence_job *j = arg;
	double t = util_mono_s();
	j->rc = agent_run(&j->a, j->s.vms[0].ip, j->port, j->s.vms[0].token, j->cmd, 15, 20 * 1000L,
	                  &j->res);
	j->took = util_mono_s() - t;
	return NULL;
}

static void canary_fences(struct run *r)
{
	struct doc *d = r->d;
	struct fence_job j[NCANARY];
	pthread_t th[NCANARY];
	int started[NCANARY] = {0};
	char why[NCANARY][600];

	memset(j, 0, sizeof j);
	for (int i = 0; i < NCANARY; i++) {
		struct canary *c = &r->c[i], *o = &r->c[1 - i];
		why[i][0] = '\0';
		j[i].rc = -1;
		j[i].port = r->cc.agent_port;
		if (agent_init(&j[i].a) < 0) {
			snprintf(why[i], sizeof why[i], "no HTTP client");
			continue;
		}
		if (canary_inside(r, c, &j[i].s, why[i], sizeof why[i]) < 0)
			continue;
		j[i].loaded = 1;
		j[i].cmd = canary_probe_cmd(d, &r->x, &r->cc, o->ip);
		started[i] = pthread_create(&th[i], NULL, fence_thread, &j[i]) == 0;
		if (!started[i])
			snprintf(why[i], sizeof why[i], "no thread for its probe");
	}
	for (int i = 0; i < NCANARY; i++) {
		struct canary *c = &r->c[i], *o = &r->c[1 - i];
		if (started[i])
			pthread_join(th[i], NULL);
		if (started[i] && j[i].rc < 0)
			snprintf(why[i], sizeof why[i], "its agent at %s:%d: %s", j[i].s.vms[0].ip,
			         j[i].port, j[i].a.msg);
		if (!started[i] || j[i].rc < 0) {
			doc_line(d, DOC_FAIL, "the backend must reach the labs' agents",
			         "canary %d could not try the fence: %s", c->n, why[i]);
			c->d_fence = -1;
		} else {
			c->d_fence = canary_fence(d, c->n, o->n, j[i].res) == 0 ? j[i].took : -1;
		}
		cJSON_Delete(j[i].res);
		free(j[i].cmd);
		if (j[i].loaded)
			session_free(&j[i].s);
		agent_cleanup(&j[i].a);
	}
}

/* The environment's name for the canaries: "<environment>-doctor" (a label
 * value: at most 63 bytes). */
static int doctor_env(const char *env, char *out, size_t n)
{
	int len = snprintf(out, n, "%s-doctor", env);
	return len > 0 && (size_t)len < n && len <= 63 ? 0 : -1;
}

void check_canary(struct doc *d)
{
	static struct run R;
	struct run *r = &R;
	char err[1024], env[80];

	if (!d->canary) {
		doc_line(d, DOC_WARN, NULL,
		         "skipped (--no-canary): a lab's start, console and grading and the fence "
		         "between labs are not tried end to end");
		return;
	}
	if (doc_api(d) != 1) {
		doc_line(d, DOC_WARN, "fix the credentials first (check 1)",
		         "not run: the API server cannot be used (%s)", d->api_why);
		return;
	}
	if (!doc_need_vms(d) && d->have_lessons) {
		doc_line(d, DOC_WARN, NULL,
		         "not run: no lesson is a VM lesson (the canary is a VM)");
		return;
	}
	memset(r, 0, sizeof *r);
	r->d = d;
	/* the same file with the ticket key, for the doctor's environment */
	if (cfg_load(d->conf_path, &r->cc, CFG_NEED_TICKET_KEY, err, sizeof err) < 0) {
		doc_line(
		    d, DOC_FAIL,
		    "ticket_key_file must be readable by labvm-doctor: the key labvm.fcgi signs "
		    "console tickets with and labvm-console checks them with",
		    "not run: %s", err);
		return;
	}
	if (doctor_env(r->cc.environment, env, sizeof env) < 0) {
		doc_line(d, DOC_FAIL, "a shorter environment name (at most 56 bytes)",
		         "not run: environment \"%s\" + \"-doctor\" is not a label value",
		         r->cc.environment);
		cfg_free(&r->cc);
		return;
	}
	/* cfg_load set the config's log level: core's info lines (a session
	 * ended, its objects deleted) are the doctor's own lines here */
	log_set_level(LOG_WARN);
	free(r->cc.environment);
	r->cc.environment = xstrdup(env);
	if (canary_lesson(d, &r->ls, err, sizeof err) < 0) {
		doc_line(d, DOC_FAIL, "report this as a bug of labvm-doctor",
		         "not run: the built-in canary lesson: %s", err);
		cfg_free(&r->cc);
		return;
	}
	r->rt = runtime_of(r->ls.v[0].runtime);
	if (labctx_init(&r->x, &r->cc, &r->ls) < 0 || db_ensure(&r->x.db) < 0) {
		doc_line(d, DOC_WARN, "fix the database first (check 7)",
		         "not run: the database cannot be used (%s)", r->x.db.msg);
		goto done;
	}
	canary_sweep(d, &r->x);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_stop;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &r->old_int);
	sigaction(SIGTERM, &sa, &r->old_term);
	r->signals = 1;

	/* two seats: the class's capacity is not the doctor's to take */
	long in_use = 0;
	long code = lab_count(&r->x, r->rt, &in_use);
	int cap = r->rt->capacity(&r->cc);
	if (code != 200) {
		doc_line(d, DOC_FAIL, "see checks 1 and 2",
		         "not run: the lab VMs could not be counted (HTTP %ld: %s)", code,
		         r->x.kube.msg);
		goto done;
	}
	/* students waiting in line come first (queue.h: strict FIFO per pool) */
	long line = queue_seats_ahead(&d->x, r->rt->name, NULL);
	if (line > 0) {
		doc_line(d, DOC_WARN, "run the doctor when nobody waits in line",
		         "not run: %ld seat%s of the waiting line come first", line,
		         line == 1 ? "" : "s");
		goto done;
	}
	if (in_use + NCANARY > cap) {
		doc_line(d, DOC_WARN,
		         "run the doctor when two seats are free (or raise vm_capacity)",
		         "not run: %ld of vm_capacity %d VMs are in use, and the canaries need %d",
		         in_use, cap, NCANARY);
		goto done;
	}

	for (int i = 0; i < NCANARY; i++) {
		struct canary *c = &r->c[i];
		c->n = i + 1;
		snprintf(c->user, sizeof c->user, "labvm-doctor-%d", c->n);
		if (canary_start(r, c) < 0)
			doc_line(d, DOC_FAIL, "see the lines of checks 2-4 and the backend's log",
			         "canary %d could not be started: %s", c->n, c->err);
	}
	canary_wait_ready(r);
	int both = 1;
	for (int i = 0; i < NCANARY; i++) {
		struct canary *c = &r->c[i];
		if (c->started && !c->ready) {
			both = 0;
			doc_line(
			    d, DOC_FAIL,
			    "kubectl describe the VM and its launcher Pod (events, image pull, "
			    "scheduling); the guest's console log shows cloud-init",
			    "canary %d (VM %s) did not become ready: %s", c->n, c->vm, c->err);
		} else if (!c->started) {
			both = 0;
		}
	}
	for (int i = 0; i < NCANARY; i++) {
		struct canary *c = &r->c[i];
		if (!c->ready || bench_stop)
			continue;
		double t = util_mono_s();
		c->d_console = canary_console(d, &r->cc, c->sid, c->user, c->vm, c->n) == 0
		                   ? util_mono_s() - t
		                   : -1;
		canary_grade(r, c);
	}
	if (both && !bench_stop)
		canary_fences(r);
done:
	if (bench_stop)
		doc_line(
		    d, DOC_FAIL,
		    "give the doctor the time the canaries need (a Job's activeDeadlineSeconds)",
		    "interrupted (SIGINT or SIGTERM): the canaries were ended before they were "
		    "tried to the end");
	for (int i = 0; i < NCANARY; i++) {
		r->c[i].err[0] = '\0';
		canary_end(r, &r->c[i]);
	}
	for (int i = 0; i < NCANARY; i++) {
		struct canary *c = &r->c[i];
		int was_ready = c->ready;
		canary_reclaim(r, c);
		if (c->started && !c->reclaimed)
			doc_line(
			    d, DOC_FAIL,
			    "kubectl get vm,vmi,pod,secret -l <prefix>/session-id=<id>: look at "
			    "finalizers and deletionTimestamp; a reaper run with this environment "
			    "removes them",
			    "canary %d was not reclaimed: %s", c->n, c->err);
		else if (c->started && was_ready && !bench_stop)
			canary_times(r, c);
	}
	if (r->signals) {
		sigaction(SIGINT, &r->old_int, NULL);
		sigaction(SIGTERM, &r->old_term, NULL);
	}
	labctx_cleanup(&r->x);
	for (size_t i = 0; i < r->ls.n; i++)
		lesson_free(&r->ls.v[i]);
	free(r->ls.v);
	cfg_free(&r->cc);
}
