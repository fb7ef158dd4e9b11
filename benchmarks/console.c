/* console.c - `labvm-bench console`: the console benchmark. Relay throughput
 * and keystroke latency through the bridge against a direct connection to the
 * VMI console, and (--rss) the bridge's memory with 1,000 open consoles.
 *
 *   throughput  `head -c MB | tr '\0' x | fold -w 99` in the guest; MB/s of
 *               console bytes received until the end marker (pty and all);
 *               median over --runs, paths interleaved within each run; and
 *               the bridge's CPU per MB relayed when it runs on this machine.
 *   latency     `stty -icanon; cat >/dev/null`, then one keystroke at a time:
 *               time until the tty's echo comes back; p50/p90/p99.
 *   rss         see "memory" below.
 *
 * Paths: "direct" (the cluster's console subresource, wss, plain.kubevirt.io,
 * the read token), "bridge" (labvm-console's own port, --console-url) and
 * "frontend" (the front end's /console/, as the browser does). The bridge
 * paths use a fresh ticket from POST /api/sessions/{id}/console-ticket each
 * time. KubeVirt allows one console per VMI and a new one kicks the old, so
 * the paths run one after the other on the same lab, never at once. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libwebsockets.h>

#include "bench.h"
#include "db.h"
#include "jsonx.h"
#include "ticket.h"

#define BRIDGE_PROTO   "labvm-console.v1"
#define KUBEVIRT_PROTO "plain.kubevirt.io"
#define RX_KEEP_MAX    (1u << 20)

enum ws_state { WS_CONNECTING, WS_OPEN, WS_CLOSED, WS_FAILED };

struct wsc {
	struct lws *wsi;
	enum ws_state state;
	char why[200];
	char *auth;    /* Authorization header value: SECRET */
	struct buf rx; /* binary bytes since the last clear (capped) */
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
	lws_sorted_usec_list_t sul;
};

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

static int wsx_init(struct wsx *x, const char *ca)
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

static void wsx_free(struct wsx *x)
{
	if (x->ctx)
		lws_context_destroy(x->ctx);
	x->ctx = NULL;
}

static void pump(struct wsx *x)
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
	if (c->auth) {
		explicit_bzero(c->auth, strlen(c->auth));
		free(c->auth);
	}
	memset(c, 0, sizeof *c);
}

static void wsc_close(struct wsx *x, struct wsc *c)
{
	if (c->wsi && c->state == WS_OPEN) {
		c->closing = 1;
		lws_callback_on_writable(c->wsi);
		double end = util_mono_s() + 3;
		while (c->wsi && util_mono_s() < end)
			pump(x);
	}
	if (c->wsi) { /* never answered: detach, let lws kill it */
		lws_set_opaque_user_data(c->wsi, NULL);
		lws_set_timeout(c->wsi, PENDING_TIMEOUT_KILLED_BY_PARENT, LWS_TO_KILL_ASYNC);
		pump(x);
	}
	wsc_reset(c);
}

/* Start connecting (c->state: WS_CONNECTING, or WS_FAILED and -1). */
static int wsc_start(struct wsx *x, struct wsc *c, const char *url, const char *proto,
                     const char *auth)
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

static int wsc_open(struct wsx *x, struct wsc *c, const char *url, const char *proto,
                    const char *auth, double timeout)
{
	if (wsc_start(x, c, url, proto, auth) < 0)
		return -1;
	double end = util_mono_s() + timeout;
	while (c->state == WS_CONNECTING && util_mono_s() < end && !bench_stop)
		pump(x);
	if (c->state != WS_OPEN) {
		if (!c->why[0])
			snprintf(c->why, sizeof c->why, "no answer within %.0f s", timeout);
		return -1;
	}
	return 0;
}

static int wsc_send(struct wsx *x, struct wsc *c, const void *data, size_t n)
{
	if (c->state != WS_OPEN || !c->wsi)
		return -1;
	c->tx = xmalloc(LWS_PRE + n);
	memcpy(c->tx + LWS_PRE, data, n);
	c->tx_len = n;
	lws_callback_on_writable(c->wsi);
	double end = util_mono_s() + 10;
	while (c->tx && c->state == WS_OPEN && util_mono_s() < end)
		pump(x);
	return c->tx ? -1 : 0;
}

static void wsc_clear(struct wsc *c)
{
	buf_reset(&c->rx);
}

static int rx_has(const struct wsc *c, const char *needle)
{
	return c->rx.p && memmem(c->rx.p, c->rx.len, needle, strlen(needle)) != NULL;
}

static int tail_has(const struct wsc *c, const char *needle)
{
	return memmem(c->tail, c->tail_len, needle, strlen(needle)) != NULL;
}

/* service until needle arrives (in the kept bytes); 0, or -1 on timeout/close */
static int wsc_until(struct wsx *x, struct wsc *c, const char *needle, double timeout)
{
	double end = util_mono_s() + timeout;
	while (!rx_has(c, needle)) {
		if (c->state != WS_OPEN || util_mono_s() > end || bench_stop)
			return -1;
		pump(x);
	}
	return 0;
}

static void wsc_drain(struct wsx *x, struct wsc *c, double quiet)
{
	double end = util_mono_s() + quiet;
	size_t seen = c->rx_total;
	while (util_mono_s() < end && c->state == WS_OPEN) {
		pump(x);
		if (c->rx_total != seen) {
			seen = c->rx_total;
			end = util_mono_s() + quiet;
		}
	}
}

/* ------------------------------------------------------------- the method */

