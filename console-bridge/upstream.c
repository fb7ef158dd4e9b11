/* upstream.c - the client side: one WebSocket per console session to the VMI
 * console subresource (subprotocol plain.kubevirt.io: raw bytes in binary
 * frames, no channel byte), bearer token from kube_token_file (re-read when
 * it changes), TLS verified against kube_ca_file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/ssl.h>

#include "bridge.h"
#include "log.h"
#include "util.h"

int upstream_parse_api(const char *api, char *host, size_t hostlen, int *port, char *prefix,
                       size_t prefixlen)
{
	const char *p, *h, *he, *slash;

	if (strncmp(api, "https://", 8) != 0)
		return -1;
	h = api + 8;
	slash = strchr(h, '/');
	if (!slash)
		slash = h + strlen(h);
	if (*h == '[') { /* [v6]:port */
		he = memchr(h, ']', (size_t)(slash - h));
		if (!he)
			return -1;
		h++;
		p = he + 1;
	} else {
		he = memchr(h, ':', (size_t)(slash - h));
		if (!he)
			he = slash;
		p = he;
	}
	if (he == h || (size_t)(he - h) >= hostlen)
		return -1;
	memcpy(host, h, (size_t)(he - h));
	host[he - h] = '\0';
	*port = 443;
	if (*p == ':') {
		char *end;
		long n = strtol(p + 1, &end, 10);
		if (end != slash || n < 1 || n > 65535)
			return -1;
		*port = (int)n;
	} else if (p != slash) {
		return -1;
	}
	size_t pl = strlen(slash);
	while (pl && slash[pl - 1] == '/')
		pl--;
	if (pl >= prefixlen)
		return -1;
	memcpy(prefix, slash, pl);
	prefix[pl] = '\0';
	return 0;
}

/* Service-account tokens rotate: re-read the file whenever it changed. On a
 * read error keep the token we have (if any). */
int upstream_load_token(void)
{
	struct stat st;
	const char *path = B->cfg.kube_token_file;

	if (stat(path, &st) < 0) {
		log_warn("kube_token_file %s: %s", path, strerror(errno));
		return B->bearer ? 0 : -1;
	}
	int64_t mt = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	if (B->bearer && mt == B->token_stat.mtime_ns && (uint64_t)st.st_ino == B->token_stat.ino &&
	    (int64_t)st.st_size == B->token_stat.size)
		return 0;
	size_t len;
	char *tok = util_read_file(path, 64 * 1024, &len);
	if (!tok) {
		log_warn("kube_token_file %s: %s", path, strerror(errno));
		return B->bearer ? 0 : -1;
	}
	util_rstrip(tok);
	if (!*tok) {
		free(tok);
		log_warn("kube_token_file %s is empty", path);
		return B->bearer ? 0 : -1;
	}
	size_t n = strlen(tok) + 8;
	char *bearer = malloc(n);
	if (!bearer) {
		explicit_bzero(tok, strlen(tok));
		free(tok);
		return B->bearer ? 0 : -1;
	}
	snprintf(bearer, n, "Bearer %s", tok);
	explicit_bzero(tok, strlen(tok));
	free(tok);
	if (B->bearer) {
		explicit_bzero(B->bearer, strlen(B->bearer));
		free(B->bearer);
		log_info("kube_token_file changed: using the new token for new consoles");
	}
	B->bearer = bearer;
	B->token_stat.mtime_ns = mt;
	B->token_stat.ino = (uint64_t)st.st_ino;
	B->token_stat.size = (int64_t)st.st_size;
	return 0;
}

static lws_retry_bo_t up_retry;

int upstream_open(struct bsession *s)
{
	struct lws_client_connect_info i;
	char path[600];

	if (upstream_load_token() < 0)
		return -1;
	if (snprintf(path, sizeof path,
	             "%s/apis/subresources.kubevirt.io/v1/namespaces/%s/virtualmachineinstances/%s/"
	             "console",
	             B->kube_prefix, B->cfg.namespace_, s->vm) >= (int)sizeof path)
		return -1;
	up_retry.secs_since_valid_ping = (uint16_t)B->cfg.console_ping_s;
	up_retry.secs_since_valid_hangup = (uint16_t)(B->cfg.console_ping_s * 3);

	memset(&i, 0, sizeof i);
	i.context = B->ctx;
	i.vhost = B->vhost;
	i.address = B->kube_host;
	i.port = B->kube_port;
	i.path = path;
	i.host = B->kube_host;
	i.origin = B->kube_host;
	i.ssl_connection = LCCSCF_USE_SSL; /* verified against kube_ca_file */
	i.protocol = KUBEVIRT_PROTO;
	i.local_protocol_name = UPSTREAM_LOCAL;
	i.opaque_user_data = s;
	i.retry_and_idle_policy = &up_retry;

	B->st.upstream_connects++;
	s->up_state = UP_CONNECTING;
	s->t_open_start = bridge_now_ms();
	s->opening = 1;
	s->open_failed = 0;
	struct lws *wsi = lws_client_connect_via_info(&i);
	s->opening = 0;
	if (!wsi || s->open_failed) {
		s->up = NULL;
		s->up_state = UP_NONE;
		B->st.upstream_failures++;
		return -1;
	}
	s->up = wsi;
	log_info("session %s: opening upstream console (vm %s)", s->sid, s->vm);
	return 0;
}

