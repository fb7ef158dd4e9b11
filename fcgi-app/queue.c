/* queue.c - the fair waiting line: join, leave, position and estimate,
 * lapse, and the pump that admits the head (see queue.h). */
#include "queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"
#include "lesson.h"
#include "log.h"
#include "session.h"

#define LOCK_LINE "7305"
#define PUMP_MAX  16 /* admissions one request makes at most */

const char *queue_pool(const struct lesson *l)
{
	return l->runtime == RUNTIME_POD ? "pod" : "vm";
}

int queue_capacity(const struct cfg *c, const char *pool)
{
	return strcmp(pool, "pod") == 0 ? c->pod_capacity : c->vm_capacity;
}

/* Places not seen for queue_lapse_s lapse (every pump, every position). */
static int lapse_stale(struct labctx *x)
{
	char lapse[16];
	snprintf(lapse, sizeof lapse, "%d", x->cfg->queue_lapse_s);
	const char *p[2] = {x->cfg->environment, lapse};
	PGresult *res = db_exec(&x->db,
	                        "UPDATE session_queue SET state = 'lapsed', ended_at = now() "
	                        "WHERE environment = $1 AND state = 'waiting' AND last_seen_at < "
	                        "now() - make_interval(secs => $2::int) RETURNING id, user_name",
	                        2, p);
	if (!res)
		return -1;
	for (int i = 0; i < PQntuples(res); i++)
		log_info("queue: user %s's place %s lapsed (no poll for %d s)", db_val(res, i, 1),
		         db_val(res, i, 0), x->cfg->queue_lapse_s);
	PQclear(res);
	return 0;
}

int queue_user_place(struct labctx *x, const char *user, cJSON **out)
{
	const char *p[2] = {x->cfg->environment, user};
	*out = NULL;
	PGresult *res = db_exec(&x->db,
	                        "SELECT id FROM session_queue WHERE environment = $1 AND "
	                        "user_name = $2 AND state = 'waiting'",
	                        2, p);
	if (!res)
		return -1;
	int found = PQntuples(res) > 0;
	if (found) {
		*out = queue_place_json(x, db_val(res, 0, 0));
		if (!*out)
			found = -1;
	}
	PQclear(res);
	return found;
}

long queue_seats_ahead(struct labctx *x, const char *pool, const char *qid)
{
	const char *p[3] = {x->cfg->environment, pool, qid};
	PGresult *res = db_exec(&x->db,
	                        "SELECT coalesce(sum(seats), 0) FROM session_queue WHERE "
	                        "environment = $1 AND pool = $2 AND state = 'waiting' AND "
	                        "($3::uuid IS NULL OR seq < (SELECT seq FROM session_queue "
	                        "WHERE id = $3::uuid))",
	                        3, p);
	if (!res)
		return -1;
	long n = atol(db_val(res, 0, 0));
	PQclear(res);
	return n;
}

int queue_claim(struct labctx *x, const char *qid)
{
	const char *p[1] = {qid};
	PGresult *res = db_exec(&x->db,
	                        "UPDATE session_queue SET state = 'admitted', ended_at = now() "
	                        "WHERE id = $1::uuid AND state = 'waiting' RETURNING id",
	                        1, p);
	if (!res)
		return -1;
	int n = PQntuples(res);
	PQclear(res);
	return n > 0;
}

int queue_join(struct labctx *x, const char *user, const struct lesson *l, long seats, char qid[37])
{
	char ns[16];
	if (util_uuid4(qid) < 0)
		return -1;
	snprintf(ns, sizeof ns, "%ld", seats);
	/* joins to one line one at a time: the order of seq is the order of the
	 * commits, so a position read after its join counts every place ahead */
	const char *pl[2] = {x->cfg->environment, queue_pool(l)};
	if (db_cmd(&x->db, "SELECT pg_advisory_xact_lock(" LOCK_LINE ", hashtext($1 || '/' || $2))",
	           2, pl) < 0)
		return -1;
	const char *p[6] = {qid, user, l->id, x->cfg->environment, queue_pool(l), ns};
	return db_cmd(&x->db,
	              "INSERT INTO session_queue (id, user_name, lesson, environment, pool, seats) "
	              "VALUES ($1::uuid, $2, $3, $4, $5, $6::int)",
	              6, p);
}

/* The estimate for the k-th seat to free (k counts the seats of the places
 * ahead and this place's own, less the seats free now): the bound is the
 * k-th earliest expiry of the sessions holding seats (a seat frees no later
 * than that); the estimate takes each seat's likely end from recent history
 * (the median length of sessions ended in the last three hours, at least 3
 * of them), never later than its expiry; a session already past the median
 * counts at its expiry. Both NULL when labvm cannot see k seats (other
 * environments' VMs hold them). */
