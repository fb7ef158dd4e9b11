/* pool_tick.c - keeping the warm pool (pgbouncer's janitor; see pool.h):
 * freshness (lesson changed, gone, too old), readiness of starting VMs, VMs
 * gone from the cluster, surplus, then the fill, each VM made by
 * provision() once admission_decide() lets the pool take a seat. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "admission.h"
#include "jsonx.h"
#include "locks.h"
#include "log.h"
#include "pool.h"
#include "pool_vm.h"
#include "provision.h"
#include "queue.h"
#include "util.h"
#include "vmi.h"

/* Make one pool VM of lesson l, admitted under the capacity lock.
 * 1 made, 0 capacity full (or the line waits for the seats), -1 failed. */
static int create_one(struct labctx *x, const struct lesson *l)
{
	const struct cfg *c = x->cfg;
	const struct runtime_ops *rt = POOL_RUNTIME;
	struct lab_plan p;
	struct admission_facts f;
	struct admission a;
	char why[1024] = "";
	int rc = -1;

	/* the same plan and golden decision as a session's start */
	lab_plan_init(&p, l);
	lab_plan_disks(x, &p, "pool:");
	if (lab_plan_name_pool(&p) < 0) {
		lab_plan_free(&p);
		return -1;
	}
	struct lab_machine *v = &p.vms[0];
	admission_facts_init(&f, ADM_POOL_FILL, 1, rt->capacity(c));
	if (db_begin(&x->db) < 0)
		goto out;
	for (;;) {
		a = admission_decide(&f);
		if (a.verdict == ADM_NEED_LOCK) {
			const char *pk[1] = {rt->capacity_key};
			if (db_cmd(&x->db,
			           "SELECT pg_advisory_xact_lock(" LOCK_CAPACITY ", $1::int)", 1,
			           pk) < 0)
				goto out;
			f.locked = 1;
			f.in_use = ADM_UNKNOWN;
		} else if (a.verdict == ADM_NEED_COUNT) {
			long n = 0;
			f.in_use = lab_count(x, rt, &n) == 200 ? n : ADM_COUNT_FAILED;
		} else if (a.verdict == ADM_NEED_LINE) {
			/* students waiting for these seats come first */
			f.line_ahead = queue_seats_ahead(x, rt->name, NULL);
			if (f.line_ahead < 0)
				goto out;
		} else {
			break;
		}
	}
	if (a.verdict == ADM_REFUSE_CLUSTER) {
		snprintf(why, sizeof why, "cannot count lab VMs: %s", x->kube.msg);
		goto out;
	}
	if (a.verdict != ADM_ADMIT) {
		rc = 0;
		goto out;
	}
	const char *pr[7] = {v->names.vm, v->secret, c->environment,          l->id,
	                     l->hash,     v->token,  lesson_disk_str(v->disk)};
	const char *pf[2] = {v->names.vm, v->fallback};
	if (db_cmd(&x->db,
	           "INSERT INTO pool_vms (vm_name, secret_name, environment, lesson, lesson_hash, "
	           "agent_token, disk_source) VALUES ($1, $2, $3, $4, $5, $6, $7)",
	           7, pr) < 0 ||
	    db_cmd(&x->db, "UPDATE pool_vms SET disk_fallback_reason = $2 WHERE vm_name = $1", 2,
	           pf) < 0)
		goto out;
	/* the same objects as a session's VM */
	if (provision(x, &p, why, sizeof why) < 0)
		goto out;
	if (db_commit(&x->db) < 0) {
		snprintf(why, sizeof why, "database: %s", x->db.msg);
		goto out;
	}
	p.created = 0;
	rc = 1;
	log_info("pool: lesson %s: VM %s submitted (disk %s%s%s, %ld/%d in use)", l->id,
	         v->names.vm, lesson_disk_str(v->disk), v->fallback ? ", fallback " : "",
	         v->fallback ? v->fallback : "", f.in_use + 1, rt->capacity(c));
out:
	if (p.created)
		provision_undo(x, &p);
	if (rc != 1)
		db_rollback(&x->db);
	if (rc < 0)
		log_warn("pool: lesson %s: making a pool VM failed, nothing left behind: %s", l->id,
		         why[0] ? why : x->db.msg);
	lab_plan_free(&p);
	return rc;
}

