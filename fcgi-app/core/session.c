#include "session.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"
#include "log.h"
#include "manifest.h"
#include "util.h"

#define SESSION_COLS                                                                               \
	"id::text, user_name, lesson, runtime, environment, state, stage, disk_source, "           \
	"disk_fallback_reason, labvm_ts(created_at), labvm_ts(submitted_at), "                     \
	"labvm_ts(running_at), labvm_ts(ready_at), labvm_ts(ended_at), labvm_ts(expires_at), "     \
	"end_reason, error, last_grade::text, labvm_ts(graded_at), running_timeout_s, "            \
	"ready_timeout_s, extract(epoch from submitted_at), extract(epoch from running_at), "      \
	"extract(epoch from expires_at), extract(epoch from clock_timestamp()), network"

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

static int lookup(const char *const *names, size_t n, const char *v)
{
	for (size_t i = 0; v && i < n; i++)
		if (strcmp(names[i], v) == 0)
			return (int)i;
	return -1;
}

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
	return lookup(state_names, NNAMES(state_names), v);
}

int session_stage_parse(const char *v)
{
	return lookup(stage_names, NNAMES(stage_names), v);
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
	int bad = parse_vms(db_val(r, row, 26), s) < 0;
	s->pool_vm = dup_or_null(r, row, 27);
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
	char *sql = xasprintf(
	    "SELECT " SESSION_COLS ", " SESSION_VMS ", pool_vm FROM sessions WHERE %s", where);
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
	PGresult *r = db_exec(&x->db,
	                      "SELECT " SESSION_COLS ", " SESSION_VMS ", pool_vm, e.seq "
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
		e->seq = strtoll(PQgetvalue(r, i, 28), NULL, 10);
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

static int reload(struct labctx *x, struct session *s)
{
	char *id = xstrdup(s->id);
	session_free(s);
	int rc = session_load(x, id, s);
	free(id);
	return rc == SESSION_FOUND ? 0 : -1;
}

void session_free(struct session *s)
{
	char *str[] = {s->id,          s->user,         s->lesson,
	               s->environment, s->disk_source,  s->fallback_reason,
	               s->created_at,  s->submitted_at, s->running_at,
	               s->ready_at,    s->ended_at,     s->expires_at,
	               s->end_reason,  s->error,        s->last_grade,
	               s->graded_at,   s->pool_vm};
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

int session_active(const struct session *s)
{
	return s->id && (s->state == SESSION_STARTING || s->state == SESSION_READY);
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
	cJSON *g = s->last_grade ? cJSON_Parse(s->last_grade) : NULL;
	if (g) {
		jx_add_str(g, "graded_at", s->graded_at);
		jx_put(o, "last_grade", g);
	} else {
		jx_add_null(o, "last_grade");
	}
	return o;
}

int session_delete_objects(struct labctx *x, struct session *s)
{
	const struct cfg *c = x->cfg;
	int pod = s->runtime == RUNTIME_POD;
	int failed = 0;

	for (size_t i = 0; i < s->nvms; i++) {
		struct session_vm *v = &s->vms[i];
		if (v->deleted)
			continue;
		/* the runtime says what kind of object holds the lab */
		char *p1 = kube_path(pod ? "pods" : "virtualmachines", c->namespace_, v->name);
		char *p2 = kube_path("secrets", c->namespace_, v->secret);
		int ok1 = kube_delete(&x->kube, p1, "Background");
		if (!ok1)
			log_warn("session %s: deleting %s %s failed: %s", s->id, pod ? "pod" : "VM",
			         v->name, x->kube.msg);
		/* the Secret is owned by the VM, and still deleted explicitly */
		int ok2 = kube_delete(&x->kube, p2, "Background");
		if (!ok2)
			log_warn("session %s: deleting Secret %s failed: %s", s->id, v->secret,
			         x->kube.msg);
		free(p1);
		free(p2);
		if (ok1 && ok2) {
			const char *p[2] = {s->id, v->name};
			v->deleted = 1;
			db_cmd(
			    &x->db,
			    "UPDATE session_vms SET deleted_at = clock_timestamp() "
			    "WHERE session_id = $1::uuid AND vm_name = $2 AND deleted_at IS NULL",
			    2, p);
			log_info("session %s: deleted %s %s and Secret %s", s->id,
			         pod ? "pod" : "VM", v->name, v->secret);
		} else {
			failed += !ok1 + !ok2;
		}
	}
	/* the session network goes after its VMs (their deletion is under way) */
	if (s->network) {
		char *p = kube_path("network-attachment-definitions", c->namespace_, s->network);
		if (kube_delete(&x->kube, p, "Background"))
			log_info("session %s: deleted NetworkAttachmentDefinition %s", s->id,
			         s->network);
		else {
			log_warn("session %s: deleting NetworkAttachmentDefinition %s failed: %s",
			         s->id, s->network, x->kube.msg);
			failed++;
		}
		free(p);
	}
	return failed;
}

/* What a row that refused its error keeps instead (ASCII: it always fits). */
#define ERROR_NOT_STORED "the error message could not be stored; see labvm's log"

int session_finish(struct labctx *x, struct session *s, enum session_state state,
                   const char *end_reason, const char *error)
{
	static const char sql[] =
	    "UPDATE sessions SET state = $2, end_reason = $3, "
	    "error = COALESCE($4, error), ended_at = clock_timestamp() "
	    "WHERE id = $1::uuid AND state IN ('starting', 'ready') RETURNING 1";
	/* a guest's or a Pod's text: valid UTF-8, cut on a character */
	char *clean = error ? utf8_clean_dup(error, strlen(error), SESSION_ERROR_MAX) : NULL;
	const char *p[4] = {s->id, session_state_str(state), end_reason, clean};
	PGresult *r = db_exec(&x->db, sql, 4, p);
	if (!r && clean && !x->db.broken) {
		/* the row refused the message: the session still ends, with a
		 * message that cannot be refused (else every look would try again,
		 * and its objects would stay) */
		log_warn("session %s: storing its error failed (%s); storing a fixed one", s->id,
		         x->db.msg);
		p[3] = ERROR_NOT_STORED;
		r = db_exec(&x->db, sql, 4, p);
	}
	if (r && PQntuples(r) > 0)
		log_info("session %s (%s, %s): %s (%s)%s%s", s->id, s->user, s->lesson, p[1],
		         end_reason, p[3] ? ": " : "", p[3] ? p[3] : "");
	else if (!r)
		log_warn("session %s: marking it %s failed (%s); deleting its objects anyway",
		         s->id, p[1], x->db.msg);
	free(clean);
	/* whatever the row says: a session being ended keeps nothing in the cluster */
	session_delete_objects(x, s);
	if (!r)
		return -1;
	PQclear(r);
	return reload(x, s);
}

static const char *vmi_ip(const cJSON *vmi);

/* The VMI is the instance of the VM named vm (its controlling owner): a
 * claimed warm-pool VM's VMI keeps the pool's labels. */
static int owned_by_vm(const cJSON *vmi, const char *vm)
{
	const cJSON *o;
	cJSON_ArrayForEach(o, kj_get(vmi, "metadata.ownerReferences"))
	{
		const char *kind = kj_str(o, "kind"), *name = kj_str(o, "name");
		if (kind && name && strcmp(kind, "VirtualMachine") == 0 && strcmp(name, vm) == 0 &&
		    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "controller")))
			return 1;
	}
	return 0;
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

/* ------------------------------------------------------------------ the VMI */

int session_vmi_check(struct labctx *x, const struct session *s, struct session_vm *vm, char *msg,
                      size_t msglen)
{
	const struct cfg *c = x->cfg;
	char *path = kube_path("virtualmachineinstances", c->namespace_, vm->name);
	cJSON *vmi = NULL;
	long code = kube_get(&x->kube, path, &vmi);
	int rc = -1;
	free(path);
	const char *name = kj_str(vmi, "metadata.name");
	const char *uid = kj_str(vmi, "metadata.uid");
	const cJSON *labels = kj_get(vmi, "metadata.labels");
	const cJSON *sidl = cJSON_GetObjectItemCaseSensitive(labels, c->label.session_id);
	const char *phase = kj_str(vmi, "status.phase");
	const char *ip = vmi_ip(vmi);
	if (code == 404) {
		snprintf(msg, msglen, "your VM is not running (no VirtualMachineInstance)");
	} else if (code != 200) {
		utf8_snprintf(msg, msglen, "the cluster did not answer: %s", x->kube.msg);
	} else if (!name || strcmp(name, vm->name) != 0 || !uid ||
	           (!(cJSON_IsString(sidl) && strcmp(sidl->valuestring, s->id) == 0) &&
	            !owned_by_vm(vmi, vm->name))) {
		/* never send this session's token to a VMI that is not this session's */
		snprintf(msg, msglen, "the VirtualMachineInstance %s is not this session's",
		         vm->name);
		log_warn("session %s: VMI %s does not carry this session's id: not contacted",
		         s->id, vm->name);
	} else if (!phase || strcmp(phase, "Running") != 0 || !ip) {
		utf8_snprintf(msg, msglen, "your VM is not running (VMI phase %s%s)",
		              phase ? phase : "none", ip ? "" : ", no address");
	} else {
		if (!vm->ip || strcmp(vm->ip, ip) != 0 || !vm->vmi_uid ||
		    strcmp(vm->vmi_uid, uid) != 0) {
			const char *p[4] = {s->id, vm->name, ip, uid};
			if (vm->ip && strcmp(vm->ip, ip) != 0)
				log_info("session %s: VMI %s has a new address (uid %s)", s->id,
				         vm->name, uid);
			db_cmd(&x->db,
			       "UPDATE session_vms SET ip = $3, vmi_uid = $4 "
			       "WHERE session_id = $1::uuid AND vm_name = $2",
			       4, p);
			free(vm->ip);
			free(vm->vmi_uid);
			vm->ip = xstrdup(ip);
			vm->vmi_uid = xstrdup(uid);
		}
		rc = 0;
	}
	cJSON_Delete(vmi);
	return rc;
}

/* Fail the session because of machine vm: the error names the stage (and,
 * in a session of several machines, the machine). */
static void set_stage(struct labctx *x, struct session *s, enum session_stage stage);
static int fail(struct labctx *x, struct session *s, const struct session_vm *vm, const char *fmt,
                ...) __attribute__((format(printf, 4, 5)));

static int fail(struct labctx *x, struct session *s, const struct session_vm *vm, const char *fmt,
                ...)
{
	va_list ap;
	char *what, *msg;
	/* the session's stage is where it failed, even when the failure came in
	 * the same pass as the step that led there (a setup that fails at once) */
	if (vm && vm->stage > (int)s->stage && vm->stage < (int)STAGE_READY)
		set_stage(x, s, (enum session_stage)vm->stage);
	/* formatted whole (the agent's log tail, a Pod's message: any bytes);
	 * session_finish() makes it valid UTF-8 and cuts it on a character */
	va_start(ap, fmt);
	if (vasprintf(&what, fmt, ap) < 0)
		what = NULL;
	va_end(ap);
	if (vm && vm->machine)
		msg = xasprintf("machine %s: %s: %s", vm->machine,
		                session_stage_str((enum session_stage)vm->stage),
		                what ? what : "failed");
	else
		msg = xasprintf("%s: %s",
		                session_stage_str(vm && vm->stage > (int)s->stage
		                                      ? (enum session_stage)vm->stage
		                                      : s->stage),
		                what ? what : "failed");
	free(what);
	int rc = session_finish(x, s, SESSION_FAILED, "failed", msg);
	free(msg);
	return rc;
}

static void set_stage(struct labctx *x, struct session *s, enum session_stage stage)
{
	const char *p[2] = {s->id, session_stage_str(stage)};
	if (s->stage == stage)
		return;
	db_cmd(&x->db,
	       "UPDATE sessions SET stage = $2 "
	       "WHERE id = $1::uuid AND state = 'starting' AND running_at IS NULL",
	       2, p);
	s->stage = stage;
}

static void set_vm_stage(struct labctx *x, struct session *s, struct session_vm *vm,
                         enum session_stage stage)
{
	const char *p[3] = {s->id, vm->name, session_stage_str(stage)};
	if (vm->stage == (int)stage)
		return;
	db_cmd(&x->db,
	       "UPDATE session_vms SET stage = $3 "
	       "WHERE session_id = $1::uuid AND vm_name = $2 AND running_at IS NULL",
	       3, p);
	vm->stage = stage;
}

/* Why a VM is not running, for the error message: VM printableStatus. */
static void vm_status(struct labctx *x, const char *vm, char *out, size_t n)
{
	char *path = kube_path("virtualmachines", x->cfg->namespace_, vm);
	cJSON *o = NULL;
	long code = kube_get(&x->kube, path, &o);
	const char *ps = kj_str(o, "status.printableStatus");
	utf8_snprintf(out, n, "%s", code == 200 && ps ? ps : "unknown");
	cJSON_Delete(o);
	free(path);
}

/* What a look at one machine did. */
enum look { LOOK_DBERR = -1, LOOK_SAME = 0, LOOK_FAILED = 1, LOOK_MOVED = 2 };

/* The pod-network address of a VMI: the interface named "default" (the
 * session network's comes second). */
static const char *vmi_ip(const cJSON *vmi)
{
	const cJSON *ifs = kj_get(vmi, "status.interfaces"), *it;
	cJSON_ArrayForEach(it, ifs)
	{
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(it, "name");
		const cJSON *ip = cJSON_GetObjectItemCaseSensitive(it, "ipAddress");
		if (cJSON_IsString(n) && strcmp(n->valuestring, "default") == 0 &&
		    cJSON_IsString(ip))
			return ip->valuestring;
	}
	return kj_str(vmi, "status.interfaces.0.ipAddress");
}

static enum look advance_running(struct labctx *x, struct session *s, struct session_vm *vm,
                                 int overdue)
{
	char *path = kube_path("virtualmachineinstances", x->cfg->namespace_, vm->name);
	cJSON *vmi = NULL;
	long code = kube_get(&x->kube, path, &vmi);
	const char *phase = code == 200 ? kj_str(vmi, "status.phase") : NULL;
	enum look rc = LOOK_SAME;

	free(path);
	if (phase && strcmp(phase, "Running") == 0) {
		const char *ip = vmi_ip(vmi);
		const char *p[4] = {s->id, vm->name, ip, kj_str(vmi, "metadata.uid")};
		if (db_cmd(&x->db,
		           "UPDATE session_vms SET running_at = clock_timestamp(), "
		           "stage = 'setting_up', ip = coalesce($3, ip), vmi_uid = $4 "
		           "WHERE session_id = $1::uuid AND vm_name = $2 AND running_at IS NULL",
		           4, p) < 0) {
			rc = LOOK_DBERR;
		} else {
			/* what the row says now, for a failure in this same look */
			vm->stage = STAGE_SETTING_UP;
			if (ip && !vm->ip)
				vm->ip = xstrdup(ip);
			rc = LOOK_MOVED;
		}
	} else if (phase && (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0)) {
		rc = fail(x, s, vm, "the VM stopped before the lab was ready (VMI phase %s)",
		          phase) < 0
		         ? LOOK_DBERR
		         : LOOK_FAILED;
	} else {
		if (code == 404 || (phase && strcmp(phase, "Scheduled") != 0) ||
		    (code == 200 && !phase))
			set_vm_stage(x, s, vm, STAGE_SCHEDULING);
		else if (phase)
			set_vm_stage(x, s, vm, STAGE_BOOTING);
		/* else the cluster did not answer: keep the stage, the deadline still counts */
		if (overdue) {
			char st[128];
			vm_status(x, vm->name, st, sizeof st);
			rc = fail(x, s, vm,
			          "the VM was not running within %d s (VMI phase %s, VM status %s)",
			          s->running_timeout_s, phase ? phase : "none", st) < 0
			         ? LOOK_DBERR
			         : LOOK_FAILED;
		}
	}
	cJSON_Delete(vmi);
	return rc;
}

static const char *detail_str(const cJSON *d, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static enum look advance_ready(struct labctx *x, struct session *s, struct session_vm *vm,
                               int overdue)
{
	const struct cfg *c = x->cfg;
	cJSON *detail = NULL;
	enum agent_ready r = AGENT_UNREACHABLE;
	enum look rc = LOOK_SAME;

	char why[256] = "no address yet";
	/* Running was seen before the VMI reported its address, or the last
	 * probe failed (a restarted VMI has a new address): read the VMI again;
	 * the token goes only to this session's VMI */
	int ok = vm->ip && vm->vmi_uid; /* vmi_uid is cleared after a failed call */
	if (!ok)
		ok = session_vmi_check(x, s, vm, why, sizeof why) == 0;
	if (ok) {
		r = agent_ready(&x->agent, vm->ip, c->agent_port, vm->token,
		                c->agent_ready_timeout_ms, &detail);
		if (r == AGENT_UNREACHABLE) {
			const char *p[2] = {s->id, vm->name};
			free(vm->vmi_uid);
			vm->vmi_uid = NULL;
			db_cmd(&x->db,
			       "UPDATE session_vms SET vmi_uid = NULL WHERE session_id = $1::uuid "
			       "AND vm_name = $2",
			       2, p);
		}
	}
	if (r == AGENT_READY) {
		const char *p[2] = {s->id, vm->name};
		rc = db_cmd(&x->db,
		            "UPDATE session_vms SET ready_at = clock_timestamp(), stage = 'ready' "
		            "WHERE session_id = $1::uuid AND vm_name = $2 AND ready_at IS NULL",
		            2, p) < 0
		         ? LOOK_DBERR
		         : LOOK_MOVED;
		goto out;
	}
	const char *st = detail_str(detail, "state");
	const char *tail = detail_str(detail, "log_tail");
	const cJSON *ec = cJSON_GetObjectItemCaseSensitive(detail, "exit_code");
	int frc = 0;
	if (st && strcmp(st, "setup_failed") == 0) {
		/* the guest says so: no point in waiting for the deadline */
		frc = fail(x, s, vm, "the lab setup failed with exit code %d%s%s",
		           cJSON_IsNumber(ec) ? ec->valueint : -1, tail && *tail ? ": " : "",
		           tail ? tail : "");
		rc = LOOK_FAILED;
	} else if (overdue) {
		frc = fail(x, s, vm,
		           "the lab was not ready %d s after the VM started (agent: %s)%s%s",
		           s->ready_timeout_s, st ? st : (ok ? x->agent.msg : why),
		           tail && *tail ? ": " : "", tail ? tail : "");
		rc = LOOK_FAILED;
	}
	if (frc < 0)
		rc = LOOK_DBERR;
out:
	cJSON_Delete(detail);
	return rc;
}

/* ------------------------------------------------------------ pods
 * A pod lesson's readiness is the Pod's own: phase Running is "running"
 * (running_at, the pod IP), its Ready condition (the exec readiness probe on
 * the flag the container writes when setup exited 0) is "ready". What the
 * kubelet reports names each failure. */

static const cJSON *pod_condition(const cJSON *pod, const char *type)
{
	const cJSON *c;
	cJSON_ArrayForEach(c, kj_get(pod, "status.conditions"))
	{
		const char *t = kj_str(c, "type");
		if (t && strcmp(t, type) == 0)
			return c;
	}
	return NULL;
}

/* The lab container's state ("waiting", "running", "terminated" object) or NULL. */
static const cJSON *pod_state(const cJSON *pod, const char **which)
{
	const cJSON *cs;
	cJSON_ArrayForEach(cs, kj_get(pod, "status.containerStatuses"))
	{
		const char *name = kj_str(cs, "name");
		if (!name || strcmp(name, POD_CONTAINER) != 0)
			continue;
		const char *keys[] = {"terminated", "waiting", "running"};
		for (size_t i = 0; i < 3; i++) {
			const cJSON *st = kj_get(cs, "state");
			const cJSON *v = cJSON_GetObjectItemCaseSensitive(st, keys[i]);
			if (cJSON_IsObject(v)) {
				*which = keys[i];
				return v;
			}
		}
	}
	*which = NULL;
	return NULL;
}

int session_pod_ended(const cJSON *pod, char *out, size_t n)
{
	const char *phase = kj_str(pod, "status.phase");
	const char *which;
	const cJSON *st = pod_state(pod, &which);
	if (!phase || (strcmp(phase, "Failed") != 0 && strcmp(phase, "Succeeded") != 0))
		return 0;
	if (which && strcmp(which, "terminated") == 0) {
		const cJSON *ec = cJSON_GetObjectItemCaseSensitive(st, "exitCode");
		const char *reason = kj_str(st, "reason"), *msg = kj_str(st, "message");
		utf8_snprintf(out, n, "the container ended (%s) with exit code %d%s%s",
		              reason ? reason : "terminated",
		              cJSON_IsNumber(ec) ? ec->valueint : -1, msg && *msg ? ": " : "",
		              msg ? msg : "");
	} else {
		const char *reason = kj_str(pod, "status.reason"),
		           *msg = kj_str(pod, "status.message");
		utf8_snprintf(out, n, "the Pod stopped (phase %s%s%s%s%s)", phase,
		              reason ? ", " : "", reason ? reason : "", msg ? ": " : "",
		              msg ? msg : "");
	}
	return 1;
}

/* Setup failing is the container ending before the ready flag: its exit
 * code and the tail of its output (the termination message). */
static int pod_failed(struct labctx *x, struct session *s, const cJSON *pod)
{
	const char *which;
	const cJSON *st = pod_state(pod, &which);
	const cJSON *ec = cJSON_GetObjectItemCaseSensitive(st, "exitCode");
	if (which && strcmp(which, "terminated") == 0 && cJSON_IsNumber(ec) && ec->valueint != 0) {
		const char *msg = kj_str(st, "message");
		set_stage(x, s, STAGE_SETTING_UP); /* it ran: what failed was the setup */
		return fail(x, s, NULL, "the lab setup failed with exit code %d%s%s", ec->valueint,
		            msg && *msg ? ": " : "", msg ? msg : "");
	}
	char why[1024];
	if (!session_pod_ended(pod, why, sizeof why))
		snprintf(why, sizeof why, "the Pod stopped");
	return fail(x, s, NULL, "%s", why);
}

static int get_pod(struct labctx *x, const char *name, cJSON **pod)
{
	char *path = kube_path("pods", x->cfg->namespace_, name);
	long code = kube_get(&x->kube, path, pod);
	free(path);
	return (int)code;
}

static int advance_running_pod(struct labctx *x, struct session *s, struct session_vm *vm,
                               int overdue)
{
	cJSON *pod = NULL;
	int code = get_pod(x, vm->name, &pod);
	const char *phase = code == 200 ? kj_str(pod, "status.phase") : NULL;
	const char *which;
	const cJSON *st = code == 200 ? pod_state(pod, &which) : NULL;
	const char *wreason = st && strcmp(which, "waiting") == 0 ? kj_str(st, "reason") : NULL;
	int rc = 0;

	if (code == 404) {
		rc = fail(x, s, NULL, "the Pod %s disappeared from the cluster", vm->name);
	} else if (phase && strcmp(phase, "Running") == 0) {
		const char *ip = kj_str(pod, "status.podIP");
		const char *p[3] = {s->id, ip, vm->name};
		if (db_cmd(
		        &x->db,
		        "UPDATE sessions SET running_at = clock_timestamp(), stage = 'setting_up' "
		        "WHERE id = $1::uuid AND state = 'starting' AND running_at IS NULL",
		        1, p) < 0 ||
		    (ip && db_cmd(&x->db,
		                  "UPDATE session_vms SET ip = $2 WHERE session_id = $1::uuid "
		                  "AND vm_name = $3",
		                  3, p) < 0))
			rc = -1;
		else
			rc = reload(x, s);
	} else if (phase && (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0)) {
		rc = pod_failed(x, s, pod);
	} else if (wreason && (strcmp(wreason, "ErrImagePull") == 0 ||
	                       strcmp(wreason, "ImagePullBackOff") == 0 ||
	                       strcmp(wreason, "InvalidImageName") == 0 ||
	                       strcmp(wreason, "ErrImageNeverPull") == 0)) {
		/* the kubelet could not pull the lesson's image: say so now */
		const char *msg = kj_str(st, "message");
		set_stage(x, s, STAGE_BOOTING);
		rc = fail(x, s, NULL, "the image could not be pulled (%s%s%s)", wreason,
		          msg && *msg ? ": " : "", msg ? msg : "");
	} else {
		const cJSON *sched = code == 200 ? pod_condition(pod, "PodScheduled") : NULL;
		const char *ss = kj_str(sched, "status");
		int scheduled = ss && strcmp(ss, "True") == 0;
		if (code == 200)
			set_stage(x, s, scheduled ? STAGE_BOOTING : STAGE_SCHEDULING);
		if (overdue) {
			if (code == 200 && !scheduled)
				rc = fail(
				    x, s, NULL, "the Pod was not scheduled within %d s (%s%s%s)",
				    s->running_timeout_s,
				    kj_str(sched, "reason") ? kj_str(sched, "reason") : "pending",
				    kj_str(sched, "message") ? ": " : "",
				    kj_str(sched, "message") ? kj_str(sched, "message") : "");
			else
				rc = fail(x, s, NULL,
				          "the Pod was not running within %d s (container %s)",
				          s->running_timeout_s,
				          wreason ? wreason
				                  : (code == 200 ? "not started" : x->kube.msg));
		}
	}
	cJSON_Delete(pod);
	return rc;
}

static int advance_ready_pod(struct labctx *x, struct session *s, struct session_vm *vm,
                             int overdue)
{
	cJSON *pod = NULL;
	int code = get_pod(x, vm->name, &pod);
	const char *phase = code == 200 ? kj_str(pod, "status.phase") : NULL;
	const char *ready = kj_str(pod_condition(pod, "Ready"), "status");
	int rc = 0;

	if (code == 404) {
		rc = fail(x, s, NULL, "the Pod %s disappeared from the cluster", vm->name);
	} else if (phase && strcmp(phase, "Running") == 0 && ready && strcmp(ready, "True") == 0) {
		const char *p[1] = {s->id};
		rc = db_cmd(&x->db,
		            "UPDATE sessions SET ready_at = clock_timestamp(), state = 'ready', "
		            "stage = 'ready', "
		            "expires_at = clock_timestamp() + (expires_at - created_at) "
		            "WHERE id = $1::uuid AND state = 'starting' AND ready_at IS NULL",
		            1, p);
		if (rc == 0)
			rc = reload(x, s);
	} else if (phase && (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0)) {
		rc = pod_failed(x, s, pod);
	} else if (overdue) {
		rc = fail(x, s, NULL, "the lab was not ready %d s after the Pod started (Ready %s)",
		          s->ready_timeout_s,
		          ready ? ready : (code == 200 ? "unknown" : x->kube.msg));
	}
	cJSON_Delete(pod);
	return rc;
}

struct session_due session_due(const struct session *s, double now)
{
	struct session_due d = {DUE_NOTHING, 0, 0};
	if (!session_active(s))
		return d;
	/* minutes count from ready (README): a starting session is bounded by
	 * its start deadlines, not by created_at + minutes */
	if (s->state == SESSION_READY && s->t_expires > 0 && now >= s->t_expires) {
		d.what = DUE_EXPIRE;
		d.deadline = s->t_expires;
	} else if (s->state != SESSION_STARTING || s->ready_at) {
		/* ready: nothing until it expires */
	} else if (s->nvms == 0) {
		d.what = DUE_NO_VM;
	} else if (!s->running_at) {
		d.what = DUE_RUNNING;
		/* not submitted yet (a start in flight): no deadline runs */
		if (s->t_submitted > 0) {
			d.deadline = s->t_submitted + s->running_timeout_s;
			d.overdue = now > d.deadline;
		}
	} else {
		d.what = DUE_READY;
		d.deadline = s->t_running + s->ready_timeout_s;
		d.overdue = now > d.deadline;
	}
	return d;
}

/* Every machine of a starting session on by one look (the Running phase,
 * then the ready flag; a machine that just runs gets its first look for the
 * flag at once), then the session's own stage and times: running when every
 * machine runs, ready when every machine is. Each machine has its deadlines:
 * Running within running_timeout_s of the submission, the ready flag within
 * ready_timeout_s of its own Running; the first machine to miss one fails
 * the session, naming it. */
static int advance_machines(struct labctx *x, struct session *s)
{
	double now = s->t_now;
	int moved = 0;

	for (size_t i = 0; i < s->nvms; i++) {
		struct session_vm *vm = &s->vms[i];
		enum look rc;
		if (vm->deleted || vm->ready_at)
			continue;
		/* a row from before per-machine readiness: the session's times are its own */
		int running = vm->running_at || (s->nvms == 1 && s->running_at);
		double t_running = vm->t_running ? vm->t_running : s->t_running;
		if (!running) {
			int overdue =
			    s->t_submitted > 0 && now > s->t_submitted + s->running_timeout_s;
			rc = advance_running(x, s, vm, overdue);
			if (rc == LOOK_DBERR)
				return -1;
			if (rc == LOOK_FAILED)
				return 0; /* finished and reloaded */
			if (rc != LOOK_MOVED)
				continue;
			moved = 1;
			running = 1;
			t_running = now;
		}
		rc = advance_ready(x, s, vm, t_running > 0 && now > t_running + s->ready_timeout_s);
		if (rc == LOOK_DBERR)
			return -1;
		if (rc == LOOK_FAILED)
			return 0;
		moved |= rc == LOOK_MOVED;
	}
	if (moved && reload(x, s) < 0)
		return -1;

	int all_running = s->nvms > 0, all_ready = s->nvms > 0;
	enum session_stage least = STAGE_READY;
	for (size_t i = 0; i < s->nvms; i++) {
		const struct session_vm *vm = &s->vms[i];
		int running = vm->running_at || (s->nvms == 1 && s->running_at);
		all_running &= running;
		all_ready &= vm->ready_at != NULL;
		if (!running && (enum session_stage)vm->stage < least)
			least = (enum session_stage)vm->stage;
	}
	const char *p[1] = {s->id};
	if (all_ready) {
		if (db_cmd(
		        &x->db,
		        "UPDATE sessions SET running_at = coalesce(running_at, clock_timestamp()), "
		        "ready_at = clock_timestamp(), state = 'ready', stage = 'ready', "
		        /* the lesson's minutes count from the moment the lab is usable */
		        "expires_at = clock_timestamp() + (expires_at - created_at) "
		        "WHERE id = $1::uuid AND state = 'starting' AND ready_at IS NULL",
		        1, p) < 0)
			return -1;
		return reload(x, s);
	}
	if (all_running) {
		if (!s->running_at) {
			if (db_cmd(
			        &x->db,
			        "UPDATE sessions SET running_at = clock_timestamp(), "
			        "stage = 'setting_up' "
			        "WHERE id = $1::uuid AND state = 'starting' AND running_at IS NULL",
			        1, p) < 0)
				return -1;
			return reload(x, s);
		}
		return 0;
	}
	set_stage(x, s, least);
	return 0;
}

int session_advance(struct labctx *x, struct session *s)
{
	struct session_due d = session_due(s, s->t_now);
	switch (d.what) {
	case DUE_NOTHING:
		return 0;
	case DUE_EXPIRE:
		return session_finish(x, s, SESSION_ENDED, "expired", NULL);
	case DUE_NO_VM:
		return fail(x, s, NULL, "the session has no VM");
	case DUE_RUNNING:
		if (s->runtime == RUNTIME_POD) {
			/* one Pod: its phase, then its Ready condition (the kubelet's probe) */
			if (advance_running_pod(x, s, &s->vms[0], d.overdue) < 0)
				return -1;
			d = session_due(s, s->t_now); /* Running just now: look for Ready at once */
			if (d.what != DUE_READY)
				return 0;
			return advance_ready_pod(x, s, &s->vms[0], d.overdue);
		}
		/* fall through */
	case DUE_READY:
		if (s->runtime == RUNTIME_POD)
			return advance_ready_pod(x, s, &s->vms[0], d.overdue);
		break;
	}
	/* At most one probe (cluster, agents) in flight per session: the other
	 * polls answer from the last known state. The lease outlives the longest
	 * probe of every machine; a holder that died lets it run out. */
	const struct cfg *c = x->cfg;
	char *id = xstrdup(s->id);
	long lease_ms =
	    (long)(s->nvms ? s->nvms : 1) * (3L * c->kube_timeout_ms + c->agent_ready_timeout_ms) +
	    1000;
	int got = session_lease_take(x, id, LEASE_PROBE, lease_ms);
	int rc = got < 0 ? -1 : 0;
	if (got > 0) {
		rc = advance_machines(x, s);
		session_lease_release(x, id, LEASE_PROBE);
	}
	free(id);
	return rc;
}
