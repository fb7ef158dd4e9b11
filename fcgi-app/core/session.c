/* session.c - a session's row as stored in PostgreSQL: its columns and the
 * names of its closed sets, loading (by id, the user's open one, the events'
 * snapshots), its JSON form, and the leases (see session.h). The writers of
 * its state and stage are session_change.c; moving it on is advance.c. */
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"
#include "log.h"
#include "util.h"

#define SESSION_COLS                                                                               \
	"id::text, user_name, lesson, runtime, environment, state, stage, disk_source, "           \
	"disk_fallback_reason, labvm_ts(created_at), labvm_ts(submitted_at), "                     \
	"labvm_ts(running_at), labvm_ts(ready_at), labvm_ts(ended_at), labvm_ts(expires_at), "     \
	"end_reason, error, last_grade::text, labvm_ts(graded_at), running_timeout_s, "            \
	"ready_timeout_s, extract(epoch from submitted_at), extract(epoch from running_at), "      \
	"extract(epoch from expires_at), extract(epoch from clock_timestamp()), network, "         \
	"labvm_ts(last_activity_at), extract(epoch from last_activity_at), idle_s, extend_s, "     \
	"extensions_left, labvm_ts(last_activity_at + make_interval(secs => idle_s))"

static const char *const state_names[] = {
    [SESSION_STARTING] = "starting",
    [SESSION_READY] = "ready",
    [SESSION_FAILED] = "failed",
    [SESSION_ENDED] = "ended",
};
static const char *const stage_names[] = {
    [STAGE_SUBMITTED] = "submitted", [STAGE_SCHEDULING] = "scheduling",
    [STAGE_BOOTING] = "booting",     [STAGE_SETTING_UP] = "setting_up",
    [STAGE_READY] = "ready",
};

#define NNAMES(a) (sizeof a / sizeof a[0])

const char *session_state_str(enum session_state st)
{
	return (size_t)st < NNAMES(state_names) ? state_names[st] : "unknown";
}

const char *session_stage_str(enum session_stage st)
{
	return (size_t)st < NNAMES(stage_names) ? stage_names[st] : "unknown";
}

int session_state_parse(const char *v)
{
	return util_name_index(state_names, NNAMES(state_names), v);
}

int session_stage_parse(const char *v)
{
	return util_name_index(stage_names, NNAMES(stage_names), v);
}

static char *dup_or_null(const PGresult *r, int row, int c)
{
	const char *v = db_val(r, row, c);
	return v ? xstrdup(v) : NULL;
}

static double num(const PGresult *r, int row, int c)
{
	const char *v = db_val(r, row, c);
	return v ? strtod(v, NULL) : 0;
}

/* The session's VMs arrive with the row, as a JSON array of
 * [vm_name, secret_name, agent_token, ip, deleted, machine, stage, running_at,
 * ready_at, epoch of running_at, disk_source, disk_fallback_reason, net_ip, vmi_uid]
 * (one round trip per load: every browser polls its session once a second). */
#define SESSION_VMS                                                                                \
	"(SELECT coalesce(json_agg(json_build_array(vm_name, secret_name, agent_token, ip, "       \
	"deleted_at IS NOT NULL, machine, stage, labvm_ts(running_at), labvm_ts(ready_at), "       \
	"extract(epoch from running_at), disk_source, disk_fallback_reason, net_ip, vmi_uid) "     \
	"ORDER BY created_at, ord, vm_name), '[]') "                                               \
	"FROM session_vms WHERE session_id = sessions.id)"

static char *item_str(const cJSON *a, int i)
{
	const cJSON *v = cJSON_GetArrayItem(a, i);
	return cJSON_IsString(v) ? xstrdup(v->valuestring) : NULL;
}

