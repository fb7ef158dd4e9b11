/* stream.c - the stream thread and the drivers (see stream.h). */
#include "stream.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <libpq-fe.h>

#include "jsonx.h"
#include "kube.h"
#include "lab.h"
#include "locks.h"
#include "log.h"
#include "session.h"

#define EVENT_CHANNEL  "labvm_session_event"
#define CATCHUP_LIMIT  100
#define SEND_TIMEOUT_S 2     /* a client that reads nothing for this long is dropped */
#define RECONNECT_S    0.5   /* between attempts to reach the database again */
#define HOLD_MS        10000 /* a driver's longest watch or held /ready */
#define HOLD_BUSY_MS   500   /* ... when other watched starts wait for a driver */
#define RETRY_S        0.5   /* after a watch or agent call that failed at once */
#define AGENT_RETRY_MS 10    /* an agent not listening yet: asked again after this */
#define VMI_RECHECK_S  1.0   /* ... its VMI read again first, at most this often */
#define SLOT_TTL_S     60    /* a per-user stream slot not renewed for this long is free */
#define SLOT_RENEW_S   20    /* ... renewed this often while its stream is open */
/* a VMI watch that ended at once with no event, began with an ERROR event,
 * or ended on its first event (the state the driver had just read) proves
 * nothing happened: the next watch waits, doubling from 0.1 s up to this,
 * back to none after a watch that held or saw a change */
#define WATCH_BACKOFF_MAX_S 5.0

struct watcher {
	FCGX_Request *fr;
	int fd;
	char id[40];
	long long last;
	double last_write;
	int driven; /* counted in its session's job */
	char *user; /* its per-user slot (stream_slots, sql/011) */
	int slot;
};

struct job {
	char id[40];
	int watchers;
	int busy;
	double next_at;
	int watch_fails; /* VMI watches in a row that proved nothing (WATCH_BACKOFF_MAX_S) */
};

static const struct cfg *cfg;
static const struct lessons *lessons;
static pthread_t stream_thread;
static pthread_t *driver_threads; /* joined at stop: nothing of theirs outlives it */
static int ndriver_threads;
static int started;
static volatile int stopping;
static int wake_pipe[2] = {-1, -1};
/* this process in stream_slots: host, pid, start (its rows, renewed together) */
static char holder[200];

/* adopted streams not yet taken in by the stream thread, and the count of
 * every open stream (for stream_has_room) */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct watcher *pending;
static size_t npending, cap_pending;
static int open_streams;

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

static void job_watch(const char *id)
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

static void job_unwatch(const char *id)
{
	pthread_mutex_lock(&jmu);
	struct job *j = job_find(id);
	if (j && --j->watchers <= 0 && !j->busy)
		job_remove_locked(j);
	pthread_mutex_unlock(&jmu);
}

/* VMI watch: stop at the first event whose phase differs from the first
 * phase seen, or that says Running, Failed or Succeeded, or a deletion. */
struct phase_watch {
	char first[32];
	int seen;
	int events; /* events read */
	int error;  /* an ERROR event (a Status: the watch failed) */
};

static int on_vmi_event(const cJSON *ev, void *ud)
{
	struct phase_watch *w = ud;
	const char *type = kj_str(ev, "type");
	const char *phase = kj_str(ev, "object.status.phase");
	w->events++;
	if (type && strcmp(type, "ERROR") == 0) {
		w->error = 1;
		return 1;
	}
	if (!type || strcmp(type, "ADDED") != 0) {
		if (type && strcmp(type, "MODIFIED") != 0)
			return 1; /* DELETED, or no type */
	}
	if (!phase)
		phase = "";
	if (!strcmp(phase, "Running") || !strcmp(phase, "Failed") || !strcmp(phase, "Succeeded"))
		return 1;
	if (!w->seen) {
		w->seen = 1;
		snprintf(w->first, sizeof w->first, "%s", phase);
		return 0;
	}
	return strcmp(w->first, phase) != 0;
}

/* Wait for the next thing that can move s on, at most hold_ms: for its
 * first machine not ready yet, its VMI's phase (not Running yet) or its
 * agent's flag, bounded by that machine's deadline. 0 something may have
 * happened (look again at once), -1 the wait failed (retry later), 1 the
 * watch proved nothing (ended at once, an ERROR event, or only the state
 * already known): look again after a back-off. */
