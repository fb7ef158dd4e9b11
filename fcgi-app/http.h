/* http.h - one FastCGI request: the environment copied once into a struct
 * (FCGX_GetParam pointers die at FCGX_Finish_r), the body, and the
 * response writers. Every error code the API answers, and its HTTP status,
 * is one row of the table in http.c (enum api_err). */
#ifndef LABVM_FCGI_HTTP_H
#define LABVM_FCGI_HTTP_H

#include <cjson/cJSON.h>
#include <fcgiapp.h>

#include "lab.h"
#include "util.h"

#define BODY_MAX (64 * 1024)

struct session;

/* The API's error codes; their {code, status} rows are in http.c. A code may
 * answer with different statuses in different places (unknown_lesson). */
enum api_err {
	E_BAD_REQUEST,            /* 400 bad_request */
	E_UNAUTHENTICATED,        /* 401 unauthenticated */
	E_FORBIDDEN,              /* 403 forbidden (operators only) */
	E_NOT_FOUND,              /* 404 not_found */
	E_NO_SESSION,             /* 404 no_session */
	E_UNKNOWN_LESSON,         /* 404 unknown_lesson (start) */
	E_METHOD_NOT_ALLOWED,     /* 405 method_not_allowed */
	E_SESSION_EXISTS,         /* 409 session_exists */
	E_NOT_READY,              /* 409 not_ready */
	E_LESSON_GONE,            /* 409 unknown_lesson (grading a lesson no longer offered) */
	E_TOO_LARGE,              /* 413 too_large */
	E_UNSUPPORTED_MEDIA_TYPE, /* 415 unsupported_media_type */
	E_INTERNAL,               /* 500 internal_error */
	E_NOT_IMPLEMENTED,        /* 501 not_implemented */
	E_AGENT_UNREACHABLE,      /* 502 agent_unreachable */
	E_DB_UNAVAILABLE,         /* 503 db_unavailable */
	E_CLUSTER_UNAVAILABLE,    /* 503 cluster_unavailable */
	E_CAPACITY_FULL,          /* 503 capacity_full */
	E_GRADE_RUNNING,          /* 409 grade_running */
	E_TOO_MANY_STARTS,        /* 429 too_many_starts */
	E_CAPACITY_BUSY,          /* 503 capacity_busy */
	E_USER_TOO_LONG,          /* 400 bad_request (REMOTE_USER longer than tickets allow) */
	E_STREAMS_FULL,           /* 503 streams_full (stream_max event streams open here) */
	E_NEVER_FITS,             /* 409 never_fits (a lesson larger than the capacity) */
	E_NO_GUIDE,               /* 404 no_guide (a lesson without a guide) */
	E_TOO_MANY_STREAMS,       /* 429 too_many_streams (stream_max_per_user open) */
	E_NO_EXTENSIONS_LEFT,     /* 409 no_extensions_left (issue #28) */
	E_LINE_WAITING,           /* 409 line_waiting (no extension while the line waits) */
	E_AGENT_BUSY,             /* 503 agent_busy (every agent slot of this process held) */
};

struct req {
	FCGX_Request *fr;
	struct labctx *x;
	char *method;
	char *path; /* REQUEST_URI without the query, base_path removed */
	char *content_type;
	char *user;          /* REMOTE_USER, set by the front end's authentication */
	long content_length; /* -1 when absent */
	char *body;          /* NUL-terminated, when read */
	size_t body_len;
	cJSON *json;       /* parsed body of JSON requests (may be NULL for empty bodies) */
	const char *param; /* the {id} path segment, when the route has one */
	char *param_buf;
	double t0;     /* monotonic, at arrival */
	double t_wall; /* epoch seconds, at arrival (the button press) */
	int status;
	struct buf headers;   /* extra response headers */
	const char *route;    /* for the log line */
	struct session *sess; /* the route's session (NEED_SESSION, NEED_CURRENT) */
	int adopted;          /* fr now belongs to the stream thread (stream.h) */
	char error[40];       /* the answer's "error" code, if any (metrics) */
};

void req_init(struct req *r, FCGX_Request *fr, struct labctx *x);
void req_reset(struct req *r);
/* Read the body (up to BODY_MAX). 0 ok; -1 after answering 413/400. */
int req_read_body(struct req *r);

void resp_header(struct req *r, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Write status, headers and the JSON body; takes ownership of body. */
void resp_json(struct req *r, int status, cJSON *body);
/* resp_json with the answer's own Cache-Control (instead of no-store) and an
 * ETag when etag is not NULL; body NULL: no body (304 Not Modified). */
void resp_json_cached(struct req *r, int status, cJSON *body, const char *cache_control,
                      const char *etag);
/* The same with the JSON already printed (json NULL: no body). */
void resp_json_text(struct req *r, int status, const char *json, const char *cache_control,
                    const char *etag);
/* A body that is not JSON (text/csv), as it is, with the usual headers. */
void resp_raw(struct req *r, int status, const char *content_type, const char *body, size_t len);
/* What a handler returns (api.h): its one answer was written, or the
 * database connection dropped before anything changed in the cluster (the
 * router reconnects and runs the handler once more). */
enum hres { H_DONE = 0, H_DB_LOST = 1 };

/* {"error": code, "message": ...} with the error's status. */
void resp_error(struct req *r, enum api_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same object, for answers that carry more fields: add them, then
 * resp_error_json() (which takes ownership). */
cJSON *error_json(enum api_err e, const char *message);
void resp_error_json(struct req *r, enum api_err e, cJSON *o);
/* Match path against a route pattern ('*' is one path segment, 1..128
 * bytes; a trailing slash is tolerated): 1 and *param the '*' segment
 * (malloc'd, NULL without one), else 0. Pure (tests/unit/test_http_match.c). */
int http_path_match(const char *pattern, const char *path, char **param);
/* Content-Type application/json (any case, parameters allowed). */
int http_is_json_type(const char *content_type);

/* A database failure: H_DB_LOST when the connection dropped (a retry may
 * help), else 503 db_unavailable answered and H_DONE. */
enum hres api_db_error(struct req *r);
/*
 * Agent slots. A grade or a tty-size holds its worker for as long as the
 * guest's agent takes to answer, and the guest is the student's: root there
 * can make it never answer. The leases bound that to one request of each
 * kind per session; across sessions, the slots bound it to half of this
 * process's workers (fcgi_threads / 2, at least one), so that students with
 * frozen agents never hold every worker (benchmarks/frozen_workers.py: two of
 * them held all four of Apache's labvm.fcgi). Taken by the lease holder
 * around its agent calls only. A user holds one slot at most: their second
 * call (a tty-size beside their grade) is refused at once; anyone else waits
 * up to AGENT_SLOT_WAIT_MS for one (a class grading at once takes turns).
 * 0 when none came: the caller answers api_agent_busy() (503 agent_busy,
 * Retry-After).
 */
#define AGENT_SLOT_WAIT_MS 1000
int agent_slot_take(const struct labctx *x, const char *user);
void agent_slot_release(const char *user);
enum hres api_agent_busy(struct req *r);

#endif
