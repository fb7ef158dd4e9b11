/* main.c - labvm-bench: subcommands, options (defaults from the LABVM_*
 * environment, so `. .demo/env; labvm-bench readiness` just works), signals,
 * the students' credentials, and the cluster and simulator helpers. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "jsonx.h"
#include "log.h"

volatile sig_atomic_t bench_stop;

/* ------------------------------------------------------------- options */

#define ALL                                                                                        \
	(CMD_READINESS | CMD_REPORT | CMD_API | CMD_BURST | CMD_CONSOLE | CMD_SELFTEST |           \
	 CMD_PLOT | CMD_CLASS)
#define HTTP (CMD_READINESS | CMD_API | CMD_BURST | CMD_CONSOLE | CMD_CLASS)
#define KUBE (CMD_READINESS | CMD_BURST | CMD_CONSOLE | CMD_CLASS)
#define RSET (CMD_READINESS | CMD_REPORT | CMD_PLOT)

/* How an option's value is stored in struct opts. */
enum opt_type {
	T_STR,    /* char *, copied */
	T_SECRET, /* char *, copied; wiped when freed */
	T_INT,    /* int, a whole number in [min, max] */
	T_NUM,    /* double in [min, max] */
	T_FLAG,   /* int, set to 1; no value */
	T_FILE,   /* char *, the file named, trailing blanks cut; its env default is the value
	           * itself (a secret: wiped when freed) */
	T_ENV,    /* --env: read before the defaults (see env_defaults) */
	T_HELP,   /* --help */
};

/* One option: its flag, where it goes, its default (the environment variable
 * first, then def), the subcommands it applies to and its --help line. The
 * table's order is the order of --help. */
struct optdef {
	const char *name;
	enum opt_type type;
	size_t off;
	const char *env; /* default from this environment variable, when set and not empty */
	const char *def; /* otherwise this (NULL: none) */
	double min, max; /* T_INT, T_NUM */
	unsigned cmds;
	const char *arg;
	const char *help;
};

#define F(field) offsetof(struct opts, field)