void upstream_close(struct bsession *s)
{
	if (!s->up)
		return;
	if (s->up_state == UP_OPEN) {
		/* a close frame from the writeable callback; killed if that stalls */
		s->up_state = UP_CLOSING;
		lws_set_timeout(s->up, PENDING_TIMEOUT_CLOSE_SEND, 3);
		lws_callback_on_writable(s->up);
	} else if (s->up_state != UP_CLOSING) {
		s->up_state = UP_CLOSING;
		lws_set_timeout(s->up, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
	}
}

static void gone(struct lws *wsi, struct bsession *s, const char *why)
{
	if (!s)
		return;
	lws_set_opaque_user_data(wsi, NULL);
	if (s->opening) { /* inside lws_client_connect_via_info(): upstream_open() decides */
		s->open_failed = 1;
		snprintf(s->up_why, sizeof s->up_why, "%s", why);
		return;
	}
	if (s->up != wsi && s->up)
		return;
	bs_upstream_gone(s, s->up_why[0] ? s->up_why : why);
}

static int upstream_writeable(struct lws *wsi, struct bsession *s)
{
	unsigned char *p;
	int is_text;

	if (!s || s->dead || s->up_state == UP_CLOSING) {
		static const char bye[] = "console closed";
		lws_close_reason(wsi,
		                 B->stopping ? LWS_CLOSE_STATUS_GOINGAWAY : LWS_CLOSE_STATUS_NORMAL,
		                 (unsigned char *)bye, sizeof bye - 1);
		return -1;
	}
	if (s->up_want_pause) {
		s->up_want_pause = 0;
		if (!s->up_rx_paused) {
			lws_rx_flow_control(wsi, 0);
			s->up_rx_paused = 1;
		}
	}
	size_t n = bq_peek(&s->to_up, &p, &is_text);
	if (!n)
		return 0;
	int m = lws_write(wsi, p, n, LWS_WRITE_BINARY); /* raw bytes, no channel byte */
	if (m < (int)n)
		return -1;
	bq_consume(&s->to_up, n);
	bs_upstream_drained(s);
	if (s->to_up.head)
		lws_callback_on_writable(wsi);
	return 0;
}

int callback_upstream(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                      size_t len)
{
	struct bsession *s = lws_get_opaque_user_data(wsi);

	switch (reason) {
	case LWS_CALLBACK_OPENSSL_LOAD_EXTRA_CLIENT_VERIFY_CERTS:
		/* the client SSL_CTX (in user): idle consoles give their TLS buffers back */
		if (user)
			SSL_CTX_set_mode((SSL_CTX *)user, SSL_MODE_RELEASE_BUFFERS);
		return 0;

	case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
		unsigned char **p = (unsigned char **)in, *end = (*p) + len;
		if (!B->bearer)
			return -1;
		if (lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION,
		                                 (const unsigned char *)B->bearer,
		                                 (int)strlen(B->bearer), p, end))
			return -1;
		return 0;
	}

	case LWS_CALLBACK_CLIENT_ESTABLISHED:
		if (!s || s->dead)
			return -1;
		s->up = wsi;
		bs_upstream_open(s);
		return 0;

	case LWS_CALLBACK_CLIENT_RECEIVE:
		if (!s || s->dead || !lws_frame_is_binary(wsi))
			return 0; /* KubeVirt sends binary frames only */
		bs_upstream_data(s, in, len);
		return 0;

	case LWS_CALLBACK_CLIENT_WRITEABLE:
		return upstream_writeable(wsi, s);

	case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
		if (s && len >= 2) {
			const unsigned char *b = in;
			int code = b[0] << 8 | b[1];
			snprintf(s->up_why, sizeof s->up_why, "closed by the API server (%d%s%.*s)",
			         code, len > 2 ? ": " : "", (int)(len > 60 ? 58 : len - 2),
			         (const char *)b + 2);
		}
		return 0;

	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
		char why[96];
		int status = lws_http_client_http_response(wsi);
		if (status > 0 && status != 101)
			snprintf(why, sizeof why, "the API server answered HTTP %d", status);
		else
			snprintf(why, sizeof why, "%s", in ? (const char *)in : "connection error");
		if (s)
			log_warn("session %s: upstream console: %s", s->sid, why);
		gone(wsi, s, why);
		return 0;
	}

	case LWS_CALLBACK_CLIENT_CLOSED:
		gone(wsi, s, "closed by the API server");
		return 0;

	default:
		break;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}
