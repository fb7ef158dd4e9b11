/* upstream_kubevirt.c - the upstream kind "VMI console": one client
 * WebSocket per console session to the VMI console subresource (subprotocol
 * plain.kubevirt.io: raw bytes in binary frames, no channel byte), bearer
 * token from kube_token_file (kubeapi.c), TLS verified against kube_ca_file
 * (the upstream vhost, main.c). Implements upstream.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/ssl.h>

#include "bridge.h"
#include "bytequeue.h"
#include "log.h"
#include "upstream.h"

#define KUBEVIRT_PROTO "plain.kubevirt.io"

enum kv_state { KV_CONNECTING = 0, KV_OPEN, KV_CLOSING };

struct upstream {
	struct lws *wsi;
	enum kv_state state;
	const struct upstream_events *ev;
	void *owner;
	struct bq out;            /* terminal input, to the console */
	int rx_paused;            /* we stopped reading it */
	int want_pause;           /* stop reading it from its next writeable */
	int going_away;           /* close with 1001 (bridge shutting down), else 1000 */
	int opening, open_failed; /* inside lws_client_connect_via_info() */
	char why[96];             /* why it closed, when the peer said so */
	char sid[37];
};

static lws_retry_bo_t kv_retry;

static struct upstream *kv_open(const char *sid, const char *vm, const struct upstream_events *ev,
                                void *owner)
{
	struct lws_client_connect_info i;
	char path[600];

	if (kubeapi_load_token(&B->kube) < 0)
		return NULL;
	if (snprintf(path, sizeof path,
	             "%s/apis/subresources.kubevirt.io/v1/namespaces/%s/virtualmachineinstances/%s/"
	             "console",
	             B->kube.prefix, B->cfg.namespace_, vm) >= (int)sizeof path)
		return NULL;
	struct upstream *u = calloc(1, sizeof *u);
	if (!u)
		return NULL;
	u->ev = ev;
	u->owner = owner;
	snprintf(u->sid, sizeof u->sid, "%s", sid);
	kv_retry.secs_since_valid_ping = (uint16_t)B->cfg.console_ping_s;
	kv_retry.secs_since_valid_hangup = (uint16_t)(B->cfg.console_ping_s * 3);

	memset(&i, 0, sizeof i);
	i.context = B->ctx;
	i.vhost = B->up_vhost;
	i.address = B->kube.host;
	i.port = B->kube.port;
	i.path = path;
	i.host = B->kube.host;
	i.origin = B->kube.host;
	i.ssl_connection = LCCSCF_USE_SSL; /* verified against kube_ca_file */
	i.protocol = KUBEVIRT_PROTO;
	i.local_protocol_name = UPSTREAM_KUBEVIRT_LOCAL;
	i.opaque_user_data = u;
	i.retry_and_idle_policy = &kv_retry;

	u->opening = 1;
	u->wsi = lws_client_connect_via_info(&i);
	u->opening = 0;
	if (!u->wsi || u->open_failed) {
		free(u);
		return NULL;
	}
	log_info("session %s: opening upstream console (vm %s)", sid, vm);
	return u;
}

static int kv_write(struct upstream *u, const void *p, size_t n)
{
	if (bq_append(&u->out, p, n, 0) < 0)
		return -1;
	if (u->state == KV_OPEN)
		lws_callback_on_writable(u->wsi);
	return 0;
}

static size_t kv_queued(const struct upstream *u)
{
	return u->out.bytes;
}

static void kv_rx(struct upstream *u, int enable)
{
	if (enable) {
		u->want_pause = 0;
		if (u->rx_paused) {
			lws_rx_flow_control(u->wsi, 1);
			u->rx_paused = 0;
		}
	} else if (!u->rx_paused) {
		/* not from inside our own RECEIVE (upstream.h): from the next writeable */
		u->want_pause = 1;
		lws_callback_on_writable(u->wsi);
	}
}

