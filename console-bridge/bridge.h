/* bridge.h - labvm-console: browser WebSocket <-> KubeVirt VMI serial console.
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
 *            browser -> server: ignored (e.g. {"type":"resize",...}: a serial line has
 *              no window size)
 *
 *   close codes
 *     4400  bad console URL (no session id in the path)
 *     4401  missing, malformed, forged, expired or replayed ticket
 *     4403  ticket not for this user / session / VM
 *     4409  session not ready yet
 *     4410  session ended (or failed, or unknown)
 *     4429  too many consoles open for this session
 *     4502  upstream console failed (could not open, or closed by KubeVirt)
 *     4503  service unavailable (database down or too slow): try again
 *     1001  bridge shutting down
 *     1008  the browser stopped reading console output (2 ping intervals above the
 *           high-water mark: it would stall the console shared with other tabs)
 *     1011  internal error (out of memory)
 *
 * Threads: one lws service thread owns every connection and session; a DB
 * worker thread (db.c) owns its own PGconn, runs the owner/state checks and
 * LISTENs on channel "labvm_session"; results come back through a mutex-guarded
 * list and lws_cancel_service() -> LWS_CALLBACK_EVENT_WAIT_CANCELLED.
 *
 * Sharing: one upstream per session (KubeVirt allows one console per VMI and a
 * new one kicks the old); every browser connection of that session shares it
 * (a second tab sees the same output, both may type). The upstream stays open
 * for console_linger_s after the last browser leaves, so a reconnect gets the
 * console back at once, with the last RING_SIZE bytes of output replayed.
 */
#ifndef LABVM_CONSOLE_BRIDGE_H
#define LABVM_CONSOLE_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

#include <libwebsockets.h>

#include "bytequeue.h"
#include "config.h"
#include "ticket.h"

#define BRIDGE_PROTO   "labvm-console.v1"
#define KUBEVIRT_PROTO "plain.kubevirt.io"
#define UPSTREAM_LOCAL "kubevirt-upstream"
#define STATS_PATH     "/console-stats"

/* queues and flow control (bytes) */
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

/* ------------------------------------------------------- bridge session */
enum up_state { UP_NONE = 0, UP_CONNECTING, UP_OPEN, UP_CLOSING };

enum bc_state {
	BC_NEW = 0,  /* HTTP or not yet checked */
	BC_CHECKING, /* ticket ok, waiting for the database */
	BC_ATTACHED, /* relaying */
	BC_CLOSING,  /* closed message queued; close frame follows */
};

struct bsession;

/* One browser WebSocket (the lws per-session data of protocol BRIDGE_PROTO). */
struct bconn {
	struct lws *wsi;
	uint64_t id;
	enum bc_state state;
	struct bconn *all_next, *all_prev; /* every browser WebSocket (bridge.conns) */
	struct bsession *sess;             /* when attached */
	struct bconn *sess_next;
	struct bq out;  /* to the browser */
	int rx_paused;  /* we stopped reading this browser */
	int want_pause; /* stop reading it from its next writeable */
	int is_ws;
	int close_code;
	char close_reason[124];
	int64_t t_state; /* monotonic ms when the state was entered */
	int64_t t_high;  /* monotonic ms since out is above BS_DOWN_HIGH */
	char sid[37];
	char user[256];
	char vm[64];
	char peer[64];
	int killed;      /* closing took too long: dropped */
	char *http_body; /* HTTP: the stats answer being sent */
	size_t http_len;
};

/* One console session: the shared upstream, its queue and the replay ring. */
struct bsession {
	struct bsession *next;
	char sid[37];
	char user[256];
	char vm[64];
	struct lws *up;
	enum up_state up_state;
	int up_rx_paused;
	int up_want_pause; /* pause the upstream from its next writeable */
	struct bq to_up;
	struct bconn *conns;
	int nconns;
	struct ring ring; /* recent output, replayed to a browser that attaches */
	int64_t t_open_start;     /* monotonic ms: upstream connect started */
	int64_t t_idle;           /* monotonic ms: last browser left (0: has browsers) */
	int woke;                 /* sent the wake-up CR on first open */
	int dead;                 /* closed; freed when the upstream is gone */
	char up_why[96];          /* why the upstream failed, if known */
	int opening, open_failed; /* inside lws_client_connect_via_info() */
	uint64_t bytes_down, bytes_up;
};

