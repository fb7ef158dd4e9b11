/* labvm-reaper - make the cluster and the database agree, every minute.
 *
 *   labvm-reaper [--dry-run] [--grace SECONDS]
 *
 * One run, under pg_try_advisory_lock (a second run exits at once):
 *   1. snapshot the active sessions of this environment
 *   2. list this environment's lab VMs, Pods, Secrets and session networks
 *      (NetworkAttachmentDefinitions) (label selector on the
 *      lab-session marker AND the environment; of the pods, only lab Pods:
 *      manifest_is_lab_pod, the lab-pod mark, so never a CDI importer that
 *      inherited a DataVolume's labels): if a list fails, stop here
 *      with a non-zero exit and delete nothing (no decisions on partial
 *      knowledge)
 *   3. advance every active session: expired and idle ones end (VM and Secret deleted),
 *      stuck starts fail at their deadlines, exactly as the API would
 *   4. active sessions whose machine vanished from the cluster (a VM, a Pod)
 *      or ended by itself (a ready Pod that died: its runtime's ended()) fail
 *   5. objects without an active session are orphans: deleted when their
 *      session ended or failed, or, without any session row, once older than
 *      the grace period (an in-flight start is never raced). orphan_grace_s is
 *      at least the longest start; a shorter --grace (tests, an operator
 *      after a crash) is used only when no start holds its user lock; a warm pool VM
 *      (<prefix>/pool label) that the pool still owns (pool_owns: starting,
 *      ready, or claimed by an active session) is not an orphan
 *   6. the warm pool's tick (pool.h): stale, failed and vanished pool VMs
 *      are replaced, each lesson's pool filled to its target (skipped when
 *      the lessons cannot be loaded: no "lesson gone" on partial knowledge)
 * Objects of another environment, or without the marker, are never touched.
 * One summary line per run; one line per deletion with its reason. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "jsonx.h"
#include "lab.h"
#include "locks.h"
#include "log.h"
#include "metrics.h"
#include "pool.h"
#include "provision.h"
#include "queue.h"
#include "runtime.h"
#include "session.h"
#include "session_change.h"

struct counts {
	int expired, idle, failed_stuck, vanished, orphan_vms, orphan_secrets, orphan_networks,
	    kept_young, errors;
	int orphan_pods;
};

struct obj {
	char *kind;       /* a runtime's kind ("virtualmachines", "pods"), "secrets" or
	                     "network-attachment-definitions" */
	const char *noun; /* for the log */
	char *name;
	char *ended;      /* a runtime's object that ended by itself: why, else NULL */
	char *session_id; /* label value, may be NULL */
	double age_s;
	int done; /* deleted (or found deleted) during this run */
	int pool; /* carries the warm pool's label */
};

struct objs {
	struct obj *v;
	size_t n;
};

static int dry_run;

/* The pass and what it deleted, for /api/metrics (one UPSERT each), and this
 * run's call histograms. */
static void reaper_metrics(struct labctx *x, const char *env, int rc, const struct counts *k)
{
	const struct {
		const char *what;
		int n;
	} del[] = {{"expired", k->expired},           {"idle", k->idle},
	           {"failed_stuck", k->failed_stuck}, {"vanished", k->vanished},
	           {"orphan_vm", k->orphan_vms},      {"orphan_secret", k->orphan_secrets},
	           {"orphan_pod", k->orphan_pods}};
	char lab[64];
	db_rollback(&x->db);
	metrics_count(&x->db, env, "labvm_reaper_passes_total",
	              rc ? "status=\"incomplete\"" : "status=\"ok\"", 1);
	for (size_t i = 0; i < sizeof del / sizeof del[0]; i++)
		if (del[i].n) {
			snprintf(lab, sizeof lab, "what=\"%s\"", del[i].what);
			metrics_count(&x->db, env, "labvm_reaper_deleted_total", lab, del[i].n);
		}
	metrics_flush(&x->db, env);
}

