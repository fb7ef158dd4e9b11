/* runtime_pod.c - the "pod" runtime (runtime.h): one lab Pod per session with
 * its files Secret. Its readiness is the Pod's own: phase Running is
 * "running" (running_at, the pod IP), its Ready condition (the exec
 * readiness probe on the flag the container writes when setup exited 0) is
 * "ready". What the kubelet reports names each failure. No agent: grading
 * and the console go through the exec subresource. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"
#include "log.h"
#include "manifest.h"
#include "provision.h"
#include "runtime.h"
#include "session_change.h"

static int pod_capacity(const struct cfg *c)
{
	return c->pod_capacity;
}

static const char *pod_secret_name(const struct lab_names *n)
{
	return n->files;
}

static const cJSON *pod_condition(const cJSON *pod, const char *type)
{
	const cJSON *c;
	cJSON_ArrayForEach(c, kj_get(pod, "status.conditions"))
	{
		const char *t = kj_str(c, "type");
		if (t && strcmp(t, type) == 0)
			return c;
	}
	return NULL;
}

/* The lab container's state ("waiting", "running", "terminated" object) or NULL. */
static const cJSON *pod_state(const cJSON *pod, const char **which)
{
	const cJSON *cs;
	cJSON_ArrayForEach(cs, kj_get(pod, "status.containerStatuses"))
	{
		const char *name = kj_str(cs, "name");
		if (!name || strcmp(name, POD_CONTAINER) != 0)
			continue;
		const char *keys[] = {"terminated", "waiting", "running"};
		for (size_t i = 0; i < 3; i++) {
			const cJSON *st = kj_get(cs, "state");
			const cJSON *v = cJSON_GetObjectItemCaseSensitive(st, keys[i]);
			if (cJSON_IsObject(v)) {
				*which = keys[i];
				return v;
			}
		}
	}
	*which = NULL;
	return NULL;
}

int session_pod_ended(const cJSON *pod, char *out, size_t n)
{
	const char *phase = kj_str(pod, "status.phase");
	const char *which;
	const cJSON *st = pod_state(pod, &which);
	if (!phase || (strcmp(phase, "Failed") != 0 && strcmp(phase, "Succeeded") != 0))
		return 0;
	if (which && strcmp(which, "terminated") == 0) {
		const cJSON *ec = cJSON_GetObjectItemCaseSensitive(st, "exitCode");
		const char *reason = kj_str(st, "reason"), *msg = kj_str(st, "message");
		utf8_snprintf(out, n, "the container ended (%s) with exit code %d%s%s",
		              reason ? reason : "terminated",
		              cJSON_IsNumber(ec) ? ec->valueint : -1, msg && *msg ? ": " : "",
		              msg ? msg : "");
	} else {
		const char *reason = kj_str(pod, "status.reason"),
		           *msg = kj_str(pod, "status.message");
		utf8_snprintf(out, n, "the Pod stopped (phase %s%s%s%s%s)", phase,
		              reason ? ", " : "", reason ? reason : "", msg ? ": " : "",
		              msg ? msg : "");
	}
	return 1;
}

/* ------------------------------------------------------------ making */

