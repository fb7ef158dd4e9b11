/* canary_console.c - check 6's console: the canary's terminal through
 * labvm-console, as the page opens it (see canary.h).
 *
 * The ticket is the one labvm.fcgi's POST .../console-ticket makes
 * (ticket_make with ticket_key_file, ticket_ttl_s, for the session's user
 * and machine) and the URL its answer's (<console_path><session id>?ticket=),
 * on the bridge's own address (--console, default ws://<console_listen>).
 * The doctor speaks to the bridge as the front end does: with
 * console_user_from = forwarded, a Forwarded remote_user naming the
 * session's user. The bridge then does all of its own checks (the key, the
 * nonce, the session row and its state, the VM) and opens the VMI's serial
 * console with the backend's token; the shell in the guest answers. The
 * WebSocket client is labvm-bench's (benchmarks/ws.c, libwebsockets). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canary.h"
#include "ticket.h"
#include "util.h"
#include "ws.h"

/* benchmarks/ws.c's waits end early when this is set (labvm-bench's ^C) */
volatile sig_atomic_t bench_stop;

#define CONSOLE_OPEN_S 15
#define CONSOLE_SUM_S  20

static const char console_fix[] =
    "labvm-console must run with this labvm.conf (its ticket_key_file, database and "
    "environment) and listen at --console (default ws://<console_listen>); its log says why";

/* The fix for the bridge's own reason for closing (console-bridge's close
 * reasons: ticket_status_str(), "session not found", ...). */
static const char *closed_fix(const char *why)
{
	if (strstr(why, "ticket signature") || strstr(why, "malformed ticket"))
		return "labvm-doctor's ticket_key_file is not labvm-console's: labvm.fcgi, "
		       "labvm-console and the doctor must read the same key (one labvm.conf)";
	if (strstr(why, "ticket expired"))
		return "the clocks of this host and labvm-console's disagree by more than "
		       "ticket_ttl_s: run NTP on both";
	if (strstr(why, "session not found"))
		return "labvm-console must use this labvm.conf's database and environment, and be "
		       "a version that serves the doctor's environment (<environment>-doctor)";
	if (strstr(why, "front end did not say") || strstr(why, "not for this user"))
		return "with console_user_from = forwarded, --console must be labvm-console's own "
		       "address (console_listen), not the front end's";
	return console_fix;
}

int canary_console(struct doc *d, const struct cfg *cc, const char *sid, const char *user,
                   const char *vm, int n)
{
	struct wsx x;
	struct wsc c;
	char base[300], needle[64], line[96];
	int rc = -1;

	if (d->console_url)
		snprintf(base, sizeof base, "%s", d->console_url);
	else
		snprintf(base, sizeof base, "ws://%s", cc->console_listen);
	size_t bl = strlen(base);
	if (bl && base[bl - 1] == '/')
		base[bl - 1] = '\0';
	char *t = ticket_make(cc->ticket_key, cc->ticket_key_len, sid, user, vm,
	                      util_epoch_s() + cc->ticket_ttl_s);
	if (!t) {
		doc_line(d, DOC_FAIL, "report this as a bug of labvm-doctor",
		         "canary %d's console: no ticket could be signed", n);
		return -1;
	}
	char *url = xasprintf("%s%s%s?ticket=%s", base, cc->console_path, sid, t);
	util_free_secret(t);
	if (wsx_init(&x, NULL) < 0) {
		util_free_secret(url);
		doc_line(d, DOC_FAIL, "report this as a bug of labvm-doctor",
		         "canary %d's console: libwebsockets could not start", n);
		return -1;
	}
	x.forwarded_user = strcmp(cc->console_user_from, "forwarded") == 0 ? user : NULL;
	if (wsc_open(&x, &c, url, BRIDGE_PROTO, NULL, CONSOLE_OPEN_S) < 0) {
		doc_line(d, DOC_FAIL, console_fix,
		         "canary %d's console: labvm-console at %s%s could not be opened: %s", n,
		         base, cc->console_path, c.why);
		goto out;
	}
	/* the shell computes it: the typed line (echoed) has the sum's formula,
	 * only the shell's output has its value */
	unsigned a = (unsigned)(sid[0] & 0x0f) + 11, b = (unsigned)(sid[1] & 0x0f) + 23;
	snprintf(needle, sizeof needle, "labvm-canary-%u-end", a + b);
	snprintf(line, sizeof line, "\recho labvm-canary-$((%u+%u))-end\r", a, b);
	if (wsc_send(&x, &c, line, strlen(line)) < 0 ||
	    wsc_until(&x, &c, needle, CONSOLE_SUM_S) < 0) {
		if (c.state == WS_OPEN)
			doc_line(
			    d, DOC_FAIL,
			    "the VM's serial console must run a shell with autologin (a getty on "
			    "ttyS0): the page's terminal shows the same",
			    "canary %d's console opened, but its shell did not answer within %d s",
			    n, CONSOLE_SUM_S);
		else {
			const char *why = c.why[0]         ? c.why
			                  : c.last_text[0] ? c.last_text
			                                   : "without a reason";
			doc_line(d, DOC_FAIL, closed_fix(why),
			         "canary %d's console: labvm-console closed it: %s", n, why);
		}
	} else {
		rc = 0;
	}
out:
	wsc_close(&x, &c);
	wsx_free(&x);
	util_free_secret(url);
	return rc;
}
