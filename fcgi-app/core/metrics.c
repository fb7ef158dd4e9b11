/* metrics.c - event counters in PostgreSQL and per-process call histograms
 * flushed there as deltas (see metrics.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "metrics.h"
#include "util.h"

const double metrics_call_buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                       0.25,  0.5,    1,     2.5,  5,     10};
#define NB ((int)(sizeof metrics_call_buckets / sizeof metrics_call_buckets[0]))
const int metrics_call_nbuckets = NB;

const char *const metrics_call_name[MC_N] = {
    "labvm_cluster_request",
    "labvm_agent_request",
    "labvm_db_query",
};

#define NSLOTS 64

struct slot {
	int used;
	enum metric_call kind;
	char verb[24];
	unsigned long long bucket[NB + 1]; /* per bucket (not cumulative); [NB] = above the last */
	unsigned long long count, errors;
	double sum;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct slot slots[NSLOTS];

static void verb_of(enum metric_call kind, const char *v, char *out, size_t n)
{
	size_t i = 0;
	if (!v)
		v = "";
	if (kind == MC_AGENT && *v == '/')
		v++;
	while (*v == ' ' || *v == '\t' || *v == '\n')
		v++;
	for (; v[i] && i + 1 < n; i++) {
		char ch = v[i];
		if (kind == MC_DB) { /* the statement's first word, upper case */
			if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')))
				break;
			if (ch >= 'a' && ch <= 'z')
				ch = (char)(ch - 'a' + 'A');
		} else if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		             (ch >= '0' && ch <= '9') || ch == '_' || ch == '-')) {
			break; /* agent: the path's first segment */
		}
		out[i] = ch;
	}
	out[i] = '\0';
	if (!out[0])
		snprintf(out, n, "other");
}

void metrics_call(enum metric_call kind, const char *verb, double seconds, int error)
{
	char v[24];
	int b;
	verb_of(kind, verb, v, sizeof v);
	for (b = 0; b < NB && seconds > metrics_call_buckets[b]; b++)
		;
	pthread_mutex_lock(&mu);
	struct slot *s = NULL, *fr = NULL;
	for (int i = 0; i < NSLOTS; i++) {
		if (slots[i].used && slots[i].kind == kind && strcmp(slots[i].verb, v) == 0) {
			s = &slots[i];
			break;
		}
		if (!slots[i].used && !fr)
			fr = &slots[i];
	}
	if (!s && fr) {
		s = fr;
		memset(s, 0, sizeof *s);
		s->used = 1;
		s->kind = kind;
		snprintf(s->verb, sizeof s->verb, "%s", v);
	}
	if (s) {
		s->bucket[b]++;
		s->count++;
		s->sum += seconds;
		if (error)
			s->errors++;
	}
	pthread_mutex_unlock(&mu);
}

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
	struct slot snap[NSLOTS];
	int n = 0, rc = 0;

	pthread_mutex_lock(&mu);
	for (int i = 0; i < NSLOTS; i++)
		if (slots[i].used && slots[i].count) {
			snap[n++] = slots[i];
			slots[i].count = slots[i].errors = 0;
			slots[i].sum = 0;
			memset(slots[i].bucket, 0, sizeof slots[i].bucket);
		}
	pthread_mutex_unlock(&mu);
	if (!n)
		return 0;

	struct buf names = {0}, labels = {0}, values = {0};
	buf_puts(&names, "{");
	buf_puts(&labels, "{");
	buf_puts(&values, "{");
	for (int i = 0; i < n; i++) {
		const struct slot *s = &snap[i];
		const char *base = metrics_call_name[s->kind];
		char name[96], lab[128], verb[64];
		unsigned long long cum = 0;
		metrics_escape(verb, sizeof verb, s->verb);
		for (int b = 0; b <= NB; b++) {
			cum += s->bucket[b];
			if (b < NB)
				snprintf(lab, sizeof lab, "verb=\"%s\",le=\"%g\"", verb,
				         metrics_call_buckets[b]);
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
		/* put the deltas back */
		pthread_mutex_lock(&mu);
		for (int i = 0; i < n; i++)
			for (int j = 0; j < NSLOTS; j++)
				if (slots[j].used && slots[j].kind == snap[i].kind &&
				    strcmp(slots[j].verb, snap[i].verb) == 0) {
					for (int b = 0; b <= NB; b++)
						slots[j].bucket[b] += snap[i].bucket[b];
					slots[j].count += snap[i].count;
					slots[j].errors += snap[i].errors;
					slots[j].sum += snap[i].sum;
				}
		pthread_mutex_unlock(&mu);
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

static int pending(void)
{
	int any = 0;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < NSLOTS && !any; i++)
		any = slots[i].used && slots[i].count;
	pthread_mutex_unlock(&mu);
	return any;
}

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
		if (pending()) {
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