static int fresh_prompt(struct wsx *x, struct wsc *c)
{
	wsc_clear(c);
	if (wsc_send(x, c, "\003\r", 2) < 0)
		return -1;
	wsc_drain(x, c, 0.3);
	wsc_clear(c);
	static const char cmd[] = "echo PROMPT-$((40+2))\r";
	if (wsc_send(x, c, cmd, sizeof cmd - 1) < 0 || wsc_until(x, c, "PROMPT-42\r\n", 15) < 0)
		return -1;
	wsc_drain(x, c, 0.2);
	wsc_clear(c);
	return 0;
}

static int throughput_once(struct wsx *x, struct wsc *c, int mb, double *mbps, size_t *bytes)
{
	char cmd[160];
	if (fresh_prompt(x, c) < 0)
		return -1;
	snprintf(cmd, sizeof cmd,
	         "head -c %d /dev/zero | tr '\\0' x | fold -w 99; echo DONE-$((40+2))\r",
	         mb * 1000 * 1000);
	size_t start = c->rx_total;
	c->tail_len = 0;
	double t0 = util_mono_s();
	if (wsc_send(x, c, cmd, strlen(cmd)) < 0)
		return -1;
	double end = t0 + 300;
	while (!tail_has(c, "DONE-42\r\n")) {
		if (c->state != WS_OPEN || util_mono_s() > end || bench_stop)
			return -1;
		pump(x);
		if (c->rx.len > RX_KEEP_MAX / 2)
			wsc_clear(c);
	}
	double dt = util_mono_s() - t0;
	*bytes = c->rx_total - start;
	*mbps = (double)*bytes / dt / 1e6;
	wsc_clear(c);
	return 0;
}

static int latency_once(struct wsx *x, struct wsc *c, int keys, struct dvec *out)
{
	static const char setup[] = "stty -icanon; cat >/dev/null\r";
	if (fresh_prompt(x, c) < 0 || wsc_send(x, c, setup, sizeof setup - 1) < 0)
		return -1;
	wsc_drain(x, c, 0.5);
	for (int i = 0; i < keys; i++) {
		char ch[2] = {(char)('a' + i % 26), '\0'};
		wsc_clear(c);
		double t0 = util_mono_s();
		if (wsc_send(x, c, ch, 1) < 0 || wsc_until(x, c, ch, 10) < 0)
			return -1;
		dvec_push(out, (util_mono_s() - t0) * 1000.0);
		struct timespec ts = {0, 5 * 1000000L};
		nanosleep(&ts, NULL);
	}
	wsc_send(x, c, "\003", 1);
	wsc_send(x, c, "stty icanon\r", 12);
	wsc_drain(x, c, 0.2);
	return 0;
}

/* ------------------------------------------------------------ connections */

enum path_kind { P_DIRECT, P_BRIDGE, P_FRONTEND, P_COUNT };
static const char *const PATH_NAME[P_COUNT] = {"direct", "bridge", "frontend"};

struct ctx {
	struct opts *o;
	struct wsx x;
	struct bapi api;
	struct helper lab; /* the lab the paths open consoles to */
	char *bearer;      /* SECRET */
	char *basic;       /* SECRET */
};

/* the browser's way: a single-use ticket, then the bridge's "open" status */
static int open_bridge(struct ctx *cx, struct wsc *c, const char *base, const char *auth)
{
	char *path = xasprintf("/api/sessions/%s/console-ticket", cx->lab.sid);
	cJSON *empty = jx_obj(), *t = NULL;
	long code = bapi_call(&cx->api, "POST", path, empty, &t);
	free(path);
	cJSON_Delete(empty);
	const char *url = kj_str(t, "url");
	if (code != 200 || !url) {
		snprintf(c->why, sizeof c->why, "console-ticket: HTTP %ld %s", code,
		         bapi_error_code(t));
		cJSON_Delete(t);
		return -1;
	}
	/* the ticket's url is a path on the same host */
	char *full = xasprintf("%s%s", base, url);
	cJSON_Delete(t);
	int rc = wsc_open(&cx->x, c, full, BRIDGE_PROTO, auth, 30);
	explicit_bzero(full, strlen(full));
	free(full);
	if (rc < 0)
		return -1;
	double end = util_mono_s() + 30;
	while (!strstr(c->last_text, "\"open\"")) {
		if (strstr(c->last_text, "\"closed\"")) {
			snprintf(c->why, sizeof c->why, "bridge refused: %.150s", c->last_text);
			return -1;
		}
		if (c->state != WS_OPEN || util_mono_s() > end || bench_stop) {
			if (!c->why[0])
				snprintf(c->why, sizeof c->why,
				         "no \"open\" status from the bridge");
			return -1;
		}
		pump(&cx->x);
	}
	return 0;
}

static char *ws_origin(const char *http_url)
{
	/* scheme and authority of the front end URL, ws instead of http */
	const char *h = strstr(http_url, "://");
	if (!h)
		return NULL;
	const char *slash = strchr(h + 3, '/');
	size_t n = slash ? (size_t)(slash - (h + 3)) : strlen(h + 3);
	int tls = strncmp(http_url, "https", 5) == 0;
	return xasprintf("%s://%.*s", tls ? "wss" : "ws", (int)n, h + 3);
}

static int open_path(struct ctx *cx, enum path_kind k, struct wsc *c)
{
	struct opts *o = cx->o;
	if (k == P_DIRECT) {
		char *url = xasprintf("%s/apis/subresources.kubevirt.io/v1/namespaces/%s/"
		                      "virtualmachineinstances/%s/console",
		                      o->kube_url, o->namespace_, cx->lab.vm);
		char *wss = xasprintf("wss%s", strstr(url, "://"));
		int rc = wsc_open(&cx->x, c, wss, KUBEVIRT_PROTO, cx->bearer, 30);
		free(url);
		free(wss);
		return rc;
	}
	if (k == P_BRIDGE) {
		char *base = ws_origin(o->console_url);
		int rc = base ? open_bridge(cx, c, base, NULL) : -1;
		free(base);
		return rc;
	}
	char *base = ws_origin(o->url);
	int rc = base ? open_bridge(cx, c, base, cx->basic) : -1;
	free(base);
	return rc;
}

