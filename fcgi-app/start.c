/* start.c - starting a lab session: the admission and the submission (see
 * start.h). */
#include "start.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jsonx.h"
#include "locks.h"
#include "log.h"
#include "nodefit.h"
#include "pool.h"
#include "queue.h"
#include "session_change.h"

static enum step refuse(struct start *st, enum api_err e, const char *message)
{
	cJSON_Delete(st->answer);
	st->err = e;
	st->answer = error_json(e, message);
	return STEP_REFUSED;
}

/* A lock not granted within lock_timeout: 503 capacity_busy + Retry-After;
 * any other database failure is the usual database trouble. */
static enum step lock_busy(struct start *st, const char *why)
{
	const struct cfg *c = st->x->cfg;
	if (strcmp(st->x->db.sqlstate, DB_LOCK_NOT_AVAILABLE) != 0)
		return STEP_DB;
	int after = (c->capacity_lock_timeout_ms + 999) / 1000;
	char msg[256];
	snprintf(msg, sizeof msg, "%s: try again in a few seconds", why);
	log_warn("user %s: lock not granted within %d ms (%s)", st->user,
	         c->capacity_lock_timeout_ms, why);
	refuse(st, E_CAPACITY_BUSY, msg);
	jx_add_num(st->answer, "retry_after_s", after);
	st->retry_after_s = after;
	return STEP_REFUSED;
}

/* The user's starts within start_rate_window_s (counted in the session
 * rows, under the user lock), and when the oldest of them leaves it. */
static int recent_starts(struct start *st, struct admission_facts *f)
{
	const struct cfg *c = st->x->cfg;
	char win[16], max[16];
	snprintf(win, sizeof win, "%d", c->start_rate_window_s);
	snprintf(max, sizeof max, "%d", c->start_rate_max);
	const char *p[4] = {c->environment, st->user, win, max};
	PGresult *res =
	    db_exec(&st->x->db,
	            "SELECT count(*), ceil(extract(epoch from min(created_at) + "
	            "make_interval(secs => $3::int) - clock_timestamp())) FROM (SELECT created_at "
	            "FROM sessions WHERE environment = $1 AND user_name = $2 AND created_at > "
	            "clock_timestamp() - make_interval(secs => $3::int) ORDER BY created_at DESC "
	            "LIMIT $4::int) recent",
	            4, p);
	if (!res)
		return -1;
	f->recent_starts = atol(PQgetvalue(res, 0, 0));
	const char *left = db_val(res, 0, 1);
	f->rate_retry_s = left ? atol(left) : 1;
	PQclear(res);
	return 0;
}

/* The answer to a refusal verdict (and its log line). A verdict
 * YIELD_POOL_THEN_ADMIT is refused for capacity too, unless the caller's
 * yield makes room (start_run). */
