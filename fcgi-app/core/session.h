/* session.h - a lab session as stored in PostgreSQL, its JSON form, and the
 * state machine shared by labvm.fcgi and labvm-reaper:
 *
 *   starting --VMI Running--> (running_at) --agent /ready 200--> ready
 *   starting --deadline or setup failure--> failed   (VM and Secret deleted)
 *   starting|ready --user, expiry--> ended            (VM and Secret deleted)
 *
 * Every transition is a conditional UPDATE, so concurrent pollers (several
 * browser tabs, several FastCGI processes, the reaper) record each timestamp
 * once and the first one to decide wins. */
#ifndef LABVM_CORE_SESSION_H
#define LABVM_CORE_SESSION_H

#include <cjson/cJSON.h>

#include "lab.h"

struct session_vm {
	char *name;
	char *secret;
	char *token; /* agent bearer token: secret, never in JSON or logs */
	char *ip;
	int deleted;
};

struct session {
	char *id, *user, *lesson, *runtime, *environment, *state, *stage;
	char *disk_source, *fallback_reason;
	char *created_at, *submitted_at, *running_at, *ready_at, *ended_at, *expires_at;
	char *end_reason, *error, *last_grade, *graded_at;
	int running_timeout_s, ready_timeout_s;
	double t_submitted, t_running, t_expires, t_now; /* epoch seconds, 0 when unset */
	struct session_vm *vms;
	size_t nvms;
};

enum { SESSION_FOUND = 0, SESSION_NONE = 1, SESSION_DBERR = -1 };

/* Load by id within this environment (SESSION_FOUND / _NONE / _DBERR). */
int session_load(struct labctx *x, const char *id, struct session *s);
/* The user's active (starting or ready) session. */
int session_load_active(struct labctx *x, const char *user, struct session *s);
void session_free(struct session *s);
int session_active(const struct session *s);

/* The API's JSON form (no secrets). */
cJSON *session_json(const struct session *s);

/* Move a starting session on (readiness, deadlines) and end an expired one;
 * reloads s when it changed. 0 ok, -1 database trouble (x->db.msg). */
int session_advance(struct labctx *x, struct session *s);

/* End (state "ended") or fail (state "failed") an active session, then delete
 * its cluster objects. Idempotent; reloads s. 0 ok, -1 database trouble. */
int session_finish(struct labctx *x, struct session *s, const char *state, const char *end_reason,
                   const char *error);

/* Delete the session's VMs (or pods) and, explicitly, their Secrets; marks
 * them deleted in the database. Returns how many objects could not be deleted. */
int session_delete_objects(struct labctx *x, struct session *s);

#endif
