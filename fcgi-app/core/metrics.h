/* metrics.h - the event side of the Prometheus endpoint: counters that must
 * survive processes and hosts live in PostgreSQL (metric_counters, migration
 * 003), one UPSERT per event; call-latency histograms (cluster, agent,
 * database) are summed per process in memory (callstats.h) and added to the
 * same table as deltas by a flusher thread every METRICS_FLUSH_S seconds
 * (and at exit), so any process's scrape shows what every process saw, at
 * most that much late. The scrape side (reading and formatting) is
 * fcgi-app/api_metrics.c. Above db.c: db.c records its calls in callstats.h,
 * never here. */
#ifndef LABVM_CORE_METRICS_H
#define LABVM_CORE_METRICS_H

#include "db.h"

#define METRICS_FLUSH_S 5

/* Add v to one counter row: one UPSERT. labels: Prometheus label text or "".
 * 0 ok, -1 database error (the event is lost, the caller goes on). */
int metrics_count(struct db *d, const char *env, const char *name, const char *labels, double v);

/* Write this process's pending call deltas (one UPSERT). Not inside a
 * transaction of the caller. 0 ok or nothing to do, -1 error (kept for the
 * next flush). */
int metrics_flush(struct db *d, const char *env);

/* The flusher thread (labvm.fcgi): its own connection, a flush every
 * METRICS_FLUSH_S seconds; stop flushes once more. */
int metrics_flusher_start(const char *conninfo, const char *env);
void metrics_flusher_stop(void);

/* Prometheus label value escaping (\\, \", \n) into out. */
void metrics_escape(char *out, size_t outlen, const char *v);

#endif
