/* session.h - a lab session as stored in PostgreSQL (its row, its machines,
 * its JSON form, its events), what is due for it, and the leases; shared by
 * labvm.fcgi, labvm-reaper and labvm-console:
 *
 *   starting --every machine Running--> (running_at) --every machine ready--> ready
 *   starting --deadline or setup failure--> failed   (machines and Secrets deleted)
 *   starting|ready --user, operator, expiry--> ended (machines and Secrets deleted)
 *
 * Every transition is a conditional UPDATE (session_change.h, their only
 * writer), so concurrent pollers (several browser tabs, several FastCGI
 * processes, the reaper) record each timestamp once and the first one to
 * decide wins. What moves a starting session on is its runtime's look
 * (runtime.h advance), as session_due() (due.c) says it is due.
 *
 * To add a stage:
 *   - its value in enum session_stage (below, in order) and its name in
 *     stage_names (session.c), the same name in both CHECK constraints
 *     (sessions.stage, session_vms.stage: a new sql/NNN_*.sql migration,
 *     which sql/migrate applies);
 *   - where the cluster or the agent shows it: session_set_stage() /
 *     session_set_vm_stage() (session_change.h) in the runtime's look
 *     (runtime_vm.c look_running, runtime_pod.c look_running); if it has a
 *     deadline of its own, a case in session_due() (due.c) and rows in
 *     tests/unit/test_session_due.c;
 *   - its label on the pages: web/session.js (STAGES), web/index.html (the
 *     <li data-stage> list), web/i18n.js (stage.* and stage.short.*, EN and
 *     JA; the operator page reads them too).
 * The reaper, the API, the event stream and the metrics follow session_due()
 * and the names and need no change. */
#ifndef LABVM_CORE_SESSION_H
#define LABVM_CORE_SESSION_H

#include <cjson/cJSON.h>

#include "lab.h"
#include "state.h"

struct session_vm {
	char *name;
	char *secret;
	char *token; /* agent bearer token: secret, never in JSON or logs */
	char *ip;
	char *vmi_uid; /* the VMI ip belongs to; NULL: read the VMI before the next agent call */
	int deleted;
	/* per machine (sql/005_machines.sql) */
	char *machine; /* the lesson's machine name; NULL for a single-machine lesson */
	int stage;     /* enum session_stage */
	char *running_at, *ready_at;
	double t_running; /* epoch seconds, 0 when unset */
	char *disk_source, *fallback_reason;
	char *net_ip; /* address on the session network (CIDR), NULL without one */
};

/* The closed sets of sql/001_sessions.sql, parsed once when a row is loaded. */
enum session_stage {
	STAGE_SUBMITTED,  /* the VM was created */
	STAGE_SCHEDULING, /* no VMI yet, or one still pending */
	STAGE_BOOTING,    /* VMI scheduled onto a node */
	STAGE_SETTING_UP, /* VMI Running: waiting for the agent's ready flag */
	STAGE_READY,
};

struct session {
	char *id, *user, *lesson, *environment;
	enum lesson_runtime runtime;
	enum session_state state;
	enum session_stage stage;
	char *disk_source, *fallback_reason;
	char *created_at, *submitted_at, *running_at, *ready_at, *ended_at, *expires_at;
	char *end_reason, *error, *last_grade, *graded_at;
	char *pool_vm;  /* the warm pool VM this session claimed, or NULL (pool.h) */
	char *watchers; /* JSON array: teachers' consoles open now (sql/013), or NULL */
	int running_timeout_s, ready_timeout_s;
	double t_submitted, t_running, t_expires, t_now; /* epoch seconds, 0 when unset */
	struct session_vm *vms;
	size_t nvms;
	char *network; /* the session's NetworkAttachmentDefinition, NULL when none */
	/* issue #28 (sql/012): the last activity (NULL before ready), the idle
	 * end's seconds (0 = never), what an extension adds and how many are
	 * left; idle_ends_at is last_activity_at + idle_s as text (meaningful
	 * only where session_idle_ends() > 0); warn_s is the configured
	 * idle_warning_s (set by the load) */
	char *last_activity_at, *idle_ends_at;
	double t_activity;
	int idle_s, extend_s, extensions_left, warn_s;
};

/* The VM of machine `name` (NULL or "": the first); NULL when none. */
struct session_vm *session_vm_find(const struct session *s, const char *name);

enum { SESSION_FOUND = 0, SESSION_NONE = 1, SESSION_DBERR = -1 };

/* Load by id within this environment (SESSION_FOUND / _NONE / _DBERR). */
int session_load(struct labctx *x, const char *id, struct session *s);
/* The user's active (starting or ready) session. */
int session_load_active(struct labctx *x, const char *user, struct session *s);
void session_free(struct session *s);
/* Load s again by its id (after a change). 0 / -1. */
int session_reload(struct labctx *x, struct session *s);

