/* api.c - the student API through the front end (the core's httpc.h: HTTP
 * Basic, keep-alive per handle), with the answer's Server-Timing and Retry-After. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench.h"
#include "httpc.h"

#define API_MAX_BODY (4u << 20)

/* "db;dur=0.12, kube;dur=3.40, agent;dur=0.00, app;dur=4.10" */
static double timing_of(const char *v, size_t len, const char *name)
{
	size_t nl = strlen(name);
	for (size_t i = 0; i + nl + 5 <= len; i++) {
		if ((i == 0 || v[i - 1] == ' ' || v[i - 1] == ',') &&
		    strncmp(v + i, name, nl) == 0 && strncmp(v + i + nl, ";dur=", 5) == 0)
			return strtod(v + i + nl + 5, NULL);
	}
	return NAN;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *ud)
{
	struct bapi *a = ud;
	size_t n = size * nmemb;
	static const char st[] = "server-timing:", ra[] = "retry-after:";
	if (n > sizeof st - 1 && strncasecmp(data, st, sizeof st - 1) == 0) {
		char v[256];
		size_t m = n - (sizeof st - 1);
		if (m >= sizeof v)
			m = sizeof v - 1;
		memcpy(v, data + sizeof st - 1, m);
		v[m] = '\0';
		a->st_app_ms = timing_of(v, m, "app");
		a->st_db_ms = timing_of(v, m, "db");
		a->st_kube_ms = timing_of(v, m, "kube");
		a->st_agent_ms = timing_of(v, m, "agent");
	} else if (n > sizeof ra - 1 && strncasecmp(data, ra, sizeof ra - 1) == 0) {
		a->retry_after = strtol(data + sizeof ra - 1, NULL, 10);
	}
	return n;
}

int bapi_init(struct bapi *a, const char *base, const char *user, const char *password)
{
	memset(a, 0, sizeof *a);
	a->h = curl_easy_init();
	if (!a->h)
		return -1;
	a->base = xstrdup(base);
	size_t n = strlen(a->base);
	while (n && a->base[n - 1] == '/')
		a->base[--n] = '\0';
	a->user = xstrdup(user);
	a->password = xstrdup(password);
	return 0;
}

void bapi_cleanup(struct bapi *a)
{
	if (a->h)
		curl_easy_cleanup(a->h);
	free(a->base);
	free(a->user);
	if (a->password) {
		explicit_bzero(a->password, strlen(a->password));
		free(a->password);
	}
	buf_free(&a->body);
	memset(a, 0, sizeof *a);
}

long bapi_call(struct bapi *a, const char *method, const char *path, const cJSON *body, cJSON **out)
{
	char *url = xasprintf("%s%s", a->base, path);
	char why[CURL_ERROR_SIZE + 64];
	struct httpc_req rq = {
	    .method = method,
	    .url = url,
	    .json = body,
	    .user = a->user,
	    .password = a->password,
	    .connect_timeout_ms = 10000,
	    .timeout_ms = 120000,
	    .max_body = API_MAX_BODY,
	    .on_header = on_header,
	    .header_ud = a,
	};

	if (out)
		*out = NULL;
	a->msg[0] = a->err[0] = '\0';
	a->st_app_ms = a->st_db_ms = a->st_kube_ms = a->st_agent_ms = NAN;
	a->retry_after = -1;
	double t0 = util_mono_s();
	long code = httpc_call(a->h, &rq, &a->body, why, sizeof why);
	a->ms = (util_mono_s() - t0) * 1000.0;
	if (!code)
		snprintf(a->msg, sizeof a->msg, "%s %.200s: %.250s", method, path, why);
	else if (out)
		*out = httpc_json(&a->body);
	free(url);
	return code;
}

const char *bapi_error_code(const cJSON *o)
{
	const char *e = kj_str(o, "error");
	return e ? e : "";
}
