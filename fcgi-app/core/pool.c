/* pool.c - the warm pool (see pool.h). */
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "cloudinit.h"
#include "golden.h"
#include "jsonx.h"
#include "locks.h"
#include "log.h"
#include "manifest.h"
#include "util.h"

#define CLAIM_TRIES    4
#define CLAIM_AGENT_MS 1000 /* the claim's look at a pool VM's agent */
#define POOL_ERROR_MAX 1023 /* bytes of a retired VM's error kept in its row */

/* ------------------------------------------------------------ helpers */

static long count_lab_vms(struct labctx *x, long *in_use)
{
	char *path = kube_path("virtualmachines", x->cfg->namespace_, NULL);
	char *sel = xasprintf("%s=true", x->cfg->label.lab_session);
	long code = kube_count(&x->kube, path, sel, in_use);
	free(sel);
	free(path);
	return code;
}

static void delete_objects(struct labctx *x, const char *vm, const char *secret)
{
	const char *kinds[2] = {"virtualmachines", "secrets"};
	const char *names[2] = {vm, secret};
	for (int i = 0; i < 2; i++) {
		char *path = kube_path(kinds[i], x->cfg->namespace_, names[i]);
		if (!kube_delete(&x->kube, path, "Background"))
			log_warn("pool: deleting %s %s failed: %s (the reaper will retry)",
			         kinds[i], names[i], x->kube.msg);
		free(path);
	}
}

/* Retire an idle pool VM: the row first (only if still idle: a claim that
 * holds the row wins, and this waits for it), then the cluster objects.
 * 1 deleted, 0 someone claimed it meanwhile, -1 db. */
