/* drive.c - the session drivers (see drive.h). */
#include "drive.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "lab.h"
#include "locks.h"
#include "log.h"
#include "runtime.h"
#include "session.h"

#define HOLD_MS      10000 /* a driver's longest watch or held /ready */
#define HOLD_BUSY_MS 500   /* ... when other watched starts wait for a driver */
#define RETRY_S      0.5   /* after a watch or agent call that failed at once */
/* a VMI watch that ended at once with no event, began with an ERROR event,
 * or ended on its first event (the state the driver had just read) proves
 * nothing happened: the next watch waits, doubling from 0.1 s up to this,
 * back to none after a watch that held or saw a change */
#define WATCH_BACKOFF_MAX_S 5.0

struct job {
	char id[40];
	int watchers;
	int busy;
	double next_at;
	int watch_fails; /* VMI watches in a row that proved nothing (WATCH_BACKOFF_MAX_S) */
};

static const struct cfg *cfg;
static const struct lessons *lessons;
static pthread_t *threads; /* joined at stop: nothing of theirs outlives it */
static int nthreads;
static volatile int stopping;

/* the drivers' work: watched starting sessions */
static pthread_mutex_t jmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t jcond = PTHREAD_COND_INITIALIZER;
static struct job *jobs;
static size_t njobs, cap_jobs;

/* ------------------------------------------------------------ jobs */

static struct job *job_find(const char *id)
{
	for (size_t i = 0; i < njobs; i++)
		if (strcmp(jobs[i].id, id) == 0)
			return &jobs[i];
	return NULL;
}

void drive_watch(const char *id)
{
	pthread_mutex_lock(&jmu);
	struct job *j = job_find(id);
	if (!j) {
		if (njobs == cap_jobs) {
			cap_jobs = cap_jobs ? cap_jobs * 2 : 16;
			jobs = realloc(jobs, cap_jobs * sizeof *jobs);
			if (!jobs)
				abort();
		}
		j = &jobs[njobs++];
		memset(j, 0, sizeof *j);
		snprintf(j->id, sizeof j->id, "%s", id);
	}
	j->watchers++;
	pthread_cond_broadcast(&jcond);
	pthread_mutex_unlock(&jmu);
}

static void job_remove_locked(struct job *j)
{
	*j = jobs[--njobs];
}

void drive_unwatch(const char *id)
{
	pthread_mutex_lock(&jmu);
	struct job *j = job_find(id);
	if (j && --j->watchers <= 0 && !j->busy)
		job_remove_locked(j);
	pthread_mutex_unlock(&jmu);
}

/* One process drives a session at a time (LOCK_DRIVE, sql/locks.md): 1 this one
 * does now, 0 another one does, -1 database trouble. */
static int drive_lock(struct labctx *x, const char *id, int take)
{
	const char *p[1] = {id};
	PGresult *r = db_exec(&x->db,
	                      take ? "SELECT pg_try_advisory_lock(" LOCK_DRIVE ", hashtext($1))"
	                           : "SELECT pg_advisory_unlock(" LOCK_DRIVE ", hashtext($1))",
	                      1, p);
	if (!r)
		return -1;
	int got = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	return got;
}

static void driver_step(struct labctx *x, const char *id, double *next_at, int *done, int *fails);

static void driver_round(struct labctx *x, const char *id, double *next_at, int *done, int *fails)
{
	*done = 0;
	*next_at = util_mono_s() + RETRY_S;
	int lk = drive_lock(x, id, 1);
	if (lk <= 0) {
		/* another process drives it (or the database is away): look again
		 * later, in case that one stops */
		*next_at = util_mono_s() + (lk == 0 ? 1.0 : RETRY_S);
		return;
	}
	driver_step(x, id, next_at, done, fails);
	if (drive_lock(x, id, 0) < 0)
		db_close(&x->db); /* a session lock must not outlive the round */
}

/* The pause before the next watch after fails watches in a row proved
 * nothing: none after the first (the state may just have changed), then
 * 0.1 s doubling up to WATCH_BACKOFF_MAX_S. */
static double watch_backoff_s(int fails)
{
	if (fails <= 1)
		return 0;
	double d = 0.1;
	for (int i = 2; i < fails && d < WATCH_BACKOFF_MAX_S; i++)
		d *= 2;
	return d < WATCH_BACKOFF_MAX_S ? d : WATCH_BACKOFF_MAX_S;
}