static double parse_age(const char *ts, double now)
{
	struct tm tm;
	memset(&tm, 0, sizeof tm);
	if (!ts || !strptime(ts, "%Y-%m-%dT%H:%M:%S", &tm))
		return 0;
	return now - (double)timegm(&tm);
}

/* List one kind of this environment's lab objects: a runtime's (rt), else
 * Secrets or session networks (noun). 0 ok, -1 failed; a kind the cluster
 * does not serve at all (404, no Multus) is an empty list when missing_ok. */
static int list_objs(struct labctx *x, const char *kind, const struct runtime_ops *rt,
                     const char *noun, int missing_ok, struct objs *out)
{
	const struct cfg *c = x->cfg;
	char *path = kube_path(kind, c->namespace_, NULL);
	/* a runtime's lab objects, not those of another controller that carry a
	 * lab's labels too (rt->selector, rt->is_lab below) */
	char *sel = xasprintf("%s=true,%s=%s%s", c->label.lab_session, c->label.environment,
	                      c->environment, rt ? rt->selector : "");
	cJSON *list = NULL;
	/* metadata only: Secrets carry cloud-init payloads, and a long list of
	 * them must not exceed the answer cap and stop the reaper; a runtime
	 * whose objects end by themselves is read whole (their status says so) */
	long code = rt && rt->list_whole ? kube_list(&x->kube, path, sel, &list)
	                                 : kube_list_meta(&x->kube, path, sel, &list);
	const cJSON *items = kj_get(list, "items"), *it;
	double now = (double)time(NULL);
	int rc = 0;

	if (code == 404 && missing_ok)
		goto out;
	if (code != 200 || !cJSON_IsArray(items)) {
		log_err("listing %s failed: %s", kind, x->kube.msg[0] ? x->kube.msg : "bad answer");
		rc = -1;
		goto out;
	}
	out->v =
	    xrealloc(out->v, (out->n + (size_t)cJSON_GetArraySize(items) + 1) * sizeof *out->v);
	cJSON_ArrayForEach(it, items)
	{
		const cJSON *labels = kj_get(it, "metadata.labels");
		const cJSON *marker =
		    cJSON_GetObjectItemCaseSensitive(labels, c->label.lab_session);
		const cJSON *env = cJSON_GetObjectItemCaseSensitive(labels, c->label.environment);
		const cJSON *sid = cJSON_GetObjectItemCaseSensitive(labels, c->label.session_id);
		const cJSON *pool = cJSON_GetObjectItemCaseSensitive(labels, c->label.pool);
		const char *name = kj_str(it, "metadata.name");
		/* never trust the selector alone with deletions */
		if (!name || !cJSON_IsString(marker) || strcmp(marker->valuestring, "true") != 0 ||
		    !cJSON_IsString(env) || strcmp(env->valuestring, c->environment) != 0 ||
		    (rt && rt->is_lab && !rt->is_lab(c, it)))
			continue;
		struct obj *o = &out->v[out->n++];
		memset(o, 0, sizeof *o);
		o->kind = xstrdup(kind);
		o->noun = rt ? rt->noun : noun;
		o->name = xstrdup(name);
		o->session_id = cJSON_IsString(sid) ? xstrdup(sid->valuestring) : NULL;
		o->pool = cJSON_IsString(pool);
		o->age_s = parse_age(kj_str(it, "metadata.creationTimestamp"), now);
		char why[1024];
		if (rt && rt->ended && rt->ended(it, why, sizeof why))
			o->ended = xstrdup(why);
	}
out:
	cJSON_Delete(list);
	free(sel);
	free(path);
	return rc;
}

static void objs_free(struct objs *os)
{
	for (size_t i = 0; i < os->n; i++) {
		free(os->v[i].kind);
		free(os->v[i].name);
		free(os->v[i].session_id);
		free(os->v[i].ended);
	}
	free(os->v);
	memset(os, 0, sizeof *os);
}