struct prow {
	char vm[64], secret[64], lesson[64], hash[48], ip[64], token[80];
	enum pool_vm_state state;
	int has_ip;
	double age;
};

static int load_rows(struct labctx *x, const char *only, struct prow **out, size_t *n)
{
	const char *p[2] = {x->cfg->environment, only};
	PGresult *r =
	    db_exec(&x->db,
	            "SELECT vm_name, secret_name, lesson, lesson_hash, state, ip, "
	            "agent_token, extract(epoch from clock_timestamp() - created_at) "
	            "FROM pool_vms WHERE environment = $1 "
	            "AND state IN ('starting', 'ready') AND ($2::text IS NULL OR lesson = $2) "
	            "ORDER BY created_at",
	            2, p);
	if (!r)
		return -1;
	*n = (size_t)PQntuples(r);
	*out = xcalloc(*n + 1, sizeof **out);
	for (size_t i = 0; i < *n; i++) {
		struct prow *w = &(*out)[i];
		int ri = (int)i;
		snprintf(w->vm, sizeof w->vm, "%s", PQgetvalue(r, ri, 0));
		snprintf(w->secret, sizeof w->secret, "%s", PQgetvalue(r, ri, 1));
		snprintf(w->lesson, sizeof w->lesson, "%s", PQgetvalue(r, ri, 2));
		snprintf(w->hash, sizeof w->hash, "%s", PQgetvalue(r, ri, 3));
		int st = pool_vm_state_parse(PQgetvalue(r, ri, 4));
		w->state = st < 0 ? POOL_VM_STARTING : (enum pool_vm_state)st;
		w->has_ip = db_val(r, ri, 5) != NULL;
		snprintf(w->ip, sizeof w->ip, "%s", w->has_ip ? PQgetvalue(r, ri, 5) : "");
		snprintf(w->token, sizeof w->token, "%s", PQgetvalue(r, ri, 6));
		w->age = strtod(PQgetvalue(r, ri, 7), NULL);
	}
	PQclear(r);
	return 0;
}

/* The names of this environment's pool VMs in the cluster. */
static cJSON *cluster_pool_vms(struct labctx *x)
{
	const struct cfg *c = x->cfg;
	char *path = kube_path(POOL_RUNTIME->kind, c->namespace_, NULL);
	char *sel = xasprintf("%s=true,%s=%s,%s", c->label.lab_session, c->label.environment,
	                      c->environment, c->label.pool);
	cJSON *list = NULL;
	long code = kube_list(&x->kube, path, sel, &list);
	free(sel);
	free(path);
	if (code != 200 || !cJSON_IsArray(kj_get(list, "items"))) {
		cJSON_Delete(list);
		return NULL;
	}
	return list;
}

static int in_list(const cJSON *list, const char *name)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, kj_get(list, "items"))
	{
		const char *n = kj_str(it, "metadata.name");
		if (n && strcmp(n, name) == 0)
			return 1;
	}
	return 0;
}

/* A starting pool VM: ready now? failed? past its deadline? 1 live, 0 retired, -1 db. */
static int check_starting(struct labctx *x, const struct lesson *l, struct prow *w,
                          struct pool_counts *k)
{
	const struct cfg *c = x->cfg;
	int overdue = w->age > l->running_timeout_s + l->ready_timeout_s;
	char *path = kube_path("virtualmachineinstances", c->namespace_, w->vm);
	cJSON *vmi = NULL, *detail = NULL;
	long code = kube_get(&x->kube, path, &vmi);
	const char *phase = code == 200 ? kj_str(vmi, "status.phase") : NULL;
	const char *ip = vmi_address(vmi);
	int rc = 1;
	free(path);