static int parse_vms(const char *json, struct session *s)
{
	cJSON *a = cJSON_Parse(json ? json : "[]"), *it;
	if (!cJSON_IsArray(a)) {
		cJSON_Delete(a);
		return -1;
	}
	s->vms = xcalloc((size_t)cJSON_GetArraySize(a) + 1, sizeof *s->vms);
	cJSON_ArrayForEach(it, a)
	{
		const cJSON *f[6];
		for (int i = 0; i < 6; i++)
			f[i] = cJSON_GetArrayItem(it, i);
		if (!cJSON_IsString(f[0]) || !cJSON_IsString(f[1]) || !cJSON_IsString(f[2]))
			continue;
		struct session_vm *v = &s->vms[s->nvms++];
		v->name = xstrdup(f[0]->valuestring);
		v->secret = xstrdup(f[1]->valuestring);
		v->token = xstrdup(f[2]->valuestring);
		v->ip = cJSON_IsString(f[3]) ? xstrdup(f[3]->valuestring) : NULL;
		v->deleted = cJSON_IsTrue(f[4]);
		v->machine = item_str(it, 5);
		char *stage = item_str(it, 6);
		int st = session_stage_parse(stage);
		v->stage = st < 0 ? STAGE_SUBMITTED : st;
		free(stage);
		v->running_at = item_str(it, 7);
		v->ready_at = item_str(it, 8);
		const cJSON *tr = cJSON_GetArrayItem(it, 9);
		v->t_running = cJSON_IsNumber(tr) ? tr->valuedouble : 0;
		v->disk_source = item_str(it, 10);
		v->fallback_reason = item_str(it, 11);
		v->net_ip = item_str(it, 12);
		v->vmi_uid = item_str(it, 13);
	}
	cJSON_Delete(a);
	return 0;
}

/* Row `row` of a SESSION_COLS, SESSION_VMS result into s. SESSION_FOUND or
 * SESSION_DBERR (x->db.msg). */
static int parse_row(struct labctx *x, const PGresult *r, int row, struct session *s)
{
	memset(s, 0, sizeof *s);
	/* columns 3, 5 and 6 (runtime, state, stage) are enums, parsed here once */
	char **str[] = {&s->id,         &s->user,         &s->lesson,
	                NULL,           &s->environment,  NULL,
	                NULL,           &s->disk_source,  &s->fallback_reason,
	                &s->created_at, &s->submitted_at, &s->running_at,
	                &s->ready_at,   &s->ended_at,     &s->expires_at,
	                &s->end_reason, &s->error,        &s->last_grade,
	                &s->graded_at};
	for (int i = 0; i < (int)(sizeof str / sizeof str[0]); i++)
		if (str[i])
			*str[i] = dup_or_null(r, row, i);
	int runtime = lesson_runtime_parse(db_val(r, row, 3));
	int state = session_state_parse(db_val(r, row, 5));
	int stage = session_stage_parse(db_val(r, row, 6));
	s->runtime = (enum lesson_runtime)(runtime < 0 ? 0 : runtime);
	s->state = (enum session_state)(state < 0 ? 0 : state);
	s->stage = (enum session_stage)(stage < 0 ? 0 : stage);
	s->running_timeout_s = atoi(PQgetvalue(r, row, 19));
	s->ready_timeout_s = atoi(PQgetvalue(r, row, 20));
	s->t_submitted = num(r, row, 21);
	s->t_running = num(r, row, 22);
	s->t_expires = num(r, row, 23);
	s->t_now = num(r, row, 24);
	s->network = dup_or_null(r, row, 25);
	s->last_activity_at = dup_or_null(r, row, 26);
	s->t_activity = num(r, row, 27);
	s->idle_s = (int)num(r, row, 28);
	s->extend_s = (int)num(r, row, 29);
	s->extensions_left = (int)num(r, row, 30);
	s->idle_ends_at = dup_or_null(r, row, 31);
	s->warn_s = x->cfg ? x->cfg->idle_warning_s : 0;
	int bad = parse_vms(db_val(r, row, 32), s) < 0;
	s->pool_vm = dup_or_null(r, row, 33);
	s->watchers = dup_or_null(r, row, 34);
	int unknown = runtime < 0 || state < 0 || stage < 0;
	if (bad || unknown) {
		snprintf(x->db.msg, sizeof x->db.msg, "database: malformed %s",
		         bad ? "session_vms" : "runtime, state or stage");
		session_free(s);
		return SESSION_DBERR;
	}
	return SESSION_FOUND;
}

