/* vmi.h - a session machine's VirtualMachineInstance, read for the one rule
 * of where the machine's agent token may go (runtime_vm's agent_at(), the
 * status GET's probe, grading, tty-size, the stream driver): to the address
 * of a VMI read in this operation that is this session's machine's (named
 * after the VM, and labelled with the session's id or controlled by the VM:
 * a claimed warm pool VM's VMI keeps the pool's labels), Running. A VM
 * powered off and on gets a new VMI (a new uid, a new address, its old one
 * perhaps another student's guest's now): the new one is recorded, and a
 * VMI that is not (or no longer known to be) the session's is forgotten,
 * never trusted from the row. */
#ifndef LABVM_CORE_VMI_H
#define LABVM_CORE_VMI_H

#include <cjson/cJSON.h>

#include "lab.h"
#include "session.h"

/* The pod-network address of a VMI: the interface named "default" (the
 * session network's comes second), else the first one reported; NULL when
 * none. The warm pool reads its VMs' addresses the same way. */
const char *vmi_address(const cJSON *vmi);
/* GET the VMI named name (HTTP status; *vmi the object). */
long vmi_get(struct labctx *x, const char *name, cJSON **vmi);

/* The rule on a VMI read now (code, vmi): 0 vm->ip is this session's VMI's
 * address (a new VMI recorded: session_vm_set_address); -1 not (msg), and
 * whatever was recorded is forgotten. */
int vmi_accept(struct labctx *x, const struct session *s, struct session_vm *vm, long code,
               const cJSON *vmi, char *msg, size_t msglen);
/* runtime_ops.agent_at for VMs: trust vm->ip only when *checked in this
 * operation, else read the VMI now (vmi_accept) and set *checked. */
int vmi_reach(struct labctx *x, const struct session *s, struct session_vm *vm, int *checked,
              char *msg, size_t msglen);
/* runtime_ops.agent_forget for VMs: after a failed call, the next one reads again. */
void vmi_forget(struct labctx *x, const struct session *s, struct session_vm *vm);

#endif
