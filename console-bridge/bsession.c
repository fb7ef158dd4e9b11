/* bsession.c - console sessions (bsession.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bridge.h"
#include "bsession.h"
#include "control.h"
#include "dbworker.h"
#include "log.h"
#include "ticket.h"
#include "util.h"

#define conn_of(d) lws_container_of(d, struct bconn, in_sess)
#define sess_of(d) lws_container_of(d, struct bsession, list)

static void up_opened(void *owner);
static void up_data(void *owner, const void *p, size_t n);
static void up_drained(void *owner, size_t queued);
static void up_closed(void *owner, const char *why);

static const struct upstream_events up_events = {
    .opened = up_opened,
    .data = up_data,
    .drained = up_drained,
    .closed = up_closed,
};

/* A console is one machine's of a session: keyed by (session, vm), so each
 * machine of a multi-machine session has its own upstream, browsers, replay
 * and limit, and opening one never closes another (issue #26 item 5). */
static struct bsession *bs_find(const char *sid, const char *vm)
{
	for (struct lws_dll2 *d = lws_dll2_get_head(&B->sessions); d; d = d->next) {
		struct bsession *s = sess_of(d);
		if (!s->dead && strcmp(s->sid, sid) == 0 && strcmp(s->vm, vm) == 0)
			return s;
	}
	return NULL;
}

static struct bsession *bs_new(const struct bconn *c)
{
	struct bsession *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	memcpy(s->sid, c->sid, sizeof s->sid);
	memcpy(s->user, c->owner, sizeof s->user);
	memcpy(s->vm, c->vm, sizeof s->vm);
	/* the one place that picks the upstream kind */
	s->pod = c->pod;
	s->up_ops = c->pod ? &upstream_pod_exec : &upstream_kubevirt_console;
	lws_dll2_add_head(&s->list, &B->sessions);
	return s;
}

static void bs_free(struct bsession *s)
{
	lws_dll2_remove(&s->list);
	ring_free(&s->ring);
	free(s);
}

void bs_free_all(void)
{
	while (lws_dll2_get_head(&B->sessions))
		bs_free(sess_of(lws_dll2_get_head(&B->sessions)));
}

static int any_browser_above(struct bsession *s, size_t mark)
{
	for (struct lws_dll2 *d = lws_dll2_get_head(&s->conns); d; d = d->next) {
		if (conn_of(d)->out.bytes > mark)
			return 1;
	}
	return 0;
}

/* Resume reading the upstream unless a browser is still above the low mark. */
static void up_maybe_resume(struct bsession *s)
{
	if (s->up && !any_browser_above(s, BS_DOWN_LOW))
		s->up_ops->rx(s->up, 1);
}

static int open_upstream(struct bsession *s)
{
	B->st.upstream_connects++;
	s->up_state = UP_CONNECTING;
	s->t_open_start = util_mono_ms();
	s->up = s->up_ops->open(s->sid, s->vm, &up_events, s);
	if (!s->up) {
		s->up_state = UP_NONE;
		B->st.upstream_failures++;
		return -1;
	}
	return 0;
}

