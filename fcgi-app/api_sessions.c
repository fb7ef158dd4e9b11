/* api_sessions.c - POST /api/sessions (start), GET /api/sessions/{id} and
 * /current (read), DELETE /api/sessions/{id} (end): cgit's cmd.c style,
 * each handler parses, calls and answers. The start itself is start.h; the
 * other session routes get their session from the router (r->sess: loaded,
 * the user's own, advanced and ready as the route table in router.c says);
 * a place in the waiting line answers for itself (api_queue.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "jsonx.h"
#include "provision.h"
#include "pump.h"
#include "session_change.h"
#include "start.h"

/* The request: a lesson that exists, and whether to wait in line. 0 ok, -1
 * answered. */
static int parse_start(struct req *r, struct start *st, int *want_queue)
{
	const cJSON *lid = cJSON_GetObjectItemCaseSensitive(r->json, "lesson");
	if (!cJSON_IsObject(r->json) || !cJSON_IsString(lid) || !lid->valuestring[0]) {
		resp_error(r, E_BAD_REQUEST, "expected {\"lesson\": \"<lesson id>\"}");
		return -1;
	}
	st->lesson = lessons_find(r->x->lessons, lid->valuestring);
	if (!st->lesson) {
		resp_error(r, E_UNKNOWN_LESSON, "there is no lesson \"%.100s\"", lid->valuestring);
		return -1;
	}
	const cJSON *q = cJSON_GetObjectItemCaseSensitive(r->json, "queue");
	if (q && !cJSON_IsBool(q)) {
		resp_error(r, E_BAD_REQUEST, "\"queue\" must be true or false");
		return -1;
	}
	*want_queue = cJSON_IsTrue(q);
	return 0;
}

enum hres api_created_session(struct req *r, const char *sid)
{
	struct session s;
	if (session_load(r->x, sid, &s) != SESSION_FOUND) {
		resp_error(r, E_DB_UNAVAILABLE, "the session was created but cannot be read");
		return H_DONE;
	}
	resp_json(r, 201, session_json(&s));
	session_free(&s);
	return H_DONE;
}

enum hres api_session_create(struct req *r)
{
	struct labctx *x = r->x;
	struct start st;
	enum hres h = H_DONE;
	int want_queue = 0;

	memset(&st, 0, sizeof st);
	st.x = x;
	st.user = r->user;
	st.pressed = r->t_wall;
	if (parse_start(r, &st, &want_queue) < 0)
		return H_DONE;
	enum step rc = start_run(&st);
	if (rc != STEP_OK) {
		int capacity_full = rc == STEP_REFUSED && st.err == E_CAPACITY_FULL;
		/* seats free, but held back for the line: move it */
		int seats_free = capacity_full && st.adm.free_now > 0;
		if (capacity_full && want_queue) {
			h = api_queue_join(r, st.lesson, (long)st.plan.n);
		} else if (rc == STEP_DB) {
			h = api_db_error(r);
		} else {
			if (st.retry_after_s > 0)
				resp_header(r, "Retry-After", "%ld", st.retry_after_s);
			resp_error_json(r, st.err, st.answer);
			st.answer = NULL;
		}
		start_done(&st);
		if (seats_free)
			queue_pump(x);
		return h;
	}
	char sid[37];
	snprintf(sid, sizeof sid, "%s", st.sid);
	start_done(&st);
	return api_created_session(r, sid);
}

enum hres api_session_get(struct req *r)
{
	resp_json(r, 200, session_json(r->sess));
	return H_DONE;
}

enum hres api_session_delete(struct req *r)
{
	struct session *s = r->sess;
	if (session_active(s)) {
		if (session_finish(r->x, s, SESSION_ENDED, "user", NULL) < 0) {
			resp_error(r, E_DB_UNAVAILABLE, "the database is unavailable: try again");
			return H_DONE;
		}
		/* a seat freed (once its VM is gone): the line's head may take it */
		queue_pump(r->x);
	} else {
		/* ended or failed already: make sure nothing is left (idempotent) */
		session_delete_objects(r->x, s);
	}
	resp_json(r, 200, session_json(s));
	return H_DONE;
}