static void add_estimate(struct labctx *x, cJSON *q, const char *pool, long k)
{
	if (k <= 0) {
		/* seats are free now: the next poll admits */
		PGresult *res = db_exec(&x->db, "SELECT labvm_ts(now())", 0, NULL);
		const char *now = res ? db_val(res, 0, 0) : NULL;
		jx_add_str(q, "no_later_than", now);
		jx_add_str(q, "estimate", now);
		PQclear(res);
		return;
	}
	char ks[24];
	snprintf(ks, sizeof ks, "%ld", k);
	const char *p[2] = {ks, pool};
	PGresult *res = db_exec(
	    &x->db,
	    "WITH seat AS (SELECT s.expires_at, coalesce(s.submitted_at, s.created_at) AS started "
	    "  FROM sessions s JOIN session_vms v ON v.session_id = s.id "
	    "  WHERE s.state IN ('starting', 'ready') AND s.runtime = $2), "
	    "hist AS (SELECT CASE WHEN count(*) >= 3 THEN percentile_cont(0.5) WITHIN GROUP "
	    "  (ORDER BY extract(epoch FROM ended_at - submitted_at)) END AS med "
	    "  FROM sessions WHERE state = 'ended' AND runtime = $2 AND submitted_at IS NOT "
	    "  NULL AND ended_at > now() - interval '3 hours'), "
	    "likely AS (SELECT CASE WHEN hist.med IS NOT NULL AND started + make_interval(secs "
	    "  => hist.med) > now() THEN least(expires_at, started + make_interval(secs => "
	    "  hist.med)) ELSE expires_at END AS t FROM seat, hist) "
	    "SELECT (SELECT labvm_ts(greatest(now(), expires_at)) FROM seat ORDER BY expires_at "
	    "  OFFSET $1::int - 1 LIMIT 1), "
	    "(SELECT labvm_ts(greatest(now(), t)) FROM likely ORDER BY t OFFSET $1::int - 1 "
	    "  LIMIT 1), (SELECT med FROM hist)",
	    2, p);
	if (!res) {
		jx_add_null(q, "no_later_than");
		jx_add_null(q, "estimate");
		return;
	}
	jx_add_str(q, "no_later_than", db_val(res, 0, 0));
	jx_add_str(q, "estimate", db_val(res, 0, 1));
	const char *med = db_val(res, 0, 2);
	if (med)
		jx_add_num(q, "typical_session_s", (double)(long)atof(med));
	PQclear(res);
}

cJSON *queue_place_json(struct labctx *x, const char *qid)
{
	const char *p[2] = {qid, x->cfg->environment};
	PGresult *res = db_exec(
	    &x->db,
	    "SELECT q.id, q.state, q.lesson, q.pool, q.seats, labvm_ts(q.joined_at), "
	    "labvm_ts(q.ended_at), q.error, "
	    "(SELECT count(*) FROM session_queue a WHERE a.environment = q.environment AND "
	    " a.pool = q.pool AND a.state = 'waiting' AND a.seq <= q.seq), "
	    "(SELECT coalesce(sum(seats), 0) FROM session_queue a WHERE a.environment = "
	    " q.environment AND a.pool = q.pool AND a.state = 'waiting' AND a.seq <= q.seq), "
	    "(SELECT count(*) FROM sessions s JOIN session_vms v ON v.session_id = s.id WHERE "
	    " s.state IN ('starting', 'ready') AND s.runtime = q.pool), q.user_name, "
	    "(SELECT count(*) FROM session_queue a WHERE a.environment = q.environment AND "
	    " a.pool = q.pool AND a.state = 'waiting') "
	    "FROM session_queue q WHERE q.id = $1::uuid AND q.environment = $2",
	    2, p);
	if (!res || PQntuples(res) == 0) {
		PQclear(res);
		return NULL;
	}
	const char *state = db_val(res, 0, 1);
	cJSON *o = jx_obj();
	jx_add_str(o, "id", db_val(res, 0, 0));
	jx_add_str(o, "user", db_val(res, 0, 11));
	jx_add_str(o, "lesson", db_val(res, 0, 2));
	jx_add_str(o, "created_at", db_val(res, 0, 5));
	if (strcmp(state, "waiting") == 0) {
		jx_add_str(o, "state", "queued");
		cJSON *q = jx_add_obj(o, "queue");
		long position = atol(db_val(res, 0, 8)), through = atol(db_val(res, 0, 9));
		long busy = atol(db_val(res, 0, 10));
		jx_add_num(q, "position", (double)position);
		jx_add_num(q, "ahead", (double)(position - 1));
		jx_add_num(q, "length", atof(db_val(res, 0, 12)));
		jx_add_str(q, "pool", db_val(res, 0, 3));
		jx_add_num(q, "seats", atof(db_val(res, 0, 4)));
		int cap = queue_capacity(x->cfg, db_val(res, 0, 3));
		jx_add_num(q, "capacity", cap);
		jx_add_str(q, "joined_at", db_val(res, 0, 5));
		jx_add_num(q, "lapse_after_s", x->cfg->queue_lapse_s);
		long freeseats = cap - busy;
		add_estimate(x, q, db_val(res, 0, 3), through - (freeseats > 0 ? freeseats : 0));
		jx_add_num(q, "poll_s", 2);
	} else {
		/* what became of the place: the API's words for the student */
		const char *st = strcmp(state, "waiting") == 0 ? "queued" : state;
		jx_add_str(o, "state", st);
		jx_add_str(o, "ended_at", db_val(res, 0, 6));
		if (strcmp(state, "lapsed") == 0)
			jx_add_str(
			    o, "message",
			    "your place in line lapsed: the page did not check in for a while. "
			    "Start again to join the line anew.");
		else if (db_val(res, 0, 7))
			jx_add_str(o, "message", db_val(res, 0, 7));
	}
	PQclear(res);
	return o;
}

