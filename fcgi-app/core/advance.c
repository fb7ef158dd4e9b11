/* advance.c - moving a session on as session_due() (due.c) says: expiry
 * and a session without machines here, everything else by its runtime's
 * look (runtime.h advance). */
#include "runtime.h"
#include "session.h"
#include "session_change.h"

int session_advance(struct labctx *x, struct session *s)
{
	struct session_due d = session_due(s, s->t_now);
	switch (d.what) {
	case DUE_NOTHING:
		return 0;
	case DUE_EXPIRE:
		return session_finish(x, s, SESSION_ENDED, "expired", NULL);
	case DUE_IDLE:
		return session_finish(x, s, SESSION_ENDED, "idle", NULL);
	case DUE_NO_VM:
		return session_fail(x, s, NULL, "the session has no VM");
	case DUE_RUNNING:
	case DUE_READY:
		break;
	}
	return runtime_of(s->runtime)->advance(x, s, &d);
}
