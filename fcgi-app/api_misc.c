/* api_misc.c - GET /api/lessons, GET /api/healthz. */
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "jsonx.h"
#include "log.h"
#include "runtime.h"

enum hres api_lessons(struct req *r)
{
	const struct lessons *ls = r->x->lessons;
	cJSON *o = jx_obj();
	cJSON *a = jx_add_arr(o, "lessons");
	for (size_t i = 0; i < ls->n; i++) {
		const struct lesson *l = &ls->v[i];
		cJSON *e = jx_obj();
		jx_add_str(e, "id", l->id);
		jx_add_str(e, "title", l->title);
		jx_add_str(e, "runtime", lesson_runtime_str(l->runtime));
		jx_add_num(e, "minutes", l->minutes);
		jx_add_str(e, "description", l->description);
		if (l->title_ja || l->description_ja) {
			cJSON *ja = jx_add_obj(jx_add_obj(e, "i18n"), "ja");
			if (l->title_ja)
				jx_add_str(ja, "title", l->title_ja);
			if (l->description_ja)
				jx_add_str(ja, "description", l->description_ja);
		}
		if (runtime_of(l->runtime)->has_disk)
			jx_add_str(e, "disk", lesson_disk_str(l->disk));
		jx_add_num(e, "grader_steps", (double)l->nsteps);
		/* GET /api/lessons/{id}/guide answers (its English guide, at least) */
		jx_add_bool(e, "guide", l->guide.text != NULL);
		if (l->nmachines) {
			cJSON *ms = jx_add_arr(e, "machines");
			for (size_t j = 0; j < l->nmachines; j++)
				jx_push_str(ms, l->machines[j].machine);
		}
		if (l->warm)
			jx_add_num(e, "warm", l->warm);
		jx_push(a, e);
	}
	resp_json(r, 200, o);
	return H_DONE;
}

enum hres api_healthz(struct req *r)
{
	struct labctx *x = r->x;
	cJSON *o = jx_obj();
	int ok = 1;
	PGresult *res = db_exec(&x->db, "SELECT 1", 0, NULL);
	/* codes only: the texts (libpq's, curl's) go to the log, not to clients */
	if (res) {
		jx_add_str(o, "db", "ok");
	} else {
		log_warn("healthz: %s", x->db.msg);
		jx_add_str(o, "db", "unavailable");
		ok = 0;
	}
	PQclear(res);
	char *path = kube_path("virtualmachines", x->cfg->namespace_, NULL);
	char *p2 = xasprintf("%s?limit=1", path);
	long code = kube_get(&x->kube, p2, NULL);
	if (code == 200) {
		jx_add_str(o, "cluster", "ok");
	} else {
		log_warn("healthz: cluster: %s",
		         x->kube.msg[0] ? x->kube.msg : "unexpected answer");
		jx_add_str(o, "cluster", code ? "error" : "unavailable");
		if (code)
			jx_add_num(o, "cluster_status", code);
		ok = 0;
	}
	free(p2);
	free(path);
	resp_json(r, ok ? 200 : 503, o);
	return H_DONE;
}