static struct obj *find_obj(struct objs *os, const char *kind, const char *name)
{
	for (size_t i = 0; i < os->n; i++)
		if (strcmp(os->v[i].kind, kind) == 0 && strcmp(os->v[i].name, name) == 0)
			return &os->v[i];
	return NULL;
}

/* The ids of this environment's active sessions (malloc'd array of malloc'd strings). */
static int active_ids(struct labctx *x, char ***ids, size_t *n)
{
	const char *p[1] = {x->cfg->environment};
	PGresult *r = db_exec(&x->db,
	                      "SELECT id::text FROM sessions WHERE environment = $1 "
	                      "AND state IN ('starting', 'ready') ORDER BY created_at",
	                      1, p);
	if (!r)
		return -1;
	*n = (size_t)PQntuples(r);
	*ids = xcalloc(*n + 1, sizeof **ids);
	for (size_t i = 0; i < *n; i++)
		(*ids)[i] = xstrdup(PQgetvalue(r, (int)i, 0));
	PQclear(r);
	return 0;
}

/* State of a session row (enum session_state), or -1 when there is none. */
static int row_state(struct labctx *x, const char *sid)
{
	const char *p[2] = {sid, x->cfg->environment};
	if (!sid || !util_uuid_valid(sid))
		return -1;
	PGresult *r = db_exec(
	    &x->db, "SELECT state FROM sessions WHERE id = $1::uuid AND environment = $2", 2, p);
	int st = r && PQntuples(r) ? session_state_parse(PQgetvalue(r, 0, 0)) : -1;
	PQclear(r);
	return st;
}

static void advance_one(struct labctx *x, const char *id, struct objs *vms, struct objs *secrets,
                        struct objs *nets, struct counts *k)
{
	struct session s;
	if (session_load(x, id, &s) != SESSION_FOUND) {
		k->errors++;
		return;
	}
	if (dry_run) {
		/* the same rule session_advance() follows, without asking anyone */
		struct session_due d = session_due(&s, s.t_now);
		if (d.what == DUE_EXPIRE) {
			printf("would end session %s (%s, %s): expired\n", s.id, s.user, s.lesson);
			k->expired++;
		} else if (d.what == DUE_IDLE) {
			printf("would end session %s (%s, %s): idle\n", s.id, s.user, s.lesson);
			k->idle++;
		} else if ((d.what == DUE_RUNNING || d.what == DUE_READY) && d.overdue) {
			printf("would fail session %s (%s, %s): past its %s deadline\n", s.id,
			       s.user, s.lesson, d.what == DUE_READY ? "ready" : "running");
			k->failed_stuck++;
		}
		session_free(&s);
		return;
	}
	enum session_state before = s.state;
	if (session_advance(x, &s) < 0) {
		k->errors++;
	} else if (!session_active(&s)) {
		if (s.end_reason && strcmp(s.end_reason, "expired") == 0)
			k->expired++;
		else if (s.end_reason && strcmp(s.end_reason, "idle") == 0)
			k->idle++;
		else if (before != s.state)
			k->failed_stuck++;
		log_info("session %s (%s, %s): %s -> %s%s%s", s.id, s.user, s.lesson,
		         session_state_str(before), session_state_str(s.state), s.error ? ": " : "",
		         s.error ? s.error : "");
		/* its objects were deleted by the transition: not orphans below */
		for (size_t i = 0; i < s.nvms; i++) {
			struct obj *o = find_obj(vms, runtime_of(s.runtime)->kind, s.vms[i].name);
			if (o)
				o->done = 1;
			o = find_obj(secrets, "secrets", s.vms[i].secret);
			if (o)
				o->done = 1;
		}
		struct obj *o =
		    s.network ? find_obj(nets, "network-attachment-definitions", s.network) : NULL;
		if (o)
			o->done = 1;
	}
	session_free(&s);
}

