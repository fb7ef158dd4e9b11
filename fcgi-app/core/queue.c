/* queue.c - the waiting line's data: join, claim, leave, lapse, drop, the
 * head, position and estimate (see queue.h). */
#include "queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "admission.h"
#include "jsonx.h"
#include "lesson.h"
#include "locks.h"
#include "log.h"
#include "runtime.h"
#include "util.h"

static const char *const state_names[] = {
    [PLACE_WAITING] = "waiting", [PLACE_ADMITTED] = "admitted", [PLACE_LEFT] = "left",
    [PLACE_LAPSED] = "lapsed",   [PLACE_FAILED] = "failed",
};
#define NSTATES (sizeof state_names / sizeof state_names[0])
#define WAITING state_names[PLACE_WAITING]

const char *queue_place_state_str(enum queue_place_state st)
{
	return (size_t)st < NSTATES ? state_names[st] : "unknown";
}

int queue_place_state_parse(const char *v)
{
	return util_name_index(state_names, NSTATES, v);
}

/* One move out of waiting (the UPDATE names its columns past the state). */
static int move(struct labctx *x, const char *qid, enum queue_place_state to, const char *error)
{
	const char *p[4] = {qid, queue_place_state_str(to), WAITING, error};
	PGresult *res = db_exec(&x->db,
	                        "UPDATE session_queue SET state = $2, ended_at = now(), "
	                        "error = coalesce($4, error) "
	                        "WHERE id = $1::uuid AND state = $3 RETURNING id",
	                        4, p);
	if (!res)
		return -1;
	int n = PQntuples(res);
	PQclear(res);
	return n > 0;
}

int queue_claim(struct labctx *x, const char *qid)
{
	return move(x, qid, PLACE_ADMITTED, NULL);
}

int queue_leave(struct labctx *x, const char *qid)
{
	return move(x, qid, PLACE_LEFT, NULL);
}

int queue_drop(struct labctx *x, const char *qid, const char *error)
{
	return move(x, qid, PLACE_FAILED, error);
}

int queue_seen(struct labctx *x, const char *qid)
{
	const char *p[2] = {qid, WAITING};
	return db_cmd(&x->db,
	              "UPDATE session_queue SET last_seen_at = now() WHERE id = $1::uuid AND "
	              "state = $2",
	              2, p);
}

int queue_lapse_stale(struct labctx *x)
{
	char lapse[16];
	snprintf(lapse, sizeof lapse, "%d", x->cfg->queue_lapse_s);
	const char *p[4] = {x->cfg->environment, lapse, queue_place_state_str(PLACE_LAPSED),
	                    WAITING};
	PGresult *res = db_exec(&x->db,
	                        "UPDATE session_queue SET state = $3, ended_at = now() "
	                        "WHERE environment = $1 AND state = $4 AND last_seen_at < "
	                        "now() - make_interval(secs => $2::int) RETURNING id, user_name",
	                        4, p);
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

int queue_join(struct labctx *x, const char *user, const struct lesson *l, long seats, char qid[37])
{
	char ns[16];
	if (util_uuid4(qid) < 0)
		return -1;
	snprintf(ns, sizeof ns, "%ld", seats);
	/* joins to one line one at a time: the order of seq is the order of the
	 * commits, so a position read after its join counts every place ahead */
	const char *pool = runtime_of(l->runtime)->name;
	const char *pl[2] = {x->cfg->environment, pool};
	if (db_cmd(&x->db, "SELECT pg_advisory_xact_lock(" LOCK_LINE ", hashtext($1 || '/' || $2))",
	           2, pl) < 0)
		return -1;
	const char *p[6] = {qid, user, l->id, x->cfg->environment, pool, ns};
	return db_cmd(&x->db,
	              "INSERT INTO session_queue (id, user_name, lesson, environment, pool, seats) "
	              "VALUES ($1::uuid, $2, $3, $4, $5, $6::int)",
	              6, p);
}

/* The longest a session can hold a seat from its admission: the longest
 * lesson's minutes plus its start deadlines (minutes count from ready). */
static double longest_hold_s(const struct labctx *x)
{
	double m = 0;
	for (size_t i = 0; x->lessons && i < x->lessons->n; i++) {
		const struct lesson *l = &x->lessons->v[i];
		double h = l->minutes * 60.0 + l->running_timeout_s + l->ready_timeout_s;
		if (h > m)
			m = h;
	}
	return m;
}

long long queue_kth_free(long long *t, size_t n, long k, long long next)
{
	long long at = 0;
	for (long j = 0; j < k; j++) {
		size_t m = 0;
		for (size_t i = 1; i < n; i++)
			if (t[i] < t[m])
				m = i;
		at = t[m];
		t[m] += next;
	}
	return at;
}

/* Microseconds since the epoch as labvm_ts() writes them (ms truncated). */
static void add_ts(cJSON *q, const char *key, long long us)
{
	char buf[40];
	time_t s = (time_t)(us / 1000000);
	struct tm tm;
	gmtime_r(&s, &tm);
	size_t n = strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, sizeof buf - n, ".%03dZ", (int)(us % 1000000 / 1000));
	jx_add_str(q, key, buf);
}