	if (phase && (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0)) {
		char e[128];
		snprintf(e, sizeof e, "the VM stopped before the lab was ready (VMI phase %s)",
		         phase);
		rc = pool_retire(x, w->vm, w->secret, "not_ready", e) < 0 ? -1 : 0;
		k->failed += rc == 0;
		goto out;
	}
	if (phase && strcmp(phase, "Running") == 0 && ip) {
		if (!w->has_ip) {
			const char *p[2] = {w->vm, ip};
			db_cmd(&x->db, "UPDATE pool_vms SET ip = $2 WHERE vm_name = $1", 2, p);
			snprintf(w->ip, sizeof w->ip, "%s", ip);
			w->has_ip = 1;
		}
		enum agent_ready a = agent_ready(&x->agent, w->ip, c->agent_port, w->token,
		                                 c->agent_ready_timeout_ms, &detail);
		if (a == AGENT_READY) {
			assert(w->state == POOL_VM_STARTING);
			const char *p[3] = {w->vm, pool_vm_state_str(POOL_VM_READY),
			                    pool_vm_state_str(POOL_VM_STARTING)};
			if (db_cmd(&x->db,
			           "UPDATE pool_vms SET state = $2, ready_at = clock_timestamp() "
			           "WHERE vm_name = $1 AND state = $3",
			           3, p) < 0)
				rc = -1;
			else
				k->became_ready++;
			w->state = POOL_VM_READY;
			goto out;
		}
		const char *st = kj_str(detail, "state");
		if (st && strcmp(st, "setup_failed") == 0) {
			const cJSON *ec = cJSON_GetObjectItemCaseSensitive(detail, "exit_code");
			const char *tail = kj_str(detail, "log_tail");
			/* formatted whole: retire() makes it valid and cuts it */
			char *e = xasprintf("the lab setup failed with exit code %d%s%s",
			                    cJSON_IsNumber(ec) ? ec->valueint : -1,
			                    tail && *tail ? ": " : "", tail ? tail : "");
			rc = pool_retire(x, w->vm, w->secret, "setup_failed", e) < 0 ? -1 : 0;
			free(e);
			k->failed += rc == 0;
			goto out;
		}
	}
	if (overdue) {
		char e[160];
		snprintf(e, sizeof e, "not ready %d s after it was made (VMI phase %s)",
		         l->running_timeout_s + l->ready_timeout_s, phase ? phase : "none");
		rc = pool_retire(x, w->vm, w->secret, "not_ready", e) < 0 ? -1 : 0;
		k->failed += rc == 0;
	}
out:
	cJSON_Delete(vmi);
	cJSON_Delete(detail);
	return rc;
}

/* Is the pool allowed to grow (no seat yielded to a student lately)? */
static int may_grow(struct labctx *x)
{
	char hold[16];
	snprintf(hold, sizeof hold, "%d", x->cfg->pool_yield_hold_s);
	const char *p[2] = {x->cfg->environment, hold};
	PGresult *r = db_exec(&x->db,
	                      "SELECT 1 FROM pool_vms WHERE environment = $1 "
	                      "AND delete_reason = 'yielded' "
	                      "AND deleted_at > clock_timestamp() - make_interval(secs => $2::int) "
	                      "LIMIT 1",
	                      2, p);
	if (!r)
		return -1;
	int n = PQntuples(r);
	PQclear(r);
	return n == 0;
}