/* Active sessions whose machine is gone from the cluster (the list was
 * taken after the snapshot, so their machines existed before it), or ended
 * by itself (a ready Pod that died fails its session as a vanished VM does:
 * restartPolicy Never, it stays ended; a starting one was advanced just
 * before and named its failure). */
static void vanished_one(struct labctx *x, const char *id, struct objs *vms, struct counts *k)
{
	struct session s;
	if (session_load(x, id, &s) != SESSION_FOUND)
		return;
	const struct runtime_ops *rt = runtime_of(s.runtime);
	for (size_t i = 0; session_active(&s) && i < s.nvms; i++) {
		if (s.vms[i].deleted)
			continue;
		struct obj *o = find_obj(vms, rt->kind, s.vms[i].name);
		if (o && !o->ended)
			continue;
		const char *what = o ? "ended" : "vanished";
		char msg[1200];
		if (o)
			snprintf(msg, sizeof msg, "%s: %s", session_stage_str(s.stage), o->ended);
		else
			snprintf(msg, sizeof msg, "%s: the %s %s disappeared from the cluster",
			         session_stage_str(s.stage), rt->noun, s.vms[i].name);
		k->vanished++;
		if (dry_run) {
			printf("would fail session %s (%s): %s %s %s\n", s.id, s.user, rt->noun,
			       s.vms[i].name, what);
		} else {
			log_info("session %s (%s): %s %s %s; failing the session", s.id, s.user,
			         rt->noun, s.vms[i].name, what);
			if (session_finish(x, &s, SESSION_FAILED, "failed", msg) < 0)
				k->errors++;
			if (o)
				o->done = 1;
		}
		break;
	}
	session_free(&s);
}

/* A start holds its user's advisory lock (LOCK_USER) from before its first
 * cluster object until its commit: when none is held after the objects were
 * listed, every listed object without an active session is an orphan,
 * whatever its age. A --grace shorter than the longest start is used only
 * then. How many are held; -1 when the database cannot say. */
static int starts_in_flight(struct labctx *x)
{
	PGresult *r = db_exec(&x->db,
	                      "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND "
	                      "classid = " LOCK_USER " AND objsubid = 2 AND granted",
	                      0, NULL);
	if (!r)
		return -1;
	int n = atoi(PQgetvalue(r, 0, 0));
	PQclear(r);
	return n;
}

static void orphans(struct labctx *x, struct objs *os, char **active, size_t nactive,
                    struct counts *k)
{
	const struct cfg *c = x->cfg;
	for (size_t i = 0; i < os->n; i++) {
		struct obj *o = &os->v[i];
		int is_active = 0;
		if (o->done)
			continue;
		if (o->pool) {
			/* a healthy pool VM belongs to the pool's tick, not to the orphans */
			int own = pool_owns(x, o->kind, o->name);
			if (own < 0)
				k->errors++;
			if (own != 0)
				continue;
		}
		for (size_t j = 0; o->session_id && j < nactive; j++)
			if (strcmp(active[j], o->session_id) == 0)
				is_active = 1;
		if (is_active)
			continue;
		int st = row_state(x, o->session_id);
		if (st == SESSION_STARTING || st == SESSION_READY)
			continue; /* became active after the snapshot: an in-flight start */
		const char *why = st >= 0 ? session_state_str(st) : "no session row";
		if (st < 0 && o->age_s < c->orphan_grace_s) {
			k->kept_young++;
			log_debug("keeping %s %s: no session yet, %.0fs old (grace %ds)", o->kind,
			          o->name, o->age_s, c->orphan_grace_s);
			continue;
		}
		if (dry_run) {
			printf("would delete %s %s (orphan: session %s, %.0fs old)\n", o->noun,
			       o->name, why, o->age_s);
		} else if (lab_delete(x, o->kind, o->name, "reaper")) {
			log_info("deleted %s %s: orphan (session %s %s, %.0fs old)", o->noun,
			         o->name, o->session_id ? o->session_id : "-", why, o->age_s);
		} else {
			k->errors++;
		}
		if (strcmp(o->kind, "secrets") == 0)
			k->orphan_secrets++;
		else if (strcmp(o->kind, "network-attachment-definitions") == 0)
			k->orphan_networks++;
		else if (strcmp(o->kind, runtime_vm.kind) == 0)
			k->orphan_vms++;
		else
			k->orphan_pods++;
	}
}

