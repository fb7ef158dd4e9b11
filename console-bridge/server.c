/* server.c - the listening side (server.h): protocol "labvm-console.v1"
 * (ttyd's protocol.c analogue), the ticket checks, single use of tickets, the
 * database answers, and the local-only GET /console-stats. Runs on the lws
 * service thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cjson/cJSON.h>

#include "bridge.h"
#include "browser.h"
#include "bsession.h"
#include "forwarded.h"
#include "log.h"
#include "server.h"
#include "state.h"
#include "ticket.h"
#include "util.h"

/* ------------------------------------------------------------ nonce store */
/* Tickets are single use: remember each accepted nonce until its ticket
 * expires (after that ticket_verify() refuses the ticket anyway). */

#define NONCE_BUCKETS 1024

struct nonce {
	struct nonce *next;
	int64_t exp;
	char n[33];
};

static struct nonce *nonces[NONCE_BUCKETS];
static size_t nnonces;

static unsigned nonce_hash(const char *s)
{
	unsigned h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h % NONCE_BUCKETS;
}

/* 1: already used; 0: recorded now; -1: out of memory */
static int nonce_use(const char *n, int64_t exp)
{
	unsigned h = nonce_hash(n);
	for (struct nonce *e = nonces[h]; e; e = e->next)
		if (strcmp(e->n, n) == 0)
			return 1;
	struct nonce *e = malloc(sizeof *e);
	if (!e)
		return -1;
	snprintf(e->n, sizeof e->n, "%s", n);
	e->exp = exp;
	e->next = nonces[h];
	nonces[h] = e;
	nnonces++;
	return 0;
}

static void nonce_purge(int64_t now_s)
{
	for (size_t i = 0; i < NONCE_BUCKETS; i++)
		for (struct nonce **pp = &nonces[i]; *pp;) {
			struct nonce *e = *pp;
			if (e->exp < now_s) {
				*pp = e->next;
				free(e);
				nnonces--;
			} else {
				pp = &e->next;
			}
		}
}

/* ---------------------------------------------------------------- helpers */

/* The client as the front end saw it: the LAST element of X-Forwarded-For,
 * the one the front end appended (lighttpd's mod_proxy and Apache's
 * mod_proxy append the address they saw; anything before it is whatever the
 * client sent, issue #26 item 15), else the socket peer; for logs only. An
 * element that is not an address (or a header too long to read) is not
 * logged: the socket peer is. */
static void peer_name(struct lws *wsi, char *out, size_t len)
{
	char xff[1024];
	/* a header lws 4.1.6 knows (WSI_TOKEN_X_FORWARDED_FOR): lws_hdr_custom_copy()
	 * never finds it */
	int n = lws_hdr_copy(wsi, xff, sizeof xff, WSI_TOKEN_X_FORWARDED_FOR);
	if (n > 0) {
		char *last = strrchr(xff, ',');
		last = last ? last + 1 : xff;
		last += strspn(last, " \t");
		size_t l = strcspn(last, " \t");
		last[l] = '\0';
		if (l && l < len && strspn(last, "0123456789abcdefABCDEF.:[]") == l) {
			snprintf(out, len, "%s", last);
			return;
		}
	}
	if (!lws_get_peer_simple(wsi, out, len))
		snprintf(out, len, "?");
}

/* The session id in <console_path><sid>; NULL when the path does not fit. */
static const char *path_sid(const char *path)
{
	const char *cp = B->cfg.console_path;
	size_t bl = strlen(B->cfg.base_path), cl = strlen(cp);
	if (bl && strncmp(path, B->cfg.base_path, bl) == 0 && strncmp(path + bl, cp, cl) == 0)
		path += bl;
	if (strncmp(path, cp, cl) != 0)
		return NULL;
	path += cl;
	if (*path == '/')
		path++;
	return util_uuid_valid(path) ? path : NULL;
}

/* ------------------------------------------------------------ the checks */