static int retire(struct labctx *x, const char *vm, const char *secret, const char *reason,
                  const char *error)
{
	static const char sql[] =
	    "UPDATE pool_vms SET state = 'deleted', deleted_at = clock_timestamp(), "
	    "delete_reason = $2, error = $3 "
	    "WHERE vm_name = $1 AND state IN ('starting', 'ready') RETURNING 1";
	/* the guest's text (a setup's log tail): valid UTF-8, cut on a character */
	char *clean = error ? utf8_clean_dup(error, strlen(error), POOL_ERROR_MAX) : NULL;
	const char *p[3] = {vm, reason, clean};
	PGresult *r = db_exec(&x->db, sql, 3, p);
	if (!r && clean && !x->db.broken) {
		/* refused anyway: retired without it (else it stays, failing, every tick) */
		log_warn("pool: storing VM %s's error failed (%s); retiring it without", vm,
		         x->db.msg);
		p[2] = NULL;
		r = db_exec(&x->db, sql, 3, p);
	}
	int n = r ? PQntuples(r) : 0;
	PQclear(r);
	if (n > 0) {
		delete_objects(x, vm, secret);
		log_info("pool: deleted VM %s (%s)%s%s", vm, reason, clean ? ": " : "",
		         clean ? clean : "");
	}
	free(clean);
	return r ? n > 0 : -1;
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

/* ------------------------------------------------------------ claim */

struct cand {
	char vm[64], secret[64], ip[64], disk[32], fallback[32];
	char token[80];
	int has_ip, has_fallback, ready;
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
	    "state = 'ready' FROM pool_vms WHERE environment = $1 AND lesson = $2 "
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
	cd->ready = PQgetvalue(r, 0, 6)[0] == 't';
	PQclear(r);
	return POOL_CLAIMED;
}

/* The VMI's address, when it is Running. */
static int vmi_ip(struct labctx *x, const char *vm, char *ip, size_t n)
{
	char *path = kube_path("virtualmachineinstances", x->cfg->namespace_, vm);
	cJSON *vmi = NULL;
	int ok = 0;
	if (kube_get(&x->kube, path, &vmi) == 200) {
		const char *phase = kj_str(vmi, "status.phase");
		const char *a = kj_str(vmi, "status.interfaces.0.ipAddress");
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
		if (!vmi_ip(x, cd->vm, cd->ip, sizeof cd->ip))
			return 0;
		cd->has_ip = 1;
	}
	int ms = x->cfg->agent_ready_timeout_ms < CLAIM_AGENT_MS ? x->cfg->agent_ready_timeout_ms
	                                                         : CLAIM_AGENT_MS;
	return agent_ready(&x->agent, cd->ip, x->cfg->agent_port, cd->token, ms, NULL) ==
	       AGENT_READY;
}

static int take(struct labctx *x, const struct lesson *l, const char *user, double pressed,
                const struct cand *cd, const char *sid)
{
	char t[32], minutes[16], rto[16], yto[16];
	snprintf(t, sizeof t, "%.6f", pressed);
	snprintf(minutes, sizeof minutes, "%d", l->minutes);
	snprintf(rto, sizeof rto, "%d", l->running_timeout_s);
	snprintf(yto, sizeof yto, "%d", l->ready_timeout_s);
	const char *pc[3] = {cd->vm, sid, cd->ip};
	const char *ps[11] = {sid,      user,
	                      l->id,    x->cfg->environment,
	                      cd->disk, cd->has_fallback ? cd->fallback : NULL,
	                      rto,      yto,
	                      t,        minutes,
	                      cd->vm};
	const char *pv[7] = {sid,
	                     cd->vm,
	                     cd->secret,
	                     cd->token,
	                     cd->ip,
	                     cd->disk,
	                     cd->has_fallback ? cd->fallback : NULL};
	if (db_cmd(&x->db,
	           "UPDATE pool_vms SET state = 'claimed', claimed_at = clock_timestamp(), "
	           "session_id = $2::uuid, ip = COALESCE(ip, $3) WHERE vm_name = $1",
	           3, pc) < 0 ||
	    db_cmd(&x->db,
	           "INSERT INTO sessions (id, user_name, lesson, runtime, environment, state, "
	           "stage, disk_source, disk_fallback_reason, running_timeout_s, "
	           "ready_timeout_s, created_at, submitted_at, running_at, ready_at, expires_at, "
	           "pool_vm) VALUES ($1::uuid, $2, $3, 'vm', $4, 'ready', 'ready', $5, $6, "
	           "$7::int, $8::int, to_timestamp($9::float8), clock_timestamp(), "
	           "clock_timestamp(), clock_timestamp(), "
	           "clock_timestamp() + make_interval(mins => $10::int), $11)",
	           11, ps) < 0 ||
	    db_cmd(&x->db,
	           "INSERT INTO session_vms (session_id, vm_name, secret_name, agent_token, ip, "
	           "stage, running_at, ready_at, disk_source, disk_fallback_reason) "
	           "VALUES ($1::uuid, $2, $3, $4, $5, 'ready', clock_timestamp(), "
	           "clock_timestamp(), $6, $7)",
	           7, pv) < 0)
		return -1;
	return 0;
}

/* Relabel the VM and its Secret as the session's: 0 ok, -1 the VM could not be. */
static int relabel(struct labctx *x, const struct cand *cd, const char *sid)
{
	cJSON *patch = relabel_patch(x->cfg, sid);
	char *vpath = kube_path("virtualmachines", x->cfg->namespace_, cd->vm);
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

	if (l->runtime != RUNTIME_VM || l->nmachines)
		return POOL_NONE; /* a pool holds single-machine VM lessons */
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
			if (cd.ready)
				snprintf(x->pool_after, sizeof x->pool_after, "%s", l->id);
			continue;
		}
		/* a preset sid (a place of the waiting line) is kept */
		if ((!sid[0] && util_uuid4(sid) < 0) ||
		    db_cmd(&x->db, "SAVEPOINT pool_claim", 0, NULL) < 0) {
			rc = POOL_DBERR;
			break;
		}
		if (take(x, l, user, pressed, &cd, sid) < 0) {
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

/* ------------------------------------------------------------ yield */

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
		const char *pv[1] = {vm[i]};
		if (rc > 0 &&
		    db_cmd(&x->db,
		           "UPDATE pool_vms SET state = 'deleted', deleted_at = clock_timestamp(), "
		           "delete_reason = 'yielded' WHERE vm_name = $1",
		           1, pv) < 0)
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
		delete_objects(x, vm[i], secret[i]);
		log_info("pool: VM %s yielded its seat to a start of lesson %s", vm[i], for_lesson);
	}
	free(vm);
	free(secret);
	/* the seats are free when the VMs are gone (terminating ones count) */
	double until = util_mono_s() + c->pool_yield_wait_s;
	for (;;) {
		long in_use = 0;
		if (count_lab_vms(x, &in_use) == 200 && in_use + need <= c->vm_capacity)
			break;
		if (util_mono_s() >= until)
			break;
		usleep(100 * 1000);
	}
	return 1;
}