static enum step refusal(struct start *st, const struct admission_facts *f, cJSON *found,
                         const char *fit)
{
	const struct cfg *c = st->x->cfg;
	const struct runtime_ops *rt = st->plan.rt;
	char msg[256];
	switch (st->adm.verdict) {
	case ADM_REFUSE_EXISTS:
		refuse(st, E_SESSION_EXISTS, "you already have a lab session open");
		jx_put(st->answer, "session", found);
		return STEP_REFUSED;
	case ADM_REFUSE_IN_LINE:
		refuse(st, E_SESSION_EXISTS, "you are already waiting in line for a lab");
		jx_put(st->answer, "session", found);
		return STEP_REFUSED;
	case ADM_REFUSE_GONE:
		return refuse(st, E_NOT_FOUND, "the place is no longer in line");
	case ADM_REFUSE_RATE:
		snprintf(msg, sizeof msg,
		         "you started %d labs within %d s: wait %ld s before starting another",
		         c->start_rate_max, c->start_rate_window_s, st->adm.retry_after_s);
		log_warn("user %s: start refused, %ld starts within %d s", st->user,
		         f->recent_starts, c->start_rate_window_s);
		refuse(st, E_TOO_MANY_STARTS, msg);
		jx_add_num(st->answer, "retry_after_s", (double)st->adm.retry_after_s);
		st->retry_after_s = st->adm.retry_after_s;
		return STEP_REFUSED;
	case ADM_NEVER_FITS:
		/* more machines than the whole capacity (no line either) */
		refuse(st, E_NEVER_FITS, "this lesson needs more lab machines than this lab has");
		jx_add_num(st->answer, "capacity", (double)f->capacity);
		jx_add_num(st->answer, "seats", (double)f->seats);
		return STEP_REFUSED;
	case ADM_NEVER_FITS_NODES:
		log_info("user %s lesson %s: refused, %s", st->user, st->lesson->id, fit);
		return refuse(st, E_NEVER_FITS, fit);
	case ADM_REFUSE_CLUSTER:
		log_warn("user %s: cannot count lab %ss: %s", st->user, rt->noun, st->x->kube.msg);
		return refuse(st, E_CLUSTER_UNAVAILABLE,
		              "the cluster cannot be reached right now: try again in a minute");
	case ADM_REFUSE_FULL:
	case ADM_YIELD_POOL_THEN_ADMIT: /* refused, unless the yield makes room */
		refuse(st, E_CAPACITY_FULL,
		       f->seats > 1
		           ? "not enough lab machines are free for this lesson: try again shortly"
		           : "all lab machines are in use: try again shortly");
		jx_add_num(st->answer, "capacity", (double)f->capacity);
		jx_add_num(st->answer, "in_use", (double)st->in_use);
		jx_add_num(st->answer, "seats", (double)f->seats);
		jx_add_num(st->answer, "queued", (double)st->line);
		jx_add_bool(st->answer, "can_queue", 1);
		jx_add_num(st->answer, "retry_after_s", c->retry_after_s);
		st->retry_after_s = c->retry_after_s;
		return STEP_REFUSED;
	default:
		return refuse(st, E_INTERNAL, "the admission could not decide");
	}
}

/* The admission: STEP_OK admitted (st->claimed: a warm pool VM), or
 * refused; with st->adm YIELD_POOL_THEN_ADMIT: refused for capacity unless
 * the caller's yield makes room. */
static enum step admit(struct start *st)
{
	struct labctx *x = st->x;
	const struct cfg *c = x->cfg;
	const struct lesson *l = st->lesson;
	const struct runtime_ops *rt = st->plan.rt;
	struct admission_facts f;
	struct session s;
	cJSON *found = NULL;
	char fit[512] = "";
	enum step rc = STEP_OK;

	/* the start's deadline, the longest start the reaper's orphan grace
	 * allows for (cfg_min_orphan_grace_s: two lock waits, seven cluster calls):
	 * every cluster call of the admission and the submission ends by then, and
	 * a 429 from the API server is retried only within it (kube_deadline) */
	kube_deadline(&x->kube,
	              util_mono_s() +
	                  (2.0 * c->capacity_lock_timeout_ms + 7.0 * c->kube_timeout_ms) / 1000.0);

	/* one start at a time per user. No lock is waited for longer than
	 * capacity_lock_timeout_ms: a slow cluster or a frozen holder turns into
	 * 503 capacity_busy, not a queue of workers */
	const char *pu[2] = {c->environment, st->user};
	char lt[64];
	snprintf(lt, sizeof lt, "SET LOCAL lock_timeout = %d", c->capacity_lock_timeout_ms);
	if (db_begin(&x->db) < 0 || db_cmd(&x->db, lt, 0, NULL) < 0)
		return STEP_DB;
	if (db_cmd(&x->db, "SELECT pg_advisory_xact_lock(" LOCK_USER ", hashtext($1 || '/' || $2))",
	           2, pu) < 0)
		return lock_busy(st, "another start of yours is still in progress");

