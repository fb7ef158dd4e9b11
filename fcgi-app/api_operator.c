/* api_operator.c - the operator page's API (web/operator.html), for the
 * REMOTE_USERs listed in `operators` (labvm.conf; the routes' NEED_OPERATOR);
 * everyone else gets 403.
 *
 *   GET  /api/operator/overview[?n=N]   today's sessions, the VM capacity
 *        (limit, in use, queued: seats the waiting line holds, free: seats a
 *        one-machine start could take now, as admission decides), the
 *        readiness of the last N starts (default 50, at most 1000), recent
 *        failures with their stage and error, the warm pool (pool.h:
 *        warm requests, per lesson target/starting/ready/claimed/failed)
 *   POST /api/operator/sessions/{id}/end   end a session (end_reason
 *        "operator"); its VM and Secret are deleted as on a user's end
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admission.h"
#include "api.h"
#include "jsonx.h"
#include "log.h"
#include "pool.h"
#include "provision.h"
#include "queue.h"
#include "session_change.h"

static int query_n(struct req *r)
{
	const char *q = FCGX_GetParam("QUERY_STRING", r->fr->envp);
	int n = 50;
	if (q) {
		const char *p = strstr(q, "n=");
		if (p && (p == q || p[-1] == '&')) {
			long v = strtol(p + 2, NULL, 10);
			if (v >= 1 && v <= 1000)
				n = (int)v;
		}
	}
	return n;
}

static void add_num_or_null(cJSON *o, const char *key, const char *v)
{
	if (v)
		jx_add_num(o, key, strtod(v, NULL));
	else
		jx_add_null(o, key);
}

enum hres api_operator_overview(struct req *r)
{
	struct labctx *x = r->x;
	char nbuf[16];
	int n = query_n(r);
	snprintf(nbuf, sizeof nbuf, "%d", n);
	const char *p1[1] = {x->cfg->environment}, *p2[2] = {x->cfg->environment, nbuf};

	PGresult *today = db_exec(
	    &x->db,
	    "SELECT id, user_name, lesson, runtime, state, stage, disk_source, "
	    "disk_fallback_reason, "
	    "error, end_reason, labvm_ts(created_at), "
	    "extract(epoch FROM clock_timestamp() - created_at)::float8, "
	    "extract(epoch FROM ready_at - created_at)::float8 "
	    "FROM sessions WHERE environment = $1 AND created_at >= date_trunc('day', now()) "
	    "ORDER BY created_at DESC LIMIT 1000",
	    1, p1);
	PGresult *last = today ? db_exec(&x->db,
	                                 "SELECT lesson, state, stage, disk_source, "
	                                 "extract(epoch FROM running_at - created_at)::float8, "
	                                 "extract(epoch FROM ready_at - created_at)::float8 "
	                                 "FROM sessions WHERE environment = $1 "
	                                 "ORDER BY created_at DESC LIMIT $2::int",
	                                 2, p2)
	                       : NULL;
	PGresult *fails = last ? db_exec(&x->db,
	                                 "SELECT id, user_name, lesson, stage, error, "
	                                 "labvm_ts(created_at) FROM sessions "
	                                 "WHERE environment = $1 AND state = 'failed' "
	                                 "ORDER BY created_at DESC LIMIT 50",
	                                 1, p1)
	                       : NULL;
	if (!fails) {
		PQclear(today);
		PQclear(last);
		return api_db_error(r);
	}

	cJSON *o = jx_obj();
	jx_add_str(o, "operator", r->user);
	jx_add_str(o, "environment", x->cfg->environment);
	cJSON *a = jx_add_arr(o, "sessions");
	for (int i = 0; i < PQntuples(today); i++) {
		cJSON *s = jx_obj();
		jx_add_str(s, "id", db_val(today, i, 0));
		jx_add_str(s, "user", db_val(today, i, 1));
		jx_add_str(s, "lesson", db_val(today, i, 2));
		jx_add_str(s, "runtime", db_val(today, i, 3));
		jx_add_str(s, "state", db_val(today, i, 4));
		jx_add_str(s, "stage", db_val(today, i, 5));
		jx_add_str(s, "disk_source", db_val(today, i, 6));
		jx_add_str(s, "fallback_reason", db_val(today, i, 7));
		jx_add_str(s, "error", db_val(today, i, 8));
		jx_add_str(s, "end_reason", db_val(today, i, 9));
		jx_add_str(s, "created_at", db_val(today, i, 10));
		add_num_or_null(s, "age_s", db_val(today, i, 11));
		add_num_or_null(s, "ready_s", db_val(today, i, 12));
		jx_push(a, s);
	}
	cJSON *rd = jx_add_obj(o, "readiness");
	jx_add_num(rd, "n", n);
	a = jx_add_arr(rd, "starts");
	for (int i = 0; i < PQntuples(last); i++) {
		cJSON *s = jx_obj();
		jx_add_str(s, "lesson", db_val(last, i, 0));
		jx_add_str(s, "state", db_val(last, i, 1));
		jx_add_str(s, "stage", db_val(last, i, 2));
		jx_add_str(s, "disk_source", db_val(last, i, 3));
		add_num_or_null(s, "running_s", db_val(last, i, 4));
		add_num_or_null(s, "ready_s", db_val(last, i, 5));
		jx_push(a, s);
	}
	a = jx_add_arr(o, "failures");
	for (int i = 0; i < PQntuples(fails); i++) {
		cJSON *s = jx_obj();
		jx_add_str(s, "id", db_val(fails, i, 0));
		jx_add_str(s, "user", db_val(fails, i, 1));
		jx_add_str(s, "lesson", db_val(fails, i, 2));
		jx_add_str(s, "stage", db_val(fails, i, 3));
		jx_add_str(s, "error", db_val(fails, i, 4));
		jx_add_str(s, "created_at", db_val(fails, i, 5));
		jx_push(a, s);
	}
	PQclear(today);
	PQclear(last);
	PQclear(fails);

	/* the VM seats, counted and decided as admission does: in use, held by
	 * the waiting line, and free for a one-machine press now */
	const struct runtime_ops *rt = &runtime_vm;
	struct admission_facts f;
	long in_use = 0;
	admission_facts_init(&f, ADM_VIEW, 1, rt->capacity(x->cfg));
	f.in_use = lab_count(x, rt, &in_use) == 200 ? in_use : ADM_COUNT_FAILED;
	f.line_ahead = queue_seats_ahead(x, rt->name, NULL);
	struct admission v = admission_decide(&f);
	cJSON *cap = jx_add_obj(o, "capacity");
	jx_add_num(cap, "limit", (double)f.capacity);
	if (f.in_use >= 0)
		jx_add_num(cap, "in_use", (double)f.in_use);
	else
		jx_add_null(cap, "in_use");
	if (f.line_ahead >= 0)
		jx_add_num(cap, "queued", (double)f.line_ahead);
	else
		jx_add_null(cap, "queued");
	if (f.in_use >= 0 && f.line_ahead >= 0)
		jx_add_num(cap, "free",
		           v.verdict == ADM_ADMIT ? (double)(f.seats - v.short_by) : 0);
	else
		jx_add_null(cap, "free");

	cJSON *wp = pool_status_json(x);
	if (!wp)
		wp = jx_obj();
	jx_add_bool(wp, "available", 1);
	jx_put(o, "warm_pool", wp);
	resp_json(r, 200, o);
	return H_DONE;
}

enum hres api_operator_end(struct req *r)
{
	struct session s;
	int rc = session_load(r->x, r->param, &s);
	if (rc == SESSION_DBERR)
		return api_db_error(r);
	if (rc != SESSION_FOUND) {
		resp_error(r, E_NOT_FOUND, "no such session");
		return H_DONE;
	}
	if (session_active(&s)) {
		if (session_finish(r->x, &s, SESSION_ENDED, "operator", NULL) < 0) {
			session_free(&s);
			resp_error(r, E_DB_UNAVAILABLE, "the database is unavailable: try again");
			return H_DONE;
		}
		log_info("operator %s ended session %s of user %s (lesson %s)", r->user, s.id,
		         s.user, s.lesson);
	} else {
		session_delete_objects(r->x, &s);
	}
	resp_json(r, 200, session_json(&s));
	session_free(&s);
	return H_DONE;
}
