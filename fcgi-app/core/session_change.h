/* session_change.h - the only writers of a session's state and stage, after
 * pgbouncer's change_client_state(): every INSERT INTO sessions and every
 * UPDATE of sessions.state/stage or session_vms.stage is one of these.
 *
 * Contract:
 *   - Each write is a conditional UPDATE on the state it moves from (a
 *     concurrent poller, another process, the reaper or an End may have
 *     moved the row first: then it changes nothing, and the first mover
 *     wins). State and stage names come from session_state_str() and
 *     session_stage_str(), never from SQL text.
 *   - Each in-memory move asserts the state it expects (assert(): a caller
 *     that moves a session from a state it is not in is a bug), then sets
 *     the loaded row to what the database now says, or reloads it.
 *   - The database triggers (sql/007) turn each change into an event of the
 *     session's stream; the order of the writes here is the order of the
 *     events.
 *
 *   starting/submitted --session_set_stage--> scheduling, booting
 *   machine --session_vm_mark_running--> setting_up --session_vm_mark_ready--> ready
 *   starting --session_mark_running--> setting_up (every machine runs)
 *   starting --session_mark_ready--> ready (every machine is; minutes from now)
 *   starting|ready --session_finish--> ended | failed  (objects deleted)
 *
 * The API never writes rows itself: a start inserts through
 * session_create() (or session_create_claimed() for a warm pool VM). */
#ifndef LABVM_CORE_SESSION_CHANGE_H
#define LABVM_CORE_SESSION_CHANGE_H

#include "lab.h"
#include "session.h"

struct lab_plan;

/* A new session of plan p (its sid, lesson, runtime, machines), starting and
 * submitted, inside the caller's transaction. pressed: epoch seconds of the
 * press (created_at; the lesson's minutes are counted from ready). 0 / -1. */
int session_create(struct labctx *x, const struct lab_plan *p, const char *user, double pressed);
/* The start's cluster objects exist: submitted_at (the running deadline
 * runs from it). 0 / -1. */
int session_mark_submitted(struct labctx *x, const char *sid);

/* A warm pool VM claimed by a press: the session is ready at once. */
struct claimed_vm {
	const char *vm, *secret, *token, *ip, *disk, *fallback;
};
int session_create_claimed(struct labctx *x, const char *sid, const char *user,
                           const struct lesson *l, double pressed, const struct claimed_vm *v);

/* The stage a starting session shows while not every machine runs. */
void session_set_stage(struct labctx *x, struct session *s, enum session_stage stage);
/* A machine's own stage before it runs. */
void session_set_vm_stage(struct labctx *x, struct session *s, struct session_vm *vm,
                          enum session_stage stage);
/* A machine runs (its VMI is Running): setting_up, its address (ip may be
 * NULL: not reported yet) and the uid of the object it belongs to. 0 / -1. */
int session_vm_mark_running(struct labctx *x, struct session *s, struct session_vm *vm,
                            const char *ip, const char *uid);
/* A machine's agent said ready. 0 / -1. */
int session_vm_mark_ready(struct labctx *x, struct session *s, struct session_vm *vm);
/* Every machine runs: the session is setting_up. Reloads s. 0 / -1. */
int session_mark_running(struct labctx *x, struct session *s);
/* Every machine is ready: the session is ready, and its minutes count from
 * now. Reloads s. 0 / -1. */
int session_mark_ready(struct labctx *x, struct session *s);

/* Where a machine's agent is now (ip, and the uid of the object that
 * reported it; uid NULL: none), and forgetting it after a failed call (the
 * next call reads the object again first). */
void session_vm_set_address(struct labctx *x, const struct session *s, struct session_vm *vm,
                            const char *ip, const char *uid);
void session_vm_forget(struct labctx *x, const struct session *s, struct session_vm *vm);

/* The row part of session_finish(SESSION_ENDED) alone, inside the caller's
 * transaction (a teacher's reset, start.h: the objects are deleted after
 * its commit). 1 ended now, 0 it was not active, -1 database trouble. */
int session_mark_ended(struct labctx *x, const char *sid, const char *end_reason);

/* A teacher's extension: the active session's expires_at moves on by
 * minutes (the caller bounds them). 1 moved, 0 not active, -1 database. */
int session_extend_by(struct labctx *x, const char *sid, int minutes);

/* Fail the session because of machine vm (NULL: the session's own): the
 * error names the stage (and, with several machines, the machine), and the
 * session's stage becomes the machine's if it got further. Then as
 * session_finish(SESSION_FAILED, "failed"). */
int session_fail(struct labctx *x, struct session *s, const struct session_vm *vm, const char *fmt,
                 ...) __attribute__((format(printf, 4, 5)));

/* End (SESSION_ENDED) or fail (SESSION_FAILED) an active session, then delete
 * its cluster objects. error (any bytes: a guest's or a Pod's text) is
 * stored as valid UTF-8, cut to SESSION_ERROR_MAX. Should the row refuse it
 * anyway, a fixed ASCII error is stored instead; the objects are deleted
 * whether or not the row could be written (a session that cannot be marked
 * ended now holds no seat: its next look finds its machines gone).
 * Idempotent; reloads s. 0 ok, -1 database trouble. */
int session_finish(struct labctx *x, struct session *s, enum session_state state,
                   const char *end_reason, const char *error);

/* Activity (issue #28: a grade, a console ticket, "I'm still here"): a
 * ready session's last_activity_at is now, which postpones its idle end.
 * Not a state change (no event); the loaded row is not reloaded. 0 / -1. */
int session_touch(struct labctx *x, const char *id);
/* POST /extend: expires_at + extend_s and one extension fewer, while the
 * session is ready and has one left (a conditional UPDATE: two clicks use
 * two, never more than there are); it counts as activity. Reloads s.
 * 1 extended, 0 none left (or not ready any more), -1 database trouble. */
int session_extend(struct labctx *x, struct session *s);

#endif
