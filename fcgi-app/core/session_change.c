/* session_change.c - every write of a session's state or stage (see
 * session_change.h). */
#include "session_change.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "provision.h"
#include "runtime.h"
#include "util.h"

#define STARTING session_state_str(SESSION_STARTING)
#define READY    session_state_str(SESSION_READY)

/* ------------------------------------------------------------ new rows */

int session_create(struct labctx *x, const struct lab_plan *p, const char *user, double pressed)
{
	const struct lesson *l = p->lesson;
	char at[32], minutes[16], rto[16], yto[16];
	snprintf(at, sizeof at, "%.6f", pressed);
	snprintf(minutes, sizeof minutes, "%d", l->minutes);
	snprintf(rto, sizeof rto, "%d", l->running_timeout_s);
	snprintf(yto, sizeof yto, "%d", l->ready_timeout_s);
	char idle[16], ext[16], next[16];
	snprintf(idle, sizeof idle, "%d", lab_idle_s(x->cfg, l));
	snprintf(ext, sizeof ext, "%d", l->extend_s);
	snprintf(next, sizeof next, "%d", l->max_extensions);
	const char *ps[17] = {p->sid,
	                      user,
	                      l->id,
	                      p->rt->name,
	                      x->cfg->environment,
	                      p->rt->has_disk ? lesson_disk_str(p->vms[0].disk) : NULL,
	                      p->vms[0].fallback,
	                      rto,
	                      yto,
	                      at,
	                      minutes,
	                      p->multi ? p->network : NULL,
	                      STARTING,
	                      session_stage_str(STAGE_SUBMITTED),
	                      idle,
	                      ext,
	                      next};
	if (db_cmd(
	        &x->db,
	        "INSERT INTO sessions (id, user_name, lesson, runtime, environment, state, stage, "
	        "disk_source, disk_fallback_reason, running_timeout_s, ready_timeout_s, "
	        "created_at, expires_at, network, idle_s, extend_s, extensions_left) "
	        "VALUES ($1::uuid, $2, $3, $4, $5, $13, $14, "
	        "$6, $7, $8::int, $9::int, to_timestamp($10::float8), "
	        "to_timestamp($10::float8) + make_interval(mins => $11::int), $12, $15::int, "
	        "$16::int, $17::int)",
	        17, ps) < 0)
		return -1;
	for (size_t i = 0; i < p->n; i++) {
		const struct lab_machine *v = &p->vms[i];
		char ord[16];
		snprintf(ord, sizeof ord, "%d", (int)i);
		const char *pv[9] = {p->sid,
		                     v->names.vm,
		                     v->secret,
		                     v->token,
		                     v->names.machine[0] ? v->names.machine : NULL,
		                     p->rt->has_disk ? lesson_disk_str(v->disk) : NULL,
		                     v->fallback,
		                     p->multi ? v->net.address : NULL,
		                     ord};
		if (db_cmd(
		        &x->db,
		        "INSERT INTO session_vms (session_id, vm_name, secret_name, agent_token, "
		        "machine, disk_source, disk_fallback_reason, net_ip, ord) "
		        "VALUES ($1::uuid, $2, $3, $4, $5, $6, $7, $8, $9::int)",
		        9, pv) < 0)
			return -1;
	}
	return 0;
}

int session_mark_submitted(struct labctx *x, const char *sid)
{
	const char *p[1] = {sid};
	return db_cmd(&x->db,
	              "UPDATE sessions SET submitted_at = clock_timestamp() WHERE id = $1::uuid", 1,
	              p);
}

