/* api_sessions.c - start, read, end and grade lab sessions; console tickets.
 *
 * Starting a session (POST /api/sessions) is one transaction:
 *
 *   1. pg_advisory_xact_lock on the user      -> a double click yields one session
 *   2. an open session?                       -> 409 session_exists, naming it
 *   2a. more seats than the capacity, or no node of the cluster can ever
 *       hold the session (nodefit.h)?         -> 409 never_fits, naming the node
 *   2b. a ready VM of the lesson's warm pool? -> claim it (pool.c): ready at once
 *   3. golden disk usable?                    -> else containerDisk, reason recorded
 *   4. pg_advisory_xact_lock on capacity      -> one admission at a time, everywhere
 *      (a cluster already full is refused before queueing for the lock)
 *   5. count lab VMs in the cluster           -> 503 capacity_full / cluster_unavailable
 *   6. insert the session, create the Secret, the VM, own the Secret by the VM
 *   7. commit                                 -> 201
 *
 * Steps 1-5 are the admission, 6-7 the submission; a step that refuses or
 * fails returns, and api_session_create() has the one way back: delete what
 * was created in the cluster, roll back, answer. No active session row and
 * nothing in the cluster. A process killed between 6 and 7 leaves labelled
 * objects without an active session: the reaper's orphans.
 *
 * The other routes get their session from the router (r->sess: loaded, the
 * user's own, advanced and ready as the route table in router.c says). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>

#include "api.h"
#include "cloudinit.h"
#include "golden.h"
#include "jsonx.h"
#include "locks.h"
#include "log.h"
#include "manifest.h"
#include "nodefit.h"
#include "podexec.h"
#include "pool.h"
#include "queue.h"
#include "session.h"
#include "ticket.h"

#define GRADE_OUTPUT_MAX 8192
#define GRADE_TRUNCATED  "\n[output truncated]"

/* ---------------------------------------------------------------- helpers */

static void delete_quiet(struct labctx *x, const char *kind, const char *name)
{
	char *path = kube_path(kind, x->cfg->namespace_, name);
	if (!kube_delete(&x->kube, path, "Background"))
		log_warn("cleanup: deleting %s %s failed: %s (the reaper will retry)", kind, name,
		         x->kube.msg);
	free(path);
}

/* ------------------------------------------------------------------ start */

/* One machine of the start (a lesson without "machines" has one). */
struct start_vm {
	const struct lesson *m; /* the machine's view of the lesson */
	enum lesson_disk disk;
	const char *fallback;
	struct lab_names names;
	struct machine_net net;
	char token[65]; /* the agent's bearer token: secret */
};

struct start {
	const struct lesson *lesson;
	struct start_vm *vms;
	size_t n;
	int multi; /* machines on a session network */
	char sid[37];
	char network[64]; /* the NAD, multi only */
	long in_use;
	int created;      /* cluster objects may exist: the way back deletes them */
	int claimed;      /* a warm pool VM was claimed (2b): nothing to submit */
	int want_queue;   /* "queue": true: join the line when refused for capacity */
	const char *qid;  /* admitting this place of the line (its id is the session's) */
	long line;        /* seats the waiting line holds ahead of this start */
	enum api_err err; /* a refusal, answered after the way back */
	cJSON *answer;
};

/* What a step of the start did: go on, refused (st->answer), or database
 * trouble before anything changed in the cluster (the router may retry). */
enum step { STEP_OK = 0, STEP_REFUSED = 1, STEP_DB = -1 };

static enum step refuse(struct start *st, enum api_err e, const char *message)
{
	st->err = e;
	st->answer = error_json(e, message);
	return STEP_REFUSED;
}

/* Count lab VMs (or lab Pods) in the cluster: every environment, terminating
 * ones included. Other pods carry the lab labels too (a VM's virt-launcher
 * pod, through the VMI; CDI's importer pod, through the DataVolume and its
 * PVC), so lab Pods are those manifest_is_lab_pod() recognises: the lab-pod
 * mark (or a Pod of the previous release). */
static long count_lab(struct labctx *x, enum lesson_runtime rt, long *in_use)
{
	int pod = rt == RUNTIME_POD;
	char *path = kube_path(pod ? "pods" : "virtualmachines", x->cfg->namespace_, NULL);
	char *sel = pod ? xasprintf("%s=true,!kubevirt.io", x->cfg->label.lab_session)
	                : xasprintf("%s=true", x->cfg->label.lab_session);
	long code;
	if (pod) {
		cJSON *list = NULL;
		const cJSON *it, *items;
		code = kube_list_meta(&x->kube, path, sel, &list);
		items = kj_get(list, "items");
		*in_use = 0;
		if (code == 200 && !cJSON_IsArray(items))
			code = 0;
		if (code == 200)
			cJSON_ArrayForEach(it, items) *in_use += manifest_is_lab_pod(x->cfg, it);
		cJSON_Delete(list);
	} else {
		code = kube_count(&x->kube, path, sel, in_use);
	}
	free(sel);
	free(path);
	return code;
}

static int insert_rows(struct req *r, const struct start *st)
{
	const struct lesson *l = st->lesson;
	char pressed[32], minutes[16], rto[16], yto[16];
	snprintf(pressed, sizeof pressed, "%.6f", r->t_wall);
	snprintf(minutes, sizeof minutes, "%d", l->minutes);
	snprintf(rto, sizeof rto, "%d", l->running_timeout_s);
	snprintf(yto, sizeof yto, "%d", l->ready_timeout_s);
	const char *p[12] = {st->sid,
	                     r->user,
	                     l->id,
	                     lesson_runtime_str(l->runtime),
	                     r->x->cfg->environment,
	                     l->runtime == RUNTIME_POD ? NULL : lesson_disk_str(st->vms[0].disk),
	                     st->vms[0].fallback,
	                     rto,
	                     yto,
	                     pressed,
	                     minutes,
	                     st->multi ? st->network : NULL};
	if (db_cmd(
	        &r->x->db,
	        "INSERT INTO sessions (id, user_name, lesson, runtime, environment, state, stage, "
	        "disk_source, disk_fallback_reason, running_timeout_s, ready_timeout_s, "
	        "created_at, expires_at, network) VALUES ($1::uuid, $2, $3, $4, $5, 'starting', "
	        "'submitted', $6, $7, $8::int, $9::int, to_timestamp($10::float8), "
	        "to_timestamp($10::float8) + make_interval(mins => $11::int), $12)",
	        12, p) < 0)
		return -1;
	for (size_t i = 0; i < st->n; i++) {
		const struct start_vm *v = &st->vms[i];
		char ord[16];
		snprintf(ord, sizeof ord, "%d", (int)i);
		const char *q[9] = {st->sid,
		                    v->names.vm,
		                    l->runtime == RUNTIME_POD ? v->names.files : v->names.secret,
		                    v->token,
		                    v->names.machine[0] ? v->names.machine : NULL,
		                    l->runtime == RUNTIME_POD ? NULL : lesson_disk_str(v->disk),
		                    v->fallback,
		                    st->multi ? v->net.address : NULL,
		                    ord};
		if (db_cmd(
		        &r->x->db,
		        "INSERT INTO session_vms (session_id, vm_name, secret_name, agent_token, "
		        "machine, disk_source, disk_fallback_reason, net_ip, ord) "
		        "VALUES ($1::uuid, $2, $3, $4, $5, $6, $7, $8, $9::int)",
		        9, q) < 0)
			return -1;
	}
	return 0;
}

/* Every object a start may have created, whether or not it was: the VMs and
 * their Secrets, then the session network. */
