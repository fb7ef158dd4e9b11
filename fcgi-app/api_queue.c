/* api_queue.c - the waiting line's answers (queue.h): joining it, and what a
 * session route answers for a place in it (the route table's `queued`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "jsonx.h"
#include "locks.h"
#include "log.h"
#include "pump.h"
#include "queue.h"
#include "session.h"

/* Refused for capacity only, asked to wait: a place in line (202), under
 * the user's lock again (the start's transaction is gone): an open session
 * or place that appeared meanwhile is the answer, as for a start. */
enum hres api_queue_join(struct req *r, const struct lesson *l, long seats)
{
	struct labctx *x = r->x;
	struct session s;
	cJSON *place = NULL;
	char qid[37];
	const char *pu[2] = {x->cfg->environment, r->user};
	if (db_begin(&x->db) < 0 ||
	    db_cmd(&x->db, "SELECT pg_advisory_xact_lock(" LOCK_USER ", hashtext($1 || '/' || $2))",
	           2, pu) < 0)
		goto dberr;
	int rc = session_load_active(x, r->user, &s);
	if (rc == SESSION_DBERR)
		goto dberr;
	if (rc == SESSION_FOUND) {
		db_rollback(&x->db);
		cJSON *o = error_json(E_SESSION_EXISTS, "you already have a lab session open");
		jx_put(o, "session", session_json(&s));
		session_free(&s);
		resp_error_json(r, E_SESSION_EXISTS, o);
		return H_DONE;
	}
	int got = queue_user_place(x, r->user, &place);
	if (got < 0)
		goto dberr;
	if (got) {
		db_rollback(&x->db);
		cJSON *o =
		    error_json(E_SESSION_EXISTS, "you are already waiting in line for a lab");
		jx_put(o, "session", place);
		resp_error_json(r, E_SESSION_EXISTS, o);
		return H_DONE;
	}
	if (queue_join(x, r->user, l, seats, qid) < 0 || db_commit(&x->db) < 0)
		goto dberr;
	log_info("queue: user %s joined the line for lesson %s (place %s)", r->user, l->id, qid);
	cJSON *o = queue_place_json(x, qid);
	if (!o) {
		resp_error(r, E_DB_UNAVAILABLE, "the place was taken but cannot be read");
		return H_DONE;
	}
	/* what the student was told on joining, for the estimate's error */
	queue_record_estimate(x, qid, o);
	resp_json(r, 202, o);
	return H_DONE;
dberr:
	db_rollback(&x->db);
	return api_db_error(r);
}

int api_queue_route(struct req *r, enum queued_answer q, int current, enum hres *h)
{
	struct labctx *x = r->x;
	int err;
	*h = H_DONE;
	char *qid = queue_find_place(x, r->user, current ? NULL : r->param, &err);
	if (err) {
		*h = api_db_error(r);
		return 1;
	}
	if (!qid)
		return 0;
	switch (q) {
	case QUEUED_LEAVE:
		if (queue_leave(x, qid) < 0) {
			*h = api_db_error(r);
			free(qid);
			return 1;
		}
		log_info("queue: user %s left the line (place %s)", r->user, qid);
		queue_pump(x); /* the place may have held the head back */
		break;
	case QUEUED_POLL: {
		/* a poll: the place is alive, unless it lapsed already; then move
		 * the line, which may admit it */
		if (queue_lapse_stale(x) < 0 || queue_seen(x, qid) < 0) {
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
		break;
	}
	case QUEUED_NOT_READY:
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
