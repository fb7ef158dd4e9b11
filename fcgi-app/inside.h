/* inside.h - reaching inside a lab machine for labvm.fcgi: one grader step,
 * and the terminal's size, by the means its runtime names
 * (runtime_ops.guest):
 *
 *   INSIDE_AGENT   labvm's agent in the guest (core/agent.h), with the
 *                 machine's token, at the address runtime_ops.agent_at() read
 *                 from the session's own lab object in this operation
 *   INSIDE_EXEC    the cluster's exec subresource into the lab container
 *                 (podexec.h): no token, no address
 *
 * Contract: an operation (a grade, a tty-size request) keeps one `checked`
 * flag per machine, zero at its start; a means reads and sets it (the
 * agent: agent_at() before the machine's first call of the operation, and
 * again after a failed call). A means logs its own failures and fills the
 * student's answer. A new means: a table in guest.c, and its value in
 * runtime.h's enum inside_means. */
#ifndef LABVM_FCGI_INSIDE_H
#define LABVM_FCGI_INSIDE_H

#include "http.h"
#include "session.h"

/* Why a step could not run: the answer's error and message. */
struct inside_fail {
	enum api_err code;
	char msg[800];
};

struct inside_ops {
	/* Run grader step gs (number step, on machine mname or NULL) on vm,
	 * within timeout_s and left_ms: 0 and *res in the agent's answer shape
	 * ({"exit_code", "stdout", "stderr", "timed_out"}), or -1 (*e). */
	int (*run)(struct labctx *x, struct session *s, struct session_vm *vm, int *checked,
	           const struct grader_step *gs, size_t step, const char *mname, int timeout_s,
	           long left_ms, cJSON **res, struct inside_fail *e);
	/* The terminal's size: 0 set, 1 no console yet, -1 not reached (msg).
	 * NULL: not by this route; tty_elsewhere says where instead. */
	int (*tty_size)(struct labctx *x, struct session *s, struct session_vm *vm, int *checked,
	                int cols, int rows, char *msg, size_t msglen);
	const char *tty_elsewhere;
};

const struct inside_ops *inside_of(const struct session *s);

/* The answer (and log line) of a step whose machine could not be reached. */
void inside_unreachable(struct inside_fail *e, const struct session *s, size_t step,
                        const char *mname, const char *why);

#endif