static void undo_submit(struct labctx *x, const struct start *st)
{
	if (st->lesson->runtime == RUNTIME_POD) {
		delete_quiet(x, "pods", st->vms[0].names.vm);
		delete_quiet(x, "secrets", st->vms[0].names.files);
		return;
	}
	for (size_t i = 0; i < st->n; i++) {
		delete_quiet(x, "virtualmachines", st->vms[i].names.vm);
		delete_quiet(x, "secrets", st->vms[i].names.secret);
	}
	if (st->multi)
		delete_quiet(x, "network-attachment-definitions", st->network);
}

/* A VM create that got no answer may still land after the way back deleted
 * "nothing" (404) and the capacity lock was released: capacity would
 * overshoot by one. Still under the lock, look until the VM shows up (then
 * the way back deletes it, and a terminating VM still counts) or the API
 * server's own handling of that request must be over. */
static void confirm_vm(struct labctx *x, const char *name)
{
	kube_deadline(&x->kube, 0); /* the way back: not cut short by the start's deadline */
	char *path = kube_path("virtualmachines", x->cfg->namespace_, name);
	double until = util_mono_s() + x->cfg->kube_timeout_ms / 1000.0;
	long code;
	while ((code = kube_get(&x->kube, path, NULL)) != 200 && util_mono_s() < until)
		nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
	log_warn("VM %s: the create got no answer; the VM %s", name,
	         code == 200 ? "exists (it is deleted now)" : "did not appear (nothing to delete)");
	free(path);
}

/* A pod lesson: the files Secret, the Pod, the Secret owned by the Pod. */
static int submit_pod(struct req *r, struct start *st, char *why, size_t whylen)
{
	struct labctx *x = r->x;
	const struct cfg *c = x->cfg;
	cJSON *secret = manifest_pod_secret(c, &st->vms[0].names, st->lesson);
	cJSON *pod = manifest_pod(c, &st->vms[0].names, st->lesson);
	cJSON *created = NULL, *patch = NULL;
	char *spath = kube_path("secrets", c->namespace_, NULL);
	char *ppath = kube_path("pods", c->namespace_, NULL);
	char *opath = kube_path("secrets", c->namespace_, st->vms[0].names.files);
	int rc = -1;
	long code;

	st->created = 1;
	code = kube_create(&x->kube, spath, secret, NULL);
	if (code != 201 && code != 200) {
		snprintf(why, whylen, "creating the lab files Secret: %s", x->kube.msg);
		goto out;
	}
	code = kube_create(&x->kube, ppath, pod, &created);
	const char *uid = kj_str(created, "metadata.uid");
	if ((code != 201 && code != 200) || !uid) {
		snprintf(why, whylen, "creating the Pod: %s",
		         x->kube.msg[0] ? x->kube.msg : "no uid in the answer");
		goto out;
	}
	patch = manifest_pod_owner_patch(st->vms[0].names.vm, uid);
	code = kube_merge_patch(&x->kube, opath, patch, NULL);
	if (code != 200) {
		snprintf(why, whylen, "making the Secret owned by the Pod: %s", x->kube.msg);
		goto out;
	}
	rc = 0;
out:
	cJSON_Delete(secret);
	cJSON_Delete(pod);
	cJSON_Delete(created);
	cJSON_Delete(patch);
	free(spath);
	free(ppath);
	free(opath);
	return rc;
}

/* "ADDRESS NAME" lines for /etc/hosts: every machine of the session. */
static char *hosts_block(const struct start *st)
{
	struct buf b = {0};
	for (size_t i = 0; i < st->n; i++) {
		char addr[24];
		snprintf(addr, sizeof addr, "%s", st->vms[i].net.address);
		char *slash = strchr(addr, '/');
		if (slash)
			*slash = '\0';
		char *line = xasprintf("%s %s\n", addr, st->vms[i].names.machine);
		buf_puts(&b, line);
		free(line);
	}
	return b.p;
}

/* One machine: its Secret, its VM, the Secret owned by the VM. */
static int submit_vm(struct req *r, struct start *st, struct start_vm *v, const char *hosts,
                     char *why, size_t whylen)
{
	struct labctx *x = r->x;
	const struct cfg *c = x->cfg;
	char *userdata = cloudinit_build_hosts(v->m, v->token, hosts);
	char *netdata = st->multi ? manifest_network_data(&v->net) : NULL;
	cJSON *secret = manifest_secret_net(c, &v->names, st->lesson, userdata, netdata);
	cJSON *vm = manifest_vm_net(c, &v->names, v->m, v->disk, st->multi ? &v->net : NULL);
	cJSON *created = NULL, *patch = NULL;
	char *spath = kube_path("secrets", c->namespace_, NULL);
	char *vpath = kube_path("virtualmachines", c->namespace_, NULL);
	char *opath = kube_path("secrets", c->namespace_, v->names.secret);
	const char *mprefix = v->names.machine[0] ? "machine " : "";
	int rc = -1;
	long code;

	util_free_secret(userdata); /* it holds the agent token */
	free(netdata);
	code = kube_create(&x->kube, spath, secret, NULL);
	if (code != 201 && code != 200) {
		snprintf(why, whylen, "%s%s: creating the cloud-init Secret: %s", mprefix,
		         v->names.machine, x->kube.msg);
		goto out;
	}
	code = kube_create(&x->kube, vpath, vm, &created);
	const char *uid = kj_str(created, "metadata.uid");
	if ((code != 201 && code != 200) || !uid) {
		snprintf(why, whylen, "%s%s: creating the VirtualMachine: %s", mprefix,
		         v->names.machine, x->kube.msg[0] ? x->kube.msg : "no uid in the answer");
		if (code == 0)
			confirm_vm(x, v->names.vm);
		goto out;
	}
	patch = manifest_owner_patch(v->names.vm, uid);
	code = kube_merge_patch(&x->kube, opath, patch, NULL);
	if (code != 200) {
		snprintf(why, whylen, "%s%s: making the Secret owned by the VM: %s", mprefix,
		         v->names.machine, x->kube.msg);
		goto out;
	}
	rc = 0;
out:
	cJSON_Delete(secret);
	cJSON_Delete(vm);
	cJSON_Delete(created);
	cJSON_Delete(patch);
	free(spath);
	free(vpath);
	free(opath);
	return rc;
}

/* The session network (several machines), then every machine; on failure
 * say why. From the first request on st->created is set: the way back
 * deletes everything whatever failed (a request that timed out may still
 * have created its object, and deleting what is not there is a 404). */
static int submit(struct req *r, struct start *st, char *why, size_t whylen)
{
	struct labctx *x = r->x;
	const struct cfg *c = x->cfg;
	char *hosts = NULL;
	int rc = -1;

	st->created = 1;
	if (st->multi) {
		cJSON *nad = manifest_nad(c, &st->vms[0].names, st->lesson->id);
		char *path = kube_path("network-attachment-definitions", c->namespace_, NULL);
		long code = kube_create(&x->kube, path, nad, NULL);
		cJSON_Delete(nad);
		free(path);
		if (code != 201 && code != 200) {
			snprintf(why, whylen,
			         "creating the session network (NetworkAttachmentDefinition "
			         "%s): %s",
			         st->network, x->kube.msg);
			return -1;
		}
		hosts = hosts_block(st);
	}
	for (size_t i = 0; i < st->n; i++)
		if (submit_vm(r, st, &st->vms[i], hosts, why, whylen) < 0)
			goto out;
	rc = 0;
out:
	free(hosts);
	return rc;
}

