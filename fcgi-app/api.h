/* api.h - the HTTP API's handlers (one file per resource) and the router.
 *
 * To add a route: write the handler here and in api_<resource>.c, add one
 * row to the table in router.c with what it needs (enum route_needs); the
 * router answers 401/415/400/404/409/503 for those needs before the handler
 * runs, so the handler starts from a checked request (r->sess, r->json).
 *
 * A handler writes exactly one response through resp_json()/resp_error()
 * and returns H_DONE, or returns H_DB_LOST when the database connection
 * dropped before anything changed in the cluster: the router then reconnects
 * and runs the handler once more (a restarted database costs one retry, not
 * an error). */
#ifndef LABVM_FCGI_API_H
#define LABVM_FCGI_API_H

#include "http.h"

enum hres { H_DONE = 0, H_DB_LOST = 1 };

enum route_needs {
	NEED_USER = 1 << 0,     /* REMOTE_USER must be set (401) */
	NEED_JSON = 1 << 1,     /* Content-Type application/json (415), body read and parsed */
	NEED_SESSION = 1 << 2,  /* r->sess: the {id} session, this user's (404 not_found) */
	NEED_CURRENT = 1 << 3,  /* r->sess: this user's open session (404 no_session) */
	NEED_ADVANCED = 1 << 4, /* ... moved on first (readiness, deadlines; session_advance) */
	NEED_READY = 1 << 5,    /* ... advanced and ready, with a VM (409 not_ready) */
	NEED_AGENT = 1 << 6,    /* ... and the VM's address is known (409 not_ready) */
};

typedef enum hres (*handler_fn)(struct req *r);

/* Route the request to its handler; always answers. */
void router_dispatch(struct req *r);

enum hres api_lessons(struct req *r);
/* GET /api/lessons/{id}/guide?lang=en|ja (api_guide.c): from memory only */
enum hres api_lesson_guide(struct req *r);
enum hres api_healthz(struct req *r);
enum hres api_session_create(struct req *r);
enum hres api_session_get(struct req *r);
enum hres api_session_delete(struct req *r);
enum hres api_session_grade(struct req *r);
enum hres api_console_ticket(struct req *r);
enum hres api_session_events(struct req *r);
enum hres api_tty_size(struct req *r);
enum hres api_metrics(struct req *r);
enum hres api_operator_overview(struct req *r);
enum hres api_operator_end(struct req *r);
/* After each answer: count the events the database cannot derive (api_metrics.c). */
void api_metrics_request_done(struct req *r);
/* Operators' routes (labvm.conf `operators`): 0 for an operator, else 1
 * with a 403 forbidden answered (api_metrics.c). */
int api_is_operator(const struct cfg *c, const char *user);
int api_refuse_non_operator(struct req *r);
/* the warm pool, for operators (api_pool.c) */
enum hres api_pool_get(struct req *r);
enum hres api_pool_warm(struct req *r);
enum hres api_pool_cancel(struct req *r);

/* Answer 503 for a database failure, or H_DB_LOST when a retry may help. */
enum hres api_db_error(struct req *r);

#endif
