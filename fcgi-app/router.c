/* router.c - the route table (cgit style): method, path pattern, handler,
 * requirements checked centrally before the handler runs (cgit's want_repo:
 * here the user, the JSON body, the session, its readiness). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "jsonx.h"
#include "log.h"
#include "pump.h"
#include "session.h"
#include "ticket.h"

struct route {
	const char *method;
	const char *pattern; /* '*' matches one path segment: the {id} */
	handler_fn fn;
	unsigned needs;
	const char *not_ready;     /* NEED_READY: the end of the 409 message */
	enum queued_answer queued; /* a session route, for a place in the line */
};

#define OWN_SESSION (NEED_USER | NEED_SESSION)
#define OPERATOR    (NEED_USER | NEED_OPERATOR)

static const struct route routes[] = {
    {"GET", "/api/lessons", api_lessons, NEED_USER, NULL, 0},
    {"GET", "/api/lessons/*/guide", api_lesson_guide, NEED_USER, NULL, 0},
    {"GET", "/api/healthz", api_healthz, 0, NULL, 0},
    {"GET", "/api/metrics", api_metrics, OPERATOR, NULL, 0},
    {"GET", "/api/operator/overview", api_operator_overview, OPERATOR, NULL, 0},
    {"POST", "/api/operator/sessions/*/end", api_operator_end, OPERATOR | NEED_JSON, NULL, 0},
    {"POST", "/api/sessions", api_session_create, NEED_USER | NEED_JSON, NULL, 0},
    {"GET", "/api/sessions/current", api_session_get, NEED_USER | NEED_CURRENT | NEED_ADVANCED,
     NULL, QUEUED_POLL},
    {"GET", "/api/sessions/*", api_session_get, OWN_SESSION | NEED_ADVANCED, NULL, QUEUED_POLL},
    {"DELETE", "/api/sessions/*", api_session_delete, OWN_SESSION, NULL, QUEUED_LEAVE},
    {"GET", "/api/sessions/*/events", api_session_events, OWN_SESSION | NEED_ADVANCED, NULL,
     QUEUED_NOT_READY},
    {"POST", "/api/sessions/*/grade", api_session_grade, OWN_SESSION | NEED_JSON | NEED_READY,
     "nothing to grade", QUEUED_NOT_READY},
    {"POST", "/api/sessions/*/activity", api_session_activity, OWN_SESSION | NEED_JSON | NEED_READY,
     "nothing to keep open", QUEUED_NOT_READY},
    {"POST", "/api/sessions/*/extend", api_session_extend, OWN_SESSION | NEED_JSON | NEED_READY,
     "nothing to extend", QUEUED_NOT_READY},
    {"POST", "/api/sessions/*/console-ticket", api_console_ticket,
     OWN_SESSION | NEED_JSON | NEED_READY, "no console yet", QUEUED_NOT_READY},
    {"POST", "/api/sessions/*/tty-size", api_tty_size,
     OWN_SESSION | NEED_JSON | NEED_READY | NEED_AGENT, "no console yet", QUEUED_NOT_READY},
    {"GET", "/api/sessions/*/grades", api_session_grades, OWN_SESSION, NULL, QUEUED_NOT_READY},
    /* the teacher's room: NEED_USER only; each handler answers 404 outside
     * the lessons the caller teaches (api_teacher.c) */
    {"GET", "/api/teacher/lessons", api_teacher_lessons, NEED_USER, NULL, 0},
    {"GET", "/api/teacher/lessons/*/class", api_teacher_class, NEED_USER, NULL, 0},
    {"GET", "/api/teacher/lessons/*/grades.csv", api_teacher_grades_csv, NEED_USER, NULL, 0},
    {"GET", "/api/teacher/audit", api_teacher_audit, NEED_USER, NULL, 0},
    {"POST", "/api/teacher/sessions/*/console-ticket", api_teacher_ticket, NEED_USER | NEED_JSON,
     NULL, 0},
    {"POST", "/api/teacher/sessions/*/extend", api_teacher_extend, NEED_USER | NEED_JSON, NULL, 0},
    {"POST", "/api/teacher/sessions/*/reset", api_teacher_reset, NEED_USER | NEED_JSON, NULL, 0},
    {"DELETE", "/api/teacher/sessions/*", api_teacher_end, NEED_USER, NULL, 0},
    {"GET", "/api/operator/pool", api_pool_get, OPERATOR, NULL, 0},
    {"POST", "/api/operator/pool", api_pool_warm, OPERATOR | NEED_JSON, NULL, 0},
    {"DELETE", "/api/operator/pool/*", api_pool_cancel, OPERATOR, NULL, 0},
};

#define NROUTES (sizeof routes / sizeof routes[0])

/* NEED_SESSION / NEED_CURRENT and what follows: load r->sess, check that it
 * is this user's, advance it, check readiness. 0 go on; -1 answered (*h). */
