/* pool_warm.c - the operators' side of the warm pool (see pool.h): a
 * lesson's target, warm requests for a class, and the pool's status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"
#include "log.h"
#include "pool.h"
#include "pool_vm.h"
#include "util.h"

int pool_target(struct labctx *x, const struct lesson *l)
{
	const char *p[2] = {x->cfg->environment, l->id};
	if (!pool_lesson(l))
		return 0;
	PGresult *r =
	    db_exec(&x->db,
	            "SELECT COALESCE(sum(count), 0) FROM pool_warm WHERE environment = $1 "
	            "AND lesson = $2 AND from_at <= clock_timestamp() "
	            "AND until_at > clock_timestamp()",
	            2, p);
	if (!r)
		return -1;
	long n = strtol(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	n += l->warm;
	return n > 100000 ? 100000 : (int)n;
}

long pool_warm_add(struct labctx *x, const char *lesson, int count, const char *from,
                   const char *until, const char *by, char *err, size_t errlen)
{
	const struct lesson *l = lessons_find(x->lessons, lesson);
	if (!l) {
		snprintf(err, errlen, "there is no lesson \"%.100s\"", lesson);
		return -1;
	}
	if (!pool_lesson(l)) {
		const struct runtime_ops *rt = runtime_of(l->runtime);
		snprintf(err, errlen,
		         "lesson \"%s\" %s%s: only single-machine %s lessons have a warm pool",
		         l->id, l->nmachines ? "has several machines" : "runs in a ",
		         l->nmachines ? "" : rt->noun, POOL_RUNTIME->noun);
		return -1;
	}
	if (count < 1 || count > 1000) {
		snprintf(err, errlen, "count must be 1..1000");
		return -1;
	}
	char n[16];
	snprintf(n, sizeof n, "%d", count);
	const char *p[6] = {x->cfg->environment, l->id, n, from, until, by};
	/* "+<interval>" is from now; anything else is a timestamptz */
	PGresult *r = db_exec(
	    &x->db,
	    "WITH t AS (SELECT CASE WHEN $4::text IS NULL OR $4 = 'now' THEN clock_timestamp() "
	    "  WHEN left($4, 1) = '+' THEN clock_timestamp() + substr($4, 2)::interval "
	    "  ELSE $4::timestamptz END AS f) "
	    "INSERT INTO pool_warm (environment, lesson, count, from_at, until_at, created_by) "
	    "SELECT $1, $2, $3::int, f, CASE WHEN $5::text IS NULL THEN f + interval '2 hours' "
	    "  WHEN left($5, 1) = '+' THEN clock_timestamp() + substr($5, 2)::interval "
	    "  ELSE $5::timestamptz END, $6 FROM t RETURNING id",
	    6, p);
	if (!r) {
		/* a bad time or an end before the start: the server says which */
		if (x->db.broken)
			return -2;
		snprintf(err, errlen, "from/until: %s", x->db.msg);
		return -1;
	}
	long id = strtol(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	log_info("pool: warm request %ld: %d VMs of lesson %s (by %s)", id, count, l->id,
	         by ? by : "-");
	return id;
}

int pool_warm_cancel(struct labctx *x, long id)
{
	char s[32];
	snprintf(s, sizeof s, "%ld", id);
	const char *p[2] = {s, x->cfg->environment};
	PGresult *r = db_exec(&x->db,
	                      "DELETE FROM pool_warm WHERE id = $1::bigint AND environment = $2 "
	                      "RETURNING 1",
	                      2, p);
	if (!r)
		return -1;
	int n = PQntuples(r);
	PQclear(r);
	return n > 0;
}

static cJSON *rows_json(PGresult *r)
{
	cJSON *a = jx_arr();
	for (int i = 0; i < PQntuples(r); i++) {
		cJSON *o = jx_obj();
		for (int c = 0; c < PQnfields(r); c++) {
			const char *v = db_val(r, i, c);
			const char *name = PQfname(r, c);
			if (v && (strcmp(name, "id") == 0 || strcmp(name, "count") == 0 ||
			          strcmp(name, "target") == 0 || strcmp(name, "starting") == 0 ||
			          strcmp(name, "ready") == 0 || strcmp(name, "claimed") == 0 ||
			          strcmp(name, "failed") == 0))
				jx_add_num(o, name, strtod(v, NULL));
			else if (v && strcmp(name, "active") == 0)
				jx_add_bool(o, name, v[0] == 't');
			else
				jx_add_str(o, name, v);
		}
		jx_push(a, o);
	}
	return a;
}

cJSON *pool_status_json(struct labctx *x)
{
	const char *p[1] = {x->cfg->environment};
	PGresult *w = db_exec(
	    &x->db,
	    "SELECT id, lesson, count, labvm_ts(from_at) AS from, labvm_ts(until_at) AS until, "
	    "created_by, (from_at <= clock_timestamp() AND until_at > clock_timestamp()) AS active "
	    "FROM pool_warm WHERE environment = $1 AND until_at > clock_timestamp() ORDER BY "
	    "from_at, id",
	    1, p);
	PGresult *v =
	    w ? db_exec(&x->db,
	                "SELECT vm_name AS name, lesson, state, disk_source, "
	                "labvm_ts(created_at) AS created_at, labvm_ts(ready_at) AS ready_at "
	                "FROM pool_vms WHERE environment = $1 "
	                "AND state IN ('starting', 'ready') ORDER BY lesson, created_at",
	                1, p)
	      : NULL;
	PGresult *c = v ? db_exec(&x->db,
	                          "SELECT lesson, count(*) FILTER (WHERE state = 'starting') AS "
	                          "starting, count(*) FILTER (WHERE state = 'ready') AS ready, "
	                          "count(*) FILTER (WHERE state = 'claimed') AS claimed, "
	                          "count(*) FILTER (WHERE delete_reason IN ('setup_failed', "
	                          "'not_ready')) AS failed FROM pool_vms WHERE environment = $1 "
	                          "GROUP BY lesson ORDER BY lesson",
	                          1, p)
	                : NULL;
	cJSON *o = NULL;
	if (w && v && c) {
		o = jx_obj();
		jx_put(o, "warm", rows_json(w));
		cJSON *lessons = rows_json(c);
		/* every lesson with a target, with or without VMs yet */
		for (size_t i = 0; i < x->lessons->n; i++) {
			const struct lesson *l = &x->lessons->v[i];
			int t = pool_target(x, l);
			cJSON *e = NULL, *it;
			cJSON_ArrayForEach(it, lessons)
			{
				const char *id = kj_str(it, "lesson");
				if (id && strcmp(id, l->id) == 0)
					e = it;
			}
			if (!e && t <= 0)
				continue;
			if (!e) {
				e = jx_obj();
				jx_add_str(e, "lesson", l->id);
				jx_add_num(e, "starting", 0);
				jx_add_num(e, "ready", 0);
				jx_add_num(e, "claimed", 0);
				jx_add_num(e, "failed", 0);
				jx_push(lessons, e);
			}
			jx_add_num(e, "target", t < 0 ? 0 : t);
		}
		jx_put(o, "lessons", lessons);
		jx_put(o, "vms", rows_json(v));
	}
	PQclear(w);
	PQclear(v);
	PQclear(c);
	return o;
}
