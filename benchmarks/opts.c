/* opts.c - labvm-bench's options: one table (OPTS) with each flag's field,
 * type, default (the LABVM_* environment first, so `. .demo/env;
 * labvm-bench readiness` just works, or a stack's env file), bounds, the
 * subcommands it applies to and its --help line; parsing the command line
 * against it. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

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

void opts_usage(FILE *f, enum bench_cmd cmd)
{
	for (size_t i = 0; i < NOPTS; i++) {
		char left[64];
		if (!(OPTS[i].cmds & cmd))
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

void opts_env_defaults(int argc, char **argv)
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

void opts_defaults(struct opts *o)
{
	for (size_t i = 0; i < NOPTS; i++) {
		const char *e = OPTS[i].env ? getenv(OPTS[i].env) : NULL;
		const char *v = e && *e ? e : OPTS[i].def;
		if (v && set_opt(o, &OPTS[i], v, 0) < 0)
			abort(); /* a default outside its own bounds: the table is wrong */
	}
}

int opts_parse(struct opts *o, int argc, char **argv)
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
		if (d->type == T_HELP)
			return 1;
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

void opts_free(struct opts *o)
{
	for (size_t i = 0; i < NOPTS; i++)
		if (OPTS[i].type == T_STR || OPTS[i].type == T_SECRET || OPTS[i].type == T_FILE)
			set_str(o, &OPTS[i], NULL);
	for (int i = 0; i < o->nlessons; i++)
		free(o->lessons[i]);
	free(o->lessons);
}
