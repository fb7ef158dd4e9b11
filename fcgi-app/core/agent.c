#include "agent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"
#include "log.h"
#include "metrics.h"

#define AGENT_MAX_BODY (1u << 20)

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud)
{
	struct buf *b = ud;
	size_t n = size * nmemb;
	if (b->len + n > AGENT_MAX_BODY)
		return 0;
	buf_append(b, data, n);
	return n;
}

int agent_init(struct agent *a)
{
	memset(a, 0, sizeof *a);
	a->h = curl_easy_init();
	return a->h ? 0 : -1;
}

void agent_cleanup(struct agent *a)
{
	if (a->h)
		curl_easy_cleanup(a->h);
	buf_free(&a->body);
	memset(a, 0, sizeof *a);
}

/* One request; returns the HTTP status or 0 (a->msg). */
static long call(struct agent *a, const char *ip, int port, const char *token, const char *path,
                 const char *json, long timeout_ms)
{
	char url[256];
	char *auth = xasprintf("Authorization: Bearer %s", token);
	struct curl_slist *h1 = curl_slist_append(NULL, auth);
	struct curl_slist *hdrs =
	    h1 ? curl_slist_append(h1, "Content-Type: application/json") : NULL;
	long code = 0;
	double t0 = util_mono_s();
	CURLcode rc;

	memset(auth, 0, strlen(auth));
	free(auth);
	if (!hdrs) {
		curl_slist_free_all(h1);
		snprintf(a->msg, sizeof a->msg, "out of memory");
		return 0;
	}
	snprintf(url, sizeof url, strchr(ip, ':') ? "http://[%s]:%d%s" : "http://%s:%d%s", ip, port,
	         path);
	curl_easy_reset(a->h);
	buf_reset(&a->body);
	a->err[0] = '\0';
	if (curl_easy_setopt(a->h, CURLOPT_URL, url) != CURLE_OK ||
	    curl_easy_setopt(a->h, CURLOPT_HTTPHEADER, hdrs) != CURLE_OK ||
	    curl_easy_setopt(a->h, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
	    curl_easy_setopt(a->h, CURLOPT_NOPROXY, "*") != CURLE_OK ||
	    curl_easy_setopt(a->h, CURLOPT_CONNECTTIMEOUT_MS,
	                     timeout_ms < 2000 ? timeout_ms : 2000L) != CURLE_OK ||
	    curl_easy_setopt(a->h, CURLOPT_TIMEOUT_MS, timeout_ms) != CURLE_OK ||
	    curl_easy_setopt(a->h, CURLOPT_ERRORBUFFER, a->err) != CURLE_OK ||
	    curl_easy_setopt(a->h, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK ||
	    curl_easy_setopt(a->h, CURLOPT_WRITEDATA, &a->body) != CURLE_OK ||
	    (json &&
	     (curl_easy_setopt(a->h, CURLOPT_POSTFIELDS, json) != CURLE_OK ||
	      curl_easy_setopt(a->h, CURLOPT_POSTFIELDSIZE, (long)strlen(json)) != CURLE_OK))) {
		snprintf(a->msg, sizeof a->msg, "curl setup failed");
		goto out;
	}
	rc = curl_easy_perform(a->h);
	if (rc != CURLE_OK) {
		snprintf(a->msg, sizeof a->msg, "agent at %s:%d unreachable: %s", ip, port,
		         a->err[0] ? a->err : curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(a->h, CURLINFO_RESPONSE_CODE, &code);
out:
	curl_slist_free_all(hdrs);
	a->ms += (util_mono_s() - t0) * 1000.0;
	metrics_call(MC_AGENT, path, util_mono_s() - t0, code == 0 || code >= 500);
	return code;
}

enum agent_ready agent_ready(struct agent *a, const char *ip, int port, const char *token,
                             int timeout_ms, cJSON **detail)
{
	long code = call(a, ip, port, token, "/ready", NULL, timeout_ms);
	if (detail)
		*detail = NULL;
	if (code == 200)
		return AGENT_READY;
	if (code == 503) {
		if (detail)
			*detail = cJSON_ParseWithLength(a->body.p ? a->body.p : "", a->body.len);
		return AGENT_NOT_READY;
	}
	if (code)
		snprintf(a->msg, sizeof a->msg, "agent answered HTTP %ld to /ready", code);
	return AGENT_UNREACHABLE;
}

int agent_run(struct agent *a, const char *ip, int port, const char *token, const char *cmd,
              int timeout_s, cJSON **result)
{
	cJSON *req = jx_obj();
	char *json;
	long code;

	*result = NULL;
	jx_add_str(req, "cmd", cmd);
	jx_add_num(req, "timeout_s", timeout_s);
	json = jx_print(req);
	cJSON_Delete(req);
	code = call(a, ip, port, token, "/run", json, (long)(timeout_s + 5) * 1000L);
	cJSON_free(json);
	if (code != 200) {
		if (code)
			snprintf(a->msg, sizeof a->msg, "agent answered HTTP %ld to /run", code);
		return -1;
	}
	*result = cJSON_ParseWithLength(a->body.p ? a->body.p : "", a->body.len);
	if (!cJSON_IsObject(*result)) {
		cJSON_Delete(*result);
		*result = NULL;
		snprintf(a->msg, sizeof a->msg, "agent answered /run with malformed JSON");
		return -1;
	}
	return 0;
}
