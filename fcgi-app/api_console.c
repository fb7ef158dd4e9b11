/* api_console.c - POST /api/sessions/{id}/console-ticket (a signed ticket
 * for labvm-console's WebSocket) and POST /api/sessions/{id}/tty-size (the
 * browser terminal's size, for a serial console: inside.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "inside.h"
#include "jsonx.h"
#include "log.h"
#include "session.h"
#include "session_change.h"
#include "ticket.h"

/* The machine a console request is about: {"machine": NAME} in the body,
 * without it the first. NULL when answered (400, 404). */
static const struct session_vm *pick_machine(struct req *r, const struct session *s)
{
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(r->json, "machine");
	if (m && !cJSON_IsNull(m) && !cJSON_IsString(m)) {
		resp_error(r, E_BAD_REQUEST, "\"machine\" must be a machine's name");
		return NULL;
	}
	const char *mname = cJSON_IsString(m) ? m->valuestring : NULL;
	const struct session_vm *vm = session_vm_find(s, mname);
	if (!vm) {
		resp_error(r, E_NOT_FOUND, "this session has no machine \"%.64s\"", mname);
		return NULL;
	}
	return vm;
}

enum hres api_console_ticket(struct req *r)
{
	struct labctx *x = r->x;
	const struct cfg *c = x->cfg;
	const struct session *s = r->sess; /* ready, with a VM (NEED_READY) */
	const struct session_vm *vm = pick_machine(r, s);
	if (!vm)
		return H_DONE;
	/* a console ticket is activity (issue #28) */
	if (session_touch(x, s->id) < 0)
		return api_db_error(r);
	char *t = ticket_make(c->ticket_key, c->ticket_key_len, s->id, s->user, vm->name,
	                      util_epoch_s() + c->ticket_ttl_s);
	if (!t) {
		resp_error(r, E_INTERNAL, "could not sign a console ticket");
		return H_DONE;
	}
	char *url = xasprintf("%s%s%s?ticket=%s", c->base_path, c->console_path, s->id, t);
	cJSON *o = jx_obj();
	jx_add_str(o, "ticket", t);
	jx_add_str(o, "url", url);
	if (vm->machine)
		jx_add_str(o, "machine", vm->machine);
	jx_add_num(o, "expires_in", c->ticket_ttl_s);
	util_free_secret(url);
	util_free_secret(t);
	resp_json(r, 200, o);
	return H_DONE;
}

/* The browser terminal's size for a VM's serial console: the guest agent sets
 * it on the guest's console tty (a serial line has no size of its own; the
 * kernel then signals the program in front). A Pod's exec stream takes its
 * size on the console WebSocket instead.
 *
 * One agent request in flight per session (LEASE_TTY), like grades and
 * probes: every request first records its size for its machine (tty_seq
 * numbers them, sql/010); the one that takes the lease sends each machine's
 * newest size (the VMI read again first: the token goes only to this
 * session's VMI), and looks again after it lets go, so a size recorded
 * while it was sending is sent too. A request that finds the lease taken
 * answers 202 {"cols","rows","pending":true} at once: the holder sends its
 * size, or a newer one. A frozen agent costs its student one worker, for as
 * long as that student keeps asking, and the class nothing. */
struct tty_pending {
	char vm_name[64];
	int cols, rows;
	char seq[24];
};

/* The first machine of s with a size not sent yet. 1 found, 0 none, -1 db. */
static int tty_next(struct labctx *x, const char *sid, struct tty_pending *p)
{
	const char *q[1] = {sid};
	PGresult *res = db_exec(&x->db,
	                        "SELECT vm_name, tty_cols, tty_rows, tty_seq FROM session_vms "
	                        "WHERE session_id = $1::uuid AND tty_seq > tty_sent AND "
	                        "tty_cols IS NOT NULL ORDER BY vm_name LIMIT 1",
	                        1, q);
	if (!res)
		return -1;
	int found = PQntuples(res) == 1;
	if (found) {
		snprintf(p->vm_name, sizeof p->vm_name, "%s", PQgetvalue(res, 0, 0));
		p->cols = atoi(PQgetvalue(res, 0, 1));
		p->rows = atoi(PQgetvalue(res, 0, 2));
		snprintf(p->seq, sizeof p->seq, "%s", PQgetvalue(res, 0, 3));
	}
	PQclear(res);
	return found;
}

/* Send one machine's newest size (the lease held). 0 set, 1 no console yet,
 * -1 not reached (msg). */
static int tty_send(struct labctx *x, struct session *s, struct session_vm *vm, int *checked,
                    const struct tty_pending *p, char *msg, size_t msglen)
{
	int rc =
	    inside_of(s)->tty_size(x, s, vm, &checked[vm - s->vms], p->cols, p->rows, msg, msglen);
	/* tried: a newer size (a higher tty_seq) is sent next, this one never again */
	const char *q[3] = {s->id, p->vm_name, p->seq};
	db_cmd(&x->db,
	       "UPDATE session_vms SET tty_sent = GREATEST(tty_sent, $3::bigint) "
	       "WHERE session_id = $1::uuid AND vm_name = $2",
	       3, q);
	return rc;
}

