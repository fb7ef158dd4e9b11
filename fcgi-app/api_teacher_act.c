/* api_teacher_act.c - the teacher's actions (issue #29): a console ticket
 * to watch or take over, extend, reset, end. Each answers 404 outside the
 * lessons the caller teaches (teacher_session, api_teacher.c) and is a row
 * of teacher_audit written before or with the change (teacher_audit). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "jsonx.h"
#include "log.h"
#include "pump.h"
#include "session.h"
#include "session_change.h"
#include "start.h"
#include "teacher.h"
#include "ticket.h"

/* ------------------------------------------------------------ actions */

enum hres api_teacher_ticket(struct req *r)
{
	struct labctx *x = r->x;
	const struct cfg *c = x->cfg;
	struct session s;
	enum hres h;
	if (teacher_session(r, &s, &h) < 0)
		return h;
	const cJSON *mode = cJSON_GetObjectItemCaseSensitive(r->json, "mode");
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(r->json, "machine");
	enum ticket_role role = TICKET_OWNER;
	if (cJSON_IsString(mode) && strcmp(mode->valuestring, "view") == 0)
		role = TICKET_VIEW;
	else if (cJSON_IsString(mode) && strcmp(mode->valuestring, "control") == 0)
		role = TICKET_CONTROL;
	if (role == TICKET_OWNER || (m && !cJSON_IsNull(m) && !cJSON_IsString(m))) {
		session_free(&s);
		resp_error(
		    r, E_BAD_REQUEST,
		    "expected {\"machine\": NAME or null, \"mode\": \"view\" | \"control\"}");
		return H_DONE;
	}
	if (session_advance(x, &s) < 0) {
		session_free(&s);
		return api_db_error(r);
	}
	if (s.state != SESSION_READY || !s.nvms) {
		resp_error(r, E_NOT_READY, "the lab is %s, not ready: no console yet",
		           session_state_str(s.state));
		session_free(&s);
		return H_DONE;
	}
	const struct session_vm *vm =
	    session_vm_find(&s, cJSON_IsString(m) ? m->valuestring : NULL);
	if (!vm) {
		session_free(&s);
		resp_error(r, E_NOT_FOUND, "this session has no machine \"%.64s\"",
		           cJSON_IsString(m) ? m->valuestring : "");
		return H_DONE;
	}
	cJSON *d = jx_obj();
	jx_add_str(d, "machine", vm->machine ? vm->machine : vm->name);
	if (teacher_audit(r, role == TICKET_VIEW ? "watch" : "take_over", &s, d) < 0) {
		session_free(&s);
		return api_db_error(r);
	}
	char *t = ticket_make_role(c->ticket_key, c->ticket_key_len, s.id, r->user, vm->name,
	                           util_epoch_s() + c->ticket_ttl_s, role);
	if (!t) {
		session_free(&s);
		resp_error(r, E_INTERNAL, "could not sign a console ticket");
		return H_DONE;
	}
	char *url = xasprintf("%s%s%s?ticket=%s", c->base_path, c->console_path, s.id, t);
	cJSON *o = jx_obj();
	jx_add_str(o, "ticket", t);
	jx_add_str(o, "url", url);
	jx_add_str(o, "mode", ticket_role_str(role));
	if (vm->machine)
		jx_add_str(o, "machine", vm->machine);
	jx_add_num(o, "expires_in", c->ticket_ttl_s);
	util_free_secret(url);
	util_free_secret(t);
	session_free(&s);
	resp_json(r, 200, o);
	return H_DONE;
}

enum hres api_teacher_extend(struct req *r)
{
	struct labctx *x = r->x;
	struct session s;
	enum hres h;
	if (teacher_session(r, &s, &h) < 0)
		return h;
	const cJSON *mins = cJSON_GetObjectItemCaseSensitive(r->json, "minutes");
	int max = x->cfg->teacher_extend_max_minutes;
	if (!cJSON_IsNumber(mins) || mins->valuedouble != (double)(int)mins->valuedouble ||
	    mins->valueint < 1 || mins->valueint > max) {
		session_free(&s);
		resp_error(r, E_BAD_REQUEST, "\"minutes\" must be an integer in 1..%d", max);
		return H_DONE;
	}
	/* the teacher's own bounded extension: the line does not matter here
	 * (a student's extend may be refused with line_waiting, issue #28) */
	if (db_begin(&x->db) < 0) {
		session_free(&s);
		return api_db_error(r);
	}
	int moved = session_extend_by(x, s.id, mins->valueint);
	int bad = moved < 0;
	if (moved > 0) {
		cJSON *d = jx_obj();
		jx_add_num(d, "minutes", mins->valueint);
		bad = teacher_audit(r, "extend", &s, d) < 0;
	}
	if (bad || db_commit(&x->db) < 0) {
		db_rollback(&x->db);
		session_free(&s);
		return api_db_error(r);
	}
	if (!moved) {
		resp_error(r, E_NOT_READY, "the lab is %s: nothing to extend",
		           session_state_str(s.state));
		session_free(&s);
		return H_DONE;
	}
	if (session_reload(x, &s) < 0) {
		session_free(&s);
		return api_db_error(r);
	}
	resp_json(r, 200, session_json(&s));
	session_free(&s);
	return H_DONE;
}

enum hres api_teacher_reset(struct req *r)
{
	struct labctx *x = r->x;
	struct session s;
	enum hres h;
	if (teacher_session(r, &s, &h) < 0)
		return h;
	if (!session_active(&s)) {
		resp_error(r, E_NOT_READY, "the lab is %s: nothing to reset",
		           session_state_str(s.state));
		session_free(&s);
		return H_DONE;
	}
	const struct lesson *l = lessons_find(x->lessons, s.lesson);
	if (!l) {
		session_free(&s);
		resp_error(r, E_LESSON_GONE, "this lesson is no longer offered");
		return H_DONE;
	}
	struct start st;
	memset(&st, 0, sizeof st);
	st.x = x;
	st.user = s.user;
	st.pressed = r->t_wall;
	st.lesson = l;
	st.reset_id = s.id;
	st.reset_by = r->user;
	enum step rc = start_run(&st);
	if (rc != STEP_OK) {
		if (rc == STEP_DB) {
			h = api_db_error(r);
		} else {
			if (st.retry_after_s > 0)
				resp_header(r, "Retry-After", "%ld", st.retry_after_s);
			resp_error_json(r, st.err, st.answer);
			st.answer = NULL;
		}
		start_done(&st);
		session_free(&s);
		return h;
	}
	char sid[37];
	snprintf(sid, sizeof sid, "%s", st.sid);
	start_done(&st);
	start_reset_cleanup(x, s.id);
	log_info("teacher %s: reset session %s of %s: new session %s in its seat", r->user, s.id,
	         s.user, sid);
	session_free(&s);
	return api_created_session(r, sid);
}

enum hres api_teacher_end(struct req *r)
{
	struct labctx *x = r->x;
	struct session s;
	enum hres h;
	if (teacher_session(r, &s, &h) < 0)
		return h;
	if (session_active(&s)) {
		if (teacher_audit(r, "end", &s, NULL) < 0) {
			session_free(&s);
			return api_db_error(r);
		}
		if (session_finish(x, &s, SESSION_ENDED, "teacher", NULL) < 0) {
			session_free(&s);
			resp_error(r, E_DB_UNAVAILABLE, "the database is unavailable: try again");
			return H_DONE;
		}
		queue_pump(x); /* a seat freed: the line's head may take it */
	} else {
		session_delete_objects(x, &s);
	}
	resp_json(r, 200, session_json(&s));
	session_free(&s);
	return H_DONE;
}
