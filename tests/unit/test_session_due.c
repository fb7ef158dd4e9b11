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
#define EXPIRES     (T_CREATED + 3600) /* while starting: not a deadline (minutes count from ready) */
#define EXPIRES_RDY (T_READY + 3600)   /* reset when ready */
#define IDLE_S      600                /* issue #28: idle ending after 10 minutes */
#define IDLE_END    (T_READY + IDLE_S) /* no activity since ready: 1800 */

/* the clock positions */
static const double clocks[] = {
    1050,         /* before every deadline */
    RUN_DL,       /* exactly at the running deadline: not past it */
    RUN_DL + 1,   /* past the running deadline */
    READY_DL + 1, /* past the ready deadline */
    EXPIRES,      /* exactly at created_at + minutes: a starting session does not expire */
    EXPIRES_RDY,  /* exactly at a ready session's expiry */
    EXPIRES_RDY + 1,
    IDLE_END - 1, /* a second before a ready session's idle end */
    IDLE_END,     /* exactly at it: due */
};
#define NCLOCKS (sizeof clocks / sizeof clocks[0])

/* What is due at each clock position, one letter each:
 *   n nothing   x expire   v no VM   r wait for Running   R ... overdue
 *   y wait for the ready flag   Y ... overdue   i end it for idleness */
struct fixture {
	const char *name;
	enum session_state state;
	enum session_stage stage;
	int submitted, running, ready, nvms;
	double expires;
	const char *want; /* NCLOCKS letters */
	double deadline;  /* of r/R/y/Y */
	int idle_s;       /* idle ending (0: off) */
	int activity;     /* last_activity_at recorded (at T_READY) */
};