int bs_attach(struct bconn *c)
{
	struct bsession *s = bs_find(c->sid, c->vm);

	if (s && (strcmp(s->user, c->owner) || s->pod != c->pod)) {
		/* checked against the database just now; a stale session object
		 * (a VM of that name now in another user's or runtime's session)
		 * gives way to the new facts */
		bs_close(s, BS_CLOSE_ENDED, "session changed");
		s = NULL;
	}
	if (s && (int)s->conns.count >= B->cfg.console_max_per_session) {
		bc_close(c, BS_CLOSE_TOO_MANY, "too many consoles open for this machine", 0);
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
	lws_dll2_add_head(&c->in_sess, &s->conns);
	s->t_idle = 0;
	bc_set_state(c, BC_ATTACHED);

	if (s->up_state == UP_OPEN) {
		if (bc_send_status(c, "open") < 0 || ring_replay(&s->ring, &c->out) < 0) {
			bs_close_browser(c, BS_CLOSE_INTERNAL, "out of memory");
			return -1;
		}
		log_info("session %s: console %llu attached (vm %s, user %s, %d open, upstream "
		         "shared)",
		         s->sid, (unsigned long long)c->id, s->vm, c->user, (int)s->conns.count);
		return 0;
	}
	if (bc_send_status(c, "connecting") < 0) {
		bs_close_browser(c, BS_CLOSE_INTERNAL, "out of memory");
		return -1;
	}
	log_info("session %s: console %llu attached (vm %s, user %s, %d open, upstream %s)", s->sid,
	         (unsigned long long)c->id, s->vm, c->user, (int)s->conns.count,
	         created ? "opening" : "already opening");
	if (s->up_state == UP_NONE && open_upstream(s) < 0) {
		bs_close(s, BS_CLOSE_UPSTREAM, "upstream console failed: cannot connect");
		return -1;
	}
	return 0;
}

void bs_detach(struct bconn *c)
{
	struct bsession *s = c->sess;
	if (c->watching) {
		c->watching = 0;
		db_watch(0, c->id, c->sid, c->vm, c->user, NULL);
	}
	if (!s)
		return;
	lws_dll2_remove(&c->in_sess);
	c->sess = NULL;
	if (s->dead)
		return; /* bs_close() is closing everything and frees s */
	if (!s->conns.count) {
		s->t_idle = util_mono_ms();
		if (B->cfg.console_linger_s == 0 || B->stopping) {
			bs_close(s, BS_CLOSE_NORMAL, "last console closed");
			return;
		}
		log_info("session %s: last console of vm %s left; upstream kept for %d s", s->sid,
		         s->vm, B->cfg.console_linger_s);
	}
	/* a paused upstream may have been waiting for this (slow) browser only */
	up_maybe_resume(s);
}

void bs_close_browser(struct bconn *c, int code, const char *reason)
{
	bc_close(c, code, reason, 0);
	bs_detach(c);
}

void bs_close(struct bsession *s, int code, const char *reason)
{
	if (s->dead)
		return;
	log_info("session %s: console session of vm %s closed: %d %s (%d browser%s, %llu bytes "
	         "down, %llu up)",
	         s->sid, s->vm, code, reason, (int)s->conns.count, s->conns.count == 1 ? "" : "s",
	         (unsigned long long)s->bytes_down, (unsigned long long)s->bytes_up);
	s->dead = 1;
	/* flush output already received, then close with the reason */
	while (lws_dll2_get_head(&s->conns)) {
		struct bconn *c = conn_of(lws_dll2_get_head(&s->conns));
		bc_close(c, code, reason, 1);
		bs_detach(c);
	}
	if (s->up) {
		s->up_state = UP_CLOSING;
		s->up_ops->close(s->up, B->stopping);
	} else {
		bs_free(s);
	}
}

void bs_close_all(int code, const char *reason)
{
	for (struct lws_dll2 *d = lws_dll2_get_head(&B->sessions), *d1; d; d = d1) {
		d1 = d->next;
		bs_close(sess_of(d), code, reason);
	}
}

void bs_ended(const char *sid)
{
	/* every machine's console of the session */
	for (struct lws_dll2 *d = lws_dll2_get_head(&B->sessions), *d1; d; d = d1) {
		d1 = d->next;
		struct bsession *s = sess_of(d);
		if (!s->dead && strcmp(s->sid, sid) == 0)
			bs_close(s, BS_CLOSE_ENDED, "session ended");
	}
}

/* ------------------------------------------------------- upstream events */

static void up_opened(void *owner)
{
	struct bsession *s = owner;

	s->up_state = UP_OPEN;
	log_info("session %s: upstream console open (vm %s)", s->sid, s->vm);
	for (struct lws_dll2 *d = lws_dll2_get_head(&s->conns), *d1; d; d = d1) {
		d1 = d->next;
		struct bconn *c = conn_of(d);
		if (bc_send_status(c, "open") < 0)
			bs_close_browser(c, BS_CLOSE_INTERNAL, "out of memory");
	}
	if (s->dead || !s->up)
		return; /* the last browser left above and closed the session */
	/* the guest printed its prompt before anyone listened: ask for a fresh one
	 * (a bare CR, as a user pressing Enter on virtctl console), once per session
	 * object, only when nothing was typed yet */
	if (!s->woke && !s->up_ops->queued(s->up) && !s->ring.len) {
		s->woke = 1;
		s->up_ops->write(s->up, "\r", 1);
	}
}

static void up_data(void *owner, const void *p, size_t n)
{
	struct bsession *s = owner;
	int high = 0;

	s->bytes_down += n;
	B->st.bytes_down += n;
	ring_put(&s->ring, p, n);
	for (struct lws_dll2 *d = lws_dll2_get_head(&s->conns), *d1; d; d = d1) {
		d1 = d->next;
		struct bconn *c = conn_of(d);
		int rc = bc_send(c, p, n);
		if (rc < 0)
			bs_close_browser(c, BS_CLOSE_INTERNAL, "out of memory");
		else if (rc > 0)
			high = 1;
	}
	/* a browser above the high-water mark: stop reading the console (from the
	 * upstream's next writeable, see upstream.h; overshoot: one read) */
	if (high && s->up)
		s->up_ops->rx(s->up, 0);
}

static void up_drained(void *owner, size_t queued)
{
	struct bsession *s = owner;
	if (queued >= BS_UP_LOW)
		return;
	for (struct lws_dll2 *d = lws_dll2_get_head(&s->conns); d; d = d->next) {
		bc_rx(conn_of(d), 1);
	}
}

static void up_closed(void *owner, const char *why)
{
	struct bsession *s = owner;
	char reason[120];

	s->up = NULL;
	s->up_state = UP_NONE;
	if (s->dead) {
		if (!s->conns.count)
			bs_free(s);
		return;
	}
	B->st.upstream_failures++;
	snprintf(reason, sizeof reason, "upstream console failed: %s", why);
	bs_close(s, BS_CLOSE_UPSTREAM, reason);
}

/* ------------------------------------------------------- browser events */

void bs_browser_drained(struct bconn *c)
{
	if (c->sess)
		up_maybe_resume(c->sess);
}

void bs_browser_input(struct bconn *c, const void *p, size_t n)
{
	struct bsession *s = c->sess;
	if (c->role == TICKET_VIEW) {
		/* a teacher watching: every input byte is dropped here, before
		 * anything reaches the console */
		B->st.view_dropped += n;
		return;
	}
	if (!s || s->dead || !s->up)
		return;
	if (s->up_ops->write(s->up, p, n) < 0) {
		bs_close_browser(c, BS_CLOSE_INTERNAL, "out of memory");
		return;
	}
	s->bytes_up += n;
	B->st.bytes_up += n;
	int64_t now = util_mono_ms();
	if (n && (!s->t_activity || now - s->t_activity >= BS_ACTIVITY_MS)) {
		/* the session's other consoles (its other machines) count as recorded too */
		for (struct lws_dll2 *d = lws_dll2_get_head(&B->sessions); d; d = d->next)
			if (strcmp(sess_of(d)->sid, s->sid) == 0)
				sess_of(d)->t_activity = now;
		if (db_activity(s->sid) < 0)
			s->t_activity = 0; /* out of memory: the next byte tries again */
	}
	if (s->up_ops->queued(s->up) > BS_UP_HIGH)
		bc_rx(c, 0); /* from its next writeable, see upstream.h */
}

void bs_browser_control(struct bconn *c, const void *p, size_t n)
{
	struct bsession *s = c->sess;
	int cols, rows;
	if (c->role == TICKET_VIEW)
		return; /* a watcher does not resize the student's terminal */
	if (!s || s->dead || !s->up || !s->up_ops->resize)
		return; /* a serial console has no window size */
	/* the last tab to say its size sets it (tabs share one terminal) */
	if (control_resize(p, n, &cols, &rows) && s->up_ops->resize(s->up, cols, rows) < 0)
		bs_close_browser(c, BS_CLOSE_INTERNAL, "out of memory");
}

/* ------------------------------------------------------------------ timers */

void bs_tick(int64_t now)
{
	for (struct lws_dll2 *d = lws_dll2_get_head(&B->sessions), *d1; d; d = d1) {
		d1 = d->next;
		struct bsession *s = sess_of(d);
		if (s->dead)
			continue;
		if (s->up_state == UP_CONNECTING &&
		    now - s->t_open_start > BS_UP_TIMEOUT_S * 1000) {
			B->st.upstream_failures++;
			bs_close(s, BS_CLOSE_UPSTREAM,
			         "upstream console failed: handshake timeout");
		} else if (!s->conns.count && s->t_idle &&
		           now - s->t_idle > (int64_t)B->cfg.console_linger_s * 1000) {
			bs_close(s, BS_CLOSE_NORMAL, "idle: no console for console_linger_s");
		}
	}
}

static int sid_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* The session ids of the live consoles, each once (a session of several
 * machines has a console per machine), sorted, in *out (malloc'd; NULL when
 * none). The count, or -1 when out of memory. */
static long live_sids(char (**out)[37])
{
	size_t n = 0, k = 0;
	*out = NULL;
	for (struct lws_dll2 *d = lws_dll2_get_head(&B->sessions); d; d = d->next) {
		n += !sess_of(d)->dead;
	}
	if (!n)
		return 0;
	char(*sids)[37] = malloc(n * sizeof *sids);
	if (!sids)
		return -1;
	for (struct lws_dll2 *d = lws_dll2_get_head(&B->sessions); d; d = d->next) {
		const struct bsession *s = sess_of(d);
		if (!s->dead)
			memcpy(sids[k++], s->sid, 37);
	}
	qsort(sids, k, sizeof *sids, sid_cmp);
	n = 0;
	for (size_t i = 0; i < k; i++)
		if (!n || strcmp(sids[i], sids[n - 1]) != 0)
			memcpy(sids[n++], sids[i], 37);
	*out = sids;
	return (long)n;
}

long bs_count_sessions(void)
{
	char(*sids)[37];
	long n = live_sids(&sids);
	free(sids);
	return n;
}

int bs_recheck(void)
{
	char(*sids)[37];
	long n = live_sids(&sids);
	if (n <= 0)
		return (int)n;
	int rc = db_recheck(sids, (size_t)n);
	free(sids);
	return rc;
}
