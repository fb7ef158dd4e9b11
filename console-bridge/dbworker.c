/* dbworker.c - the database worker thread. The lws service thread never touches
 * libpq: it queues requests here (db_check, db_recheck) and takes the answers
 * (db_results) when lws_cancel_service() wakes it with
 * LWS_CALLBACK_EVENT_WAIT_CANCELLED. The worker owns one PGconn, LISTENs on
 * channel "labvm_session" (payload: a session id that became ended or failed),
 * and reconnects with backoff; while the database is down every check is
 * answered DB_UNAVAILABLE at once. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "dbworker.h"
#include "log.h"
#include "pgconn.h"
#include "state.h"
#include "util.h"

#define DB_BACKOFF_MIN_MS 250
#define DB_BACKOFF_MAX_MS 10000
#define DB_CHANNEL        "labvm_session"

struct db_req {
	struct db_req *next;
	enum db_kind kind;
	uint64_t conn_id;
	char sid[37];
	char vm[64];
	char nonce[33]; /* DB_CHECK: the ticket's nonce */
	int64_t exp;    /* DB_CHECK: the ticket's expiry (epoch s) */
	char *sids;     /* DB_RECHECK: a uuid[] literal "{...}" */
	char user[256]; /* DB_WATCH_ON */
	char mode[8];   /* DB_WATCH_ON */
};

static struct {
	pthread_t thread;
	int started;
	pthread_mutex_t mu;
	struct db_req *rq_head, *rq_tail;
	struct db_result *rs_head, *rs_tail;
	int wake_fd;
	atomic_int stop;
	char *conninfo;
	char *environment;
	char *bridge_id; /* console_watchers.bridge: this bridge's console_listen */
	struct lws_context *ctx;
	/* worker-only */
	PGconn *pg;
	int up; /* -1 unknown, 0 down, 1 up */
	int64_t next_try;
	int backoff;
} W = {.mu = PTHREAD_MUTEX_INITIALIZER, .wake_fd = -1, .up = -1};

/* ------------------------------------------------------ both threads */

static void wake_worker(void)
{
	uint64_t one = 1;
	if (write(W.wake_fd, &one, sizeof one) < 0) {
		/* the counter is saturated: the worker is awake anyway */
	}
}

static int submit(struct db_req *r)
{
	pthread_mutex_lock(&W.mu);
	if (W.rq_tail)
		W.rq_tail->next = r;
	else
		W.rq_head = r;
	W.rq_tail = r;
	pthread_mutex_unlock(&W.mu);
	wake_worker();
	return 0;
}

int db_check(uint64_t conn_id, const char *sid, const char *vm, const char *nonce, int64_t exp)
{
	struct db_req *r = calloc(1, sizeof *r);
	if (!r)
		return -1;
	r->kind = DB_CHECK;
	r->conn_id = conn_id;
	snprintf(r->sid, sizeof r->sid, "%s", sid);
	snprintf(r->vm, sizeof r->vm, "%s", vm);
	snprintf(r->nonce, sizeof r->nonce, "%s", nonce);
	r->exp = exp;
	return submit(r);
}

int db_watch(int on, uint64_t conn_id, const char *sid, const char *vm, const char *user,
             const char *mode)
{
	struct db_req *r = calloc(1, sizeof *r);
	if (!r)
		return -1;
	r->kind = on ? DB_WATCH_ON : DB_WATCH_OFF;
	r->conn_id = conn_id;
	snprintf(r->sid, sizeof r->sid, "%s", sid);
	snprintf(r->vm, sizeof r->vm, "%s", vm);
	snprintf(r->user, sizeof r->user, "%s", user ? user : "");
	snprintf(r->mode, sizeof r->mode, "%s", mode ? mode : "view");
	return submit(r);
}

int db_recheck(char (*sids)[37], size_t n)
{
	if (!n)
		return 0;
	struct db_req *r = calloc(1, sizeof *r);
	if (!r)
		return -1;
	r->kind = DB_RECHECK;
	r->sids = malloc(n * 37 + 3);
	if (!r->sids) {
		free(r);
		return -1;
	}
	/* validated UUIDs only (path_sid, util_uuid_valid): safe in an array literal,
	 * and it travels as a parameter, not as SQL */
	char *p = r->sids;
	*p++ = '{';
	for (size_t i = 0; i < n; i++) {
		if (i)
			*p++ = ',';
		size_t l = strlen(sids[i]);
		memcpy(p, sids[i], l);
		p += l;
	}
	*p++ = '}';
	*p = '\0';
	return submit(r);
}

int db_activity(const char *sid)
{
	struct db_req *r = calloc(1, sizeof *r);
	if (!r)
		return -1;
	r->kind = DB_ACTIVITY;
	snprintf(r->sid, sizeof r->sid, "%s", sid);
	return submit(r);
}

