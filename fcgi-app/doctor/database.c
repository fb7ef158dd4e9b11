/* database.c - labvm-doctor's check 7: the reaper runs (its CronJob where
 * there is one, its last pass in the database either way), the database is
 * migrated to the schema this build expects (sql/NNN_*.sql, built in), and
 * what labvm needs of its connection beyond single statements works:
 * session-level advisory locks held from one statement to the next (the
 * reaper's, the pool's, the stream drivers': sql/locks.md) and LISTEN/NOTIFY
 * (labvm-console, the event streams). Behind PgBouncer in transaction mode
 * neither does: each statement may run on another server connection. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "doctor.h"
#include "doctor_gen.h"
#include "locks.h"
#include "pgconn.h"
#include "util.h"

/* The reaper runs every minute (conf/k8s/labvm-backend.yaml's CronJob,
 * conf/crontab): this long without a complete pass means it stopped. */
#define REAPER_STALE_S 600
#define NOTIFY_WAIT_MS 3000

static long long age_of(const char *rfc3339)
{
	struct tm tm;
	memset(&tm, 0, sizeof tm);
	if (!rfc3339 || !strptime(rfc3339, "%Y-%m-%dT%H:%M:%S", &tm))
		return -1;
	long long a = (long long)time(NULL) - (long long)timegm(&tm);
	return a < 0 ? 0 : a;
}

static void ago(char *out, size_t n, long long s)
{
	if (s < 0)
		snprintf(out, n, "never");
	else if (s < 120)
		snprintf(out, n, "%lld s ago", s);
	else if (s < 7200)
		snprintf(out, n, "%lld min ago", s / 60);
	else
		snprintf(out, n, "%lld h ago", s / 3600);
}

static void cronjob(struct doc *d)
{
	const char *ns = d->cfg.namespace_;
	char *path = xasprintf("/apis/batch/v1/namespaces/%s/cronjobs/labvm-reaper", ns);
	cJSON *cj = NULL;
	long code = kube_get(&d->x.kube, path, &cj);
	free(path);
	if (code == 404) {
		doc_line(
		    d, DOC_OK, NULL,
		    "no CronJob labvm-reaper in namespace %s: a host install, whose cron runs the "
		    "reaper (conf/crontab); its passes are checked in the database",
		    ns);
	} else if (code != 200) {
		doc_line(d, DOC_WARN,
		         "apply conf/k8s/rbac.yaml (the Role labvm-doctor may read the CronJob)",
		         "the reaper's CronJob cannot be read: %s; its passes are checked in the "
		         "database",
		         d->x.kube.msg);
	} else {
		long long made = age_of(kj_str(cj, "metadata.creationTimestamp"));
		long long sched = age_of(kj_str(cj, "status.lastScheduleTime"));
		long long good = age_of(kj_str(cj, "status.lastSuccessfulTime"));
		char a[32], b[32], fix[256];
		ago(a, sizeof a, sched);
		ago(b, sizeof b, good);
		snprintf(
		    fix, sizeof fix,
		    "kubectl -n %s describe cronjob labvm-reaper, and the logs of its last Job: "
		    "they say why",
		    ns);
		if (cJSON_IsTrue(kj_get(cj, "spec.suspend")))
			doc_line(
			    d, DOC_FAIL,
			    "kubectl patch cronjob labvm-reaper -p "
			    "'{\"spec\":{\"suspend\":false}}'",
			    "the CronJob labvm-reaper is suspended: nothing reclaims ended labs");
		else if (sched < 0 && made >= 0 && made < REAPER_STALE_S)
			doc_line(d, DOC_WARN, NULL,
			         "the CronJob labvm-reaper was made %lld s ago and has not run yet",
			         made);
		else if (sched < 0)
			doc_line(d, DOC_FAIL, fix,
			         "the CronJob labvm-reaper has never run: nothing reclaims ended "
			         "labs or "
			         "keeps the warm pool");
		else if (sched > REAPER_STALE_S)
			doc_line(
			    d, DOC_FAIL, fix,
			    "the CronJob labvm-reaper last ran %s (schedule \"%s\"): it stopped", a,
			    kj_str(cj, "spec.schedule") ? kj_str(cj, "spec.schedule") : "?");
		else if (good < 0 || good > REAPER_STALE_S)
			doc_line(
			    d, DOC_FAIL, fix,
			    "the CronJob labvm-reaper runs (last %s) but its Jobs do not succeed "
			    "(last success: %s)",
			    a, b);
		else
			doc_line(d, DOC_OK, NULL,
			         "the CronJob labvm-reaper ran %s, its last success %s (schedule "
			         "\"%s\")",
			         a, b,
			         kj_str(cj, "spec.schedule") ? kj_str(cj, "spec.schedule") : "?");
	}
	cJSON_Delete(cj);
}