/* The estimate for the k-th seat to free (k counts the seats of the places
 * ahead and this place's own, less the seats free now). The bound: each
 * seat frees no later than its session's expiry, and a seat that goes to a
 * place ahead frees again no later than the longest hold after (so the
 * k-th seat, k within the seats held, frees no later than the k-th earliest
 * expiry). The estimate takes each seat's likely end from recent history
 * (the median length of sessions ended in the last three hours, at least 3
 * of them), never later than its expiry (a session already past the median
 * counts at its expiry), and the median for the places ahead; without
 * history it is the bound. Both null when labvm sees no seat held (other
 * environments' VMs hold them). */
static void add_estimate(struct labctx *x, cJSON *q, const char *pool, long k)
{
	const char *p[1] = {pool};
	PGresult *res = db_exec(
	    &x->db,
	    "WITH seat AS (SELECT s.expires_at, coalesce(s.submitted_at, s.created_at) AS started "
	    "  FROM sessions s JOIN session_vms v ON v.session_id = s.id "
	    "  WHERE s.state IN ('starting', 'ready') AND s.runtime = $1), "
	    "hist AS (SELECT CASE WHEN count(*) >= 3 THEN percentile_cont(0.5) WITHIN GROUP "
	    "  (ORDER BY extract(epoch FROM ended_at - submitted_at)) END AS med "
	    "  FROM sessions WHERE state = 'ended' AND runtime = $1 AND submitted_at IS NOT "
	    "  NULL AND ended_at > now() - interval '3 hours') "
	    "SELECT (extract(epoch FROM now()) * 1000000)::bigint, hist.med, "
	    "  (extract(epoch FROM greatest(now(), seat.expires_at)) * 1000000)::bigint, "
	    "  (extract(epoch FROM greatest(now(), CASE WHEN hist.med IS NOT NULL AND "
	    "  seat.started + make_interval(secs => hist.med) > now() THEN "
	    "  least(seat.expires_at, seat.started + make_interval(secs => hist.med)) ELSE "
	    "  seat.expires_at END)) * 1000000)::bigint FROM hist LEFT JOIN seat ON true",
	    1, p);
	if (!res || PQntuples(res) == 0) {
		PQclear(res);
		jx_add_null(q, "no_later_than");
		jx_add_null(q, "estimate");
		return;
	}
	long long now = atoll(db_val(res, 0, 0));
	const char *med = db_val(res, 0, 1);
	if (k <= 0) {
		/* seats are free now: the next poll admits */
		add_ts(q, "no_later_than", now);
		add_ts(q, "estimate", now);
	} else if (!db_val(res, 0, 2)) {
		jx_add_null(q, "no_later_than");
		jx_add_null(q, "estimate");
	} else {
		size_t n = (size_t)PQntuples(res);
		long long *b = xcalloc(n, sizeof *b), *e = xcalloc(n, sizeof *e);
		for (size_t i = 0; i < n; i++) {
			b[i] = atoll(db_val(res, (int)i, 2));
			e[i] = atoll(db_val(res, (int)i, 3));
		}
		long long hold = (long long)(longest_hold_s(x) * 1e6);
		add_ts(q, "no_later_than", queue_kth_free(b, n, k, hold));
		add_ts(q, "estimate",
		       queue_kth_free(e, n, k, med ? (long long)(atof(med) * 1e6) : hold));
		free(b);
		free(e);
	}
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
	int state = queue_place_state_parse(db_val(res, 0, 1));
	cJSON *o = jx_obj();
	jx_add_str(o, "id", db_val(res, 0, 0));
	jx_add_str(o, "user", db_val(res, 0, 11));
	jx_add_str(o, "lesson", db_val(res, 0, 2));
	jx_add_str(o, "created_at", db_val(res, 0, 5));
	if (state == PLACE_WAITING) {
		jx_add_str(o, "state", "queued");
		cJSON *q = jx_add_obj(o, "queue");
		long position = atol(db_val(res, 0, 8)), through = atol(db_val(res, 0, 9));
		long busy = atol(db_val(res, 0, 10));
		jx_add_num(q, "position", (double)position);
		jx_add_num(q, "ahead", (double)(position - 1));
		jx_add_num(q, "length", atof(db_val(res, 0, 12)));
		jx_add_str(q, "pool", db_val(res, 0, 3));
		jx_add_num(q, "seats", atof(db_val(res, 0, 4)));
		const struct runtime_ops *rt = runtime_named(db_val(res, 0, 3));
		int cap = rt ? rt->capacity(x->cfg) : 0;
		jx_add_num(q, "capacity", cap);
		jx_add_str(q, "joined_at", db_val(res, 0, 5));
		jx_add_num(q, "lapse_after_s", x->cfg->queue_lapse_s);
		/* the seats to wait for: this place's and those ahead of it, less
		 * the seats free now (the admission's count, on what this database
		 * sees held) */
		struct admission_facts f;
		long seats = atol(db_val(res, 0, 4));
		admission_facts_init(&f, ADM_VIEW, seats, cap);
		f.line_ahead = through - seats;
		f.in_use = busy;
		struct admission a = admission_decide(&f);
		add_estimate(x, q, db_val(res, 0, 3), seats + f.line_ahead - a.free_now);
		jx_add_num(q, "poll_s", 2);
	} else {
		/* what became of the place: the API's words for the student */
		jx_add_str(o, "state", db_val(res, 0, 1));
		jx_add_str(o, "ended_at", db_val(res, 0, 6));
		if (state == PLACE_LAPSED)
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

int queue_head(struct labctx *x, const char *pool, struct queue_head *h)
{
	const char *p[3] = {x->cfg->environment, pool, WAITING};
	memset(h, 0, sizeof *h);
	PGresult *res =
	    db_exec(&x->db,
	            "SELECT id, user_name, lesson, seats, (SELECT count(*) FROM sessions s JOIN "
	            "session_vms v ON v.session_id = s.id WHERE s.state IN ('starting', 'ready') "
	            "AND s.runtime = $2) FROM session_queue WHERE environment = $1 AND pool = $2 "
	            "AND state = $3 ORDER BY seq LIMIT 1",
	            3, p);
	if (!res)
		return -1;
	int found = PQntuples(res) > 0;
	if (found) {
		snprintf(h->id, sizeof h->id, "%s", db_val(res, 0, 0));
		h->user = xstrdup(db_val(res, 0, 1));
		h->lesson = xstrdup(db_val(res, 0, 2));
		h->seats = atol(db_val(res, 0, 3));
		h->busy = atol(db_val(res, 0, 4));
	}
	PQclear(res);
	return found;
}

void queue_head_free(struct queue_head *h)
{
	free(h->user);
	free(h->lesson);
	memset(h, 0, sizeof *h);
}

char *queue_find_place(struct labctx *x, const char *user, const char *id, int *err)
{
	PGresult *res;
	*err = 0;
	if (!id) {
		const char *p[3] = {x->cfg->environment, user, WAITING};
		res = db_exec(&x->db,
		              "SELECT id FROM session_queue WHERE environment = $1 AND "
		              "user_name = $2 AND state = $3",
		              3, p);
	} else {
		if (!util_uuid_valid(id))
			return NULL;
		const char *p[3] = {id, x->cfg->environment, user};
		res = db_exec(&x->db,
		              "SELECT id FROM session_queue WHERE id = $1::uuid AND "
		              "environment = $2 AND user_name = $3",
		              3, p);
	}
	if (!res) {
		*err = 1;
		return NULL;
	}
	char *found = PQntuples(res) ? xstrdup(db_val(res, 0, 0)) : NULL;
	PQclear(res);
	return found;
}

void queue_record_estimate(struct labctx *x, const char *qid, const cJSON *place)
{
	const cJSON *q = cJSON_GetObjectItemCaseSensitive(place, "queue");
	const char *p[3] = {qid, kj_str(q, "estimate"), kj_str(q, "no_later_than")};
	db_cmd(&x->db,
	       "UPDATE session_queue SET estimate_at = $2::timestamptz, bound_at = "
	       "$3::timestamptz WHERE id = $1::uuid",
	       3, p);
}
