/* session_due(): what is due for a session now, without a database. Every
 * state and stage x every clock position around the deadlines x both runtimes,
 * and the names of states and stages (what the database holds). */
#include <stdlib.h>
#include <string.h>

#include "session.h"
#include "unit.h"

/* a lesson of 60 minutes, running_timeout_s 150, ready_timeout_s 300 */
#define T_CREATED   1000.0
#define T_SUBMITTED 1001.0
#define T_RUNNING   1100.0
#define T_READY     1200.0
#define RUN_TO      150
#define READY_TO    300
#define RUN_DL      (T_SUBMITTED + RUN_TO) /* 1151 */
#define READY_DL    (T_RUNNING + READY_TO) /* 1400 */
#define EXPIRES     (T_CREATED + 3600)     /* while starting */
#define EXPIRES_RDY (T_READY + 3600)       /* reset when ready */

/* the clock positions */
static const double clocks[] = {
    1050,         /* before every deadline */
    RUN_DL,       /* exactly at the running deadline: not past it */
    RUN_DL + 1,   /* past the running deadline */
    READY_DL + 1, /* past the ready deadline */
    EXPIRES,      /* exactly at expiry (a starting session's) */
    EXPIRES_RDY,  /* exactly at a ready session's expiry */
    EXPIRES_RDY + 1,
};
#define NCLOCKS (sizeof clocks / sizeof clocks[0])

/* What is due at each clock position, one letter each:
 *   n nothing   x expire   v no VM   r wait for Running   R ... overdue
 *   y wait for the ready flag   Y ... overdue */
struct fixture {
	const char *name;
	enum session_state state;
	enum session_stage stage;
	int submitted, running, ready, nvms;
	double expires;
	const char *want; /* NCLOCKS letters */
	double deadline;  /* of r/R/y/Y */
};

static const struct fixture fixtures[] = {
    /* name, state, stage, submitted, running, ready, VMs, expires_at, due, deadline */
    {"starting/submitted, submission in flight", SESSION_STARTING, STAGE_SUBMITTED, 0, 0, 0, 1,
     EXPIRES, "rrrrxxx", 0},
    {"starting/submitted", SESSION_STARTING, STAGE_SUBMITTED, 1, 0, 0, 1, EXPIRES, "rrRRxxx",
     RUN_DL},
    {"starting/scheduling", SESSION_STARTING, STAGE_SCHEDULING, 1, 0, 0, 1, EXPIRES, "rrRRxxx",
     RUN_DL},
    {"starting/booting", SESSION_STARTING, STAGE_BOOTING, 1, 0, 0, 1, EXPIRES, "rrRRxxx", RUN_DL},
    {"starting/setting_up", SESSION_STARTING, STAGE_SETTING_UP, 1, 1, 0, 1, EXPIRES, "yyyYxxx",
     READY_DL},
    {"starting/booting without a VM", SESSION_STARTING, STAGE_BOOTING, 1, 0, 0, 0, EXPIRES,
     "vvvvxxx", 0},
    {"starting/booting, no expiry recorded", SESSION_STARTING, STAGE_BOOTING, 1, 0, 0, 1, 0,
     "rrRRRRR", RUN_DL},
    {"ready/ready", SESSION_READY, STAGE_READY, 1, 1, 1, 1, EXPIRES_RDY, "nnnnnxx", 0},
    {"failed/booting", SESSION_FAILED, STAGE_BOOTING, 1, 0, 0, 1, EXPIRES, "nnnnnnn", 0},
    {"failed/setting_up", SESSION_FAILED, STAGE_SETTING_UP, 1, 1, 0, 1, EXPIRES, "nnnnnnn", 0},
    {"ended/ready", SESSION_ENDED, STAGE_READY, 1, 1, 1, 1, EXPIRES_RDY, "nnnnnnn", 0},
    {"ended/submitted", SESSION_ENDED, STAGE_SUBMITTED, 1, 0, 0, 1, EXPIRES, "nnnnnnn", 0},
};

