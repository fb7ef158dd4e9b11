/* callstats.c - the call histograms in memory (see callstats.h). */
#include "callstats.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

const double callstats_buckets[CALLSTATS_NBUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                      0.25,  0.5,    1,     2.5,  5,     10};

const char *const callstats_name[CALL_N] = {
    "labvm_cluster_request",
    "labvm_agent_request",
    "labvm_db_query",
};

struct slot {
	int used;
	struct callstat s;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct slot slots[CALLSTATS_MAX];

static void verb_of(enum call_kind kind, const char *v, char *out, size_t n)
{
	size_t i = 0;
	if (!v)
		v = "";
	if (kind == CALL_AGENT && *v == '/')
		v++;
	while (*v == ' ' || *v == '\t' || *v == '\n')
		v++;
	for (; v[i] && i + 1 < n; i++) {
		char ch = v[i];
		if (kind == CALL_DB) { /* the statement's first word, upper case */
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

/* The slot of kind and verb, a free one for it, or NULL (mu held). */
static struct callstat *slot_of(enum call_kind kind, const char *verb)
{
	struct slot *fr = NULL;
	for (int i = 0; i < CALLSTATS_MAX; i++) {
		if (slots[i].used && slots[i].s.kind == kind && strcmp(slots[i].s.verb, verb) == 0)
			return &slots[i].s;
		if (!slots[i].used && !fr)
			fr = &slots[i];
	}
	if (!fr)
		return NULL;
	memset(fr, 0, sizeof *fr);
	fr->used = 1;
	fr->s.kind = kind;
	snprintf(fr->s.verb, sizeof fr->s.verb, "%s", verb);
	return &fr->s;
}

void callstats_add(enum call_kind kind, const char *verb, double seconds, int error)
{
	char v[24];
	int b;
	verb_of(kind, verb, v, sizeof v);
	for (b = 0; b < CALLSTATS_NBUCKETS && seconds > callstats_buckets[b]; b++)
		;
	pthread_mutex_lock(&mu);
	struct callstat *s = slot_of(kind, v);
	if (s) {
		s->bucket[b]++;
		s->count++;
		s->sum += seconds;
		if (error)
			s->errors++;
	}
	pthread_mutex_unlock(&mu);
}

int callstats_take(struct callstat *out)
{
	int n = 0;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < CALLSTATS_MAX; i++)
		if (slots[i].used && slots[i].s.count) {
			out[n++] = slots[i].s;
			slots[i].s.count = slots[i].s.errors = 0;
			slots[i].s.sum = 0;
			memset(slots[i].s.bucket, 0, sizeof slots[i].s.bucket);
		}
	pthread_mutex_unlock(&mu);
	return n;
}

void callstats_put_back(const struct callstat *rows, int n)
{
	pthread_mutex_lock(&mu);
	for (int i = 0; i < n; i++) {
		struct callstat *s = slot_of(rows[i].kind, rows[i].verb);
		if (!s)
			continue;
		for (int b = 0; b <= CALLSTATS_NBUCKETS; b++)
			s->bucket[b] += rows[i].bucket[b];
		s->count += rows[i].count;
		s->errors += rows[i].errors;
		s->sum += rows[i].sum;
	}
	pthread_mutex_unlock(&mu);
}

int callstats_pending(void)
{
	int any = 0;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < CALLSTATS_MAX && !any; i++)
		any = slots[i].used && slots[i].s.count;
	pthread_mutex_unlock(&mu);
	return any;
}
