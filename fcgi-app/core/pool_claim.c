/* pool_claim.c - the admission's side of the warm pool (see pool.h): a
 * press claims a ready pool VM, and a cold start refused for capacity makes
 * idle ones yield their seats. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "jsonx.h"
#include "log.h"
#include "pool.h"
#include "pool_vm.h"
#include "provision.h"
#include "session_change.h"
#include "util.h"
#include "vmi.h"

#define CLAIM_TRIES    4
#define CLAIM_AGENT_MS 1000 /* the claim's look at a pool VM's agent */

struct cand {
	char vm[64], secret[64], ip[64], disk[32], fallback[32];
	char token[80];
	int has_ip, has_fallback;
	enum pool_vm_state state;
};

static int next_candidate(struct labctx *x, const struct lesson *l, const char *tried,
                          struct cand *cd)
{
	char age[16];
	snprintf(age, sizeof age, "%d", x->cfg->pool_max_age_s);
	const char *p[5] = {x->cfg->environment, l->id, l->hash, tried, age};
	PGresult *r = db_exec(
	    &x->db,
	    "SELECT vm_name, secret_name, agent_token, ip, disk_source, disk_fallback_reason, "
	    "state FROM pool_vms WHERE environment = $1 AND lesson = $2 "
	    "AND lesson_hash = $3 AND state IN ('ready', 'starting') "
	    "AND NOT (vm_name = ANY ($4::text[])) "
	    "AND created_at > clock_timestamp() - make_interval(secs => $5::int) "
	    "ORDER BY state = 'ready' DESC, ready_at, created_at LIMIT 1 FOR UPDATE SKIP LOCKED",
	    5, p);
	if (!r)
		return POOL_DBERR;
	if (PQntuples(r) == 0) {
		PQclear(r);
		return POOL_NONE;
	}
	memset(cd, 0, sizeof *cd);
	snprintf(cd->vm, sizeof cd->vm, "%s", PQgetvalue(r, 0, 0));
	snprintf(cd->secret, sizeof cd->secret, "%s", PQgetvalue(r, 0, 1));
	snprintf(cd->token, sizeof cd->token, "%s", PQgetvalue(r, 0, 2));
	cd->has_ip = db_val(r, 0, 3) != NULL;
	snprintf(cd->ip, sizeof cd->ip, "%s", cd->has_ip ? PQgetvalue(r, 0, 3) : "");
	snprintf(cd->disk, sizeof cd->disk, "%s", PQgetvalue(r, 0, 4));
	cd->has_fallback = db_val(r, 0, 5) != NULL;
	snprintf(cd->fallback, sizeof cd->fallback, "%s",
	         cd->has_fallback ? PQgetvalue(r, 0, 5) : "");
	int st = pool_vm_state_parse(PQgetvalue(r, 0, 6));
	cd->state = st < 0 ? POOL_VM_STARTING : (enum pool_vm_state)st;
	PQclear(r);
	return POOL_CLAIMED;
}

/* The VMI's address, when it is Running. */
static int vmi_running_address(struct labctx *x, const char *vm, char *ip, size_t n)
{
	char *path = kube_path("virtualmachineinstances", x->cfg->namespace_, vm);
	cJSON *vmi = NULL;
	int ok = 0;
	if (kube_get(&x->kube, path, &vmi) == 200) {
		const char *phase = kj_str(vmi, "status.phase");
		const char *a = vmi_address(vmi);
		if (phase && strcmp(phase, "Running") == 0 && a) {
			snprintf(ip, n, "%s", a);
			ok = 1;
		}
	}
	cJSON_Delete(vmi);
	free(path);
	return ok;
}

/* Is the candidate's guest ready right now (its agent says so)? */
static int candidate_ready(struct labctx *x, struct cand *cd)
{
	if (!cd->has_ip) {
		if (!vmi_running_address(x, cd->vm, cd->ip, sizeof cd->ip))
			return 0;
		cd->has_ip = 1;
	}
	int ms = x->cfg->agent_ready_timeout_ms < CLAIM_AGENT_MS ? x->cfg->agent_ready_timeout_ms
	                                                         : CLAIM_AGENT_MS;
	return agent_ready(&x->agent, cd->ip, x->cfg->agent_port, cd->token, ms, NULL) ==
	       AGENT_READY;
}

