/* bsession.h - one console session: one machine's console of a lab session
 * (keyed by session id and VM: every machine of a multi-machine session has
 * its own), the browsers attached to it, the one upstream they share
 * (upstream.h), the replay ring, flow control between them, and every close
 * with its reason (logged once). Runs on the lws service thread. */
#ifndef LABVM_CONSOLE_BSESSION_H
#define LABVM_CONSOLE_BSESSION_H

#include <stddef.h>
#include <stdint.h>

#include <libwebsockets.h>

#include "browser.h"
#include "bytequeue.h"
#include "upstream.h"

enum up_state { UP_NONE = 0, UP_CONNECTING, UP_OPEN, UP_CLOSING };

struct bsession {
	lws_dll2_t list; /* in B->sessions */
	char sid[37];
	char user[256];
	char vm[64];
	const struct upstream_ops *up_ops; /* the upstream kind */
	int pod;                           /* a Pod's exec stream (else a VMI console) */
	struct upstream *up;               /* NULL: none (yet, or any more) */
	enum up_state up_state;
	lws_dll2_owner_t conns; /* attached browsers (struct bconn.in_sess) */
	struct ring ring;       /* recent output, replayed to a browser that attaches */
	int64_t t_open_start;   /* monotonic ms: upstream connect started */
	int64_t t_idle;         /* monotonic ms: last browser left (0: has browsers) */
	int woke;               /* sent the wake-up CR on first open */
	int dead;               /* closed; freed when the upstream is gone */
	uint64_t bytes_down, bytes_up;
	int64_t t_activity; /* monotonic ms: input last recorded as the session's activity */
};

/* Typed input is the session's activity (issue #28): recorded in the
 * database (last_activity_at, through the db worker) at most once per
 * BS_ACTIVITY_MS per session, whichever of its consoles it came through. */
#define BS_ACTIVITY_MS 3000

/* Attach a checked browser connection to its session (creating it and opening
 * the upstream when needed). 0, or -1 (the connection was closed with a reason). */
int bs_attach(struct bconn *c);
/* The browser left (or lws closed it): detach it, if attached. */
void bs_detach(struct bconn *c);
/* Close one browser connection, attached or not (bc_close() + bs_detach()). */
void bs_close_browser(struct bconn *c, int code, const char *reason);
/* Close a session: every browser with code/reason (after the output already
 * queued), then the upstream; freed once the upstream is gone. */
void bs_close(struct bsession *s, int code, const char *reason);
void bs_close_all(int code, const char *reason);

/* From the browser side (server.c) */
void bs_browser_input(struct bconn *c, const void *p, size_t n);
/* A text message from the browser: a resize goes to an upstream that has a
 * window size (a Pod's exec tty); anything else is ignored. */
void bs_browser_control(struct bconn *c, const void *p, size_t n);
void bs_browser_drained(struct bconn *c); /* its output fell to BS_DOWN_LOW */

/* From main.c */
void bs_ended(const char *sid); /* the database says the session ended: all its machines */
void bs_tick(int64_t now_ms);   /* handshake timeout and linger */
int bs_recheck(void);           /* ask the database about every open session (each once) */
long bs_count_sessions(void);   /* distinct sessions with a console (-1: out of memory) */
void bs_free_all(void);

#endif