static int tick(struct labctx *x, const char *only_lesson, struct pool_counts *k, int wait)
{
	const struct lessons *ls = x->lessons;
	struct prow *rows = NULL;
	size_t n = 0;
	int rc = 0;

	/* one upkeep at a time (reaper, labvm-pool, after a claim, other hosts):
	 * two at once would both fill the same gap */
	const char *pe[1] = {x->cfg->environment};
	if (wait) {
		if (db_cmd(&x->db, "SELECT pg_advisory_lock(" LOCK_POOL ", hashtext($1))", 1, pe) <
		    0)
			return -1;
	} else {
		PGresult *lr = db_exec(
		    &x->db, "SELECT pg_try_advisory_lock(" LOCK_POOL ", hashtext($1))", 1, pe);
		if (!lr)
			return -1;
		int got = PQgetvalue(lr, 0, 0)[0] == 't';
		PQclear(lr);
		if (!got)
			return POOL_TICK_BUSY; /* someone else is ticking */
	}
	if (load_rows(x, only_lesson, &rows, &n) < 0) {
		db_cmd(&x->db, "SELECT pg_advisory_unlock(" LOCK_POOL ", hashtext($1))", 1, pe);
		return -1;
	}
	/* listed after the rows: every row's VM was made before this list */
	cJSON *list = n ? cluster_pool_vms(x) : NULL;
	if (n && !list) {
		log_err("pool: listing pool VMs failed: %s; nothing deleted", x->kube.msg);
		k->errors++;
		rc = -1;
		goto out;
	}
	int *live = xcalloc(ls->n + 1, sizeof *live);
	for (size_t i = 0; i < n; i++) {
		struct prow *w = &rows[i];
		const struct lesson *l = lessons_find(ls, w->lesson);
		const char *reason = NULL;
		if (!l || !pool_lesson(l))
			reason = "lesson_gone";
		else if (strcmp(l->hash, w->hash) != 0)
			reason = "lesson_changed";
		else if (w->age > x->cfg->pool_max_age_s)
			reason = "too_old";
		if (reason) {
			int d = pool_retire(x, w->vm, w->secret, reason, NULL);
			if (d < 0)
				rc = -1;
			k->stale += d > 0;
			continue;
		}
		if (!in_list(list, w->vm)) {
			/* gone, or claimed meanwhile (relabelled: no pool label any
			 * more): retire() touches only a row that is still idle, so a
			 * student's VM is never deleted here */
			int d = pool_retire(x, w->vm, w->secret, "vanished", NULL);
			if (d < 0)
				rc = -1;
			k->vanished += d > 0;
			continue;
		}
		int st = w->state == POOL_VM_READY ? 1 : check_starting(x, l, w, k);
		if (st < 0)
			rc = -1;
		if (st == 1)
			live[l - ls->v]++;
	}
	/* surplus (a warm request ended), then fill up to each target */
	for (size_t j = 0; j < ls->n; j++) {
		const struct lesson *l = &ls->v[j];
		if (only_lesson && strcmp(l->id, only_lesson) != 0)
			continue;
		int target = pool_target(x, l);
		if (target < 0) {
			rc = -1;
			continue;
		}
		/* newest first: the oldest ones go first; starting ones before ready ones */
		for (size_t i = n; live[j] > target && i-- > 0;) {
			struct prow *w = &rows[i];
			if (strcmp(w->lesson, l->id) != 0 || w->state == POOL_VM_READY)
				continue;
			if (pool_retire(x, w->vm, w->secret, "surplus", NULL) > 0) {
				live[j]--;
				k->surplus++;
				w->lesson[0] = '\0';
			}
		}
		for (size_t i = 0; live[j] > target && i < n; i++) {
			struct prow *w = &rows[i];
			if (strcmp(w->lesson, l->id) != 0)
				continue;
			if (pool_retire(x, w->vm, w->secret, "surplus", NULL) > 0) {
				live[j]--;
				k->surplus++;
			}
		}
		if (live[j] >= target)
			continue;
		int grow = may_grow(x);
		if (grow <= 0) {
			k->held += grow == 0;
			rc = grow < 0 ? -1 : rc;
			continue;
		}
		while (live[j] < target) {
			int c = create_one(x, l);
			if (c == 0) {
				k->full++;
				break;
			}
			if (c < 0) {
				k->errors++;
				break;
			}
			k->created++;
			live[j]++;
		}
	}
	free(live);
out:
	for (size_t i = 0; i < n; i++)
		OPENSSL_cleanse(rows[i].token, sizeof rows[i].token);
	free(rows);
	cJSON_Delete(list);
	if (db_cmd(&x->db, "SELECT pg_advisory_unlock(" LOCK_POOL ", hashtext($1))", 1, pe) < 0)
		rc = -1;
	return rc;
}

int pool_tick(struct labctx *x, const char *only_lesson, struct pool_counts *k)
{
	return tick(x, only_lesson, k, 1);
}

int pool_tick_try(struct labctx *x, const char *only_lesson, struct pool_counts *k)
{
	return tick(x, only_lesson, k, 0);
}

void pool_after_request(struct labctx *x)
{
	struct pool_counts k = {0};
	char lesson[64];
	if (!x->pool_after[0])
		return;
	snprintf(lesson, sizeof lesson, "%s", x->pool_after);
	db_rollback(&x->db); /* no transaction left open by the request */
	/* never wait for the lock: a reaper's or another claim's tick may hold
	 * it for seconds, and this worker is wanted for the next request */
	int rc = pool_tick_try(x, lesson, &k);
	if (rc == POOL_TICK_BUSY) {
		/* a tick that began before this claim may not see it: look again
		 * after this worker's next request (the reaper's tick, at worst) */
		log_debug("pool: lesson %s: another tick holds the pool lock; skipped", lesson);
		return;
	}
	x->pool_after[0] = '\0';
	if (rc < 0)
		log_warn("pool: lesson %s: the tick after a claim was incomplete", lesson);
}