static const struct optdef OPTS[] = {
    {"env", T_ENV, 0, NULL, NULL, 0, 0, ALL & ~CMD_SELFTEST & ~CMD_PLOT, "FILE",
     "a stack's env file for the defaults below [.demo/env when LABVM_URL is unset]"},
    {"url", T_STR, F(url), "LABVM_URL", NULL, 0, 0, HTTP, "URL", "front end base URL [$LABVM_URL]"},
    {"users-file", T_STR, F(users_file), NULL, NULL, 0, 0, HTTP, "FILE",
     "\"user:password\" lines (instead of the next four)"},
    {"user-format", T_STR, F(user_format), NULL, "student%d", 0, 0, HTTP, "FMT",
     "user names, one %d [student%d]"},
    {"first", T_INT, F(first), NULL, "1", 0, 1000000000, HTTP, "N", "first user number [1]"},
    {"user-count", T_INT, F(user_count), NULL, "200", 1, 1000000, HTTP, "N",
     "users from --first on [200]"},
    {"password-file", T_FILE, F(password), "LABVM_PASSWORD", NULL, 0, 0, HTTP, "FILE",
     "the users' password [$LABVM_PASSWORD]"},
    {"kube-url", T_STR, F(kube_url), "LABVM_KUBE_URL", NULL, 0, 0, KUBE, "URL",
     "cluster API, read access [$LABVM_KUBE_URL]"},
    {"kube-token-file", T_STR, F(kube_token_file), "LABVM_KUBE_ADMIN_TOKEN_FILE", NULL, 0, 0, KUBE,
     "FILE", "bearer token [$LABVM_KUBE_ADMIN_TOKEN_FILE]"},
    {"kube-ca", T_STR, F(kube_ca), "LABVM_KUBE_CA", NULL, 0, 0, KUBE, "FILE",
     "cluster CA [$LABVM_KUBE_CA]"},
    {"namespace", T_STR, F(namespace_), "LABVM_NAMESPACE", "labs", 0, 0, KUBE, "NS",
     "lab namespace [$LABVM_NAMESPACE or labs]"},
    {"label-prefix", T_STR, F(label_prefix), NULL, "labvm.io", 0, 0, KUBE, "P",
     "label prefix [labvm.io]"},
    {"console-url", T_STR, F(console_url), "LABVM_CONSOLE_URL", NULL, 0, 0, CMD_CONSOLE, "URL",
     "the bridge itself [$LABVM_CONSOLE_URL]"},
    {"database", T_SECRET, F(database), "LABVM_DATABASE", NULL, 0, 0, CMD_REPORT, "CONNINFO",
     "libpq conninfo [$LABVM_DATABASE]"},
    {"environment", T_STR, F(environment), "LABVM_ENVIRONMENT", NULL, 0, 0, CMD_REPORT, "ENV",
     "sessions of this environment [$LABVM_ENVIRONMENT]"},
    {"out", T_STR, F(out_dir), NULL, "labvm-bench-out", 0, 0,
     RSET | CMD_API | CMD_BURST | CMD_CONSOLE | CMD_SELFTEST | CMD_CLASS, "DIR",
     "output folder [labvm-bench-out]"},
    {"name", T_STR, F(name), NULL, NULL, 0, 0, RSET | CMD_API | CMD_BURST | CMD_CONSOLE | CMD_CLASS,
     "STEM", "output file stem [the subcommand]"},
    {"quiet", T_FLAG, F(quiet), NULL, NULL, 0, 0, ALL, NULL, "no live progress line"},
    {"lessons", T_STR, F(lessons_arg), NULL, NULL, 0, 0, RSET, "A,B",
     "lessons (readiness: interleaved; report: filter)"},
    {"n", T_INT, F(n), NULL, "10", 1, 100000, CMD_READINESS, "N", "sessions per lesson [10]"},
    {"concurrency", T_INT, F(concurrency), NULL, "4", 1, 1000, CMD_READINESS, "C",
     "sessions starting at once [4]"},
    {"poll", T_NUM, F(poll_s), NULL, "1.0", 0.01, 60, CMD_READINESS, "S",
     "poll interval, like the page [1.0]"},
    {"timeout", T_NUM, F(timeout_s), NULL, "1200", 1, 86400, CMD_READINESS | CMD_CLASS, "S",
     "give up on a session (class: waiting for a lab) after [1200]"},
    {"retry-wait", T_NUM, F(retry_wait_s), NULL, "2", 0.01, 600, CMD_READINESS, "S",
     "wait after capacity_full, at most Retry-After [2]"},
    {"admission-timeout", T_NUM, F(admission_timeout_s), NULL, "900", 0, 86400, CMD_READINESS, "S",
     "give up waiting for capacity [900]"},
    {"end-existing", T_FLAG, F(end_existing), NULL, NULL, 0, 0,
     CMD_READINESS | CMD_CONSOLE | CMD_API, NULL, "end a bench user's open session first"},
    {"sim-profile", T_STR, F(sim_profile), NULL, NULL, 0, 0, CMD_READINESS, "NAME",
     "simulator only: delay profile for the run, restored after"},
    {"time-scale", T_NUM, F(sim_time_scale), NULL, "1.0", 0.001, 1000, CMD_READINESS, "F",
     "simulator only: with --sim-profile [1.0]"},
    {"pool", T_INT, F(pool), NULL, "0", 0, 1000, CMD_READINESS, "P",
     "per lesson: --n cold presses, then --n with a warm pool of P [0: off]"},
    {"class", T_INT, F(class_users), NULL, "0", 0, 10000, CMD_READINESS, "U",
     "with --pool: then U presses at once against the pool (class start) [0]"},
    {"operator", T_STR, F(operator_name), NULL, "operator", 0, 0, CMD_READINESS, "USER",
     "with --pool: the operator who warms it (the users' password) [operator]"},
    {"since", T_STR, F(since), NULL, "24h", 0, 0, CMD_REPORT, "T",
     "RFC 3339 time or 30m/24h/7d ago [24h]"},
    {"until", T_STR, F(until), NULL, NULL, 0, 0, CMD_REPORT, "T",
     "RFC 3339 time or 30m/24h/7d ago [now]"},
    {"duration", T_NUM, F(duration_s), NULL, "10", 0.1, 86400, CMD_API, "S",
     "seconds per target [10]"},
    {"warmup", T_NUM, F(warmup_s), NULL, "1", 0, 3600, CMD_API, "S",
     "not counted, before each target [1]"},
    {"connections", T_INT, F(connections), NULL, "16", 1, 1000, CMD_API, "C",
     "keep-alive connections [16]"},
    {"targets", T_STR, F(targets), NULL, "status,lessons", 0, 0, CMD_API, "LIST",
     "status,lessons,current,healthz [status,lessons]"},
    {"sessions", T_INT, F(sessions), NULL, "2", 1, 1000, CMD_API, "N",
     "ready sessions polled by \"status\" [2]"},
    {"lesson", T_STR, F(lesson), NULL, NULL, 0, 0, CMD_API | CMD_BURST | CMD_CONSOLE | CMD_CLASS,
     "ID", "lesson of the sessions [debian-golden; console, class: linux-basics]"},
    {"users", T_INT, F(users), NULL, "200", 1, 100000, CMD_BURST, "M",
     "users pressing start at once [200]"},
    {"capacity", T_INT, F(capacity), NULL, NULL, 1, 100000, CMD_BURST | CMD_CLASS, "C",
     "expected vm_capacity, the seats [the server's answers]"},
    {"sample-ms", T_NUM, F(sample_ms), NULL, "20", 1, 10000, CMD_BURST, "MS",
     "VM count sampling period [20]"},
    {"rounds", T_INT, F(rounds), NULL, "1", 1, 1000, CMD_BURST, "R",
     "bursts, one after the other [1]"},
    {"settle", T_NUM, F(settle_s), NULL, "3", 0, 600, CMD_BURST, "S",
     "keep sampling after the last answer [3]"},
    {"runs", T_INT, F(runs), NULL, "3", 1, 1000, CMD_CONSOLE, "N", "interleaved runs per path [3]"},
    {"mb", T_INT, F(mb), NULL, "10", 1, 10000, CMD_CONSOLE, "MB",
     "console output per throughput run [10]"},
    {"keys", T_INT, F(keys), NULL, "100", 1, 100000, CMD_CONSOLE, "N",
     "keystrokes per latency run [100]"},
    {"paths", T_STR, F(paths), NULL, "direct,bridge,frontend", 0, 0, CMD_CONSOLE, "LIST",
     "direct,bridge,frontend [all three]"},
    {"rss", T_FLAG, F(rss), NULL, NULL, 0, 0, CMD_CONSOLE, NULL,
     "also the bridge's memory with 1,000 consoles"},
    {"in", T_STR, F(in), NULL, NULL, 0, 0, CMD_PLOT, "F.json,..",
     "readiness or report JSON files (merged)"},
    {"students", T_INT, F(students), NULL, "30", 1, 10000, CMD_CLASS, "N",
     "students pressing Start [30]"},
    {"spread", T_NUM, F(spread_s), NULL, "3", 0, 3600, CMD_CLASS, "S",
     "the presses fall within this many seconds (uniform) [3]"},
    {"hold", T_STR, F(hold), NULL, "uniform:10:40", 0, 0, CMD_CLASS, "DIST",
     "how long each keeps the lab (s): uniform:MIN:MAX, exp:MEAN, fixed:S [uniform:10:40]"},
    {"seed", T_INT, F(seed), NULL, "1", 0, 2000000000, CMD_CLASS, "N",
     "the class: press times, holds and reactions [1]"},
    {"mode", T_STR, F(mode), NULL, "both", 0, 0, CMD_CLASS, "M",
     "line, retry (retry-only) or both, the same class twice [both]"},
    {"poll", T_NUM, F(place_poll_s), NULL, "2", 0.05, 60, CMD_CLASS, "S",
     "the line: poll the place every, as the page does [2]"},
    {"reaction", T_NUM, F(reaction_s), NULL, "3", 0, 600, CMD_CLASS, "S",
     "retry-only: a student presses again 0..S after Retry-After [3]"},
    {"retry-after", T_NUM, F(retry_after_s), NULL, "0", 0, 3600, CMD_CLASS, "S",
     "retry-only: wait this instead of the answer's Retry-After [0: Retry-After]"},
    {"walkaway", T_NUM, F(walkaway), NULL, "0", 0, 1, CMD_CLASS, "P",
     "share of students who stop working at a random moment and never come back [0]"},
    {"idle-lesson", T_STR, F(idle_lesson), NULL, NULL, 0, 0, CMD_CLASS, "ID",
     "the class in line mode with idle ending off (--lesson) and on (this lesson)"},
    {"activity", T_NUM, F(activity_s), NULL, "3", 0.2, 600, CMD_CLASS, "S",
     "a working student's activity every S s (POST /activity, as typing records it) [3]"},
    {"help", T_HELP, 0, NULL, NULL, 0, 0, ALL, NULL, "this text"},
};
#define NOPTS (sizeof OPTS / sizeof OPTS[0])

