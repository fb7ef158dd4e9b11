/* admission.h - who may start a lab now: the whole admission rule as one
 * pure decision over facts the caller gathers (after ttyd's one
 * FILTER_PROTOCOL_CONNECTION case and pgbouncer's check_*_connection_count;
 * tests/unit/test_admission.c reads its cases from a table, as pgbouncer's
 * hba_test does).
 *
 * The decision also says which fact it needs next, so that a fact costs its
 * query, lock or cluster call only when the answer depends on it, in the
 * order the rule reads: a caller starts with every fact ADM_UNKNOWN, and
 * loops: admission_decide(); a verdict ADM_NEED_x: gather x (and only x),
 * decide again; any other verdict: act on it. Gathering may fail (the
 * database, a lock not granted in time): that is the caller's answer, not
 * the rule's.
 *
 * Who asks:
 *   ADM_PRESS      a student's Start (fcgi-app/start.c)
 *   ADM_PLACE      the head of the waiting line, admitted by the pump: the
 *                  same rule, its place taken out of the line first
 *   ADM_POOL_FILL  the warm pool making one VM (pool_tick.c): capacity only,
 *                  and it leaves the seats the line waits for to the line
 *   ADM_VIEW       capacity only, on facts as known (no lock, no need): the
 *                  pump's look at its head, the operators' overview and
 *                  /api/metrics, the line's estimate, the lessons that can
 *                  never start
 *
 * The rule, in order (PRESS and PLACE):
 *   an open session                          -> REFUSE_EXISTS
 *   start_rate_max starts within the window  -> REFUSE_RATE (retry when the
 *                                               oldest leaves it)
 *   a press while waiting in line            -> REFUSE_IN_LINE
 *   a place no longer in line                -> REFUSE_GONE
 *   more seats than the capacity             -> NEVER_FITS
 *   no node can ever hold it (nodefit.h)     -> NEVER_FITS_NODES
 *   the line ahead empty, a warm pool        -> CLAIM_POOL (a ready pool VM
 *                                               is the admission; none: on)
 *   in use + line ahead + seats > capacity,
 *     counted before the capacity lock       -> full (below), no lock waited for
 *   else the lock, counted again under it:
 *     the count failed                       -> REFUSE_CLUSTER
 *     in use + line ahead + seats > capacity -> full (below)
 *     else                                   -> ADMIT
 *   full: with nobody in line ahead, idle warm pool VMs in this capacity
 *     pool, at least as many as the seats short, and not yielded yet
 *                                            -> YIELD_POOL_THEN_ADMIT
 *     else                                   -> REFUSE_FULL */
#ifndef LABVM_CORE_ADMISSION_H
#define LABVM_CORE_ADMISSION_H

#define ADM_UNKNOWN      (-1)
#define ADM_COUNT_FAILED (-2) /* in_use: the cluster could not be counted */

enum admission_who { ADM_PRESS, ADM_PLACE, ADM_POOL_FILL, ADM_VIEW };

struct admission_facts {
	enum admission_who who;
	/* known from the start */
	long seats;    /* the lesson's machines (a pool VM: 1) */
	long capacity; /* its capacity pool's seats */
	long rate_max; /* start_rate_max (0: no limit) */
	int claimable; /* a warm pool holds ready VMs of this lesson (single-machine) */
	int yieldable; /* warm pool VMs hold seats of this capacity pool */
	/* gathered when asked for (ADM_UNKNOWN until then) */
	int open_session;   /* NEED_OPEN: the user has a starting or ready session */
	long recent_starts; /* NEED_RATE: the user's starts within start_rate_window_s */
	long rate_retry_s;  /* ... seconds until the oldest of them leaves the window */
	int in_line;        /* NEED_PLACE: a press: the user waits in line already;
	                       a place: it was still waiting (and is taken out now) */
	int never_fits;     /* NEED_NODES: no node can ever hold the session (1) */
	long line_ahead;    /* NEED_LINE: seats the line holds ahead (a press: all of it) */
	int pool_claimed;   /* after CLAIM_POOL: 0, none was ready */
	int locked;         /* NEED_LOCK: the capacity lock is held (0 until then) */
	long in_use;        /* NEED_COUNT: seats in use, counted (ADM_COUNT_FAILED) */
	long pool_idle;     /* NEED_POOL_IDLE: idle warm pool VMs */
	int yielded;        /* YIELD_POOL_THEN_ADMIT was tried already (1) */
};

enum admission_verdict {
	/* a fact first, then decide again */
	ADM_NEED_OPEN,
	ADM_NEED_RATE,
	ADM_NEED_PLACE,
	ADM_NEED_NODES,
	ADM_NEED_LINE,
	ADM_NEED_COUNT,
	ADM_NEED_LOCK, /* take the capacity lock; the count is taken again under it */
	ADM_NEED_POOL_IDLE,
	/* the answer */
	ADM_ADMIT,
	ADM_CLAIM_POOL,
	ADM_YIELD_POOL_THEN_ADMIT, /* yield short_by idle pool VMs, then all again */
	ADM_REFUSE_EXISTS,
	ADM_REFUSE_IN_LINE,
	ADM_REFUSE_GONE,
	ADM_REFUSE_RATE,
	ADM_REFUSE_FULL,
	ADM_REFUSE_CLUSTER,
	ADM_NEVER_FITS,       /* more seats than the capacity */
	ADM_NEVER_FITS_NODES, /* no node can ever hold it (never_fits) */
};

struct admission {
	enum admission_verdict verdict;
	long retry_after_s; /* REFUSE_RATE: when a start would pass again */
	long seats;         /* this start's seats */
	long short_by; /* seats missing (in use + line ahead + seats - capacity), when counted */
	long free_now; /* seats free now (capacity - in use, at least 0), when counted */
};

struct admission admission_decide(const struct admission_facts *f);

/* Facts for a start of `seats` seats against `capacity`, every gathered
 * fact ADM_UNKNOWN. */
void admission_facts_init(struct admission_facts *f, enum admission_who who, long seats,
                          long capacity);

/* "admit", "refuse_full", ... (the table test's and the logs' words), and back
 * (-1 when it is none). */
const char *admission_verdict_str(enum admission_verdict v);
int admission_verdict_parse(const char *s);

#endif