/* The rows of a claim: the pool VM claimed, the session inserted ready. */
static int claim_rows(struct labctx *x, const struct lesson *l, const char *user, double pressed,
                      struct cand *cd, const char *sid)
{
	assert(cd->state == POOL_VM_READY || cd->state == POOL_VM_STARTING);
	const char *pc[4] = {cd->vm, sid, cd->ip, pool_vm_state_str(POOL_VM_CLAIMED)};
	struct claimed_vm v = {cd->vm, cd->secret, cd->token,
	                       cd->ip, cd->disk,   cd->has_fallback ? cd->fallback : NULL};
	if (db_cmd(&x->db,
	           "UPDATE pool_vms SET state = $4, claimed_at = clock_timestamp(), "
	           "session_id = $2::uuid, ip = COALESCE(ip, $3) WHERE vm_name = $1",
	           4, pc) < 0 ||
	    session_create_claimed(x, sid, user, l, pressed, &v) < 0)
		return -1;
	cd->state = POOL_VM_CLAIMED;
	return 0;
}

/* {"metadata": {"labels": {session-id: sid, pool: null, lesson-hash: null}}} */
static cJSON *relabel_patch(const struct cfg *c, const char *sid)
{
	cJSON *p = jx_obj();
	cJSON *labels = jx_add_obj(jx_add_obj(p, "metadata"), "labels");
	jx_add_str(labels, c->label.session_id, sid);
	jx_add_null(labels, c->label.pool);
	jx_add_null(labels, c->label.lesson_hash);
	return p;
}

/* Relabel the VM and its Secret as the session's: 0 ok, -1 the VM could not be. */
static int relabel(struct labctx *x, const struct cand *cd, const char *sid)
{
	cJSON *patch = relabel_patch(x->cfg, sid);
	char *vpath = kube_path(POOL_RUNTIME->kind, x->cfg->namespace_, cd->vm);
	char *spath = kube_path("secrets", x->cfg->namespace_, cd->secret);
	int rc = 0;
	if (kube_merge_patch(&x->kube, vpath, patch, NULL) != 200) {
		log_warn("pool: relabelling VM %s failed: %s", cd->vm, x->kube.msg);
		rc = -1;
	} else if (kube_merge_patch(&x->kube, spath, patch, NULL) != 200) {
		/* the VM is the session's; the Secret stays the pool's until the
		 * session ends (pool_owns keeps it for the reaper meanwhile) */
		log_warn("pool: relabelling Secret %s failed: %s", cd->secret, x->kube.msg);
	}
	cJSON_Delete(patch);
	free(vpath);
	free(spath);
	return rc;
}

int pool_claim(struct labctx *x, const struct lesson *l, const char *user, double pressed,
               char sid[37])
{
	struct buf tried = {0};
	struct cand cd;
	int rc = POOL_NONE;

	if (!pool_lesson(l))
		return POOL_NONE;
	memset(&cd, 0, sizeof cd);
	buf_puts(&tried, "{");
	for (int i = 0; i < CLAIM_TRIES; i++) {
		buf_puts(&tried, "}");
		int n = next_candidate(x, l, tried.p, &cd);
		tried.len--;
		tried.p[tried.len] = '\0';
		if (n != POOL_CLAIMED) {
			rc = n;
			break;
		}
		buf_printf(&tried, "%s%s", i ? "," : "", cd.vm);
		if (!candidate_ready(x, &cd)) {
			/* a ready row whose guest does not answer: the tick after this
			 * request looks again and replaces it */
			if (cd.state == POOL_VM_READY)
				snprintf(x->pool_after, sizeof x->pool_after, "%s", l->id);
			continue;
		}
		/* a preset sid (a place of the waiting line) is kept */
		if ((!sid[0] && util_uuid4(sid) < 0) ||
		    db_cmd(&x->db, "SAVEPOINT pool_claim", 0, NULL) < 0) {
			rc = POOL_DBERR;
			break;
		}
		if (claim_rows(x, l, user, pressed, &cd, sid) < 0) {
			rc = POOL_DBERR;
			break;
		}
		if (relabel(x, &cd, sid) < 0) {
			if (db_cmd(&x->db, "ROLLBACK TO SAVEPOINT pool_claim", 0, NULL) < 0) {
				rc = POOL_DBERR;
				break;
			}
			continue;
		}
		log_info("user %s lesson %s: session %s claimed pool VM %s", user, l->id, sid,
		         cd.vm);
		/* the replacement is made after the answer went out */
		snprintf(x->pool_after, sizeof x->pool_after, "%s", l->id);
		rc = POOL_CLAIMED;
		break;
	}
	OPENSSL_cleanse(cd.token, sizeof cd.token);
	buf_free(&tried);
	return rc;
}