	admission_facts_init(&f, st->qid ? ADM_PLACE : ADM_PRESS, (long)st->plan.n,
	                     rt->capacity(c));
	f.rate_max = c->start_rate_max;
	f.claimable = pool_lesson(l);
	f.yieldable = rt->warm_pool;
	f.yielded = st->yielded;
	for (;;) {
		st->adm = admission_decide(&f);
		switch (st->adm.verdict) {
		case ADM_NEED_OPEN: {
			int got = session_load_active(x, st->user, &s);
			if (got == SESSION_DBERR)
				return STEP_DB;
			f.open_session = got == SESSION_FOUND;
			if (f.open_session) {
				found = session_json(&s);
				session_free(&s);
			}
			continue;
		}
		case ADM_NEED_RATE:
			if (recent_starts(st, &f) < 0)
				return STEP_DB;
			continue;
		case ADM_NEED_PLACE:
			/* a place in line is the user's open session too; admitting it
			 * takes it out of the line (undone if the admission is refused),
			 * and its id becomes the session's */
			if (st->qid) {
				f.in_line = queue_claim(x, st->qid);
				snprintf(st->sid, sizeof st->sid, "%s", st->qid);
			} else {
				f.in_line = queue_user_place(x, st->user, &found);
			}
			if (f.in_line < 0)
				return STEP_DB;
			continue;
		case ADM_NEED_NODES:
			/* no node of the cluster can hold the session, its machines
			 * together when they must share one (nodefit.h); unknown when
			 * the nodes cannot be read, and then the cluster says
			 * Unschedulable */
			f.never_fits =
			    nodefit_lesson(&x->kube, l, st->plan.multi && !c->session_net_ovn, fit,
			                   sizeof fit) == 0;
			continue;
		case ADM_NEED_LINE:
			/* the seats the places ahead need are not free for this start (a
			 * fresh start sees the whole line, a place those ahead of it) */
			f.line_ahead = st->line = queue_seats_ahead(x, rt->name, st->qid);
			if (f.line_ahead < 0)
				return STEP_DB;
			continue;
		case ADM_CLAIM_POOL: {
			/* a ready pool VM already holds its seat */
			int pc = pool_claim(x, l, st->user, st->pressed, st->sid);
			if (pc == POOL_DBERR)
				return STEP_DB;
			if (pc == POOL_CLAIMED) {
				st->claimed = 1;
				return STEP_OK;
			}
			f.pool_claimed = 0;
			continue;
		}
		case ADM_NEED_COUNT: {
			/* the golden disk, or the silent fallback, per machine: before
			 * the count and its lock */
			if (!st->disks) {
				char who[300];
				snprintf(who, sizeof who, "user %s", st->user);
				lab_plan_disks(x, &st->plan, who);
				st->disks = 1;
			}
			long n = 0;
			f.in_use = lab_count(x, rt, &n) == 200 ? n : ADM_COUNT_FAILED;
			st->in_use = n;
			continue;
		}
		case ADM_NEED_LOCK: {
			/* capacity, counted in the cluster under a global lock (held until
			 * every machine is submitted): a session of N machines takes N
			 * seats, all or none */
			const char *pk[1] = {rt->capacity_key};
			if (db_cmd(&x->db,
			           "SELECT pg_advisory_xact_lock(" LOCK_CAPACITY ", $1::int)", 1,
			           pk) < 0) {
				cJSON_Delete(found);
				return lock_busy(st, "many labs are starting right now");
			}
			f.locked = 1;
			f.in_use = ADM_UNKNOWN;
			continue;
		}
		case ADM_NEED_POOL_IDLE:
			f.pool_idle = pool_idle(x);
			if (f.pool_idle < 0)
				return STEP_DB;
			continue;
		case ADM_ADMIT:
			cJSON_Delete(found);
			return STEP_OK;
		default:
			rc = refusal(st, &f, found, fit);
			if (st->adm.verdict != ADM_REFUSE_EXISTS &&
			    st->adm.verdict != ADM_REFUSE_IN_LINE)
				cJSON_Delete(found);
			return rc;
		}
	}
}

/* A teacher's reset (start.h): both locks, the old session's row ended in
 * this transaction; STEP_OK, or refused (the session is no longer active). */
static enum step admit_reset(struct start *st)
{
	struct labctx *x = st->x;
	const struct cfg *c = x->cfg;
	const struct runtime_ops *rt = st->plan.rt;
	struct session s;
	char lt[64];