static void usage(FILE *f)
{
	fprintf(f, "usage: labvm-reaper [--dry-run] [--grace SECONDS]\n"
	           "  Reclaims expired, failed and orphaned lab objects of this environment.\n"
	           "  Config from $LABVM_CONF (default " CFG_DEFAULT_PATH ").\n");
}

int main(int argc, char **argv)
{
	struct cfg cfg;
	struct lessons lessons = {0};
	struct pool_counts pk = {0};
	int have_lessons = 0;
	struct labctx x;
	struct counts k = {0};
	struct objs vms = {0}, secrets = {0}, nets = {0};
	char **ids = NULL;
	size_t nids = 0, nactive = 0;
	char err[1024];
	int grace = -1, rc = 1;
	double t0 = util_mono_s();

	log_init("labvm-reaper", LOG_INFO);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--dry-run") == 0 || strcmp(argv[i], "-n") == 0) {
			dry_run = 1;
		} else if (strcmp(argv[i], "--grace") == 0 && i + 1 < argc) {
			/* a typo must never mean "grace 0": refuse what is not a number */
			char *end;
			long g = strtol(argv[++i], &end, 10);
			if (*end || end == argv[i] || g < 0 || g > 86400 * 30) {
				fprintf(stderr, "labvm-reaper: --grace wants seconds, not '%s'\n",
				        argv[i]);
				return 2;
			}
			grace = (int)g;
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (cfg_load(cfg_path(), &cfg, 0, err, sizeof err) < 0) {
		log_err("config: %s", err);
		return 1;
	}
	if (grace >= 0)
		cfg.orphan_grace_s = grace; /* below the minimum: see starts_in_flight() */
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (lessons_load(cfg.lessons_dir, &lessons, err, sizeof err) < 0)
		log_warn("lessons: %s; the warm pool is not kept this run", err);
	else
		have_lessons = 1;
	if (labctx_init(&x, &cfg, &lessons) < 0) {
		labctx_cleanup(&x);
		lessons_free(&lessons);
		cfg_free(&cfg);
		curl_global_cleanup();
		return 1;
	}
	/* the reaper's lock is session-level: a reaper frozen or cut off between
	 * statements loses its connection (and the lock) after this long idle */
	x.db.idle_session_timeout_s = 2 * cfg.kube_timeout_ms / 1000 + 30;

	const char *pl[1] = {cfg.environment};
	PGresult *lr =
	    db_exec(&x.db, "SELECT pg_try_advisory_lock(" LOCK_REAPER ", hashtext($1))", 1, pl);
	if (!lr) {
		log_err("cannot reach the database: %s", x.db.msg);
		goto out;
	}
	int got = PQgetvalue(lr, 0, 0)[0] == 't';
	PQclear(lr);
	if (!got) {
		printf("labvm-reaper: another run for environment %s holds the lock; exiting\n",
		       cfg.environment);
		rc = 0;
		goto out;
	}
	/* 1-2: what the database and the cluster know, or nothing at all */
	if (active_ids(&x, &ids, &nids) < 0) {
		log_err("cannot read sessions: %s", x.db.msg);
		goto out;
	}
	nactive = nids;
	/* the four lists may take what four calls take (kube_timeout_ms each);
	 * a 429 (API Priority and Fairness) is retried within that, honouring
	 * its Retry-After (kube_deadline), well inside the CronJob's deadline */
	kube_deadline(&x.kube, util_mono_s() + 4.0 * cfg.kube_timeout_ms / 1000.0);
	int listed = 1;
	for (size_t i = 0; listed && runtime_all[i]; i++)
		listed = list_objs(&x, runtime_all[i]->kind, runtime_all[i], NULL, 0, &vms) == 0;
	listed = listed && list_objs(&x, "secrets", NULL, "Secret", 0, &secrets) == 0 &&
	         list_objs(&x, "network-attachment-definitions", NULL,
	                   "NetworkAttachmentDefinition", 1, &nets) == 0;
	kube_deadline(&x.kube, 0);
	if (!listed) {
		log_err("cluster lists failed: nothing deleted this run");
		goto out;
	}
	/* the longest start is the largest lesson's (1 + 3N cluster calls and more) */
	const char *most = NULL;
	int min_grace = lab_min_orphan_grace_s(&cfg, have_lessons ? &lessons : NULL, &most);
	if (cfg.orphan_grace_s < min_grace) {
		int n = starts_in_flight(&x);
		if (n != 0) {
			log_info("grace %d is shorter than the longest start (lesson %s) and %s: "
			         "grace %d s this run",
			         cfg.orphan_grace_s, most ? most : "-",
			         n > 0 ? "a start is in flight" : "the database cannot say",
			         min_grace);
			cfg.orphan_grace_s = min_grace;
		}
	}
	/* 3-5 */
	for (size_t i = 0; i < nids; i++)
		advance_one(&x, ids[i], &vms, &secrets, &nets, &k);
	for (size_t i = 0; i < nids; i++)
		vanished_one(&x, ids[i], &vms, &k);
	for (size_t i = 0; i < nids; i++)
		free(ids[i]);
	free(ids);
	ids = NULL;
	if (active_ids(&x, &ids, &nids) < 0) {
		log_err("cannot read sessions: %s", x.db.msg);
		goto out;
	}
	/* the waiting line: places whose page stopped polling lapse (as on every
	 * poll; admission needs the lessons: labvm.fcgi's pump) */
	if (!dry_run && queue_lapse_stale(&x) < 0)
		log_warn("queue: lapsing stale places failed: %s", x.db.msg);
	orphans(&x, &vms, ids, nids, &k);
	orphans(&x, &secrets, ids, nids, &k);
	orphans(&x, &nets, ids, nids, &k);
	/* 6: the warm pool */
	if (have_lessons && !dry_run && pool_tick(&x, NULL, &pk) < 0)
		k.errors++;
	rc = k.errors ? 1 : 0;
out:
	printf("labvm-reaper: environment=%s%s active=%zu vms=%zu secrets=%zu expired=%d "
	       "idle=%d failed_stuck=%d vanished=%d orphan_vms=%d orphan_secrets=%d "
	       "orphan_networks=%d "
	       "orphan_pods=%d kept_young=%d pool_created=%d pool_ready=%d pool_failed=%d "
	       "pool_stale=%d pool_surplus=%d pool_vanished=%d errors=%d status=%s "
	       "duration_ms=%.0f\n",
	       cfg.environment, dry_run ? " dry-run" : "", nactive, vms.n, secrets.n, k.expired,
	       k.idle, k.failed_stuck, k.vanished, k.orphan_vms, k.orphan_secrets,
	       k.orphan_networks, k.orphan_pods, k.kept_young, pk.created, pk.became_ready,
	       pk.failed, pk.stale, pk.surplus, pk.vanished, k.errors, rc ? "incomplete" : "ok",
	       (util_mono_s() - t0) * 1000.0);
	if (!dry_run && x.db.conn)
		reaper_metrics(&x, cfg.environment, rc, &k);
	for (size_t i = 0; ids && i < nids; i++)
		free(ids[i]);
	free(ids);
	objs_free(&vms);
	objs_free(&secrets);
	objs_free(&nets);
	labctx_cleanup(&x);
	lessons_free(&lessons);
	cfg_free(&cfg);
	curl_global_cleanup();
	return rc;
}