static void kv_close(struct upstream *u, int going_away)
{
	if (u->state == KV_OPEN) {
		/* a close frame from the writeable callback; killed if that stalls */
		u->state = KV_CLOSING;
		u->going_away = going_away;
		lws_set_timeout(u->wsi, PENDING_TIMEOUT_CLOSE_SEND, 3);
		lws_callback_on_writable(u->wsi);
	} else if (u->state != KV_CLOSING) {
		u->state = KV_CLOSING;
		lws_set_timeout(u->wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
	}
}

const struct upstream_ops upstream_kubevirt_console = {
    .kind = "kubevirt-console",
    .open = kv_open,
    .write = kv_write,
    .queued = kv_queued,
    .rx = kv_rx,
    .close = kv_close,
};

/* The connection is gone (or failed): tell the owner once, then free. */
static void gone(struct lws *wsi, struct upstream *u, const char *why)
{
	if (!u)
		return;
	lws_set_opaque_user_data(wsi, NULL);
	if (u->opening) { /* inside lws_client_connect_via_info(): kv_open() decides */
		u->open_failed = 1;
		return;
	}
	u->ev->closed(u->owner, u->why[0] ? u->why : why);
	bq_clear(&u->out);
	free(u);
}

static int kv_writeable(struct lws *wsi, struct upstream *u)
{
	unsigned char *p;
	int is_text;

	if (!u || u->state == KV_CLOSING) {
		static const char bye[] = "console closed";
		lws_close_reason(
		    wsi, u && u->going_away ? LWS_CLOSE_STATUS_GOINGAWAY : LWS_CLOSE_STATUS_NORMAL,
		    (unsigned char *)bye, sizeof bye - 1);
		return -1;
	}
	if (u->want_pause) {
		u->want_pause = 0;
		if (!u->rx_paused) {
			lws_rx_flow_control(wsi, 0);
			u->rx_paused = 1;
		}
	}
	size_t n = bq_peek(&u->out, &p, &is_text);
	if (!n)
		return 0;
	int m = lws_write(wsi, p, n, LWS_WRITE_BINARY); /* raw bytes, no channel byte */
	if (m < (int)n)
		return -1;
	bq_consume(&u->out, n);
	u->ev->drained(u->owner, u->out.bytes);
	if (u->out.head)
		lws_callback_on_writable(wsi);
	return 0;
}

int upstream_kubevirt_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
                               void *in, size_t len)
{
	struct upstream *u = lws_get_opaque_user_data(wsi);

	switch (reason) {
	case LWS_CALLBACK_OPENSSL_LOAD_EXTRA_CLIENT_VERIFY_CERTS:
		/* the client SSL_CTX (in user): idle consoles give their TLS buffers back */
		if (user)
			SSL_CTX_set_mode((SSL_CTX *)user, SSL_MODE_RELEASE_BUFFERS);
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

	case LWS_CALLBACK_CLIENT_ESTABLISHED:
		if (!u || u->state == KV_CLOSING)
			return -1;
		u->wsi = wsi;
		u->state = KV_OPEN;
		u->ev->opened(u->owner);
		if (u->out.bytes)
			lws_callback_on_writable(wsi);
		return 0;

	case LWS_CALLBACK_CLIENT_RECEIVE:
		if (!u || u->state == KV_CLOSING || !lws_frame_is_binary(wsi))
			return 0; /* KubeVirt sends binary frames only */
		u->ev->data(u->owner, in, len);
		return 0;

	case LWS_CALLBACK_CLIENT_WRITEABLE:
		return kv_writeable(wsi, u);

	case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
		if (u && len >= 2) {
			const unsigned char *b = in;
			int code = b[0] << 8 | b[1];
			snprintf(u->why, sizeof u->why, "closed by the API server (%d%s%.*s)", code,
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
		if (u)
			log_warn("session %s: upstream console: %s", u->sid, why);
		gone(wsi, u, why);
		return 0;
	}

	case LWS_CALLBACK_CLIENT_CLOSED:
		gone(wsi, u, "closed by the API server");
		return 0;

	default:
		break;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}