/* --------------------------------------------- memory: 1,000 consoles (--rss) */

/* VmRSS of a private labvm-console (the stack's labvm.conf, its own port)
 * with RSS_CONSOLES idle consoles open, 3 s after the last one opened:
 *   shared    browsers sharing the consoles of up to RSS_LABS real labs
 *             (first one browser per lab: "rss_sim_separate");
 *   separate  every browser with its own upstream, to a minimal stand-in of
 *             the KubeVirt console endpoint started here (TLS,
 *             plain.kubevirt.io, a prompt and an echo: no cluster boots 1,000
 *             guests on one machine), the sessions as database rows of a
 *             private environment. */

#define RSS_CONSOLES 1000
#define RSS_LABS     4
#define RSS_ENV      "bench-console"
#define FAKE_BANNER  "\r\nbench login: root (automatic login)\r\nroot@bench:~# "

struct spec {
	char sid[40], user[64], vm[80];
};

struct rss {
	struct ctx *cx;
	char tmp[64];
	struct cfg cfg;
	struct wsc *c; /* RSS_CONSOLES */
	int nc;        /* started */
};

static long rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = 0;
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "VmRSS: %ld", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static int loopback_port(int port, int *out)
{
	struct sockaddr_in a;
	socklen_t n = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rc = -1;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)port);
	if (fd < 0)
		return -1;
	if (out) { /* a free port: bind to 0 */
		if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
		    getsockname(fd, (struct sockaddr *)&a, &n) == 0) {
			*out = ntohs(a.sin_port);
			rc = 0;
		}
	} else if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) { /* answers? */
		rc = 0;
	}
	close(fd);
	return rc;
}