/* Admit the heads of one pool's line while its seats look free. */
static void pump_pool(struct labctx *x, const char *pool)
{
	for (int i = 0; i < PUMP_MAX; i++) {
		/* the head, and the seats this database sees held: a cheap filter
		 * before the start counts in the cluster under the lock */
		const char *p[2] = {x->cfg->environment, pool};
		PGresult *res = db_exec(
		    &x->db,
		    "SELECT id, user_name, lesson, seats, (SELECT count(*) FROM sessions s JOIN "
		    "session_vms v ON v.session_id = s.id WHERE s.state IN ('starting', 'ready') "
		    "AND s.runtime = $2) FROM session_queue WHERE environment = $1 AND pool = $2 "
		    "AND state = 'waiting' ORDER BY seq LIMIT 1",
		    2, p);
		if (!res)
			return;
		if (PQntuples(res) == 0 || atol(db_val(res, 0, 4)) + atol(db_val(res, 0, 3)) >
		                               queue_capacity(x->cfg, pool)) {
			PQclear(res);
			return;
		}
		char *qid = xstrdup(db_val(res, 0, 0)), *user = xstrdup(db_val(res, 0, 1));
		char *lesson = xstrdup(db_val(res, 0, 2));
		PQclear(res);
		int rc = api_start_queued(x, qid, user, lesson);
		free(qid);
		free(user);
		free(lesson);
		if (rc != 1 && rc != 2)
			return;
	}
}

void queue_pump(struct labctx *x)
{
	if (lapse_stale(x) < 0)
		return;
	pump_pool(x, "vm");
	pump_pool(x, "pod");
}

/* The user's place: by id, or the waiting one (current). */
static char *find_place(struct req *r, int current, int *err)
{
	struct labctx *x = r->x;
	PGresult *res;
	*err = 0;
	if (current) {
		const char *p[2] = {x->cfg->environment, r->user};
		res = db_exec(&x->db,
		              "SELECT id FROM session_queue WHERE environment = $1 AND "
		              "user_name = $2 AND state = 'waiting'",
		              2, p);
	} else {
		if (!util_uuid_valid(r->param))
			return NULL;
		const char *p[3] = {r->param, x->cfg->environment, r->user};
		res = db_exec(&x->db,
		              "SELECT id FROM session_queue WHERE id = $1::uuid AND "
		              "environment = $2 AND user_name = $3",
		              3, p);
	}
	if (!res) {
		*err = 1;
		return NULL;
	}
	char *id = PQntuples(res) ? xstrdup(db_val(res, 0, 0)) : NULL;
	PQclear(res);
	return id;
}

int queue_route(struct req *r, handler_fn fn, int current, enum hres *h)
{
	struct labctx *x = r->x;
	int err;
	*h = H_DONE;
	char *qid = find_place(r, current, &err);
	if (err) {
		*h = api_db_error(r);
		return 1;
	}
	if (!qid)
		return 0;
	const char *p[1] = {qid};
	if (fn == api_session_delete) {
		if (db_cmd(&x->db,
		           "UPDATE session_queue SET state = 'left', ended_at = now() "
		           "WHERE id = $1::uuid AND state = 'waiting'",
		           1, p) < 0) {
			*h = api_db_error(r);
			free(qid);
			return 1;
		}
		log_info("queue: user %s left the line (place %s)", r->user, qid);
		queue_pump(x); /* the place may have held the head back */
	} else if (fn == api_session_get) {
		/* a poll: the place is alive, unless it lapsed already; then move
		 * the line, which may admit it */
		if (lapse_stale(x) < 0 ||
		    db_cmd(&x->db,
		           "UPDATE session_queue SET last_seen_at = now() WHERE id = $1::uuid AND "
		           "state = 'waiting'",
		           1, p) < 0) {
			*h = api_db_error(r);
			free(qid);
			return 1;
		}
		queue_pump(x);
		struct session s;
		if (session_load(x, qid, &s) == SESSION_FOUND) {
			/* admitted just now: the session it became */
			session_advance(x, &s);
			resp_json(r, 200, session_json(&s));
			session_free(&s);
			free(qid);
			return 1;
		}
	} else {
		resp_error(r, E_NOT_READY, "the lab is queued, not ready: wait for your turn");
		free(qid);
		return 1;
	}
	cJSON *o = queue_place_json(x, qid);
	free(qid);
	if (!o) {
		*h = api_db_error(r);
		return 1;
	}
	if (current && strcmp(kj_str(o, "state") ? kj_str(o, "state") : "", "queued") != 0) {
		cJSON_Delete(o);
		return 0;
	}
	resp_json(r, 200, o);
	return 1;
}