	kube_deadline(&x->kube,
	              util_mono_s() +
	                  (2.0 * c->capacity_lock_timeout_ms + 7.0 * c->kube_timeout_ms) / 1000.0);
	snprintf(lt, sizeof lt, "SET LOCAL lock_timeout = %d", c->capacity_lock_timeout_ms);
	const char *pu[2] = {c->environment, st->user};
	const char *pk[1] = {rt->capacity_key};
	if (db_begin(&x->db) < 0 || db_cmd(&x->db, lt, 0, NULL) < 0)
		return STEP_DB;
	if (db_cmd(&x->db, "SELECT pg_advisory_xact_lock(" LOCK_USER ", hashtext($1 || '/' || $2))",
	           2, pu) < 0)
		return lock_busy(st, "another start of this student is still in progress");
	if (db_cmd(&x->db, "SELECT pg_advisory_xact_lock(" LOCK_CAPACITY ", $1::int)", 1, pk) < 0)
		return lock_busy(st, "many labs are starting right now");
	int rc = session_load(x, st->reset_id, &s);
	if (rc == SESSION_DBERR)
		return STEP_DB;
	int ok = rc == SESSION_FOUND && session_active(&s) && strcmp(s.user, st->user) == 0 &&
	         strcmp(s.lesson, st->lesson->id) == 0;
	size_t held = ok ? s.nvms : 0;
	session_free(&s);
	if (!ok)
		return refuse(st, E_NOT_FOUND, "the session is no longer active");
	if (st->plan.n > held)
		/* the lesson now has more machines than the seats the session holds */
		return refuse(st, E_CAPACITY_FULL,
		              "the lesson needs more lab machines than the session holds: end "
		              "it and let the student start again");
	if (!st->disks) {
		char who[300];
		snprintf(who, sizeof who, "user %s (reset)", st->user);
		lab_plan_disks(x, &st->plan, who);
		st->disks = 1;
	}
	int moved = session_mark_ended(x, st->reset_id, "reset");
	if (moved < 0)
		return STEP_DB;
	if (moved == 0)
		return refuse(st, E_NOT_FOUND, "the session is no longer active");
	/* the teacher's action, committed with the new session or not at all
	 * (the new session's id is this start's, named before the submission) */
	if (util_uuid4(st->sid) < 0)
		return refuse(st, E_INTERNAL, "no randomness available");
	cJSON *d = jx_obj();
	jx_add_str(d, "new_session", st->sid);
	char *dj = jx_print(d);
	cJSON_Delete(d);
	const char *pa[5] = {c->environment, st->reset_by ? st->reset_by : "", st->lesson->id,
	                     st->reset_id, dj};
	int a =
	    db_cmd(&x->db,
	           "INSERT INTO teacher_audit (environment, teacher, action, lesson, session_id, "
	           "student, detail) SELECT $1, $2, 'reset', $3, id, user_name, $5::jsonb "
	           "FROM sessions WHERE id = $4::uuid",
	           5, pa);
	cJSON_free(dj);
	return a < 0 ? STEP_DB : STEP_OK;
}

void start_reset_cleanup(struct labctx *x, const char *old_id)
{
	struct session s;
	if (session_load(x, old_id, &s) == SESSION_FOUND)
		session_delete_objects(x, &s);
	session_free(&s);
}

/* COMMIT failed: when the connection was lost, the commit may have happened
 * or not. Ask again on a new connection so that the answer and the row agree:
 * 0 it happened (the session stands), -1 it did not (the way back undoes). */
static int commit_lost(struct start *st)
{
	struct labctx *x = st->x;
	struct session s;
	log_err("user %s: COMMIT of session %s failed: %s", st->user, st->sid, x->db.msg);
	if (db_ensure(&x->db) < 0)
		return -1;
	int rc = session_load(x, st->sid, &s);
	session_free(&s);
	if (rc == SESSION_FOUND) {
		log_warn("user %s: session %s was committed after all (the reply was lost)",
		         st->user, st->sid);
		return 0;
	}
	return -1;
}

/* The submission: the session row, the cluster objects, the commit. */
static enum step submission(struct start *st)
{
	struct labctx *x = st->x;
	char why[1024];

	if (st->qid)
		snprintf(st->sid, sizeof st->sid, "%s", st->qid);
	else if (!st->reset_id && util_uuid4(st->sid) < 0) /* a reset's: admit_reset's */
		return refuse(st, E_INTERNAL, "no randomness available");
	if (lab_plan_name(&st->plan, st->sid) < 0)
		return refuse(st, E_INTERNAL, "no randomness available");
	if (session_create(x, &st->plan, st->user, st->pressed) < 0)
		return STEP_DB;
	if (provision(x, &st->plan, why, sizeof why) < 0) {
		log_warn("user %s lesson %s: start failed, nothing left behind: %s", st->user,
		         st->lesson->id, why);
		return refuse(st, E_CLUSTER_UNAVAILABLE,
		              "the lab machine could not be created: try again in a minute");
	}
	/* from here on a database failure must undo the cluster side (no retry) */
	if (session_mark_submitted(x, st->sid) < 0) {
		log_err("user %s: database failed after submitting session %s: %s", st->user,
		        st->sid, x->db.msg);
		return refuse(st, E_DB_UNAVAILABLE,
		              "the database is unavailable: try again shortly");
	}
	if (db_commit(&x->db) < 0 && commit_lost(st) < 0)
		return refuse(st, E_DB_UNAVAILABLE,
		              "the database is unavailable: try again shortly");
	st->plan.created = 0; /* committed: the objects are the session's now */
	return STEP_OK;
}