/* slot: the prepared statement of this where clause (db_exec_prepared) */
static int load_where(struct labctx *x, unsigned slot, const char *where, int n,
                      const char *const *p, struct session *s)
{
	char *sql = xasprintf("SELECT " SESSION_COLS ", " SESSION_VMS
	                      ", pool_vm, watchers::text FROM sessions WHERE %s",
	                      where);
	PGresult *r = db_exec_prepared(&x->db, slot, sql, n, p);
	free(sql);
	memset(s, 0, sizeof *s);
	if (!r)
		return SESSION_DBERR;
	if (PQntuples(r) == 0) {
		PQclear(r);
		return SESSION_NONE;
	}
	int rc = parse_row(x, r, 0, s);
	PQclear(r);
	return rc;
}

int session_events_load(struct labctx *x, const char *id, long long after, int limit,
                        struct session_event **out, size_t *n)
{
	char a[32], l[16];
	snprintf(a, sizeof a, "%lld", after);
	snprintf(l, sizeof l, "%d", limit);
	const char *p[3] = {id, a, l};
	/* each snapshot is shaped back into a sessions row named "sessions", so
	 * the one column list (and the one JSON form) serves events too */
	PGresult *r =
	    db_exec(&x->db,
	            "SELECT " SESSION_COLS ", " SESSION_VMS ", pool_vm, watchers::text, e.seq "
	            "FROM session_events e CROSS JOIN LATERAL "
	            "jsonb_populate_record(NULL::sessions, e.snapshot) AS sessions "
	            "WHERE e.session_id = $1::uuid AND e.seq > $2::bigint "
	            "ORDER BY e.seq LIMIT $3::int",
	            3, p);
	*out = NULL;
	*n = 0;
	if (!r)
		return -1;
	int rows = PQntuples(r);
	*out = xcalloc((size_t)rows + 1, sizeof **out);
	for (int i = 0; i < rows; i++) {
		struct session_event *e = &(*out)[*n];
		if (parse_row(x, r, i, &e->s) != SESSION_FOUND) {
			PQclear(r);
			session_events_free(*out, *n);
			*out = NULL;
			*n = 0;
			return -1;
		}
		e->seq = strtoll(PQgetvalue(r, i, 35), NULL, 10);
		(*n)++;
	}
	PQclear(r);
	return 0;
}

void session_events_free(struct session_event *ev, size_t n)
{
	for (size_t i = 0; i < n; i++)
		session_free(&ev[i].s);
	free(ev);
}

long long session_last_event(struct labctx *x, const char *id, int *final)
{
	const char *p[1] = {id};
	PGresult *r = db_exec(&x->db,
	                      "SELECT seq, snapshot->>'state' FROM session_events "
	                      "WHERE session_id = $1::uuid ORDER BY seq DESC LIMIT 1",
	                      1, p);
	if (final)
		*final = -1;
	if (!r)
		return -1;
	long long v = 0;
	if (PQntuples(r)) {
		v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
		if (final)
			*final = strcmp(PQgetvalue(r, 0, 1), "starting") != 0;
	}
	PQclear(r);
	return v;
}

int session_load(struct labctx *x, const char *id, struct session *s)
{
	const char *p[2] = {id, x->cfg->environment};
	if (!util_uuid_valid(id)) {
		memset(s, 0, sizeof *s);
		return SESSION_NONE;
	}
	return load_where(x, 0, "id = $1::uuid AND environment = $2", 2, p, s);
}

int session_load_active(struct labctx *x, const char *user, struct session *s)
{
	const char *p[2] = {x->cfg->environment, user};
	return load_where(x, 1,
	                  "environment = $1 AND user_name = $2 AND state IN ('starting', 'ready')",
	                  2, p, s);
}