/* The request: a lesson that exists. 0 ok, -1 answered. */
static int parse_start(struct req *r, struct start *st)
{
	const cJSON *lid = cJSON_GetObjectItemCaseSensitive(r->json, "lesson");
	if (!cJSON_IsObject(r->json) || !cJSON_IsString(lid) || !lid->valuestring[0]) {
		resp_error(r, E_BAD_REQUEST, "expected {\"lesson\": \"<lesson id>\"}");
		return -1;
	}
	st->lesson = lessons_find(r->x->lessons, lid->valuestring);
	if (!st->lesson) {
		resp_error(r, E_UNKNOWN_LESSON, "there is no lesson \"%.100s\"", lid->valuestring);
		return -1;
	}
	const cJSON *q = cJSON_GetObjectItemCaseSensitive(r->json, "queue");
	if (q && !cJSON_IsBool(q)) {
		resp_error(r, E_BAD_REQUEST, "\"queue\" must be true or false");
		return -1;
	}
	st->want_queue = cJSON_IsTrue(q);
	return 0;
}

/* A lock not granted within lock_timeout: 503 capacity_busy + Retry-After;
 * any other database failure is the usual database trouble. */
static enum step lock_busy(struct req *r, struct start *st, const char *why)
{
	const struct cfg *c = r->x->cfg;
	if (strcmp(r->x->db.sqlstate, DB_LOCK_NOT_AVAILABLE) != 0)
		return STEP_DB;
	int after = (c->capacity_lock_timeout_ms + 999) / 1000;
	char msg[256];
	snprintf(msg, sizeof msg, "%s: try again in a few seconds", why);
	log_warn("user %s: lock not granted within %d ms (%s)", r->user,
	         c->capacity_lock_timeout_ms, why);
	refuse(st, E_CAPACITY_BUSY, msg);
	jx_add_num(st->answer, "retry_after_s", after);
	resp_header(r, "Retry-After", "%d", after);
	return STEP_REFUSED;
}

/* start_rate_max starts per user within start_rate_window_s (counted in the
 * session rows, under the user lock): a script that starts and ends in a
 * loop cannot keep the class at capacity_full. */
static enum step rate_limit(struct req *r, struct start *st)
{
	struct labctx *x = r->x;
	const struct cfg *c = x->cfg;
	char win[16], max[16];
	if (c->start_rate_max <= 0)
		return STEP_OK;
	snprintf(win, sizeof win, "%d", c->start_rate_window_s);
	snprintf(max, sizeof max, "%d", c->start_rate_max);
	const char *p[4] = {c->environment, r->user, win, max};
	PGresult *res =
	    db_exec(&x->db,
	            "SELECT count(*), ceil(extract(epoch from min(created_at) + "
	            "make_interval(secs => $3::int) - clock_timestamp())) FROM (SELECT created_at "
	            "FROM sessions WHERE environment = $1 AND user_name = $2 AND created_at > "
	            "clock_timestamp() - make_interval(secs => $3::int) ORDER BY created_at DESC "
	            "LIMIT $4::int) recent",
	            4, p);
	if (!res)
		return STEP_DB;
	long n = atol(PQgetvalue(res, 0, 0));
	const char *left = db_val(res, 0, 1);
	long after = left ? atol(left) : 1;
	PQclear(res);
	if (n < c->start_rate_max)
		return STEP_OK;
	if (after < 1)
		after = 1;
	char msg[256];
	snprintf(msg, sizeof msg,
	         "you started %d labs within %d s: wait %ld s before starting another",
	         c->start_rate_max, c->start_rate_window_s, after);
	log_warn("user %s: start refused, %ld starts within %d s", r->user, n,
	         c->start_rate_window_s);
	refuse(st, E_TOO_MANY_STARTS, msg);
	jx_add_num(st->answer, "retry_after_s", (double)after);
	resp_header(r, "Retry-After", "%ld", after);
	return STEP_REFUSED;
}

/* Admission (1-5): may this user start a lab now, and on which disk? */
static enum step admit(struct req *r, struct start *st)
{
	struct labctx *x = r->x;
	const struct cfg *c = x->cfg;
	struct session s;
	char detail[600];

	/* the start's deadline, the longest start the reaper's orphan grace
	 * allows for (cfg_min_orphan_grace_s: two lock waits, seven cluster calls):
	 * every cluster call of the admission and the submission ends by then, and
	 * a 429 from the API server is retried only within it (kube_deadline) */
	kube_deadline(&x->kube,
	              util_mono_s() +
	                  (2.0 * c->capacity_lock_timeout_ms + 7.0 * c->kube_timeout_ms) / 1000.0);

	/* 1-2: one start at a time per user; an open session is the answer. No
	 * lock is waited for longer than capacity_lock_timeout_ms: a slow cluster
	 * or a frozen holder turns into 503 capacity_busy, not a queue of workers */
	const char *pu[2] = {c->environment, r->user};
	char lt[64];
	snprintf(lt, sizeof lt, "SET LOCAL lock_timeout = %d", c->capacity_lock_timeout_ms);
	if (db_begin(&x->db) < 0 || db_cmd(&x->db, lt, 0, NULL) < 0)
		return STEP_DB;
	if (db_cmd(&x->db, "SELECT pg_advisory_xact_lock(" LOCK_USER ", hashtext($1 || '/' || $2))",
	           2, pu) < 0)
		return lock_busy(r, st, "another start of yours is still in progress");
	int rc = session_load_active(x, r->user, &s);
	if (rc == SESSION_DBERR)
		return STEP_DB;
	if (rc == SESSION_FOUND) {
		refuse(st, E_SESSION_EXISTS, "you already have a lab session open");
		jx_put(st->answer, "session", session_json(&s));
		session_free(&s);
		return STEP_REFUSED;
	}
	rc = rate_limit(r, st);
	if (rc != STEP_OK)
		return rc;

	/* 2a: the waiting line (queue.c). A place in line is the user's open
	 * session too; admitting it takes it out of the line (undone if the
	 * admission is refused), and its id becomes the session's */
	if (st->qid) {
		int got = queue_claim(x, st->qid);
		if (got < 0)
			return STEP_DB;
		if (!got)
			return refuse(st, E_NOT_FOUND, "the place is no longer in line");
		snprintf(st->sid, sizeof st->sid, "%s", st->qid);
	} else {
		cJSON *place = NULL;
		int got = queue_user_place(x, r->user, &place);
		if (got < 0)
			return STEP_DB;
		if (got) {
			refuse(st, E_SESSION_EXISTS, "you are already waiting in line for a lab");
			jx_put(st->answer, "session", place);
			return STEP_REFUSED;
		}
	}
	int pool_cap = queue_capacity(c, queue_pool(st->lesson));
	if ((long)st->n > pool_cap) {
		/* never fits: more machines than the whole capacity (no line either) */
		refuse(st, E_NEVER_FITS, "this lesson needs more lab machines than this lab has");
		jx_add_num(st->answer, "capacity", pool_cap);
		jx_add_num(st->answer, "seats", (double)st->n);
		return STEP_REFUSED;
	}
	/* never fits either: no node of the cluster can hold the session, its
	 * machines together when they must share one (nodefit.h); unknown when
	 * the nodes cannot be read, and then the cluster says Unschedulable */
	char fit[512];
	if (nodefit_lesson(&x->kube, st->lesson, st->multi && !c->session_net_ovn, fit,
	                   sizeof fit) == 0) {
		log_info("user %s lesson %s: refused, %s", r->user, st->lesson->id, fit);
		return refuse(st, E_NEVER_FITS, fit);
	}
	/* the seats the places ahead need are not free for this start (a fresh
	 * start sees the whole line, a place those ahead of it) */
	st->line = queue_seats_ahead(x, queue_pool(st->lesson), st->qid);
	if (st->line < 0)
		return STEP_DB;

