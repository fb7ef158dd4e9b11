/* runtime_vm.c - the "vm" runtime (runtime.h): a KubeVirt VirtualMachine per
 * machine with its cloud-init Secret, several machines on a session network
 * (a NetworkAttachmentDefinition); readiness is the VMI's phase, then the
 * agent's ready flag; the agent's address is read from the session's own
 * VMI before its token goes anywhere. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cloudinit.h"
#include "jsonx.h"
#include "log.h"
#include "provision.h"
#include "runtime.h"
#include "session_change.h"
#include "vmi.h"

#define AGENT_RETRY_MS 10  /* the driver: an agent not listening yet is asked again after this */
#define VMI_RECHECK_S  1.0 /* ... its VMI read again first, at most this often */

/* What a look at one machine did. */
enum look { LOOK_DBERR = -1, LOOK_SAME = 0, LOOK_FAILED = 1, LOOK_MOVED = 2 };

static int vm_capacity(const struct cfg *c)
{
	return c->vm_capacity;
}

static const char *vm_secret_name(const struct lab_names *n)
{
	return n->secret;
}

/* ------------------------------------------------------------ making */

/* "ADDRESS NAME" lines for /etc/hosts: every machine of the session. */
static char *hosts_block(const struct lab_plan *p)
{
	struct buf b = {0};
	for (size_t i = 0; i < p->n; i++) {
		char addr[24];
		snprintf(addr, sizeof addr, "%s", p->vms[i].net.address);
		char *slash = strchr(addr, '/');
		if (slash)
			*slash = '\0';
		buf_printf(&b, "%s %s\n", addr, p->vms[i].names.machine);
	}
	return b.p;
}

/* A VM create that got no answer may still land after the way back deleted
 * "nothing" (404) and the capacity lock was released: capacity would
 * overshoot by one. Still under the lock, look until the VM shows up (then
 * the way back deletes it, and a terminating VM still counts) or the API
 * server's own handling of that request must be over. */
static void confirm_vm(struct labctx *x, const char *name)
{
	kube_deadline(&x->kube, 0); /* the way back: not cut short by the start's deadline */
	char *path = kube_path("virtualmachines", x->cfg->namespace_, name);
	double until = util_mono_s() + x->cfg->kube_timeout_ms / 1000.0;
	long code;
	while ((code = kube_get(&x->kube, path, NULL)) != 200 && util_mono_s() < until)
		nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
	log_warn("VM %s: the create got no answer; the VM %s", name,
	         code == 200 ? "exists (it is deleted now)" : "did not appear (nothing to delete)");
	free(path);
}

/* One machine: its Secret, its VM, the Secret owned by the VM. */
static int submit_machine(struct labctx *x, const struct lab_plan *p, struct lab_machine *v,
                          const char *hosts, char *why, size_t whylen)
{
	const struct cfg *c = x->cfg;
	char *userdata = cloudinit_build_hosts(v->m, v->token, hosts);
	char *netdata = p->multi ? manifest_network_data(&v->net) : NULL;
	cJSON *secret = manifest_secret_net(c, &v->names, p->lesson, userdata, netdata);
	cJSON *vm = manifest_vm_net(c, &v->names, v->m, v->disk, p->multi ? &v->net : NULL);
	cJSON *created = NULL, *patch = NULL;
	char *spath = kube_path("secrets", c->namespace_, NULL);
	char *vpath = kube_path("virtualmachines", c->namespace_, NULL);
	char *opath = kube_path("secrets", c->namespace_, v->names.secret);
	char who[40] = "";
	int rc = -1;
	long code;

	if (v->names.machine[0])
		snprintf(who, sizeof who, "machine %s: ", v->names.machine);
	util_free_secret(userdata); /* it holds the agent token */
	free(netdata);
	code = kube_create(&x->kube, spath, secret, NULL);
	if (code != 201 && code != 200) {
		snprintf(why, whylen, "%screating the cloud-init Secret: %s", who, x->kube.msg);
		goto out;
	}
	code = kube_create(&x->kube, vpath, vm, &created);
	const char *uid = kj_str(created, "metadata.uid");
	if ((code != 201 && code != 200) || !uid) {
		snprintf(why, whylen, "%screating the VirtualMachine: %s", who,
		         x->kube.msg[0] ? x->kube.msg : "no uid in the answer");
		if (code == 0)
			confirm_vm(x, v->names.vm);
		goto out;
	}
	patch = manifest_owner_patch(v->names.vm, uid);
	code = kube_merge_patch(&x->kube, opath, patch, NULL);
	if (code != 200) {
		snprintf(why, whylen, "%smaking the Secret owned by the VM: %s", who, x->kube.msg);
		goto out;
	}
	rc = 0;
out:
	cJSON_Delete(secret);
	cJSON_Delete(vm);
	cJSON_Delete(created);
	cJSON_Delete(patch);
	free(spath);
	free(vpath);
	free(opath);
	return rc;
}