static const struct {
	const char *name;
	enum bench_cmd cmd;
	int (*fn)(struct opts *);
	const char *what;
} CMDS[] = {
    {"readiness", CMD_READINESS, cmd_readiness,
     "start sessions as N students would; distribution of every stage per disk source"},
    {"report", CMD_REPORT, cmd_report,
     "the same distributions from the session rows in PostgreSQL (no new load)"},
    {"api", CMD_API, cmd_api, "GET load through the front end: req/s, p50/p99"},
    {"burst", CMD_BURST, cmd_burst,
     "M users press start at once against capacity C: answers, p99, overshoot"},
    {"console", CMD_CONSOLE, cmd_console,
     "console throughput and keystroke latency: bridge vs direct"},
    {"plot", CMD_PLOT, cmd_plot,
     "table, CSV, JSON and SVG again from readiness/report JSON files (merged)"},
    {"class", CMD_CLASS, cmd_class,
     "a class against a full lab: the waiting line beside retry-only (waits, order)"},
    {"selftest", CMD_SELFTEST, cmd_selftest, "check stats, CSV, JSON and SVG writers offline"},
};
#define NCMDS (sizeof CMDS / sizeof CMDS[0])

static void usage(FILE *f, int cmd_index)
{
	if (cmd_index < 0) {
		fprintf(f,
		        "usage: labvm-bench COMMAND [options]   (labvm-bench COMMAND --help)\n\n");
		for (size_t i = 0; i < NCMDS; i++)
			fprintf(f, "  %-10s %s\n", CMDS[i].name, CMDS[i].what);
		fprintf(
		    f,
		    "\nTargets default to the LABVM_* variables of the environment, then of a "
		    "stack's env\nfile (--env FILE, $LABVM_ENV_FILE, or .demo/env when LABVM_URL "
		    "is unset):\n  make demo-up; labvm-bench readiness --lessons "
		    "debian-golden --n 10\n");
		return;
	}
	fprintf(f, "usage: labvm-bench %s [options]\n  %s\n\n", CMDS[cmd_index].name,
	        CMDS[cmd_index].what);
	for (size_t i = 0; i < NOPTS; i++) {
		char left[64];
		if (!(OPTS[i].cmds & CMDS[cmd_index].cmd))
			continue;
		snprintf(left, sizeof left, "--%s%s%s", OPTS[i].name, OPTS[i].arg ? " " : "",
		         OPTS[i].arg ? OPTS[i].arg : "");
		fprintf(f, "  %-26s %s\n", left, OPTS[i].help);
	}
}