	/* 2b: a ready pool VM of this lesson (pool.c; single-machine lessons); it
	 * already holds its seat, so a claim needs no capacity count; not past
	 * the line, though: a fresh start claims only when nobody waits */
	int pc = st->line ? POOL_NONE : pool_claim(x, st->lesson, r->user, r->t_wall, st->sid);
	if (pc == POOL_DBERR)
		return STEP_DB;
	if (pc == POOL_CLAIMED) {
		st->claimed = 1;
		return STEP_OK;
	}

	/* 3: the golden disk, or the silent fallback: per machine */
	for (size_t i = 0; i < st->n; i++) {
		struct start_vm *v = &st->vms[i];
		v->disk = v->m->disk;
		if (v->disk != DISK_GOLDEN || st->lesson->runtime == RUNTIME_POD)
			continue;
		enum golden_reason g = golden_check(&x->kube, c, v->m, detail, sizeof detail);
		if (g != GOLDEN_OK) {
			v->disk = DISK_CONTAINERDISK;
			v->fallback = golden_reason_str(g);
			log_info("user %s lesson %s%s%s: golden disk not used (%s; %s), "
			         "containerDisk instead",
			         r->user, st->lesson->id, v->m->machine ? " machine " : "",
			         v->m->machine ? v->m->machine : "", v->fallback, detail);
		}
	}

	/* 4-5: capacity, counted in the cluster under a global lock: a session of
	 * N machines takes N seats, all or none. A cluster without room for them
	 * is refused before queueing for the lock, so a burst of refusals does not
	 * wait behind the admissions; the count that admits is the one taken
	 * under the lock, which is held until every machine is submitted. */
	long need = (long)st->n;
	/* lab Pods are counted apart (pod_capacity, their own lock): no VM seat */
	enum lesson_runtime rt = st->lesson->runtime;
	int capacity = rt == RUNTIME_POD ? c->pod_capacity : c->vm_capacity;
	need += st->line;
	long code = count_lab(x, rt, &st->in_use);
	if (code != 200 || st->in_use + need <= capacity) {
		if (db_cmd(&x->db,
		           rt == RUNTIME_POD ? "SELECT pg_advisory_xact_lock(" LOCK_CAPACITY ", 1)"
		                             : "SELECT pg_advisory_xact_lock(" LOCK_CAPACITY ", 0)",
		           0, NULL) < 0)
			return lock_busy(r, st, "many labs are starting right now");
		code = count_lab(x, rt, &st->in_use);
	}
	if (code != 200) {
		log_warn("user %s: cannot count lab %s: %s", r->user,
		         rt == RUNTIME_POD ? "Pods" : "VMs", x->kube.msg);
		return refuse(st, E_CLUSTER_UNAVAILABLE,
		              "the cluster cannot be reached right now: try again in a minute");
	}
	if (st->in_use + need > capacity) {
		refuse(st, E_CAPACITY_FULL,
		       st->n > 1
		           ? "not enough lab machines are free for this lesson: try again shortly"
		           : "all lab machines are in use: try again shortly");
		jx_add_num(st->answer, "capacity", capacity);
		jx_add_num(st->answer, "in_use", (double)st->in_use);
		jx_add_num(st->answer, "seats", (double)st->n);
		jx_add_num(st->answer, "queued", (double)st->line);
		jx_add_bool(st->answer, "can_queue", 1);
		jx_add_num(st->answer, "retry_after_s", c->retry_after_s);
		resp_header(r, "Retry-After", "%d", c->retry_after_s);
		return STEP_REFUSED;
	}
	return STEP_OK;
}

/* COMMIT failed: when the connection was lost, the commit may have happened
 * or not. Ask again on a new connection so that the answer and the row agree:
 * 0 it happened (the session stands), -1 it did not (the way back undoes). */
static int commit_lost(struct req *r, struct start *st)
{
	struct labctx *x = r->x;
	struct session s;
	log_err("user %s: COMMIT of session %s failed: %s", r->user, st->sid, x->db.msg);
	if (db_ensure(&x->db) < 0)
		return -1;
	int rc = session_load(x, st->sid, &s);
	session_free(&s);
	if (rc == SESSION_FOUND) {
		log_warn("user %s: session %s was committed after all (the reply was lost)",
		         r->user, st->sid);
		return 0;
	}
	return -1;
}

/* Submission (6-7): the session row, the cluster objects, the commit. */
static enum step submission(struct req *r, struct start *st)
{
	struct labctx *x = r->x;
	char why[1024];

	if (st->qid)
		snprintf(st->sid, sizeof st->sid, "%s", st->qid);
	else if (util_uuid4(st->sid) < 0)
		return refuse(st, E_INTERNAL, "no randomness available");
	for (size_t i = 0; i < st->n; i++) {
		struct start_vm *v = &st->vms[i];
		if (util_random_hex(v->token, 32) < 0)
			return refuse(st, E_INTERNAL, "no randomness available");
		lab_names_for_machine(&v->names, st->sid, st->multi ? v->m->machine : NULL);
		if (st->multi)
			session_net_plan(st->sid, i, &v->net);
	}
	if (st->multi)
		snprintf(st->network, sizeof st->network, "%s", st->vms[0].names.network);
	if (insert_rows(r, st) < 0)
		return STEP_DB;
	if ((st->lesson->runtime == RUNTIME_POD ? submit_pod(r, st, why, sizeof why)
	                                        : submit(r, st, why, sizeof why)) < 0) {
		log_warn("user %s lesson %s: start failed, nothing left behind: %s", r->user,
		         st->lesson->id, why);
		return refuse(st, E_CLUSTER_UNAVAILABLE,
		              "the lab machine could not be created: try again in a minute");
	}
	/* 7: from here on a database failure must undo the cluster side (no retry) */
	const char *ps[1] = {st->sid};
	if (db_cmd(&x->db,
	           "UPDATE sessions SET submitted_at = clock_timestamp() WHERE id = $1::uuid", 1,
	           ps) < 0) {
		log_err("user %s: database failed after submitting session %s: %s", r->user,
		        st->sid, x->db.msg);
		return refuse(st, E_DB_UNAVAILABLE,
		              "the database is unavailable: try again shortly");
	}
	if (db_commit(&x->db) < 0 && commit_lost(r, st) < 0)
		return refuse(st, E_DB_UNAVAILABLE,
		              "the database is unavailable: try again shortly");
	st->created = 0; /* committed: the objects are the session's now */
	return STEP_OK;
}

/* Admission and submission of a parsed start (the user's press, or a place
 * of the waiting line): STEP_OK committed, else the one way back has run
 * (the cluster objects, then the transaction and its locks) and st->err,
 * st->answer say why. */
