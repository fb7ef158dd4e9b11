/* pool.c - the warm pool's shared part (see pool.h, pool_vm.h): a pool VM's
 * states, retiring one, which lessons have a pool, and the reaper's test. */
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "pool_vm.h"
#include "provision.h"
#include "state.h"
#include "util.h"

#define POOL_ERROR_MAX 1023 /* bytes of a retired VM's error kept in its row */

static const char *const state_names[] = {
    [POOL_VM_STARTING] = "starting",
    [POOL_VM_READY] = "ready",
    [POOL_VM_CLAIMED] = "claimed",
    [POOL_VM_DELETED] = "deleted",
};
#define NSTATES (sizeof state_names / sizeof state_names[0])

const char *pool_vm_state_str(enum pool_vm_state st)
{
	return (size_t)st < NSTATES ? state_names[st] : "unknown";
}

int pool_vm_state_parse(const char *v)
{
	return util_name_index(state_names, NSTATES, v);
}

int pool_lesson(const struct lesson *l)
{
	return runtime_of(l->runtime)->warm_pool && !l->nmachines;
}

int pool_retire(struct labctx *x, const char *vm, const char *secret, const char *reason,
                const char *error)
{
	static const char sql[] = "UPDATE pool_vms SET state = $4, deleted_at = clock_timestamp(), "
	                          "delete_reason = $2, error = $3 "
	                          "WHERE vm_name = $1 AND state IN ($5, $6) RETURNING 1";
	/* the guest's text (a setup's log tail): valid UTF-8, cut on a character */
	char *clean = error ? utf8_clean_dup(error, strlen(error), POOL_ERROR_MAX) : NULL;
	const char *p[6] = {vm,
	                    reason,
	                    clean,
	                    pool_vm_state_str(POOL_VM_DELETED),
	                    pool_vm_state_str(POOL_VM_STARTING),
	                    pool_vm_state_str(POOL_VM_READY)};
	PGresult *r = db_exec(&x->db, sql, 6, p);
	if (!r && clean && !x->db.broken) {
		/* refused anyway: retired without it (else it stays, failing, every tick) */
		log_warn("pool: storing VM %s's error failed (%s); retiring it without", vm,
		         x->db.msg);
		p[2] = NULL;
		r = db_exec(&x->db, sql, 6, p);
	}
	int n = r ? PQntuples(r) : 0;
	PQclear(r);
	if (n > 0) {
		lab_delete(x, POOL_RUNTIME->kind, vm, "pool");
		lab_delete(x, "secrets", secret, "pool");
		log_info("pool: deleted VM %s (%s)%s%s", vm, reason, clean ? ": " : "",
		         clean ? clean : "");
	}
	free(clean);
	return r ? n > 0 : -1;
}

int pool_owns(struct labctx *x, const char *kind, const char *name)
{
	int vm = strcmp(kind, POOL_RUNTIME->kind) == 0;
	const char *p[2] = {name, x->cfg->environment};
	PGresult *r = db_exec(&x->db,
	                      vm ? "SELECT p.state, s.state FROM pool_vms p LEFT JOIN sessions s "
	                           "ON s.id = p.session_id "
	                           "WHERE p.vm_name = $1 AND p.environment = $2"
	                         : "SELECT p.state, s.state FROM pool_vms p LEFT JOIN sessions s "
	                           "ON s.id = p.session_id "
	                           "WHERE p.secret_name = $1 AND p.environment = $2",
	                      2, p);
	if (!r)
		return -1;
	int owns = 0;
	if (PQntuples(r)) {
		int ps = pool_vm_state_parse(PQgetvalue(r, 0, 0));
		int ss = session_state_parse(db_val(r, 0, 1));
		/* an idle pool VM, or one claimed by a session still active */
		owns = ps == POOL_VM_STARTING || ps == POOL_VM_READY ||
		       (ps == POOL_VM_CLAIMED && (ss == SESSION_STARTING || ss == SESSION_READY));
	}
	PQclear(r);
	return owns;
}