int session_reload(struct labctx *x, struct session *s)
{
	char *id = xstrdup(s->id);
	session_free(s);
	int rc = session_load(x, id, s);
	free(id);
	return rc == SESSION_FOUND ? 0 : -1;
}

void session_free(struct session *s)
{
	char *str[] = {s->id,
	               s->user,
	               s->lesson,
	               s->environment,
	               s->disk_source,
	               s->fallback_reason,
	               s->created_at,
	               s->submitted_at,
	               s->running_at,
	               s->ready_at,
	               s->ended_at,
	               s->expires_at,
	               s->end_reason,
	               s->error,
	               s->last_grade,
	               s->graded_at,
	               s->pool_vm,
	               s->watchers,
	               s->last_activity_at,
	               s->idle_ends_at};
	for (size_t i = 0; i < sizeof str / sizeof str[0]; i++)
		free(str[i]);
	for (size_t i = 0; i < s->nvms; i++) {
		free(s->vms[i].name);
		free(s->vms[i].secret);
		util_free_secret(s->vms[i].token);
		free(s->vms[i].ip);
		free(s->vms[i].vmi_uid);
		free(s->vms[i].machine);
		free(s->vms[i].running_at);
		free(s->vms[i].ready_at);
		free(s->vms[i].disk_source);
		free(s->vms[i].fallback_reason);
		free(s->vms[i].net_ip);
	}
	free(s->vms);
	free(s->network);
	memset(s, 0, sizeof *s);
}

struct session_vm *session_vm_find(const struct session *s, const char *name)
{
	if (!s->nvms)
		return NULL;
	if (!name || !*name)
		return &s->vms[0];
	for (size_t i = 0; i < s->nvms; i++)
		if (s->vms[i].machine && strcmp(s->vms[i].machine, name) == 0)
			return &s->vms[i];
	return NULL;
}

cJSON *session_json(const struct session *s)
{
	cJSON *o = jx_obj(), *disk, *vms;
	jx_add_str(o, "id", s->id);
	jx_add_str(o, "user", s->user);
	jx_add_str(o, "lesson", s->lesson);
	jx_add_str(o, "runtime", lesson_runtime_str(s->runtime));
	jx_add_str(o, "state", session_state_str(s->state));
	jx_add_str(o, "stage", session_stage_str(s->stage));
	disk = jx_add_obj(o, "disk");
	jx_add_str(disk, "source", s->disk_source);
	jx_add_str(disk, "fallback_reason", s->fallback_reason);
	/* started from a warm pool VM (ready at the press) */
	jx_add_bool(o, "pool", s->pool_vm != NULL);
	vms = jx_add_arr(o, "vms");
	for (size_t i = 0; i < s->nvms; i++) {
		const struct session_vm *m = &s->vms[i];
		cJSON *v = jx_obj();
		jx_add_str(v, "name", m->name);
		jx_add_str(v, "machine", m->machine);
		jx_add_str(v, "stage", session_stage_str((enum session_stage)m->stage));
		jx_add_str(v, "running_at", m->running_at);
		jx_add_str(v, "ready_at", m->ready_at);
		cJSON *d = jx_add_obj(v, "disk");
		jx_add_str(d, "source", m->disk_source);
		jx_add_str(d, "fallback_reason", m->fallback_reason);
		if (m->net_ip)
			jx_add_str(jx_add_obj(v, "network"), "address", m->net_ip);
		jx_push(vms, v);
	}
	jx_add_str(o, "created_at", s->created_at);
	jx_add_str(o, "submitted_at", s->submitted_at);
	jx_add_str(o, "running_at", s->running_at);
	jx_add_str(o, "ready_at", s->ready_at);
	jx_add_str(o, "ended_at", s->ended_at);
	jx_add_str(o, "expires_at", s->expires_at);
	jx_add_str(o, "end_reason", s->end_reason);
	jx_add_str(o, "error", s->error);
	if (session_active(s) && s->t_expires > s->t_now)
		jx_add_num(o, "remaining_s", (double)(long)(s->t_expires - s->t_now));
	/* who has a teacher's console open on it now (sql/013 console_watchers) */
	cJSON *wl = s->watchers ? cJSON_Parse(s->watchers) : NULL;
	if (!cJSON_IsArray(wl)) {
		cJSON_Delete(wl);
		wl = jx_arr();
	}
	jx_put(o, "watchers", wl);
	/* issue #28: idleness and extensions; a polling client sees the warning
	 * the event stream sends */
	jx_add_str(o, "last_activity_at", s->last_activity_at);
	jx_add_str(o, "idle_ends_at", session_idle_ends(s) > 0 ? s->idle_ends_at : NULL);
	jx_add_num(o, "extensions_left", session_active(s) ? s->extensions_left : 0);
	jx_add_num(o, "extend_minutes", s->extend_s / 60.0);
	/* how long before an end the warning comes (idle_warning_s): a polling
	 * page knows when to look again */
	jx_add_num(o, "warning_s", s->warn_s);
	struct session_warning w = session_warning(s, s->t_now);
	if (w.kind != WARN_NONE) {
		cJSON *wj = jx_add_obj(o, "warning");
		jx_add_str(wj, "kind", session_warning_kind_str(w.kind));
		jx_add_str(wj, "ends_at", w.kind == WARN_IDLE ? s->idle_ends_at : s->expires_at);
		jx_add_num(wj, "remaining_s", (double)(long)(w.ends_at - s->t_now + 0.999));
	} else {
		jx_add_null(o, "warning");
	}
	cJSON *g = s->last_grade ? cJSON_Parse(s->last_grade) : NULL;
	if (g) {
		jx_add_str(g, "graded_at", s->graded_at);
		jx_put(o, "last_grade", g);
	} else {
		jx_add_null(o, "last_grade");
	}
	return o;
}