/* The files Secret, the Pod, the Secret owned by the Pod. */
static int pod_submit(struct labctx *x, struct lab_plan *p, char *why, size_t whylen)
{
	const struct cfg *c = x->cfg;
	const struct lab_names *n = &p->vms[0].names;
	cJSON *secret = manifest_pod_secret(c, n, p->lesson);
	cJSON *pod = manifest_pod(c, n, p->lesson);
	cJSON *created = NULL, *patch = NULL;
	char *spath = kube_path("secrets", c->namespace_, NULL);
	char *ppath = kube_path("pods", c->namespace_, NULL);
	char *opath = kube_path("secrets", c->namespace_, n->files);
	int rc = -1;
	long code;

	code = kube_create(&x->kube, spath, secret, NULL);
	if (code != 201 && code != 200) {
		snprintf(why, whylen, "creating the lab files Secret: %s", x->kube.msg);
		goto out;
	}
	code = kube_create(&x->kube, ppath, pod, &created);
	const char *uid = kj_str(created, "metadata.uid");
	if ((code != 201 && code != 200) || !uid) {
		snprintf(why, whylen, "creating the Pod: %s",
		         x->kube.msg[0] ? x->kube.msg : "no uid in the answer");
		goto out;
	}
	patch = manifest_pod_owner_patch(n->vm, uid);
	code = kube_merge_patch(&x->kube, opath, patch, NULL);
	if (code != 200) {
		snprintf(why, whylen, "making the Secret owned by the Pod: %s", x->kube.msg);
		goto out;
	}
	rc = 0;
out:
	cJSON_Delete(secret);
	cJSON_Delete(pod);
	cJSON_Delete(created);
	cJSON_Delete(patch);
	free(spath);
	free(ppath);
	free(opath);
	return rc;
}

/* ------------------------------------------------------------ readiness */

/* Setup failing is the container ending before the ready flag: its exit
 * code and the tail of its output (the termination message). */
static int pod_failed(struct labctx *x, struct session *s, const cJSON *pod)
{
	const char *which;
	const cJSON *st = pod_state(pod, &which);
	const cJSON *ec = cJSON_GetObjectItemCaseSensitive(st, "exitCode");
	if (which && strcmp(which, "terminated") == 0 && cJSON_IsNumber(ec) && ec->valueint != 0) {
		const char *msg = kj_str(st, "message");
		session_set_stage(x, s, STAGE_SETTING_UP); /* it ran: what failed was the setup */
		return session_fail(x, s, NULL, "the lab setup failed with exit code %d%s%s",
		                    ec->valueint, msg && *msg ? ": " : "", msg ? msg : "");
	}
	char why[1024];
	if (!session_pod_ended(pod, why, sizeof why))
		snprintf(why, sizeof why, "the Pod stopped");
	return session_fail(x, s, NULL, "%s", why);
}

static int get_pod(struct labctx *x, const char *name, cJSON **pod)
{
	char *path = kube_path("pods", x->cfg->namespace_, name);
	long code = kube_get(&x->kube, path, pod);
	free(path);
	return (int)code;
}

static int look_running(struct labctx *x, struct session *s, struct session_vm *vm, int overdue)
{
	cJSON *pod = NULL;
	int code = get_pod(x, vm->name, &pod);
	const char *phase = code == 200 ? kj_str(pod, "status.phase") : NULL;
	const char *which;
	const cJSON *st = code == 200 ? pod_state(pod, &which) : NULL;
	const char *wreason = st && strcmp(which, "waiting") == 0 ? kj_str(st, "reason") : NULL;
	int rc = 0;

	if (code == 404) {
		rc = session_fail(x, s, NULL, "the Pod %s disappeared from the cluster", vm->name);
	} else if (phase && strcmp(phase, "Running") == 0) {
		const char *ip = kj_str(pod, "status.podIP");
		char *ipc = ip ? xstrdup(ip) : NULL;
		rc = session_mark_running(x, s);
		/* s was reloaded: its machine is vms[0] again */
		if (rc == 0 && ipc && s->nvms)
			session_vm_set_address(x, s, &s->vms[0], ipc, NULL);
		free(ipc);
	} else if (phase && (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0)) {
		rc = pod_failed(x, s, pod);
	} else if (wreason && (strcmp(wreason, "ErrImagePull") == 0 ||
	                       strcmp(wreason, "ImagePullBackOff") == 0 ||
	                       strcmp(wreason, "InvalidImageName") == 0 ||
	                       strcmp(wreason, "ErrImageNeverPull") == 0)) {
		/* the kubelet could not pull the lesson's image: say so now */
		const char *msg = kj_str(st, "message");
		session_set_stage(x, s, STAGE_BOOTING);
		rc = session_fail(x, s, NULL, "the image could not be pulled (%s%s%s)", wreason,
		                  msg && *msg ? ": " : "", msg ? msg : "");
	} else {
		const cJSON *sched = code == 200 ? pod_condition(pod, "PodScheduled") : NULL;
		const char *ss = kj_str(sched, "status");
		int scheduled = ss && strcmp(ss, "True") == 0;
		if (code == 200)
			session_set_stage(x, s, scheduled ? STAGE_BOOTING : STAGE_SCHEDULING);
		if (overdue) {
			if (code == 200 && !scheduled)
				rc = session_fail(
				    x, s, NULL, "the Pod was not scheduled within %d s (%s%s%s)",
				    s->running_timeout_s,
				    kj_str(sched, "reason") ? kj_str(sched, "reason") : "pending",
				    kj_str(sched, "message") ? ": " : "",
				    kj_str(sched, "message") ? kj_str(sched, "message") : "");
			else
				rc = session_fail(
				    x, s, NULL,
				    "the Pod was not running within %d s (container %s)",
				    s->running_timeout_s,
				    wreason ? wreason
				            : (code == 200 ? "not started" : x->kube.msg));
		}
	}
	cJSON_Delete(pod);
	return rc;
}

