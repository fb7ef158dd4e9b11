/* advance.c - what is due for a session (session_due, pure), and moving it
 * on: expiry and a session without machines here, everything else by its
 * runtime's look (runtime.h advance). */
#include "runtime.h"
#include "session.h"
#include "session_change.h"

struct session_due session_due(const struct session *s, double now)
{
	struct session_due d = {DUE_NOTHING, 0, 0};
	if (!session_active(s))
		return d;
	/* minutes count from ready (README): a starting session is bounded by
	 * its start deadlines, not by created_at + minutes */
	if (s->state == SESSION_READY && s->t_expires > 0 && now >= s->t_expires) {
		d.what = DUE_EXPIRE;
		d.deadline = s->t_expires;
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

int session_advance(struct labctx *x, struct session *s)
{
	struct session_due d = session_due(s, s->t_now);
	switch (d.what) {
	case DUE_NOTHING:
		return 0;
	case DUE_EXPIRE:
		return session_finish(x, s, SESSION_ENDED, "expired", NULL);
	case DUE_NO_VM:
		return session_fail(x, s, NULL, "the session has no VM");
	case DUE_RUNNING:
	case DUE_READY:
		break;
	}
	return runtime_of(s->runtime)->advance(x, s, &d);
}
