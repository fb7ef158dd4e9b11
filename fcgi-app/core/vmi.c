/* vmi.c - a session machine's VMI (see vmi.h). */
#include "vmi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"
#include "log.h"
#include "session_change.h"

const char *vmi_address(const cJSON *vmi)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, kj_get(vmi, "status.interfaces"))
	{
		const cJSON *n = cJSON_GetObjectItemCaseSensitive(it, "name");
		const cJSON *ip = cJSON_GetObjectItemCaseSensitive(it, "ipAddress");
		if (cJSON_IsString(n) && strcmp(n->valuestring, "default") == 0 &&
		    cJSON_IsString(ip))
			return ip->valuestring;
	}
	return kj_str(vmi, "status.interfaces.0.ipAddress");
}

long vmi_get(struct labctx *x, const char *name, cJSON **vmi)
{
	char *path = kube_path("virtualmachineinstances", x->cfg->namespace_, name);
	long code = kube_get(&x->kube, path, vmi);
	free(path);
	return code;
}

/* The VMI is the instance of the VM named vm (its controlling owner): a
 * claimed warm-pool VM's VMI keeps the pool's labels. */
static int owned_by_vm(const cJSON *vmi, const char *vm)
{
	const cJSON *o;
	cJSON_ArrayForEach(o, kj_get(vmi, "metadata.ownerReferences"))
	{
		const char *kind = kj_str(o, "kind"), *name = kj_str(o, "name");
		if (kind && name && strcmp(kind, "VirtualMachine") == 0 && strcmp(name, vm) == 0 &&
		    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "controller")))
			return 1;
	}
	return 0;
}

int vmi_accept(struct labctx *x, const struct session *s, struct session_vm *vm, long code,
               const cJSON *vmi, char *msg, size_t msglen)
{
	const struct cfg *c = x->cfg;
	const char *name = kj_str(vmi, "metadata.name");
	const char *uid = kj_str(vmi, "metadata.uid");
	const cJSON *labels = kj_get(vmi, "metadata.labels");
	const cJSON *sidl = cJSON_GetObjectItemCaseSensitive(labels, c->label.session_id);
	const char *phase = kj_str(vmi, "status.phase");
	const char *ip = vmi_address(vmi);
	if (code == 404) {
		snprintf(msg, msglen, "your VM is not running (no VirtualMachineInstance)");
	} else if (code != 200) {
		utf8_snprintf(msg, msglen, "the cluster did not answer: %s", x->kube.msg);
	} else if (!name || strcmp(name, vm->name) != 0 || !uid ||
	           (!(cJSON_IsString(sidl) && strcmp(sidl->valuestring, s->id) == 0) &&
	            !owned_by_vm(vmi, vm->name))) {
		/* never send this session's token to a VMI that is not this session's */
		snprintf(msg, msglen, "the VirtualMachineInstance %s is not this session's",
		         vm->name);
		log_warn("session %s: VMI %s does not carry this session's id: not contacted",
		         s->id, vm->name);
	} else if (!phase || strcmp(phase, "Running") != 0 || !ip) {
		utf8_snprintf(msg, msglen, "your VM is not running (VMI phase %s%s)",
		              phase ? phase : "none", ip ? "" : ", no address");
	} else {
		if (!vm->ip || strcmp(vm->ip, ip) != 0 || !vm->vmi_uid ||
		    strcmp(vm->vmi_uid, uid) != 0) {
			if (vm->ip && strcmp(vm->ip, ip) != 0)
				log_info("session %s: VMI %s has a new address (uid %s)", s->id,
				         vm->name, uid);
			session_vm_set_address(x, s, vm, ip, uid);
		}
		return 0;
	}
	/* whatever was recorded is not known to be this session's any more */
	if (vm->vmi_uid)
		session_vm_forget(x, s, vm);
	return -1;
}

int vmi_reach(struct labctx *x, const struct session *s, struct session_vm *vm, int *checked,
              char *msg, size_t msglen)
{
	if (*checked && vm->ip && vm->vmi_uid)
		return 0;
	cJSON *vmi = NULL;
	long code = vmi_get(x, vm->name, &vmi);
	int rc = vmi_accept(x, s, vm, code, vmi, msg, msglen);
	cJSON_Delete(vmi);
	*checked = rc == 0;
	return rc;
}

void vmi_forget(struct labctx *x, const struct session *s, struct session_vm *vm)
{
	if (vm->vmi_uid)
		session_vm_forget(x, s, vm);
}
