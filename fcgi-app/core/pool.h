/* pool.h - the warm pool: lab VMs made, set up and ready before anyone
 * presses Start, handed out at the press (issue #18).
 *
 * A pool VM is made by the one way to make a lab machine (provision.h: the
 * same plan, golden check and objects as a session's VM) under the same
 * capacity lock, admitted by the same admission_decide (ADM_POOL_FILL: the
 * seats the waiting line waits for are the line's); its labels carry
 * <prefix>/pool = the lesson and <prefix>/lesson-hash = the lesson's content
 * hash instead of a session id. Its row in pool_vms (sql/006_pool.sql;
 * pool_vm.h) goes
 *
 *   starting --agent /ready 200--> ready --press--> claimed  (the session's VM for good)
 *   starting|ready --stale, failed, surplus, yielded--> deleted (VM and Secret deleted)
 *
 * Who keeps the pool full: pool_tick(), run by the reaper every minute, by
 * `labvm-pool tick`, by GET /api/operator/pool, and by labvm.fcgi right after
 * a claim (after the answer went out: pool_after_request()), for the claimed
 * lesson. A claim also takes a pool VM that is still `starting` when its
 * agent already says ready, so a replacement is usable the moment it is,
 * not at the next tick.
 *
 * Seats: pool VMs are lab VMs (they count against vm_capacity). Students
 * first: a cold start refused for capacity while idle pool VMs hold seats
 * deletes one (pool_yield) and waits for its seat; the pool then does not
 * grow for pool_yield_hold_s. */
#ifndef LABVM_CORE_POOL_H
#define LABVM_CORE_POOL_H

#include <cjson/cJSON.h>

#include "lab.h"

enum { POOL_CLAIMED = 0, POOL_NONE = 1, POOL_DBERR = -1 };

/* Does lesson l keep a warm pool (its runtime keeps one, and it is a single
 * machine)? Only such lessons are claimed, filled and warmed. */
int pool_lesson(const struct lesson *l);

/* Claim a ready pool VM of lesson l for user, inside the caller's open
 * transaction (after the user lock and the open-session check): the row is
 * taken with FOR UPDATE SKIP LOCKED (two presses never get the same VM, in
 * any process on any host), the session row is inserted `ready` with the
 * VM's token, and the VM and its Secret are relabelled as the session's.
 * The caller commits. POOL_CLAIMED (sid set), POOL_NONE (cold start),
 * POOL_DBERR (x->db.msg). pressed: epoch seconds of the press. */
int pool_claim(struct labctx *x, const struct lesson *l, const char *user, double pressed,
               char sid[37]);

/* Capacity is full: delete `seats` idle pool VMs (another lesson's first),
 * all or none, and wait up to pool_yield_wait_s for the cluster count to
 * leave room for `need` seats. The caller yields only what makes its start
 * fit (no line ahead, seats short <= the idle pool VMs). Outside any
 * transaction. 1 the seats were yielded, 0 not that many idle pool VMs (none
 * deleted), -1 database trouble. */
int pool_yield(struct labctx *x, const char *for_lesson, int seats, int need);

/* Idle pool VMs (starting or ready) of this environment: the seats a
 * yield could free. -1 on database trouble. */
long pool_idle(struct labctx *x);

struct pool_counts {
	int created, became_ready, failed, stale, surplus, vanished, full, held, errors;
};

/* Keep the pool: freshness (lesson changed, gone, too old), readiness of
 * starting VMs (setup failures and deadlines delete them, counted in
 * failed), VMs gone from the cluster, surplus, then fill up to each lesson's
 * target under the capacity lock. only_lesson NULL = every lesson.
 * 0 ok, -1 database trouble or a failed cluster list (nothing deleted on
 * partial knowledge). */
int pool_tick(struct labctx *x, const char *only_lesson, struct pool_counts *k);
/* The same without waiting for another upkeep (labvm.fcgi's workers):
 * POOL_TICK_BUSY when one holds the pool lock, nothing done. */
#define POOL_TICK_BUSY 1
int pool_tick_try(struct labctx *x, const char *only_lesson, struct pool_counts *k);

/* Run in labvm.fcgi's worker after the answer went out: the tick a claim
 * asked for (x->pool_after), if any; never waits for the pool lock (held
 * elsewhere: kept for after the worker's next request). */
void pool_after_request(struct labctx *x);

/* Does the pool still own this object (kind "virtualmachines" or "secrets")?
 * 1: a starting or ready pool VM, or one claimed by a still active session:
 * not the reaper's orphan; 0: no (the reaper's orphan rules apply); -1 db. */
int pool_owns(struct labctx *x, const char *kind, const char *name);

/* The pool's target for a lesson now: its "warm" plus the operators' active
 * warm requests. -1 on database trouble. */
int pool_target(struct labctx *x, const struct lesson *l);

/* Operators' warm requests. from/until: anything PostgreSQL reads as a
 * timestamptz, "now", or "+<interval>" (from now, e.g. "+90 minutes");
 * NULL from = now, NULL until = from + 2 hours. Returns the new id, or -1
 * with err (a bad request) / -2 database trouble. */
long pool_warm_add(struct labctx *x, const char *lesson, int count, const char *from,
                   const char *until, const char *by, char *err, size_t errlen);
/* 1 cancelled, 0 no such request, -1 db. */
int pool_warm_cancel(struct labctx *x, long id);
/* {"warm": [...], "lessons": [{lesson, target, starting, ready, claimed,
 *  failed}], "vms": [...]}; NULL on database trouble. */
cJSON *pool_status_json(struct labctx *x);

#endif