static int num_arg(const char *opt, const char *v, double min, double max, double *out)
{
	char *end;
	errno = 0;
	double d = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(d) || d < min || d > max) {
		fprintf(stderr, "labvm-bench: --%s %s: expected a number in [%g, %g]\n", opt, v,
		        min, max);
		return -1;
	}
	*out = d;
	return 0;
}

static int int_arg(const char *opt, const char *v, int min, int max, int *out)
{
	double d;
	if (num_arg(opt, v, min, max, &d) < 0)
		return -1;
	if (d != (int)d) {
		fprintf(stderr, "labvm-bench: --%s %s: expected a whole number\n", opt, v);
		return -1;
	}
	*out = (int)d;
	return 0;
}

static char *read_secret_file(const char *path)
{
	char *s = util_read_file(path, 4096, NULL);
	if (!s) {
		fprintf(stderr, "labvm-bench: cannot read %s: %s\n", path, strerror(errno));
		return NULL;
	}
	util_rstrip(s);
	return s;
}

static void split_list(const char *arg, char ***out, int *n)
{
	char *copy = xstrdup(arg), *save = NULL;
	*n = 0;
	*out = NULL;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (!*t)
			continue;
		*out = xrealloc(*out, sizeof **out * (size_t)(*n + 1));
		(*out)[(*n)++] = xstrdup(t);
	}
	free(copy);
}