/* ------------------------------------------------------------------ leases */

static const char *const lease_take_sql[] = {
    [LEASE_PROBE] = "UPDATE sessions SET probe_until = clock_timestamp() + "
                    "make_interval(secs => $2::float8 / 1000) WHERE id = $1::uuid AND "
                    "(probe_until IS NULL OR probe_until < clock_timestamp()) RETURNING 1",
    [LEASE_GRADE] = "UPDATE sessions SET grade_until = clock_timestamp() + "
                    "make_interval(secs => $2::float8 / 1000) WHERE id = $1::uuid AND "
                    "(grade_until IS NULL OR grade_until < clock_timestamp()) RETURNING 1",
    [LEASE_TTY] = "UPDATE sessions SET tty_until = clock_timestamp() + "
                  "make_interval(secs => $2::float8 / 1000) WHERE id = $1::uuid AND "
                  "(tty_until IS NULL OR tty_until < clock_timestamp()) RETURNING 1",
};
static const char *const lease_release_sql[] = {
    [LEASE_PROBE] = "UPDATE sessions SET probe_until = NULL WHERE id = $1::uuid",
    [LEASE_GRADE] = "UPDATE sessions SET grade_until = NULL WHERE id = $1::uuid",
    [LEASE_TTY] = "UPDATE sessions SET tty_until = NULL WHERE id = $1::uuid",
};

int session_lease_take(struct labctx *x, const char *id, enum session_lease_kind k, long ms)
{
	char v[32];
	snprintf(v, sizeof v, "%ld", ms);
	const char *p[2] = {id, v};
	PGresult *r = db_exec(&x->db, lease_take_sql[k], 2, p);
	if (!r)
		return -1;
	int got = PQntuples(r) > 0;
	PQclear(r);
	return got;
}

void session_lease_release(struct labctx *x, const char *id, enum session_lease_kind k)
{
	const char *p[1] = {id};
	if (db_cmd(&x->db, lease_release_sql[k], 1, p) < 0)
		log_warn("session %s: releasing a lease failed (it runs out by itself): %s", id,
		         x->db.msg);
}