static int look_ready(struct labctx *x, struct session *s, struct session_vm *vm, int overdue)
{
	cJSON *pod = NULL;
	int code = get_pod(x, vm->name, &pod);
	const char *phase = code == 200 ? kj_str(pod, "status.phase") : NULL;
	const char *ready = kj_str(pod_condition(pod, "Ready"), "status");
	int rc = 0;

	if (code == 404) {
		rc = session_fail(x, s, NULL, "the Pod %s disappeared from the cluster", vm->name);
	} else if (phase && strcmp(phase, "Running") == 0 && ready && strcmp(ready, "True") == 0) {
		rc = session_mark_ready(x, s);
	} else if (phase && (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0)) {
		rc = pod_failed(x, s, pod);
	} else if (overdue) {
		rc = session_fail(
		    x, s, NULL, "the lab was not ready %d s after the Pod started (Ready %s)",
		    s->ready_timeout_s, ready ? ready : (code == 200 ? "unknown" : x->kube.msg));
	}
	cJSON_Delete(pod);
	return rc;
}

/* One Pod: its phase, then its Ready condition (the kubelet's probe). */
static int pod_advance(struct labctx *x, struct session *s, const struct session_due *d)
{
	if (d->what == DUE_RUNNING) {
		if (look_running(x, s, &s->vms[0], d->overdue) < 0)
			return -1;
		struct session_due now = session_due(s, s->t_now); /* Running now: Ready at once */
		if (now.what != DUE_READY)
			return 0;
		return look_ready(x, s, &s->vms[0], now.overdue);
	}
	return look_ready(x, s, &s->vms[0], d->overdue);
}

/* ------------------------------------------------------------ the table */

const struct runtime_ops runtime_pod = {
    .id = RUNTIME_POD,
    .name = "pod",
    .kind = "pods",
    .noun = "Pod",
    .capacity = pod_capacity,
    .capacity_key = "1",
    .warm_pool = 0,
    .has_disk = 0,
    .kvm = 0,
    .inside = INSIDE_EXEC,
    /* a VM's virt-launcher pod carries the lab labels too (through the VMI),
     * and CDI's importer pod (through the DataVolume and its PVC): lab Pods
     * are those manifest_is_lab_pod() recognises */
    .selector = ",!kubevirt.io",
    .list_whole = 1,
    .is_lab = manifest_is_lab_pod,
    .ended = session_pod_ended,
    .secret_name = pod_secret_name,
    .submit = pod_submit,
    .advance = pod_advance,
    .wait = NULL, /* its Ready condition: the driver looks every round */
    .agent_at = NULL,
    .agent_forget = NULL,
};