/* A stack's env file (tests/stack, make demo-up: KEY='value' lines, not
 * exported): its LABVM_* values become defaults, the environment wins. So
 * `. .demo/env; labvm-bench ...` works whether or not the shell exported them. */
static void load_env_file(const char *path, int explicit_)
{
	char *text = util_read_file(path, 1 << 20, NULL), *save = NULL;
	int n = 0;
	if (!text) {
		if (explicit_)
			fprintf(stderr, "labvm-bench: cannot read %s: %s\n", path, strerror(errno));
		return;
	}
	for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		if (strncmp(l, "export ", 7) == 0)
			l += 7;
		char *eq = strchr(l, '=');
		if (!eq || strncmp(l, "LABVM_", 6) != 0)
			continue;
		*eq = '\0';
		char *v = eq + 1;
		size_t len = strlen(v);
		if (len >= 2 && (v[0] == '\'' || v[0] == '"') && v[len - 1] == v[0]) {
			v[len - 1] = '\0';
			v++;
		}
		if (setenv(l, v, 0) == 0)
			n++;
	}
	explicit_bzero(text, strlen(text));
	free(text);
	if (n)
		fprintf(stderr, "labvm-bench: defaults from %s\n", path);
}

static void env_defaults(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--help") == 0)
			return;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--env") == 0 && i + 1 < argc) {
			load_env_file(argv[i + 1], 1);
			return;
		}
		if (strncmp(argv[i], "--env=", 6) == 0) {
			load_env_file(argv[i] + 6, 1);
			return;
		}
	}
	if (!getenv("LABVM_URL"))
		load_env_file(getenv("LABVM_ENV_FILE") ? getenv("LABVM_ENV_FILE") : ".demo/env", 0);
}

static char **str_slot(struct opts *o, const struct optdef *d)
{
	return (char **)(void *)((char *)o + d->off);
}

static void set_str(struct opts *o, const struct optdef *d, char *v)
{
	char **p = str_slot(o, d);
	if (*p && (d->type == T_SECRET || d->type == T_FILE))
		explicit_bzero(*p, strlen(*p));
	free(*p);
	*p = v;
}

/* One value for option d: from the command line (v) or a default. */
static int set_opt(struct opts *o, const struct optdef *d, const char *v, int from_file)
{
	void *slot = (char *)o + d->off;
	double x;
	int i;
	switch (d->type) {
	case T_STR:
	case T_SECRET:
		set_str(o, d, xstrdup(v));
		return 0;
	case T_FILE:
		if (from_file) {
			char *p = read_secret_file(v);
			if (!p)
				return -1;
			set_str(o, d, p);
		} else {
			set_str(o, d, xstrdup(v));
		}
		return 0;
	case T_INT:
		if (int_arg(d->name, v, (int)d->min, (int)d->max, &i) < 0)
			return -1;
		*(int *)slot = i;
		return 0;
	case T_NUM:
		if (num_arg(d->name, v, d->min, d->max, &x) < 0)
			return -1;
		*(double *)slot = x;
		return 0;
	case T_FLAG:
		*(int *)slot = 1;
		return 0;
	case T_ENV: /* read before the defaults: see env_defaults */
	case T_HELP:
		return 0;
	}
	return -1;
}