long pool_idle(struct labctx *x)
{
	const char *p[3] = {x->cfg->environment, pool_vm_state_str(POOL_VM_STARTING),
	                    pool_vm_state_str(POOL_VM_READY)};
	PGresult *r = db_exec(&x->db,
	                      "SELECT count(*) FROM pool_vms WHERE environment = $1 "
	                      "AND state IN ($2, $3)",
	                      3, p);
	if (!r)
		return -1;
	long n = strtol(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	return n;
}

int pool_yield(struct labctx *x, const char *for_lesson, int seats, int need)
{
	const struct cfg *c = x->cfg;
	char n[16];
	snprintf(n, sizeof n, "%d", seats);
	const char *p[3] = {c->environment, for_lesson, n};

	if (seats < 1)
		return 0;
	if (db_begin(&x->db) < 0)
		return -1;
	PGresult *r = db_exec(&x->db,
	                      "SELECT vm_name, secret_name FROM pool_vms WHERE environment = $1 "
	                      "AND state IN ('starting', 'ready') "
	                      "ORDER BY lesson = $2, state = 'ready', created_at LIMIT $3::int "
	                      "FOR UPDATE SKIP LOCKED",
	                      3, p);
	if (!r) {
		db_rollback(&x->db);
		return -1;
	}
	int rows = PQntuples(r);
	if (rows < seats) {
		/* all or none: fewer would delete pool VMs for a start that still
		 * does not fit */
		PQclear(r);
		db_rollback(&x->db);
		return 0;
	}
	char(*vm)[64] = xcalloc((size_t)rows, sizeof *vm);
	char(*secret)[64] = xcalloc((size_t)rows, sizeof *secret);
	int rc = 1;
	for (int i = 0; i < rows; i++) {
		snprintf(vm[i], sizeof vm[i], "%s", PQgetvalue(r, i, 0));
		snprintf(secret[i], sizeof secret[i], "%s", PQgetvalue(r, i, 1));
		const char *pv[2] = {vm[i], pool_vm_state_str(POOL_VM_DELETED)};
		if (rc > 0 &&
		    db_cmd(&x->db,
		           "UPDATE pool_vms SET state = $2, deleted_at = clock_timestamp(), "
		           "delete_reason = 'yielded' WHERE vm_name = $1",
		           2, pv) < 0)
			rc = -1;
	}
	PQclear(r);
	if (rc < 0 || db_commit(&x->db) < 0) {
		db_rollback(&x->db);
		free(vm);
		free(secret);
		return -1;
	}
	for (int i = 0; i < rows; i++) {
		lab_delete(x, POOL_RUNTIME->kind, vm[i], "pool");
		lab_delete(x, "secrets", secret[i], "pool");
		log_info("pool: VM %s yielded its seat to a start of lesson %s", vm[i], for_lesson);
	}
	free(vm);
	free(secret);
	/* the seats are free when the VMs are gone (terminating ones count) */
	double until = util_mono_s() + c->pool_yield_wait_s;
	for (;;) {
		long in_use = 0;
		if (lab_count(x, POOL_RUNTIME, &in_use) == 200 &&
		    in_use + need <= POOL_RUNTIME->capacity(c))
			break;
		if (util_mono_s() >= until)
			break;
		usleep(100 * 1000);
	}
	return 1;
}