void check_reaper(struct doc *d)
{
	if (doc_api(d))
		cronjob(d);
	const char *p[1] = {d->cfg.environment};
	PGresult *r = db_exec(&d->x.db,
	                      "SELECT labels, extract(epoch FROM now() - updated_at)::bigint "
	                      "FROM metric_counters WHERE environment = $1 AND "
	                      "name = 'labvm_reaper_passes_total'",
	                      1, p);
	if (!r) {
		doc_line(d, DOC_WARN, NULL,
		         "the reaper's passes cannot be read: %s (check 7, database)", d->x.db.msg);
		return;
	}
	long long ok = -1, bad = -1;
	for (int i = 0; i < PQntuples(r); i++) {
		long long a = atoll(PQgetvalue(r, i, 1));
		if (strstr(PQgetvalue(r, i, 0), "\"ok\""))
			ok = a;
		else
			bad = a;
	}
	PQclear(r);
	char a[32], b[32];
	ago(a, sizeof a, ok);
	ago(b, sizeof b, bad);
	const char *fix = "run labvm-reaper every minute with this labvm.conf: the CronJob of "
	                  "conf/k8s/labvm-backend.yaml in the cluster, or conf/crontab "
	                  "(/etc/cron.d/labvm) on a host";
	if (ok < 0 && bad < 0)
		doc_line(
		    d, DOC_FAIL, fix,
		    "no pass of labvm-reaper for environment %s is recorded in the database: it "
		    "has never run here (ended labs are not reclaimed, stuck starts not failed)",
		    d->cfg.environment);
	else if (ok < 0 || ok > REAPER_STALE_S)
		doc_line(d, DOC_FAIL,
		         ok < 0 ? "see the reaper's log: each pass names what failed" : fix,
		         "the last complete pass of labvm-reaper for environment %s was %s%s%s",
		         d->cfg.environment, a, bad >= 0 ? "; the last incomplete one " : "",
		         bad >= 0 ? b : "");
	else if (bad >= 0 && bad < ok)
		doc_line(d, DOC_WARN,
		         "see the reaper's log: an incomplete pass names the list that "
		         "failed (and deletes nothing)",
		         "labvm-reaper's last pass for environment %s was incomplete (%s; the last "
		         "complete one %s)",
		         d->cfg.environment, b, a);
	else
		doc_line(d, DOC_OK, NULL,
		         "labvm-reaper's last complete pass for environment %s was %s "
		         "(labvm_reaper_passes_total)",
		         d->cfg.environment, a);
}

/* sql/migrate's record against the migrations this build was made with */
static void migrations(struct doc *d)
{
	static const char *const want[] = {DOCTOR_MIGRATIONS NULL};
	size_t nwant = 0;
	while (want[nwant])
		nwant++;
	PGresult *r =
	    db_exec(&d->x.db, "SELECT version FROM schema_migrations ORDER BY version", 0, NULL);
	if (!r) {
		if (strcmp(d->x.db.sqlstate, "42P01") == 0)
			doc_line(
			    d, DOC_FAIL,
			    "run sql/migrate CONNINFO (installed: /usr/share/labvm/sql/migrate) "
			    "before labvm starts",
			    "the database was never migrated (no schema_migrations): labvm's "
			    "tables "
			    "are not there");
		else
			doc_line(d, DOC_FAIL, NULL, "the migrations cannot be read: %s",
			         d->x.db.msg);
		return;
	}
	char missing[512] = "", extra[512] = "";
	for (size_t i = 0; i < nwant; i++) {
		int found = 0;
		for (int j = 0; j < PQntuples(r) && !found; j++)
			found = strcmp(PQgetvalue(r, j, 0), want[i]) == 0;
		if (!found) {
			size_t len = strlen(missing);
			snprintf(missing + len, sizeof missing - len, "%s%s", len ? ", " : "",
			         want[i]);
		}
	}
	for (int j = 0; j < PQntuples(r); j++) {
		int known = 0;
		for (size_t i = 0; i < nwant && !known; i++)
			known = strcmp(PQgetvalue(r, j, 0), want[i]) == 0;
		if (!known) {
			size_t len = strlen(extra);
			snprintf(extra + len, sizeof extra - len, "%s%s", len ? ", " : "",
			         PQgetvalue(r, j, 0));
		}
	}
	int applied = PQntuples(r);
	PQclear(r);
	if (missing[0])
		doc_line(
		    d, DOC_FAIL,
		    "run sql/migrate CONNINFO (installed: /usr/share/labvm/sql/migrate; it applies "
		    "only what is missing) before this version's labvm starts",
		    "the database is not migrated to this build's schema: %s missing (this build "
		    "expects %zu migrations, the newest %s)",
		    missing, nwant, nwant ? want[nwant - 1] : "-");
	else
		doc_line(d, DOC_OK, NULL,
		         "the database is migrated: %zu of %zu migrations, the newest %s", nwant,
		         nwant, nwant ? want[nwant - 1] : "-");
	if (extra[0])
		doc_line(d, DOC_WARN,
		         "run the labvm version that made them (binaries older than the "
		         "schema)",
		         "the database has migrations this build does not know: %s (%d applied)",
		         extra, applied);
}

