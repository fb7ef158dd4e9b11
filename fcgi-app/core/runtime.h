/* runtime.h - a lesson's runtime ("vm": a KubeVirt VM per machine, "pod": one
 * lab Pod) as one table of operations, after libwebsockets' lws_role_ops and
 * the console bridge's upstream.h: everything that differs between the
 * runtimes is a field or an operation here, and the rest of labvm asks the
 * table (runtime_of) instead of testing the runtime.
 *
 * Contract:
 *   - Every field is set (an operation the runtime lacks is NULL where the
 *     field says so); the tables are const and shared by every thread.
 *   - Operations run in the caller's labctx (one worker's database
 *     connection, cluster and agent clients) and never keep state of their
 *     own between calls: what they learn is written through session_change.h
 *     (transitions) or onto the objects they are given.
 *   - submit() makes every object of a plan (provision.h): the caller has
 *     set p->created, and on failure undoes the plan whatever submit() says
 *     (provision_undo deletes what may exist; 404 is done).
 *   - advance() moves a starting session on by one look (session_due() said
 *     what is due: DUE_RUNNING or DUE_READY); it may finish the session
 *     (session_fail) and reloads s whenever the row changed. 0, or -1 on
 *     database trouble.
 *   - agent_at() gives the address the machine's agent token may go to: read
 *     from this session's own lab object within this operation (*checked
 *     says it was, and is set when it is), never a stored address alone;
 *     agent_forget() after a call to it failed, so that the next call
 *     reads again.
 *
 * To add a runtime (say "kata"):
 *   1. its value in enum lesson_runtime and its name in lesson.c
 *      (lesson_runtime_str/parse; the lesson checks that name runtimes:
 *      "machines" and "warm" are for runtimes that have them);
 *   2. core/runtime_kata.c: `const struct runtime_ops runtime_kata` and its
 *      operations (model: runtime_pod.c, one object per session;
 *      runtime_vm.c for machines on a session network), declared below,
 *      and its row in runtime.c's runtime_all (the one table entry);
 *      (libcore takes every .c file of core/ by itself);
 *   3. its seats: a key kata_capacity in labvm.conf (config.h/.c; labvm
 *      names it <name>_capacity), its capacity lock's second key in
 *      sql/locks.md (capacity_key);
 *   4. the database's closed sets: sessions.runtime (sql/001) and
 *      session_queue.pool (sql/008) name the runtimes: a migration;
 *   5. reaching inside: one of fcgi-app/inside.h's means (a new one only if
 *      neither the agent nor exec fits), and the console bridge's upstream
 *      for it (console-bridge/upstream.h: the serial console or exec, chosen
 *      by the session's runtime; a new upstream_<kind>.c otherwise);
 *   6. its words on the page: web/i18n.js lessons.runtime.<name>.
 * The admission, the line, the reaper, the stream drivers, grading and the
 * views follow the table and need no change. */
#ifndef LABVM_CORE_RUNTIME_H
#define LABVM_CORE_RUNTIME_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "lesson.h"

struct cfg;
struct labctx;
struct lab_names;
struct lab_plan;
struct session;
struct session_vm;
struct session_due;

/* How labvm.fcgi reaches inside a lab machine to grade it and size its
 * terminal (fcgi-app/inside.h). */
enum inside_means {
	INSIDE_AGENT, /* labvm's agent in the guest: HTTP with the machine's token (agent_at()) */
	INSIDE_EXEC,  /* the cluster's exec subresource into the lab container */
};

struct runtime_ops {
	enum lesson_runtime id;
	const char *name; /* lessons' "runtime", sessions.runtime, and its capacity pool's
	                     name (session_queue.pool) */
	const char *kind; /* the API collection of its lab objects ("virtualmachines") */
	const char *noun; /* one of them in logs and messages ("VM") */

	/* capacity: its own seats (a machine takes one), counted apart from the
	 * other runtimes' under its own capacity lock */
	int (*capacity)(const struct cfg *c);
	const char *capacity_key; /* LOCK_CAPACITY's second key (sql/locks.md) */
	int warm_pool;            /* its single-machine lessons may keep a warm pool (pool.h) */
	int has_disk;             /* a root disk: golden check, disk_source recorded */
	int kvm;                  /* a KubeVirt VM: its launcher asks devices.kubevirt.io/kvm and
	                             KubeVirt's memory overhead of a node (nodefit.h) */
	enum inside_means inside;

	/* its lab objects in the cluster: the label selector past the lab
	 * marker (e.g. ",!kubevirt.io"), whether the reaper reads them whole
	 * (ended() needs their status), which listed ones are labvm's (NULL:
	 * every one) and whether one ended by itself (NULL: never) */
	const char *selector;
	int list_whole;
	int (*is_lab)(const struct cfg *c, const cJSON *obj);
	int (*ended)(const cJSON *obj, char *why, size_t n);

	/* making a session's machines (provision.h) */
	const char *(*secret_name)(const struct lab_names *n);
	int (*submit)(struct labctx *x, struct lab_plan *p, char *why, size_t n);

	/* a starting session, one look (advance.c); the stream driver's wait
	 * for what may move it on, at most hold_ms (drive.c): 0 something may
	 * have happened, 1 nothing did (the watch proved nothing: back off),
	 * -1 look again later; NULL: always -1 (the driver polls) */
	int (*advance)(struct labctx *x, struct session *s, const struct session_due *d);
	int (*wait)(struct labctx *x, struct session *s, int hold_ms);

	/* INSIDE_AGENT: where the machine's agent is (0, vm->ip), or -1 with
	 * why in msg; and forgetting it after a failed call. NULL otherwise. */
	int (*agent_at)(struct labctx *x, const struct session *s, struct session_vm *vm,
	                int *checked, char *msg, size_t n);
	void (*agent_forget)(struct labctx *x, const struct session *s, struct session_vm *vm);
};

/* The table of a runtime, of a session's, of a capacity pool's name (NULL
 * when no runtime has it), and every runtime in order (NULL-terminated). */
const struct runtime_ops *runtime_of(enum lesson_runtime r);
const struct runtime_ops *runtime_named(const char *name);
extern const struct runtime_ops *const runtime_all[];

extern const struct runtime_ops runtime_vm;
extern const struct runtime_ops runtime_pod;

#endif
