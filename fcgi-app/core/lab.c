#include "lab.h"

#include <string.h>

#include "log.h"

int labctx_init(struct labctx *x, const struct cfg *c, const struct lessons *ls)
{
	memset(x, 0, sizeof *x);
	x->cfg = c;
	x->lessons = ls;
	db_init(&x->db, c->database);
	x->db.idle_tx_timeout_s = c->db_idle_tx_timeout_s;
	if (kube_init(&x->kube, c) < 0) {
		log_err("cluster client: %s", x->kube.msg);
		return -1;
	}
	if (agent_init(&x->agent) < 0) {
		log_err("agent client: cannot initialise libcurl");
		return -1;
	}
	return 0;
}

void labctx_cleanup(struct labctx *x)
{
	db_close(&x->db);
	kube_cleanup(&x->kube);
	agent_cleanup(&x->agent);
}

int lab_min_orphan_grace_s(const struct cfg *c, const struct lessons *ls, const char **which)
{
	size_t most = 1;
	*which = NULL;
	for (size_t i = 0; ls && i < ls->n; i++) {
		size_t n = lesson_nmachines(&ls->v[i]);
		if (!*which || n > most) {
			most = n;
			*which = ls->v[i].id;
		}
	}
	return cfg_min_orphan_grace_machines(c, (long)most);
}

int lab_idle_s(const struct cfg *c, const struct lesson *l)
{
	return l->idle_s >= 0 ? l->idle_s : c->idle_minutes * 60;
}
