/* session.c - bridge sessions: the shared upstream of one console session,
 * per-direction queues (bytequeue.c), flow control, and every close (with
 * its reason, logged once). Runs on the lws service thread only. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "bridge.h"
#include "log.h"

/* --------------------------------------------------------------- sessions */

struct bsession *bs_find(const char *sid)
{
	for (struct bsession *s = B->sessions; s; s = s->next)
		if (!s->dead && strcmp(s->sid, sid) == 0)
			return s;
	return NULL;
}

static struct bsession *bs_new(const struct bconn *c)
{
	struct bsession *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	memcpy(s->sid, c->sid, sizeof s->sid);
	memcpy(s->user, c->user, sizeof s->user);
	memcpy(s->vm, c->vm, sizeof s->vm);
	s->next = B->sessions;
	B->sessions = s;
	B->nsessions++;
	return s;
}

void bs_free(struct bsession *s)
{
	struct bsession **pp;
	for (pp = &B->sessions; *pp; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			B->nsessions--;
			break;
		}
	bq_clear(&s->to_up);
	ring_free(&s->ring);
	free(s);
}

int bs_refuse_index(int code)
{
	switch (code) {
	case BS_CLOSE_BAD_URL:
	case BS_CLOSE_TICKET:
		return 0;
	case BS_CLOSE_FORBIDDEN:
		return 1;
	case BS_CLOSE_NOT_READY:
		return 2;
	case BS_CLOSE_ENDED:
		return 3;
	case BS_CLOSE_TOO_MANY:
		return 4;
	case BS_CLOSE_UPSTREAM:
		return 5;
	case BS_CLOSE_UNAVAILABLE:
		return 6;
	default:
		return 7;
	}
}

int bs_attach(struct bconn *c)
{
	struct bsession *s = bs_find(c->sid);

	if (s && (strcmp(s->user, c->user) || strcmp(s->vm, c->vm))) {
		/* checked against the database just now; a stale session object
		 * (e.g. a VM replaced) gives way to the new facts */
		bs_close(s, BS_CLOSE_ENDED, "session changed");
		s = NULL;
	}
	if (s && s->nconns >= B->cfg.console_max_per_session) {
		bc_close(c, BS_CLOSE_TOO_MANY, "too many consoles open for this session", 0);
		return -1;
	}
	int created = 0;
	if (!s) {
		s = bs_new(c);
		if (!s) {
			bc_close(c, BS_CLOSE_INTERNAL, "out of memory", 0);
			return -1;
		}
		created = 1;
	}
	c->sess = s;
	c->sess_next = s->conns;
	s->conns = c;
	s->nconns++;
	s->t_idle = 0;
	c->state = BC_ATTACHED;
	c->t_state = bridge_now_ms();

	if (s->up_state == UP_OPEN) {
		if (bc_send_status(c, "open") < 0 || ring_replay(&s->ring, &c->out) < 0) {
			bc_close(c, BS_CLOSE_INTERNAL, "out of memory", 0);
			return -1;
		}
		lws_callback_on_writable(c->wsi);
		log_info("session %s: console %llu attached (user %s, %d open, upstream shared)",
		         s->sid, (unsigned long long)c->id, c->user, s->nconns);
		return 0;
	}
	if (bc_send_status(c, "connecting") < 0) {
		bc_close(c, BS_CLOSE_INTERNAL, "out of memory", 0);
		return -1;
	}
	lws_callback_on_writable(c->wsi);
	log_info("session %s: console %llu attached (user %s, %d open, upstream %s)", s->sid,
	         (unsigned long long)c->id, c->user, s->nconns,
	         created ? "opening" : "already opening");
	if (s->up_state == UP_NONE && upstream_open(s) < 0) {
		bs_close(s, BS_CLOSE_UPSTREAM, "upstream console failed: cannot connect");
		return -1;
	}
	return 0;
}