static void driver_step(struct labctx *x, const char *id, double *next_at, int *done, int *fails)
{
	struct session s;
	int rc = session_load(x, id, &s);
	if (rc == SESSION_NONE) {
		*done = 1;
		return;
	}
	if (rc != SESSION_FOUND)
		return;
	if (session_advance(x, &s) < 0) {
		session_free(&s);
		return;
	}
	if (s.state != SESSION_STARTING) {
		*done = 1;
		session_free(&s);
		return;
	}
	pthread_mutex_lock(&jmu);
	int others = 0;
	for (size_t i = 0; i < njobs; i++)
		others += !jobs[i].busy && jobs[i].watchers > 0;
	pthread_mutex_unlock(&jmu);
	const struct runtime_ops *rt = runtime_of(s.runtime);
	int w = s.nvms && rt->wait ? rt->wait(x, &s, others ? HOLD_BUSY_MS : HOLD_MS) : -1;
	if (w == 0) {
		*fails = 0;
		*next_at = util_mono_s();
	} else if (w == 1) {
		(*fails)++;
		*next_at = util_mono_s() + watch_backoff_s(*fails);
	}
	session_free(&s);
}

static void *driver(void *arg)
{
	struct labctx x;
	(void)arg;
	if (labctx_init(&x, cfg, lessons) < 0)
		return NULL;
	/* a driver waits long on the agent: never on a connection kept from
	 * another guest that had the same address */
	x.agent.fresh = 1;
	/* a held watch or /ready ends when the process stops */
	x.kube.cancel = &stopping;
	x.agent.cancel = &stopping;
	pthread_mutex_lock(&jmu);
	while (!stopping) {
		struct job *pick = NULL;
		double now = util_mono_s(), soonest = now + 1.0;
		for (size_t i = 0; i < njobs; i++) {
			struct job *j = &jobs[i];
			if (j->busy || j->watchers <= 0)
				continue;
			if (j->next_at <= now && (!pick || j->next_at < pick->next_at))
				pick = j;
			else if (j->next_at < soonest)
				soonest = j->next_at;
		}
		if (!pick) {
			struct timespec ts;
			struct timeval tv;
			gettimeofday(&tv, NULL);
			double wait = soonest - now;
			double at =
			    (double)tv.tv_sec + (double)tv.tv_usec / 1e6 + (wait > 0 ? wait : 0);
			ts.tv_sec = (time_t)at;
			ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
			pthread_cond_timedwait(&jcond, &jmu, &ts);
			continue;
		}
		char id[40];
		snprintf(id, sizeof id, "%s", pick->id);
		pick->busy = 1;
		int fails = pick->watch_fails;
		pthread_mutex_unlock(&jmu);

		double next_at;
		int done;
		db_reset_timer(&x.db);
		kube_reset_timer(&x.kube);
		driver_round(&x, id, &next_at, &done, &fails);

		pthread_mutex_lock(&jmu);
		struct job *j = job_find(id);
		if (j) {
			j->busy = 0;
			j->next_at = next_at;
			j->watch_fails = fails;
			if (done || j->watchers <= 0)
				job_remove_locked(j);
		}
	}
	pthread_mutex_unlock(&jmu);
	labctx_cleanup(&x);
	return NULL;
}

int drive_start(const struct cfg *c, const struct lessons *ls)
{
	cfg = c;
	lessons = ls;
	threads = calloc((size_t)c->stream_drivers + 1, sizeof *threads);
	if (!threads) {
		log_err("event streams: out of memory");
		return -1;
	}
	for (int i = 0; i < c->stream_drivers; i++) {
		if (pthread_create(&threads[i], NULL, driver, NULL) != 0) {
			log_err("event streams: cannot start driver %d", i);
			return -1;
		}
		nthreads++;
	}
	return 0;
}

void drive_stop(void)
{
	stopping = 1;
	pthread_mutex_lock(&jmu);
	pthread_cond_broadcast(&jcond);
	pthread_mutex_unlock(&jmu);
	/* a driver's held watch or /ready ends at its next progress check
	 * (libcurl: about a second at the most), its agent retries at once */
	for (int i = 0; i < nthreads; i++)
		pthread_join(threads[i], NULL);
	free(threads);
	threads = NULL;
	nthreads = 0;
}
