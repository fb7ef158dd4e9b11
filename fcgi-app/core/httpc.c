#include "httpc.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct sink {
	struct buf *b;
	size_t max;
	const struct httpc_req *rq;
	int stopped;
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud)
{
	struct sink *k = ud;
	size_t n = size * nmemb;
	if (k->rq->on_data) {
		if (k->rq->on_data(data, n, k->rq->data_ud) == 0)
			return n;
		k->stopped = 1;
		return 0; /* stop: CURLE_WRITE_ERROR, which httpc_call does not count */
	}
	if (k->b->len + n > k->max)
		return 0; /* abort the transfer */
	buf_append(k->b, data, n);
	return n;
}

static struct curl_slist *headers(const struct httpc_req *rq)
{
	char ct[128], acc[256];
	snprintf(acc, sizeof acc, "Accept: %s", rq->accept ? rq->accept : "application/json");
	struct curl_slist *l = curl_slist_append(NULL, acc), *t;
	if (!l || !rq->json)
		return l;
	snprintf(ct, sizeof ct, "Content-Type: %s",
	         rq->content_type ? rq->content_type : "application/json");
	/* no "Expect: 100-continue" round trip before large bodies (Secrets) */
	if (!(t = curl_slist_append(l, ct)) || !(t = curl_slist_append(t, "Expect:"))) {
		curl_slist_free_all(l);
		return NULL;
	}
	return t;
}

#define SET(opt, val)                                                                              \
	do {                                                                                       \
		if (curl_easy_setopt(h, opt, val) != CURLE_OK)                                     \
			goto setopt;                                                               \
	} while (0)

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
	(void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
	return *(const volatile int *)ud != 0; /* non-zero: CURLE_ABORTED_BY_CALLBACK */
}

long httpc_call(CURL *h, const struct httpc_req *rq, struct buf *body, char *msg, size_t msglen)
{
	char err[CURL_ERROR_SIZE];
	struct sink sink = {body, rq->max_body, rq, 0};
	struct curl_slist *hdrs = NULL;
	char *json = NULL;
	long code = 0;
	CURLcode rc;

	msg[0] = err[0] = '\0';
	buf_reset(body);
	curl_easy_reset(h); /* options only: the connections stay */
	if (rq->json && !(json = cJSON_PrintUnformatted(rq->json))) {
		snprintf(msg, msglen, "out of memory");
		return 0;
	}
	if (!(hdrs = headers(rq))) {
		snprintf(msg, msglen, "out of memory");
		goto out;
	}
	SET(CURLOPT_URL, rq->url);
	SET(CURLOPT_HTTPHEADER, hdrs);
	if (strcmp(rq->method, "GET") == 0)
		SET(CURLOPT_HTTPGET, 1L);
	else
		SET(CURLOPT_CUSTOMREQUEST, rq->method);
	if (json) {
		SET(CURLOPT_POSTFIELDS, json);
		SET(CURLOPT_POSTFIELDSIZE, (long)strlen(json));
	}
	if (rq->bearer) {
		SET(CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
		SET(CURLOPT_XOAUTH2_BEARER, rq->bearer);
	} else if (rq->user) {
		SET(CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
		SET(CURLOPT_USERNAME, rq->user);
		SET(CURLOPT_PASSWORD, rq->password ? rq->password : "");
	}
	/* HTTP/1.1 only: kube-apiserver offers h2 over ALPN and libcurl would take
	 * it, but every labvm client speaks HTTP/1.1 (lws's WebSockets must), one
	 * protocol is what the simulator and the tests prove; ALPN offers only
	 * http/1.1 then */
	SET(CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	SET(CURLOPT_SSL_VERIFYPEER, 1L);
	SET(CURLOPT_SSL_VERIFYHOST, 2L);
	if (rq->ca_file)
		SET(CURLOPT_CAINFO, rq->ca_file);
	if (rq->no_proxy)
		SET(CURLOPT_NOPROXY, "*");
	if (rq->fresh) {
		SET(CURLOPT_FRESH_CONNECT, 1L);
		SET(CURLOPT_FORBID_REUSE, 1L);
	}
	SET(CURLOPT_NOSIGNAL, 1L);
	SET(CURLOPT_CONNECTTIMEOUT_MS, rq->connect_timeout_ms);
	SET(CURLOPT_TIMEOUT_MS, rq->timeout_ms);
	SET(CURLOPT_TCP_KEEPALIVE, 1L);
	SET(CURLOPT_ERRORBUFFER, err);
	SET(CURLOPT_WRITEFUNCTION, on_body);
	SET(CURLOPT_WRITEDATA, &sink);
	if (rq->cancel) {
		SET(CURLOPT_XFERINFOFUNCTION, on_progress);
		SET(CURLOPT_XFERINFODATA, (void *)(uintptr_t)rq->cancel);
		SET(CURLOPT_NOPROGRESS, 0L);
	}
	if (rq->on_header) {
		SET(CURLOPT_HEADERFUNCTION, rq->on_header);
		SET(CURLOPT_HEADERDATA, rq->header_ud);
	}
	rc = curl_easy_perform(h);
	if (rc == CURLE_WRITE_ERROR && sink.stopped)
		rc = CURLE_OK;
	if (rc != CURLE_OK)
		snprintf(msg, msglen, "%s", err[0] ? err : curl_easy_strerror(rc));
	else
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
	goto out;
setopt:
	snprintf(msg, msglen, "curl setup failed");
out:
	/* nothing of this call outlives it in the handle: the error buffer is ours */
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
	curl_slist_free_all(hdrs);
	if (json)
		cJSON_free(json);
	return code;
}

cJSON *httpc_json(const struct buf *body)
{
	return body->len ? cJSON_ParseWithLength(body->p, body->len) : NULL;
}