/* in a child: nothing of the parent's but stdin/out/err and keep */
static void child_fds(int keep)
{
	long max = sysconf(_SC_OPEN_MAX);
	for (int fd = 3; fd < (max > 0 && max < 65536 ? max : 65536); fd++)
		if (fd != keep)
			close(fd);
	signal(SIGPIPE, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
}

static void child_stop(pid_t pid, const char *what)
{
	int st = 0;
	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	double end = util_mono_s() + 10;
	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (util_mono_s() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			break;
		}
		struct timespec ts = {0, 20 * 1000000L};
		nanosleep(&ts, NULL);
	}
	if (what && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
		printf("  %s exited with status %d\n", what,
		       WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

/* A private labvm-console: the stack's labvm.conf with the overrides (key,
 * value, ..., NULL) on a port of its own. Its pid (and base URL), or -1. */
static pid_t bridge_start(struct rss *r, const char *const *kv, char *base, size_t bn)
{
	int port;
	char *text = util_read_file(cfg_path(), 1 << 20, NULL), *save = NULL;
	if (!text || loopback_port(0, &port) < 0) {
		fprintf(stderr, "labvm-bench console: rss: cannot read %s\n", cfg_path());
		free(text);
		return -1;
	}
	char *conf = xasprintf("%s/bridge-%d.conf", r->tmp, port);
	char *logf = xasprintf("%s/bridge-%d.log", r->tmp, port);
	FILE *f = fopen(conf, "w");
	for (char *l = strtok_r(text, "\n", &save); f && l; l = strtok_r(NULL, "\n", &save)) {
		size_t k = strspn(l, " \t"), n = strcspn(l + k, " \t=");
		int skip = (n == 14 && strncmp(l + k, "console_listen", n) == 0) ||
		           (n == 9 && strncmp(l + k, "log_level", n) == 0);
		for (int i = 0; kv[i] && !skip; i += 2)
			skip = strlen(kv[i]) == n && strncmp(l + k, kv[i], n) == 0;
		if (!skip)
			fprintf(f, "%s\n", l);
	}
	if (f) {
		for (int i = 0; kv[i]; i += 2)
			fprintf(f, "%s = %s\n", kv[i], kv[i + 1]);
		fprintf(f, "console_listen = 127.0.0.1:%d\nlog_level = warn\n", port);
		fclose(f);
	}
	free(text);
	const char *bin = getenv("LABVM_BIN");
	char exe[4096], *bridge = NULL;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (bin && *bin)
		bridge = xasprintf("%s/labvm-console", bin);
	else if (n > 0 && (exe[n] = '\0', 1))
		bridge = xasprintf("%s/labvm-console", dirname(exe));
	pid_t pid = f && bridge ? fork() : -1;
	if (pid == 0) {
		int fd = open(logf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		child_fds(-1);
		setenv("LABVM_CONF", conf, 1);
		execl(bridge, bridge, (char *)NULL);
		_exit(127);
	}
	double end = util_mono_s() + 10;
	while (pid > 0 && loopback_port(port, NULL) < 0) {
		if (waitpid(pid, NULL, WNOHANG) != 0 || util_mono_s() > end) {
			fprintf(stderr,
			        "labvm-bench console: rss: the private bridge did not start; "
			        "see %s\n",
			        logf);
			child_stop(pid, NULL);
			pid = -1;
			break;
		}
		struct timespec ts = {0, 50 * 1000000L};
		nanosleep(&ts, NULL);
	}
	snprintf(base, bn, "ws://127.0.0.1:%d", port);
	free(conf);
	free(logf);
	free(bridge);
	return pid;
}

/* consoles [from, to) of specs (round robin) through the bridge at base, in
 * batches, each until the bridge says "open". 0, or -1 (message on stderr). */
static int open_many(struct rss *r, const char *base, const struct spec *sp, int nsp, int from,
                     int to, int batch)
{
	struct wsx *x = &r->cx->x;
	for (int i = from; i < to; i += batch) {
		int end = i + batch < to ? i + batch : to;
		for (int j = i; j < end; j++) {
			const struct spec *s = &sp[j % nsp];
			char *t = ticket_make(r->cfg.ticket_key, r->cfg.ticket_key_len, s->sid,
			                      s->user, s->vm, (int64_t)time(NULL) + 120);
			char *url = xasprintf("%s%s%s?ticket=%s", base, r->cfg.console_path, s->sid,
			                      t ? t : "");
			wsc_start(x, &r->c[j], url, BRIDGE_PROTO, NULL);
			explicit_bzero(url, strlen(url));
			free(url);
			if (t) {
				explicit_bzero(t, strlen(t));
				free(t);
			}
			r->nc = j + 1;
		}
		double deadline = util_mono_s() + 30;
		for (;;) {
			int pending = 0, bad = -1;
			for (int j = i; j < end && bad < 0; j++) {
				const struct wsc *c = &r->c[j];
				if (strstr(c->last_text, "\"closed\"") || c->state == WS_FAILED ||
				    c->state == WS_CLOSED)
					bad = j;
				else if (c->state != WS_OPEN || !strstr(c->last_text, "\"open\""))
					pending++;
			}
			if (bad < 0 && !pending)
				break;
			if (bad >= 0 || util_mono_s() > deadline || bench_stop) {
				const struct wsc *c = &r->c[bad >= 0 ? bad : i];
				fprintf(stderr, "labvm-bench console: rss: console %d of %d: %s\n",
				        (bad >= 0 ? bad : i) + 1, to,
				        c->last_text[0] ? c->last_text
				        : c->why[0]     ? c->why
				                        : "no \"open\" within 30 s");
				return -1;
			}
			pump(x);
		}
	}
	return 0;
}

static void close_many(struct rss *r)
{
	for (int j = 0; j < r->nc; j++)
		if (r->c[j].wsi && r->c[j].state == WS_OPEN) {
			r->c[j].closing = 1;
			lws_callback_on_writable(r->c[j].wsi);
		}
	double end = util_mono_s() + 5;
	for (int left = 1; left && util_mono_s() < end;) {
		left = 0;
		for (int j = 0; j < r->nc; j++)
			left += r->c[j].wsi != NULL;
		if (left)
			pump(&r->cx->x);
	}
	for (int j = 0; j < r->nc; j++)
		wsc_close(&r->cx->x, &r->c[j]);
	r->nc = 0;
}

static cJSON *rss_figures(cJSON *res, const char *key, int browsers, int upstreams, long idle,
                          long rss, const char *per, double open_s)
{
	cJSON *e = jx_add_obj(res, key);
	jx_add_num(e, "browsers", browsers);
	jx_add_num(e, "upstreams", upstreams);
	jx_add_num(e, "rss_idle_kib", (double)idle);
	jx_add_num(e, "rss_kib", (double)rss);
	jx_add_num(e, per, bench_round((double)(rss - idle) / browsers, 3));
	if (open_s >= 0)
		jx_add_num(e, "open_s", bench_round(open_s, 3));
	return e;
}

static int rss_shared(struct rss *r, const char *lesson, cJSON *res)
{
	struct opts *o = r->cx->o;
	struct helper more[RSS_LABS - 1];
	struct spec sp[RSS_LABS];
	int nlabs = bench_user_count(o) < RSS_LABS ? bench_user_count(o) : RSS_LABS, ns = 0,
	    rc = -1;
	char base[64], maxper[16];

	memset(more, 0, sizeof more);
	for (int i = 1; i < nlabs; i++)
		more[i - 1].uidx = i;
	if (nlabs > 1 && bench_helpers_start(o, lesson, more, nlabs - 1) < 0)
		printf("  not every lab started; continuing with the ready ones\n");
	bench_copy(sp[0].sid, sizeof sp[0].sid, r->cx->lab.sid);
	bench_copy(sp[0].user, sizeof sp[0].user, r->cx->lab.user);
	bench_copy(sp[0].vm, sizeof sp[0].vm, r->cx->lab.vm);
	ns = 1;
	for (int i = 0; i < nlabs - 1; i++)
		if (more[i].ready) {
			bench_copy(sp[ns].sid, sizeof sp[ns].sid, more[i].sid);
			bench_copy(sp[ns].user, sizeof sp[ns].user, more[i].user);
			bench_copy(sp[ns].vm, sizeof sp[ns].vm, more[i].vm);
			ns++;
		}
	snprintf(maxper, sizeof maxper, "%d", RSS_CONSOLES);
	const char *kv[] = {"console_max_per_session", maxper, "console_linger_s", "5", NULL};
	pid_t pid = bench_stop ? -1 : bridge_start(r, kv, base, sizeof base);
	if (pid < 0)
		goto out;
	bench_sleep(0.5);
	long idle = rss_kib(pid);
	/* one browser per lab: as many separate upstreams as there are labs */
	if (open_many(r, base, sp, ns, 0, ns, 10) < 0)
		goto stop;
	bench_sleep(3);
	long r1 = rss_kib(pid);
	rss_figures(res, "rss_sim_separate", ns, ns, idle, r1, "per_console_kib", -1);
	printf(
	    "  rss sim separate: %d browsers on %d lab consoles: %.1f MiB (idle bridge %.1f MiB, "
	    "%.1f KiB per console)\n",
	    ns, ns, r1 / 1024.0, idle / 1024.0, (double)(r1 - idle) / ns);
	fflush(stdout);
	double t0 = util_mono_s();
	if (open_many(r, base, sp, ns, ns, RSS_CONSOLES, 50) < 0)
		goto stop;
	double took = util_mono_s() - t0;
	bench_sleep(3);
	long r2 = rss_kib(pid);
	rss_figures(res, "rss_shared", RSS_CONSOLES, ns, idle, r2, "per_browser_kib", took);
	printf("  rss shared: %d browsers on %d lab consoles: %.1f MiB (idle bridge %.1f MiB, "
	       "%.1f KiB per browser; opened in %.1f s)\n",
	       RSS_CONSOLES, ns, r2 / 1024.0, idle / 1024.0, (double)(r2 - idle) / RSS_CONSOLES,
	       took);
	rc = 0;
stop:
	close_many(r);
	child_stop(pid, "the private bridge");
out:
	for (int i = 0; i < nlabs - 1; i++)
		bench_helper_end(o, NULL, &more[i]);
	return rc;
}

/* ---- the stand-in console endpoint (a child process) */

struct fake_pss {
	unsigned char *out; /* LWS_PRE headroom */
	size_t len;
};

static void fake_queue(struct lws *wsi, struct fake_pss *p, const void *data, size_t n)
{
	p->out = xrealloc(p->out, LWS_PRE + p->len + n);
	memcpy(p->out + LWS_PRE + p->len, data, n);
	p->len += n;
	lws_callback_on_writable(wsi);
}

static int cb_fake(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                   size_t len)
{
	struct fake_pss *p = user;
	switch (reason) {
	case LWS_CALLBACK_ESTABLISHED:
		fake_queue(wsi, p, FAKE_BANNER, sizeof FAKE_BANNER - 1);
		return 0;
	case LWS_CALLBACK_RECEIVE:
		fake_queue(wsi, p, in, len);
		return 0;
	case LWS_CALLBACK_SERVER_WRITEABLE:
		if (p->len) {
			int m = lws_write(wsi, p->out + LWS_PRE, p->len, LWS_WRITE_BINARY);
			p->len = 0;
			if (m < 0)
				return -1;
		}
		return 0;
	case LWS_CALLBACK_CLOSED:
		free(p->out);
		p->out = NULL;
		return 0;
	default:
		break;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}

static const struct lws_protocols FAKE_PROTOCOLS[] = {
    {"http", lws_callback_http_dummy, 0, 0, 0, NULL, 0},
    {KUBEVIRT_PROTO, cb_fake, sizeof(struct fake_pss), 4096, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* A self-signed certificate for 127.0.0.1 (its own CA) and the endpoint on a
 * free port: its pid, or -1. */
static pid_t fake_start(struct rss *r, int *port, char *crt, char *key, size_t n)
{
	int st = 0, pfd[2];
	snprintf(crt, n, "%s/fake.crt", r->tmp);
	snprintf(key, n, "%s/fake.key", r->tmp);
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		child_fds(-1);
		execlp("openssl", "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
		       "-keyout", key, "-out", crt, "-days", "1", "-subj", "/CN=127.0.0.1",
		       "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", (char *)NULL);
		_exit(127);
	}
	while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || loopback_port(0, port) < 0 ||
	    pipe(pfd) < 0) {
		fprintf(stderr,
		        "labvm-bench console: rss: no certificate for the stand-in (openssl)\n");
		return -1;
	}
	pid = fork();
	if (pid == 0) {
		struct lws_context_creation_info info;
		child_fds(pfd[1]);
		memset(&info, 0, sizeof info);
		lws_set_log_level(LLL_ERR, NULL);
		info.port = *port;
		info.iface = "127.0.0.1";
		info.protocols = FAKE_PROTOCOLS;
		info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
		info.ssl_cert_filepath = crt;
		info.ssl_private_key_filepath = key;
		struct lws_context *ctx = lws_create_context(&info);
		if (!ctx || write(pfd[1], "r", 1) != 1)
			_exit(1);
		close(pfd[1]);
		for (;;)
			lws_service(ctx, 0);
	}
	close(pfd[1]);
	char c = 0;
	struct pollfd pl = {pfd[0], POLLIN, 0};
	if (pid < 0 || poll(&pl, 1, 10000) != 1 || read(pfd[0], &c, 1) != 1 || c != 'r') {
		fprintf(stderr, "labvm-bench console: rss: the stand-in endpoint did not start\n");
		child_stop(pid, NULL);
		pid = -1;
	}
	close(pfd[0]);
	return pid;
}

static int rss_separate(struct rss *r, cJSON *res)
{
	struct opts *o = r->cx->o;
	char crt[128], key[128], base[64], api[64];
	int port, rc = -1, n = 0;
	struct spec *sp = NULL;
	struct db d;
	const char *env[] = {RSS_ENV};

	pid_t fake = fake_start(r, &port, crt, key, sizeof crt);
	if (fake < 0)
		return -1;
	db_init(&d, o->database ? o->database : r->cfg.database);
	char count[16];
	snprintf(count, sizeof count, "%d", RSS_CONSOLES);
	const char *p2[] = {RSS_ENV, count};
	PGresult *q = NULL;
	if (db_cmd(&d, "DELETE FROM sessions WHERE environment = $1", 1, env) < 0 ||
	    db_cmd(
	        &d,
	        "INSERT INTO sessions (id, user_name, lesson, runtime, environment, state, "
	        "expires_at) SELECT gen_random_uuid(), 'bench-console-' || i, 'bench', 'vm', $1, "
	        "'ready', now() + interval '1 hour' FROM generate_series(0, $2::int - 1) AS i",
	        2, p2) < 0 ||
	    db_cmd(&d,
	           "INSERT INTO session_vms (session_id, vm_name, secret_name, agent_token) "
	           "SELECT id, 'bench-c-' || substr(user_name, 15), 'none', 'none' FROM sessions "
	           "WHERE environment = $1",
	           1, env) < 0 ||
	    !(q = db_exec(&d,
	                  "SELECT s.id, s.user_name, v.vm_name FROM sessions s JOIN session_vms v "
	                  "ON v.session_id = s.id WHERE s.environment = $1",
	                  1, env))) {
		fprintf(stderr, "labvm-bench console: rss: database: %s\n", d.msg);
		goto out;
	}
	n = PQntuples(q);
	sp = xcalloc((size_t)n + 1, sizeof *sp);
	for (int i = 0; i < n; i++) {
		bench_copy(sp[i].sid, sizeof sp[i].sid, db_val(q, i, 0));
		bench_copy(sp[i].user, sizeof sp[i].user, db_val(q, i, 1));
		bench_copy(sp[i].vm, sizeof sp[i].vm, db_val(q, i, 2));
	}
	PQclear(q);
	snprintf(api, sizeof api, "https://127.0.0.1:%d", port);
	const char *kv[] = {"environment",      RSS_ENV, "kube_api", api, "kube_ca_file", crt,
	                    "console_linger_s", "5",     NULL};
	pid_t pid = bench_stop ? -1 : bridge_start(r, kv, base, sizeof base);
	if (pid < 0)
		goto out;
	bench_sleep(0.5);
	long idle = rss_kib(pid);
	double t0 = util_mono_s();
	if (open_many(r, base, sp, n, 0, n, 50) < 0)
		goto stop;
	double took = util_mono_s() - t0;
	bench_sleep(3);
	long rr = rss_kib(pid);
	/* still alive and relaying: a keystroke on a few of them */
	for (int j = 0; j<n; j += n / 10> 0 ? n / 10 : 1) {
		wsc_clear(&r->c[j]);
		if (wsc_send(&r->cx->x, &r->c[j], "k", 1) < 0 ||
		    wsc_until(&r->cx->x, &r->c[j], "k", 10) < 0) {
			fprintf(stderr, "labvm-bench console: rss: console %d does not echo\n",
			        j + 1);
			goto stop;
		}
	}
	rss_figures(res, "rss_separate", n, n, idle, rr, "per_console_kib", took);
	printf("  rss separate: %d browsers, %d upstreams (TLS) to a stand-in endpoint: %.1f MiB "
	       "(idle bridge %.1f MiB, %.1f KiB per console; opened in %.1f s)\n",
	       n, n, rr / 1024.0, idle / 1024.0, (double)(rr - idle) / n, took);
	rc = 0;
stop:
	close_many(r);
	child_stop(pid, "the private bridge");
out:
	db_cmd(&d, "DELETE FROM sessions WHERE environment = $1", 1, env);
	db_close(&d);
	free(sp);
	child_stop(fake, NULL);
	return rc;
}

static void rm_tree(const char *dir)
{
	DIR *dh = opendir(dir);
	struct dirent *e;
	while (dh && (e = readdir(dh)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			char *p = xasprintf("%s/%s", dir, e->d_name);
			unlink(p);
			free(p);
		}
	if (dh)
		closedir(dh);
	rmdir(dir);
}

static int run_rss(struct ctx *cx, const char *lesson)
{
	struct opts *o = cx->o;
	struct rss r;
	char err[512];
	int rc = 0;

	memset(&r, 0, sizeof r);
	r.cx = cx;
	printf("\nrss: a private labvm-console with %d idle consoles (shared: up to %d labs; "
	       "separate: a stand-in endpoint)\n",
	       RSS_CONSOLES, RSS_LABS);
	fflush(stdout);
	if (cfg_load(cfg_path(), &r.cfg, CFG_NEED_TICKET_KEY, err, sizeof err) < 0) {
		fprintf(stderr, "labvm-bench console: rss: %s (LABVM_CONF)\n", err);
		return -1;
	}
	snprintf(r.tmp, sizeof r.tmp, "/tmp/labvm-bench-rss-XXXXXX");
	if (!mkdtemp(r.tmp)) {
		fprintf(stderr, "labvm-bench console: rss: mkdtemp: %s\n", strerror(errno));
		cfg_free(&r.cfg);
		return -1;
	}
	r.c = xcalloc(RSS_CONSOLES, sizeof *r.c);
	cJSON *res = jx_obj();
	if (rss_shared(&r, lesson, res) < 0 || bench_stop || rss_separate(&r, res) < 0)
		rc = -1;
	if (bench_mkdirs(o->out_dir) == 0) {
		char *json = xasprintf("%s/%s-rss.json", o->out_dir, o->name);
		if (bench_write_json(json, res) == 0)
			printf("\nfigures: %s\n", json);
		free(json);
	}
	cJSON_Delete(res);
	free(r.c);
	rm_tree(r.tmp);
	cfg_free(&r.cfg);
	return rc;
}

/* The stack's labvm-console (tests/stack writes $LABVM_STATE/pids/console),
 * when it runs on this machine; -1 otherwise. */
static pid_t bridge_pid_of_stack(void)
{
	const char *state = getenv("LABVM_STATE");
	if (!state || !*state)
		return -1;
	char *path = xasprintf("%s/pids/console", state);
	char *text = util_read_file(path, 64, NULL);
	free(path);
	long pid = text ? strtol(text, NULL, 10) : -1;
	free(text);
	return pid > 0 && kill((pid_t)pid, 0) == 0 ? (pid_t)pid : -1;
}

/* user + system CPU seconds of a process (all its threads) */
static double bridge_cpu_s(pid_t pid)
{
	char path[64], line[1024];
	unsigned long ut = 0, st = 0;
	if (pid <= 0)
		return 0;
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	char *got = fgets(line, sizeof line, f);
	fclose(f);
	char *p = got ? strrchr(line, ')') : NULL;
	/* after "pid (comm)": state ppid pgrp session tty tpgid flags minflt cminflt
	 * majflt cmajflt utime stime */
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return 0;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

int cmd_console(struct opts *o)
{
	struct ctx cx;
	int use[P_COUNT] = {0}, rc = 0;
	const char *lesson = o->lesson ? o->lesson : "linux-basics";
	struct dvec tp[P_COUNT], lat[P_COUNT], cpu = {0};
	pid_t bridge_pid = bridge_pid_of_stack();
	char *copyp = xstrdup(o->paths), *save = NULL;

	memset(&cx, 0, sizeof cx);
	memset(tp, 0, sizeof tp);
	memset(lat, 0, sizeof lat);
	cx.o = o;
	for (char *t = strtok_r(copyp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int k;
		for (k = 0; k < P_COUNT; k++)
			if (strcmp(PATH_NAME[k], t) == 0)
				use[k] = 1;
		if (!strcmp(t, "direct") + !strcmp(t, "bridge") + !strcmp(t, "frontend") == 0) {
			fprintf(stderr,
			        "labvm-bench console: unknown path %s (direct, bridge, "
			        "frontend)\n",
			        t);
			free(copyp);
			return 2;
		}
	}
	free(copyp);
	if (!o->url) {
		fprintf(stderr, "labvm-bench console: no --url (or LABVM_URL)\n");
		return 2;
	}
	if (use[P_DIRECT] && (!o->kube_url || !o->kube_token_file || !o->kube_ca)) {
		fprintf(stderr, "labvm-bench console: the direct path needs --kube-url, "
		                "--kube-token-file and --kube-ca\n");
		return 2;
	}
	if (use[P_BRIDGE] && !o->console_url) {
		fprintf(stderr, "labvm-bench console: the bridge path needs --console-url (or "
		                "LABVM_CONSOLE_URL); or leave it out with --paths\n");
		return 2;
	}
	if (bench_users_load(o) < 0)
		return 2;
	if (use[P_DIRECT]) {
		char *tok = util_read_file(o->kube_token_file, 64 * 1024, NULL);
		if (!tok) {
			fprintf(stderr, "labvm-bench console: cannot read %s\n",
			        o->kube_token_file);
			return 2;
		}
		util_rstrip(tok);
		cx.bearer = xasprintf("Bearer %s", tok);
		explicit_bzero(tok, strlen(tok));
		free(tok);
	}
	bench_user(o, 0, cx.lab.user);
	{
		char *up = xasprintf("%s:%s", cx.lab.user, bench_password(o, 0));
		char *b = util_b64(up, strlen(up));
		cx.basic = xasprintf("Basic %s", b);
		explicit_bzero(up, strlen(up));
		explicit_bzero(b, strlen(b));
		free(up);
		free(b);
	}
	if (wsx_init(&cx.x, use[P_DIRECT] ? o->kube_ca : NULL) < 0) {
		fprintf(stderr, "labvm-bench console: libwebsockets context failed\n");
		rc = 1;
		goto out;
	}
	if (bapi_init(&cx.api, o->url, cx.lab.user, bench_password(o, 0)) < 0) {
		rc = 1;
		goto out;
	}

	/* one ready lab */
	printf("labvm-bench console: a %s lab for %s; %d run(s) of %d MB and %d keystrokes per "
	       "path\n",
	       lesson, cx.lab.user, o->runs, o->mb, o->keys);
	fflush(stdout);
	if (bench_helper_start(o, &cx.api, lesson, &cx.lab, 600) < 0) {
		rc = 1;
		goto out;
	}
	printf("lab ready: session %s, VM %s\n", cx.lab.sid, cx.lab.vm);
	fflush(stdout);

	struct progress pr;
	size_t total = (size_t)o->runs * 2 * (size_t)(use[0] + use[1] + use[2]), done = 0;
	progress_start(&pr, "console", total, o->quiet);
	for (int run = 1; run <= o->runs && !bench_stop && !rc; run++) {
		for (int phase = 0; phase < 2 && !rc; phase++) {
			/* the first path rotates from run to run: whoever follows a
			 * direct connection finds the bridge's upstream kicked */
			for (int kk = 0; kk < P_COUNT && !bench_stop; kk++) {
				int k = (kk + run - 1) % P_COUNT;
				struct wsc c;
				if (!use[k])
					continue;
				if (open_path(&cx, (enum path_kind)k, &c) < 0) {
					fprintf(stderr, "\nlabvm-bench console: opening %s: %s\n",
					        PATH_NAME[k], c.why);
					wsc_close(&cx.x, &c);
					rc = 1;
					break;
				}
				if (phase == 0) {
					double mbps, cpu0 = bridge_cpu_s(bridge_pid);
					size_t bytes;
					if (throughput_once(&cx.x, &c, o->mb, &mbps, &bytes) < 0) {
						fprintf(stderr,
						        "\nlabvm-bench console: %s throughput run "
						        "failed%s%s\n",
						        PATH_NAME[k], c.why[0] ? ": " : "", c.why);
						rc = 1;
					} else {
						dvec_push(&tp[k], mbps);
						if (k == P_BRIDGE && bridge_pid > 0 && bytes)
							dvec_push(
							    &cpu,
							    (bridge_cpu_s(bridge_pid) - cpu0) *
							        1000 / ((double)bytes / 1e6));
					}
				} else if (latency_once(&cx.x, &c, o->keys, &lat[k]) < 0) {
					fprintf(
					    stderr,
					    "\nlabvm-bench console: %s latency run failed%s%s\n",
					    PATH_NAME[k], c.why[0] ? ": " : "", c.why);
					rc = 1;
				}
				wsc_close(&cx.x, &c);
				char extra[64];
				snprintf(extra, sizeof extra, "run %d, %s %s", run,
				         phase ? "latency" : "throughput", PATH_NAME[k]);
				progress_show(&pr, ++done, extra, 1);
				bench_sleep(0.5);
			}
		}
	}
	progress_end(&pr);

	cJSON *root = jx_obj(), *paths = jx_add_obj(root, "paths");
	jx_add_str(root, "command", "console");
	jx_add_str(root, "lesson", lesson);
	jx_add_num(root, "runs", o->runs);
	jx_add_num(root, "mb_per_run", o->mb);
	jx_add_num(root, "keys_per_run", o->keys);
	jx_add_str(root, "method",
	           "throughput: head -c MB /dev/zero | tr '\\0' x | fold -w 99 in "
	           "the guest, console bytes per second until the end marker, median "
	           "of runs; latency: one byte to `cat` with -icanon until its echo");
	printf("\n  %-9s %12s  %-28s %9s %9s %9s %9s\n", "path", "MB/s median", "runs", "RTT p50",
	       "p90", "p99", "max (ms)");
	double med[P_COUNT], p50[P_COUNT], p99[P_COUNT];
	for (int k = 0; k < P_COUNT; k++) {
		struct stats ts, ls;
		med[k] = p50[k] = p99[k] = NAN;
		if (!use[k])
			continue;
		stats_compute(tp[k].v, tp[k].n, &ts);
		stats_compute(lat[k].v, lat[k].n, &ls);
		med[k] = ts.p50;
		p50[k] = ls.p50;
		p99[k] = ls.p99;
		char runs[64] = "";
		for (size_t i = 0; i < tp[k].n && strlen(runs) < 50; i++)
			snprintf(runs + strlen(runs), sizeof runs - strlen(runs), "%s%.2f",
			         i ? " " : "", tp[k].v[i]);
		printf("  %-9s %12.2f  %-28s %9.3f %9.3f %9.3f %9.3f\n", PATH_NAME[k], ts.p50, runs,
		       ls.p50, ls.p90, ls.p99, ls.max);
		cJSON *e = jx_add_obj(paths, PATH_NAME[k]);
		cJSON *arr = jx_add_arr(e, "throughput_mbps_runs");
		for (size_t i = 0; i < tp[k].n; i++)
			jx_push(arr, cJSON_CreateNumber(bench_round(tp[k].v[i], 3)));
		if (isfinite(ts.p50))
			jx_add_num(e, "throughput_mbps_median", bench_round(ts.p50, 3));
		cJSON *l = jx_add_obj(e, "keystroke_rtt_ms");
		jx_add_num(l, "n", (double)ls.n);
		if (ls.n) {
			jx_add_num(l, "p50", bench_round(ls.p50, 3));
			jx_add_num(l, "p90", bench_round(ls.p90, 3));
			jx_add_num(l, "p99", bench_round(ls.p99, 3));
			jx_add_num(l, "max", bench_round(ls.max, 3));
		}
	}
	for (int k = P_BRIDGE; k < P_COUNT; k++) {
		if (!use[k] || !use[P_DIRECT] || !isfinite(med[k]) || !isfinite(med[P_DIRECT]))
			continue;
		char key[48];
		double ratio = med[k] / med[P_DIRECT];
		printf("  throughput ratio %s/direct: %.2f; added keystroke latency p50 %+.3f ms, "
		       "p99 %+.3f ms\n",
		       PATH_NAME[k], ratio, p50[k] - p50[P_DIRECT], p99[k] - p99[P_DIRECT]);
		snprintf(key, sizeof key, "throughput_ratio_%s", PATH_NAME[k]);
		jx_add_num(root, key, bench_round(ratio, 3));
		snprintf(key, sizeof key, "added_rtt_p50_ms_%s", PATH_NAME[k]);
		jx_add_num(root, key, bench_round(p50[k] - p50[P_DIRECT], 3));
		snprintf(key, sizeof key, "added_rtt_p99_ms_%s", PATH_NAME[k]);
		jx_add_num(root, key, bench_round(p99[k] - p99[P_DIRECT], 3));
	}
	if (cpu.n) {
		struct stats cs;
		stats_compute(cpu.v, cpu.n, &cs);
		printf("  bridge CPU while relaying: %.1f ms per MB (median), i.e. one core would "
		       "relay about %.0f MB/s\n",
		       cs.p50, cs.p50 > 0 ? 1000 / cs.p50 : INFINITY);
		jx_add_num(root, "bridge_cpu_ms_per_mb", bench_round(cs.p50, 3));
	}
	dvec_free(&cpu);
	printf(
	    "  (MB/s of console output received, pty and all; RTT = keystroke to its echo. "
	    "Paths run\n   one after the other on the same lab: a new console kicks the old.)\n");
	bench_write_figures(o, root);
	cJSON_Delete(root);
	if (o->rss && !bench_stop && run_rss(&cx, lesson) < 0)
		rc = 1;
out:
	if (cx.lab.ours) {
		if (bench_helper_end(o, &cx.api, &cx.lab) == 0)
			printf("ended session %s\n", cx.lab.sid);
		else
			fprintf(stderr, "labvm-bench console: ending session %s failed\n",
			        cx.lab.sid);
	}
	for (int k = 0; k < P_COUNT; k++) {
		dvec_free(&tp[k]);
		dvec_free(&lat[k]);
	}
	bapi_cleanup(&cx.api);
	wsx_free(&cx.x);
	if (cx.bearer) {
		explicit_bzero(cx.bearer, strlen(cx.bearer));
		free(cx.bearer);
	}
	if (cx.basic) {
		explicit_bzero(cx.basic, strlen(cx.basic));
		free(cx.basic);
	}
	if (bench_stop)
		rc = 130;
	return rc;
}