static void browser_established(struct lws *wsi, struct bconn *c)
{
	char path[512], tbuf[TICKET_MAX_LEN + 16];
	const char *sid, *tk;
	struct ticket t;
	int rc;

	bc_link(c, wsi);
	B->st.accepted++;
	peer_name(wsi, c->peer, sizeof c->peer);

	if (B->stopping) {
		bc_close(c, BS_CLOSE_GOING_AWAY, "bridge shutting down", 0);
		return;
	}
	if (lws_hdr_copy(wsi, path, sizeof path, WSI_TOKEN_GET_URI) <= 0 ||
	    !(sid = path_sid(path))) {
		bc_close(c, BS_CLOSE_BAD_URL,
		         "bad console url: expected <console_path><session id>", 0);
		return;
	}
	memcpy(c->sid, sid, sizeof c->sid - 1);
	c->sid[sizeof c->sid - 1] = '\0';

	tk = lws_get_urlarg_by_name(wsi, "ticket=", tbuf, (int)sizeof tbuf);
	if (!tk || !*tk) {
		bc_close(c, BS_CLOSE_TICKET, "missing ticket", 0);
		return;
	}
	enum ticket_status st =
	    ticket_verify(B->cfg.ticket_key, B->cfg.ticket_key_len, tk, util_epoch_s(), &t);
	explicit_bzero(tbuf, sizeof tbuf);
	if (st != TICKET_OK) {
		bc_close(c, BS_CLOSE_TICKET, ticket_status_str(st), 0);
		return;
	}
	if (strcmp(t.sid, c->sid) != 0) {
		bc_close(c, BS_CLOSE_FORBIDDEN, "ticket not for this session", 0);
		return;
	}
	if (!util_dns_label_ok(t.vm)) {
		bc_close(c, BS_CLOSE_FORBIDDEN, "ticket names an invalid vm", 0);
		return;
	}
	if (strcmp(B->cfg.console_user_from, "forwarded") == 0) {
		/* the ticket's user must be the one the front end logged in on
		 * this very request: a ticket that leaked to another browser is
		 * worth nothing there */
		char fwd[2048], fuser[sizeof t.user];
		int fl = lws_hdr_custom_copy(wsi, fwd, sizeof fwd, "forwarded:", 10);
		if (fl <= 0 || forwarded_user(fwd, fuser, sizeof fuser) < 0) {
			bc_close(
			    c, BS_CLOSE_FORBIDDEN,
			    "the front end did not say who is logged in (Forwarded remote_user)",
			    0);
			return;
		}
		if (!util_ct_equal(fuser, strlen(fuser), t.user, strlen(t.user))) {
			bc_close(c, BS_CLOSE_FORBIDDEN, "ticket not for this user", 0);
			return;
		}
	}
	rc = nonce_use(t.nonce, t.exp);
	if (rc != 0) {
		if (rc > 0)
			bc_close(c, BS_CLOSE_TICKET, "ticket already used", 0);
		else
			bc_close(c, BS_CLOSE_INTERNAL, "out of memory", 0);
		return;
	}
	memcpy(c->user, t.user, sizeof c->user);
	memcpy(c->vm, t.vm, sizeof c->vm);
	c->role = (int)t.role;
	char nonce[sizeof t.nonce];
	memcpy(nonce, t.nonce, sizeof nonce);
	int64_t exp = t.exp;
	explicit_bzero(&t, sizeof t);

	/* owner and state are checked by the database worker; keystrokes typed
	 * meanwhile wait in the socket */
	bc_set_state(c, BC_CHECKING);
	lws_rx_flow_control(wsi, 0);
	c->rx_paused = 1;
	if (db_check(c->id, c->sid, c->vm, nonce, exp) < 0)
		bc_close(c, BS_CLOSE_INTERNAL, "out of memory", 0);
}

void server_check_answer(const struct db_result *r)
{
	struct bconn *c = bc_find(r->conn_id);
	char reason[96];

	if (!c || c->state != BC_CHECKING)
		return;
	switch (r->status) {
	case DB_UNAVAILABLE:
		bc_close(c, BS_CLOSE_UNAVAILABLE, "database unavailable, try again", 0);
		return;
	case DB_NOT_FOUND:
		bc_close(c, BS_CLOSE_ENDED, "session not found", 0);
		return;
	case DB_VM_MISMATCH:
		bc_close(c, BS_CLOSE_FORBIDDEN, "ticket not for this session's vm", 0);
		return;
	case DB_TICKET_USED:
		bc_close(c, BS_CLOSE_TICKET, "ticket already used", 0);
		return;
	case DB_OK:
		break;
	}
	/* an owner's ticket is the owner's; a teacher's (role view or control,
	 * signed by labvm.fcgi after it checked that its user teaches the
	 * session's lesson) is its teacher's, whoever owns the session */
	if (c->role == TICKET_OWNER && strcmp(r->user, c->user) != 0) {
		bc_close(c, BS_CLOSE_FORBIDDEN, "ticket not for this user", 0);
		return;
	}
	snprintf(c->owner, sizeof c->owner, "%s", r->user);
	if (r->state == SESSION_STARTING) {
		bc_close(c, BS_CLOSE_NOT_READY, "session not ready yet", 0);
		return;
	}
	if (r->state != SESSION_READY) {
		snprintf(reason, sizeof reason, "session %s",
		         r->state < 0 ? "unknown"
		                      : session_state_str((enum session_state)r->state));
		bc_close(c, BS_CLOSE_ENDED, reason, 0);
		return;
	}
	c->pod = strcmp(r->runtime, "pod") == 0;
	lws_rx_flow_control(c->wsi, 1);
	c->rx_paused = 0;
	if (bs_attach(c) == 0 && c->role != TICKET_OWNER) {
		/* the student's page says who watches, in which mode (sql/013) */
		c->watching = 1;
		if (db_watch(1, c->id, c->sid, c->vm, c->user, ticket_role_str(c->role)) < 0)
			c->watching = 0;
	}
}

