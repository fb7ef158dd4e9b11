/* queue.h - the fair waiting line (issue #20): rows of session_queue in
 * PostgreSQL, the shared truth of every labvm.fcgi process and host.
 *
 * A student refused only for capacity may join (POST /api/sessions with
 * "queue": true -> 202, a "queued" session). The place is the user's open
 * session; its id becomes the session's id when admitted. Whoever sees free
 * seats (a queued student's poll, an End, a refused start) runs queue_pump(),
 * which admits the head through the normal start (api_start_queued: the same
 * locks, the same capacity count). Strict FIFO per pool: a fresh start is
 * refused while the line holds the free seats (queue_seats_ahead). */
#ifndef LABVM_FCGI_QUEUE_H
#define LABVM_FCGI_QUEUE_H

#include "api.h"

struct lesson;

struct cfg;

/* The capacity pool of a lesson: "vm" or "pod", and the pool's seats
 * (vm_capacity, pod_capacity). */
const char *queue_pool(const struct lesson *l);
int queue_capacity(const struct cfg *c, const char *pool);

/* This user's waiting place, as the API shows it (*out), inside the caller's
 * transaction. 1 found, 0 none, -1 database error. */
int queue_user_place(struct labctx *x, const char *user, cJSON **out);

/* Seats the line holds ahead of place qid (NULL: the whole line) in pool.
 * -1 on a database error. */
long queue_seats_ahead(struct labctx *x, const char *pool, const char *qid);

/* Take place qid out of the line for its admission (rolled back with the
 * caller's transaction). 1 taken, 0 not waiting any more, -1 error. */
int queue_claim(struct labctx *x, const char *qid);

/* Join: insert the place inside the caller's transaction (the user lock is
 * held). qid gets its id. 0 ok, -1 database error. */
int queue_join(struct labctx *x, const char *user, const struct lesson *l, long seats,
               char qid[37]);

/* The place qid as the API shows it (position, estimate); NULL if none. */
cJSON *queue_place_json(struct labctx *x, const char *qid);

/* Admit heads of the line while seats are free (a few at most). */
void queue_pump(struct labctx *x);

/* The router's hook for a session route that found no session: answer for a
 * place in the line (GET: its position, and the pump; DELETE: leave; other
 * routes: 409 not_ready). 1 answered (*h), 0 not a place of this user. */
int queue_route(struct req *r, handler_fn fn, int current, enum hres *h);

/* The normal start, for the head of the line (api_sessions.c).
 * 1 admitted, 0 not now, 2 the place cannot be admitted ever (dropped), -1 error. */
int api_start_queued(struct labctx *x, const char *qid, const char *user, const char *lesson);

#endif