struct db_result *db_results(void)
{
	pthread_mutex_lock(&W.mu);
	struct db_result *r = W.rs_head;
	W.rs_head = W.rs_tail = NULL;
	pthread_mutex_unlock(&W.mu);
	return r;
}

/* ------------------------------------------------------------ worker */

static void post(struct db_result *r)
{
	pthread_mutex_lock(&W.mu);
	if (W.rs_tail)
		W.rs_tail->next = r;
	else
		W.rs_head = r;
	W.rs_tail = r;
	pthread_mutex_unlock(&W.mu);
}

static void post_simple(enum db_kind kind, enum db_status st, uint64_t conn_id, const char *sid)
{
	struct db_result *r = calloc(1, sizeof *r);
	if (!r)
		return; /* the lws side times the check out */
	r->kind = kind;
	r->status = st;
	r->conn_id = conn_id;
	if (sid)
		snprintf(r->sid, sizeof r->sid, "%s", sid);
	post(r);
}

static void set_up(int up)
{
	if (W.up == up)
		return;
	W.up = up;
	struct db_result *r = calloc(1, sizeof *r);
	if (!r)
		return;
	r->kind = DB_STATUS;
	r->up = up;
	post(r);
}

static int pg_ok(void)
{
	return W.pg && PQstatus(W.pg) == CONNECTION_OK;
}

static int pg_command(const char *sql)
{
	PGresult *res = PQexec(W.pg, sql);
	int ok = PQresultStatus(res) == PGRES_COMMAND_OK;
	if (!ok)
		log_warn("database: %s: %s", sql, PQresultErrorMessage(res));
	PQclear(res);
	return ok ? 0 : -1;
}

static void pg_notice(void *arg, const char *msg)
{
	(void)arg;
	log_debug("database: %s", msg);
}

static int pg_session_setup(void)
{
	PQsetNoticeProcessor(W.pg, pg_notice, NULL);
	if (pg_command("SET statement_timeout = '5s'") < 0 ||
	    pg_command("SET idle_in_transaction_session_timeout = '10s'") < 0 ||
	    pg_command("SET application_name = 'labvm-console'") < 0 ||
	    pg_command("LISTEN " DB_CHANNEL) < 0)
		return -1;
	/* this bridge's watchers of before (a crash, a lost connection): its
	 * connections of now are written again below as they attach */
	const char *p[1] = {W.bridge_id};
	PGresult *res = PQexecParams(W.pg, "DELETE FROM console_watchers WHERE bridge = $1", 1,
	                             NULL, p, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		log_warn("database: clearing this bridge's watchers: %s",
		         PQresultErrorMessage(res));
	PQclear(res);
	return 0;
}

static void pg_connect(void)
{
	int64_t now = util_mono_ms();
	if (now < W.next_try)
		return;
	if (W.pg)
		PQfinish(W.pg);
	W.pg = db_connect(W.conninfo, 5); /* keepalives, connect_timeout */
	if (PQstatus(W.pg) == CONNECTION_OK && pg_session_setup() == 0) {
		if (W.up != 1)
			log_info("database: connected, listening on %s", DB_CHANNEL);
		W.backoff = DB_BACKOFF_MIN_MS;
		set_up(1);
		return;
	}
	if (W.up != 0) /* once per outage; libpq's message names no password */
		log_warn("database: %s", PQerrorMessage(W.pg));
	PQfinish(W.pg);
	W.pg = NULL;
	set_up(0);
	W.next_try = now + W.backoff;
	W.backoff = W.backoff * 2 > DB_BACKOFF_MAX_MS ? DB_BACKOFF_MAX_MS : W.backoff * 2;
}

/* After a failed query: if the connection is gone, try once to get it back
 * (a database restart) and say whether to retry the query. */
static int pg_recover(void)
{
	if (PQstatus(W.pg) == CONNECTION_OK)
		return 0;
	PQreset(W.pg);
	if (PQstatus(W.pg) == CONNECTION_OK && pg_session_setup() == 0)
		return 1;
	PQfinish(W.pg);
	W.pg = NULL;
	set_up(0);
	W.next_try = util_mono_ms() + W.backoff;
	return 0;
}

static void run_check(struct db_req *q)
{
	static unsigned checks;
	char exp[24];
	snprintf(exp, sizeof exp, "%lld", (long long)q->exp);
	const char *params[4] = {q->sid, W.environment, q->nonce, exp};
	PGresult *res = NULL;
	struct db_result *r;

	for (int attempt = 0; attempt < 2; attempt++) {
		if (!pg_ok())
			break;
		/* the sessions of this environment, and labvm-doctor's canaries
		 * (environment "<env>-doctor", fcgi-app/doctor/canary.c): the
		 * doctor opens their consoles through this very bridge, with a
		 * ticket of the same key (README "Before the class").
		 * The nonce is recorded whatever the session: single use holds across
		 * bridges and restarts; the last column says whether this was the
		 * first use (a session that is gone answers no row anyway) */
		res = PQexecParams(
		    W.pg,
		    "WITH used AS (INSERT INTO console_tickets_used (nonce, expires_at) "
		    "VALUES ($3, to_timestamp($4::float8)) ON CONFLICT DO NOTHING "
		    "RETURNING 1) "
		    "SELECT s.user_name, s.state, v.vm_name, s.runtime, "
		    "(SELECT count(*) FROM used) FROM sessions s "
		    "JOIN session_vms v ON v.session_id = s.id "
		    "WHERE s.id = $1 AND s.environment IN ($2, $2 || '-doctor')",
		    4, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) == PGRES_TUPLES_OK)
			break;
		log_warn("session %s: database check: %s", q->sid, PQresultErrorMessage(res));
		PQclear(res);
		res = NULL;
		if (!pg_recover())
			break;
	}
	if (!res) {
		post_simple(DB_CHECK, DB_UNAVAILABLE, q->conn_id, q->sid);
		return;
	}
	r = calloc(1, sizeof *r);
	if (!r) {
		PQclear(res);
		return;
	}
	r->kind = DB_CHECK;
	r->conn_id = q->conn_id;
	snprintf(r->sid, sizeof r->sid, "%s", q->sid);
	r->status = PQntuples(res) ? DB_VM_MISMATCH : DB_NOT_FOUND;
	for (int i = 0; i < PQntuples(res); i++) {
		if (strcmp(PQgetvalue(res, i, 2), q->vm) != 0)
			continue;
		r->status = strcmp(PQgetvalue(res, i, 4), "0") == 0 ? DB_TICKET_USED : DB_OK;
		snprintf(r->user, sizeof r->user, "%s", PQgetvalue(res, i, 0));
		r->state = session_state_parse(PQgetvalue(res, i, 1));
		snprintf(r->runtime, sizeof r->runtime, "%s", PQgetvalue(res, i, 3));
		break;
	}
	PQclear(res);
	post(r);
	/* now and then, forget the nonces of tickets long expired */
	if (++checks % 64 == 0 && pg_ok()) {
		res = PQexec(W.pg, "DELETE FROM console_tickets_used "
		                   "WHERE expires_at < now() - interval '10 minutes'");
		PQclear(res);
	}
}