/* The session network (several machines), then every machine. */
static int vm_submit(struct labctx *x, struct lab_plan *p, char *why, size_t whylen)
{
	const struct cfg *c = x->cfg;
	char *hosts = NULL;
	int rc = -1;

	if (p->multi) {
		cJSON *nad = manifest_nad(c, &p->vms[0].names, p->lesson->id);
		char *path = kube_path("network-attachment-definitions", c->namespace_, NULL);
		long code = kube_create(&x->kube, path, nad, NULL);
		cJSON_Delete(nad);
		free(path);
		if (code != 201 && code != 200) {
			snprintf(why, whylen,
			         "creating the session network (NetworkAttachmentDefinition "
			         "%s): %s",
			         p->network, x->kube.msg);
			return -1;
		}
		hosts = hosts_block(p);
	}
	for (size_t i = 0; i < p->n; i++)
		if (submit_machine(x, p, &p->vms[i], hosts, why, whylen) < 0)
			goto out;
	rc = 0;
out:
	free(hosts);
	return rc;
}

/* ------------------------------------------------------------ readiness */

/* Why a VM is not running, for the error message: VM printableStatus. */
static void vm_status(struct labctx *x, const char *vm, char *out, size_t n)
{
	char *path = kube_path("virtualmachines", x->cfg->namespace_, vm);
	cJSON *o = NULL;
	long code = kube_get(&x->kube, path, &o);
	const char *ps = kj_str(o, "status.printableStatus");
	utf8_snprintf(out, n, "%s", code == 200 && ps ? ps : "unknown");
	cJSON_Delete(o);
	free(path);
}

/* A machine not Running yet: its VMI's phase (the VMI read is kept in *vmi,
 * *code for the flag's look in the same pass). */
static enum look look_running(struct labctx *x, struct session *s, struct session_vm *vm,
                              int overdue, cJSON **vmi, long *code)
{
	*code = vmi_get(x, vm->name, vmi);
	const char *phase = *code == 200 ? kj_str(*vmi, "status.phase") : NULL;

	if (phase && strcmp(phase, "Running") == 0)
		return session_vm_mark_running(x, s, vm, vmi_address(*vmi),
		                               kj_str(*vmi, "metadata.uid")) < 0
		           ? LOOK_DBERR
		           : LOOK_MOVED;
	if (phase && (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0))
		return session_fail(x, s, vm,
		                    "the VM stopped before the lab was ready (VMI phase %s)",
		                    phase) < 0
		           ? LOOK_DBERR
		           : LOOK_FAILED;
	if (*code == 404 || (phase && strcmp(phase, "Scheduled") != 0) || (*code == 200 && !phase))
		session_set_vm_stage(x, s, vm, STAGE_SCHEDULING);
	else if (phase)
		session_set_vm_stage(x, s, vm, STAGE_BOOTING);
	/* else the cluster did not answer: keep the stage, the deadline still counts */
	if (!overdue)
		return LOOK_SAME;
	char st[128];
	vm_status(x, vm->name, st, sizeof st);
	return session_fail(x, s, vm,
	                    "the VM was not running within %d s (VMI phase %s, VM status %s)",
	                    s->running_timeout_s, phase ? phase : "none", st) < 0
	           ? LOOK_DBERR
	           : LOOK_FAILED;
}

