/* upstream_lws.h - what every upstream kind that is an lws client WebSocket
 * to the API server has in common (upstream_lws.c): the connection (address,
 * TLS, ping policy, the bearer token header), the input queue, pause/resume
 * from the next writeable (upstream.h), the close frame, and the one
 * closed() with its reason. A kind keeps its path, subprotocol and framing.
 *
 * A kind's struct upstream starts with a struct upstream_lws (the first
 * member: the object is freed through it after closed()), its ops wrap the
 * ul_* functions, and its lws callback handles ESTABLISHED (after
 * ul_established()), RECEIVE and WRITEABLE (around ul_writeable_begin() and
 * ul_sent()) and passes every other reason to ul_callback(). */
#ifndef LABVM_CONSOLE_UPSTREAM_LWS_H
#define LABVM_CONSOLE_UPSTREAM_LWS_H

#include <stddef.h>

#include <libwebsockets.h>

#include "bytequeue.h"
#include "upstream.h"

enum ul_state { UL_CONNECTING = 0, UL_OPEN, UL_CLOSING };

struct upstream_lws {
	struct lws *wsi;
	enum ul_state state;
	const struct upstream_events *ev;
	void *owner;
	struct bq out;            /* terminal input, to the console */
	int rx_paused;            /* we stopped reading it */
	int want_pause;           /* stop reading it from its next writeable */
	int going_away;           /* close with 1001 (bridge shutting down), else 1000 */
	int opening, open_failed; /* inside lws_client_connect_via_info() */
	const char *what;         /* "console", "exec": for logs */
	char why[160];            /* why it closed, when the peer (or the kind) said so */
	char sid[37];
};

/* Fill in the owner's side; what: a string constant. */
void ul_init(struct upstream_lws *l, const char *sid, const char *what,
             const struct upstream_events *ev, void *owner);
/* Connect to the API server at path (kube_api's prefix included), offering
 * protocols, served by the client protocol named local. 0, or -1 when that
 * failed at once (then no event follows and the caller frees the object). */
int ul_connect(struct upstream_lws *l, const char *path, const char *protocols, const char *local);

/* the ops, for a kind to wrap */
int ul_write(struct upstream_lws *l, const void *p, size_t n);
size_t ul_queued(const struct upstream_lws *l);
void ul_rx(struct upstream_lws *l, int enable);
void ul_close(struct upstream_lws *l, int going_away);
/* ask for a writeable callback once the connection is open */
void ul_want_write(struct upstream_lws *l);

/* ESTABLISHED: -1 (refuse) when l is gone or closing, else 0 with l open;
 * the kind then calls opened() and asks for a writeable if it has output. */
int ul_established(struct lws *wsi, struct upstream_lws *l);
/* WRITEABLE, first: -1 after queueing the close frame (return it), else 0
 * with a pending pause applied; the kind then writes. */
int ul_writeable_begin(struct lws *wsi, struct upstream_lws *l);
/* WRITEABLE, after writing n bytes of l->out: consume them, tell drained(),
 * ask for the next writeable while input is queued. */
void ul_sent(struct lws *wsi, struct upstream_lws *l, size_t n);
/* Every other reason: TLS buffers, the Authorization header, the peer's close
 * reason, connection errors and the close (closed() once, then free). */
int ul_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                size_t len);

#endif
