/* podexec.h - run one command in a lab Pod through the exec subresource,
 * synchronously, for grading: a WebSocket (libwebsockets' client: Debian's
 * libcurl has no WebSocket support) with subprotocol v5.channel.k8s.io or
 * v4.channel.k8s.io, stdout and stderr from channels 1 and 2, the exit code
 * from the error channel's Status (Success, or NonZeroExitCode with the code
 * in details.causes). Each call has its own lws context: no state is shared
 * between FastCGI worker threads. */
#ifndef LABVM_FCGI_PODEXEC_H
#define LABVM_FCGI_PODEXEC_H

#include <stddef.h>

#include "config.h"

#define PODEXEC_OUTPUT_MAX (64 * 1024) /* per stream; the rest is dropped */

struct podexec_result {
	int exit_code; /* -1 when unknown (timed out, or no Status) */
	int timed_out;
	char *out, *err; /* NUL-terminated, malloc'd (also when empty) */
	size_t nout, nerr;
	char status_message[256]; /* a Failure Status other than NonZeroExitCode */
};

/* Run `/bin/sh -c command` in container `container` of Pod `pod` under
 * timeout_s: past it, hang up (r->timed_out); in the Pod a watchdog kills the
 * command and everything it started a second later (see STEP_WRAPPER). 0: it
 * ran (see r), -1: no exec stream (msg says why, fit for logs and answers;
 * nothing secret). bearer is "Bearer <token>". */
int podexec_run(const struct cfg *c, const char *bearer, const char *pod, const char *container,
                const char *command, int timeout_s, struct podexec_result *r, char *msg,
                size_t msglen);
void podexec_result_free(struct podexec_result *r);

#endif