static int driver_wait(struct labctx *x, struct session *s, int hold_ms)
{
	struct session_vm *vm = NULL;
	if (s->runtime == RUNTIME_POD)
		return -1; /* a Pod's readiness is its Ready condition: looked at every RETRY_S */
	for (size_t i = 0; i < s->nvms && !vm; i++)
		if (s->vms[i].stage != STAGE_READY && !s->vms[i].deleted)
			vm = &s->vms[i];
	if (!vm || s->t_submitted <= 0)
		return -1; /* nothing to wait for, or the submission is in flight */
	double deadline = vm->running_at ? vm->t_running + s->ready_timeout_s
	                                 : s->t_submitted + s->running_timeout_s;
	double left_ms = (deadline - s->t_now) * 1000.0 + 50;
	int wait_ms = left_ms < hold_ms ? (int)(left_ms > 0 ? left_ms : 0) : hold_ms;

	if (wait_ms <= 0)
		return -1; /* overdue: session_advance() decides, the next round */
	if (!vm->running_at) {
		char *coll = kube_path("virtualmachineinstances", x->cfg->namespace_, NULL);
		char *path = xasprintf("%s?watch=true&fieldSelector=metadata.name%%3D%s"
		                       "&timeoutSeconds=%d",
		                       coll, vm->name, (wait_ms + 999) / 1000);
		struct phase_watch w = {{0}, 0, 0, 0};
		double t0 = util_mono_s();
		long code = kube_watch(&x->kube, path, wait_ms + 500L, on_vmi_event, &w);
		double took_ms = (util_mono_s() - t0) * 1000.0;
		free(path);
		free(coll);
		if (code != 200) {
			log_debug("session %s: VMI watch: HTTP %ld %s", s->id, code, x->kube.msg);
			return -1;
		}
		/* a quiet watch holds about wait_ms; one that changed saw 2+ events */
		if (w.error || (!w.events && took_ms < wait_ms / 2.0) || w.events == 1) {
			if (w.error || !w.events)
				log_debug("session %s: VMI watch %s after %.0f ms", s->id,
				          w.error ? "sent an ERROR event" : "ended with no event",
				          took_ms);
			return 1;
		}
		return 0;
	}
	{
		/* the token goes to the recorded address only while it is this
		 * session's VMI's: checked (vmi_uid) and no call failed since. The
		 * round's session_advance() has just read the VMI when it was not:
		 * a check that failed is looked at again next round, never passed
		 * over */
		if (!vm->ip || !vm->vmi_uid)
			return -1;
		/* until the flag (or a failed setup), within wait_ms: an agent not
		 * listening yet (the guest still boots) is asked again every
		 * AGENT_RETRY_MS, its VMI read again first (at most every
		 * VMI_RECHECK_S: a VMI that went away may leave its address to
		 * another student's guest) */
		double end = util_mono_s() + wait_ms / 1000.0;
		double checked_at = 0;
		for (;;) {
			double t0 = util_mono_s();
			int left = (int)((end - t0) * 1000.0);
			if (left <= 0)
				return 0;
			cJSON *detail = NULL;
			enum agent_ready r =
			    agent_ready_wait(&x->agent, vm->ip, x->cfg->agent_port, vm->token, left,
			                     x->cfg->agent_ready_timeout_ms, &detail);
			const char *st = kj_str(detail, "state");
			int setup_over = st && !strcmp(st, "setup_failed");
			cJSON_Delete(detail);
			if (r == AGENT_READY)
				return 0; /* the next round records it, as the status GET does */
			if (setup_over)
				return 0;
			/* an agent that answers at once without holding (an older one) */
			if (r == AGENT_NOT_READY && util_mono_s() - t0 < 0.05)
				return -1;
			if (stopping)
				return -1;
			if (r == AGENT_UNREACHABLE) {
				if (vm->vmi_uid) {
					/* as advance_ready(): every reader checks the VMI again */
					const char *p[2] = {s->id, vm->name};
					db_cmd(&x->db,
					       "UPDATE session_vms SET vmi_uid = NULL WHERE "
					       "session_id = "
					       "$1::uuid AND vm_name = $2",
					       2, p);
					free(vm->vmi_uid);
					vm->vmi_uid = NULL;
				}
				usleep(AGENT_RETRY_MS * 1000);
				if (util_mono_s() - checked_at >= VMI_RECHECK_S) {
					char why[256];
					if (session_vmi_check(x, s, vm, why, sizeof why) < 0) {
						log_debug("session %s: %s: not asked again", s->id,
						          why);
						return -1;
					}
					checked_at = util_mono_s();
				}
			}
		}
	}
	return -1;
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
	int w = s.nvms ? driver_wait(x, &s, others ? HOLD_BUSY_MS : HOLD_MS) : -1;
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

/* ------------------------------------------------------------ streams */

static struct watcher *ws;
static size_t nws, cap_ws;
static PGconn *lconn;
static double next_connect, next_catchup;
static int need_catchup;
static struct db *slot_db; /* the stream thread's connection */
static double next_renew;
/* slots whose release failed (the database): released at the next renewal */
struct unreleased {
	char *user;
	int slot;
};
static struct unreleased *unreleased;
static size_t nunreleased, cap_unreleased;

static void watcher_close(size_t i)
{
	struct watcher *w = &ws[i];
	FCGX_Finish_r(w->fr); /* the end of the answer; closes the connection */
	free(w->fr);
	if (w->driven)
		job_unwatch(w->id);
	if (w->user && stream_slot_release(slot_db, w->user, w->slot) < 0) {
		if (nunreleased == cap_unreleased) {
			cap_unreleased = cap_unreleased ? cap_unreleased * 2 : 16;
			unreleased = realloc(unreleased, cap_unreleased * sizeof *unreleased);
			if (!unreleased)
				abort();
		}
		unreleased[nunreleased++] = (struct unreleased){w->user, w->slot};
		w->user = NULL;
	}
	free(w->user);
	ws[i] = ws[--nws];
	pthread_mutex_lock(&mu);
	open_streams--;
	pthread_mutex_unlock(&mu);
}

static int put(struct watcher *w, const char *s, size_t n)
{
	if (FCGX_PutStr(s, (int)n, w->fr->out) != (int)n || FCGX_FFlush(w->fr->out) != 0 ||
	    FCGX_GetError(w->fr->out))
		return -1;
	w->last_write = util_mono_s();
	return 0;
}

/* Write what happened to w's session since w->last. 1: the final event was
 * written (close it), 0 go on, -1 the client is gone, -2 the database failed
 * (need_catchup: every stream looks again once it answers). */
static int catch_up(struct labctx *x, struct watcher *w)
{
	for (;;) {
		struct session_event *ev;
		size_t n;
		if (session_events_load(x, w->id, w->last, CATCHUP_LIMIT, &ev, &n) < 0) {
			need_catchup = 1;
			return -2;
		}
		for (size_t i = 0; i < n; i++) {
			char *data = stream_event_text(ev[i].seq, &ev[i].s);
			int bad = put(w, data, strlen(data));
			free(data);
			if (bad) {
				session_events_free(ev, n);
				return -1;
			}
			w->last = ev[i].seq;
			if (ev[i].s.state != SESSION_STARTING) {
				session_events_free(ev, n);
				return 1;
			}
		}
		session_events_free(ev, n);
		if (n < CATCHUP_LIMIT)
			return 0;
	}
}

static void catch_up_where(struct labctx *x, const char *id)
{
	for (size_t i = 0; i < nws;) {
		if (id && strcmp(ws[i].id, id) != 0) {
			i++;
			continue;
		}
		int rc = catch_up(x, &ws[i]);
		if (rc == -2)
			return; /* the database again: later, for every stream */
		if (rc != 0)
			watcher_close(i);
		else
			i++;
	}
}

static void listen_ensure(struct labctx *x)
{
	if (lconn && PQstatus(lconn) == CONNECTION_OK)
		return;
	if (util_mono_s() < next_connect)
		return;
	if (lconn)
		PQfinish(lconn);
	lconn = PQconnectdb(cfg->database);
	PGresult *r = NULL;
	if (PQstatus(lconn) == CONNECTION_OK)
		r = PQexec(lconn, "LISTEN " EVENT_CHANNEL);
	if (!r || PQresultStatus(r) != PGRES_COMMAND_OK) {
		PQclear(r);
		PQfinish(lconn);
		lconn = NULL;
		next_connect = util_mono_s() + RECONNECT_S;
		need_catchup = 1;
		return;
	}
	PQclear(r);
	if (need_catchup) {
		log_info("event streams: listening again; %zu streams catch up", nws);
		x->db.broken = 1; /* its connection died with the server, too */
	}
}

static void take_pending(struct labctx *x)
{
	pthread_mutex_lock(&mu);
	struct watcher *p = pending;
	size_t n = npending;
	pending = NULL;
	npending = cap_pending = 0;
	pthread_mutex_unlock(&mu);
	for (size_t i = 0; i < n; i++) {
		if (nws == cap_ws) {
			cap_ws = cap_ws ? cap_ws * 2 : 64;
			ws = realloc(ws, cap_ws * sizeof *ws);
			if (!ws)
				abort();
		}
		ws[nws++] = p[i];
		/* what happened between the handler's look and now */
		int rc = catch_up(x, &ws[nws - 1]);
		if (rc == -1 || rc == 1)
			watcher_close(nws - 1);
	}
	free(p);
}

/* Keep this process's per-user slots: renew their expiry (a process that
 * died lets them run out), release those a closed stream could not. */
static void slots_renew(void)
{
	double now = util_mono_s();
	if (now < next_renew || (!nws && !nunreleased))
		return;
	next_renew = now + SLOT_RENEW_S;
	size_t kept = 0;
	for (size_t i = 0; i < nunreleased; i++) {
		if (stream_slot_release(slot_db, unreleased[i].user, unreleased[i].slot) < 0)
			unreleased[kept++] = unreleased[i];
		else
			free(unreleased[i].user);
	}
	nunreleased = kept;
	char ttl[16];
	snprintf(ttl, sizeof ttl, "%d", SLOT_TTL_S);
	const char *p[2] = {holder, ttl};
	if (db_cmd(slot_db,
	           "UPDATE stream_slots SET expires_at = clock_timestamp() + "
	           "make_interval(secs => $2::int) WHERE holder = $1",
	           2, p) < 0)
		next_renew = now + RECONNECT_S;
	/* rows of processes that died long ago */
	db_cmd(slot_db,
	       "DELETE FROM stream_slots WHERE expires_at < clock_timestamp() - "
	       "interval '1 hour'",
	       0, NULL);
}

static void *stream_main(void *arg)
{
	struct labctx x;
	struct pollfd *pfd = NULL;
	size_t cap_pfd = 0;
	(void)arg;

	if (labctx_init(&x, cfg, lessons) < 0)
		return NULL;
	slot_db = &x.db;
	while (!stopping) {
		listen_ensure(&x);
		slots_renew();
		if (need_catchup && lconn && util_mono_s() >= next_catchup) {
			/* listening again: what happened meanwhile, for every stream */
			need_catchup = 0;
			catch_up_where(&x, NULL);
			if (need_catchup)
				next_catchup = util_mono_s() + RECONNECT_S;
		}
		if (cap_pfd < nws + 2) {
			cap_pfd = nws + 64;
			pfd = realloc(pfd, cap_pfd * sizeof *pfd);
			if (!pfd)
				abort();
		}
		pfd[0] = (struct pollfd){.fd = wake_pipe[0], .events = POLLIN};
		pfd[1] = (struct pollfd){.fd = lconn ? PQsocket(lconn) : -1, .events = POLLIN};
		for (size_t i = 0; i < nws; i++)
			pfd[i + 2] = (struct pollfd){.fd = ws[i].fd, .events = POLLIN};
		size_t polled = nws;
		int n = poll(pfd, polled + 2, 1000);
		if (n < 0 && errno != EINTR) {
			log_err("event streams: poll: %s", strerror(errno));
			break;
		}
		db_reset_timer(&x.db);
		/* gone clients first (from the end: closing moves the last one) */
		for (size_t i = polled; i-- > 0;) {
			if (!(pfd[i + 2].revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL)))
				continue;
			char junk[512];
			ssize_t got = recv(ws[i].fd, junk, sizeof junk, MSG_DONTWAIT);
			if (got < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			/* closed, or a record after stdin's end (FCGI_ABORT_REQUEST) */
			watcher_close(i);
		}
		if (pfd[0].revents & POLLIN) {
			char b[64];
			while (read(wake_pipe[0], b, sizeof b) > 0)
				;
			take_pending(&x);
		}
		if (lconn && (pfd[1].revents & (POLLIN | POLLHUP | POLLERR))) {
			if (!PQconsumeInput(lconn)) {
				log_warn("event streams: the database connection was lost; "
				         "streams stay open and catch up when it is back");
				PQfinish(lconn);
				lconn = NULL;
				need_catchup = 1;
				x.db.broken = 1;
				next_connect = util_mono_s() + RECONNECT_S;
			} else {
				PGnotify *nt;
				while ((nt = PQnotifies(lconn))) {
					catch_up_where(&x, nt->extra);
					PQfreemem(nt);
				}
			}
		}
		/* keepalive comments */
		double now = util_mono_s();
		for (size_t i = 0; i < nws;) {
			if (now - ws[i].last_write >= cfg->stream_keepalive_s &&
			    put(&ws[i], ": keepalive\n\n", 13) < 0) {
				watcher_close(i);
				continue;
			}
			i++;
		}
	}
	/* stopping: every stream ends (its client reconnects with Last-Event-ID) */
	take_pending(&x);
	while (nws)
		watcher_close(nws - 1);
	{
		const char *p[1] = {holder};
		db_cmd(&x.db, "DELETE FROM stream_slots WHERE holder = $1", 1, p);
		for (size_t i = 0; i < nunreleased; i++)
			free(unreleased[i].user);
		free(unreleased);
		unreleased = NULL;
		nunreleased = cap_unreleased = 0;
	}
	free(pfd);
	free(ws);
	if (lconn)
		PQfinish(lconn);
	labctx_cleanup(&x);
	return NULL;
}

/* ------------------------------------------------------------ API */

char *stream_event_text(long long seq, const struct session *s)
{
	cJSON *o = session_json(s);
	char *json = jx_print(o);
	char *t = xasprintf("id: %lld\ndata: %s\n\n", seq, json);
	cJSON_free(json);
	cJSON_Delete(o);
	return t;
}

int stream_has_room(void)
{
	pthread_mutex_lock(&mu);
	int ok = started && open_streams < cfg->stream_max;
	pthread_mutex_unlock(&mu);
	return ok;
}

int stream_slot_take(struct db *d, const char *user)
{
	const char *environment = cfg->environment;
	char cap[16], ttl[16];
	snprintf(cap, sizeof cap, "%d", cfg->stream_max_per_user);
	snprintf(ttl, sizeof ttl, "%d", SLOT_TTL_S);
	const char *p[5] = {environment, user, holder, cap, ttl};
	/* the lowest slot that is free or expired; two takers of the same slot
	 * meet at the primary key (one inserts, the other's update finds it live
	 * and returns nothing): look again, a few times */
	for (int attempt = 0; attempt < 3; attempt++) {
		PGresult *r = db_exec(
		    d,
		    "INSERT INTO stream_slots (environment, user_name, slot, holder, expires_at) "
		    "SELECT $1::text, $2::text, n, $3::text, clock_timestamp() + "
		    "make_interval(secs => $5::int) FROM generate_series(0, $4::int - 1) AS n "
		    "WHERE NOT EXISTS (SELECT 1 FROM stream_slots l WHERE l.environment = $1 AND "
		    "l.user_name = $2 AND l.slot = n AND l.expires_at > clock_timestamp()) "
		    "ORDER BY n LIMIT 1 "
		    "ON CONFLICT (environment, user_name, slot) DO UPDATE SET holder = "
		    "EXCLUDED.holder, expires_at = EXCLUDED.expires_at "
		    "WHERE stream_slots.expires_at <= clock_timestamp() RETURNING slot",
		    5, p);
		if (!r)
			return -2;
		int slot = PQntuples(r) == 1 ? atoi(PQgetvalue(r, 0, 0)) : -1;
		PQclear(r);
		if (slot >= 0)
			return slot;
		/* every slot live, or another taker got this one first: count */
		const char *c[2] = {environment, user};
		r = db_exec(d,
		            "SELECT count(*) FROM stream_slots WHERE environment = $1 AND "
		            "user_name = $2 AND expires_at > clock_timestamp()",
		            2, c);
		if (!r)
			return -2;
		long live = strtol(PQgetvalue(r, 0, 0), NULL, 10);
		PQclear(r);
		if (live >= cfg->stream_max_per_user)
			return -1;
	}
	return -1;
}

int stream_slot_release(struct db *d, const char *user, int slot)
{
	char s[16];
	snprintf(s, sizeof s, "%d", slot);
	const char *p[4] = {cfg->environment, user, s, holder};
	return db_cmd(d,
	              "DELETE FROM stream_slots WHERE environment = $1 AND user_name = $2 AND "
	              "slot = $3::int AND holder = $4",
	              4, p);
}

void stream_adopt(FCGX_Request *fr, const char *session_id, long long last, int starting,
                  const char *user, int slot)
{
	struct watcher w = {fr, fr->ipcFd, {0}, last, util_mono_s(), starting, xstrdup(user), slot};
	struct timeval tv = {SEND_TIMEOUT_S, 0};
	snprintf(w.id, sizeof w.id, "%s", session_id);
	setsockopt(fr->ipcFd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	if (starting)
		job_watch(session_id);
	pthread_mutex_lock(&mu);
	if (npending == cap_pending) {
		cap_pending = cap_pending ? cap_pending * 2 : 16;
		pending = realloc(pending, cap_pending * sizeof *pending);
		if (!pending)
			abort();
	}
	pending[npending++] = w;
	open_streams++;
	pthread_mutex_unlock(&mu);
	if (write(wake_pipe[1], "x", 1) < 0 && errno != EAGAIN)
		log_warn("event streams: cannot wake the stream thread: %s", strerror(errno));
}

int stream_start(const struct cfg *c, const struct lessons *ls)
{
	cfg = c;
	lessons = ls;
	char host[64] = "", nonce[17];
	gethostname(host, sizeof host - 1);
	if (util_random_hex(nonce, 8) < 0)
		snprintf(nonce, sizeof nonce, "%.0f", util_epoch_s() * 1000.0);
	snprintf(holder, sizeof holder, "%s/%d/%s", host, (int)getpid(), nonce);
	if (pipe(wake_pipe) < 0) {
		log_err("event streams: pipe: %s", strerror(errno));
		return -1;
	}
	for (int i = 0; i < 2; i++) {
		int fl = fcntl(wake_pipe[i], F_GETFL);
		fcntl(wake_pipe[i], F_SETFL, fl | O_NONBLOCK);
		fcntl(wake_pipe[i], F_SETFD, FD_CLOEXEC);
	}
	if (pthread_create(&stream_thread, NULL, stream_main, NULL) != 0) {
		log_err("event streams: cannot start the stream thread");
		return -1;
	}
	driver_threads = calloc((size_t)c->stream_drivers + 1, sizeof *driver_threads);
	if (!driver_threads) {
		log_err("event streams: out of memory");
		return -1;
	}
	for (int i = 0; i < c->stream_drivers; i++) {
		if (pthread_create(&driver_threads[i], NULL, driver, NULL) != 0) {
			log_err("event streams: cannot start driver %d", i);
			return -1;
		}
		ndriver_threads++;
	}
	started = 1;
	return 0;
}

void stream_stop(void)
{
	if (!started)
		return;
	stopping = 1;
	pthread_mutex_lock(&jmu);
	pthread_cond_broadcast(&jcond);
	pthread_mutex_unlock(&jmu);
	if (write(wake_pipe[1], "x", 1) < 0 && errno != EAGAIN)
		log_warn("event streams: cannot wake the stream thread: %s", strerror(errno));
	pthread_join(stream_thread, NULL);
	/* a driver's held watch or /ready ends at its next progress check
	 * (libcurl: about a second at the most), its agent retries at once */
	for (int i = 0; i < ndriver_threads; i++)
		pthread_join(driver_threads[i], NULL);
	free(driver_threads);
	driver_threads = NULL;
	ndriver_threads = 0;
}
