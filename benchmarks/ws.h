/* ws.h - the WebSocket client of labvm-bench console (libwebsockets): one
 * context, connections serviced from the caller's thread (wsx_pump), each
 * keeping the binary bytes it received (capped) and its last text message. */
#ifndef LABVM_BENCH_WS_H
#define LABVM_BENCH_WS_H

#include <libwebsockets.h>

#include "bench.h"

#define BRIDGE_PROTO   "labvm-console.v1"
#define KUBEVIRT_PROTO "plain.kubevirt.io"
#define RX_KEEP_MAX    (1u << 20)

enum ws_state { WS_CONNECTING, WS_OPEN, WS_CLOSED, WS_FAILED };

struct wsc {
	struct lws *wsi;
	enum ws_state state;
	char why[200];
	char *auth;      /* Authorization header value: SECRET */
	char *forwarded; /* Forwarded header value (a direct connection to labvm-console) */
	struct buf rx;   /* binary bytes since the last clear (capped) */
	size_t rx_total;
	char tail[64];
	size_t tail_len;
	struct buf txt; /* text message being assembled */
	char last_text[512];
	int text_count;
	unsigned char *tx; /* pending message, LWS_PRE headroom */
	size_t tx_len;
	int closing;
};

struct wsx {
	struct lws_context *ctx;
	/* the next connections say they come from a front end that logged in
	 * this user (Forwarded remote_user): the direct path to labvm-console */
	const char *forwarded_user;
	lws_sorted_usec_list_t sul;
};

/* ca: the CA file for wss:// (NULL: the system's). 0 ok. */
int wsx_init(struct wsx *x, const char *ca);
void wsx_free(struct wsx *x);
/* Service the connections once (at most about 5 ms). */
void wsx_pump(struct wsx *x);

/* Start connecting (c->state: WS_CONNECTING, or WS_FAILED and -1). */
int wsc_start(struct wsx *x, struct wsc *c, const char *url, const char *proto, const char *auth);
/* Connect and wait until open (0) or timeout / failure (-1, c->why). */
int wsc_open(struct wsx *x, struct wsc *c, const char *url, const char *proto, const char *auth,
             double timeout);
/* Close (a few seconds for the close handshake) and free; c can be reused. */
void wsc_close(struct wsx *x, struct wsc *c);
/* One binary message, written before returning; 0 ok. */
int wsc_send(struct wsx *x, struct wsc *c, const void *data, size_t n);
/* Forget the bytes kept so far. */
void wsc_clear(struct wsc *c);
/* Service until needle is among the kept bytes: 0, or -1 on timeout/close. */
int wsc_until(struct wsx *x, struct wsc *c, const char *needle, double timeout);
/* Service until nothing arrived for quiet seconds. */
void wsc_drain(struct wsx *x, struct wsc *c, double quiet);
/* needle within the last 64 bytes received (end markers split across frames) */
int wsc_tail_has(const struct wsc *c, const char *needle);

/* console --rss: the bridge's memory with 1,000 consoles (rss.c); lab is the
 * console's own lab, lesson the lesson of the others. 0 ok. */
int console_rss(struct opts *o, struct wsx *x, const struct helper *lab, const char *lesson);

#endif
