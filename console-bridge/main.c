/* main.c - labvm-console: configuration, the context (struct bridge), the
 * lws context and its vhosts (the listening one for browsers, a non-listening
 * one for the upstream client connections and their TLS trust, and one for
 * main's own events), signals, the database answers, the periodic tick and
 * the service loop. Nothing calls into main.c. See bridge.h for the protocol,
 * the threads and the files. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bridge.h"
#include "bsession.h"
#include "dbworker.h"
#include "log.h"
#include "server.h"
#include "ticket.h"
#include "upstream.h"
#include "util.h"

struct bridge *B;

static volatile sig_atomic_t stop_requested;
static int done;
static lws_sorted_usec_list_t tick_sul;
static int64_t last_recheck, stop_deadline;

/* lws's own messages (warn and err only): never let a ticket through */
static void lws_emit(int level, const char *line)
{
	char buf[1024], *p;
	snprintf(buf, sizeof buf, "%s", line);
	util_rstrip(buf);
	for (p = buf; (p = strstr(p, "ticket=")) != NULL;) {
		p += 7;
		char *e = p;
		while (*e && *e != '&' && *e != ' ' && *e != '"')
			e++;
		memmove(p + 3, e, strlen(e) + 1);
		memcpy(p, "***", 3);
	}
	log_msg(level & LLL_ERR ? LOG_ERR : LOG_WARN, "lws: %s", buf);
}

static void on_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
	if (B && B->ctx)
		lws_cancel_service(B->ctx);
}

static void begin_stop(void)
{
	int nc = (int)B->conns.count, ns = (int)B->sessions.count;

	B->stopping = 1;
	stop_deadline = util_mono_ms() + 3000;
	log_info("SIGTERM: closing %d console%s and %d session%s", nc, nc == 1 ? "" : "s", ns,
	         ns == 1 ? "" : "s");
	bs_close_all(BS_CLOSE_GOING_AWAY, "bridge shutting down");
	server_close_all();
}

static void tick(lws_sorted_usec_list_t *sul)
{
	int64_t now = util_mono_ms();
	(void)sul;

	server_tick(now);
	bs_tick(now);
	if (!B->stopping && now - last_recheck >= BS_RECHECK_S * 1000) {
		last_recheck = now;
		if (bs_recheck() < 0)
			log_warn("re-check: out of memory");
	}
	if (B->stopping && ((!B->conns.count && !B->sessions.count) || now > stop_deadline)) {
		done = 1;
		lws_cancel_service(B->ctx);
		return;
	}
	lws_sul_schedule(B->ctx, 0, &tick_sul, tick, (B->stopping ? 100 : 1000) * LWS_US_PER_MS);
}

/* The database (re)connected and cleared this bridge's watchers: the
 * teachers' consoles open now are written again. */
static void rewatch(void)
{
	for (struct lws_dll2 *d = lws_dll2_get_head(&B->conns); d; d = d->next) {
		struct bconn *c = lws_container_of(d, struct bconn, all);
		if (c->watching)
			db_watch(1, c->id, c->sid, c->vm, c->user, ticket_role_str(c->role));
	}
}

static void db_answers(void)
{
	struct db_result *r = db_results(), *next;
	for (; r; r = next) {
		next = r->next;
		switch (r->kind) {
		case DB_CHECK:
			server_check_answer(r);
			break;
		case DB_ENDED:
			bs_ended(r->sid);
			break;
		case DB_STATUS:
			if (r->up != B->db_up)
				log_info("database %s",
				         r->up ? "reachable"
				               : "unreachable: "
				                 "refusing new consoles, keeping open ones");
			B->db_up = r->up;
			if (r->up) {
				last_recheck = 0; /* re-check the open sessions now */
				rewatch();
			}
			break;
		case DB_RECHECK:
		case DB_WATCH_ON:
		case DB_WATCH_OFF:
		case DB_ACTIVITY: /* no answer */
			break;
		}
		free(r);
	}
}

/* lws_cancel_service() from the database worker or the signal handler */
static void wakeup(void)
{
	db_answers();
	if (stop_requested && !B->stopping) {
		begin_stop();
		lws_sul_schedule(B->ctx, 0, &tick_sul, tick, 50 * LWS_US_PER_MS);
	}
}

/* main's own protocol, on a vhost that neither listens nor connects: lws
 * broadcasts EVENT_WAIT_CANCELLED to every protocol of every vhost */
