/* ws.c - the WebSocket client of labvm-bench console (see ws.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ws.h"

static int cb_client(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                     size_t len)
{
	struct wsc *c = lws_get_opaque_user_data(wsi);

	switch (reason) {
	case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
		unsigned char **p = (unsigned char **)in, *end = (*p) + len;
		if (c && c->auth &&
		    lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_AUTHORIZATION,
		                                 (const unsigned char *)c->auth,
		                                 (int)strlen(c->auth), p, end))
			return -1;
		if (c && c->forwarded &&
		    lws_add_http_header_by_name(wsi, (const unsigned char *)"forwarded:",
		                                (const unsigned char *)c->forwarded,
		                                (int)strlen(c->forwarded), p, end))
			return -1;
		return 0;
	}
	case LWS_CALLBACK_CLIENT_ESTABLISHED:
		if (c)
			c->state = WS_OPEN;
		return 0;
	case LWS_CALLBACK_CLIENT_RECEIVE:
		if (!c)
			return 0;
		if (lws_frame_is_binary(wsi)) {
			c->rx_total += len;
			if (c->rx.len + len <= RX_KEEP_MAX)
				buf_append(&c->rx, in, len);
			/* the last bytes, for end markers split across frames */
			if (len >= sizeof c->tail) {
				memcpy(c->tail, (char *)in + len - sizeof c->tail, sizeof c->tail);
				c->tail_len = sizeof c->tail;
			} else {
				size_t keep = sizeof c->tail - len;
				if (keep > c->tail_len)
					keep = c->tail_len;
				memmove(c->tail, c->tail + c->tail_len - keep, keep);
				memcpy(c->tail + keep, in, len);
				c->tail_len = keep + len;
			}
		} else {
			if (c->txt.len < 64 * 1024)
				buf_append(&c->txt, in, len);
			if (lws_is_final_fragment(wsi)) {
				snprintf(c->last_text, sizeof c->last_text, "%s",
				         c->txt.p ? c->txt.p : "");
				c->text_count++;
				buf_reset(&c->txt);
			}
		}
		return 0;
	case LWS_CALLBACK_CLIENT_WRITEABLE:
		if (!c)
			return -1;
		if (c->closing) {
			lws_close_reason(wsi, LWS_CLOSE_STATUS_NORMAL, (unsigned char *)"bye", 3);
			return -1;
		}
		if (c->tx) {
			int m = lws_write(wsi, c->tx + LWS_PRE, c->tx_len, LWS_WRITE_BINARY);
			free(c->tx);
			c->tx = NULL;
			if (m < (int)c->tx_len)
				return -1;
		}
		return 0;
	case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
		if (c && len >= 2) {
			const unsigned char *b = in;
			snprintf(c->why, sizeof c->why, "closed by the server (%d%s%.*s)",
			         b[0] << 8 | b[1], len > 2 ? ": " : "",
			         (int)(len > 120 ? 118 : len - 2), (const char *)b + 2);
		}
		return 0;
	case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
		if (c) {
			int st = lws_http_client_http_response(wsi);
			if (st > 0 && st != 101)
				snprintf(c->why, sizeof c->why, "HTTP %d", st);
			else
				snprintf(c->why, sizeof c->why, "%s",
				         in ? (const char *)in : "connection error");
			c->state = WS_FAILED;
			c->wsi = NULL;
		}
		return 0;
	case LWS_CALLBACK_CLIENT_CLOSED:
		if (c) {
			c->state = WS_CLOSED;
			c->wsi = NULL;
		}
		return 0;
	default:
		break;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}