void bs_detach(struct bconn *c)
{
	struct bsession *s = c->sess;
	if (!s)
		return;
	for (struct bconn **pp = &s->conns; *pp; pp = &(*pp)->sess_next)
		if (*pp == c) {
			*pp = c->sess_next;
			s->nconns--;
			break;
		}
	c->sess = NULL;
	c->sess_next = NULL;
	if (s->dead)
		return; /* bs_close() is closing everything and frees s */
	if (!s->nconns) {
		s->t_idle = bridge_now_ms();
		if (B->console_linger_s == 0 || B->stopping) {
			bs_close(s, BS_CLOSE_NORMAL, "last console closed");
			return;
		}
		log_info("session %s: last console left; upstream kept for %d s", s->sid,
		         B->console_linger_s);
	}
	/* a paused upstream may have been waiting for this (slow) browser only */
	if ((s->up_rx_paused || s->up_want_pause) && s->up) {
		for (struct bconn *o = s->conns; o; o = o->sess_next)
			if (o->out.bytes > BS_DOWN_LOW)
				return;
		s->up_want_pause = 0;
		if (s->up_rx_paused) {
			lws_rx_flow_control(s->up, 1);
			s->up_rx_paused = 0;
		}
	}
}

static int json_closed(int code, const char *reason, char **out)
{
	cJSON *o = cJSON_CreateObject();
	if (!o || !cJSON_AddStringToObject(o, "type", "closed") ||
	    !cJSON_AddNumberToObject(o, "code", code) ||
	    !cJSON_AddStringToObject(o, "reason", reason)) {
		cJSON_Delete(o);
		return -1;
	}
	*out = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return *out ? 0 : -1;
}

void bc_close(struct bconn *c, int code, const char *reason, int flush)
{
	if (c->state == BC_CLOSING)
		return;
	if (c->state == BC_NEW || c->state == BC_CHECKING)
		B->st.refused[bs_refuse_index(code)]++;
	if (c->sess)
		log_info("session %s: console %llu closed: %d %s", c->sess->sid,
		         (unsigned long long)c->id, code, reason);
	else
		log_info("session %s: console %llu refused (peer %s): %d %s",
		         c->sid[0] ? c->sid : "-", (unsigned long long)c->id, c->peer, code,
		         reason);
	bs_detach(c);
	c->state = BC_CLOSING;
	c->t_state = bridge_now_ms();
	c->close_code = code;
	snprintf(c->close_reason, sizeof c->close_reason, "%s", reason);
	if (!flush)
		bq_clear(&c->out);
	char *json = NULL;
	if (json_closed(code, c->close_reason, &json) == 0) {
		if (bq_append(&c->out, json, strlen(json), 1) < 0)
			bq_clear(&c->out); /* close frame alone still carries the reason */
		cJSON_free(json);
	}
	if (c->rx_paused) {
		lws_rx_flow_control(c->wsi, 1); /* let lws see the peer's close */
		c->rx_paused = 0;
	}
	lws_callback_on_writable(c->wsi);
}

void bs_close(struct bsession *s, int code, const char *reason)
{
	if (s->dead)
		return;
	log_info("session %s: console session closed: %d %s (%d browser%s, %llu bytes down, "
	         "%llu up)",
	         s->sid, code, reason, s->nconns, s->nconns == 1 ? "" : "s",
	         (unsigned long long)s->bytes_down, (unsigned long long)s->bytes_up);
	s->dead = 1;
	/* flush output already received, then close with the reason */
	while (s->conns)
		bc_close(s->conns, code, reason, 1);
	if (s->up)
		upstream_close(s);
	else
		bs_free(s);
}

/* ---------------------------------------------------------------- relay */

void bs_upstream_open(struct bsession *s)
{
	s->up_state = UP_OPEN;
	log_info("session %s: upstream console open (vm %s)", s->sid, s->vm);
	for (struct bconn *c = s->conns; c; c = c->sess_next) {
		if (bc_send_status(c, "open") < 0) {
			bc_close(c, BS_CLOSE_INTERNAL, "out of memory", 0);
			continue;
		}
		lws_callback_on_writable(c->wsi);
	}
	/* the guest printed its prompt before anyone listened: ask for a fresh one
	 * (a bare CR, as a user pressing Enter on virtctl console), once per session
	 * object, only when nothing was typed yet */
	if (!s->woke && !s->to_up.bytes && !s->ring.len) {
		s->woke = 1;
		if (bq_append(&s->to_up, "\r", 1, 0) < 0)
			return;
	}
	if (s->to_up.bytes)
		lws_callback_on_writable(s->up);
}