/* Every option's default: its environment variable when set, else def. */
static void defaults(struct opts *o)
{
	for (size_t i = 0; i < NOPTS; i++) {
		const char *e = OPTS[i].env ? getenv(OPTS[i].env) : NULL;
		const char *v = e && *e ? e : OPTS[i].def;
		if (v && set_opt(o, &OPTS[i], v, 0) < 0)
			abort(); /* a default outside its own bounds: the table is wrong */
	}
}

static int parse(struct opts *o, int ci, int argc, char **argv)
{
	struct option lo[NOPTS + 1];
	memset(lo, 0, sizeof lo);
	for (size_t i = 0; i < NOPTS; i++) {
		int flag = OPTS[i].type == T_FLAG || OPTS[i].type == T_HELP;
		lo[i].name = OPTS[i].name;
		lo[i].has_arg = flag ? no_argument : required_argument;
		lo[i].val = 1000 + (int)i;
	}
	optind = 1;
	opterr = 0;
	for (;;) {
		int li = -1;
		int c = getopt_long(argc, argv, "", lo, &li);
		if (c == -1)
			break;
		if (c < 1000 || c >= 1000 + (int)NOPTS) {
			fprintf(stderr, "labvm-bench %s: unknown option or missing value: %s\n",
			        o->cmd_name, argv[optind - 1]);
			return -1;
		}
		const struct optdef *d = &OPTS[c - 1000];
		/* a flag may have a row per subcommand (--poll): the one that applies */
		for (size_t j = (size_t)(c - 1000) + 1; j < NOPTS && !(d->cmds & o->cmd); j++)
			if (strcmp(OPTS[j].name, d->name) == 0 && (OPTS[j].cmds & o->cmd))
				d = &OPTS[j];
		if (!(d->cmds & o->cmd)) {
			fprintf(stderr, "labvm-bench %s: --%s does not apply here\n", o->cmd_name,
			        d->name);
			return -1;
		}
		if (d->type == T_HELP) {
			usage(stdout, ci);
			exit(0);
		}
		if (set_opt(o, d, optarg, 1) < 0)
			return -1;
	}
	if (optind < argc) {
		fprintf(stderr, "labvm-bench %s: unexpected argument %s\n", o->cmd_name,
		        argv[optind]);
		return -1;
	}
	if (o->lessons_arg)
		split_list(o->lessons_arg, &o->lessons, &o->nlessons);
	if (!o->name)
		o->name = xstrdup(o->cmd_name);
	return 0;
}

static void opts_free(struct opts *o)
{
	for (size_t i = 0; i < NOPTS; i++)
		if (OPTS[i].type == T_STR || OPTS[i].type == T_SECRET || OPTS[i].type == T_FILE)
			set_str(o, &OPTS[i], NULL);
	for (int i = 0; i < o->nlessons; i++)
		free(o->lessons[i]);
	free(o->lessons);
}

/* -------------------------------------------------------------- signals */

static void on_signal(int sig)
{
	static const char msg[] =
	    "\nlabvm-bench: stopping: ending the sessions it started (Ctrl-C again to quit now)\n";
	if (bench_stop) {
		signal(sig, SIG_DFL);
		raise(sig);
		return;
	}
	bench_stop = 1;
	if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) {
		/* nothing to do */
	}
}

void bench_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

int bench_sleep(double s)
{
	double end = util_mono_s() + s;
	for (;;) {
		if (bench_stop)
			return 1;
		double left = end - util_mono_s();
		if (left <= 0)
			return 0;
		if (left > 0.05)
			left = 0.05;
		struct timespec ts = {0, (long)(left * 1e9)};
		nanosleep(&ts, NULL);
	}
}

/* ---------------------------------------------------------------- users */

static char **file_users, **file_passwords;
static int nfile_users;