struct bridge_stats {
	uint64_t accepted;          /* browser WebSockets accepted */
	uint64_t refused[8];        /* by reason, index from bs_refuse_index() */
	uint64_t upstream_connects; /* upstream connections attempted */
	uint64_t upstream_failures;
	uint64_t bytes_down, bytes_up;
};

struct bridge {
	struct cfg cfg;
	struct lws_context *ctx;
	struct lws_vhost *vhost;
	char kube_host[256];
	int kube_port;
	char kube_prefix[256]; /* path part of kube_api, usually "" */
	char *bearer;          /* "Bearer <token>" (SECRET) */
	struct {
		int64_t mtime_ns;
		uint64_t ino;
		int64_t size;
	} token_stat;
	int console_linger_s;
	struct bconn *conns; /* every browser WebSocket */
	int nconns;
	struct bsession *sessions;
	int nsessions;
	uint64_t next_conn_id;
	lws_sorted_usec_list_t tick;
	int64_t last_recheck;
	int stopping; /* SIGTERM seen: closing everything */
	int64_t stop_deadline;
	int db_up; /* last known database state (from the worker) */
	struct bridge_stats st;
};

extern struct bridge *B;

/* session.c */
struct bsession *bs_find(const char *sid);
/* Attach a checked browser connection to its session (creating it and opening
 * the upstream when needed). 0, or -1 (the connection was closed with a reason). */
int bs_attach(struct bconn *c);
void bs_detach(struct bconn *c);
/* Close one browser connection: queue {"type":"closed",...}, then a close frame.
 * flush: send what is queued first. Logs the reason once. */
void bc_close(struct bconn *c, int code, const char *reason, int flush);
/* Close a session: every browser with code/reason, and the upstream. */
void bs_close(struct bsession *s, int code, const char *reason);
/* Upstream events, from upstream.c */
void bs_upstream_open(struct bsession *s);
void bs_upstream_data(struct bsession *s, const void *p, size_t n);
void bs_upstream_gone(struct bsession *s, const char *why);
void bs_upstream_drained(struct bsession *s); /* to_up fell: maybe resume browsers */
void bs_browser_drained(struct bconn *c);     /* out fell: maybe resume upstream */
void bs_browser_input(struct bconn *c, const void *p, size_t n);
void bs_tick(int64_t now_ms); /* linger and timeouts */
void bs_free(struct bsession *s);
int bs_refuse_index(int code);

/* browser.c */
int callback_browser(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                     size_t len);
int bc_send_text(struct bconn *c, const char *json);
int bc_send_status(struct bconn *c, const char *state);
void browser_tick(int64_t now_ms);
void browser_db_results(void); /* drain db.c results (service thread) */
void nonce_purge(int64_t now_s);
void nonce_free_all(void);

/* upstream.c */
int callback_upstream(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                      size_t len);
int upstream_open(struct bsession *s);
void upstream_close(struct bsession *s);
int upstream_parse_api(const char *kube_api, char *host, size_t hostlen, int *port, char *prefix,
                       size_t prefixlen);
int upstream_load_token(void);

/* db.c: the worker thread */
enum db_kind { DB_CHECK = 1, DB_RECHECK, DB_ENDED, DB_STATUS };
enum db_status { DB_OK = 0, DB_NOT_FOUND, DB_VM_MISMATCH, DB_UNAVAILABLE };

struct db_result {
	struct db_result *next;
	enum db_kind kind;
	enum db_status status;
	uint64_t conn_id; /* DB_CHECK */
	char sid[37];     /* DB_CHECK, DB_ENDED */
	char user[256];   /* DB_CHECK: owner */
	char state[16];   /* DB_CHECK: sessions.state */
	int up;           /* DB_STATUS: database reachable */
};

int db_start(const char *conninfo, const char *environment, struct lws_context *ctx);
void db_stop(void);
/* Ask for the owner/state of sid for a connection; the answer is a DB_CHECK result. */
int db_check(uint64_t conn_id, const char *sid, const char *vm);
/* Ask which of these sessions are no longer ready: one DB_ENDED result each. */
int db_recheck(char (*sids)[37], size_t n);
/* Take every result so far (a list in arrival order; caller frees each). */
struct db_result *db_results(void);

/* main.c */
int64_t bridge_now_ms(void);
void bridge_wakeup(void); /* EVENT_WAIT_CANCELLED: results, signals */

#endif
