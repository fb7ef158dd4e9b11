/* api.h - the HTTP API's handlers (one file per resource) and the router.
 *
 * To add a route:
 *   1. its handler: `enum hres api_<what>(struct req *r)` declared here and
 *      written in api_<resource>.c (a new file: add it to FCGI_LIB_SRC in
 *      the GNUmakefile); model: api_misc.c (a read) or api_pool.c (an
 *      operator's write). It parses, calls the core and answers: one
 *      resp_json()/resp_error() and H_DONE, or api_db_error() (http.h);
 *   2. one row in router.c's table: method, pattern ('*' is the {id}
 *      segment, r->param), the handler, and its needs (enum route_needs):
 *      the router answers 401/403/415/400/404/409/503 for those before the
 *      handler runs, so the handler starts from a checked request (r->user,
 *      r->json, r->sess); a session route also says what a place in the
 *      waiting line answers instead (enum queued_answer), and a NEED_READY
 *      one the end of its 409 message;
 *   3. a new error code: a value in http.h's enum api_err and its row in
 *      http.c's table;
 *   4. a test in tests/integration (tests/lib/labclient.py talks to the API).
 *
 * A handler writes exactly one response and returns H_DONE, or returns
 * H_DB_LOST when the database connection dropped before anything changed in
 * the cluster: the router then reconnects and runs the handler once more (a
 * restarted database costs one retry, not an error). */
#ifndef LABVM_FCGI_API_H
#define LABVM_FCGI_API_H

#include "http.h"

enum route_needs {
	NEED_USER = 1 << 0,     /* REMOTE_USER must be set (401) */
	NEED_JSON = 1 << 1,     /* Content-Type application/json (415), body read and parsed */
	NEED_SESSION = 1 << 2,  /* r->sess: the {id} session, this user's (404 not_found) */
	NEED_CURRENT = 1 << 3,  /* r->sess: this user's open session (404 no_session) */
	NEED_ADVANCED = 1 << 4, /* ... moved on first (readiness, deadlines; session_advance) */
	NEED_READY = 1 << 5,    /* ... advanced and ready, with a VM (409 not_ready) */
	NEED_AGENT = 1 << 6,    /* ... and the VM's address is known (409 not_ready) */
	NEED_OPERATOR = 1 << 7, /* the user is in labvm.conf `operators` (403 forbidden) */
};

/* A session route (NEED_SESSION, NEED_CURRENT) when the user has no session
 * there but a place in the waiting line (api_queue.c): */
enum queued_answer {
	QUEUED_NOT_READY = 0, /* 409 not_ready: the lab is queued */
	QUEUED_POLL,          /* the place (position, estimate), after moving the line */
	QUEUED_LEAVE,         /* leave the line; the place as it ended */
};

typedef enum hres (*handler_fn)(struct req *r);

/* Route the request to its handler; always answers. */
void router_dispatch(struct req *r);

/* api_misc.c */
enum hres api_lessons(struct req *r);
enum hres api_healthz(struct req *r);
/* GET /api/lessons/{id}/guide?lang=en|ja (api_guide.c): from memory only */
enum hres api_lesson_guide(struct req *r);
/* api_sessions.c: start, read, end */
enum hres api_session_create(struct req *r);
/* 201 with session sid as session_json() writes it (the start, a teacher's
 * reset), or 503 when it cannot be read back. */
enum hres api_created_session(struct req *r, const char *sid);
enum hres api_session_get(struct req *r);
enum hres api_session_delete(struct req *r);
/* api_grade.c */
enum hres api_session_grade(struct req *r);
/* api_console.c */
enum hres api_console_ticket(struct req *r);
enum hres api_tty_size(struct req *r);
/* api_events.c */
enum hres api_session_events(struct req *r);
/* api_idle.c (issue #28) */
enum hres api_session_activity(struct req *r);
enum hres api_session_extend(struct req *r);
/* api_metrics.c, api_operator.c, api_pool.c: operators only (NEED_OPERATOR) */
enum hres api_metrics(struct req *r);
enum hres api_operator_overview(struct req *r);
enum hres api_operator_end(struct req *r);
enum hres api_pool_get(struct req *r);
enum hres api_pool_warm(struct req *r);
enum hres api_pool_cancel(struct req *r);
/* api_teacher.c: the teacher's room (issue #29). Every route answers 404
 * for anything outside the lessons the caller teaches (never 403). */
enum hres api_teacher_lessons(struct req *r);
enum hres api_teacher_class(struct req *r);
enum hres api_teacher_grades_csv(struct req *r);
enum hres api_teacher_audit(struct req *r);
enum hres api_teacher_ticket(struct req *r);
enum hres api_teacher_extend(struct req *r);
enum hres api_teacher_reset(struct req *r);
enum hres api_teacher_end(struct req *r);
/* GET /api/sessions/{id}/grades: the student's own grade history */
enum hres api_session_grades(struct req *r);
/* user is in a comma/space separated list of labvm.conf (operators, teachers) */
int api_user_listed(const char *list, const char *user);
/* user teaches lesson l: an operator, in `teachers`, or in the lesson's own */
int api_teaches(const struct cfg *c, const struct lesson *l, const char *user);
/* If-None-Match names etag, weakly (api_guide.c) */
int api_none_match(const char *inm, const char *etag);
/* After each answer: count the events the database cannot derive (api_metrics.c). */
void api_metrics_request_done(struct req *r);

/* api_queue.c: the waiting line's answers. Join it (a start refused only
 * for capacity, "queue": true): 202 and the place, under the user's lock. */
enum hres api_queue_join(struct req *r, const struct lesson *l, long seats);
/* The router's hook for a session route that found no session: answer for
 * the user's place in the line as the route says (q). 1 answered (*h), 0
 * not a place of this user. current: the route is /api/sessions/current. */
int api_queue_route(struct req *r, enum queued_answer q, int current, enum hres *h);

#endif
