/* upstream_kubevirt.c - the upstream kind "VMI console": one client
 * WebSocket per console session to the VMI console subresource (subprotocol
 * plain.kubevirt.io: raw bytes in binary frames, no channel byte). The
 * connection, token, flow control and close are upstream_lws.c's; this file
 * is the path and the framing. Implements upstream.h. */
#include <stdio.h>
#include <stdlib.h>

#include "bridge.h"
#include "log.h"
#include "upstream_lws.h"

#define KUBEVIRT_PROTO "plain.kubevirt.io"

struct upstream {
	struct upstream_lws l; /* first (upstream_lws.h) */
};

static struct upstream *kv_open(const char *sid, const char *vm, const struct upstream_events *ev,
                                void *owner)
{
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
	ul_init(&u->l, sid, "console", ev, owner);
	if (ul_connect(&u->l, path, KUBEVIRT_PROTO, UPSTREAM_KUBEVIRT_LOCAL) < 0) {
		free(u);
		return NULL;
	}
	log_info("session %s: opening upstream console (vm %s)", sid, vm);
	return u;
}

static int kv_write(struct upstream *u, const void *p, size_t n)
{
	return ul_write(&u->l, p, n);
}

static size_t kv_queued(const struct upstream *u)
{
	return ul_queued(&u->l);
}

static void kv_rx(struct upstream *u, int enable)
{
	ul_rx(&u->l, enable);
}

static void kv_close(struct upstream *u, int going_away)
{
	ul_close(&u->l, going_away);
}

const struct upstream_ops upstream_kubevirt_console = {
    .kind = "kubevirt-console",
    .open = kv_open,
    .write = kv_write,
    .queued = kv_queued,
    .rx = kv_rx,
    .close = kv_close,
};

static int kv_writeable(struct lws *wsi, struct upstream_lws *l)
{
	unsigned char *p;
	int is_text;

	if (ul_writeable_begin(wsi, l) < 0)
		return -1;
	size_t n = bq_peek(&l->out, &p, &is_text);
	if (!n)
		return 0;
	int m = lws_write(wsi, p, n, LWS_WRITE_BINARY); /* raw bytes, no channel byte */
	if (m < (int)n)
		return -1;
	ul_sent(wsi, l, n);
	return 0;
}

int upstream_kubevirt_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
                               void *in, size_t len)
{
	struct upstream_lws *l = lws_get_opaque_user_data(wsi);

	switch (reason) {
	case LWS_CALLBACK_CLIENT_ESTABLISHED:
		if (ul_established(wsi, l) < 0)
			return -1;
		l->ev->opened(l->owner);
		if (l->out.bytes)
			lws_callback_on_writable(wsi);
		return 0;

	case LWS_CALLBACK_CLIENT_RECEIVE:
		if (!l || l->state == UL_CLOSING || !lws_frame_is_binary(wsi))
			return 0; /* KubeVirt sends binary frames only */
		l->ev->data(l->owner, in, len);
		return 0;

	case LWS_CALLBACK_CLIENT_WRITEABLE:
		return kv_writeable(wsi, l);

	default:
		return ul_callback(wsi, reason, user, in, len);
	}
}
