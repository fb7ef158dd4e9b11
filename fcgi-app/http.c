#include "http.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "jsonx.h"
#include "lab.h"
#include "log.h"
#include "util.h"

static const struct {
	const char *code;
	int status;
} errors[] = {
    [E_BAD_REQUEST] = {"bad_request", 400},
    [E_UNAUTHENTICATED] = {"unauthenticated", 401},
    [E_FORBIDDEN] = {"forbidden", 403},
    [E_NOT_FOUND] = {"not_found", 404},
    [E_NO_SESSION] = {"no_session", 404},
    [E_UNKNOWN_LESSON] = {"unknown_lesson", 404},
    [E_METHOD_NOT_ALLOWED] = {"method_not_allowed", 405},
    [E_SESSION_EXISTS] = {"session_exists", 409},
    [E_NOT_READY] = {"not_ready", 409},
    [E_LESSON_GONE] = {"unknown_lesson", 409},
    [E_TOO_LARGE] = {"too_large", 413},
    [E_UNSUPPORTED_MEDIA_TYPE] = {"unsupported_media_type", 415},
    [E_INTERNAL] = {"internal_error", 500},
    [E_NOT_IMPLEMENTED] = {"not_implemented", 501},
    [E_AGENT_UNREACHABLE] = {"agent_unreachable", 502},
    [E_DB_UNAVAILABLE] = {"db_unavailable", 503},
    [E_CLUSTER_UNAVAILABLE] = {"cluster_unavailable", 503},
    [E_CAPACITY_FULL] = {"capacity_full", 503},
    [E_GRADE_RUNNING] = {"grade_running", 409},
    [E_TOO_MANY_STARTS] = {"too_many_starts", 429},
    [E_CAPACITY_BUSY] = {"capacity_busy", 503},
    [E_USER_TOO_LONG] = {"bad_request", 400},
    [E_STREAMS_FULL] = {"streams_full", 503},
    [E_NEVER_FITS] = {"never_fits", 409},
    [E_NO_GUIDE] = {"no_guide", 404},
    [E_TOO_MANY_STREAMS] = {"too_many_streams", 429},
    [E_NO_EXTENSIONS_LEFT] = {"no_extensions_left", 409},
    [E_LINE_WAITING] = {"line_waiting", 409},
    [E_AGENT_BUSY] = {"agent_busy", 503},
};

static const char *status_text(int s)
{
	switch (s) {
	case 200:
		return "OK";
	case 201:
		return "Created";
	case 202:
		return "Accepted";
	case 304:
		return "Not Modified";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 409:
		return "Conflict";
	case 413:
		return "Payload Too Large";
	case 415:
		return "Unsupported Media Type";
	case 429:
		return "Too Many Requests";
	case 500:
		return "Internal Server Error";
	case 501:
		return "Not Implemented";
	case 502:
		return "Bad Gateway";
	case 503:
		return "Service Unavailable";
	}
	return "Unknown";
}

static char *param_dup(FCGX_Request *fr, const char *name)
{
	const char *v = FCGX_GetParam(name, fr->envp);
	return v ? xstrdup(v) : NULL;
}

void req_init(struct req *r, FCGX_Request *fr, struct labctx *x)
{
	struct timespec ts;
	const char *base = x->cfg->base_path;
	char *uri, *q;

	memset(r, 0, sizeof *r);
	r->fr = fr;
	r->x = x;
	r->t0 = util_mono_s();
	clock_gettime(CLOCK_REALTIME, &ts);
	r->t_wall = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
	r->method = param_dup(fr, "REQUEST_METHOD");
	if (!r->method)
		r->method = xstrdup("GET");
	r->content_type = param_dup(fr, "CONTENT_TYPE");
	r->user = param_dup(fr, "REMOTE_USER");
	if (r->user && !*r->user) {
		free(r->user);
		r->user = NULL;
	}
	const char *cl = FCGX_GetParam("CONTENT_LENGTH", fr->envp);
	r->content_length = -1;
	if (cl && *cl) {
		char *end;
		errno = 0;
		long n = strtol(cl, &end, 10);
		r->content_length = (errno || *end || n < 0) ? -2 : n;
	}
	/* route on REQUEST_URI: it is the same under lighttpd and Apache, whatever
	 * SCRIPT_NAME/PATH_INFO split the server chose */
	uri = param_dup(fr, "REQUEST_URI");
	if (!uri) {
		const char *sn = FCGX_GetParam("SCRIPT_NAME", fr->envp);
		const char *pi = FCGX_GetParam("PATH_INFO", fr->envp);
		uri = xasprintf("%s%s", sn ? sn : "", pi ? pi : "");
	}
	q = strchr(uri, '?');
	if (q)
		*q = '\0';
	if (*base && strncmp(uri, base, strlen(base)) == 0)
		r->path = xstrdup(uri + strlen(base));
	else
		r->path = xstrdup(uri);
	free(uri);
	r->route = "-";
}