void server_tick(int64_t now)
{
	for (struct lws_dll2 *d = lws_dll2_get_head(&B->conns), *d1; d; d = d1) {
		d1 = d->next;
		struct bconn *c = lws_container_of(d, struct bconn, all);
		if (c->state == BC_CHECKING && now - c->t_state > BS_CHECK_TIMEOUT_S * 1000)
			bc_close(c, BS_CLOSE_UNAVAILABLE, "database check timed out, try again", 0);
		else if (c->state == BC_ATTACHED && c->t_high &&
		         now - c->t_high > (int64_t)B->cfg.console_ping_s * 2000)
			bs_close_browser(c, BS_CLOSE_POLICY, "browser not reading console output");
		else if (c->state == BC_CLOSING && !c->killed &&
		         now - c->t_state > BS_CLOSE_GRACE_S * 1000) {
			/* the browser does not read: drop it without the niceties */
			c->killed = 1;
			lws_set_timeout(c->wsi, PENDING_TIMEOUT_KILLED_BY_PARENT,
			                LWS_TO_KILL_ASYNC);
		}
	}
	nonce_purge(util_epoch_s());
}

void server_close_all(void)
{
	for (struct lws_dll2 *d = lws_dll2_get_head(&B->conns), *d1; d; d = d1) {
		d1 = d->next;
		bs_close_browser(lws_container_of(d, struct bconn, all), BS_CLOSE_GOING_AWAY,
		                 "bridge shutting down");
	}
}

void server_free(void)
{
	nonce_purge(INT64_MAX);
}

/* ------------------------------------------------------------------ stats */

static char *stats_json(void)
{
	static const char *const names[8] = {"ticket",   "forbidden", "not_ready",   "ended",
	                                     "too_many", "upstream",  "unavailable", "other"};
	cJSON *o = cJSON_CreateObject(), *ref, *arr;
	char *s = NULL;
	int open = 0;

	if (!o)
		return NULL;
	for (struct lws_dll2 *d = lws_dll2_get_head(&B->sessions); d; d = d->next) {
		open += lws_container_of(d, struct bsession, list)->up_state == UP_OPEN;
	}
	/* sessions: lab sessions with a console; consoles: one per (session,
	 * machine), each with its own upstream */
	long nsess = bs_count_sessions();
	if (nsess < 0)
		goto out;
	if (!cJSON_AddNumberToObject(o, "browsers", B->conns.count) ||
	    !cJSON_AddNumberToObject(o, "sessions", (double)nsess) ||
	    !cJSON_AddNumberToObject(o, "consoles", B->sessions.count) ||
	    !cJSON_AddNumberToObject(o, "upstreams_open", open) ||
	    !cJSON_AddNumberToObject(o, "accepted", (double)B->st.accepted) ||
	    !cJSON_AddNumberToObject(o, "upstream_connects", (double)B->st.upstream_connects) ||
	    !cJSON_AddNumberToObject(o, "upstream_failures", (double)B->st.upstream_failures) ||
	    !cJSON_AddNumberToObject(o, "bytes_down", (double)B->st.bytes_down) ||
	    !cJSON_AddNumberToObject(o, "bytes_up", (double)B->st.bytes_up) ||
	    !cJSON_AddNumberToObject(o, "view_dropped", (double)B->st.view_dropped) ||
	    !cJSON_AddNumberToObject(o, "nonces", (double)nnonces) ||
	    !cJSON_AddBoolToObject(o, "database", B->db_up) ||
	    !(ref = cJSON_AddObjectToObject(o, "refused")) ||
	    !(arr = cJSON_AddArrayToObject(o, "session_list")))
		goto out;
	for (int i = 0; i < 8; i++)
		if (!cJSON_AddNumberToObject(ref, names[i], (double)B->st.refused[i]))
			goto out;
	for (struct lws_dll2 *d = lws_dll2_get_head(&B->sessions); d; d = d->next) {
		static const char *const ups[] = {"none", "connecting", "open", "closing"};
		const struct bsession *x = lws_container_of(d, struct bsession, list);
		cJSON *e = cJSON_CreateObject();
		if (!e)
			goto out;
		cJSON_AddItemToArray(arr, e);
		if (!cJSON_AddStringToObject(e, "id", x->sid) ||
		    !cJSON_AddStringToObject(e, "vm", x->vm) ||
		    !cJSON_AddStringToObject(e, "upstream", ups[x->up_state]) ||
		    !cJSON_AddNumberToObject(e, "browsers", x->conns.count) ||
		    !cJSON_AddBoolToObject(e, "closing", x->dead))
			goto out;
	}
	s = cJSON_PrintUnformatted(o);
out:
	cJSON_Delete(o);
	return s;
}

