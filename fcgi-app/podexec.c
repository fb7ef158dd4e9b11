/* podexec.c - see podexec.h. */
#include "podexec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <libwebsockets.h>

#include "tlsname.h"
#include "util.h"

#define PROTOS     "v5.channel.k8s.io,v4.channel.k8s.io"
#define STATUS_MAX 4096
#define KILL_AFTER 1 /* s after the step's timeout: labvm has hung up by then */

/* The step runs under this POSIX sh wrapper ($1 seconds, $2 the step), for
 * hanging up kills nothing: a non-tty exec's process outlives its stream
 * (tests/kubesim/CONFORMANCE.md, "Pods / exec"). A runtime starts an exec'd
 * process in a session of its own (runc: setsid() in nsexec), so the
 * wrapper leads a process group that holds the step and whatever it starts:
 * a watchdog kills that group at the deadline; a step that ends in time
 * takes its leftovers (background jobs, the watchdog) with it. Not a group
 * leader (another runtime): timeout(1) when the image has it (GNU timeout
 * kills the command's own process group), else the step as it is. */
static const char STEP_WRAPPER[] =
    "t=$1 c=$2 s=\n"
    "read -r s </proc/$$/stat 2>/dev/null\n"
    "s=${s##*\") \"}\n"
    "set -- $s\n"
    "if [ \"${3:-}\" = \"$$\" ]; then\n"
    "(sleep \"$t\"; kill -KILL 0) </dev/null >/dev/null 2>&1 &\n"
    "/bin/sh -c \"$c\" labvm-step\n"
    "rc=$?\n"
    "trap '' TERM\n"
    "kill -TERM 0\n"
    "exit $rc\n"
    "fi\n"
    "command -v timeout >/dev/null 2>&1 && exec timeout -s KILL \"$t\" /bin/sh -c \"$c\" "
    "labvm-step\n"
    "exec /bin/sh -c \"$c\" labvm-step\n";

enum { ST_CONNECTING, ST_OPEN, ST_DONE, ST_FAILED };

struct pe {
	lws_sorted_usec_list_t sul; /* wakes lws_service, so the loop sees its deadline */
	struct lws_context *ctx;
	int state;
	int ch; /* channel of the message being received (its first piece has it) */
	const char *bearer;
	const char *host; /* kube_api's, what the certificate must name */
	struct buf out, err, status;
	char why[200];
};

static void add_capped(struct buf *b, const void *p, size_t n)
{
	if (b->len >= PODEXEC_OUTPUT_MAX)
		return;
	if (n > PODEXEC_OUTPUT_MAX - b->len)
		n = PODEXEC_OUTPUT_MAX - b->len;
	buf_append(b, p, n);
}

static int cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
	struct pe *e = lws_get_opaque_user_data(wsi);

	switch (reason) {
	case LWS_CALLBACK_OPENSSL_LOAD_EXTRA_CLIENT_VERIFY_CERTS: {
		/* the client SSL_CTX (in user): the certificate is checked against
		 * kube_api's host, not against lws 4.1.6's cut of it (IPv6) */
		struct pe *c = lws_context_user(lws_get_context(wsi));
		return user && c && tlsname_pin((SSL_CTX *)user, c->host) == 0 ? 0 : 1;
	}
	case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
		unsigned char **p = (unsigned char **)in, *end = (*p) + len;
		if (!e || lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION,
		                                       (const unsigned char *)e->bearer,
		                                       (int)strlen(e->bearer), p, end))
			return -1;
		return 0;
	}
	case LWS_CALLBACK_CLIENT_ESTABLISHED:
		if (e)
			e->state = ST_OPEN;
		return 0;
	case LWS_CALLBACK_CLIENT_RECEIVE: {
		const unsigned char *p = in;
		if (!e)
			return 0;
		if (lws_is_first_fragment(wsi)) {
			if (!len)
				return 0;
			e->ch = p[0];
			p++;
			len--;
		}
		if (e->ch == 1)
			add_capped(&e->out, p, len);
		else if (e->ch == 2)
			add_capped(&e->err, p, len);
		else if (e->ch == 3 && e->status.len + len <= STATUS_MAX)
			buf_append(&e->status, p, len);
		return 0; /* 255 (v5 close) and others: nothing to do */
	}
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
		if (e) {
			int status = lws_http_client_http_response(wsi);
			if (status > 0 && status != 101)
				snprintf(e->why, sizeof e->why, "the API server answered HTTP %d",
				         status);
			else
				snprintf(e->why, sizeof e->why, "%s",
				         in ? (const char *)in : "connection error");
			e->state = ST_FAILED;
			lws_set_opaque_user_data(wsi, NULL);
		}
		return 0;
	case LWS_CALLBACK_CLIENT_CLOSED:
		if (e) {
			e->state = e->state == ST_OPEN ? ST_DONE : ST_FAILED;
			if (e->state == ST_FAILED && !e->why[0])
				snprintf(e->why, sizeof e->why, "closed before it opened");
			lws_set_opaque_user_data(wsi, NULL);
		}
		return 0;
	default:
		break;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}

