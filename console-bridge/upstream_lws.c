/* upstream_lws.c - the lws client side shared by the upstream kinds
 * (upstream_lws.h): bearer token from kube_token_file (kubeapi.c), TLS
 * verified against kube_ca_file (the upstream vhost, main.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/ssl.h>

#include "bridge.h"
#include "log.h"
#include "tlsname.h"
#include "upstream_lws.h"

static lws_retry_bo_t ul_retry;

void ul_init(struct upstream_lws *l, const char *sid, const char *what,
             const struct upstream_events *ev, void *owner)
{
	l->ev = ev;
	l->owner = owner;
	l->what = what;
	snprintf(l->sid, sizeof l->sid, "%s", sid);
}

int ul_connect(struct upstream_lws *l, const char *path, const char *protocols, const char *local)
{
	struct lws_client_connect_info i;

	ul_retry.secs_since_valid_ping = (uint16_t)B->cfg.console_ping_s;
	ul_retry.secs_since_valid_hangup = (uint16_t)(B->cfg.console_ping_s * 3);

	memset(&i, 0, sizeof i);
	i.context = B->ctx;
	i.vhost = B->up_vhost;
	i.address = B->kube.host;
	i.port = B->kube.port;
	i.path = path;
	i.host = B->kube.host;
	i.origin = B->kube.host;
	i.ssl_connection = LCCSCF_USE_SSL; /* verified against kube_ca_file */
	i.alpn = "http/1.1";               /* a WebSocket upgrade is HTTP/1.1's */
	i.protocol = protocols;
	i.local_protocol_name = local;
	i.opaque_user_data = l;
	i.retry_and_idle_policy = &ul_retry;

	l->opening = 1;
	l->wsi = lws_client_connect_via_info(&i);
	l->opening = 0;
	return !l->wsi || l->open_failed ? -1 : 0;
}

int ul_write(struct upstream_lws *l, const void *p, size_t n)
{
	if (bq_append(&l->out, p, n, 0) < 0)
		return -1;
	ul_want_write(l);
	return 0;
}

size_t ul_queued(const struct upstream_lws *l)
{
	return l->out.bytes;
}

void ul_want_write(struct upstream_lws *l)
{
	if (l->state == UL_OPEN)
		lws_callback_on_writable(l->wsi);
}

void ul_rx(struct upstream_lws *l, int enable)
{
	if (enable) {
		l->want_pause = 0;
		if (l->rx_paused) {
			lws_rx_flow_control(l->wsi, 1);
			l->rx_paused = 0;
		}
	} else if (!l->rx_paused) {
		/* not from inside our own RECEIVE (upstream.h): from the next writeable */
		l->want_pause = 1;
		lws_callback_on_writable(l->wsi);
	}
}

void ul_close(struct upstream_lws *l, int going_away)
{
	if (l->state == UL_OPEN) {
		/* a close frame from the writeable callback; killed if that stalls */
		l->state = UL_CLOSING;
		l->going_away = going_away;
		lws_set_timeout(l->wsi, PENDING_TIMEOUT_CLOSE_SEND, 3);
		lws_callback_on_writable(l->wsi);
	} else if (l->state != UL_CLOSING) {
		l->state = UL_CLOSING;
		lws_set_timeout(l->wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
	}
}

int ul_established(struct lws *wsi, struct upstream_lws *l)
{
	if (!l || l->state == UL_CLOSING)
		return -1;
	l->wsi = wsi;
	l->state = UL_OPEN;
	return 0;
}

int ul_writeable_begin(struct lws *wsi, struct upstream_lws *l)
{
	if (!l || l->state == UL_CLOSING) {
		static const char bye[] = "console closed";
		lws_close_reason(
		    wsi, l && l->going_away ? LWS_CLOSE_STATUS_GOINGAWAY : LWS_CLOSE_STATUS_NORMAL,
		    (unsigned char *)bye, sizeof bye - 1);
		return -1;
	}
	if (l->want_pause) {
		l->want_pause = 0;
		if (!l->rx_paused) {
			lws_rx_flow_control(wsi, 0);
			l->rx_paused = 1;
		}
	}
	return 0;
}

void ul_sent(struct lws *wsi, struct upstream_lws *l, size_t n)
{
	bq_consume(&l->out, n);
	l->ev->drained(l->owner, l->out.bytes);
	if (l->out.head)
		lws_callback_on_writable(wsi);
}

/* The connection is gone (or failed): tell the owner once, then free. */
static void gone(struct lws *wsi, struct upstream_lws *l, const char *why)
{
	if (!l)
		return;
	lws_set_opaque_user_data(wsi, NULL);
	if (l->opening) { /* inside lws_client_connect_via_info(): ul_connect() decides */
		l->open_failed = 1;
		return;
	}
	l->ev->closed(l->owner, l->why[0] ? l->why : why);
	bq_clear(&l->out);
	free(l); /* the kind's object: l is its first member */
}

int ul_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len)
{
	struct upstream_lws *l = lws_get_opaque_user_data(wsi);

	switch (reason) {
	case LWS_CALLBACK_OPENSSL_LOAD_EXTRA_CLIENT_VERIFY_CERTS:
		/* the client SSL_CTX (in user): idle consoles give their TLS buffers
		 * back; the certificate is checked against kube_api's host as
		 * labvm reads it, not as lws 4.1.6 cuts it (an IPv6 literal) */
		if (user) {
			SSL_CTX_set_mode((SSL_CTX *)user, SSL_MODE_RELEASE_BUFFERS);
			if (tlsname_pin((SSL_CTX *)user, B->kube.host) < 0)
				return 1;
		}
		return 0;

	case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
		unsigned char **p = (unsigned char **)in, *end = (*p) + len;
		const char *bearer = B->kube.bearer;
		if (!bearer)
			return -1;
		if (lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION,
		                                 (const unsigned char *)bearer, (int)strlen(bearer),
		                                 p, end))
			return -1;
		return 0;
	}

	case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
		/* a reason the kind found first (an exec's Status) stays */
		if (l && !l->why[0] && len >= 2) {
			const unsigned char *b = in;
			int code = b[0] << 8 | b[1];
			snprintf(l->why, sizeof l->why, "closed by the API server (%d%s%.*s)", code,
			         len > 2 ? ": " : "", (int)(len > 60 ? 58 : len - 2),
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
		if (l)
			log_warn("session %s: upstream %s: %s", l->sid, l->what, why);
		gone(wsi, l, why);
		return 0;
	}

	case LWS_CALLBACK_CLIENT_CLOSED:
		gone(wsi, l, "closed by the API server");
		return 0;

	default:
		break;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}