static int callback_events(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                           size_t len)
{
	if (reason == LWS_CALLBACK_EVENT_WAIT_CANCELLED) {
		wakeup();
		return 0;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}

static const struct lws_protocols server_protocols[] = {
    /* first: a client that names no subprotocol lands here too (PLATFORM.md §5) */
    {BRIDGE_PROTO, server_callback, sizeof(struct bconn), 4096, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0}};

/* one per upstream kind (upstream.h) */
static const struct lws_protocols client_protocols[] = {
    {UPSTREAM_KUBEVIRT_LOCAL, upstream_kubevirt_callback, 0, 4096, 0, NULL, 0},
    {UPSTREAM_PODEXEC_LOCAL, upstream_podexec_callback, 0, 4096, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0}};

static const struct lws_protocols event_protocols[] = {
    {"labvm-console-events", callback_events, 0, 0, 0, NULL, 0}, {NULL, NULL, 0, 0, 0, NULL, 0}};

static lws_retry_bo_t browser_retry;

/* host:port. (unix:/path is not offered: Debian's lws 4.1.6 does not bind a
 * vhost to a unix socket path, it looks the path up as a network interface.) */
static int parse_listen(const char *s, char *iface, size_t ilen, int *port)
{
	const char *colon = strrchr(s, ':');
	if (!colon || colon == s || (size_t)(colon - s) >= ilen)
		return -1;
	char *end;
	long p = strtol(colon + 1, &end, 10);
	if (*end || p < 1 || p > 65535)
		return -1;
	memcpy(iface, s, (size_t)(colon - s));
	iface[colon - s] = '\0';
	*port = (int)p;
	return 0;
}

int main(int argc, char **argv)
{
	static struct bridge bridge;
	struct lws_context_creation_info info;
	char err[512], iface[256];
	int port, rc = 1;

	if (argc > 1) {
		fprintf(stderr, "usage: %s (configuration from $LABVM_CONF, default %s)\n", argv[0],
		        CFG_DEFAULT_PATH);
		return 2;
	}
	B = &bridge;
	log_init("labvm-console", LOG_INFO);
	if (cfg_load(cfg_path(), &B->cfg, CFG_NEED_TICKET_KEY, err, sizeof err) < 0) {
		log_err("config: %s", err);
		return 1;
	}
	if (parse_listen(B->cfg.console_listen, iface, sizeof iface, &port) < 0) {
		log_err("config: console_listen '%s' is not host:port", B->cfg.console_listen);
		goto out;
	}
	if (kubeapi_parse(B->cfg.kube_api, &B->kube) < 0) {
		log_err("config: kube_api '%s' is not https://host[:port][/path]", B->cfg.kube_api);
		goto out;
	}
	if (B->cfg.console_path[0] != '/') {
		log_err("config: console_path '%s' must start with /", B->cfg.console_path);
		goto out;
	}
	B->kube.token_file = B->cfg.kube_token_file;
	if (kubeapi_load_token(&B->kube) < 0)
		log_warn("no service-account token yet; consoles fail until %s is readable",
		         B->cfg.kube_token_file);

	lws_set_log_level(LLL_ERR | LLL_WARN, lws_emit);

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	memset(&info, 0, sizeof info);
	info.options = LWS_SERVER_OPTION_EXPLICIT_VHOSTS | LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
	info.pt_serv_buf_size = 32 * 1024;
	B->ctx = lws_create_context(&info);
	if (!B->ctx) {
		log_err("lws: cannot create the context");
		goto out;
	}

	/* browsers: plain WebSocket behind the front end, pinged every console_ping_s */
	browser_retry.secs_since_valid_ping = (uint16_t)B->cfg.console_ping_s;
	browser_retry.secs_since_valid_hangup = (uint16_t)(B->cfg.console_ping_s * 3);
	memset(&info, 0, sizeof info);
	info.vhost_name = "browsers";
	info.port = port;
	info.iface = iface;
	info.options = LWS_SERVER_OPTION_FAIL_UPON_UNABLE_TO_BIND;
	/* lws 4.1.6 built with IPv6 binds an IPv4 address given as iface on an
	 * IPv6 socket to every interface (seen: *:7682); an IPv4 listener keeps
	 * the bridge on the address it was told (loopback: only the front end). */
	if (!strchr(iface, ':'))
		info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
	info.protocols = server_protocols;
	info.retry_and_idle_policy = &browser_retry;
	info.keepalive_timeout = 10;
	if (!lws_create_vhost(B->ctx, &info)) {
		log_err("cannot listen on %s", B->cfg.console_listen);
		goto out;
	}

	/* upstream: client connections only, TLS verified against kube_ca_file */
	memset(&info, 0, sizeof info);
	info.vhost_name = "kubevirt";
	info.port = CONTEXT_PORT_NO_LISTEN;
	info.protocols = client_protocols;
	info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
	info.client_ssl_ca_filepath = B->cfg.kube_ca_file;
	B->up_vhost = lws_create_vhost(B->ctx, &info);
	if (!B->up_vhost) {
		log_err("cannot set up the upstream TLS client (kube_ca_file %s)",
		        B->cfg.kube_ca_file);
		goto out;
	}

	/* main's events (database answers, signals) */
	memset(&info, 0, sizeof info);
	info.vhost_name = "events";
	info.port = CONTEXT_PORT_NO_LISTEN;
	info.protocols = event_protocols;
	if (!lws_create_vhost(B->ctx, &info)) {
		log_err("lws: cannot create the events vhost");
		goto out;
	}

	if (db_start(B->cfg.database, B->cfg.environment, B->cfg.console_listen, B->ctx) < 0) {
		log_err("cannot start the database worker: %s", strerror(errno));
		goto out;
	}
	lws_sul_schedule(B->ctx, 0, &tick_sul, tick, 1000 * LWS_US_PER_MS);
	log_info("listening on %s (path %s), upstream %s:%d namespace %s, ping %d s, linger %d s",
	         B->cfg.console_listen, B->cfg.console_path, B->kube.host, B->kube.port,
	         B->cfg.namespace_, B->cfg.console_ping_s, B->cfg.console_linger_s);

	while (!done && lws_service(B->ctx, 0) >= 0) {
		if (stop_requested && !B->stopping)
			wakeup();
	}
	rc = 0;
	log_info("stopped");
out:
	db_stop();
	if (B->ctx) {
		lws_sul_cancel(&tick_sul);
		lws_context_destroy(B->ctx);
		B->ctx = NULL;
	}
	bs_free_all();
	server_free();
	kubeapi_free(&B->kube);
	cfg_free(&B->cfg);
	return rc;
}