/* A watcher's row written or deleted; lost with the database (the bridge
 * clears its rows when it is back). */
static void run_watch(struct db_req *q)
{
	char id[24];
	snprintf(id, sizeof id, "%llu", (unsigned long long)q->conn_id);
	const char *pon[6] = {W.bridge_id, id, q->sid, q->vm, q->user, q->mode};
	PGresult *res =
	    q->kind == DB_WATCH_ON
	        ? PQexecParams(W.pg,
	                       "INSERT INTO console_watchers (bridge, conn_id, session_id, "
	                       "vm_name, user_name, mode) SELECT $1, $2::bigint, id, $4, $5, $6 "
	                       "FROM sessions WHERE id = $3::uuid ON CONFLICT DO NOTHING",
	                       6, NULL, pon, NULL, NULL, 0)
	        : PQexecParams(W.pg,
	                       "DELETE FROM console_watchers WHERE bridge = $1 AND "
	                       "conn_id = $2::bigint",
	                       2, NULL, pon, NULL, NULL, 0);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		log_warn("session %s: console watcher %s: %s", q->sid,
		         q->kind == DB_WATCH_ON ? "on" : "off", PQresultErrorMessage(res));
	PQclear(res);
}

static void run_recheck(struct db_req *q)
{
	const char *params[2] = {q->sids, W.environment};
	PGresult *res = NULL;

	for (int attempt = 0; attempt < 2; attempt++) {
		if (!pg_ok())
			return; /* database down: keep the open consoles */
		res = PQexecParams(W.pg,
		                   "SELECT q.id::text FROM unnest($1::uuid[]) AS q(id) "
		                   "LEFT JOIN sessions s ON s.id = q.id "
		                   "AND s.environment IN ($2, $2 || '-doctor') "
		                   "WHERE s.state IS DISTINCT FROM 'ready'",
		                   2, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) == PGRES_TUPLES_OK)
			break;
		log_warn("database re-check: %s", PQresultErrorMessage(res));
		PQclear(res);
		res = NULL;
		if (!pg_recover())
			return;
	}
	if (!res)
		return;
	for (int i = 0; i < PQntuples(res); i++)
		post_simple(DB_ENDED, DB_OK, 0, PQgetvalue(res, i, 0));
	PQclear(res);
}