static enum step run_start(struct req *r, struct start *st)
{
	struct labctx *x = r->x;
	const struct cfg *c = x->cfg;
	st->n = lesson_nmachines(st->lesson);
	st->multi = st->lesson->nmachines > 0;
	st->vms = xcalloc(st->n, sizeof *st->vms);
	for (size_t i = 0; i < st->n; i++)
		st->vms[i].m = lesson_machine(st->lesson, i);
	enum step rc = admit(r, st);
	/* students first: idle pool VMs give their seats, admission once more;
	 * only when that makes this start fit: VM seats, nobody in line ahead,
	 * no more seats short than idle pool VMs (pool_yield: all or none) */
	long short_by = st->in_use + (long)st->n - c->vm_capacity;
	if (rc == STEP_REFUSED && st->err == E_CAPACITY_FULL && st->lesson->runtime == RUNTIME_VM &&
	    st->line == 0 && short_by >= 1) {
		db_rollback(&x->db);
		kube_deadline(&x->kube, 0); /* the next admit() has one of its own */
		int y = pool_yield(x, st->lesson->id, (int)short_by, (int)st->n);
		if (y < 0)
			return STEP_DB;
		if (y > 0) {
			cJSON_Delete(st->answer);
			st->answer = NULL;
			st->err = 0;
			buf_reset(&r->headers); /* the refusal's Retry-After */
			rc = admit(r, st);
		}
	}
	if (rc == STEP_OK && st->claimed) {
		if (db_commit(&x->db) < 0) {
			log_err("user %s: database failed after claiming a pool VM: %s", r->user,
			        x->db.msg);
			rc = refuse(st, E_DB_UNAVAILABLE,
			            "the database is unavailable: try again shortly");
		}
	} else if (rc == STEP_OK) {
		rc = submission(r, st);
	}
	for (size_t i = 0; i < st->n; i++)
		OPENSSL_cleanse(st->vms[i].token, sizeof st->vms[i].token);
	kube_deadline(&x->kube, 0); /* the way back and what follows have their own time */
	if (rc != STEP_OK) {
		if (st->created)
			undo_submit(x, st);
		db_rollback(&x->db);
		return rc;
	}
	const char *from = st->qid ? ", from the line" : "";
	if (st->lesson->runtime == RUNTIME_POD)
		log_info("user %s lesson %s: session %s, Pod %s submitted (%ld/%d in use%s)",
		         r->user, st->lesson->id, st->sid, st->vms[0].names.vm, st->in_use + 1,
		         c->pod_capacity, from);
	else
		for (size_t i = 0; !st->claimed && i < st->n; i++)
			log_info("user %s lesson %s: session %s, VM %s submitted (disk %s%s%s, "
			         "%ld/%d in use%s)",
			         r->user, st->lesson->id, st->sid, st->vms[i].names.vm,
			         lesson_disk_str(st->vms[i].disk),
			         st->vms[i].fallback ? ", fallback " : "",
			         st->vms[i].fallback ? st->vms[i].fallback : "",
			         st->in_use + (long)i + 1, c->vm_capacity, from);
	return STEP_OK;
}

/* Refused for capacity only, asked to wait: a place in line (202), under
 * the user's lock again (the start's transaction is gone): an open session
 * or place that appeared meanwhile is the answer, as for a start. */
static enum hres join_line(struct req *r, struct start *st)
{
	struct labctx *x = r->x;
	struct session s;
	cJSON *place = NULL;
	char qid[37];
	const char *pu[2] = {x->cfg->environment, r->user};
	if (db_begin(&x->db) < 0 ||
	    db_cmd(&x->db, "SELECT pg_advisory_xact_lock(" LOCK_USER ", hashtext($1 || '/' || $2))",
	           2, pu) < 0)
		goto dberr;
	int rc = session_load_active(x, r->user, &s);
	if (rc == SESSION_DBERR)
		goto dberr;
	if (rc == SESSION_FOUND) {
		db_rollback(&x->db);
		cJSON *o = error_json(E_SESSION_EXISTS, "you already have a lab session open");
		jx_put(o, "session", session_json(&s));
		session_free(&s);
		resp_error_json(r, E_SESSION_EXISTS, o);
		return H_DONE;
	}
	int got = queue_user_place(x, r->user, &place);
	if (got < 0)
		goto dberr;
	if (got) {
		db_rollback(&x->db);
		cJSON *o =
		    error_json(E_SESSION_EXISTS, "you are already waiting in line for a lab");
		jx_put(o, "session", place);
		resp_error_json(r, E_SESSION_EXISTS, o);
		return H_DONE;
	}
	if (queue_join(x, r->user, st->lesson, (long)st->n, qid) < 0 || db_commit(&x->db) < 0)
		goto dberr;
	log_info("queue: user %s joined the line for lesson %s (place %s)", r->user, st->lesson->id,
	         qid);
	cJSON *o = queue_place_json(x, qid);
	if (!o) {
		resp_error(r, E_DB_UNAVAILABLE, "the place was taken but cannot be read");
		return H_DONE;
	}
	/* what the student was told on joining, for the estimate's error */
	const cJSON *q = cJSON_GetObjectItemCaseSensitive(o, "queue");
	const char *p[3] = {qid, kj_str(q, "estimate"), kj_str(q, "no_later_than")};
	db_cmd(&x->db,
	       "UPDATE session_queue SET estimate_at = $2::timestamptz, bound_at = "
	       "$3::timestamptz WHERE id = $1::uuid",
	       3, p);
	resp_json(r, 202, o);
	return H_DONE;
dberr:
	db_rollback(&x->db);
	return api_db_error(r);
}

enum hres api_session_create(struct req *r)
{
	struct labctx *x = r->x;
	struct start st;
	struct session s;
	enum hres h = H_DONE;

	memset(&st, 0, sizeof st);
	if (parse_start(r, &st) < 0)
		return H_DONE;
	enum step rc = run_start(r, &st);
	free(st.vms);
	if (rc != STEP_OK) {
		int cap = queue_capacity(x->cfg, queue_pool(st.lesson));
		int seats_free = st.err == E_CAPACITY_FULL && st.in_use < cap;
		if (rc == STEP_REFUSED && st.err == E_CAPACITY_FULL && st.want_queue) {
			cJSON_Delete(st.answer);
			buf_reset(&r->headers); /* no Retry-After on a 202 */
			h = join_line(r, &st);
		} else if (rc == STEP_DB) {
			h = api_db_error(r);
		} else {
			resp_error_json(r, st.err, st.answer);
		}
		/* free seats held back for the line: move it */
		if (seats_free)
			queue_pump(x);
		return h;
	}
	if (session_load(x, st.sid, &s) != SESSION_FOUND) {
		resp_error(r, E_DB_UNAVAILABLE, "the session was created but cannot be read");
		return H_DONE;
	}
	resp_json(r, 201, session_json(&s));
	session_free(&s);
	return H_DONE;
}

int api_start_queued(struct labctx *x, const char *qid, const char *user, const char *lesson)
{
	struct req q;
	struct start st;
	struct timespec ts;

	memset(&q, 0, sizeof q);
	memset(&st, 0, sizeof st);
	q.x = x;
	q.user = (char *)user;
	clock_gettime(CLOCK_REALTIME, &ts);
	q.t_wall = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
	st.qid = qid;
	st.lesson = lessons_find(x->lessons, lesson);
	if (!st.lesson) {
		const char *p[2] = {qid, "the lesson is no longer offered"};
		db_cmd(&x->db,
		       "UPDATE session_queue SET state = 'failed', ended_at = now(), error = $2 "
		       "WHERE id = $1::uuid AND state = 'waiting'",
		       2, p);
		log_warn("queue: place %s of user %s dropped: lesson %s is not offered", qid, user,
		         lesson);
		return 2;
	}
	enum step rc = run_start(&q, &st);
	free(st.vms);
	buf_free(&q.headers);
	if (rc == STEP_OK) {
		log_info("queue: user %s admitted from the line (session %s%s)", user, qid,
		         st.claimed ? ", a warm pool VM" : "");
		cJSON_Delete(st.answer);
		return 1;
	}
	int out = rc == STEP_DB ? -1 : 0;
	if (rc == STEP_REFUSED && (st.err == E_SESSION_EXISTS || st.err == E_NEVER_FITS)) {
		/* it could never be admitted: out of the line, so it does not block it */
		const char *p[2] = {qid, kj_str(st.answer, "message")};
		db_cmd(&x->db,
		       "UPDATE session_queue SET state = 'failed', ended_at = now(), error = $2 "
		       "WHERE id = $1::uuid AND state = 'waiting'",
		       2, p);
		out = 2;
	}
	cJSON_Delete(st.answer);
	return out;
}

/* ------------------------------------------------------------ read / end */

enum hres api_session_get(struct req *r)
{
	resp_json(r, 200, session_json(r->sess));
	return H_DONE;
}

