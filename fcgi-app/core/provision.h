/* provision.h - the one way to make a lab machine, and to unmake it: a
 * session's start (fcgi-app/start.c) and the warm pool's fill (pool_tick.c)
 * both build a plan and call provision(), as pgbouncer's janitor fills its
 * pool with the launch_new_connection() the request path uses.
 *
 * A plan is core-level: the lesson, its runtime, the names, the agent token,
 * the disk and the session-network place of each machine. No request, no
 * admission: the caller holds whatever lock its admission needs.
 *
 *   lab_plan_init(&p, lesson)           machines from the lesson
 *   lab_plan_name(&p, sid) or
 *   lab_plan_name_pool(&p)              names, tokens, network places
 *   lab_plan_disks(x, &p, who)          the golden disk, or the fallback
 *   provision(x, &p, why)               every object, via the runtime
 *   provision_undo(x, &p)               on any failure after provision()
 *   lab_plan_free(&p)                   tokens wiped
 *
 * Counting and deleting lab objects are here too: lab_count() is the seats
 * in use as admission counts them (every environment, terminating objects
 * included), lab_delete() the one deleter of a lab object. */
#ifndef LABVM_CORE_PROVISION_H
#define LABVM_CORE_PROVISION_H

#include <stddef.h>

#include "lab.h"
#include "manifest.h"
#include "runtime.h"

struct session;

/* One machine of a plan (a lesson without "machines" has one). */
struct lab_machine {
	const struct lesson *m; /* the machine's view of the lesson */
	enum lesson_disk disk;  /* the root disk used (after the golden check) */
	const char *fallback;   /* why not the golden disk (golden_reason_str), NULL */
	struct lab_names names;
	const char *secret;     /* its Secret's name (within names: runtime secret_name) */
	struct machine_net net; /* its place on the session network (multi) */
	char token[65];         /* the agent's bearer token: secret */
};

struct lab_plan {
	const struct lesson *lesson;
	const struct runtime_ops *rt;
	char sid[37]; /* the session's id; "" for a pool VM */
	struct lab_machine *vms;
	size_t n;
	int multi;        /* machines on a session network */
	char network[64]; /* its NetworkAttachmentDefinition (multi) */
	int created;      /* requests went out: provision_undo() deletes */
};

/* The plan's machines from the lesson (nothing named yet). */
void lab_plan_init(struct lab_plan *p, const struct lesson *l);
/* Names, tokens and network places for session sid. 0, -1 no randomness. */
int lab_plan_name(struct lab_plan *p, const char *sid);
/* The same for one warm pool VM: a fresh name, the pool's labels (the
 * lesson's content hash instead of a session id). 0 / -1. */
int lab_plan_name_pool(struct lab_plan *p);
/* Each machine's disk: the golden PVC when golden_check() allows it, else
 * the containerDisk with the reason recorded (logged as who's). */
void lab_plan_disks(struct labctx *x, struct lab_plan *p, const char *who);
/* Wipe the tokens and free the machines. */
void lab_plan_free(struct lab_plan *p);

/* Make every object of the plan (p->created is set first). 0, or -1 with
 * why (for logs) filled: then provision_undo(), always. */
int provision(struct labctx *x, struct lab_plan *p, char *why, size_t whylen);
/* Delete every object the plan may have made, whether or not it was: each
 * machine's lab object and Secret, then the session network. Outside any
 * deadline (the way back has its own time). */
void provision_undo(struct labctx *x, struct lab_plan *p);

/* The runtime's lab objects in the cluster now: every environment,
 * terminating ones included (rt->is_lab decides which listed ones count).
 * The HTTP status (200: *in_use set; 0 unreachable, x->kube.msg). */
long lab_count(struct labctx *x, const struct runtime_ops *rt, long *in_use);

/* Delete one lab object (kind: an API collection, e.g. "secrets"); a 404
 * is done. 1 deleted or gone, 0 not (logged as who's, with the error:
 * the reaper will retry). */
int lab_delete(struct labctx *x, const char *kind, const char *name, const char *who);

/* Delete a session's machines and, explicitly, their Secrets, then its
 * session network; each machine deleted is marked in session_vms. Returns
 * how many objects could not be deleted. */
int session_delete_objects(struct labctx *x, struct session *s);

#endif