static void run_activity(struct db_req *q)
{
	const char *params[2] = {q->sid, W.environment};
	for (int attempt = 0; attempt < 2; attempt++) {
		if (!pg_ok())
			return;
		PGresult *res =
		    PQexecParams(W.pg,
		                 "UPDATE sessions SET last_activity_at = clock_timestamp() "
		                 "WHERE id = $1::uuid AND environment = $2 AND "
		                 "state = 'ready'",
		                 2, NULL, params, NULL, NULL, 0);
		int ok = PQresultStatus(res) == PGRES_COMMAND_OK;
		if (!ok)
			log_warn("session %s: recording activity: %s", q->sid,
			         PQresultErrorMessage(res));
		PQclear(res);
		if (ok || !pg_recover())
			return;
	}
}

static void drain_notifies(void)
{
	PGnotify *n;
	if (!pg_ok())
		return;
	if (!PQconsumeInput(W.pg)) {
		log_warn("database: %s", PQerrorMessage(W.pg));
		pg_recover();
		return;
	}
	while ((n = PQnotifies(W.pg))) {
		if (util_uuid_valid(n->extra))
			post_simple(DB_ENDED, DB_OK, 0, n->extra);
		PQfreemem(n);
	}
}

static void *worker(void *arg)
{
	(void)arg;
	W.backoff = DB_BACKOFF_MIN_MS;
	while (!W.stop) {
		if (!pg_ok())
			pg_connect();

		pthread_mutex_lock(&W.mu);
		struct db_req *q = W.rq_head, *next;
		W.rq_head = W.rq_tail = NULL;
		pthread_mutex_unlock(&W.mu);
		for (; q; q = next) {
			next = q->next;
			if (q->kind == DB_CHECK) {
				if (pg_ok())
					run_check(q);
				else
					post_simple(DB_CHECK, DB_UNAVAILABLE, q->conn_id, q->sid);
			} else if (q->kind == DB_RECHECK) {
				run_recheck(q);
			} else if ((q->kind == DB_WATCH_ON || q->kind == DB_WATCH_OFF) && pg_ok()) {
				run_watch(q);
			} else if (q->kind == DB_ACTIVITY) {
				run_activity(q);
			}
			free(q->sids);
			free(q);
		}
		drain_notifies();

		pthread_mutex_lock(&W.mu);
		int have = W.rs_head != NULL;
		int more = W.rq_head != NULL;
		pthread_mutex_unlock(&W.mu);
		if (have)
			lws_cancel_service(W.ctx);
		if (more)
			continue;

		struct pollfd pfd[2] = {{.fd = W.wake_fd, .events = POLLIN},
		                        {.fd = pg_ok() ? PQsocket(W.pg) : -1, .events = POLLIN}};
		int timeout = 1000;
		if (!pg_ok()) {
			int64_t wait = W.next_try - util_mono_ms();
			timeout = wait < 0 ? 0 : wait > 1000 ? 1000 : (int)wait;
		}
		if (poll(pfd, 2, timeout) < 0 && errno != EINTR)
			log_warn("database worker: poll: %s", strerror(errno));
		if (pfd[0].revents & POLLIN) {
			uint64_t v;
			if (read(W.wake_fd, &v, sizeof v) < 0) {
				/* EAGAIN: nothing to do */
			}
		}
	}
	if (W.pg)
		PQfinish(W.pg);
	W.pg = NULL;
	return NULL;
}

int db_start(const char *conninfo, const char *environment, const char *bridge_id,
             struct lws_context *ctx)
{
	W.conninfo = strdup(conninfo);
	W.environment = strdup(environment);
	W.bridge_id = strdup(bridge_id);
	W.ctx = ctx;
	W.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!W.conninfo || !W.environment || !W.bridge_id || W.wake_fd < 0)
		return -1;
	if (pthread_create(&W.thread, NULL, worker, NULL) != 0)
		return -1;
	W.started = 1;
	return 0;
}

void db_stop(void)
{
	if (W.started) {
		W.stop = 1;
		wake_worker();
		pthread_join(W.thread, NULL);
		W.started = 0;
	}
	for (struct db_req *q = W.rq_head, *n; q; q = n) {
		n = q->next;
		free(q->sids);
		free(q);
	}
	W.rq_head = W.rq_tail = NULL;
	for (struct db_result *r = db_results(), *n; r; r = n) {
		n = r->next;
		free(r);
	}
	if (W.wake_fd >= 0)
		close(W.wake_fd);
	W.wake_fd = -1;
	if (W.conninfo)
		explicit_bzero(W.conninfo, strlen(W.conninfo));
	free(W.conninfo);
	free(W.environment);
	free(W.bridge_id);
	W.conninfo = W.environment = W.bridge_id = NULL;
}