static const struct fixture fixtures[] = {
    /* name, state, stage, submitted, running, ready, VMs, expires_at, due, deadline */
    {"starting/submitted, submission in flight", SESSION_STARTING, STAGE_SUBMITTED, 0, 0, 0, 1,
     EXPIRES, "rrrrrrrrr", 0},
    {"starting/submitted", SESSION_STARTING, STAGE_SUBMITTED, 1, 0, 0, 1, EXPIRES, "rrRRRRRRR",
     RUN_DL},
    {"starting/scheduling", SESSION_STARTING, STAGE_SCHEDULING, 1, 0, 0, 1, EXPIRES, "rrRRRRRRR",
     RUN_DL},
    {"starting/booting", SESSION_STARTING, STAGE_BOOTING, 1, 0, 0, 1, EXPIRES, "rrRRRRRRR", RUN_DL},
    {"starting/setting_up", SESSION_STARTING, STAGE_SETTING_UP, 1, 1, 0, 1, EXPIRES, "yyyYYYYYY",
     READY_DL},
    {"starting/booting without a VM", SESSION_STARTING, STAGE_BOOTING, 1, 0, 0, 0, EXPIRES,
     "vvvvvvvvv", 0},
    {"starting/booting, no expiry recorded", SESSION_STARTING, STAGE_BOOTING, 1, 0, 0, 1, 0,
     "rrRRRRRRR", RUN_DL},
    {"ready/ready", SESSION_READY, STAGE_READY, 1, 1, 1, 1, EXPIRES_RDY, "nnnnnxxnn", 0},
    {"failed/booting", SESSION_FAILED, STAGE_BOOTING, 1, 0, 0, 1, EXPIRES, "nnnnnnnnn", 0},
    {"failed/setting_up", SESSION_FAILED, STAGE_SETTING_UP, 1, 1, 0, 1, EXPIRES, "nnnnnnnnn", 0},
    {"ended/ready", SESSION_ENDED, STAGE_READY, 1, 1, 1, 1, EXPIRES_RDY, "nnnnnnnnn", 0},
    {"ended/submitted", SESSION_ENDED, STAGE_SUBMITTED, 1, 0, 0, 1, EXPIRES, "nnnnnnnnn", 0},
    /* issue #28: idle ending (only a ready session is ever idle) */
    {"ready/ready, idle on", SESSION_READY, STAGE_READY, 1, 1, 1, 1, EXPIRES_RDY, "nnnniiini", 0,
     IDLE_S, 1},
    {"ready/ready, idle end after the expiry", SESSION_READY, STAGE_READY, 1, 1, 1, 1, EXPIRES_RDY,
     "nnnnnxxnn", 0, 7200, 1},
    {"ready/ready, idle end at the expiry (a tie: expired)", SESSION_READY, STAGE_READY, 1, 1, 1, 1,
     EXPIRES_RDY, "nnnnnxxnn", 0, 3600, 1},
    {"ready/ready, idle on, no activity recorded", SESSION_READY, STAGE_READY, 1, 1, 1, 1,
     EXPIRES_RDY, "nnnnnxxnn", 0, IDLE_S, 0},
    {"starting/setting_up, idle on", SESSION_STARTING, STAGE_SETTING_UP, 1, 1, 0, 1, EXPIRES,
     "yyyYYYYYY", READY_DL, IDLE_S, 1},
    {"starting/booting, idle on", SESSION_STARTING, STAGE_BOOTING, 1, 0, 0, 1, EXPIRES, "rrRRRRRRR",
     RUN_DL, IDLE_S, 1},
    {"ended/ready, idle on", SESSION_ENDED, STAGE_READY, 1, 1, 1, 1, EXPIRES_RDY, "nnnnnnnnn", 0,
     IDLE_S, 1},
    {"failed/setting_up, idle on", SESSION_FAILED, STAGE_SETTING_UP, 1, 1, 0, 1, EXPIRES,
     "nnnnnnnnn", 0, IDLE_S, 1},
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
	case DUE_IDLE:
		return 'i';
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
	s->idle_s = f->idle_s;
	s->t_activity = f->activity ? T_READY : 0;
	s->warn_s = 60;
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
				if (ok && got == 'i')
					ok = d.deadline == T_READY + fx->idle_s;
				CHECK(ok, "%s (%s) at t=%.0f: %c", fx->name,
				      lesson_runtime_str(runtimes[r]), clocks[c], want);
				if (!ok)
					printf("#   got %c, deadline %.0f\n", got, d.deadline);
			}
		}
	}

	/* the warnings (issue #28): warn_s 60 before the next of the idle end
	 * and the expiry */
	struct {
		const char *name;
		int fixture; /* index into fixtures */
		double now;
		enum session_warning_kind kind;
		double ends_at, next;
	} warns[] = {
	    {"idle on: no warning a second before it starts", 12, IDLE_END - 61, WARN_NONE, 0,
	     IDLE_END - 60},
	    {"idle on: the warning starts warn_s before the idle end", 12, IDLE_END - 60, WARN_IDLE,
	     IDLE_END, IDLE_END},
	    {"idle on: still warned a second before", 12, IDLE_END - 1, WARN_IDLE, IDLE_END,
	     IDLE_END},
	    {"idle on: at the idle end no warning (it is due)", 12, IDLE_END, WARN_NONE, 0, 0},
	    {"idle after the expiry: the expiry is warned", 13, EXPIRES_RDY - 30, WARN_EXPIRY,
	     EXPIRES_RDY, EXPIRES_RDY},
	    {"idle off: the expiry is warned", 7, EXPIRES_RDY - 60, WARN_EXPIRY, EXPIRES_RDY,
	     EXPIRES_RDY},
	    {"idle off: nothing before", 7, EXPIRES_RDY - 61, WARN_NONE, 0, EXPIRES_RDY - 60},
	    {"starting, idle on: never warned", 16, IDLE_END - 30, WARN_NONE, 0, 0},
	    {"ended: never warned", 18, EXPIRES_RDY - 30, WARN_NONE, 0, 0},
	};
	for (size_t i = 0; i < sizeof warns / sizeof warns[0]; i++) {
		struct session s;
		make(&s, &fixtures[warns[i].fixture], RUNTIME_VM, &vm);
		struct session_warning w = session_warning(&s, warns[i].now);
		double next = session_warning_next(&s, warns[i].now);
		CHECK(w.kind == warns[i].kind && w.ends_at == warns[i].ends_at &&
		          next == warns[i].next,
		      "warning: %s (%s)", warns[i].name, session_warning_kind_str(warns[i].kind));
		if (w.kind != warns[i].kind || next != warns[i].next)
			printf("#   got %s ends %.0f next %.0f\n", session_warning_kind_str(w.kind),
			       w.ends_at, next);
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