int session_create_claimed(struct labctx *x, const char *sid, const char *user,
                           const struct lesson *l, double pressed, const struct claimed_vm *v)
{
	char at[32], minutes[16], rto[16], yto[16];
	snprintf(at, sizeof at, "%.6f", pressed);
	snprintf(minutes, sizeof minutes, "%d", l->minutes);
	snprintf(rto, sizeof rto, "%d", l->running_timeout_s);
	snprintf(yto, sizeof yto, "%d", l->ready_timeout_s);
	const char *ready = session_stage_str(STAGE_READY);
	char idle[16], ext[16], next[16];
	snprintf(idle, sizeof idle, "%d", lab_idle_s(x->cfg, l));
	snprintf(ext, sizeof ext, "%d", l->extend_s);
	snprintf(next, sizeof next, "%d", l->max_extensions);
	const char *ps[17] = {
	    sid, user,    l->id, x->cfg->environment,          v->disk, v->fallback, rto,  yto,
	    at,  minutes, v->vm, runtime_of(l->runtime)->name, READY,   ready,       idle, ext,
	    next};
	const char *pv[8] = {sid, v->vm, v->secret, v->token, v->ip, v->disk, v->fallback, ready};
	if (db_cmd(&x->db,
	           "INSERT INTO sessions (id, user_name, lesson, runtime, environment, state, "
	           "stage, disk_source, disk_fallback_reason, running_timeout_s, "
	           "ready_timeout_s, created_at, submitted_at, running_at, ready_at, expires_at, "
	           "pool_vm, last_activity_at, idle_s, extend_s, extensions_left) "
	           "VALUES ($1::uuid, $2, $3, $12, $4, $13, $14, $5, $6, "
	           "$7::int, $8::int, to_timestamp($9::float8), clock_timestamp(), "
	           "clock_timestamp(), clock_timestamp(), "
	           "clock_timestamp() + make_interval(mins => $10::int), $11, clock_timestamp(), "
	           "$15::int, $16::int, $17::int)",
	           17, ps) < 0 ||
	    db_cmd(&x->db,
	           "INSERT INTO session_vms (session_id, vm_name, secret_name, agent_token, ip, "
	           "stage, running_at, ready_at, disk_source, disk_fallback_reason) "
	           "VALUES ($1::uuid, $2, $3, $4, $5, $8, clock_timestamp(), "
	           "clock_timestamp(), $6, $7)",
	           8, pv) < 0)
		return -1;
	return 0;
}

/* ------------------------------------------------------------ stages */

void session_set_stage(struct labctx *x, struct session *s, enum session_stage stage)
{
	if (s->stage == stage)
		return;
	assert(s->state == SESSION_STARTING);
	const char *p[3] = {s->id, session_stage_str(stage), STARTING};
	db_cmd(&x->db,
	       "UPDATE sessions SET stage = $2 "
	       "WHERE id = $1::uuid AND state = $3 AND running_at IS NULL",
	       3, p);
	s->stage = stage;
}

void session_set_vm_stage(struct labctx *x, struct session *s, struct session_vm *vm,
                          enum session_stage stage)
{
	if (vm->stage == (int)stage)
		return;
	assert(s->state == SESSION_STARTING);
	const char *p[3] = {s->id, vm->name, session_stage_str(stage)};
	db_cmd(&x->db,
	       "UPDATE session_vms SET stage = $3 "
	       "WHERE session_id = $1::uuid AND vm_name = $2 AND running_at IS NULL",
	       3, p);
	vm->stage = stage;
}

int session_vm_mark_running(struct labctx *x, struct session *s, struct session_vm *vm,
                            const char *ip, const char *uid)
{
	assert(s->state == SESSION_STARTING && !vm->running_at);
	const char *p[5] = {s->id, vm->name, ip, uid, session_stage_str(STAGE_SETTING_UP)};
	if (db_cmd(&x->db,
	           "UPDATE session_vms SET running_at = clock_timestamp(), "
	           "stage = $5, ip = coalesce($3, ip), vmi_uid = $4 "
	           "WHERE session_id = $1::uuid AND vm_name = $2 AND running_at IS NULL",
	           5, p) < 0)
		return -1;
	/* what the row says now, for a failure in this same look */
	vm->stage = STAGE_SETTING_UP;
	if (ip && !vm->ip)
		vm->ip = xstrdup(ip);
	if (uid) {
		free(vm->vmi_uid);
		vm->vmi_uid = xstrdup(uid);
	}
	return 0;
}

int session_vm_mark_ready(struct labctx *x, struct session *s, struct session_vm *vm)
{
	assert(s->state == SESSION_STARTING && !vm->ready_at);
	const char *p[3] = {s->id, vm->name, session_stage_str(STAGE_READY)};
	return db_cmd(&x->db,
	              "UPDATE session_vms SET ready_at = clock_timestamp(), stage = $3 "
	              "WHERE session_id = $1::uuid AND vm_name = $2 AND ready_at IS NULL",
	              3, p);
}