static const struct lws_protocols PROTOCOLS[] = {
    {"bench-client", cb_client, 0, 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* wake lws_service at least every 5 ms, so the waits below see their deadlines */
static void tick(lws_sorted_usec_list_t *sul)
{
	struct wsx *x = lws_container_of(sul, struct wsx, sul);
	lws_sul_schedule(x->ctx, 0, &x->sul, tick, 5 * LWS_US_PER_MS);
}

int wsx_init(struct wsx *x, const char *ca)
{
	struct lws_context_creation_info info;
	memset(x, 0, sizeof *x);
	memset(&info, 0, sizeof info);
	lws_set_log_level(LLL_ERR, NULL);
	info.port = CONTEXT_PORT_NO_LISTEN;
	info.protocols = PROTOCOLS;
	info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
	info.client_ssl_ca_filepath = ca;
	x->ctx = lws_create_context(&info);
	if (!x->ctx)
		return -1;
	lws_sul_schedule(x->ctx, 0, &x->sul, tick, 5 * LWS_US_PER_MS);
	return 0;
}

void wsx_free(struct wsx *x)
{
	if (x->ctx)
		lws_context_destroy(x->ctx);
	x->ctx = NULL;
}

void wsx_pump(struct wsx *x)
{
	lws_service(x->ctx, 0);
}

/* ws[s]://host[:port]/path -> parts (path keeps its query) */
static int parse_url(const char *url, int *tls, char *host, size_t hn, int *port, char *path,
                     size_t pn)
{
	const char *h;
	if (strncmp(url, "ws://", 5) == 0 || strncmp(url, "http://", 7) == 0) {
		*tls = 0;
		*port = 80;
	} else if (strncmp(url, "wss://", 6) == 0 || strncmp(url, "https://", 8) == 0) {
		*tls = 1;
		*port = 443;
	} else {
		return -1;
	}
	h = strstr(url, "://") + 3;
	const char *slash = strchr(h, '/');
	if (!slash)
		slash = h + strlen(h);
	const char *colon = memchr(h, ':', (size_t)(slash - h));
	const char *he = colon ? colon : slash;
	if (he == h || (size_t)(he - h) >= hn)
		return -1;
	memcpy(host, h, (size_t)(he - h));
	host[he - h] = '\0';
	if (colon) {
		*port = atoi(colon + 1);
		if (*port <= 0 || *port > 65535)
			return -1;
	}
	snprintf(path, pn, "%s", *slash ? slash : "/");
	return 0;
}

static void wsc_reset(struct wsc *c)
{
	buf_free(&c->rx);
	buf_free(&c->txt);
	free(c->tx);
	free(c->forwarded);
	if (c->auth) {
		explicit_bzero(c->auth, strlen(c->auth));
		free(c->auth);
	}
	memset(c, 0, sizeof *c);
}

void wsc_close(struct wsx *x, struct wsc *c)
{
	if (c->wsi && c->state == WS_OPEN) {
		c->closing = 1;
		lws_callback_on_writable(c->wsi);
		double end = util_mono_s() + 3;
		while (c->wsi && util_mono_s() < end)
			wsx_pump(x);
	}
	if (c->wsi) { /* never answered: detach, let lws kill it */
		lws_set_opaque_user_data(c->wsi, NULL);
		lws_set_timeout(c->wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
		wsx_pump(x);
	}
	wsc_reset(c);
}

int wsc_start(struct wsx *x, struct wsc *c, const char *url, const char *proto, const char *auth)
{
	struct lws_client_connect_info i;
	char host[256], path[2048];
	int tls, port;

	memset(c, 0, sizeof *c);
	c->state = WS_FAILED;
	if (parse_url(url, &tls, host, sizeof host, &port, path, sizeof path) < 0) {
		snprintf(c->why, sizeof c->why, "bad URL");
		return -1;
	}
	c->auth = auth ? xstrdup(auth) : NULL;
	c->forwarded =
	    x->forwarded_user ? xasprintf("remote_user=\"%s\"", x->forwarded_user) : NULL;
	c->state = WS_CONNECTING;
	memset(&i, 0, sizeof i);
	i.context = x->ctx;
	i.address = host;
	i.port = port;
	i.path = path;
	i.host = host;
	i.origin = host;
	i.ssl_connection = tls ? LCCSCF_USE_SSL : 0;
	i.protocol = proto;
	i.local_protocol_name = "bench-client";
	i.opaque_user_data = c;
	i.pwsi = &c->wsi;
	if (!lws_client_connect_via_info(&i)) {
		if (!c->why[0])
			snprintf(c->why, sizeof c->why, "cannot connect");
		c->wsi = NULL;
		c->state = WS_FAILED;
		return -1;
	}
	return 0;
}

int wsc_open(struct wsx *x, struct wsc *c, const char *url, const char *proto, const char *auth,
             double timeout)
{
	if (wsc_start(x, c, url, proto, auth) < 0)
		return -1;
	double end = util_mono_s() + timeout;
	while (c->state == WS_CONNECTING && util_mono_s() < end && !bench_stop)
		wsx_pump(x);
	if (c->state != WS_OPEN) {
		if (!c->why[0])
			snprintf(c->why, sizeof c->why, "no answer within %.0f s", timeout);
		return -1;
	}
	return 0;
}

int wsc_send(struct wsx *x, struct wsc *c, const void *data, size_t n)
{
	if (c->state != WS_OPEN || !c->wsi)
		return -1;
	c->tx = xmalloc(LWS_PRE + n);
	memcpy(c->tx + LWS_PRE, data, n);
	c->tx_len = n;
	lws_callback_on_writable(c->wsi);
	double end = util_mono_s() + 10;
	while (c->tx && c->state == WS_OPEN && util_mono_s() < end)
		wsx_pump(x);
	return c->tx ? -1 : 0;
}

void wsc_clear(struct wsc *c)
{
	buf_reset(&c->rx);
}

static int rx_has(const struct wsc *c, const char *needle)
{
	return c->rx.p && memmem(c->rx.p, c->rx.len, needle, strlen(needle)) != NULL;
}

int wsc_tail_has(const struct wsc *c, const char *needle)
{
	return memmem(c->tail, c->tail_len, needle, strlen(needle)) != NULL;
}

/* service until needle arrives (in the kept bytes); 0, or -1 on timeout/close */
int wsc_until(struct wsx *x, struct wsc *c, const char *needle, double timeout)
{
	double end = util_mono_s() + timeout;
	while (!rx_has(c, needle)) {
		if (c->state != WS_OPEN || util_mono_s() > end || bench_stop)
			return -1;
		wsx_pump(x);
	}
	return 0;
}

void wsc_drain(struct wsx *x, struct wsc *c, double quiet)
{
	double end = util_mono_s() + quiet;
	size_t seen = c->rx_total;
	while (util_mono_s() < end && c->state == WS_OPEN) {
		wsx_pump(x);
		if (c->rx_total != seen) {
			seen = c->rx_total;
			end = util_mono_s() + quiet;
		}
	}
}
