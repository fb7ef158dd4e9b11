/* admission.c - the admission rule (see admission.h). Pure: no I/O, no
 * clock, nothing but the facts. */
#include "admission.h"

#include <stddef.h>
#include <string.h>

#include "util.h"

static const char *const names[] = {
    [ADM_NEED_OPEN] = "need_open",
    [ADM_NEED_RATE] = "need_rate",
    [ADM_NEED_PLACE] = "need_place",
    [ADM_NEED_NODES] = "need_nodes",
    [ADM_NEED_LINE] = "need_line",
    [ADM_NEED_COUNT] = "need_count",
    [ADM_NEED_LOCK] = "need_lock",
    [ADM_NEED_POOL_IDLE] = "need_pool_idle",
    [ADM_ADMIT] = "admit",
    [ADM_CLAIM_POOL] = "claim_pool",
    [ADM_YIELD_POOL_THEN_ADMIT] = "yield_pool_then_admit",
    [ADM_REFUSE_EXISTS] = "refuse_exists",
    [ADM_REFUSE_IN_LINE] = "refuse_in_line",
    [ADM_REFUSE_GONE] = "refuse_gone",
    [ADM_REFUSE_RATE] = "refuse_rate",
    [ADM_REFUSE_FULL] = "refuse_full",
    [ADM_REFUSE_CLUSTER] = "refuse_cluster",
    [ADM_NEVER_FITS] = "never_fits",
    [ADM_NEVER_FITS_NODES] = "never_fits_nodes",
};
#define NNAMES (sizeof names / sizeof names[0])

const char *admission_verdict_str(enum admission_verdict v)
{
	return (size_t)v < NNAMES && names[v] ? names[v] : "unknown";
}

int admission_verdict_parse(const char *s)
{
	return util_name_index(names, NNAMES, s);
}

void admission_facts_init(struct admission_facts *f, enum admission_who who, long seats,
                          long capacity)
{
	memset(f, 0, sizeof *f);
	f->who = who;
	f->seats = seats;
	f->capacity = capacity;
	f->open_session = f->in_line = f->never_fits = f->pool_claimed = ADM_UNKNOWN;
	f->recent_starts = f->rate_retry_s = f->line_ahead = f->in_use = f->pool_idle = ADM_UNKNOWN;
}

static struct admission is(struct admission a, enum admission_verdict v)
{
	a.verdict = v;
	return a;
}

/* Not enough seats: yield idle pool VMs when that makes this start fit. */
static struct admission full(const struct admission_facts *f, struct admission a)
{
	if (f->who != ADM_PRESS && f->who != ADM_PLACE)
		return is(a, ADM_REFUSE_FULL);
	if (!f->yieldable || f->line_ahead != 0 || a.short_by < 1 || f->yielded)
		return is(a, ADM_REFUSE_FULL);
	if (f->pool_idle == ADM_UNKNOWN)
		return is(a, ADM_NEED_POOL_IDLE);
	return is(a, f->pool_idle >= a.short_by ? ADM_YIELD_POOL_THEN_ADMIT : ADM_REFUSE_FULL);
}

struct admission admission_decide(const struct admission_facts *f)
{
	struct admission a = {ADM_ADMIT, 0, f->seats, 0, ADM_UNKNOWN};
	long line = f->line_ahead > 0 ? f->line_ahead : 0;
	if (f->in_use >= 0) {
		a.free_now = f->capacity > f->in_use ? f->capacity - f->in_use : 0;
		a.short_by = f->in_use + line + f->seats - f->capacity;
	}

	if (f->who == ADM_VIEW) {
		if (f->seats > f->capacity)
			return is(a, ADM_NEVER_FITS);
		if (f->in_use < 0)
			return is(a, ADM_REFUSE_CLUSTER);
		return is(a, a.short_by > 0 ? ADM_REFUSE_FULL : ADM_ADMIT);
	}
	if (f->who == ADM_POOL_FILL) {
		if (!f->locked)
			return is(a, ADM_NEED_LOCK);
		if (f->in_use == ADM_UNKNOWN)
			return is(a, ADM_NEED_COUNT);
		if (f->in_use < 0)
			return is(a, ADM_REFUSE_CLUSTER);
		if (f->line_ahead == ADM_UNKNOWN)
			return is(a, ADM_NEED_LINE);
		return is(a, a.short_by > 0 ? ADM_REFUSE_FULL : ADM_ADMIT);
	}

	/* a press, or the head of the line */
	if (f->open_session == ADM_UNKNOWN)
		return is(a, ADM_NEED_OPEN);
	if (f->open_session)
		return is(a, ADM_REFUSE_EXISTS);
	if (f->rate_max > 0) {
		if (f->recent_starts == ADM_UNKNOWN)
			return is(a, ADM_NEED_RATE);
		if (f->recent_starts >= f->rate_max) {
			a.retry_after_s = f->rate_retry_s >= 1 ? f->rate_retry_s : 1;
			return is(a, ADM_REFUSE_RATE);
		}
	}
	if (f->in_line == ADM_UNKNOWN)
		return is(a, ADM_NEED_PLACE);
	if (f->who == ADM_PRESS && f->in_line)
		return is(a, ADM_REFUSE_IN_LINE);
	if (f->who == ADM_PLACE && !f->in_line)
		return is(a, ADM_REFUSE_GONE);
	if (f->seats > f->capacity)
		return is(a, ADM_NEVER_FITS);
	if (f->never_fits == ADM_UNKNOWN)
		return is(a, ADM_NEED_NODES);
	if (f->never_fits > 0)
		return is(a, ADM_NEVER_FITS_NODES);
	if (f->line_ahead == ADM_UNKNOWN)
		return is(a, ADM_NEED_LINE);
	/* a ready pool VM already holds its seat: no count; not past the line */
	if (f->claimable && f->line_ahead == 0 && f->pool_claimed == ADM_UNKNOWN)
		return is(a, ADM_CLAIM_POOL);
	if (f->in_use == ADM_UNKNOWN)
		return is(a, ADM_NEED_COUNT);
	if (!f->locked) {
		/* full already: refused without queueing for the lock */
		if (f->in_use >= 0 && a.short_by > 0)
			return full(f, a);
		return is(a, ADM_NEED_LOCK);
	}
	if (f->in_use < 0)
		return is(a, ADM_REFUSE_CLUSTER);
	if (a.short_by > 0)
		return full(f, a);
	return is(a, ADM_ADMIT);
}