int bench_users_load(struct opts *o)
{
	if (o->users_file) {
		char *text = util_read_file(o->users_file, 1 << 20, NULL);
		char *save = NULL;
		if (!text) {
			fprintf(stderr, "labvm-bench: cannot read %s: %s\n", o->users_file,
			        strerror(errno));
			return -1;
		}
		for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
			util_rstrip(l);
			char *colon = strchr(l, ':');
			if (!*l || *l == '#')
				continue;
			if (!colon || colon == l) {
				fprintf(stderr, "labvm-bench: %s: lines must be user:password\n",
				        o->users_file);
				explicit_bzero(text, strlen(text));
				free(text);
				return -1;
			}
			*colon = '\0';
			file_users =
			    xrealloc(file_users, sizeof *file_users * (size_t)(nfile_users + 1));
			file_passwords = xrealloc(file_passwords, sizeof *file_passwords *
			                                              (size_t)(nfile_users + 1));
			file_users[nfile_users] = xstrdup(l);
			file_passwords[nfile_users] = xstrdup(colon + 1);
			nfile_users++;
			explicit_bzero(colon + 1, strlen(colon + 1));
		}
		free(text);
		if (!nfile_users) {
			fprintf(stderr, "labvm-bench: %s holds no users\n", o->users_file);
			return -1;
		}
		return 0;
	}
	const char *pct = strstr(o->user_format, "%d");
	if (!pct || strchr(pct + 2, '%') || strchr(o->user_format, '%') != pct) {
		fprintf(stderr, "labvm-bench: --user-format needs exactly one %%d\n");
		return -1;
	}
	if (!o->password) {
		fprintf(stderr, "labvm-bench: no password: give --password-file or set "
		                "LABVM_PASSWORD (or --users-file)\n");
		return -1;
	}
	return 0;
}

int bench_user_count(const struct opts *o)
{
	return o->users_file ? nfile_users : o->user_count;
}

void bench_user(const struct opts *o, int i, char out[64])
{
	if (o->users_file)
		snprintf(out, 64, "%s", file_users[i % nfile_users]);
	else {
		/* the format was checked in bench_users_load: one %d, nothing else */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
		snprintf(out, 64, o->user_format, o->first + i % o->user_count);
#pragma GCC diagnostic pop
	}
}

const char *bench_password(const struct opts *o, int i)
{
	return o->users_file ? file_passwords[i % nfile_users] : o->password;
}

static void users_free(void)
{
	for (int i = 0; i < nfile_users; i++) {
		free(file_users[i]);
		explicit_bzero(file_passwords[i], strlen(file_passwords[i]));
		free(file_passwords[i]);
	}
	free(file_users);
	free(file_passwords);
}

/* ---------------------------------------------------------------- cluster */

int bench_kube(const struct opts *o, struct cfg *c, struct kube *k)
{
	memset(c, 0, sizeof *c);
	memset(k, 0, sizeof *k);
	if (!o->kube_url || !o->kube_token_file || !o->kube_ca)
		return -1;
	c->kube_api = xstrdup(o->kube_url);
	size_t n = strlen(c->kube_api);
	while (n && c->kube_api[n - 1] == '/')
		c->kube_api[--n] = '\0';
	c->kube_token_file = xstrdup(o->kube_token_file);
	c->kube_ca_file = xstrdup(o->kube_ca);
	c->namespace_ = xstrdup(o->namespace_);
	c->kube_timeout_ms = 10000;
	if (kube_init(k, c) < 0) {
		fprintf(stderr, "labvm-bench: cluster client: %s\n", k->msg);
		bench_kube_free(c, k);
		return -1;
	}
	return 0;
}

void bench_kube_free(struct cfg *c, struct kube *k)
{
	if (k->h)
		kube_cleanup(k);
	free(c->kube_api);
	free(c->kube_token_file);
	free(c->kube_ca_file);
	free(c->namespace_);
	memset(c, 0, sizeof *c);
}

long bench_count_lab_vms(const struct opts *o, struct kube *k)
{
	char *path = kube_path("virtualmachines", o->namespace_, NULL);
	char *sel = xasprintf("%s/lab-session=true", o->label_prefix);
	long n;
	long code = kube_count(k, path, sel, &n);
	free(sel);
	free(path);
	return code == 200 ? n : -1;
}

