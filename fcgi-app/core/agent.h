/* agent.h - labvm's side of the in-guest agent (fcgi-app/guest/agent.py):
 * GET /ready, POST /run and POST /tty-size over HTTP (httpc.h) with the per-VM bearer token. */
#ifndef LABVM_CORE_AGENT_H
#define LABVM_CORE_AGENT_H

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "util.h"

struct agent {
	CURL *h;
	struct buf body;
	char msg[512];
	double ms;
	/* every call on a new connection: a kept one may lead to a guest that
	 * is gone, whose address a new guest now has (no RST: the call would
	 * wait for its whole timeout) */
	int fresh;
	const volatile int *cancel; /* set: calls end at once (httpc_req.cancel) */
	/* the last held /ready?wait that answered 200 (agent_ready_wait): a
	 * plain agent_ready() of the same guest (address and token) right
	 * after it is answered from it, without asking again (the flag never
	 * goes away once written) */
	char seen_ip[64];
	char seen_token[128];
	double seen_at;
};

int agent_init(struct agent *a);
void agent_cleanup(struct agent *a);

enum agent_ready {
	AGENT_UNREACHABLE = -1,
	AGENT_NOT_READY =
	    0, /* *detail: the agent's 503 body ({"state", "exit_code", "log_tail"}) */
	AGENT_READY = 1,
};

/* One bounded GET /ready. detail (may be NULL) gets the parsed body. */
enum agent_ready agent_ready(struct agent *a, const char *ip, int port, const char *token,
                             int timeout_ms, cJSON **detail);

/* GET /ready?wait=S: the agent holds the answer up to wait_ms until the flag
 * appears (or setup ends); the call costs at most wait_ms + timeout_ms. */
enum agent_ready agent_ready_wait(struct agent *a, const char *ip, int port, const char *token,
                                  int wait_ms, int timeout_ms, cJSON **detail);

/* POST /run {"cmd", "timeout_s"}, waiting at most timeout_s + 5 s and at most
 * max_ms for the answer: 0 and *result = {"exit_code","stdout","stderr",...};
 * -1 when the agent could not be reached or answered badly (a->msg). */
int agent_run(struct agent *a, const char *ip, int port, const char *token, const char *cmd,
              int timeout_s, long max_ms, cJSON **result);

/* POST /tty-size {"cols", "rows"}: the serial console's window size in the
 * guest (a serial line has no size of its own). 200; 409 when the guest's
 * console tty is not there (yet); -1 when the agent failed (a->msg). */
int agent_tty_size(struct agent *a, const char *ip, int port, const char *token, int cols, int rows,
                   int timeout_ms);

#endif
