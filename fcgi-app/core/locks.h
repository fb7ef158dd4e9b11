/* locks.h - every PostgreSQL advisory lock labvm takes, by the first key of
 * the two-key form (int4 namespace, int4 key). sql/locks.md is the table of
 * record (the second key, the scope, who holds it, why); this header mirrors
 * it, so that no key is written as a bare number anywhere else. The keys are
 * strings, to be pasted into SQL text:
 *
 *   "SELECT pg_advisory_xact_lock(" LOCK_USER ", hashtext($1 || '/' || $2))"
 *
 * Adding a lock: a row in sql/locks.md first, then its key here. */
#ifndef LABVM_CORE_LOCKS_H
#define LABVM_CORE_LOCKS_H

/* hashtext(environment || '/' || user), transaction: one start at a time per user */
#define LOCK_USER "7301"
/* the capacity pool's key (runtime_ops.capacity_key: 0 VMs, 1 Pods), transaction:
 * count the seats in use and submit, one admission at a time */
#define LOCK_CAPACITY "7302"
/* hashtext(environment), session: one reaper run at a time */
#define LOCK_REAPER "7303"
/* hashtext(environment), session: one warm pool upkeep (pool_tick) at a time */
#define LOCK_POOL "7304"
/* hashtext(session id), session: one process drives a watched start (drive.c) */
#define LOCK_DRIVE "7305"
/* hashtext(environment || '/' || capacity pool), transaction: joins to one line */
#define LOCK_LINE "7306"
/* hashtext(random), session, taken and released at once: labvm-doctor's probe of
 * whether the connection keeps its session (no pooler per transaction) */
#define LOCK_DOCTOR "7307"

#endif