static int want_session(struct req *r, const struct route *rt, struct session *s, enum hres *h)
{
	const unsigned n = rt->needs;
	int rc = (n & NEED_CURRENT) ? session_load_active(r->x, r->user, s)
	                            : session_load(r->x, r->param, s);
	*h = H_DONE;
	if (rc == SESSION_DBERR) {
		*h = api_db_error(r);
		return -1;
	}
	/* no session: a place in the waiting line answers as the route says */
	if (rc == SESSION_NONE && api_queue_route(r, rt->queued, (n & NEED_CURRENT) != 0, h))
		return -1;
	if (rc == SESSION_NONE && (n & NEED_CURRENT)) {
		resp_error(r, E_NO_SESSION, "you have no open lab session");
		return -1;
	}
	if (rc == SESSION_NONE || strcmp(s->user, r->user) != 0) {
		/* someone else's session does not exist for this user */
		resp_error(r, E_NOT_FOUND, "no such session");
		return -1;
	}
	r->sess = s;
	int was_active = session_active(s);
	if ((n & (NEED_ADVANCED | NEED_READY)) && session_advance(r->x, s) < 0) {
		*h = api_db_error(r);
		return -1;
	}
	/* it ended here (expired, idle): its seat goes to the head of the line */
	if (was_active && !session_active(s) && s->state == SESSION_ENDED)
		queue_pump(r->x);
	if ((n & NEED_READY) &&
	    (s->state != SESSION_READY || !s->nvms || ((n & NEED_AGENT) && !s->vms[0].ip))) {
		resp_error(r, E_NOT_READY, "the lab is %s, not ready: %s",
		           session_state_str(s->state), rt->not_ready);
		return -1;
	}
	return 0;
}

/* A comma or space separated list of REMOTE_USERs (labvm.conf operators,
 * teachers). */
int api_user_listed(const char *list, const char *user)
{
	const char *p = list;
	size_t n = user ? strlen(user) : 0;
	if (!n || !p)
		return 0;
	while (*p) {
		while (*p == ',' || *p == ' ' || *p == '\t')
			p++;
		size_t w = strcspn(p, ", \t");
		if (w == n && strncmp(p, user, n) == 0)
			return 1;
		p += w;
	}
	return 0;
}

static int is_operator(const struct cfg *c, const char *user)
{
	return api_user_listed(c->operators, user);
}

int api_teaches(const struct cfg *c, const struct lesson *l, const char *user)
{
	return user && l &&
	       (is_operator(c, user) || api_user_listed(c->teachers, user) ||
	        lesson_has_teacher(l, user));
}

static enum hres run(struct req *r, const struct route *rt)
{
	if ((rt->needs & NEED_USER) && !r->user) {
		resp_error(r, E_UNAUTHENTICATED, "no authenticated user (REMOTE_USER)");
		return H_DONE;
	}
	if ((rt->needs & NEED_USER) && strlen(r->user) > TICKET_USER_MAX) {
		resp_error(r, E_USER_TOO_LONG,
		           "the user name is %zu bytes long; labvm accepts at most %d bytes",
		           strlen(r->user), TICKET_USER_MAX);
		return H_DONE;
	}
	if ((rt->needs & NEED_OPERATOR) && !is_operator(r->x->cfg, r->user)) {
		resp_error(r, E_FORBIDDEN, "this is for operators (labvm.conf operators)");
		return H_DONE;
	}
	if (rt->needs & NEED_JSON) {
		if (!http_is_json_type(r->content_type)) {
			resp_error(r, E_UNSUPPORTED_MEDIA_TYPE,
			           "request bodies must be application/json");
			return H_DONE;
		}
		if (!r->body && req_read_body(r) < 0)
			return H_DONE;
		if (r->body_len) {
			cJSON_Delete(r->json);
			r->json = cJSON_ParseWithLength(r->body, r->body_len);
			if (!r->json) {
				resp_error(r, E_BAD_REQUEST, "the body is not valid JSON");
				return H_DONE;
			}
		}
	}
	if (!(rt->needs & (NEED_SESSION | NEED_CURRENT)))
		return rt->fn(r);
	struct session s;
	enum hres h;
	if (want_session(r, rt, &s, &h) == 0)
		h = rt->fn(r);
	session_free(&s);
	r->sess = NULL;
	return h;
}

void router_dispatch(struct req *r)
{
	const struct route *found = NULL;
	struct buf allow = {0};

	db_reset_timer(&r->x->db);
	kube_reset_timer(&r->x->kube);
	r->x->agent.ms = 0;

	for (size_t i = 0; i < NROUTES; i++) {
		char *param;
		if (!http_path_match(routes[i].pattern, r->path, &param))
			continue;
		/* "/api/sessions/current" is not a session id: the special segment
		 * wins over '*' (the table lists it first) */
		if (param && strchr(routes[i].pattern, '*') && strcmp(param, "current") == 0 &&
		    strcmp(routes[i].pattern, "/api/sessions/*") == 0) {
			free(param);
			continue;
		}
		if (strcmp(routes[i].method, r->method) == 0) {
			found = &routes[i];
			free(r->param_buf);
			r->param_buf = param;
			r->param = param;
			break;
		}
		if (!strstr(allow.p ? allow.p : "", routes[i].method)) {
			if (allow.len)
				buf_puts(&allow, ", ");
			buf_puts(&allow, routes[i].method);
		}
		free(param);
	}
	if (!found) {
		if (allow.len) {
			resp_header(r, "Allow", "%s", allow.p);
			resp_error(r, E_METHOD_NOT_ALLOWED, "%s is not allowed here (allowed: %s)",
			           r->method, allow.p);
		} else {
			resp_error(r, E_NOT_FOUND, "no such API route");
		}
		buf_free(&allow);
		return;
	}
	buf_free(&allow);
	r->route = found->pattern;
	for (int attempt = 0;; attempt++) {
		enum hres h = run(r, found);
		if (h == H_DONE)
			return;
		/* the database went away before any side effect: reconnect, retry once */
		db_rollback(&r->x->db);
		if (attempt == 0 && db_ensure(&r->x->db) == 0) {
			log_info("database connection re-established; retrying %s %s", r->method,
			         r->path);
			continue;
		}
		resp_error(r, E_DB_UNAVAILABLE, "the database is unavailable: try again shortly");
		return;
	}
}
