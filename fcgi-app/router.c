/* router.c - the route table (cgit style): method, path pattern, handler,
 * requirements checked centrally before the handler runs. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "jsonx.h"
#include "log.h"

struct route {
	const char *method;
	const char *pattern; /* '*' matches one path segment: the {id} */
	handler_fn fn;
	unsigned needs;
};

static const struct route routes[] = {
    {"GET", "/api/lessons", api_lessons, NEED_USER},
    {"GET", "/api/healthz", api_healthz, 0},
    {"GET", "/api/metrics", api_metrics, NEED_USER},
    {"GET", "/api/operator/overview", api_operator_overview, NEED_USER},
    {"POST", "/api/operator/sessions/*/end", api_operator_end, NEED_USER | NEED_JSON},
    {"POST", "/api/sessions", api_session_create, NEED_USER | NEED_JSON},
    {"GET", "/api/sessions/current", api_session_current, NEED_USER},
    {"GET", "/api/sessions/*", api_session_get, NEED_USER},
    {"DELETE", "/api/sessions/*", api_session_delete, NEED_USER},
    {"POST", "/api/sessions/*/grade", api_session_grade, NEED_USER | NEED_JSON},
    {"POST", "/api/sessions/*/console-ticket", api_console_ticket, NEED_USER | NEED_JSON},
};

#define NROUTES (sizeof routes / sizeof routes[0])

/* Match path against pattern; on success *param gets the '*' segment (malloc'd). */
static int match(const char *pattern, const char *path, char **param)
{
	const char *p = pattern, *s = path;
	*param = NULL;
	while (*p && *s) {
		if (*p == '*') {
			const char *end = strchr(s, '/');
			size_t n = end ? (size_t)(end - s) : strlen(s);
			if (n == 0 || n > 128)
				break;
			free(*param);
			*param = xstrndup(s, n);
			s += n;
			p++;
		} else if (*p == *s) {
			p++;
			s++;
		} else {
			break;
		}
	}
	/* a trailing slash is tolerated */
	if (!*p && (!*s || (s[0] == '/' && !s[1])))
		return 1;
	free(*param);
	*param = NULL;
	return 0;
}

/* A special segment ("current") wins over '*': the table is ordered so. */
static int is_json_type(const char *ct)
{
	if (!ct)
		return 0;
	while (isspace((unsigned char)*ct))
		ct++;
	size_t n = strlen("application/json");
	return strncasecmp(ct, "application/json", n) == 0 &&
	       (ct[n] == '\0' || ct[n] == ';' || isspace((unsigned char)ct[n]));
}

static enum hres run(struct req *r, const struct route *rt)
{
	if ((rt->needs & NEED_USER) && !r->user) {
		resp_error(r, 401, "unauthenticated", "no authenticated user (REMOTE_USER)");
		return H_DONE;
	}
	if (rt->needs & NEED_JSON) {
		if (!is_json_type(r->content_type)) {
			resp_error(r, 415, "unsupported_media_type",
			           "request bodies must be application/json");
			return H_DONE;
		}
		if (!r->body && req_read_body(r) < 0)
			return H_DONE;
		if (r->body_len) {
			cJSON_Delete(r->json);
			r->json = cJSON_ParseWithLength(r->body, r->body_len);
			if (!r->json) {
				resp_error(r, 400, "bad_request", "the body is not valid JSON");
				return H_DONE;
			}
		}
	}
	return rt->fn(r);
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
		if (!match(routes[i].pattern, r->path, &param))
			continue;
		/* "/api/sessions/current" is not a session id */
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
			resp_error(r, 405, "method_not_allowed",
			           "%s is not allowed here (allowed: %s)", r->method, allow.p);
		} else {
			resp_error(r, 404, "not_found", "no such API route");
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
		resp_error(r, 503, "db_unavailable",
		           "the database is unavailable: try again shortly");
		return;
	}
}
