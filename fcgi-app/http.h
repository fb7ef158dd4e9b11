/* http.h - one FastCGI request: the environment copied once into a struct
 * (FCGX_GetParam pointers die at FCGX_Finish_r), the body, and the
 * response writers. Errors map to HTTP in exactly one place, resp_error(). */
#ifndef LABVM_FCGI_HTTP_H
#define LABVM_FCGI_HTTP_H

#include <cjson/cJSON.h>
#include <fcgiapp.h>

#include "lab.h"
#include "util.h"

#define BODY_MAX (64 * 1024)

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
	struct buf headers; /* extra response headers */
	const char *route;  /* for the log line */
	char error[40];     /* the answer's "error" code, if any (metrics) */
};

void req_init(struct req *r, FCGX_Request *fr, struct labctx *x);
void req_reset(struct req *r);
/* Read the body (up to BODY_MAX). 0 ok; -1 after answering 413/400. */
int req_read_body(struct req *r);

void resp_header(struct req *r, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Write status, headers and the JSON body; takes ownership of body. */
void resp_json(struct req *r, int status, cJSON *body);
/* {"error": code, "message": ...} with the given status. */
void resp_error(struct req *r, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
