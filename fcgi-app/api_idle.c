/* api_idle.c - issue #28, idle labs give their seat back:
 *
 *   POST /api/sessions/{id}/activity   "I'm still here": 200 session (its
 *        idle end postponed); 409 not_ready when the lab is not ready
 *   POST /api/sessions/{id}/extend     200 session with expires_at moved by
 *        extend_minutes; 409 line_waiting while anyone waits in the line for
 *        the session's seat pool (the line is never starved by extensions);
 *        409 no_extensions_left
 *
 * Both are activity. The idle end itself is session_due's (advance.c): the
 * router advances the session before these run, so a lab already past its
 * idle end has ended and answers 409 not_ready. */
#include "api.h"
#include "jsonx.h"
#include "queue.h"
#include "runtime.h"
#include "session.h"
#include "session_change.h"

enum hres api_session_activity(struct req *r)
{
	struct session *s = r->sess; /* ready (NEED_READY) */
	if (session_touch(r->x, s->id) < 0 || session_reload(r->x, s) < 0)
		return api_db_error(r);
	resp_json(r, 200, session_json(s));
	return H_DONE;
}

enum hres api_session_extend(struct req *r)
{
	struct labctx *x = r->x;
	struct session *s = r->sess; /* ready (NEED_READY) */
	if (s->extensions_left <= 0 || s->extend_s <= 0) {
		cJSON *e = error_json(E_NO_EXTENSIONS_LEFT,
		                      "this lab has been extended as often as its lesson allows");
		jx_add_num(e, "extensions_left", 0);
		resp_error_json(r, E_NO_EXTENSIONS_LEFT, e);
		return H_DONE;
	}
	long waiting = queue_seats_ahead(x, runtime_of(s->runtime)->name, NULL);
	if (waiting < 0)
		return api_db_error(r);
	if (waiting > 0) {
		cJSON *e = error_json(E_LINE_WAITING,
		                      "other students are waiting for a lab: this one cannot be "
		                      "extended now");
		jx_add_num(e, "waiting", (double)waiting);
		resp_error_json(r, E_LINE_WAITING, e);
		return H_DONE;
	}
	int rc = session_extend(x, s);
	if (rc < 0)
		return api_db_error(r);
	if (rc == 0) {
		/* a concurrent click took the last one, or the lab ended meanwhile */
		if (!session_active(s)) {
			resp_error(r, E_NOT_READY, "the lab is %s, not ready: nothing to extend",
			           session_state_str(s->state));
			return H_DONE;
		}
		resp_error(r, E_NO_EXTENSIONS_LEFT,
		           "this lab has been extended as often as its lesson allows");
		return H_DONE;
	}
	resp_json(r, 200, session_json(s));
	return H_DONE;
}
