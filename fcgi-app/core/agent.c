#include "agent.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "callstats.h"
#include "httpc.h"
#include "jsonx.h"
#include "log.h"

#define AGENT_MAX_BODY (1u << 20)
#define SEEN_READY_S   2.0 /* how long a held answer's "ready" stands for a new look */

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
	OPENSSL_cleanse(a->seen_token, sizeof a->seen_token);
	memset(a, 0, sizeof *a);
}

/* One request; returns the HTTP status or 0 (a->msg). */
static long call(struct agent *a, const char *ip, int port, const char *token, const char *path,
                 const cJSON *json, long timeout_ms)
{
	char url[256], why[CURL_ERROR_SIZE + 64];
	double t0 = util_mono_s();
	long code;

	snprintf(url, sizeof url, strchr(ip, ':') ? "http://[%s]:%d%s" : "http://%s:%d%s", ip, port,
	         path);
	struct httpc_req rq = {
	    .method = json ? "POST" : "GET",
	    .url = url,
	    .json = json,
	    .bearer = token,
	    .connect_timeout_ms = timeout_ms < 2000 ? timeout_ms : 2000L,
	    .timeout_ms = timeout_ms,
	    .max_body = AGENT_MAX_BODY,
	    .no_proxy = 1,
	    .fresh = a->fresh,
	    .cancel = a->cancel,
	};
	a->msg[0] = '\0';
	code = httpc_call(a->h, &rq, &a->body, why, sizeof why);
	if (!code)
		snprintf(a->msg, sizeof a->msg, "agent at %s:%d unreachable: %s", ip, port, why);
	a->ms += (util_mono_s() - t0) * 1000.0;
	callstats_add(CALL_AGENT, path, util_mono_s() - t0, code == 0 || code >= 500);
	return code;
}

enum agent_ready agent_ready(struct agent *a, const char *ip, int port, const char *token,
                             int timeout_ms, cJSON **detail)
{
	if (a->seen_at > 0 && util_mono_s() - a->seen_at < SEEN_READY_S &&
	    strcmp(a->seen_ip, ip) == 0 &&
	    util_ct_equal(a->seen_token, strlen(a->seen_token), token, strlen(token))) {
		a->seen_at = 0; /* once */
		if (detail)
			*detail = NULL;
		return AGENT_READY;
	}
	return agent_ready_wait(a, ip, port, token, 0, timeout_ms, detail);
}

enum agent_ready agent_ready_wait(struct agent *a, const char *ip, int port, const char *token,
                                  int wait_ms, int timeout_ms, cJSON **detail)
{
	char path[64];
	if (wait_ms > 0)
		snprintf(path, sizeof path, "/ready?wait=%d.%03d", wait_ms / 1000, wait_ms % 1000);
	else
		snprintf(path, sizeof path, "/ready");
	long code = call(a, ip, port, token, path, NULL, (long)wait_ms + timeout_ms);
	if (detail)
		*detail = NULL;
	if (code == 200 && wait_ms > 0 && strlen(ip) < sizeof a->seen_ip &&
	    strlen(token) < sizeof a->seen_token) {
		snprintf(a->seen_ip, sizeof a->seen_ip, "%s", ip);
		snprintf(a->seen_token, sizeof a->seen_token, "%s", token);
		a->seen_at = util_mono_s();
	}
	if (code == 200)
		return AGENT_READY;
	if (code == 503) {
		if (detail)
			*detail = httpc_json(&a->body);
		return AGENT_NOT_READY;
	}
	if (code)
		snprintf(a->msg, sizeof a->msg, "agent answered HTTP %ld to /ready", code);
	return AGENT_UNREACHABLE;
}

int agent_run(struct agent *a, const char *ip, int port, const char *token, const char *cmd,
              int timeout_s, long max_ms, cJSON **result)
{
	cJSON *req = jx_obj();
	long code;

	*result = NULL;
	jx_add_str(req, "cmd", cmd);
	jx_add_num(req, "timeout_s", timeout_s);
	long wait_ms = (long)(timeout_s + 5) * 1000L;
	code = call(a, ip, port, token, "/run", req,
	            max_ms > 0 && max_ms < wait_ms ? max_ms : wait_ms);
	cJSON_Delete(req);
	if (code != 200) {
		if (code)
			snprintf(a->msg, sizeof a->msg, "agent answered HTTP %ld to /run", code);
		return -1;
	}
	*result = httpc_json(&a->body);
	if (!cJSON_IsObject(*result)) {
		cJSON_Delete(*result);
		*result = NULL;
		snprintf(a->msg, sizeof a->msg, "agent answered /run with malformed JSON");
		return -1;
	}
	return 0;
}

int agent_tty_size(struct agent *a, const char *ip, int port, const char *token, int cols, int rows,
                   int timeout_ms)
{
	cJSON *req = jx_obj();
	jx_add_num(req, "cols", cols);
	jx_add_num(req, "rows", rows);
	long code = call(a, ip, port, token, "/tty-size", req, timeout_ms);
	cJSON_Delete(req);
	if (code == 200 || code == 409)
		return (int)code;
	if (code)
		snprintf(a->msg, sizeof a->msg, "agent answered HTTP %ld to /tty-size", code);
	return -1;
}