static const char *detail_str(const cJSON *d, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(d, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A machine that runs: its agent's ready flag. The token goes only to the
 * address of a VMI read in this look (vmi, when the running look just read
 * it; else read now) that is this session's: a VMI replaced since the last
 * look (its old address perhaps another student's guest's now) is never
 * trusted from the row. */
static enum look look_ready(struct labctx *x, struct session *s, struct session_vm *vm, int overdue,
                            const cJSON *vmi, long code)
{
	const struct cfg *c = x->cfg;
	cJSON *detail = NULL, *read = NULL;
	enum agent_ready r = AGENT_UNREACHABLE;
	enum look rc = LOOK_SAME;
	char why[256] = "no address yet";

	if (!vmi) {
		code = vmi_get(x, vm->name, &read);
		vmi = read;
	}
	int ok = vmi_accept(x, s, vm, code, vmi, why, sizeof why) == 0;
	cJSON_Delete(read);
	if (ok) {
		r = agent_ready(&x->agent, vm->ip, c->agent_port, vm->token,
		                c->agent_ready_timeout_ms, &detail);
		if (r == AGENT_UNREACHABLE)
			vmi_forget(x, s, vm);
	}
	if (r == AGENT_READY) {
		rc = session_vm_mark_ready(x, s, vm) < 0 ? LOOK_DBERR : LOOK_MOVED;
		goto out;
	}
	const char *st = detail_str(detail, "state");
	const char *tail = detail_str(detail, "log_tail");
	const cJSON *ec = cJSON_GetObjectItemCaseSensitive(detail, "exit_code");
	int frc = 0;
	if (st && strcmp(st, "setup_failed") == 0) {
		/* the guest says so: no point in waiting for the deadline */
		frc = session_fail(x, s, vm, "the lab setup failed with exit code %d%s%s",
		                   cJSON_IsNumber(ec) ? ec->valueint : -1,
		                   tail && *tail ? ": " : "", tail ? tail : "");
		rc = LOOK_FAILED;
	} else if (overdue) {
		frc = session_fail(
		    x, s, vm, "the lab was not ready %d s after the VM started (agent: %s)%s%s",
		    s->ready_timeout_s, st ? st : (ok ? x->agent.msg : why),
		    tail && *tail ? ": " : "", tail ? tail : "");
		rc = LOOK_FAILED;
	}
	if (frc < 0)
		rc = LOOK_DBERR;
out:
	cJSON_Delete(detail);
	return rc;
}

/* Every machine of a starting session on by one look (the Running phase,
 * then the ready flag; a machine that just runs gets its first look for the
 * flag at once, on the VMI just read), then the session's own stage and
 * times: running when every machine runs, ready when every machine is.
 * Each machine has its deadlines: Running within running_timeout_s of the
 * submission, the ready flag within ready_timeout_s of its own Running; the
 * first machine to miss one fails the session, naming it. */
static int advance_machines(struct labctx *x, struct session *s)
{
	double now = s->t_now;
	int moved = 0;

	for (size_t i = 0; i < s->nvms; i++) {
		struct session_vm *vm = &s->vms[i];
		cJSON *vmi = NULL;
		long code = 0;
		enum look rc;
		if (vm->deleted || vm->ready_at)
			continue;
		/* a row from before per-machine readiness: the session's times are its own */
		int running = vm->running_at || (s->nvms == 1 && s->running_at);
		double t_running = vm->t_running ? vm->t_running : s->t_running;
		if (!running) {
			int overdue =
			    s->t_submitted > 0 && now > s->t_submitted + s->running_timeout_s;
			rc = look_running(x, s, vm, overdue, &vmi, &code);
			if (rc != LOOK_MOVED)
				cJSON_Delete(vmi);
			if (rc == LOOK_DBERR)
				return -1;
			if (rc == LOOK_FAILED)
				return 0; /* finished and reloaded */
			if (rc != LOOK_MOVED)
				continue;
			moved = 1;
			t_running = now;
		}
		rc = look_ready(x, s, vm, t_running > 0 && now > t_running + s->ready_timeout_s,
		                vmi, code);
		cJSON_Delete(vmi);
		if (rc == LOOK_DBERR)
			return -1;
		if (rc == LOOK_FAILED)
			return 0;
		moved |= rc == LOOK_MOVED;
	}
	if (moved && session_reload(x, s) < 0)
		return -1;
	if (s->state != SESSION_STARTING)
		return 0; /* moved on meanwhile (an End, another process) */

	int all_running = s->nvms > 0, all_ready = s->nvms > 0;
	enum session_stage least = STAGE_READY;
	for (size_t i = 0; i < s->nvms; i++) {
		const struct session_vm *vm = &s->vms[i];
		int running = vm->running_at || (s->nvms == 1 && s->running_at);
		all_running &= running;
		all_ready &= vm->ready_at != NULL;
		if (!running && (enum session_stage)vm->stage < least)
			least = (enum session_stage)vm->stage;
	}
	if (all_ready)
		return session_mark_ready(x, s);
	if (all_running)
		return s->running_at ? 0 : session_mark_running(x, s);
	session_set_stage(x, s, least);
	return 0;
}

/* At most one probe (cluster, agents) in flight per session: the other
 * polls answer from the last known state. The lease outlives the longest
 * probe of every machine; a holder that died lets it run out. */
static int vm_advance(struct labctx *x, struct session *s, const struct session_due *d)
{
	const struct cfg *c = x->cfg;
	(void)d; /* every machine has its own deadlines (advance_machines) */
	char *id = xstrdup(s->id);
	long lease_ms =
	    (long)(s->nvms ? s->nvms : 1) * (3L * c->kube_timeout_ms + c->agent_ready_timeout_ms) +
	    1000;
	int got = session_lease_take(x, id, LEASE_PROBE, lease_ms);
	int rc = got < 0 ? -1 : 0;
	if (got > 0) {
		rc = advance_machines(x, s);
		session_lease_release(x, id, LEASE_PROBE);
	}
	free(id);
	return rc;
}

/* ------------------------------------------------------------ the driver */

/* VMI watch: stop at the first event whose phase differs from the first
 * phase seen, or that says Running, Failed or Succeeded, or a deletion. */
struct phase_watch {
	char first[32];
	int seen;
	int events; /* events read */
	int error;  /* an ERROR event (a Status: the watch failed) */
};

static int on_vmi_event(const cJSON *ev, void *ud)
{
	struct phase_watch *w = ud;
	const char *type = kj_str(ev, "type");
	const char *phase = kj_str(ev, "object.status.phase");
	w->events++;
	if (type && strcmp(type, "ERROR") == 0) {
		w->error = 1;
		return 1;
	}
	if (!type || strcmp(type, "ADDED") != 0) {
		if (type && strcmp(type, "MODIFIED") != 0)
			return 1; /* DELETED, or no type */
	}
	if (!phase)
		phase = "";
	if (!strcmp(phase, "Running") || !strcmp(phase, "Failed") || !strcmp(phase, "Succeeded"))
		return 1;
	if (!w->seen) {
		w->seen = 1;
		snprintf(w->first, sizeof w->first, "%s", phase);
		return 0;
	}
	return strcmp(w->first, phase) != 0;
}

/* Not Running yet: a watch of its VMI until the phase changes. */
static int wait_running(struct labctx *x, struct session *s, struct session_vm *vm, int wait_ms)
{
	char *coll = kube_path("virtualmachineinstances", x->cfg->namespace_, NULL);
	char *path = xasprintf("%s?watch=true&fieldSelector=metadata.name%%3D%s"
	                       "&timeoutSeconds=%d",
	                       coll, vm->name, (wait_ms + 999) / 1000);
	struct phase_watch w = {{0}, 0, 0, 0};
	double t0 = util_mono_s();
	long code = kube_watch(&x->kube, path, wait_ms + 500L, on_vmi_event, &w);
	double took_ms = (util_mono_s() - t0) * 1000.0;
	free(path);
	free(coll);
	if (code != 200) {
		log_debug("session %s: VMI watch: HTTP %ld %s", s->id, code, x->kube.msg);
		return -1;
	}
	/* a quiet watch holds about wait_ms; one that changed saw 2+ events */
	if (w.error || (!w.events && took_ms < wait_ms / 2.0) || w.events == 1) {
		if (w.error || !w.events)
			log_debug("session %s: VMI watch %s after %.0f ms", s->id,
			          w.error ? "sent an ERROR event" : "ended with no event", took_ms);
		return 1;
	}
	return 0;
}

/* Running: the agent's held GET /ready?wait until the flag (or a failed
 * setup), within wait_ms. The token goes to the recorded address only while
 * it is this session's VMI's: the round's look has just read the VMI
 * (look_ready), and a look that failed left nothing recorded. An agent not
 * listening yet (the guest still boots) is asked again every
 * AGENT_RETRY_MS, its VMI read again first (at most every VMI_RECHECK_S: a
 * VMI that went away may leave its address to another student's guest). */
static int wait_ready(struct labctx *x, struct session *s, struct session_vm *vm, int wait_ms)
{
	if (!vm->ip || !vm->vmi_uid)
		return -1;
	double end = util_mono_s() + wait_ms / 1000.0;
	double checked_at = 0; /* the first failed call: its VMI read again at once */
	for (;;) {
		double t0 = util_mono_s();
		int left = (int)((end - t0) * 1000.0);
		if (left <= 0)
			return 0;
		cJSON *detail = NULL;
		enum agent_ready r =
		    agent_ready_wait(&x->agent, vm->ip, x->cfg->agent_port, vm->token, left,
		                     x->cfg->agent_ready_timeout_ms, &detail);
		const char *st = kj_str(detail, "state");
		int setup_over = st && !strcmp(st, "setup_failed");
		cJSON_Delete(detail);
		if (r == AGENT_READY || setup_over)
			return 0; /* the next round records it, as the status GET does */
		/* an agent that answers at once without holding (an older one) */
		if (r == AGENT_NOT_READY && util_mono_s() - t0 < 0.05)
			return -1;
		if (x->agent.cancel && *x->agent.cancel)
			return -1;
		if (r != AGENT_UNREACHABLE)
			continue;
		vmi_forget(x, s, vm);
		usleep(AGENT_RETRY_MS * 1000);
		if (util_mono_s() - checked_at >= VMI_RECHECK_S) {
			char why[256];
			int checked = 0;
			if (vmi_reach(x, s, vm, &checked, why, sizeof why) < 0) {
				log_debug("session %s: %s: not asked again", s->id, why);
				return -1;
			}
			checked_at = util_mono_s();
		}
	}
}

/* For its first machine not ready yet: its VMI's phase (not Running yet)
 * or its agent's flag, bounded by that machine's deadline. */
static int vm_wait(struct labctx *x, struct session *s, int hold_ms)
{
	struct session_vm *vm = NULL;
	for (size_t i = 0; i < s->nvms && !vm; i++)
		if (s->vms[i].stage != STAGE_READY && !s->vms[i].deleted)
			vm = &s->vms[i];
	if (!vm || s->t_submitted <= 0)
		return -1; /* nothing to wait for, or the submission is in flight */
	double deadline = vm->running_at ? vm->t_running + s->ready_timeout_s
	                                 : s->t_submitted + s->running_timeout_s;
	double left_ms = (deadline - s->t_now) * 1000.0 + 50;
	int wait_ms = left_ms < hold_ms ? (int)(left_ms > 0 ? left_ms : 0) : hold_ms;
	if (wait_ms <= 0)
		return -1; /* overdue: session_advance() decides, the next round */
	return vm->running_at ? wait_ready(x, s, vm, wait_ms) : wait_running(x, s, vm, wait_ms);
}

/* ------------------------------------------------------------ the table */

const struct runtime_ops runtime_vm = {
    .id = RUNTIME_VM,
    .name = "vm",
    .kind = "virtualmachines",
    .noun = "VM",
    .capacity = vm_capacity,
    .capacity_key = "0",
    .warm_pool = 1,
    .has_disk = 1,
    .kvm = 1,
    .inside = INSIDE_AGENT,
    .selector = "",
    .list_whole = 0,
    .is_lab = NULL,
    .ended = NULL,
    .secret_name = vm_secret_name,
    .submit = vm_submit,
    .advance = vm_advance,
    .wait = vm_wait,
    .agent_at = vmi_reach,
    .agent_forget = vmi_forget,
};