/* A stage or state change, as recorded by sql/007_session_events.sql: the
 * session as it was right after the change (s.t_now is the time of the
 * load), and its id on the event stream. */
struct session_event {
	long long seq;
	struct session s;
};
/* Up to limit events of session id after seq `after`, oldest first (*out,
 * *n; free with session_events_free). 0 ok, -1 database trouble. */
int session_events_load(struct labctx *x, const char *id, long long after, int limit,
                        struct session_event **out, size_t *n);
void session_events_free(struct session_event *ev, size_t n);
/* The session's newest event id (0 when none), or -1 on database trouble.
 * final (may be NULL): 1 when that event's state is not starting (ready,
 * failed, ended: nothing comes after it), 0 when it is, -1 no event. */
long long session_last_event(struct labctx *x, const char *id, int *final);
int session_active(const struct session *s);

const char *session_stage_str(enum session_stage st);
/* The enum of a database value; -1 when it is not one. */
int session_stage_parse(const char *v);

/* What is due for a session at epoch second `now`: the one statement of the
 * deadline rules, shared by session_advance() and the reaper's dry run. Pure:
 * no I/O, it reads only the loaded row.
 *
 *   ready and now >= expires_at             -> DUE_EXPIRE (end it, "expired");
 *        minutes count from ready: a starting session has its start deadlines
 *   ready, idle ending on (idle_s > 0) and now >= last_activity_at + idle_s
 *                                           -> DUE_IDLE (end it, "idle"); when
 *        both have passed, the earlier deadline names the end (a tie: expired).
 *        Only a ready session is ever idle: starting ones have their start
 *        deadlines, and warm pool VMs are no sessions
 *   starting without a VM                   -> DUE_NO_VM  (fail it)
 *   starting, not Running yet               -> DUE_RUNNING: ask the cluster;
 *        overdue when now > submitted_at + running_timeout_s
 *   starting, Running, not ready            -> DUE_READY: ask the agent;
 *        overdue when now > running_at + ready_timeout_s
 *   anything else (ready, ended, failed)    -> DUE_NOTHING
 *
 * An overdue stage still gets its last look: a VM that is Running at the
 * deadline is not failed. The runtime (vm, pod) does not change the rules. */
enum session_due_what { DUE_NOTHING, DUE_EXPIRE, DUE_NO_VM, DUE_RUNNING, DUE_READY, DUE_IDLE };
struct session_due {
	enum session_due_what what;
	int overdue;     /* DUE_RUNNING / DUE_READY: the deadline has passed */
	double deadline; /* epoch seconds of that deadline, 0 when none */
};
struct session_due session_due(const struct session *s, double now);

/* When a ready session ends for idleness (epoch seconds: last activity +
 * idle_s), or 0: idle ending is off, or the session is not ready. */
double session_idle_ends(const struct session *s);

/* What the student is warned of at `now` (pure, like session_due): the
 * next of the idle end and the expiry, once it is warn_s away or closer.
 * When the idle end would come after the expiry, the expiry is the
 * warning. */
enum session_warning_kind { WARN_NONE, WARN_IDLE, WARN_EXPIRY };
struct session_warning {
	enum session_warning_kind kind;
	double ends_at; /* epoch seconds, 0 with WARN_NONE */
	double from;    /* when this warning began (ends_at - warn_s) */
};
struct session_warning session_warning(const struct session *s, double now);
/* "idle" | "expiry" | "none" */
const char *session_warning_kind_str(enum session_warning_kind k);
/* The next moment session_warning() may change its answer by time alone
 * (a warning starts or its deadline passes), or 0 when none is ahead. */
double session_warning_next(const struct session *s, double now);

/* Leases: at most one readiness probe, one grade and one tty-size request to
 * the agent in flight per session, across every labvm.fcgi process (a
 * conditional UPDATE on the row; a holder that died simply lets its lease run
 * out after ms). */
enum session_lease_kind { LEASE_PROBE, LEASE_GRADE, LEASE_TTY };
/* 1 taken, 0 someone else holds it, -1 database trouble. */
int session_lease_take(struct labctx *x, const char *id, enum session_lease_kind k, long ms);
void session_lease_release(struct labctx *x, const char *id, enum session_lease_kind k);

/* The API's JSON form (no secrets). */
cJSON *session_json(const struct session *s);

/* Move a starting session on (readiness, deadlines: its runtime's look,
 * runtime.h) and end an expired one (advance.c); reloads s when it changed.
 * 0 ok, -1 database trouble (x->db.msg). */
int session_advance(struct labctx *x, struct session *s);

/* The longest error a session row keeps, in bytes (cut on a character). */
#define SESSION_ERROR_MAX 1023

/* A lab Pod (as the API shows it) that has ended: 1 and why in out (the
 * container's exit code, reason and message; valid UTF-8, cut on a
 * character to fit n), else 0 (runtime_pod.c: its runtime's ended()). */
int session_pod_ended(const cJSON *pod, char *out, size_t n);

#endif