enum hres api_tty_size(struct req *r)
{
	struct labctx *x = r->x;
	struct session *s = r->sess; /* ready, with the VM's address (NEED_AGENT) */
	const cJSON *cols = cJSON_GetObjectItemCaseSensitive(r->json, "cols");
	const cJSON *rows = cJSON_GetObjectItemCaseSensitive(r->json, "rows");
	const struct inside_ops *g = inside_of(s);
	if (!g->tty_size) {
		resp_error(r, E_BAD_REQUEST, "%s", g->tty_elsewhere);
		return H_DONE;
	}
	if (!cJSON_IsNumber(cols) || !cJSON_IsNumber(rows) || cols->valuedouble != cols->valueint ||
	    rows->valuedouble != rows->valueint || cols->valueint < 1 || cols->valueint > 1000 ||
	    rows->valueint < 1 || rows->valueint > 1000) {
		resp_error(r, E_BAD_REQUEST, "cols and rows must be integers in 1..1000");
		return H_DONE;
	}
	const struct session_vm *mine = pick_machine(r, s);
	if (!mine)
		return H_DONE;
	if (!mine->ip) {
		resp_error(r, E_AGENT_UNREACHABLE, "the lab machine has no address yet");
		return H_DONE;
	}
	char c[16], rw[16];
	snprintf(c, sizeof c, "%d", cols->valueint);
	snprintf(rw, sizeof rw, "%d", rows->valueint);
	const char *q[4] = {s->id, mine->name, c, rw};
	if (db_cmd(&x->db,
	           "UPDATE session_vms SET tty_cols = $3::int, tty_rows = $4::int, "
	           "tty_seq = tty_seq + 1 WHERE session_id = $1::uuid AND vm_name = $2",
	           4, q) < 0)
		return api_db_error(r);

	/* one iteration: a VMI read, one agent call and a few statements */
	long lease_ms = (long)x->cfg->kube_timeout_ms + x->cfg->agent_ready_timeout_ms + 5000;
	int *checked = xcalloc(s->nvms + 1, sizeof *checked);
	int held = 0;         /* this request took the lease at least once */
	int sent = 0, rc = 0; /* this request sent its machine a size: the outcome */
	struct tty_pending got = {{0}, 0, 0, {0}}, last = {{0}, 0, 0, {0}};
	char msg[512] = "";
	for (;;) {
		int t = session_lease_take(x, s->id, LEASE_TTY, lease_ms);
		if (t <= 0) {
			if (t < 0 && !held) {
				free(checked);
				return api_db_error(r);
			}
			break; /* another request holds it and sends what is left */
		}
		if (!agent_slot_take(x, s->user)) {
			session_lease_release(x, s->id, LEASE_TTY);
			if (!held) {
				free(checked);
				return api_agent_busy(r);
			}
			break; /* what is left goes with the next request */
		}
		held = 1;
		struct tty_pending p;
		int n;
		while ((n = tty_next(x, s->id, &p)) > 0) {
			if (strcmp(p.vm_name, last.vm_name) == 0 && strcmp(p.seq, last.seq) == 0) {
				n = -1; /* its tty_sent was not recorded (the database): no loop */
				break;
			}
			last = p;
			struct session_vm *vm = NULL;
			for (size_t i = 0; i < s->nvms && !vm; i++)
				if (strcmp(s->vms[i].name, p.vm_name) == 0)
					vm = &s->vms[i];
			if (vm) {
				char why[512];
				int one = tty_send(x, s, vm, checked, &p, why, sizeof why);
				if (one < 0)
					log_warn("session %s: tty-size for %s: %s", s->id, vm->name,
					         why);
				if (vm == mine) {
					sent = 1;
					rc = one;
					got = p;
					snprintf(msg, sizeof msg, "%s", one < 0 ? why : "");
				}
			} else {
				/* a machine this session no longer has: never sent */
				const char *d[3] = {s->id, p.vm_name, p.seq};
				db_cmd(&x->db,
				       "UPDATE session_vms SET tty_sent = GREATEST(tty_sent, "
				       "$3::bigint) "
				       "WHERE session_id = $1::uuid AND vm_name = $2",
				       3, d);
			}
			/* still the holder: the lease runs from now (no one else slips in
			 * between two sends) */
			char ms[24];
			snprintf(ms, sizeof ms, "%ld", lease_ms);
			const char *d[2] = {s->id, ms};
			db_cmd(&x->db,
			       "UPDATE sessions SET tty_until = clock_timestamp() + "
			       "make_interval(secs => $2::float8 / 1000) WHERE id = $1::uuid",
			       2, d);
		}
		agent_slot_release(s->user);
		session_lease_release(x, s->id, LEASE_TTY);
		if (n < 0)
			break;
		/* nothing was left: look once more now that the lease is free (a size
		 * recorded just before the release found the lease taken) */
		if (tty_next(x, s->id, &p) <= 0)
			break;
	}
	free(checked);
	if (!sent) {
		/* recorded: the request in flight sends it (or a newer size) */
		cJSON *o = jx_obj();
		jx_add_num(o, "cols", cols->valueint);
		jx_add_num(o, "rows", rows->valueint);
		jx_add_bool(o, "pending", 1);
		resp_json(r, 202, o);
		return H_DONE;
	}
	if (rc < 0) {
		resp_error(r, E_AGENT_UNREACHABLE, "the lab machine's agent did not answer (%s)",
		           msg);
		return H_DONE;
	}
	if (rc == 1) {
		resp_error(r, E_NOT_READY, "the lab machine's serial console is not open yet");
		return H_DONE;
	}
	/* the size the console has now: this request's, or one asked for after it */
	cJSON *o = jx_obj();
	jx_add_num(o, "cols", got.cols);
	jx_add_num(o, "rows", got.rows);
	resp_json(r, 200, o);
	return H_DONE;
}
