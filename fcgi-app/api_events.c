/* api_events.c - GET /api/sessions/{id}/events: the session's stage changes
 * as a text/event-stream (see stream.h for where the stream lives).
 *
 *   id: <event id>            the session_events sequence number
 *   data: <session JSON>      as GET /api/sessions/{id} answers it
 *
 * Without Last-Event-ID the first event is the session now (id: its newest
 * event); with it, every event after that id, in order. The stream ends
 * after the first event whose state is ready, failed or ended (the final
 * event); a reconnect after the final event gets 204, which tells
 * EventSource to stop. A Last-Event-ID beyond the session's newest event
 * (another session's id, or made up) counts as its newest: the stream still
 * gets the final event, whatever id it was opened with.
 *
 * With ?until=end (issue #28) the stream goes on through ready: it carries
 * `event: warning` ({"kind": "idle"|"expiry", "ends_at", "remaining_s"})
 * idle_warning_s before an idle end or an expiry, and ends after the event
 * whose state is failed or ended (stream.h stream_adopt).
 *
 * Each user has stream_max_per_user streams at most, in all processes
 * together (stream_slot_take): one more is 429 too_many_streams with
 * Retry-After, and the page polls instead. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "jsonx.h"
#include "log.h"
#include "session.h"
#include "stream.h"

/* Last-Event-ID: the id of an event of ours (digits), or absent (-1). */
static int last_event_id(struct req *r, long long *out)
{
	const char *v = FCGX_GetParam("HTTP_LAST_EVENT_ID", r->fr->envp);
	*out = -1;
	if (!v || !*v)
		return 0;
	size_t n = strlen(v);
	if (n > 18)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (!isdigit((unsigned char)v[i]))
			return -1;
	*out = strtoll(v, NULL, 10);
	return 0;
}

static void write_head(struct req *r, int status)
{
	struct labctx *x = r->x;
	r->status = status;
	FCGX_FPrintF(r->fr->out,
	             "Status: %d %s\r\n"
	             "Content-Type: text/event-stream; charset=utf-8\r\n"
	             "Cache-Control: no-store\r\n"
	             "X-Content-Type-Options: nosniff\r\n"
	             /* nginx and friends: do not buffer this answer */
	             "X-Accel-Buffering: no\r\n"
	             "Server-Timing: db;dur=%.2f, kube;dur=%.2f, agent;dur=%.2f, app;dur=%.2f\r\n"
	             "\r\n",
	             status, status == 204 ? "No Content" : "OK", x->db.ms, x->kube.ms, x->agent.ms,
	             (util_mono_s() - r->t0) * 1000.0);
	if (status == 200)
		FCGX_PutS("retry: 2000\n\n", r->fr->out);
}

/* ?until=end: through ready to the end (issue #28) */
static int until_end(struct req *r)
{
	const char *q = FCGX_GetParam("QUERY_STRING", r->fr->envp);
	for (const char *p = q; p && *p;) {
		size_t n = strcspn(p, "&");
		if (n == 9 && strncmp(p, "until=end", 9) == 0)
			return 1;
		p += n;
		if (*p == '&')
			p++;
	}
	return 0;
}

enum hres api_session_events(struct req *r)
{
	long long after, last = 0;
	int through = until_end(r);
	struct session_event *ev = NULL, now_ev;
	size_t n = 0;

	if (last_event_id(r, &after) < 0) {
		resp_error(r, E_BAD_REQUEST, "Last-Event-ID must be an event id of this stream");
		return H_DONE;
	}
	if (!stream_has_room()) {
		resp_header(r, "Retry-After", "%d", 5);
		resp_error(r, E_STREAMS_FULL, "too many open event streams here: poll the session");
		return H_DONE;
	}
	/* whether the session is starting, as of the newest event this stream
	 * starts after: not as the router read it, before that newest event (an
	 * end committed in between left such a stream open for good, waiting for
	 * an event that had come already) */
	int starting = r->sess->state == SESSION_STARTING;
	/* ?until=end: open while active, as of that newest event too */
	int open = through ? session_active(r->sess) : starting;
	if (after >= 0) {
		int final;
		long long newest = session_last_event(r->x, r->sess->id, &final);
		if (newest < 0)
			return api_db_error(r);
		if (after >= newest) {
			after = newest; /* nothing of this session is after it: from now on */
			if (final >= 0)
				starting = !final;
			if (through && final == 1) {
				/* ready, failed or ended: which one, read after that event */
				struct session cur;
				int rc = session_load(r->x, r->sess->id, &cur);
				if (rc == SESSION_DBERR)
					return api_db_error(r);
				open = rc == SESSION_FOUND && session_active(&cur);
				session_free(&cur);
			} else if (!through) {
				open = starting;
			}
		}
		if (session_events_load(r->x, r->sess->id, after, 100, &ev, &n) < 0)
			return api_db_error(r);
		last = after;
	} else {
		/* the newest id first, then the session: a change in between is sent
		 * again as its own event (never lost) */
		last = session_last_event(r->x, r->sess->id, NULL);
		if (last < 0)
			return api_db_error(r);
		memset(&now_ev, 0, sizeof now_ev);
		int rc = session_load(r->x, r->sess->id, &now_ev.s);
		if (rc == SESSION_DBERR)
			return api_db_error(r);
		if (rc == SESSION_NONE) {
			resp_error(r, E_NOT_FOUND, "no such session");
			return H_DONE;
		}
		now_ev.seq = last;
		ev = malloc(sizeof *ev);
		if (!ev)
			abort();
		ev[0] = now_ev;
		n = 1;
	}
	/* stdin to its end: after it, anything readable is the client going away */
	while (FCGX_GetChar(r->fr->in) != EOF)
		;
	if (n == 0 && !open) {
		/* nothing after the final event */
		write_head(r, 204);
		session_events_free(ev, n);
		return H_DONE;
	}
	int slot = stream_slot_take(&r->x->db, r->user);
	if (slot < 0) {
		session_events_free(ev, n);
		if (slot == -2)
			return api_db_error(r);
		char m[160];
		snprintf(m, sizeof m,
		         "you have %d event streams open already, the most one user may: poll "
		         "the session, or close another tab",
		         r->x->cfg->stream_max_per_user);
		cJSON *e = error_json(E_TOO_MANY_STREAMS, m);
		jx_add_num(e, "retry_after_s", 5);
		resp_header(r, "Retry-After", "%d", 5);
		resp_error_json(r, E_TOO_MANY_STREAMS, e);
		return H_DONE;
	}
	write_head(r, 200);
	int final = 0;
	for (size_t i = 0; i < n && !final; i++) {
		char *t = stream_event_text(ev[i].seq, &ev[i].s);
		FCGX_PutS(t, r->fr->out);
		free(t);
		last = ev[i].seq;
		final = through ? !session_active(&ev[i].s) : ev[i].s.state != SESSION_STARTING;
	}
	session_events_free(ev, n);
	if (final || (n == 100 && after >= 0) || FCGX_FFlush(r->fr->out) != 0 ||
	    FCGX_GetError(r->fr->out)) {
		/* done (or more than one answer's worth behind: the client resumes;
		 * or the client is gone) */
		stream_slot_release(&r->x->db, r->user, slot);
		return H_DONE;
	}
	stream_adopt(r->fr, r->sess->id, last, starting, r->user, slot, through);
	r->adopted = 1;
	return H_DONE;
}