/* ------------------------------------------------------------ tick */

int pool_target(struct labctx *x, const struct lesson *l)
{
	const char *p[2] = {x->cfg->environment, l->id};
	if (l->runtime != RUNTIME_VM || l->nmachines)
		return 0;
	PGresult *r =
	    db_exec(&x->db,
	            "SELECT COALESCE(sum(count), 0) FROM pool_warm WHERE environment = $1 "
	            "AND lesson = $2 AND from_at <= clock_timestamp() "
	            "AND until_at > clock_timestamp()",
	            2, p);
	if (!r)
		return -1;
	long n = strtol(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	n += l->warm;
	return n > 100000 ? 100000 : (int)n;
}

/* Make one pool VM of lesson l under the capacity lock.
 * 1 made, 0 capacity full, -1 failed (counted). */
static int create_one(struct labctx *x, const struct lesson *l)
{
	const struct cfg *c = x->cfg;
	struct lab_names names;
	enum lesson_disk disk = l->disk;
	const char *fallback = NULL;
	char id[37], token[65], detail[600], why[1024] = "";
	long in_use = 0;
	int rc = -1, created = 0;

	/* the same golden decision as a session's start */
	if (disk == DISK_GOLDEN) {
		enum golden_reason g = golden_check(&x->kube, c, l, detail, sizeof detail);
		if (g != GOLDEN_OK) {
			disk = DISK_CONTAINERDISK;
			fallback = golden_reason_str(g);
			log_info("pool: lesson %s: golden disk not used (%s; %s), containerDisk "
			         "instead",
			         l->id, fallback, detail);
		}
	}
	if (util_uuid4(id) < 0 || util_random_hex(token, 32) < 0)
		return -1;
	lab_names_from_session(&names, id);
	names.session_id[0] = '\0';
	snprintf(names.pool_hash, sizeof names.pool_hash, "%s", l->hash);

	if (db_begin(&x->db) < 0 ||
	    db_cmd(&x->db, "SELECT pg_advisory_xact_lock(" LOCK_CAPACITY ", 0)", 0, NULL) < 0)
		goto out;
	if (count_lab_vms(x, &in_use) != 200) {
		snprintf(why, sizeof why, "cannot count lab VMs: %s", x->kube.msg);
		goto out;
	}
	if (in_use >= c->vm_capacity) {
		rc = 0;
		goto out;
	}
	const char *p[7] = {names.vm, names.secret, c->environment,       l->id,
	                    l->hash,  token,        lesson_disk_str(disk)};
	const char *pf[2] = {names.vm, fallback};
	if (db_cmd(&x->db,
	           "INSERT INTO pool_vms (vm_name, secret_name, environment, lesson, lesson_hash, "
	           "agent_token, disk_source) VALUES ($1, $2, $3, $4, $5, $6, $7)",
	           7, p) < 0 ||
	    db_cmd(&x->db, "UPDATE pool_vms SET disk_fallback_reason = $2 WHERE vm_name = $1", 2,
	           pf) < 0)
		goto out;

	/* the same objects as a session's VM (api_sessions.c submit()) */
	char *userdata = cloudinit_build(l, token);
	cJSON *secret = manifest_secret(c, &names, l, userdata);
	cJSON *vm = manifest_vm(c, &names, l, disk);
	cJSON *answer = NULL, *patch = NULL;
	char *spath = kube_path("secrets", c->namespace_, NULL);
	char *vpath = kube_path("virtualmachines", c->namespace_, NULL);
	char *opath = kube_path("secrets", c->namespace_, names.secret);
	util_free_secret(userdata);
	created = 1;
	long code = kube_create(&x->kube, spath, secret, NULL);
	if (code != 201 && code != 200) {
		snprintf(why, sizeof why, "creating the cloud-init Secret: %s", x->kube.msg);
	} else {
		code = kube_create(&x->kube, vpath, vm, &answer);
		const char *uid = kj_str(answer, "metadata.uid");
		if ((code != 201 && code != 200) || !uid) {
			snprintf(why, sizeof why, "creating the VirtualMachine: %s",
			         x->kube.msg[0] ? x->kube.msg : "no uid in the answer");
		} else {
			patch = manifest_owner_patch(names.vm, uid);
			if (kube_merge_patch(&x->kube, opath, patch, NULL) != 200)
				snprintf(why, sizeof why, "making the Secret owned by the VM: %s",
				         x->kube.msg);
		}
	}
	cJSON_Delete(secret);
	cJSON_Delete(vm);
	cJSON_Delete(answer);
	cJSON_Delete(patch);
	free(spath);
	free(vpath);
	free(opath);
	if (why[0])
		goto out;
	if (db_commit(&x->db) < 0) {
		snprintf(why, sizeof why, "database: %s", x->db.msg);
		goto out;
	}
	created = 0;
	rc = 1;
	log_info("pool: lesson %s: VM %s submitted (disk %s%s%s, %ld/%d in use)", l->id, names.vm,
	         lesson_disk_str(disk), fallback ? ", fallback " : "", fallback ? fallback : "",
	         in_use + 1, c->vm_capacity);
out:
	OPENSSL_cleanse(token, sizeof token);
	if (created)
		delete_objects(x, names.vm, names.secret);
	if (rc != 1)
		db_rollback(&x->db);
	if (rc < 0)
		log_warn("pool: lesson %s: making a pool VM failed, nothing left behind: %s", l->id,
		         why[0] ? why : x->db.msg);
	return rc;
}

struct prow {
	char vm[64], secret[64], lesson[64], hash[48], ip[64], token[80];
	int ready, has_ip;
	double age, running_timeout, ready_timeout;
};

static int load_rows(struct labctx *x, const char *only, struct prow **out, size_t *n)
{
	const char *p[2] = {x->cfg->environment, only};
	PGresult *r =
	    db_exec(&x->db,
	            "SELECT vm_name, secret_name, lesson, lesson_hash, state = 'ready', ip, "
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
		w->ready = PQgetvalue(r, ri, 4)[0] == 't';
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
	char *path = kube_path("virtualmachines", c->namespace_, NULL);
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
	const char *ip = kj_str(vmi, "status.interfaces.0.ipAddress");
	int rc = 1;
	free(path);

	if (phase && (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0)) {
		char e[128];
		snprintf(e, sizeof e, "the VM stopped before the lab was ready (VMI phase %s)",
		         phase);
		rc = retire(x, w->vm, w->secret, "not_ready", e) < 0 ? -1 : 0;
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
			const char *p[1] = {w->vm};
			if (db_cmd(
			        &x->db,
			        "UPDATE pool_vms SET state = 'ready', ready_at = clock_timestamp() "
			        "WHERE vm_name = $1 AND state = 'starting'",
			        1, p) < 0)
				rc = -1;
			else
				k->became_ready++;
			w->ready = 1;
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
			rc = retire(x, w->vm, w->secret, "setup_failed", e) < 0 ? -1 : 0;
			free(e);
			k->failed += rc == 0;
			goto out;
		}
	}
	if (overdue) {
		char e[160];
		snprintf(e, sizeof e, "not ready %d s after it was made (VMI phase %s)",
		         l->running_timeout_s + l->ready_timeout_s, phase ? phase : "none");
		rc = retire(x, w->vm, w->secret, "not_ready", e) < 0 ? -1 : 0;
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
		if (!l || l->runtime != RUNTIME_VM || l->nmachines)
			reason = "lesson_gone";
		else if (strcmp(l->hash, w->hash) != 0)
			reason = "lesson_changed";
		else if (w->age > x->cfg->pool_max_age_s)
			reason = "too_old";
		if (reason) {
			int d = retire(x, w->vm, w->secret, reason, NULL);
			if (d < 0)
				rc = -1;
			k->stale += d > 0;
			continue;
		}
		if (!in_list(list, w->vm)) {
			/* gone, or claimed meanwhile (relabelled: no pool label any
			 * more): retire() touches only a row that is still idle, so a
			 * student's VM is never deleted here */
			int d = retire(x, w->vm, w->secret, "vanished", NULL);
			if (d < 0)
				rc = -1;
			k->vanished += d > 0;
			continue;
		}
		int st = w->ready ? 1 : check_starting(x, l, w, k);
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
			if (strcmp(w->lesson, l->id) != 0 || w->ready)
				continue;
			if (retire(x, w->vm, w->secret, "surplus", NULL) > 0) {
				live[j]--;
				k->surplus++;
				w->lesson[0] = '\0';
			}
		}
		for (size_t i = 0; live[j] > target && i < n; i++) {
			struct prow *w = &rows[i];
			if (strcmp(w->lesson, l->id) != 0)
				continue;
			if (retire(x, w->vm, w->secret, "surplus", NULL) > 0) {
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

/* ------------------------------------------------------------ reaper */

int pool_owns(struct labctx *x, const char *kind, const char *name)
{
	int vm = strcmp(kind, "virtualmachines") == 0;
	const char *p[2] = {name, x->cfg->environment};
	PGresult *r = db_exec(&x->db,
	                      vm ? "SELECT p.state, s.state FROM pool_vms p LEFT JOIN sessions s "
	                           "ON s.id = p.session_id "
	                           "WHERE p.vm_name = $1 AND p.environment = $2"
	                         : "SELECT p.state, s.state FROM pool_vms p LEFT JOIN sessions s "
	                           "ON s.id = p.session_id "
	                           "WHERE p.secret_name = $1 AND p.environment = $2",
	                      2, p);
	if (!r)
		return -1;
	int owns = 0;
	if (PQntuples(r)) {
		const char *ps = PQgetvalue(r, 0, 0);
		const char *ss = db_val(r, 0, 1);
		owns = strcmp(ps, "starting") == 0 || strcmp(ps, "ready") == 0 ||
		       (strcmp(ps, "claimed") == 0 && ss &&
		        (strcmp(ss, "starting") == 0 || strcmp(ss, "ready") == 0));
	}
	PQclear(r);
	return owns;
}

/* ------------------------------------------------------------ operators */

long pool_warm_add(struct labctx *x, const char *lesson, int count, const char *from,
                   const char *until, const char *by, char *err, size_t errlen)
{
	const struct lesson *l = lessons_find(x->lessons, lesson);
	if (!l) {
		snprintf(err, errlen, "there is no lesson \"%.100s\"", lesson);
		return -1;
	}
	if (l->runtime != RUNTIME_VM || l->nmachines) {
		snprintf(err, errlen,
		         "lesson \"%s\" %s: only single-machine VM lessons have a warm pool", l->id,
		         l->nmachines ? "has several machines" : "runs in a Pod");
		return -1;
	}
	if (count < 1 || count > 1000) {
		snprintf(err, errlen, "count must be 1..1000");
		return -1;
	}
	char n[16];
	snprintf(n, sizeof n, "%d", count);
	const char *p[6] = {x->cfg->environment, l->id, n, from, until, by};
	/* "+<interval>" is from now; anything else is a timestamptz */
	PGresult *r = db_exec(
	    &x->db,
	    "WITH t AS (SELECT CASE WHEN $4::text IS NULL OR $4 = 'now' THEN clock_timestamp() "
	    "  WHEN left($4, 1) = '+' THEN clock_timestamp() + substr($4, 2)::interval "
	    "  ELSE $4::timestamptz END AS f) "
	    "INSERT INTO pool_warm (environment, lesson, count, from_at, until_at, created_by) "
	    "SELECT $1, $2, $3::int, f, CASE WHEN $5::text IS NULL THEN f + interval '2 hours' "
	    "  WHEN left($5, 1) = '+' THEN clock_timestamp() + substr($5, 2)::interval "
	    "  ELSE $5::timestamptz END, $6 FROM t RETURNING id",
	    6, p);
	if (!r) {
		/* a bad time or an end before the start: the server says which */
		if (x->db.broken)
			return -2;
		snprintf(err, errlen, "from/until: %s", x->db.msg);
		return -1;
	}
	long id = strtol(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	log_info("pool: warm request %ld: %d VMs of lesson %s (by %s)", id, count, l->id,
	         by ? by : "-");
	return id;
}

int pool_warm_cancel(struct labctx *x, long id)
{
	char s[32];
	snprintf(s, sizeof s, "%ld", id);
	const char *p[2] = {s, x->cfg->environment};
	PGresult *r = db_exec(&x->db,
	                      "DELETE FROM pool_warm WHERE id = $1::bigint AND environment = $2 "
	                      "RETURNING 1",
	                      2, p);
	if (!r)
		return -1;
	int n = PQntuples(r);
	PQclear(r);
	return n > 0;
}

static cJSON *rows_json(PGresult *r)
{
	cJSON *a = jx_arr();
	for (int i = 0; i < PQntuples(r); i++) {
		cJSON *o = jx_obj();
		for (int c = 0; c < PQnfields(r); c++) {
			const char *v = db_val(r, i, c);
			const char *name = PQfname(r, c);
			if (v && (strcmp(name, "id") == 0 || strcmp(name, "count") == 0 ||
			          strcmp(name, "target") == 0 || strcmp(name, "starting") == 0 ||
			          strcmp(name, "ready") == 0 || strcmp(name, "claimed") == 0 ||
			          strcmp(name, "failed") == 0))
				jx_add_num(o, name, strtod(v, NULL));
			else if (v && strcmp(name, "active") == 0)
				jx_add_bool(o, name, v[0] == 't');
			else
				jx_add_str(o, name, v);
		}
		jx_push(a, o);
	}
	return a;
}

cJSON *pool_status_json(struct labctx *x)
{
	const char *p[1] = {x->cfg->environment};
	PGresult *w = db_exec(
	    &x->db,
	    "SELECT id, lesson, count, labvm_ts(from_at) AS from, labvm_ts(until_at) AS until, "
	    "created_by, (from_at <= clock_timestamp() AND until_at > clock_timestamp()) AS active "
	    "FROM pool_warm WHERE environment = $1 AND until_at > clock_timestamp() ORDER BY "
	    "from_at, id",
	    1, p);
	PGresult *v =
	    w ? db_exec(&x->db,
	                "SELECT vm_name AS name, lesson, state, disk_source, "
	                "labvm_ts(created_at) AS created_at, labvm_ts(ready_at) AS ready_at "
	                "FROM pool_vms WHERE environment = $1 "
	                "AND state IN ('starting', 'ready') ORDER BY lesson, created_at",
	                1, p)
	      : NULL;
	PGresult *c = v ? db_exec(&x->db,
	                          "SELECT lesson, count(*) FILTER (WHERE state = 'starting') AS "
	                          "starting, count(*) FILTER (WHERE state = 'ready') AS ready, "
	                          "count(*) FILTER (WHERE state = 'claimed') AS claimed, "
	                          "count(*) FILTER (WHERE delete_reason IN ('setup_failed', "
	                          "'not_ready')) AS failed FROM pool_vms WHERE environment = $1 "
	                          "GROUP BY lesson ORDER BY lesson",
	                          1, p)
	                : NULL;
	cJSON *o = NULL;
	if (w && v && c) {
		o = jx_obj();
		jx_put(o, "warm", rows_json(w));
		cJSON *lessons = rows_json(c);
		/* every lesson with a target, with or without VMs yet */
		for (size_t i = 0; i < x->lessons->n; i++) {
			const struct lesson *l = &x->lessons->v[i];
			int t = pool_target(x, l);
			cJSON *e = NULL, *it;
			cJSON_ArrayForEach(it, lessons)
			{
				const char *id = kj_str(it, "lesson");
				if (id && strcmp(id, l->id) == 0)
					e = it;
			}
			if (!e && t <= 0)
				continue;
			if (!e) {
				e = jx_obj();
				jx_add_str(e, "lesson", l->id);
				jx_add_num(e, "starting", 0);
				jx_add_num(e, "ready", 0);
				jx_add_num(e, "claimed", 0);
				jx_add_num(e, "failed", 0);
				jx_push(lessons, e);
			}
			jx_add_num(e, "target", t < 0 ? 0 : t);
		}
		jx_put(o, "lessons", lessons);
		jx_put(o, "vms", rows_json(v));
	}
	PQclear(w);
	PQclear(v);
	PQclear(c);
	return o;
}