enum hres api_session_delete(struct req *r)
{
	struct session *s = r->sess;
	if (session_active(s)) {
		if (session_finish(r->x, s, SESSION_ENDED, "user", NULL) < 0) {
			resp_error(r, E_DB_UNAVAILABLE, "the database is unavailable: try again");
			return H_DONE;
		}
		/* a seat freed (once its VM is gone): the line's head may take it */
		queue_pump(r->x);
	} else {
		/* ended or failed already: make sure nothing is left (idempotent) */
		session_delete_objects(r->x, s);
	}
	resp_json(r, 200, session_json(s));
	return H_DONE;
}

/* ------------------------------------------------------------ grade */

static char *step_output(const cJSON *res)
{
	const char *out = kj_str(res, "stdout"), *err = kj_str(res, "stderr");
	struct buf b = {0};
	buf_puts(&b, out ? out : "");
	if (err && *err) {
		if (b.len && b.p[b.len - 1] != '\n')
			buf_puts(&b, "\n");
		buf_puts(&b, err);
	}
	if (!b.p)
		buf_puts(&b, "");
	/* what a guest printed, any bytes (an agent the student replaced, a Pod's
	 * exec): valid UTF-8, cut on a character, or the grade's jsonb refuses it */
	char *all = utf8_clean_dup(b.p, b.len, 3 * b.len);
	buf_free(&b);
	if (strlen(all) <= GRADE_OUTPUT_MAX)
		return all;
	char *cut = xmalloc(GRADE_OUTPUT_MAX + sizeof GRADE_TRUNCATED);
	size_t n = utf8_clean_cut(cut, all, GRADE_OUTPUT_MAX);
	memcpy(cut + n, GRADE_TRUNCATED, sizeof GRADE_TRUNCATED);
	free(all);
	return cut;
}

/* One grader step in a lab Pod, by exec: the agent's answer shape
 * ({"exit_code","stdout","stderr","timed_out"}) in *res. -1: answered. */
static int grade_by_exec(struct req *r, const struct session *s, const struct grader_step *gs,
                         int timeout, cJSON **res)
{
	struct labctx *x = r->x;
	struct podexec_result pr;
	char msg[300];
	double t0 = util_mono_s();
	char *bearer = kube_bearer(&x->kube);

	if (!bearer) {
		resp_error(r, E_CLUSTER_UNAVAILABLE, "the cluster cannot be reached right now");
		return -1;
	}
	int rc = podexec_run(x->cfg, bearer, s->vms[0].name, POD_CONTAINER, gs->command, timeout,
	                     &pr, msg, sizeof msg);
	util_free_secret(bearer);
	if (rc < 0) {
		podexec_result_free(&pr);
		log_warn("session %s: grading step \"%s\": %s", s->id, gs->name, msg);
		resp_error(r, E_AGENT_UNREACHABLE, "your lab could not be reached for grading (%s)",
		           msg);
		return -1;
	}
	x->kube.ms += (util_mono_s() - t0) * 1000.0; /* Server-Timing: kube */
	*res = jx_obj();
	if (pr.exit_code >= 0)
		jx_add_num(*res, "exit_code", pr.exit_code);
	else
		jx_add_null(*res, "exit_code");
	/* raw bytes from the Pod (NULs too): valid UTF-8 before they become strings */
	char *o = utf8_clean_dup(pr.out, pr.nout, 3 * PODEXEC_OUTPUT_MAX);
	char *e = pr.status_message[0] && !pr.nerr
	              ? utf8_clean_dup(pr.status_message, strlen(pr.status_message), 1023)
	              : utf8_clean_dup(pr.err, pr.nerr, 3 * PODEXEC_OUTPUT_MAX);
	jx_add_str(*res, "stdout", o);
	jx_add_str(*res, "stderr", e);
	free(o);
	free(e);
	if (pr.timed_out)
		jx_add_bool(*res, "timed_out", 1);
	podexec_result_free(&pr);
	return 0;
}

/* The whole grade's deadline: the lesson's grade_timeout_s, else its steps'
 * timeouts (+5 s each for the round trip), never more than grade_timeout_s. */
static int grade_deadline_s(const struct cfg *c, const struct lesson *l)
{
	long sum = 0;
	for (size_t i = 0; i < l->nsteps; i++)
		sum += (l->steps[i].timeout_s ? l->steps[i].timeout_s : c->agent_run_timeout_s) + 5;
	if (l->grade_timeout_s)
		sum = l->grade_timeout_s;
	if (sum < 1)
		sum = 1;
	return sum > c->grade_timeout_s ? c->grade_timeout_s : (int)sum;
}

static void add_step_names(cJSON *e, const struct grader_step *gs, const char *mname)
{
	jx_add_str(e, "name", gs->name);
	if (mname)
		jx_add_str(e, "machine", mname);
	if (gs->name_ja) {
		cJSON *ja = jx_obj();
		jx_add_str(ja, "name", gs->name_ja);
		cJSON *i18n = jx_obj();
		cJSON_AddItemToObject(i18n, "ja", ja);
		cJSON_AddItemToObject(e, "i18n", i18n);
	}
}

static void step_not_run(cJSON *steps, const struct grader_step *gs, const char *mname,
                         int deadline)
{
	char out[160];
	snprintf(out, sizeof out, "not run: the grade's deadline (%d s) passed", deadline);
	cJSON *e = jx_obj();
	add_step_names(e, gs, mname);
	jx_add_bool(e, "passed", 0);
	jx_add_str(e, "output", out);
	jx_add_null(e, "exit_code");
	jx_add_bool(e, "timed_out", 1);
	jx_push(steps, e);
}

/* One grade per session at a time (409 grade_running), one deadline for the
 * whole grade, and the token only to the session's own VMI (read again
 * before a machine's first step): a frozen or slow agent costs its student
 * one worker for one deadline and the class nothing. */
enum hres api_session_grade(struct req *r)
{
	struct labctx *x = r->x;
	struct session *s = r->sess; /* ready, with its VMs (NEED_READY) */
	const struct lesson *l = lessons_find(x->lessons, s->lesson);
	int passed = 0;
	char msg[512];

