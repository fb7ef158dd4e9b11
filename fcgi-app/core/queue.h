/* queue.h - the fair waiting line (issue #20), its data only: rows of
 * session_queue in PostgreSQL, the shared truth of every labvm.fcgi process
 * and host. A leaf of the admission: it admits nobody itself.
 *
 * A student refused only for capacity may join (POST /api/sessions with
 * "queue": true -> 202, a "queued" session; fcgi-app/api_queue.c). The place
 * is the user's open session; its id becomes the session's id when
 * admitted. Whoever sees free seats (a queued student's poll, an End, a
 * refused start) runs the pump (fcgi-app/pump.c), which admits the head
 * through the normal start (start_queued: the same locks, the same
 * admission_decide). Strict FIFO per capacity pool (runtime_ops.name): a
 * fresh start is refused while the line holds the free seats
 * (queue_seats_ahead), and the warm pool does not grow into them.
 *
 * A place's states (session_queue.state, sql/008):
 *
 *   waiting --queue_claim--> admitted    (its session exists now)
 *   waiting --queue_leave--> left        (the student's DELETE)
 *   waiting --queue_lapse_stale--> lapsed (no poll for queue_lapse_s)
 *   waiting --queue_drop--> failed       (it can never be admitted)
 *
 * Each is a conditional UPDATE on waiting: the first mover wins. */
#ifndef LABVM_CORE_QUEUE_H
#define LABVM_CORE_QUEUE_H

#include <cjson/cJSON.h>

#include "lab.h"

enum queue_place_state { PLACE_WAITING, PLACE_ADMITTED, PLACE_LEFT, PLACE_LAPSED, PLACE_FAILED };

const char *queue_place_state_str(enum queue_place_state st);
/* The enum of a database value; -1 when it is not one. */
int queue_place_state_parse(const char *v);

/* This user's waiting place, as the API shows it (*out), inside the caller's
 * transaction. 1 found, 0 none, -1 database error. */
int queue_user_place(struct labctx *x, const char *user, cJSON **out);

/* The user's place (malloc'd id): by id (any state), or with id NULL the
 * waiting one. NULL when none; *err set on database trouble. */
char *queue_find_place(struct labctx *x, const char *user, const char *id, int *err);

/* Seats the line holds ahead of place qid (NULL: the whole line) in the
 * capacity pool. -1 on a database error. */
long queue_seats_ahead(struct labctx *x, const char *pool, const char *qid);

/* The head of a pool's line, and the seats this database sees held in the
 * pool (its sessions' machines, starting or ready): the pump's look. */
struct queue_head {
	char id[37];
	char *user, *lesson; /* malloc'd (queue_head_free) */
	long seats, busy;
};
/* 1 found, 0 the line is empty, -1 database trouble. */
int queue_head(struct labctx *x, const char *pool, struct queue_head *h);
void queue_head_free(struct queue_head *h);

/* Join: insert the place inside the caller's transaction (the user lock is
 * held). qid gets its id. 0 ok, -1 database error. */
int queue_join(struct labctx *x, const char *user, const struct lesson *l, long seats,
               char qid[37]);
/* What the student was told on joining (the place's JSON: its estimate and
 * bound), kept to measure the estimate's error. */
void queue_record_estimate(struct labctx *x, const char *qid, const cJSON *place);

/* The moves out of waiting (see above). 1 moved, 0 not waiting any more, -1
 * error. queue_claim runs inside the admission's transaction (rolled back
 * with it when the admission is refused). */
int queue_claim(struct labctx *x, const char *qid);
int queue_leave(struct labctx *x, const char *qid);
int queue_drop(struct labctx *x, const char *qid, const char *error);
/* Places not seen for queue_lapse_s lapse (every pump, every poll, the
 * reaper). 0 / -1. */
int queue_lapse_stale(struct labctx *x);
/* A poll: the waiting place is alive. 0 / -1. */
int queue_seen(struct labctx *x, const char *qid);

/* The estimate's step (pure; tests/unit/test_queue_estimate.c): the time the
 * k-th seat frees (k >= 1), when each of n seats frees at t[i] and a freed
 * seat goes to the next place, which holds it for `next`; 0 for k < 1.
 * Destroys t. */
long long queue_kth_free(long long *t, size_t n, long k, long long next);

/* The place qid as the API shows it (position, estimate); NULL if none. */
cJSON *queue_place_json(struct labctx *x, const char *qid);

#endif
