/* stream.c - the stream thread: open event streams, their catch-up and
 * keepalives, the per-user stream slots (see stream.h); the drivers that
 * move watched starts on are drive.c. */
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

#include <libpq-fe.h>

#include "drive.h"
#include "jsonx.h"
#include "lab.h"
#include "log.h"
#include "session.h"

#define EVENT_CHANNEL  "labvm_session_event"
#define CATCHUP_LIMIT  100
#define SEND_TIMEOUT_S 2   /* a client that reads nothing for this long is dropped */
#define RECONNECT_S    0.5 /* between attempts to reach the database again */
#define SLOT_TTL_S     60  /* a per-user stream slot not renewed for this long is free */
#define SLOT_RENEW_S   20  /* ... renewed this often while its stream is open */

struct watcher {
	FCGX_Request *fr;
	int fd;
	char id[40];
	long long last;
	double last_write;
	int driven; /* counted in its session's job */
	char *user; /* its per-user slot (stream_slots, sql/011) */
	int slot;
	/* ?until=end (issue #28): the stream goes on through ready, with the
	 * warnings, until the session ends or fails */
	int through;
	double warn_next;   /* epoch s: look at the session's warning then (0: not yet known) */
	double warned_ends; /* the ends_at of the last warning written */
};

static const struct cfg *cfg;
static const struct lessons *lessons;
static pthread_t stream_thread;
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
		drive_unwatch(w->id);
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
			if (w->through ? !session_active(&ev[i].s)
			               : ev[i].s.state != SESSION_STARTING) {
				session_events_free(ev, n);
				return 1;
			}
			if (w->through && ev[i].s.state == SESSION_READY)
				w->warn_next = util_epoch_s(); /* look now, with the row as it is */
		}
		session_events_free(ev, n);
		if (n < CATCHUP_LIMIT)
			return 0;
	}
}

/* A stream that goes on through ready (?until=end): at the moments the
 * session's warning may change, look at the row; write `event: warning`
 * when a warning (a new ends_at) begins; end the session when it is due
 * (idle, expired: session_due, the same rule as every request and the
 * reaper), whose event then ends the stream. 0 go on, -1 close it. */
static int warn_look(struct labctx *x, struct watcher *w, double now)
{
	if (!w->through || w->warn_next <= 0 || now < w->warn_next)
		return 0;
	struct session s;
	int rc = session_load(x, w->id, &s);
	if (rc == SESSION_DBERR) {
		w->warn_next = now + RECONNECT_S;
		return 0;
	}
	if (rc == SESSION_NONE) {
		return -1;
	}
	w->warn_next = 0;
	struct session_due d = session_due(&s, s.t_now);
	if (d.what == DUE_IDLE || d.what == DUE_EXPIRE) {
		/* its state change notifies every stream of it, this one too */
		if (session_advance(x, &s) < 0)
			w->warn_next = now + RECONNECT_S;
		session_free(&s);
		return 0;
	}
	struct session_warning wn = session_warning(&s, s.t_now);
	if (wn.kind != WARN_NONE && wn.ends_at != w->warned_ends) {
		cJSON *o = jx_obj();
		jx_add_str(o, "kind", session_warning_kind_str(wn.kind));
		jx_add_str(o, "ends_at", wn.kind == WARN_IDLE ? s.idle_ends_at : s.expires_at);
		jx_add_num(o, "remaining_s", (double)(long)(wn.ends_at - s.t_now + 0.999));
		char *json = jx_print(o);
		char *t = xasprintf("event: warning\ndata: %s\n\n", json);
		cJSON_free(json);
		cJSON_Delete(o);
		int bad = put(w, t, strlen(t));
		free(t);
		if (bad) {
			session_free(&s);
			return -1;
		}
		w->warned_ends = wn.ends_at;
	}
	if (s.state == SESSION_READY) {
		double next = session_warning_next(&s, s.t_now);
		/* the database's clock to ours (they are one host's in practice) */
		w->warn_next = next > 0 ? now + (next - s.t_now) : 0;
	}
	session_free(&s);
	return 0;
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
		/* warnings and due ends of the streams that go on through ready */
		double epoch = util_epoch_s();
		for (size_t i = 0; i < nws;) {
			if (warn_look(&x, &ws[i], epoch) < 0) {
				watcher_close(i);
				continue;
			}
			i++;
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
                  const char *user, int slot, int through)
{
	struct watcher w = {fr,       fr->ipcFd,     {0},  last,    util_mono_s(),
	                    starting, xstrdup(user), slot, through, through ? util_epoch_s() : 0,
	                    0};
	struct timeval tv = {SEND_TIMEOUT_S, 0};
	snprintf(w.id, sizeof w.id, "%s", session_id);
	setsockopt(fr->ipcFd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	if (starting)
		drive_watch(session_id);
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
	started = 1;
	return 0;
}

void stream_stop(void)
{
	if (!started)
		return;
	stopping = 1;
	if (write(wake_pipe[1], "x", 1) < 0 && errno != EAGAIN)
		log_warn("event streams: cannot wake the stream thread: %s", strerror(errno));
	pthread_join(stream_thread, NULL);
}