	if (!l) {
		resp_error(r, E_LESSON_GONE, "lesson \"%s\" is no longer offered", s->lesson);
		return H_DONE;
	}
	int deadline = grade_deadline_s(x->cfg, l);
	int got = session_lease_take(x, s->id, LEASE_GRADE, (deadline + 10) * 1000L);
	if (got < 0)
		return api_db_error(r);
	if (got == 0) {
		cJSON *e = error_json(E_GRADE_RUNNING,
		                      "a grade of this lab is still running: wait for its result");
		jx_add_num(e, "retry_after_s", 2);
		resp_header(r, "Retry-After", "2");
		resp_error_json(r, E_GRADE_RUNNING, e);
		return H_DONE;
	}
	double end = util_mono_s() + deadline;
	cJSON *o = jx_obj();
	cJSON *steps = jx_arr();
	size_t nm = lesson_nmachines(l);
	int *mpassed = xcalloc(nm + 1, sizeof *mpassed), *mtotal = xcalloc(nm + 1, sizeof *mtotal);
	int *checked = xcalloc(s->nvms + 1, sizeof *checked);
	for (size_t i = 0; i < l->nsteps; i++) {
		const struct grader_step *gs = &l->steps[i];
		const char *mname = l->nmachines ? l->machines[gs->machine].machine : NULL;
		struct session_vm *vm = (struct session_vm *)session_vm_find(s, mname);
		cJSON *res = NULL;
		int timeout = gs->timeout_s ? gs->timeout_s : x->cfg->agent_run_timeout_s;
		long left_ms = (long)((end - util_mono_s()) * 1000.0);
		if (left_ms < 500) {
			step_not_run(steps, gs, mname, deadline);
			mtotal[gs->machine]++;
			continue;
		}
		if (timeout * 1000L > left_ms)
			timeout = (int)(left_ms / 1000) > 0 ? (int)(left_ms / 1000) : 1;
		const char *why = NULL;
		size_t vi = vm ? (size_t)(vm - s->vms) : 0;
		if (s->runtime == RUNTIME_POD) {
			/* a Pod has no agent: each step runs by exec */
			if (grade_by_exec(r, s, gs, timeout, &res) < 0) {
				session_lease_release(x, s->id, LEASE_GRADE);
				cJSON_Delete(o);
				cJSON_Delete(steps);
				free(mpassed);
				free(mtotal);
				free(checked);
				return H_DONE;
			}
		} else if (!vm) {
			why = "no such machine";
		} else if (!checked[vi] && session_vmi_check(x, s, vm, msg, sizeof msg) < 0) {
			why = msg;
		} else {
			checked[vi] = 1;
			if (agent_run(&x->agent, vm->ip, x->cfg->agent_port, vm->token, gs->command,
			              timeout, left_ms, &res) < 0) {
				why = x->agent.msg;
				/* after an agent failure the VMI is read again first */
				const char *p[2] = {s->id, vm->name};
				db_cmd(&x->db,
				       "UPDATE session_vms SET vmi_uid = NULL WHERE session_id = "
				       "$1::uuid AND vm_name = $2",
				       2, p);
			}
		}
		if (why) {
			log_warn("session %s: grading step %zu%s%s: %s", s->id, i + 1,
			         mname ? " on " : "", mname ? mname : "", why);
			session_lease_release(x, s->id, LEASE_GRADE);
			cJSON_Delete(o);
			cJSON_Delete(steps);
			free(mpassed);
			free(mtotal);
			free(checked);
			if (mname)
				resp_error(
				    r, E_AGENT_UNREACHABLE,
				    "the grading agent in your machine %s did not answer (%s)",
				    mname, why);
			else
				resp_error(r, E_AGENT_UNREACHABLE,
				           "the grading agent in your VM did not answer (%s)", why);
			return H_DONE;
		}
		const cJSON *ec = cJSON_GetObjectItemCaseSensitive(res, "exit_code");
		const cJSON *to = cJSON_GetObjectItemCaseSensitive(res, "timed_out");
		int ok = cJSON_IsNumber(ec) && ec->valueint == 0 && !cJSON_IsTrue(to);
		char *out = step_output(res);
		cJSON *e = jx_obj();
		add_step_names(e, gs, mname);
		jx_add_bool(e, "passed", ok);
		jx_add_str(e, "output", out);
		if (cJSON_IsNumber(ec))
			jx_add_num(e, "exit_code", ec->valueint);
		else
			jx_add_null(e, "exit_code");
		if (cJSON_IsTrue(to))
			jx_add_bool(e, "timed_out", 1);
		jx_push(steps, e);
		passed += ok;
		mpassed[gs->machine] += ok;
		mtotal[gs->machine]++;
		free(out);
		cJSON_Delete(res);
	}
	free(checked);
	jx_add_num(o, "passed", passed);
	jx_add_num(o, "total", (double)l->nsteps);
	jx_put(o, "steps", steps);
	if (l->nmachines) {
		/* the grade per machine, in the lesson's order */
		cJSON *ms = jx_add_arr(o, "machines");
		for (size_t i = 0; i < nm; i++) {
			cJSON *m = jx_obj();
			jx_add_str(m, "machine", l->machines[i].machine);
			jx_add_num(m, "passed", mpassed[i]);
			jx_add_num(m, "total", mtotal[i]);
			jx_push(ms, m);
		}
	}
	free(mpassed);
	free(mtotal);
	char *json = jx_print(o);
	const char *p[2] = {s->id, json};
	if (db_cmd(&x->db,
	           "UPDATE sessions SET last_grade = $2::jsonb, graded_at = clock_timestamp(), "
	           "grade_until = NULL WHERE id = $1::uuid",
	           2, p) < 0) {
		log_warn("session %s: storing the grade failed: %s", s->id, x->db.msg);
		session_lease_release(x, s->id, LEASE_GRADE);
	}
	cJSON_free(json);
	log_info("session %s (%s, %s): graded %d/%zu", s->id, s->user, s->lesson, passed,
	         l->nsteps);
	resp_json(r, 200, o);
	return H_DONE;
}

/* ------------------------------------------------------------ console */

/* The machine a console request is about: {"machine": NAME} in the body,
 * without it the first. NULL when answered (400, 404). */
static const struct session_vm *pick_machine(struct req *r, const struct session *s)
{
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(r->json, "machine");
	if (m && !cJSON_IsNull(m) && !cJSON_IsString(m)) {
		resp_error(r, E_BAD_REQUEST, "\"machine\" must be a machine's name");
		return NULL;
	}
	const char *mname = cJSON_IsString(m) ? m->valuestring : NULL;
	const struct session_vm *vm = session_vm_find(s, mname);
	if (!vm) {
		resp_error(r, E_NOT_FOUND, "this session has no machine \"%.64s\"", mname);
		return NULL;
	}
	return vm;
}

enum hres api_console_ticket(struct req *r)
{
	struct labctx *x = r->x;
	const struct cfg *c = x->cfg;
	const struct session *s = r->sess; /* ready, with a VM (NEED_READY) */
	const struct session_vm *vm = pick_machine(r, s);
	if (!vm)
		return H_DONE;
	char *t = ticket_make(c->ticket_key, c->ticket_key_len, s->id, s->user, vm->name,
	                      util_epoch_s() + c->ticket_ttl_s);
	if (!t) {
		resp_error(r, E_INTERNAL, "could not sign a console ticket");
		return H_DONE;
	}
	char *url = xasprintf("%s%s%s?ticket=%s", c->base_path, c->console_path, s->id, t);
	cJSON *o = jx_obj();
	jx_add_str(o, "ticket", t);
	jx_add_str(o, "url", url);
	if (vm->machine)
		jx_add_str(o, "machine", vm->machine);
	jx_add_num(o, "expires_in", c->ticket_ttl_s);
	util_free_secret(url);
	util_free_secret(t);
	resp_json(r, 200, o);
	return H_DONE;
}

/* The browser terminal's size for a VM's serial console: the guest agent sets
 * it on the guest's console tty (a serial line has no size of its own; the
 * kernel then signals the program in front). A Pod's exec stream takes its
 * size on the console WebSocket instead.
 *
 * One agent request in flight per session (LEASE_TTY), like grades and
 * probes: every request first records its size for its machine (tty_seq
 * numbers them, sql/010); the one that takes the lease sends each machine's
 * newest size (the VMI read again first: the token goes only to this
 * session's VMI), and looks again after it lets go, so a size recorded
 * while it was sending is sent too. A request that finds the lease taken
 * answers 202 {"cols","rows","pending":true} at once: the holder sends its
 * size, or a newer one. A frozen agent costs its student one worker, for as
 * long as that student keeps asking, and the class nothing. */
struct tty_pending {
	char vm_name[64];
	int cols, rows;
	char seq[24];
};

/* The first machine of s with a size not sent yet. 1 found, 0 none, -1 db. */
static int tty_next(struct labctx *x, const char *sid, struct tty_pending *p)
{
	const char *q[1] = {sid};
	PGresult *res = db_exec(&x->db,
	                        "SELECT vm_name, tty_cols, tty_rows, tty_seq FROM session_vms "
	                        "WHERE session_id = $1::uuid AND tty_seq > tty_sent AND "
	                        "tty_cols IS NOT NULL ORDER BY vm_name LIMIT 1",
	                        1, q);
	if (!res)
		return -1;
	int found = PQntuples(res) == 1;
	if (found) {
		snprintf(p->vm_name, sizeof p->vm_name, "%s", PQgetvalue(res, 0, 0));
		p->cols = atoi(PQgetvalue(res, 0, 1));
		p->rows = atoi(PQgetvalue(res, 0, 2));
		snprintf(p->seq, sizeof p->seq, "%s", PQgetvalue(res, 0, 3));
	}
	PQclear(res);
	return found;
}

