/* upstream_podexec.c - the upstream kind "Pod exec": one client WebSocket per
 * console session to the Pod's exec subresource, a login shell on a tty in
 * the lab container, subprotocol v5.channel.k8s.io (v4.channel.k8s.io when
 * the API server has no v5). Implements upstream.h.
 *
 * Unlike the VMI console, every WebSocket message starts with its channel:
 *   to the Pod     0 stdin (terminal input), 4 resize {"Width":W,"Height":H}
 *   from the Pod   1 stdout, 2 stderr (terminal output: the channel byte is
 *                  stripped), 3 error (a Status JSON when the shell ends:
 *                  closed()'s reason), 255 close (v5), anything else ignored
 * A message longer than the receive buffer arrives in pieces: only its first
 * piece carries the channel byte, so the channel is remembered until the
 * message's last piece. The shell: the Pod's LABVM_SHELL (the lesson's
 * "shell"), else bash, else sh, as a login shell. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "bridge.h"
#include "log.h"
#include "upstream_lws.h"

#define EXEC_PROTOS "v5.channel.k8s.io,v4.channel.k8s.io"
#define TX_MAX      16384 /* stdin bytes per message */
#define STATUS_MAX  2048

/* sh -c 'if [ -n "$LABVM_SHELL" ]; then exec "$LABVM_SHELL" -l; elif [ -x /bin/bash ]; ...' */
#define SHELL_CMD                                                                                  \
	"command=%2Fbin%2Fsh&command=-c&command="                                                  \
	"if%20%5B%20-n%20%22%24LABVM_SHELL%22%20%5D%3B%20then%20exec%20%22%24LABVM_SHELL%22%20-"   \
	"l%3B%20elif%20%5B%20-x%20%2Fbin%2Fbash%20%5D%3B%20then%20exec%20%2Fbin%2Fbash%20-l%3B%"   \
	"20else%20exec%20%2Fbin%2Fsh%20-l%3B%20fi"

enum { CH_STDIN = 0, CH_STDOUT = 1, CH_STDERR = 2, CH_ERROR = 3, CH_RESIZE = 4, CH_CLOSE = 255 };

struct upstream {
	struct upstream_lws l; /* first (upstream_lws.h); l.why: the Status's words */
	int v5;                /* negotiated v5.channel.k8s.io */
	int ch;                /* channel of the message being received */
	int resize;            /* a size is waiting to be sent */
	int cols, rows;        /* the last size */
	char status[STATUS_MAX + 1];
	size_t status_len;
	unsigned char tx[LWS_PRE + 1 + TX_MAX];
};

static struct upstream *px_open(const char *sid, const char *pod, const struct upstream_events *ev,
                                void *owner)
{
	char path[1024];

	if (kubeapi_load_token(&B->kube) < 0)
		return NULL;
	if (snprintf(path, sizeof path,
	             "%s/api/v1/namespaces/%s/pods/%s/exec?container=lab&%s"
	             "&stdin=true&stdout=true&tty=true",
	             B->kube.prefix, B->cfg.namespace_, pod, SHELL_CMD) >= (int)sizeof path)
		return NULL;
	struct upstream *u = calloc(1, sizeof *u);
	if (!u)
		return NULL;
	ul_init(&u->l, sid, "exec", ev, owner);
	/* the server picks; v5 first */
	if (ul_connect(&u->l, path, EXEC_PROTOS, UPSTREAM_PODEXEC_LOCAL) < 0) {
		free(u);
		return NULL;
	}
	log_info("session %s: opening upstream exec (pod %s)", sid, pod);
	return u;
}

static int px_write(struct upstream *u, const void *p, size_t n)
{
	return ul_write(&u->l, p, n);
}

static size_t px_queued(const struct upstream *u)
{
	return ul_queued(&u->l);
}

static void px_rx(struct upstream *u, int enable)
{
	ul_rx(&u->l, enable);
}

static void px_close(struct upstream *u, int going_away)
{
	ul_close(&u->l, going_away);
}

static int px_resize(struct upstream *u, int cols, int rows)
{
	u->cols = cols;
	u->rows = rows;
	u->resize = 1;
	ul_want_write(&u->l);
	return 0;
}

const struct upstream_ops upstream_pod_exec = {
    .kind = "pod-exec",
    .open = px_open,
    .write = px_write,
    .queued = px_queued,
    .rx = px_rx,
    .close = px_close,
    .resize = px_resize,
};