void bs_upstream_data(struct bsession *s, const void *p, size_t n)
{
	int high = 0;

	s->bytes_down += n;
	B->st.bytes_down += n;
	ring_put(&s->ring, p, n);
	for (struct bconn *c = s->conns, *next; c; c = next) {
		next = c->sess_next;
		if (bq_append(&c->out, p, n, 0) < 0) {
			bc_close(c, BS_CLOSE_INTERNAL, "out of memory", 0);
			continue;
		}
		if (c->out.bytes > BS_DOWN_HIGH) {
			high = 1;
			if (!c->t_high)
				c->t_high = bridge_now_ms();
		}
		lws_callback_on_writable(c->wsi);
	}
	/* Not from inside the upstream's own RECEIVE: lws 4.1 would park the rest of
	 * the current read in the wsi's buflist, and draining that buflist later
	 * wedges its forced-service loop on this TLS client. Pause from the
	 * upstream's next writeable callback instead (overshoot: one read). */
	if (high && !s->up_rx_paused && s->up) {
		s->up_want_pause = 1;
		lws_callback_on_writable(s->up);
	}
}

void bs_upstream_gone(struct bsession *s, const char *why)
{
	char reason[120];

	s->up = NULL;
	s->up_state = UP_NONE;
	if (s->dead) {
		if (!s->nconns)
			bs_free(s);
		return;
	}
	B->st.upstream_failures++;
	snprintf(reason, sizeof reason, "upstream console failed: %s", why);
	bs_close(s, BS_CLOSE_UPSTREAM, reason);
}

void bs_upstream_drained(struct bsession *s)
{
	if (s->to_up.bytes >= BS_UP_LOW)
		return;
	for (struct bconn *c = s->conns; c; c = c->sess_next) {
		c->want_pause = 0;
		if (c->rx_paused && c->state == BC_ATTACHED) {
			lws_rx_flow_control(c->wsi, 1);
			c->rx_paused = 0;
		}
	}
}

void bs_browser_drained(struct bconn *c)
{
	struct bsession *s = c ? c->sess : NULL;
	if (!s || !s->up)
		return;
	if (s->up_want_pause) {
		for (struct bconn *o = s->conns; o; o = o->sess_next)
			if (o->out.bytes > BS_DOWN_LOW)
				return;
		s->up_want_pause = 0;
	}
	if (!s->up_rx_paused)
		return;
	for (struct bconn *o = s->conns; o; o = o->sess_next)
		if (o->out.bytes > BS_DOWN_LOW)
			return;
	lws_rx_flow_control(s->up, 1);
	s->up_rx_paused = 0;
}

void bs_browser_input(struct bconn *c, const void *p, size_t n)
{
	struct bsession *s = c->sess;
	if (!s || s->dead)
		return;
	if (bq_append(&s->to_up, p, n, 0) < 0) {
		bc_close(c, BS_CLOSE_INTERNAL, "out of memory", 0);
		return;
	}
	s->bytes_up += n;
	B->st.bytes_up += n;
	if (s->up && s->up_state == UP_OPEN)
		lws_callback_on_writable(s->up);
	if (s->to_up.bytes > BS_UP_HIGH && !c->rx_paused) {
		c->want_pause = 1; /* not from inside RECEIVE: see bs_upstream_data() */
		lws_callback_on_writable(c->wsi);
	}
}

void bs_tick(int64_t now)
{
	struct bsession *s, *next;
	for (s = B->sessions; s; s = next) {
		next = s->next;
		if (s->dead)
			continue;
		if (s->up_state == UP_CONNECTING &&
		    now - s->t_open_start > BS_UP_TIMEOUT_S * 1000) {
			B->st.upstream_failures++;
			bs_close(s, BS_CLOSE_UPSTREAM,
			         "upstream console failed: handshake timeout");
			continue;
		}
		if (!s->nconns && s->t_idle &&
		    now - s->t_idle > (int64_t)B->console_linger_s * 1000)
			bs_close(s, BS_CLOSE_NORMAL, "idle: no console for console_linger_s");
	}
}
