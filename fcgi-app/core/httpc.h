/* httpc.h - labvm's one JSON-over-HTTP client (libcurl), used by the cluster
 * client (kube.c), the guest agent client (agent.c) and labvm-bench's API
 * client: a capped answer, connect and total timeouts, TLS always verified
 * (against ca_file, or the system's CAs), bearer auth through libcurl's own
 * CURLAUTH_BEARER (or HTTP Basic), HTTP/1.1 only (ALPN http/1.1, never h2),
 * and the handle's keep-alive connections kept from call to call. One CURL
 * handle per thread. */
#ifndef LABVM_CORE_HTTPC_H
#define LABVM_CORE_HTTPC_H

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "util.h"

struct httpc_req {
	const char *method; /* "GET", "POST", "PATCH", "DELETE", "PUT" */
	const char *url;
	const cJSON *json;           /* the request body, or NULL */
	const char *content_type;    /* of the body; NULL: application/json */
	const char *accept;          /* the Accept header; NULL: application/json */
	const char *bearer;          /* secret: Authorization: Bearer (CURLAUTH_BEARER) */
	const char *user, *password; /* secret: HTTP Basic, when there is no bearer */
	const char *ca_file; /* https: the CA bundle to verify against; NULL: the system's */
	long connect_timeout_ms, timeout_ms;
	size_t max_body; /* a longer answer fails the call */
	int no_proxy;    /* connect directly, whatever the *_proxy variables say */
	int fresh;       /* a new connection, not kept afterwards */
	/* optional: every answer header line (CURLOPT_HEADERFUNCTION) */
	size_t (*on_header)(char *data, size_t size, size_t nmemb, void *ud);
	void *header_ud;
	/* optional: the answer's body as it arrives, instead of into *body (a
	 * watch); return 0 to go on, 1 to stop the transfer (not an error) */
	int (*on_data)(const char *data, size_t n, void *ud);
	void *data_ud;
	/* optional: a flag that ends the call (within about a second, even a
	 * held one) once it is set: a process that stops */
	const volatile int *cancel;
};

/* One call on h. The answer's body goes to *body (reset first). Returns the
 * HTTP status, or 0 when there was no answer: then msg says why (libcurl's
 * words; never a credential). */
long httpc_call(CURL *h, const struct httpc_req *rq, struct buf *body, char *msg, size_t msglen);

/* The body parsed as JSON (the caller cJSON_Delete()s it), or NULL. */
cJSON *httpc_json(const struct buf *body);

#endif
