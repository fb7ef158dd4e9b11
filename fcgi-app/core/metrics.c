/* metrics.c - event counters in PostgreSQL, and the flusher that adds this
 * process's call histograms (callstats.h) there as deltas (see metrics.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "callstats.h"
#include "log.h"
#include "metrics.h"
#include "util.h"

void metrics_escape(char *out, size_t outlen, const char *v)
{
	size_t o = 0;
	for (; v && *v && o + 3 < outlen; v++) {
		if (*v == '\\' || *v == '"') {
			out[o++] = '\\';
			out[o++] = *v;
		} else if (*v == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else {
			out[o++] = *v;
		}
	}
	out[o] = '\0';
}

int metrics_count(struct db *d, const char *env, const char *name, const char *labels, double v)
{
	char val[64];
	snprintf(val, sizeof val, "%.17g", v);
	const char *p[4] = {env, name, labels ? labels : "", val};
	int rc = db_cmd(d,
	                "INSERT INTO metric_counters (environment, name, labels, value) "
	                "VALUES ($1, $2, $3, $4::float8) ON CONFLICT (environment, name, labels) "
	                "DO UPDATE SET value = metric_counters.value + EXCLUDED.value, "
	                "updated_at = now()",
	                4, p);
	if (rc < 0)
		log_warn("metrics: counter %s not updated: %s", name, d->msg);
	return rc;
}

/* one element of a PostgreSQL array literal */
static void arr_add(struct buf *b, const char *s)
{
	buf_puts(b, b->len > 1 ? ",\"" : "\"");
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			buf_puts(b, "\\");
		char c[2] = {*s, 0};
		buf_puts(b, c);
	}
	buf_puts(b, "\"");
}

static void row(struct buf *n, struct buf *l, struct buf *v, const char *name, const char *labels,
                double value)
{
	char num[64];
	snprintf(num, sizeof num, "%.17g", value);
	arr_add(n, name);
	arr_add(l, labels);
	arr_add(v, num);
}

int metrics_flush(struct db *d, const char *env)
{
	struct callstat snap[CALLSTATS_MAX];
	int rc = 0;
	int n = callstats_take(snap);
	if (!n)
		return 0;

	struct buf names = {0}, labels = {0}, values = {0};
	buf_puts(&names, "{");
	buf_puts(&labels, "{");
	buf_puts(&values, "{");
	for (int i = 0; i < n; i++) {
		const struct callstat *s = &snap[i];
		const char *base = callstats_name[s->kind];
		char name[96], lab[128], verb[64];
		unsigned long long cum = 0;
		metrics_escape(verb, sizeof verb, s->verb);
		for (int b = 0; b <= CALLSTATS_NBUCKETS; b++) {
			cum += s->bucket[b];
			if (b < CALLSTATS_NBUCKETS)
				snprintf(lab, sizeof lab, "verb=\"%s\",le=\"%g\"", verb,
				         callstats_buckets[b]);
			else
				snprintf(lab, sizeof lab, "verb=\"%s\",le=\"+Inf\"", verb);
			snprintf(name, sizeof name, "%s_duration_seconds_bucket", base);
			row(&names, &labels, &values, name, lab, (double)cum);
		}
		snprintf(lab, sizeof lab, "verb=\"%s\"", verb);
		snprintf(name, sizeof name, "%s_duration_seconds_sum", base);
		row(&names, &labels, &values, name, lab, s->sum);
		snprintf(name, sizeof name, "%s_duration_seconds_count", base);
		row(&names, &labels, &values, name, lab, (double)s->count);
		snprintf(name, sizeof name, "%s_errors_total", base);
		row(&names, &labels, &values, name, lab, (double)s->errors);
	}
	buf_puts(&names, "}");
	buf_puts(&labels, "}");
	buf_puts(&values, "}");

	const char *p[4] = {env, names.p, labels.p, values.p};
	PGresult *r = NULL;
	if (db_ensure(d) == 0)
		r = PQexecParams(
		    d->conn,
		    "INSERT INTO metric_counters (environment, name, labels, value) "
		    "SELECT $1, n, l, v FROM unnest($2::text[], $3::text[], "
		    "$4::float8[]) AS u(n, l, v) "
		    "ON CONFLICT (environment, name, labels) DO UPDATE SET "
		    "value = metric_counters.value + EXCLUDED.value, updated_at = now()",
		    4, NULL, p, NULL, NULL, 0);
	if (!r || PQresultStatus(r) != PGRES_COMMAND_OK) {
		log_warn("metrics: call histograms not flushed (kept for the next try): %s",
		         r ? PQresultErrorMessage(r) : d->msg);
		if (d->conn && PQstatus(d->conn) != CONNECTION_OK)
			d->broken = 1;
		callstats_put_back(snap, n);
		rc = -1;
	}
	PQclear(r);
	buf_free(&names);
	buf_free(&labels);
	buf_free(&values);
	return rc;
}

/* ------------------------------------------------------------ the flusher */
static pthread_t flusher;
static int flusher_on;
static int flusher_stop;
static pthread_cond_t flusher_cv = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t flusher_mu = PTHREAD_MUTEX_INITIALIZER;
static struct db flusher_db;
static char *flusher_env;

/* The flusher's connection is not a worker's: it says so (application_name
 * labvm-metrics; db.c names every connection "labvm" when it connects). */
static void flusher_connect(void)
{
	static int named_pid;
	if (db_ensure(&flusher_db) < 0)
		return;
	int pid = PQbackendPID(flusher_db.conn);
	if (pid != named_pid) {
		PGresult *r = PQexec(flusher_db.conn, "SET application_name = 'labvm-metrics'");
		PQclear(r);
		named_pid = pid;
	}
}

static void *flusher_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&flusher_mu);
	while (!flusher_stop) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += METRICS_FLUSH_S;
		pthread_cond_timedwait(&flusher_cv, &flusher_mu, &until);
		pthread_mutex_unlock(&flusher_mu);
		if (callstats_pending()) {
			flusher_connect();
			metrics_flush(&flusher_db, flusher_env);
		}
		pthread_mutex_lock(&flusher_mu);
	}
	pthread_mutex_unlock(&flusher_mu);
	return NULL;
}

int metrics_flusher_start(const char *conninfo, const char *env)
{
	db_init(&flusher_db, conninfo);
	flusher_env = xstrdup(env);
	if (pthread_create(&flusher, NULL, flusher_main, NULL) != 0) {
		log_warn("metrics: no flusher thread: call histograms stay unreported");
		return -1;
	}
	flusher_on = 1;
	return 0;
}

void metrics_flusher_stop(void)
{
	if (!flusher_on)
		return;
	pthread_mutex_lock(&flusher_mu);
	flusher_stop = 1;
	pthread_cond_signal(&flusher_cv);
	pthread_mutex_unlock(&flusher_mu);
	pthread_join(flusher, NULL); /* its last loop flushed */
	flusher_on = 0;
	db_close(&flusher_db);
	free(flusher_env);
	flusher_env = NULL;
}
