/* pump.c - admitting the heads of the waiting line (see pump.h). */
#include "pump.h"

#include "admission.h"
#include "queue.h"
#include "runtime.h"
#include "start.h"

#define PUMP_MAX 16 /* admissions one request makes at most */

/* Admit the heads of one capacity pool's line while its seats look free. */
static void pump_pool(struct labctx *x, const struct runtime_ops *rt)
{
	for (int i = 0; i < PUMP_MAX; i++) {
		struct queue_head h;
		if (queue_head(x, rt->name, &h) <= 0)
			return;
		/* a cheap look first, on the seats this database sees held: the
		 * start counts in the cluster under the lock */
		struct admission_facts f;
		admission_facts_init(&f, ADM_VIEW, h.seats, rt->capacity(x->cfg));
		f.in_use = h.busy;
		f.line_ahead = 0;
		int rc = admission_decide(&f).verdict == ADM_REFUSE_FULL
		             ? 0
		             : start_queued(x, h.id, h.user, h.lesson);
		queue_head_free(&h);
		if (rc != 1 && rc != 2)
			return;
	}
}

void queue_pump(struct labctx *x)
{
	if (queue_lapse_stale(x) < 0)
		return;
	for (size_t i = 0; runtime_all[i]; i++)
		pump_pool(x, runtime_all[i]);
}