static void tick(lws_sorted_usec_list_t *sul)
{
	struct pe *e = lws_container_of(sul, struct pe, sul);
	lws_sul_schedule(e->ctx, 0, &e->sul, tick, 20 * LWS_US_PER_MS);
}

static const struct lws_protocols protocols[] = {
    {"labvm-podexec", cb, 0, 4096, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* https://host[:port][/prefix] */
static int parse_api(const char *api, char *host, size_t hn, int *port, char *prefix, size_t pn)
{
	if (strncmp(api, "https://", 8) != 0)
		return -1;
	const char *h = api + 8, *slash = strchr(h, '/');
	if (!slash)
		slash = h + strlen(h);
	const char *colon = NULL;
	if (*h == '[') {
		const char *rb = memchr(h, ']', (size_t)(slash - h));
		if (!rb)
			return -1;
		colon = rb[1] == ':' ? rb + 1 : NULL;
		if ((size_t)(rb - h - 1) >= hn)
			return -1;
		memcpy(host, h + 1, (size_t)(rb - h - 1));
		host[rb - h - 1] = '\0';
	} else {
		colon = memchr(h, ':', (size_t)(slash - h));
		const char *he = colon ? colon : slash;
		if (he == h || (size_t)(he - h) >= hn)
			return -1;
		memcpy(host, h, (size_t)(he - h));
		host[he - h] = '\0';
	}
	*port = colon ? atoi(colon + 1) : 443;
	if (*port <= 0 || *port > 65535)
		return -1;
	snprintf(prefix, pn, "%.*s", (int)strcspn(slash, "?"), slash);
	size_t n = strlen(prefix);
	while (n && prefix[n - 1] == '/')
		prefix[--n] = '\0';
	return 0;
}

static void escape(struct buf *b, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
		    (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
			buf_append(b, s, 1);
		} else {
			char e[3] = {'%', hex[ch >> 4], hex[ch & 15]};
			buf_append(b, e, 3);
		}
	}
}

static void parse_status(struct pe *e, struct podexec_result *r)
{
	cJSON *o = cJSON_ParseWithLength(e->status.p ? e->status.p : "", e->status.len);
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "status");
	const cJSON *reason = cJSON_GetObjectItemCaseSensitive(o, "reason");
	const cJSON *msg = cJSON_GetObjectItemCaseSensitive(o, "message");
	const cJSON *c;
	r->exit_code = -1;
	if (cJSON_IsString(st) && strcmp(st->valuestring, "Success") == 0) {
		r->exit_code = 0;
	} else if (cJSON_IsString(reason) && strcmp(reason->valuestring, "NonZeroExitCode") == 0) {
		cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(
		                          cJSON_GetObjectItemCaseSensitive(o, "details"), "causes"))
		{
			const cJSON *cr = cJSON_GetObjectItemCaseSensitive(c, "reason");
			const cJSON *cm = cJSON_GetObjectItemCaseSensitive(c, "message");
			if (cJSON_IsString(cr) && strcmp(cr->valuestring, "ExitCode") == 0 &&
			    cJSON_IsString(cm))
				r->exit_code = atoi(cm->valuestring);
		}
	} else if (cJSON_IsString(msg)) {
		snprintf(r->status_message, sizeof r->status_message, "%s", msg->valuestring);
	}
	cJSON_Delete(o);
}

