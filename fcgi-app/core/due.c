/* due.c - the pure rules of a session's time (session.h): whether it is
 * open, what is due (session_due: the expiry, the deadlines of a start, an
 * idle end) and which warning the student sees (session_warning). No I/O:
 * the reaper, the API, the event stream and the metrics ask the same
 * functions (tests/unit/test_session_due.c). */
#include "session.h"

int session_active(const struct session *s)
{
	return s->id && (s->state == SESSION_STARTING || s->state == SESSION_READY);
}

double session_idle_ends(const struct session *s)
{
	if (!s->id || s->state != SESSION_READY || s->idle_s <= 0 || s->t_activity <= 0)
		return 0;
	return s->t_activity + s->idle_s;
}

struct session_due session_due(const struct session *s, double now)
{
	struct session_due d = {DUE_NOTHING, 0, 0};
	if (!session_active(s))
		return d;
	double idle = session_idle_ends(s);
	int expired = s->state == SESSION_READY && s->t_expires > 0 && now >= s->t_expires;
	/* minutes count from ready (README): a starting session is bounded by
	 * its start deadlines, not by created_at + minutes */
	if (expired && !(idle > 0 && idle < s->t_expires)) {
		d.what = DUE_EXPIRE;
		d.deadline = s->t_expires;
	} else if (idle > 0 && now >= idle) {
		/* nobody typed, graded, asked for a console or said "I'm still
		 * here" for idle_s: the seat goes back to the line */
		d.what = DUE_IDLE;
		d.deadline = idle;
	} else if (s->state != SESSION_STARTING || s->ready_at) {
		/* ready: nothing until it expires */
	} else if (s->nvms == 0) {
		d.what = DUE_NO_VM;
	} else if (!s->running_at) {
		d.what = DUE_RUNNING;
		/* not submitted yet (a start in flight): no deadline runs */
		if (s->t_submitted > 0) {
			d.deadline = s->t_submitted + s->running_timeout_s;
			d.overdue = now > d.deadline;
		}
	} else {
		d.what = DUE_READY;
		d.deadline = s->t_running + s->ready_timeout_s;
		d.overdue = now > d.deadline;
	}
	return d;
}

const char *session_warning_kind_str(enum session_warning_kind k)
{
	return k == WARN_IDLE ? "idle" : k == WARN_EXPIRY ? "expiry" : "none";
}

/* The deadline a warning would be about: the earlier of the idle end and
 * the expiry (ready sessions only). */
static struct session_warning next_end(const struct session *s)
{
	struct session_warning w = {WARN_NONE, 0, 0};
	if (!s->id || s->state != SESSION_READY)
		return w;
	double idle = session_idle_ends(s);
	if (idle > 0 && (s->t_expires <= 0 || idle < s->t_expires)) {
		w.kind = WARN_IDLE;
		w.ends_at = idle;
	} else if (s->t_expires > 0) {
		w.kind = WARN_EXPIRY;
		w.ends_at = s->t_expires;
	}
	w.from = w.ends_at - (s->warn_s > 0 ? s->warn_s : 0);
	return w;
}

struct session_warning session_warning(const struct session *s, double now)
{
	struct session_warning w = next_end(s), none = {WARN_NONE, 0, 0};
	if (w.kind == WARN_NONE || s->warn_s <= 0 || now < w.from || now >= w.ends_at)
		return none;
	return w;
}

double session_warning_next(const struct session *s, double now)
{
	struct session_warning w = next_end(s);
	if (w.kind == WARN_NONE)
		return 0;
	if (now < w.from)
		return w.from;
	return w.ends_at > now ? w.ends_at : 0;
}
