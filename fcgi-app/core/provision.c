/* provision.c - making, counting and deleting lab machines (see provision.h). */
#include "provision.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "golden.h"
#include "jsonx.h"
#include "log.h"
#include "session.h"

/* ------------------------------------------------------------ the plan */

void lab_plan_init(struct lab_plan *p, const struct lesson *l)
{
	memset(p, 0, sizeof *p);
	p->lesson = l;
	p->rt = runtime_of(l->runtime);
	p->n = lesson_nmachines(l);
	p->multi = l->nmachines > 0;
	p->vms = xcalloc(p->n + 1, sizeof *p->vms);
	for (size_t i = 0; i < p->n; i++) {
		p->vms[i].m = lesson_machine(l, i);
		p->vms[i].disk = p->vms[i].m->disk;
	}
}

int lab_plan_name(struct lab_plan *p, const char *sid)
{
	snprintf(p->sid, sizeof p->sid, "%s", sid);
	for (size_t i = 0; i < p->n; i++) {
		struct lab_machine *v = &p->vms[i];
		if (util_random_hex(v->token, 32) < 0)
			return -1;
		lab_names_for_machine(&v->names, sid, p->multi ? v->m->machine : NULL);
		v->secret = p->rt->secret_name(&v->names);
		if (p->multi)
			session_net_plan(sid, i, &v->net);
	}
	if (p->multi)
		snprintf(p->network, sizeof p->network, "%s", p->vms[0].names.network);
	return 0;
}

int lab_plan_name_pool(struct lab_plan *p)
{
	char id[37];
	struct lab_machine *v = &p->vms[0];
	if (p->n != 1 || util_uuid4(id) < 0 || util_random_hex(v->token, 32) < 0)
		return -1;
	p->sid[0] = '\0';
	lab_names_from_session(&v->names, id);
	v->names.session_id[0] = '\0';
	snprintf(v->names.pool_hash, sizeof v->names.pool_hash, "%s", p->lesson->hash);
	v->secret = p->rt->secret_name(&v->names);
	return 0;
}

void lab_plan_disks(struct labctx *x, struct lab_plan *p, const char *who)
{
	char detail[600];
	for (size_t i = 0; i < p->n; i++) {
		struct lab_machine *v = &p->vms[i];
		v->disk = v->m->disk;
		if (v->disk != DISK_GOLDEN || !p->rt->has_disk)
			continue;
		enum golden_reason g = golden_check(&x->kube, x->cfg, v->m, detail, sizeof detail);
		if (g == GOLDEN_OK)
			continue;
		v->disk = DISK_CONTAINERDISK;
		v->fallback = golden_reason_str(g);
		log_info("%s lesson %s%s%s: golden disk not used (%s; %s), containerDisk instead",
		         who, p->lesson->id, v->m->machine ? " machine " : "",
		         v->m->machine ? v->m->machine : "", v->fallback, detail);
	}
}

void lab_plan_free(struct lab_plan *p)
{
	for (size_t i = 0; p->vms && i < p->n; i++)
		OPENSSL_cleanse(p->vms[i].token, sizeof p->vms[i].token);
	free(p->vms);
	p->vms = NULL;
	p->n = 0;
}

/* ------------------------------------------------------------ make, undo */

int provision(struct labctx *x, struct lab_plan *p, char *why, size_t whylen)
{
	/* from the first request on: the way back deletes everything whatever
	 * failed (a request that timed out may still have created its object,
	 * and deleting what is not there is a 404) */
	p->created = 1;
	why[0] = '\0';
	return p->rt->submit(x, p, why, whylen);
}

void provision_undo(struct labctx *x, struct lab_plan *p)
{
	kube_deadline(&x->kube, 0);
	for (size_t i = 0; i < p->n; i++) {
		lab_delete(x, p->rt->kind, p->vms[i].names.vm, "cleanup");
		lab_delete(x, "secrets", p->vms[i].secret, "cleanup");
	}
	if (p->multi)
		lab_delete(x, "network-attachment-definitions", p->network, "cleanup");
	p->created = 0;
}

/* ------------------------------------------------------------ count, delete */

long lab_count(struct labctx *x, const struct runtime_ops *rt, long *in_use)
{
	char *path = kube_path(rt->kind, x->cfg->namespace_, NULL);
	char *sel = xasprintf("%s=true%s", x->cfg->label.lab_session, rt->selector);
	cJSON *list = NULL;
	const cJSON *it;
	/* metadata only: no specs needed */
	long code = kube_list_meta(&x->kube, path, sel, &list);
	const cJSON *items = kj_get(list, "items");
	*in_use = 0;
	if (code == 200 && !cJSON_IsArray(items))
		code = 0;
	if (code == 200)
		cJSON_ArrayForEach(it, items) *in_use += !rt->is_lab || rt->is_lab(x->cfg, it);
	cJSON_Delete(list);
	free(sel);
	free(path);
	return code;
}

int lab_delete(struct labctx *x, const char *kind, const char *name, const char *who)
{
	char *path = kube_path(kind, x->cfg->namespace_, name);
	int ok = kube_delete(&x->kube, path, "Background");
	if (!ok)
		log_warn("%s: deleting %s %s failed: %s (the reaper will retry)", who, kind, name,
		         x->kube.msg);
	free(path);
	return ok;
}

int session_delete_objects(struct labctx *x, struct session *s)
{
	const struct runtime_ops *rt = runtime_of(s->runtime);
	char who[64];
	int failed = 0;

	snprintf(who, sizeof who, "session %s", s->id);
	for (size_t i = 0; i < s->nvms; i++) {
		struct session_vm *v = &s->vms[i];
		if (v->deleted)
			continue;
		int ok1 = lab_delete(x, rt->kind, v->name, who);
		/* the Secret is owned by the machine's object, and still deleted explicitly */
		int ok2 = lab_delete(x, "secrets", v->secret, who);
		if (ok1 && ok2) {
			const char *p[2] = {s->id, v->name};
			v->deleted = 1;
			db_cmd(
			    &x->db,
			    "UPDATE session_vms SET deleted_at = clock_timestamp() "
			    "WHERE session_id = $1::uuid AND vm_name = $2 AND deleted_at IS NULL",
			    2, p);
			log_info("session %s: deleted %s %s and Secret %s", s->id, rt->noun,
			         v->name, v->secret);
		} else {
			failed += !ok1 + !ok2;
		}
	}
	/* the session network goes after its machines (their deletion is under way) */
	if (s->network) {
		if (lab_delete(x, "network-attachment-definitions", s->network, who))
			log_info("session %s: deleted NetworkAttachmentDefinition %s", s->id,
			         s->network);
		else
			failed++;
	}
	return failed;
}