static char letter(struct session_due d)
{
	switch (d.what) {
	case DUE_NOTHING:
		return 'n';
	case DUE_EXPIRE:
		return 'x';
	case DUE_NO_VM:
		return 'v';
	case DUE_RUNNING:
		return d.overdue ? 'R' : 'r';
	case DUE_READY:
		return d.overdue ? 'Y' : 'y';
	}
	return '?';
}

static void make(struct session *s, const struct fixture *f, enum lesson_runtime rt,
                 struct session_vm *vm)
{
	memset(s, 0, sizeof *s);
	s->id = (char *)"0b7e6c1a-8d3c-4c41-9a55-3f0b7a1c2d3e";
	s->runtime = rt;
	s->state = f->state;
	s->stage = f->stage;
	s->running_timeout_s = RUN_TO;
	s->ready_timeout_s = READY_TO;
	s->t_submitted = f->submitted ? T_SUBMITTED : 0;
	s->submitted_at = f->submitted ? (char *)"2026-01-01T00:16:41Z" : NULL;
	s->t_running = f->running ? T_RUNNING : 0;
	s->running_at = f->running ? (char *)"2026-01-01T00:18:20Z" : NULL;
	s->ready_at = f->ready ? (char *)"2026-01-01T00:20:00Z" : NULL;
	s->t_expires = f->expires;
	s->vms = vm;
	s->nvms = (size_t)f->nvms;
}

int main(void)
{
	static const enum lesson_runtime runtimes[] = {RUNTIME_VM, RUNTIME_POD};
	struct session_vm vm = {(char *)"lab-0b7e6c1a", (char *)"lab-0b7e6c1a-ci", NULL, NULL, 0};

	for (size_t f = 0; f < sizeof fixtures / sizeof fixtures[0]; f++) {
		const struct fixture *fx = &fixtures[f];
		for (size_t r = 0; r < 2; r++) {
			for (size_t c = 0; c < NCLOCKS; c++) {
				struct session s;
				make(&s, fx, runtimes[r], &vm);
				struct session_due d = session_due(&s, clocks[c]);
				char want = fx->want[c], got = letter(d);
				int ok = got == want;
				if (ok && strchr("rRyY", got))
					ok = d.deadline == fx->deadline;
				if (ok && got == 'x')
					ok = d.deadline == fx->expires;
				CHECK(ok, "%s (%s) at t=%.0f: %c", fx->name,
				      lesson_runtime_str(runtimes[r]), clocks[c], want);
				if (!ok)
					printf("#   got %c, deadline %.0f\n", got, d.deadline);
			}
		}
	}

	/* a struct that was never loaded has nothing due */
	struct session none;
	memset(&none, 0, sizeof none);
	CHECK(session_due(&none, 1e9).what == DUE_NOTHING && !session_active(&none),
	      "an unloaded session is not active and has nothing due");

	/* the names are the database's CHECK constraints, both ways */
	static const char *const states[] = {"starting", "ready", "failed", "ended"};
	static const char *const stages[] = {"submitted", "scheduling", "booting", "setting_up",
	                                     "ready"};
	for (size_t i = 0; i < sizeof states / sizeof states[0]; i++) {
		int st = session_state_parse(states[i]);
		CHECK(st >= 0 && strcmp(session_state_str((enum session_state)st), states[i]) == 0,
		      "state \"%s\" round trip", states[i]);
	}
	for (size_t i = 0; i < sizeof stages / sizeof stages[0]; i++) {
		int st = session_stage_parse(stages[i]);
		CHECK(st >= 0 && strcmp(session_stage_str((enum session_stage)st), stages[i]) == 0,
		      "stage \"%s\" round trip", stages[i]);
	}
	CHECK(session_state_parse("Ready") < 0 && session_state_parse("") < 0 &&
	          session_state_parse(NULL) < 0 && session_stage_parse("running") < 0,
	      "unknown states and stages are refused");
	return unit_done();
}