enum step start_run(struct start *st)
{
	struct labctx *x = st->x;
	const struct cfg *c = x->cfg;
	lab_plan_init(&st->plan, st->lesson);
	enum step rc = st->reset_id ? admit_reset(st) : admit(st);
	/* students first: idle pool VMs give their seats, then the admission
	 * once more (admission.h says when: nobody in line ahead, no more seats
	 * short than idle pool VMs; pool_yield: all or none) */
	if (rc == STEP_REFUSED && st->adm.verdict == ADM_YIELD_POOL_THEN_ADMIT) {
		db_rollback(&x->db);
		kube_deadline(&x->kube, 0); /* the next admit() has one of its own */
		int y = pool_yield(x, st->lesson->id, (int)st->adm.short_by, (int)st->plan.n);
		if (y < 0)
			rc = STEP_DB;
		if (y > 0) {
			cJSON_Delete(st->answer);
			st->answer = NULL;
			st->err = 0;
			st->retry_after_s = 0;
			st->yielded = 1;
			rc = admit(st);
		}
	}
	if (rc == STEP_OK && st->claimed) {
		if (db_commit(&x->db) < 0) {
			log_err("user %s: database failed after claiming a pool VM: %s", st->user,
			        x->db.msg);
			rc = refuse(st, E_DB_UNAVAILABLE,
			            "the database is unavailable: try again shortly");
		}
	} else if (rc == STEP_OK) {
		rc = submission(st);
	}
	kube_deadline(&x->kube, 0); /* the way back and what follows have their own time */
	if (rc != STEP_OK) {
		if (st->plan.created)
			provision_undo(x, &st->plan);
		db_rollback(&x->db);
		return rc;
	}
	const char *from = st->qid ? ", from the line" : st->reset_id ? ", a reset" : "";
	const struct runtime_ops *rt = st->plan.rt;
	for (size_t i = 0; !st->claimed && i < st->plan.n; i++) {
		const struct lab_machine *v = &st->plan.vms[i];
		char disk[80] = "";
		if (rt->has_disk)
			snprintf(disk, sizeof disk, "disk %s%s%s, ", lesson_disk_str(v->disk),
			         v->fallback ? ", fallback " : "", v->fallback ? v->fallback : "");
		log_info("user %s lesson %s: session %s, %s %s submitted (%s%ld/%d in use%s)",
		         st->user, st->lesson->id, st->sid, rt->noun, v->names.vm, disk,
		         st->in_use + (long)i + 1, rt->capacity(c), from);
	}
	return STEP_OK;
}

void start_done(struct start *st)
{
	cJSON_Delete(st->answer);
	st->answer = NULL;
	lab_plan_free(&st->plan);
}

int start_queued(struct labctx *x, const char *qid, const char *user, const char *lesson)
{
	struct start st;
	struct timespec ts;

	memset(&st, 0, sizeof st);
	st.x = x;
	st.user = user;
	clock_gettime(CLOCK_REALTIME, &ts);
	st.pressed = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
	st.qid = qid;
	st.lesson = lessons_find(x->lessons, lesson);
	if (!st.lesson) {
		queue_drop(x, qid, "the lesson is no longer offered");
		log_warn("queue: place %s of user %s dropped: lesson %s is not offered", qid, user,
		         lesson);
		return 2;
	}
	enum step rc = start_run(&st);
	int out = rc == STEP_OK ? 1 : rc == STEP_DB ? -1 : 0;
	if (rc == STEP_OK)
		log_info("queue: user %s admitted from the line (session %s%s)", user, qid,
		         st.claimed ? ", a warm pool VM" : "");
	if (rc == STEP_REFUSED && (st.err == E_SESSION_EXISTS || st.err == E_NEVER_FITS)) {
		/* it could never be admitted: out of the line, so it does not block it */
		queue_drop(x, qid, kj_str(st.answer, "message"));
		out = 2;
	}
	start_done(&st);
	return out;
}