static PGresult *one(struct db *db, const char *sql, const char *arg)
{
	const char *p[1] = {arg};
	return db_exec(db, sql, arg ? 1 : 0, arg ? p : NULL);
}

static int value_of(PGresult *r, char *out, size_t n)
{
	if (!r || PQntuples(r) < 1) {
		PQclear(r);
		return -1;
	}
	snprintf(out, n, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
	return 0;
}

/* Session state across statements, through the configured connection. */
static void session_state(struct doc *d)
{
	const char *fix = "point database in labvm.conf at PostgreSQL itself, or at a PgBouncer "
	                  "pool in session mode (pool_mode = session); labvm needs its session "
	                  "locks and LISTEN";
	struct db b;
	char key[40], chan[64], pid1[16], pid2[16], pidb[16], locked[8], unlocked[8];
	util_random_hex(key, 8);
	snprintf(chan, sizeof chan, "labvm_doctor_%s", key);
	db_init(&b, d->cfg.database);
	struct db *a = &d->x.db;
	if (value_of(one(a, "SELECT pg_backend_pid()::text", NULL), pid1, sizeof pid1) < 0 ||
	    value_of(
	        one(a, "SELECT pg_try_advisory_lock(" LOCK_DOCTOR ", hashtext($1))::text", key),
	        locked, sizeof locked) < 0 ||
	    value_of(one(a, "SELECT pg_backend_pid()::text", NULL), pid2, sizeof pid2) < 0 ||
	    value_of(one(a, "SELECT pg_advisory_unlock(" LOCK_DOCTOR ", hashtext($1))::text", key),
	             unlocked, sizeof unlocked) < 0 ||
	    value_of(one(&b, "SELECT pg_backend_pid()::text", NULL), pidb, sizeof pidb) < 0) {
		doc_line(d, DOC_FAIL, NULL, "the session probe failed: %s",
		         b.msg[0] ? b.msg : a->msg);
		db_close(&b);
		return;
	}
	int bad = 0;
	if (strcmp(locked, "true") != 0 || strcmp(unlocked, "true") != 0 ||
	    strcmp(pid1, pid2) != 0) {
		doc_line(
		    d, DOC_FAIL, fix,
		    "a session-level advisory lock taken in one statement is not held in the next "
		    "(server process %s, then %s; unlock said %s): the connection is pooled per "
		    "transaction (PgBouncer pool_mode = transaction?), so the reaper's, the warm "
		    "pool's and the event streams' locks (sql/locks.md 7303-7305) do not hold",
		    pid1, pid2, unlocked);
		bad++;
	}
	if (strcmp(pid1, pidb) == 0) {
		doc_line(d, DOC_FAIL, fix,
		         "two open connections were served by one server process (%s): a pooler "
		         "shares server connections per transaction",
		         pid1);
		bad++;
	}
	/* LISTEN on one connection, NOTIFY from the other, the notice within NOTIFY_WAIT_MS */
	char *listen = xasprintf("LISTEN %s", chan);
	PGresult *r = one(a, listen, NULL);
	free(listen);
	int got = 0;
	if (r) {
		PQclear(r);
		const char *p[2] = {chan, key};
		r = db_exec(&b, "SELECT pg_notify($1, $2)", 2, p);
		PQclear(r);
		double until = util_mono_s() + NOTIFY_WAIT_MS / 1000.0;
		while (!got && r && util_mono_s() < until) {
			struct pollfd pf = {.fd = PQsocket(a->conn), .events = POLLIN};
			poll(&pf, 1, 100);
			if (!PQconsumeInput(a->conn))
				break;
			PGnotify *n;
			while ((n = PQnotifies(a->conn))) {
				got |= strcmp(n->relname, chan) == 0 && n->extra &&
				       strcmp(n->extra, key) == 0;
				PQfreemem(n);
			}
		}
		char *unl = xasprintf("UNLISTEN %s", chan);
		PQclear(one(a, unl, NULL));
		free(unl);
	}
	if (!got) {
		doc_line(
		    d, DOC_FAIL, fix,
		    "LISTEN/NOTIFY does not deliver through the configured connection (no notice "
		    "within %d ms of a NOTIFY from another connection): labvm-console and the "
		    "event streams would never hear of a change",
		    NOTIFY_WAIT_MS);
		bad++;
	}
	if (!bad)
		doc_line(d, DOC_OK, NULL,
		         "session-level advisory locks hold from one statement to the next and "
		         "LISTEN/NOTIFY delivers: no pooler per transaction in between");
	db_close(&b);
}

void check_database(struct doc *d)
{
	if (db_ensure(&d->x.db) < 0) {
		doc_line(d, DOC_FAIL,
		         "check database in labvm.conf (a libpq conninfo; the password from "
		         "PGPASSWORD or ~/.pgpass) and that PostgreSQL is up",
		         "cannot connect to the database: %s", d->x.db.msg);
		return;
	}
	migrations(d);
	session_state(d);
}