/* Send one machine's newest size (the lease held). 0 set, 1 no console yet,
 * -1 not reached (msg). */
static int tty_send(struct labctx *x, struct session *s, struct session_vm *vm, int *checked,
                    const struct tty_pending *p, char *msg, size_t msglen)
{
	size_t vi = (size_t)(vm - s->vms);
	int rc;
	if (!checked[vi] && session_vmi_check(x, s, vm, msg, msglen) < 0) {
		rc = -1;
	} else {
		checked[vi] = 1;
		rc = agent_tty_size(&x->agent, vm->ip, x->cfg->agent_port, vm->token, p->cols,
		                    p->rows, x->cfg->agent_ready_timeout_ms);
		if (rc < 0) {
			snprintf(msg, msglen, "%s", x->agent.msg);
			/* the VMI is read again before the next request to it */
			checked[vi] = 0;
			const char *q[2] = {s->id, vm->name};
			db_cmd(
			    &x->db,
			    "UPDATE session_vms SET vmi_uid = NULL WHERE session_id = $1::uuid AND "
			    "vm_name = $2",
			    2, q);
			free(vm->vmi_uid);
			vm->vmi_uid = NULL;
		}
		rc = rc < 0 ? -1 : rc == 409 ? 1 : 0;
	}
	/* tried: a newer size (a higher tty_seq) is sent next, this one never again */
	const char *q[3] = {s->id, p->vm_name, p->seq};
	db_cmd(&x->db,
	       "UPDATE session_vms SET tty_sent = GREATEST(tty_sent, $3::bigint) "
	       "WHERE session_id = $1::uuid AND vm_name = $2",
	       3, q);
	return rc;
}

enum hres api_tty_size(struct req *r)
{
	struct labctx *x = r->x;
	struct session *s = r->sess; /* ready, with the VM's address (NEED_AGENT) */
	const cJSON *cols = cJSON_GetObjectItemCaseSensitive(r->json, "cols");
	const cJSON *rows = cJSON_GetObjectItemCaseSensitive(r->json, "rows");
	if (s->runtime == RUNTIME_POD) {
		/* no agent in a Pod: labvm-console passes the size to its exec tty */
		resp_error(r, E_BAD_REQUEST,
		           "a Pod's terminal takes its size on the console WebSocket "
		           "({\"type\":\"resize\",\"cols\":C,\"rows\":R})");
		return H_DONE;
	}
	if (!cJSON_IsNumber(cols) || !cJSON_IsNumber(rows) || cols->valuedouble != cols->valueint ||
	    rows->valuedouble != rows->valueint || cols->valueint < 1 || cols->valueint > 1000 ||
	    rows->valueint < 1 || rows->valueint > 1000) {
		resp_error(r, E_BAD_REQUEST, "cols and rows must be integers in 1..1000");
		return H_DONE;
	}
	const struct session_vm *mine = pick_machine(r, s);
	if (!mine)
		return H_DONE;
	if (!mine->ip) {
		resp_error(r, E_AGENT_UNREACHABLE, "the lab machine has no address yet");
		return H_DONE;
	}
	char c[16], rw[16];
	snprintf(c, sizeof c, "%d", cols->valueint);
	snprintf(rw, sizeof rw, "%d", rows->valueint);
	const char *q[4] = {s->id, mine->name, c, rw};
	if (db_cmd(&x->db,
	           "UPDATE session_vms SET tty_cols = $3::int, tty_rows = $4::int, "
	           "tty_seq = tty_seq + 1 WHERE session_id = $1::uuid AND vm_name = $2",
	           4, q) < 0)
		return api_db_error(r);

	/* one iteration: a VMI read, one agent call and a few statements */
	long lease_ms = (long)x->cfg->kube_timeout_ms + x->cfg->agent_ready_timeout_ms + 5000;
	int *checked = xcalloc(s->nvms + 1, sizeof *checked);
	int held = 0;         /* this request took the lease at least once */
	int sent = 0, rc = 0; /* this request sent its machine a size: the outcome */
	struct tty_pending got = {{0}, 0, 0, {0}}, last = {{0}, 0, 0, {0}};
	char msg[512] = "";
	for (;;) {
		int t = session_lease_take(x, s->id, LEASE_TTY, lease_ms);
		if (t <= 0) {
			if (t < 0 && !held) {
				free(checked);
				return api_db_error(r);
			}
			break; /* another request holds it and sends what is left */
		}
		held = 1;
		struct tty_pending p;
		int n;
		while ((n = tty_next(x, s->id, &p)) > 0) {
			if (strcmp(p.vm_name, last.vm_name) == 0 && strcmp(p.seq, last.seq) == 0) {
				n = -1; /* its tty_sent was not recorded (the database): no loop */
				break;
			}
			last = p;
			struct session_vm *vm = NULL;
			for (size_t i = 0; i < s->nvms && !vm; i++)
				if (strcmp(s->vms[i].name, p.vm_name) == 0)
					vm = &s->vms[i];
			if (vm) {
				char why[512];
				int one = tty_send(x, s, vm, checked, &p, why, sizeof why);
				if (one < 0)
					log_warn("session %s: tty-size for %s: %s", s->id, vm->name,
					         why);
				if (vm == mine) {
					sent = 1;
					rc = one;
					got = p;
					snprintf(msg, sizeof msg, "%s", one < 0 ? why : "");
				}
			} else {
				/* a machine this session no longer has: never sent */
				const char *d[3] = {s->id, p.vm_name, p.seq};
				db_cmd(&x->db,
				       "UPDATE session_vms SET tty_sent = GREATEST(tty_sent, "
				       "$3::bigint) "
				       "WHERE session_id = $1::uuid AND vm_name = $2",
				       3, d);
			}
			/* still the holder: the lease runs from now (no one else slips in
			 * between two sends) */
			char ms[24];
			snprintf(ms, sizeof ms, "%ld", lease_ms);
			const char *d[2] = {s->id, ms};
			db_cmd(&x->db,
			       "UPDATE sessions SET tty_until = clock_timestamp() + "
			       "make_interval(secs => $2::float8 / 1000) WHERE id = $1::uuid",
			       2, d);
		}
		session_lease_release(x, s->id, LEASE_TTY);
		if (n < 0)
			break;
		/* nothing was left: look once more now that the lease is free (a size
		 * recorded just before the release found the lease taken) */
		if (tty_next(x, s->id, &p) <= 0)
			break;
	}
	free(checked);
	if (!sent) {
		/* recorded: the request in flight sends it (or a newer size) */
		cJSON *o = jx_obj();
		jx_add_num(o, "cols", cols->valueint);
		jx_add_num(o, "rows", rows->valueint);
		jx_add_bool(o, "pending", 1);
		resp_json(r, 202, o);
		return H_DONE;
	}
	if (rc < 0) {
		resp_error(r, E_AGENT_UNREACHABLE, "the lab machine's agent did not answer (%s)",
		           msg);
		return H_DONE;
	}
	if (rc == 1) {
		resp_error(r, E_NOT_READY, "the lab machine's serial console is not open yet");
		return H_DONE;
	}
	/* the size the console has now: this request's, or one asked for after it */
	cJSON *o = jx_obj();
	jx_add_num(o, "cols", got.cols);
	jx_add_num(o, "rows", got.rows);
	resp_json(r, 200, o);
	return H_DONE;
}
