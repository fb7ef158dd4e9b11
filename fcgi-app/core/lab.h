/* lab.h - the per-worker context every labvm operation runs in: the
 * configuration and lessons (shared, read-only) plus this thread's own
 * database connection, cluster client and agent client. */
#ifndef LABVM_CORE_LAB_H
#define LABVM_CORE_LAB_H

#include "agent.h"
#include "config.h"
#include "db.h"
#include "kube.h"
#include "lesson.h"

struct labctx {
	const struct cfg *cfg;
	const struct lessons *lessons;
	struct db db;
	struct kube kube;
	struct agent agent;
	char pool_after[64]; /* a lesson whose pool wants a tick after this request (pool.h) */
};

int labctx_init(struct labctx *x, const struct cfg *c, const struct lessons *ls);

/* The orphan grace the lessons need (config.h cfg_min_orphan_grace_machines
 * for the lesson of the most machines; *which names it, NULL without lessons). */
int lab_min_orphan_grace_s(const struct cfg *c, const struct lessons *ls, const char **which);
void labctx_cleanup(struct labctx *x);

/* A session of lesson l ends after this many idle seconds (issue #28): the
 * lesson's idle_minutes, else the configured default; 0 = never. */
int lab_idle_s(const struct cfg *c, const struct lesson *l);

#endif
