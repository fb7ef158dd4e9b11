/* api_pool.c - the operators' warm pool (issue #18):
 *
 *   GET    /api/operator/pool        the pool (and one tick of it: readiness, fill)
 *   POST   /api/operator/pool        {"lesson", "count", "from"?, "until"?}: warm a
 *                                    lesson for a class -> 201 {"id", ...}
 *   DELETE /api/operator/pool/{id}   cancel a warm request (its VMs go at the next tick)
 *
 * Operators only (labvm.conf `operators`: the routes' NEED_OPERATOR, 403
 * forbidden for anyone else), like the operator page's API (api_operator.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "jsonx.h"
#include "log.h"
#include "pool.h"

enum hres api_pool_get(struct req *r)
{
	struct pool_counts k = {0};
	/* an operator watching the pool keeps it moving (not waiting for a tick
	 * that runs elsewhere) */
	pool_tick_try(r->x, NULL, &k);
	cJSON *o = pool_status_json(r->x);
	if (!o)
		return api_db_error(r);
	resp_json(r, 200, o);
	return H_DONE;
}

enum hres api_pool_warm(struct req *r)
{
	const cJSON *lesson = cJSON_GetObjectItemCaseSensitive(r->json, "lesson");
	const cJSON *count = cJSON_GetObjectItemCaseSensitive(r->json, "count");
	const cJSON *from = cJSON_GetObjectItemCaseSensitive(r->json, "from");
	const cJSON *until = cJSON_GetObjectItemCaseSensitive(r->json, "until");
	char err[600];

	if (!cJSON_IsObject(r->json) || !cJSON_IsString(lesson) || !cJSON_IsNumber(count) ||
	    count->valuedouble != (double)count->valueint || (from && !cJSON_IsString(from)) ||
	    (until && !cJSON_IsString(until))) {
		resp_error(
		    r, E_BAD_REQUEST,
		    "expected {\"lesson\": ID, \"count\": N, \"from\"?: TIME, \"until\"?: TIME}");
		return H_DONE;
	}
	long id = pool_warm_add(r->x, lesson->valuestring, count->valueint,
	                        from ? from->valuestring : NULL, until ? until->valuestring : NULL,
	                        r->user, err, sizeof err);
	if (id == -2)
		return api_db_error(r);
	if (id < 0) {
		resp_error(r,
		           lessons_find(r->x->lessons, lesson->valuestring) ? E_BAD_REQUEST
		                                                            : E_UNKNOWN_LESSON,
		           "%s", err);
		return H_DONE;
	}
	/* the pool starts filling now, not at the reaper's next minute */
	snprintf(r->x->pool_after, sizeof r->x->pool_after, "%s", lesson->valuestring);
	cJSON *o = jx_obj();
	jx_add_num(o, "id", (double)id);
	jx_add_str(o, "lesson", lesson->valuestring);
	jx_add_num(o, "count", count->valueint);
	resp_json(r, 201, o);
	return H_DONE;
}

enum hres api_pool_cancel(struct req *r)
{
	char *end;
	long id = strtol(r->param, &end, 10);
	if (*end || id <= 0) {
		resp_error(r, E_NOT_FOUND, "no such warm request");
		return H_DONE;
	}
	int rc = pool_warm_cancel(r->x, id);
	if (rc < 0)
		return api_db_error(r);
	if (rc == 0) {
		resp_error(r, E_NOT_FOUND, "no such warm request");
		return H_DONE;
	}
	cJSON *o = jx_obj();
	jx_add_num(o, "id", (double)id);
	jx_add_bool(o, "cancelled", 1);
	resp_json(r, 200, o);
	return H_DONE;
}