int podexec_run(const struct cfg *c, const char *bearer, const char *pod, const char *container,
                const char *command, int timeout_s, struct podexec_result *r, char *msg,
                size_t msglen)
{
	struct lws_context_creation_info info;
	struct lws_client_connect_info i;
	struct lws_context *ctx;
	struct lws *wsi = NULL;
	struct pe e;
	struct buf path = {0};
	char host[256], prefix[256];
	int port, rc = -1;

	memset(r, 0, sizeof *r);
	r->exit_code = -1;
	memset(&e, 0, sizeof e);
	e.bearer = bearer;
	e.host = host;
	if (parse_api(c->kube_api, host, sizeof host, &port, prefix, sizeof prefix) < 0) {
		snprintf(msg, msglen, "kube_api is not https://host[:port]");
		return -1;
	}
	buf_printf(&path, "%s/api/v1/namespaces/", prefix);
	escape(&path, c->namespace_);
	buf_puts(&path, "/pods/");
	escape(&path, pod);
	buf_puts(&path, "/exec?container=");
	escape(&path, container);
	buf_puts(&path, "&command=%2Fbin%2Fsh&command=-c&command=");
	escape(&path, STEP_WRAPPER);
	buf_printf(&path, "&command=labvm-step&command=%d&command=", timeout_s + KILL_AFTER);
	escape(&path, command);
	buf_puts(&path, "&stdout=true&stderr=true");

	lws_set_log_level(LLL_ERR, NULL);
	memset(&info, 0, sizeof info);
	info.port = CONTEXT_PORT_NO_LISTEN;
	info.protocols = protocols;
	info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
	info.client_ssl_ca_filepath = c->kube_ca_file;
	info.user = &e; /* for the TLS set-up callback */
	ctx = lws_create_context(&info);
	if (!ctx) {
		snprintf(msg, msglen, "cannot set up a TLS client (kube_ca_file %s)",
		         c->kube_ca_file);
		buf_free(&path);
		return -1;
	}
	e.ctx = ctx;
	lws_sul_schedule(ctx, 0, &e.sul, tick, 20 * LWS_US_PER_MS);
	memset(&i, 0, sizeof i);
	i.context = ctx;
	i.address = host;
	i.port = port;
	i.path = path.p;
	i.host = host;
	i.origin = host;
	i.ssl_connection = LCCSCF_USE_SSL;
	i.alpn = "http/1.1"; /* a WebSocket upgrade is HTTP/1.1's */
	i.protocol = PROTOS;
	i.local_protocol_name = "labvm-podexec";
	i.opaque_user_data = &e;
	i.pwsi = &wsi;
	e.state = ST_CONNECTING;
	if (!lws_client_connect_via_info(&i) && e.state == ST_CONNECTING) {
		e.state = ST_FAILED;
		snprintf(e.why, sizeof e.why, "cannot connect to the API server");
	}
	double end = util_mono_s() + timeout_s;
	while ((e.state == ST_CONNECTING || e.state == ST_OPEN) && util_mono_s() < end)
		lws_service(ctx, 0); /* the tick above wakes it every 20 ms */
	if (e.state == ST_CONNECTING || e.state == ST_OPEN) {
		/* past the step's timeout: hang up (the wrapper's watchdog kills the
		 * step in the Pod KILL_AFTER s later) */
		if (wsi)
			lws_set_opaque_user_data(wsi, NULL);
		r->timed_out = e.state == ST_OPEN;
		if (e.state == ST_CONNECTING)
			snprintf(e.why, sizeof e.why, "no exec stream within %d s", timeout_s);
	}
	if (e.state == ST_DONE || r->timed_out) {
		if (e.state == ST_DONE)
			parse_status(&e, r);
		rc = 0;
	} else {
		snprintf(msg, msglen, "exec in Pod %s: %s", pod, e.why[0] ? e.why : "failed");
	}
	lws_sul_cancel(&e.sul);
	lws_context_destroy(ctx);
	r->out = e.out.p ? e.out.p : xstrdup("");
	r->nout = e.out.len;
	r->err = e.err.p ? e.err.p : xstrdup("");
	r->nerr = e.err.len;
	buf_free(&e.status);
	buf_free(&path);
	return rc;
}

void podexec_result_free(struct podexec_result *r)
{
	free(r->out);
	free(r->err);
	memset(r, 0, sizeof *r);
}