/* The error channel's Status: Success, or NonZeroExitCode with the code. */
static void px_status(struct upstream *u)
{
	cJSON *o = cJSON_ParseWithLength(u->status, u->status_len);
	const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "status");
	const cJSON *reason = cJSON_GetObjectItemCaseSensitive(o, "reason");
	const cJSON *msg = cJSON_GetObjectItemCaseSensitive(o, "message");
	const cJSON *causes = cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(o, "details"), "causes");
	const cJSON *c;
	const char *code = NULL;

	cJSON_ArrayForEach(c, causes)
	{
		const cJSON *r = cJSON_GetObjectItemCaseSensitive(c, "reason");
		const cJSON *m = cJSON_GetObjectItemCaseSensitive(c, "message");
		if (cJSON_IsString(r) && strcmp(r->valuestring, "ExitCode") == 0 &&
		    cJSON_IsString(m))
			code = m->valuestring;
	}
	if (cJSON_IsString(st) && strcmp(st->valuestring, "Success") == 0)
		snprintf(u->l.why, sizeof u->l.why, "the shell exited");
	else if (cJSON_IsString(reason) && strcmp(reason->valuestring, "NonZeroExitCode") == 0 &&
	         code)
		snprintf(u->l.why, sizeof u->l.why, "the shell exited with code %.8s", code);
	else
		snprintf(u->l.why, sizeof u->l.why, "exec ended: %.120s",
		         cJSON_IsString(msg) ? msg->valuestring : "unknown status");
	cJSON_Delete(o);
}

static void px_receive(struct lws *wsi, struct upstream *u, const unsigned char *p, size_t n)
{
	if (lws_is_first_fragment(wsi)) {
		if (!n)
			return;
		u->ch = p[0]; /* only the message's first piece carries it */
		p++;
		n--;
		if (u->ch == CH_ERROR)
			u->status_len = 0;
	}
	switch (u->ch) {
	case CH_STDOUT:
	case CH_STDERR:
		if (n)
			u->l.ev->data(u->l.owner, p, n);
		break;
	case CH_ERROR:
		if (n > STATUS_MAX - u->status_len)
			n = STATUS_MAX - u->status_len;
		memcpy(u->status + u->status_len, p, n);
		u->status_len += n;
		if (lws_is_final_fragment(wsi) && u->status_len)
			px_status(u);
		break;
	default:
		break; /* v5's close of a channel, or a channel we did not ask for */
	}
}

static int px_writeable(struct lws *wsi, struct upstream *u)
{
	unsigned char *p;
	int is_text;

	if (ul_writeable_begin(wsi, u ? &u->l : NULL) < 0)
		return -1;
	unsigned char *b = u->tx + LWS_PRE;
	if (u->resize) {
		u->resize = 0;
		b[0] = CH_RESIZE;
		int m = snprintf((char *)b + 1, TX_MAX, "{\"Width\":%d,\"Height\":%d}", u->cols,
		                 u->rows);
		if (lws_write(wsi, b, (size_t)m + 1, LWS_WRITE_BINARY) < m + 1)
			return -1;
		if (u->l.out.head)
			lws_callback_on_writable(wsi);
		return 0;
	}
	size_t n = bq_peek(&u->l.out, &p, &is_text);
	if (!n)
		return 0;
	if (n > TX_MAX)
		n = TX_MAX;
	b[0] = CH_STDIN;
	memcpy(b + 1, p, n);
	if (lws_write(wsi, b, n + 1, LWS_WRITE_BINARY) < (int)n + 1)
		return -1;
	ul_sent(wsi, &u->l, n);
	return 0;
}

int upstream_podexec_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
                              void *in, size_t len)
{
	struct upstream *u = lws_get_opaque_user_data(wsi);

	switch (reason) {
	case LWS_CALLBACK_CLIENT_ESTABLISHED: {
		char proto[40] = "";
		if (ul_established(wsi, u ? &u->l : NULL) < 0)
			return -1;
		if (lws_hdr_copy(wsi, proto, sizeof proto, WSI_TOKEN_PROTOCOL) > 0)
			u->v5 = strcmp(proto, "v5.channel.k8s.io") == 0;
		log_info("session %s: exec stream open (%s)", u->l.sid, proto[0] ? proto : "?");
		u->l.ev->opened(u->l.owner);
		if (u->l.out.bytes || u->resize)
			lws_callback_on_writable(wsi);
		return 0;
	}

	case LWS_CALLBACK_CLIENT_RECEIVE:
		if (!u || u->l.state == UL_CLOSING)
			return 0;
		px_receive(wsi, u, in, len);
		return 0;

	case LWS_CALLBACK_CLIENT_WRITEABLE:
		return px_writeable(wsi, u);

	default:
		return ul_callback(wsi, reason, user, in, len);
	}
}
