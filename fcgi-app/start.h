/* start.h - starting a lab session, for a student's press (api_sessions.c)
 * and for the head of the waiting line (pump.c). One transaction:
 *
 *   1. pg_advisory_xact_lock(LOCK_USER)   -> a double click yields one session
 *   2. the admission: the facts admission_decide() asks for, in its order
 *      (admission.h: an open session, the rate, the line, never-fits, a warm
 *      pool VM, the count before and under pg_advisory_xact_lock(LOCK_CAPACITY)),
 *      the golden disk chosen before the first count
 *   3. a claimed warm pool VM is the session: commit
 *   4. else the submission: the session row (session_create), the cluster
 *      objects (provision), submitted_at, commit
 *
 * No lock is waited for longer than capacity_lock_timeout_ms (503
 * capacity_busy). A step that refuses or fails returns, and start_run() has
 * the one way back: provision_undo(), roll back, the refusal in st->answer.
 * No active session row and nothing in the cluster. A process killed
 * between 4's objects and its commit leaves labelled objects without an
 * active session: the reaper's orphans. Students first: a start refused
 * for capacity while idle pool VMs hold seats has them yield (pool_yield)
 * and is admitted once more.
 *
 * A teacher's reset (reset_id set, api_teacher.c) is a start of its own
 * kind: under the user lock and the capacity lock, the old session's row is
 * ended (end_reason "reset") and the new one submitted in the same
 * transaction, so the seat passes from one to the other and no press and no
 * place of the line can take it in between; the line, the rate and the
 * count are not asked (the seat is held already). The old session's
 * objects are deleted after the commit (start_reset_cleanup). */
#ifndef LABVM_FCGI_START_H
#define LABVM_FCGI_START_H

#include "admission.h"
#include "http.h"
#include "provision.h"

struct start {
	/* in */
	struct labctx *x;
	const char *user;
	double pressed; /* epoch seconds of the press */
	const struct lesson *lesson;
	const char *qid;      /* the place of the line being admitted (its id is the session's) */
	const char *reset_id; /* a teacher's reset: the session whose seat this start takes */
	const char *reset_by; /* ... the teacher (its teacher_audit row, in the same commit) */
	/* out */
	char sid[37];
	int claimed;          /* a warm pool VM is the session */
	enum api_err err;     /* a refusal */
	cJSON *answer;        /* ... its body (error_json and its fields) */
	long retry_after_s;   /* > 0: the answer's Retry-After */
	long in_use, line;    /* as counted (capacity_full's answer) */
	struct admission adm; /* the last verdict */
	/* the start's own */
	struct lab_plan plan;
	int yielded;
	int disks;
};

/* What a start did: committed, refused (st->err, st->answer), or database
 * trouble before anything changed in the cluster (the router may retry). */
enum step { STEP_OK = 0, STEP_REFUSED = 1, STEP_DB = -1 };

/* Admit and submit st (x, user, pressed, lesson and qid set, the rest
 * zero); the way back has run unless STEP_OK. start_done() after. */
enum step start_run(struct start *st);
void start_done(struct start *st);
/* After a reset's commit: delete the old session's cluster objects. */
void start_reset_cleanup(struct labctx *x, const char *old_id);

/* The normal start for the head of the line, place qid of user (pump.c).
 * 1 admitted, 0 not now, 2 the place can never be admitted (dropped from
 * the line), -1 database trouble. */
int start_queued(struct labctx *x, const char *qid, const char *user, const char *lesson);

#endif