static int http_request(struct lws *wsi, struct bconn *c, const char *uri)
{
	unsigned char hdr[LWS_PRE + 512], *p = hdr + LWS_PRE, *end = hdr + sizeof hdr;

	/* local callers only: anything the front end forwarded carries
	 * X-Forwarded-For (or Forwarded); a header lws knows by token, not a
	 * custom one */
	if (strcmp(uri, STATS_PATH) != 0 ||
	    lws_hdr_total_length(wsi, WSI_TOKEN_X_FORWARDED_FOR) > 0 ||
	    lws_hdr_custom_length(wsi, "forwarded:", 10) > 0) {
		if (lws_return_http_status(wsi, HTTP_STATUS_NOT_FOUND, NULL))
			return -1;
		return lws_http_transaction_completed(wsi) ? -1 : 0;
	}
	free(c->http_body);
	c->http_body = stats_json();
	if (!c->http_body)
		return -1;
	c->http_len = strlen(c->http_body);
	if (lws_add_http_common_headers(wsi, HTTP_STATUS_OK, "application/json",
	                                (lws_filepos_t)c->http_len, &p, end) ||
	    lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CACHE_CONTROL,
	                                 (const unsigned char *)"no-store", 8, &p, end) ||
	    lws_finalize_write_http_header(wsi, hdr + LWS_PRE, &p, end))
		return -1;
	lws_callback_on_writable(wsi);
	return 0;
}

static int http_writeable(struct lws *wsi, struct bconn *c)
{
	if (!c->http_body)
		return 0;
	unsigned char *buf = malloc(LWS_PRE + c->http_len);
	if (!buf)
		return -1;
	memcpy(buf + LWS_PRE, c->http_body, c->http_len);
	int n = lws_write(wsi, buf + LWS_PRE, c->http_len, LWS_WRITE_HTTP_FINAL);
	free(buf);
	free(c->http_body);
	c->http_body = NULL;
	if (n < (int)c->http_len)
		return -1;
	return lws_http_transaction_completed(wsi) ? -1 : 0;
}

/* ------------------------------------------------------------ the callback */

int server_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len)
{
	struct bconn *c = user;
	int rc;

	switch (reason) {
	case LWS_CALLBACK_HTTP:
		return c ? http_request(wsi, c, in ? (const char *)in : "") : -1;
	case LWS_CALLBACK_HTTP_WRITEABLE:
		return c ? http_writeable(wsi, c) : -1;
	case LWS_CALLBACK_CLOSED_HTTP:
		if (c) {
			free(c->http_body);
			c->http_body = NULL;
		}
		break;

	case LWS_CALLBACK_ESTABLISHED:
		if (c->http_body) { /* pss reused from the HTTP phase */
			free(c->http_body);
			c->http_body = NULL;
		}
		browser_established(wsi, c);
		return 0;

	case LWS_CALLBACK_RECEIVE:
		if (c->state != BC_ATTACHED)
			return 0; /* closing, or (with RX paused) not yet checked */
		if (!lws_frame_is_binary(wsi)) {
			/* control messages: {"type":"resize","cols":C,"rows":R} (one frame) */
			if (lws_is_first_fragment(wsi) && lws_is_final_fragment(wsi))
				bs_browser_control(c, in, len);
			return 0;
		}
		bs_browser_input(c, in, len);
		return 0;

	case LWS_CALLBACK_SERVER_WRITEABLE:
		rc = bc_writeable(c);
		if (rc > 0)
			bs_browser_drained(c);
		return rc < 0 ? -1 : 0;

	case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
		if (c->state != BC_CLOSING) {
			int code = len >= 2
			               ? ((unsigned char *)in)[0] << 8 | ((unsigned char *)in)[1]
			               : 1005;
			if (c->sess)
				log_info("session %s: console %llu closed by the browser (%d)",
				         c->sid, (unsigned long long)c->id, code);
			bs_detach(c);
		}
		return 0;

	case LWS_CALLBACK_CLOSED:
		if (!c->is_ws)
			break;
		if (c->state != BC_CLOSING && c->sess)
			log_info("session %s: console %llu gone", c->sid,
			         (unsigned long long)c->id);
		bs_detach(c);
		bc_unlink(c);
		return 0;

	default:
		break;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}
