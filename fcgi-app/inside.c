/* inside.c - the means of reaching inside a lab machine (see inside.h). */
#include "inside.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"
#include "log.h"
#include "manifest.h"
#include "podexec.h"
#include "runtime.h"

void inside_unreachable(struct inside_fail *e, const struct session *s, size_t step,
                        const char *mname, const char *why)
{
	log_warn("session %s: grading step %zu%s%s: %s", s->id, step + 1, mname ? " on " : "",
	         mname ? mname : "", why);
	e->code = E_AGENT_UNREACHABLE;
	if (mname)
		snprintf(e->msg, sizeof e->msg,
		         "the grading agent in your machine %s did not answer (%s)", mname, why);
	else
		snprintf(e->msg, sizeof e->msg, "the grading agent in your VM did not answer (%s)",
		         why);
}

/* ------------------------------------------------------------ the agent */

static int agent_step(struct labctx *x, struct session *s, struct session_vm *vm, int *checked,
                      const struct grader_step *gs, size_t step, const char *mname, int timeout_s,
                      long left_ms, cJSON **res, struct inside_fail *e)
{
	const struct runtime_ops *rt = runtime_of(s->runtime);
	char msg[512];
	const char *why = NULL;
	if (rt->agent_at(x, s, vm, checked, msg, sizeof msg) < 0) {
		why = msg;
	} else if (agent_run(&x->agent, vm->ip, x->cfg->agent_port, vm->token, gs->command,
	                     timeout_s, left_ms, res) < 0) {
		why = x->agent.msg;
		/* after an agent failure the address is read again first */
		rt->agent_forget(x, s, vm);
		*checked = 0;
	}
	if (!why)
		return 0;
	inside_unreachable(e, s, step, mname, why);
	return -1;
}

static int agent_tty(struct labctx *x, struct session *s, struct session_vm *vm, int *checked,
                     int cols, int rows, char *msg, size_t msglen)
{
	const struct runtime_ops *rt = runtime_of(s->runtime);
	if (rt->agent_at(x, s, vm, checked, msg, msglen) < 0)
		return -1;
	int rc = agent_tty_size(&x->agent, vm->ip, x->cfg->agent_port, vm->token, cols, rows,
	                        x->cfg->agent_ready_timeout_ms);
	if (rc < 0) {
		snprintf(msg, msglen, "%s", x->agent.msg);
		/* the address is read again before the next request to it */
		rt->agent_forget(x, s, vm);
		*checked = 0;
		return -1;
	}
	return rc == 409 ? 1 : 0;
}

/* ------------------------------------------------------------ exec */

/* A lab Pod has no agent: each step runs by exec. */
static int exec_step(struct labctx *x, struct session *s, struct session_vm *vm, int *checked,
                     const struct grader_step *gs, size_t step, const char *mname, int timeout_s,
                     long left_ms, cJSON **res, struct inside_fail *e)
{
	struct podexec_result pr;
	char msg[300];
	double t0 = util_mono_s();
	char *bearer = kube_bearer(&x->kube);
	(void)checked, (void)step, (void)mname, (void)left_ms;

	if (!bearer) {
		e->code = E_CLUSTER_UNAVAILABLE;
		snprintf(e->msg, sizeof e->msg, "the cluster cannot be reached right now");
		return -1;
	}
	int rc = podexec_run(x->cfg, bearer, vm->name, POD_CONTAINER, gs->command, timeout_s, &pr,
	                     msg, sizeof msg);
	util_free_secret(bearer);
	if (rc < 0) {
		podexec_result_free(&pr);
		log_warn("session %s: grading step \"%s\": %s", s->id, gs->name, msg);
		e->code = E_AGENT_UNREACHABLE;
		snprintf(e->msg, sizeof e->msg, "your lab could not be reached for grading (%s)",
		         msg);
		return -1;
	}
	x->kube.ms += (util_mono_s() - t0) * 1000.0; /* Server-Timing: kube */
	*res = jx_obj();
	if (pr.exit_code >= 0)
		jx_add_num(*res, "exit_code", pr.exit_code);
	else
		jx_add_null(*res, "exit_code");
	/* raw bytes from the Pod (NULs too): valid UTF-8 before they become strings */
	char *o = utf8_clean_dup(pr.out, pr.nout, 3 * PODEXEC_OUTPUT_MAX);
	char *er = pr.status_message[0] && !pr.nerr
	               ? utf8_clean_dup(pr.status_message, strlen(pr.status_message), 1023)
	               : utf8_clean_dup(pr.err, pr.nerr, 3 * PODEXEC_OUTPUT_MAX);
	jx_add_str(*res, "stdout", o);
	jx_add_str(*res, "stderr", er);
	free(o);
	free(er);
	if (pr.timed_out)
		jx_add_bool(*res, "timed_out", 1);
	podexec_result_free(&pr);
	return 0;
}

/* ------------------------------------------------------------ the tables */

static const struct inside_ops inside_agent = {
    .run = agent_step,
    .tty_size = agent_tty,
    .tty_elsewhere = NULL,
};

static const struct inside_ops inside_exec = {
    .run = exec_step,
    /* labvm-console passes the size to its exec tty */
    .tty_size = NULL,
    .tty_elsewhere = "a Pod's terminal takes its size on the console WebSocket "
                     "({\"type\":\"resize\",\"cols\":C,\"rows\":R})",
};

const struct inside_ops *inside_of(const struct session *s)
{
	static const struct inside_ops *const means[] = {
	    [INSIDE_AGENT] = &inside_agent,
	    [INSIDE_EXEC] = &inside_exec,
	};
	return means[runtime_of(s->runtime)->inside];
}