int bench_sim_profile(struct kube *k, const char *name, double time_scale, char *out_name, size_t n,
                      double *out_scale)
{
	cJSON *body = NULL, *res = NULL;
	long code;
	if (name) {
		body = jx_obj();
		jx_add_str(body, "profile", name);
		jx_add_num(body, "time_scale", time_scale);
		code = kube_call(k, "POST", "/_sim/profile", body, NULL, &res);
	} else {
		code = kube_get(k, "/_sim/profile", &res);
	}
	cJSON_Delete(body);
	const char *p = kj_str(res, "profile");
	const cJSON *ts = kj_get(res, "time_scale");
	int rc = code == 200 && p && cJSON_IsNumber(ts) ? 0 : -1;
	if (rc == 0) {
		if (out_name)
			snprintf(out_name, n, "%s", p);
		if (out_scale)
			*out_scale = ts->valuedouble;
	}
	cJSON_Delete(res);
	return rc;
}

/* ----------------------------------------------------------------- time */

double bench_parse_time(const char *s)
{
	struct tm tm;
	double frac = 0;
	char *end;

	if (!s)
		return NAN;
	memset(&tm, 0, sizeof tm);
	end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!end) {
		memset(&tm, 0, sizeof tm);
		end = strptime(s, "%Y-%m-%d %H:%M:%S", &tm);
	}
	if (!end)
		return NAN;
	if (*end == '.') {
		double scale = 0.1;
		end++;
		while (*end >= '0' && *end <= '9') {
			frac += (*end - '0') * scale;
			scale /= 10;
			end++;
		}
	}
	double off = 0;
	if (*end == 'Z') {
		end++;
	} else if (*end == '+' || *end == '-') {
		int sign = *end == '-' ? -1 : 1;
		int hh = 0, mm = 0;
		if (sscanf(end + 1, "%2d:%2d", &hh, &mm) < 1)
			return NAN;
		off = sign * (hh * 3600 + mm * 60);
		end += 1 + (strlen(end + 1) >= 5 && end[3] == ':' ? 5 : 2);
	} else {
		return NAN;
	}
	if (*end)
		return NAN;
	return (double)timegm(&tm) + frac - off;
}

void bench_fmt_time(double t, char out[32])
{
	long long msec = llround(t * 1000.0);
	time_t s = (time_t)(msec / 1000);
	struct tm tm;
	char tmp[96];
	gmtime_r(&s, &tm);
	snprintf(tmp, sizeof tmp, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
	         tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(msec % 1000));
	snprintf(out, 32, "%.31s", tmp);
}

void bench_copy(char *dst, size_t n, const char *src)
{
	size_t l = src ? strlen(src) : 0;
	if (!n)
		return;
	if (l >= n)
		l = n - 1;
	if (l)
		memcpy(dst, src, l);
	dst[l] = '\0';
}

/* ----------------------------------------------------------------- main */

int main(int argc, char **argv)
{
	struct opts o;
	int ci = -1, rc;

	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(argc < 2 ? stderr : stdout, -1);
		return argc < 2 ? 2 : 0;
	}
	for (size_t i = 0; i < NCMDS; i++)
		if (strcmp(argv[1], CMDS[i].name) == 0)
			ci = (int)i;
	if (ci < 0) {
		fprintf(stderr, "labvm-bench: unknown command %s\n", argv[1]);
		usage(stderr, -1);
		return 2;
	}
	memset(&o, 0, sizeof o);
	o.cmd_name = CMDS[ci].name;
	o.cmd = CMDS[ci].cmd;
	if (o.cmd != CMD_SELFTEST && o.cmd != CMD_PLOT)
		env_defaults(argc - 1, argv + 1);
	defaults(&o);
	if (parse(&o, ci, argc - 1, argv + 1) < 0) {
		opts_free(&o);
		return 2;
	}
	log_init("labvm-bench", LOG_WARN);
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "labvm-bench: curl_global_init failed\n");
		opts_free(&o);
		return 1;
	}
	bench_signals();
	rc = CMDS[ci].fn(&o);
	curl_global_cleanup();
	users_free();
	opts_free(&o);
	return rc;
}
