/* pool_vm.h - a warm pool VM's row (pool_vms, sql/006), shared by the pool's
 * own files: pool.c (the states, retiring, the reaper's test), pool_claim.c
 * (claim, yield), pool_tick.c (the upkeep), pool_warm.c (operators). The
 * pool's users read pool.h.
 *
 *   starting --pool_tick: agent ready--> ready --pool_claim--> claimed
 *   starting|ready --pool_retire, pool_yield--> deleted
 *
 * A move is a conditional UPDATE on the states it leaves, and its row in
 * memory asserts the state it expects. The pool's VMs are the VM runtime's
 * (runtime_vm): the same manifests, counted against vm_capacity. */
#ifndef LABVM_CORE_POOL_VM_H
#define LABVM_CORE_POOL_VM_H

#include "lab.h"
#include "runtime.h"

enum pool_vm_state { POOL_VM_STARTING, POOL_VM_READY, POOL_VM_CLAIMED, POOL_VM_DELETED };

const char *pool_vm_state_str(enum pool_vm_state st);
/* The enum of a database value; -1 when it is not one. */
int pool_vm_state_parse(const char *v);

/* The runtime of the pool's VMs. */
#define POOL_RUNTIME (&runtime_vm)

/* Retire an idle pool VM: the row first (only if still idle: a claim that
 * holds the row wins, and this waits for it), then the cluster objects.
 * error (a guest's text) is kept valid UTF-8, cut on a character.
 * 1 deleted, 0 someone claimed it meanwhile, -1 db. */
int pool_retire(struct labctx *x, const char *vm, const char *secret, const char *reason,
                const char *error);

#endif
