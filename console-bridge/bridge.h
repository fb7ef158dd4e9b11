/* bridge.h - labvm-console: browser WebSocket <-> KubeVirt VMI serial console,
 * or a lab Pod's exec stream (a shell on a tty).
 *
 * Browser protocol "labvm-console.v1" (the front end proxies /console/ here):
 *
 *   URL      <console_path><session id>?ticket=<ticket>   (ticket: fcgi-app/core/ticket.h)
 *   binary   raw terminal bytes, both ways (keystrokes up, console output down)
 *   text     JSON control messages:
 *            server -> browser
 *              {"type":"status","state":"connecting"}  checks passed, console being opened
 *              {"type":"status","state":"open"}        console attached; output follows
 *                                                       (first the replay of recent output)
 *              {"type":"closed","code":N,"reason":"..."}  sent just before a close frame
 *                                                       with the same code and reason
 *            browser -> server
 *              {"type":"resize","cols":C,"rows":R}  the terminal's size: a Pod's exec
 *                                                       tty takes it (channel 4); a VM's
 *                                                       serial line has none (ignored)
 *
 *   close codes
 *     4400  bad console URL (no session id in the path)
 *     4401  missing, malformed, forged, expired or replayed ticket
 *     4403  ticket not for this user / session / VM
 *     4409  session not ready yet
 *     4410  session ended (or failed, or unknown)
 *     4429  too many consoles open for this session's machine
 *     4502  upstream console failed (could not open, or closed by KubeVirt)
 *     4503  service unavailable (database down or too slow): try again
 *     1001  bridge shutting down
 *     1008  the browser stopped reading console output (2 ping intervals above the
 *           high-water mark: it would stall the console shared with other tabs)
 *     1011  internal error (out of memory)
 *
 * Threads: one lws service thread owns every connection and session; a DB
 * worker thread (dbworker.c) owns its own PGconn, runs the owner/state checks and
 * LISTENs on channel "labvm_session"; results come back through a mutex-guarded
 * list and lws_cancel_service() -> LWS_CALLBACK_EVENT_WAIT_CANCELLED.
 *
 * Sharing: one upstream per session (KubeVirt allows one console per VMI and a
 * new one kicks the old); every browser connection of that session shares it
 * (a second tab sees the same output, both may type). The upstream stays open
 * for console_linger_s after the last browser leaves, so a reconnect gets the
 * console back at once, with the last RING_SIZE bytes of output replayed.
 *
 * Files, by object (each calls only the ones below it; main.c owns the
 * context and the loop, and nothing calls into it):
 *
 *   main.c        configuration, the lws context and its vhosts, signals, the
 *                 periodic tick, database answers, the service loop
 *   server.c      the listening side: the browser protocol's callback, the
 *                 admission checks, single-use tickets, GET /console-stats
 *   bsession.c    one console session: attach/detach of browsers, relay,
 *                 flow control, the replay ring, closing with a reason
 *   browser.c     one browser WebSocket: output queue, status and closed
 *                 messages, its read pause, the close handshake
 *   upstream.h    the interface a session talks to (open, write, pause/resume,
 *                 close; events opened/data/drained/closed), one per kind:
 *   upstream_kubevirt.c   the VMI console (plain.kubevirt.io)
 *   upstream_podexec.c    a Pod's exec stream (v5/v4.channel.k8s.io)
 *   upstream_lws.c        what the kinds share: the lws client, token,
 *                         flow control, close
 *   kubeapi.c     the API server's address and the rotating bearer token
 *   bytequeue.c   the chunked byte queue and the replay ring (unit tested)
 *   dbworker.c    the database worker thread
 */

#ifndef LABVM_CONSOLE_BRIDGE_H
#define LABVM_CONSOLE_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

#include <libwebsockets.h>

#include "config.h"
#include "kubeapi.h"

#define BRIDGE_PROTO "labvm-console.v1"
#define STATS_PATH   "/console-stats"

/* flow control (bytes) and timeouts */
#define BS_DOWN_HIGH       (256 * 1024) /* pause upstream RX when a browser queue exceeds */
#define BS_DOWN_LOW        (64 * 1024)  /* ... resume when every browser queue is below */
#define BS_UP_HIGH         (64 * 1024)  /* pause browser RX when the upstream queue exceeds */
#define BS_UP_LOW          (16 * 1024)  /* ... resume below */
#define BS_CHECK_TIMEOUT_S 10           /* database check */
#define BS_UP_TIMEOUT_S    15           /* upstream handshake */
#define BS_RECHECK_S       5            /* re-check open sessions in the database */
#define BS_CLOSE_GRACE_S   5            /* a closing browser that does not drain is dropped */

/* close codes (see above) */
enum {
	BS_CLOSE_NORMAL = 1000,
	BS_CLOSE_GOING_AWAY = 1001,
	BS_CLOSE_POLICY = 1008,
	BS_CLOSE_INTERNAL = 1011,
	BS_CLOSE_BAD_URL = 4400,
	BS_CLOSE_TICKET = 4401,
	BS_CLOSE_FORBIDDEN = 4403,
	BS_CLOSE_NOT_READY = 4409,
	BS_CLOSE_ENDED = 4410,
	BS_CLOSE_TOO_MANY = 4429,
	BS_CLOSE_UPSTREAM = 4502,
	BS_CLOSE_UNAVAILABLE = 4503,
};

struct bridge_stats {
	uint64_t accepted;          /* browser WebSockets accepted */
	uint64_t refused[8];        /* by reason, see bc_close() */
	uint64_t upstream_connects; /* upstream connections attempted */
	uint64_t upstream_failures;
	uint64_t bytes_down, bytes_up;
	uint64_t view_dropped; /* input bytes of view-only (teacher) connections, dropped */
};

/* The context: one, owned by main.c; the other files read it and keep their
 * objects in its lists. */
struct bridge {
	struct cfg cfg;
	struct lws_context *ctx;
	struct lws_vhost *up_vhost; /* upstream client connections, TLS trust kube_ca_file */
	struct kubeapi kube;
	lws_dll2_owner_t conns;    /* every browser WebSocket (struct bconn.all) */
	lws_dll2_owner_t sessions; /* every console session (struct bsession.list) */
	uint64_t next_conn_id;
	int stopping; /* SIGTERM seen: closing everything */
	int db_up;    /* last known database state (from the worker) */
	struct bridge_stats st;
};

extern struct bridge *B;

#endif
