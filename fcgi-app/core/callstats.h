/* callstats.h - this process's call histograms: how long each call to the
 * cluster, a guest agent or the database took, by verb, summed in memory.
 *
 * Pure memory and a mutex, no I/O: kube.c, agent.c and db.c record every
 * call here (thread-safe), and metrics.c's flusher takes what was recorded
 * since its last flush and adds it to PostgreSQL (metric_counters), putting
 * it back when that write fails. A leaf: it calls nothing of labvm's. */
#ifndef LABVM_CORE_CALLSTATS_H
#define LABVM_CORE_CALLSTATS_H

enum call_kind { CALL_CLUSTER = 0, CALL_AGENT, CALL_DB, CALL_N };

/* Upper bounds (seconds) of the histograms' buckets, then +Inf. */
extern const double callstats_buckets[];
#define CALLSTATS_NBUCKETS 13
/* Metric base names of the histograms, by kind ("labvm_cluster_request", ...). */
extern const char *const callstats_name[CALL_N];

/* Record one call. verb: the HTTP method, the agent path or the SQL
 * statement (its first word is kept). */
void callstats_add(enum call_kind kind, const char *verb, double seconds, int error);

/* One kind and verb's calls since they were last taken. */
struct callstat {
	enum call_kind kind;
	char verb[24];
	unsigned long long
	    bucket[CALLSTATS_NBUCKETS + 1]; /* per bucket, not cumulative; [N]: +Inf */
	unsigned long long count, errors;
	double sum;
};
#define CALLSTATS_MAX 64

/* Move what was recorded into out (at most CALLSTATS_MAX rows): the count. */
int callstats_take(struct callstat *out);
/* Add rows taken earlier back (their write failed: kept for the next try). */
void callstats_put_back(const struct callstat *rows, int n);
/* Anything recorded since the last take? */
int callstats_pending(void);

#endif
