/* browser.h - one browser WebSocket (the lws per-session data of protocol
 * BRIDGE_PROTO): its output queue, the status and closed messages, the pause
 * of its reading, and the close handshake with a code and a reason. It knows
 * nothing of console sessions; bsession.c attaches it to one, server.c feeds
 * it lws's events. */
#ifndef LABVM_CONSOLE_BROWSER_H
#define LABVM_CONSOLE_BROWSER_H

#include <stddef.h>
#include <stdint.h>

#include <libwebsockets.h>

#include "bytequeue.h"

enum bc_state {
	BC_NEW = 0,  /* HTTP or not yet checked */
	BC_CHECKING, /* ticket ok, waiting for the database */
	BC_ATTACHED, /* relaying */
	BC_CLOSING,  /* closed message queued; close frame follows */
};

struct bsession;

struct bconn {
	struct lws *wsi;
	uint64_t id;
	enum bc_state state;
	lws_dll2_t all;        /* in B->conns, from ESTABLISHED to CLOSED */
	lws_dll2_t in_sess;    /* in sess->conns, when attached */
	struct bsession *sess; /* when attached (bsession.c) */
	struct bq out;         /* to the browser */
	int rx_paused;         /* we stopped reading this browser */
	int want_pause;        /* stop reading it from its next writeable */
	int is_ws;
	int close_code;
	char close_reason[124];
	int64_t t_state; /* monotonic ms when the state was entered */
	int64_t t_high;  /* monotonic ms since out is above BS_DOWN_HIGH */
	char sid[37];
	char user[256];  /* the ticket's user: the owner, or a teacher */
	char owner[256]; /* the session's owner, as the database said */
	int role;        /* enum ticket_role: a teacher's view / control ticket */
	int watching;    /* a console_watchers row is (being) written for it */
	char vm[64];
	int pod; /* the session runs in a Pod (the database says): its exec stream */
	char peer[64];
	int killed;      /* closing took too long: dropped */
	char *http_body; /* HTTP: the stats answer being sent */
	size_t http_len;
};

/* A WebSocket was accepted: give it an id and link it into B->conns. */
void bc_link(struct bconn *c, struct lws *wsi);
/* lws closed it: unlink, drop its queue. */
void bc_unlink(struct bconn *c);
struct bconn *bc_find(uint64_t id);
void bc_set_state(struct bconn *c, enum bc_state st);

/* Queue {"type":"status","state":...}. 0, or -1 on OOM. */
int bc_send_status(struct bconn *c, const char *state);
/* Queue console output. 1 when the queue is above BS_DOWN_HIGH now, 0, or -1
 * on OOM. */
int bc_send(struct bconn *c, const void *p, size_t n);
/* Close with a code and a reason: queue {"type":"closed",...}, then a close
 * frame; flush: send what is queued first. Logs once; a no-op when closing
 * already. An attached connection is detached by the caller (bsession.c). */
void bc_close(struct bconn *c, int code, const char *reason, int flush);
/* Stop (0) or resume (1) reading the browser; a pause takes effect from its
 * next writeable callback, never inside its RECEIVE (see upstream.h). */
void bc_rx(struct bconn *c, int enable);
/* SERVER_WRITEABLE: one lws_write. -1: close the connection now; 1: the
 * output queue is at or below BS_DOWN_LOW (the session may resume its
 * upstream); 0 otherwise. */
int bc_writeable(struct bconn *c);

#endif