void req_reset(struct req *r)
{
	free(r->method);
	free(r->path);
	free(r->content_type);
	free(r->user);
	free(r->body);
	free(r->param_buf);
	cJSON_Delete(r->json);
	buf_free(&r->headers);
	memset(r, 0, sizeof *r);
}

int req_read_body(struct req *r)
{
	if (r->content_length == -2) {
		resp_error(r, E_BAD_REQUEST, "invalid Content-Length");
		return -1;
	}
	if (r->content_length > BODY_MAX) {
		resp_error(r, E_TOO_LARGE, "request bodies are limited to %d bytes", BODY_MAX);
		return -1;
	}
	size_t want = r->content_length > 0 ? (size_t)r->content_length : 0;
	r->body = xmalloc(want + 1);
	size_t got = 0;
	while (got < want) {
		int n = FCGX_GetStr(r->body + got, (int)(want - got), r->fr->in);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	r->body[got] = '\0';
	r->body_len = got;
	if (got < want) {
		resp_error(r, E_BAD_REQUEST, "the request body ended early");
		return -1;
	}
	return 0;
}

void resp_header(struct req *r, const char *name, const char *fmt, ...)
{
	va_list ap;
	char v[512];
	va_start(ap, fmt);
	vsnprintf(v, sizeof v, fmt, ap);
	va_end(ap);
	/* header values never carry line breaks */
	for (char *p = v; *p; p++)
		if (*p == '\r' || *p == '\n')
			*p = ' ';
	buf_printf(&r->headers, "%s: %s\r\n", name, v);
}

void resp_json_cached(struct req *r, int status, cJSON *body, const char *cache_control,
                      const char *etag)
{
	char *json = body ? jx_print(body) : NULL;
	const cJSON *ec = cJSON_GetObjectItemCaseSensitive(body, "error");
	if (cJSON_IsString(ec))
		snprintf(r->error, sizeof r->error, "%s", ec->valuestring);
	resp_json_text(r, status, json, cache_control, etag);
	cJSON_free(json);
	cJSON_Delete(body);
}

void resp_json_text(struct req *r, int status, const char *json, const char *cache_control,
                    const char *etag)
{
	struct labctx *x = r->x;
	size_t jlen = json ? strlen(json) : 0;
	char *clean = NULL;
	if (json && !utf8_valid(json, jlen)) {
		/* the last line of defence: a string that was not valid UTF-8 (cJSON
		 * prints bytes as they are, and they can only be inside strings:
		 * U+FFFD for each keeps the JSON well-formed) */
		log_warn("%s %s: the answer held bytes that are not UTF-8; replaced", r->method,
		         r->path);
		clean = utf8_clean_dup(json, jlen, 3 * jlen);
	}
	double total = (util_mono_s() - r->t0) * 1000.0;

	r->status = status;
	FCGX_FPrintF(r->fr->out,
	             "Status: %d %s\r\n"
	             "%s"
	             "Cache-Control: %s\r\n"
	             "%s%s%s"
	             "X-Content-Type-Options: nosniff\r\n"
	             "Server-Timing: db;dur=%.2f, kube;dur=%.2f, agent;dur=%.2f, app;dur=%.2f\r\n"
	             "%s\r\n",
	             status, status_text(status),
	             json ? "Content-Type: application/json; charset=utf-8\r\n" : "", cache_control,
	             etag ? "ETag: " : "", etag ? etag : "", etag ? "\r\n" : "", x->db.ms,
	             x->kube.ms, x->agent.ms, total, r->headers.p ? r->headers.p : "");
	if (json) {
		FCGX_PutStr(clean ? clean : json, (int)strlen(clean ? clean : json), r->fr->out);
		FCGX_PutS("\n", r->fr->out);
	}
	if (FCGX_GetError(r->fr->out))
		log_warn("writing the response failed (client gone?)");
	free(clean);
}

void resp_raw(struct req *r, int status, const char *content_type, const char *body, size_t len)
{
	struct labctx *x = r->x;
	double total = (util_mono_s() - r->t0) * 1000.0;
	r->status = status;
	FCGX_FPrintF(r->fr->out,
	             "Status: %d %s\r\n"
	             "Content-Type: %s\r\n"
	             "Cache-Control: no-store\r\n"
	             "X-Content-Type-Options: nosniff\r\n"
	             "Server-Timing: db;dur=%.2f, kube;dur=%.2f, agent;dur=%.2f, app;dur=%.2f\r\n"
	             "%s\r\n",
	             status, status_text(status), content_type, x->db.ms, x->kube.ms, x->agent.ms,
	             total, r->headers.p ? r->headers.p : "");
	FCGX_PutStr(body, (int)len, r->fr->out);
	if (FCGX_GetError(r->fr->out))
		log_warn("writing the response failed (client gone?)");
}

void resp_json(struct req *r, int status, cJSON *body)
{
	resp_json_cached(r, status, body, "no-store", NULL);
}

cJSON *error_json(enum api_err e, const char *message)
{
	cJSON *o = jx_obj();
	jx_add_str(o, "error", errors[e].code);
	jx_add_str(o, "message", message);
	return o;
}

void resp_error_json(struct req *r, enum api_err e, cJSON *o)
{
	resp_json(r, errors[e].status, o);
}

void resp_error(struct req *r, enum api_err e, const char *fmt, ...)
{
	va_list ap;
	char *raw, *msg;
	va_start(ap, fmt);
	if (vasprintf(&raw, fmt, ap) < 0)
		raw = NULL;
	va_end(ap);
	/* a message may quote the request or a guest: valid UTF-8, cut on a character */
	msg = utf8_clean_dup(raw ? raw : "error", raw ? strlen(raw) : 5, 1023);
	free(raw);
	resp_error_json(r, e, error_json(e, msg));
	free(msg);
}

enum hres api_db_error(struct req *r)
{
	if (r->x->db.broken)
		return H_DB_LOST;
	resp_error(r, E_DB_UNAVAILABLE, "database error: try again shortly");
	return H_DONE;
}

static pthread_mutex_t slot_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slot_cv = PTHREAD_COND_INITIALIZER;
static int slots_held;
static char **slot_users; /* who holds each slot (NULL: free); fcgi_threads long */
static int slot_users_n;

static int agent_slots(const struct labctx *x)
{
	int n = x->cfg->fcgi_threads / 2;
	return n > 0 ? n : 1;
}

static int slot_of(const char *user)
{
	for (int i = 0; i < slot_users_n; i++)
		if (slot_users[i] && strcmp(slot_users[i], user) == 0)
			return i;
	return -1;
}

int agent_slot_take(const struct labctx *x, const char *user)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += AGENT_SLOT_WAIT_MS / 1000;
	until.tv_nsec += (AGENT_SLOT_WAIT_MS % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	int got = 0, rc = 0, mine = 0;
	pthread_mutex_lock(&slot_mu);
	if (!slot_users) {
		slot_users_n = agent_slots(x);
		slot_users = xcalloc((size_t)slot_users_n, sizeof *slot_users);
	}
	/* a user holds one slot at most, and never waits for a second */
	mine = slot_of(user) >= 0;
	while (!mine && slots_held >= slot_users_n && rc == 0)
		rc = pthread_cond_timedwait(&slot_cv, &slot_mu, &until);
	if (!mine && slots_held < slot_users_n) {
		int i = 0;
		while (slot_users[i]) /* slots_held < slot_users_n: one is free */
			i++;
		slot_users[i] = xstrdup(user);
		slots_held++;
		got = 1;
	}
	pthread_mutex_unlock(&slot_mu);
	if (!got && !mine)
		log_warn("every agent slot of this process (%d) is held by a slow agent",
		         slot_users_n);
	return got;
}

void agent_slot_release(const char *user)
{
	pthread_mutex_lock(&slot_mu);
	int i = slot_of(user);
	if (i >= 0) {
		free(slot_users[i]);
		slot_users[i] = NULL;
		slots_held--;
		pthread_cond_signal(&slot_cv);
	}
	pthread_mutex_unlock(&slot_mu);
}

enum hres api_agent_busy(struct req *r)
{
	cJSON *e = error_json(E_AGENT_BUSY, "other students' lab machines are slow to answer: try "
	                                    "again in a moment");
	jx_add_num(e, "retry_after_s", 2);
	resp_header(r, "Retry-After", "2");
	resp_error_json(r, E_AGENT_BUSY, e);
	return H_DONE;
}

int http_path_match(const char *pattern, const char *path, char **param)
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

int http_is_json_type(const char *ct)
{
	if (!ct)
		return 0;
	while (isspace((unsigned char)*ct))
		ct++;
	size_t n = strlen("application/json");
	return strncasecmp(ct, "application/json", n) == 0 &&
	       (ct[n] == '\0' || ct[n] == ';' || isspace((unsigned char)ct[n]));
}
