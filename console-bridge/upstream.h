/* upstream.h - what a console session talks to: the console of one lab
 * machine, behind a small interface so that the session (bsession.c) does not
 * care how that console is reached or framed.
 *
 * A kind provides a const struct upstream_ops and its lws client protocol
 * (registered in main.c's client_protocols), usually on top of
 * upstream_lws.h (the lws client side both kinds share). Today there are two:
 *
 *   upstream_kubevirt_console   the VMI "console" subresource, subprotocol
 *                               plain.kubevirt.io: raw bytes in binary frames
 *   upstream_pod_exec           a Pod's "exec" subresource with a tty,
 *                               v5.channel.k8s.io (or v4): a channel byte on
 *                               every frame (upstream_podexec.c)
 *
 * Contract (everything on the lws service thread):
 *   - open() starts connecting and returns the upstream, or NULL when that
 *     failed at once (no event follows then).
 *   - opened() once the console is attached; data() for each piece of output,
 *     terminal bytes only (a kind strips its own framing); drained() after
 *     input was written, with what is still queued; closed() exactly once
 *     (after open() succeeded), with why in words: the upstream object is
 *     freed right after closed() returns.
 *   - write() queues terminal input, also before opened() (it goes out then);
 *     queued() is the input not yet written.
 *   - rx(u, 0) stops reading console output, rx(u, 1) resumes. A pause takes
 *     effect from the upstream's next writeable callback, never from inside
 *     its own RECEIVE: on lws 4.1.6 that parks the rest of the read in the
 *     buflist, and draining it later wedged a TLS client's service loop
 *     (100 % CPU, see console-bridge/README.md, t500).
 *   - close(u, going_away) sends a close frame (1001 when going_away, else
 *     1000) or drops a connection still being set up; closed() follows. */
#ifndef LABVM_CONSOLE_UPSTREAM_H
#define LABVM_CONSOLE_UPSTREAM_H

#include <stddef.h>

#include <libwebsockets.h>

struct upstream; /* owned by its kind */

struct upstream_events {
	void (*opened)(void *owner);
	void (*data)(void *owner, const void *p, size_t n);
	void (*drained)(void *owner, size_t queued);
	void (*closed)(void *owner, const char *why);
};

struct upstream_ops {
	const char *kind; /* for logs */
	/* sid: for logs; target: what to attach to (the VMI's name) */
	struct upstream *(*open)(const char *sid, const char *target,
	                         const struct upstream_events *ev, void *owner);
	int (*write)(struct upstream *u, const void *p, size_t n); /* 0, or -1 on OOM */
	size_t (*queued)(const struct upstream *u);
	void (*rx)(struct upstream *u, int enable);
	void (*close)(struct upstream *u, int going_away);
	/* the terminal's size; NULL for a kind without one (a serial line).
	 * May be called before opened(): the last size goes out then. */
	int (*resize)(struct upstream *u, int cols, int rows); /* 0, or -1 on OOM */
};

/* upstream_kubevirt.c */
#define UPSTREAM_KUBEVIRT_LOCAL "kubevirt-upstream" /* its lws protocol name */
extern const struct upstream_ops upstream_kubevirt_console;
int upstream_kubevirt_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
                               void *in, size_t len);

/* upstream_podexec.c */
#define UPSTREAM_PODEXEC_LOCAL "podexec-upstream"
extern const struct upstream_ops upstream_pod_exec;
int upstream_podexec_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
                              void *in, size_t len);

#endif