int session_mark_running(struct labctx *x, struct session *s)
{
	assert(s->state == SESSION_STARTING && !s->running_at);
	const char *p[3] = {s->id, session_stage_str(STAGE_SETTING_UP), STARTING};
	if (db_cmd(&x->db,
	           "UPDATE sessions SET running_at = clock_timestamp(), stage = $2 "
	           "WHERE id = $1::uuid AND state = $3 AND running_at IS NULL",
	           3, p) < 0)
		return -1;
	return session_reload(x, s);
}

int session_mark_ready(struct labctx *x, struct session *s)
{
	assert(s->state == SESSION_STARTING && !s->ready_at);
	const char *p[4] = {s->id, READY, session_stage_str(STAGE_READY), STARTING};
	if (db_cmd(&x->db,
	           "UPDATE sessions SET running_at = coalesce(running_at, clock_timestamp()), "
	           "ready_at = clock_timestamp(), state = $2, stage = $3, "
	           /* idle time counts from ready too (a start is not idleness) */
	           "last_activity_at = clock_timestamp(), "
	           /* the lesson's minutes count from the moment the lab is usable */
	           "expires_at = clock_timestamp() + (expires_at - created_at) "
	           "WHERE id = $1::uuid AND state = $4 AND ready_at IS NULL",
	           4, p) < 0)
		return -1;
	return session_reload(x, s);
}

/* ------------------------------------------------------------ addresses */

void session_vm_set_address(struct labctx *x, const struct session *s, struct session_vm *vm,
                            const char *ip, const char *uid)
{
	const char *p[4] = {s->id, vm->name, ip, uid};
	db_cmd(&x->db,
	       "UPDATE session_vms SET ip = $3, vmi_uid = $4 "
	       "WHERE session_id = $1::uuid AND vm_name = $2",
	       4, p);
	if (vm->ip != ip) {
		free(vm->ip);
		vm->ip = ip ? xstrdup(ip) : NULL;
	}
	if (vm->vmi_uid != uid) {
		free(vm->vmi_uid);
		vm->vmi_uid = uid ? xstrdup(uid) : NULL;
	}
}

void session_vm_forget(struct labctx *x, const struct session *s, struct session_vm *vm)
{
	const char *p[2] = {s->id, vm->name};
	db_cmd(&x->db,
	       "UPDATE session_vms SET vmi_uid = NULL WHERE session_id = $1::uuid AND vm_name = $2",
	       2, p);
	free(vm->vmi_uid);
	vm->vmi_uid = NULL;
}

/* ------------------------------------------------------------ the end */

int session_fail(struct labctx *x, struct session *s, const struct session_vm *vm, const char *fmt,
                 ...)
{
	va_list ap;
	char *what, *msg;
	/* the session's stage is where it failed, even when the failure came in
	 * the same pass as the step that led there (a setup that fails at once) */
	if (vm && vm->stage > (int)s->stage && vm->stage < (int)STAGE_READY)
		session_set_stage(x, s, (enum session_stage)vm->stage);
	/* formatted whole (the agent's log tail, a Pod's message: any bytes);
	 * session_finish() makes it valid UTF-8 and cuts it on a character */
	va_start(ap, fmt);
	if (vasprintf(&what, fmt, ap) < 0)
		what = NULL;
	va_end(ap);
	if (vm && vm->machine)
		msg = xasprintf("machine %s: %s: %s", vm->machine,
		                session_stage_str((enum session_stage)vm->stage),
		                what ? what : "failed");
	else
		msg = xasprintf("%s: %s",
		                session_stage_str(vm && vm->stage > (int)s->stage
		                                      ? (enum session_stage)vm->stage
		                                      : s->stage),
		                what ? what : "failed");
	free(what);
	int rc = session_finish(x, s, SESSION_FAILED, "failed", msg);
	free(msg);
	return rc;
}

int session_mark_ended(struct labctx *x, const char *sid, const char *end_reason)
{
	const char *p[5] = {sid, session_state_str(SESSION_ENDED), end_reason, STARTING, READY};
	PGresult *r = db_exec(&x->db,
	                      "UPDATE sessions SET state = $2, end_reason = $3, "
	                      "ended_at = clock_timestamp() "
	                      "WHERE id = $1::uuid AND state IN ($4, $5) RETURNING 1",
	                      5, p);
	if (!r)
		return -1;
	int n = PQntuples(r) > 0;
	PQclear(r);
	return n;
}

int session_extend_by(struct labctx *x, const char *sid, int minutes)
{
	char m[16];
	snprintf(m, sizeof m, "%d", minutes);
	const char *p[4] = {sid, m, STARTING, READY};
	PGresult *r = db_exec(&x->db,
	                      "UPDATE sessions SET expires_at = expires_at + "
	                      "make_interval(mins => $2::int) "
	                      "WHERE id = $1::uuid AND state IN ($3, $4) RETURNING 1",
	                      4, p);
	if (!r)
		return -1;
	int n = PQntuples(r) > 0;
	PQclear(r);
	return n;
}

/* What a row that refused its error keeps instead (ASCII: it always fits). */
#define ERROR_NOT_STORED "the error message could not be stored; see labvm's log"

int session_finish(struct labctx *x, struct session *s, enum session_state state,
                   const char *end_reason, const char *error)
{
	static const char sql[] = "UPDATE sessions SET state = $2, end_reason = $3, "
	                          "error = COALESCE($4, error), ended_at = clock_timestamp() "
	                          "WHERE id = $1::uuid AND state IN ($5, $6) RETURNING 1";
	assert(state == SESSION_ENDED || state == SESSION_FAILED);
	/* a guest's or a Pod's text: valid UTF-8, cut on a character */
	char *clean = error ? utf8_clean_dup(error, strlen(error), SESSION_ERROR_MAX) : NULL;
	const char *p[6] = {s->id, session_state_str(state), end_reason, clean, STARTING, READY};
	PGresult *r = db_exec(&x->db, sql, 6, p);
	if (!r && clean && !x->db.broken) {
		/* the row refused the message: the session still ends, with a
		 * message that cannot be refused (else every look would try again,
		 * and its objects would stay) */
		log_warn("session %s: storing its error failed (%s); storing a fixed one", s->id,
		         x->db.msg);
		p[3] = ERROR_NOT_STORED;
		r = db_exec(&x->db, sql, 6, p);
	}
	if (r && PQntuples(r) > 0)
		log_info("session %s (%s, %s): %s (%s)%s%s", s->id, s->user, s->lesson, p[1],
		         end_reason, p[3] ? ": " : "", p[3] ? p[3] : "");
	else if (!r)
		log_warn("session %s: marking it %s failed (%s); deleting its objects anyway",
		         s->id, p[1], x->db.msg);
	free(clean);
	/* whatever the row says: a session being ended keeps nothing in the cluster */
	session_delete_objects(x, s);
	if (!r)
		return -1;
	PQclear(r);
	return session_reload(x, s);
}

/* ------------------------------------------------------------ activity */

int session_touch(struct labctx *x, const char *id)
{
	const char *p[2] = {id, READY};
	return db_cmd(&x->db,
	              "UPDATE sessions SET last_activity_at = clock_timestamp() "
	              "WHERE id = $1::uuid AND state = $2",
	              2, p) < 0
	           ? -1
	           : 0;
}

int session_extend(struct labctx *x, struct session *s)
{
	const char *p[2] = {s->id, READY};
	PGresult *r = db_exec(&x->db,
	                      "UPDATE sessions SET expires_at = expires_at + "
	                      "make_interval(secs => extend_s), "
	                      "extensions_left = extensions_left - 1, "
	                      "last_activity_at = clock_timestamp() "
	                      "WHERE id = $1::uuid AND state = $2 AND extensions_left > 0 "
	                      "AND extend_s > 0 RETURNING 1",
	                      2, p);
	if (!r)
		return -1;
	int moved = PQntuples(r) > 0;
	PQclear(r);
	if (session_reload(x, s) < 0)
		return -1;
	return moved;
}
