/* main.c - labvm-bench: subcommands, options (defaults from the LABVM_*
 * environment, so `. .demo/env; labvm-bench readiness` just works), signals,
 * the students' credentials, and the cluster and simulator helpers. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "jsonx.h"
#include "log.h"

volatile sig_atomic_t bench_stop;

/* ------------------------------------------------------------- options */

enum {
	O_URL = 1000,
	O_CONSOLE_URL,
	O_KUBE_URL,
	O_KUBE_TOKEN_FILE,
	O_KUBE_CA,
	O_NAMESPACE,
	O_LABEL_PREFIX,
	O_DATABASE,
	O_ENVIRONMENT,
	O_USER_FORMAT,
	O_FIRST,
	O_USER_COUNT,
	O_USERS_FILE,
	O_PASSWORD_FILE,
	O_OUT,
	O_NAME,
	O_QUIET,
	O_LESSONS,
	O_N,
	O_CONCURRENCY,
	O_POLL,
	O_TIMEOUT,
	O_RETRY_WAIT,
	O_ADMISSION_TIMEOUT,
	O_END_EXISTING,
	O_SIM_PROFILE,
	O_TIME_SCALE,
	O_SINCE,
	O_UNTIL,
	O_DURATION,
	O_WARMUP,
	O_CONNECTIONS,
	O_TARGETS,
	O_SESSIONS,
	O_LESSON,
	O_USERS,
	O_CAPACITY,
	O_SAMPLE_MS,
	O_ROUNDS,
	O_SETTLE,
	O_RUNS,
	O_MB,
	O_KEYS,
	O_PATHS,
	O_RSS,
	O_IN,
	O_ENV,
	O_HELP,
};

#define ALL                                                                                        \
	(CMD_READINESS | CMD_REPORT | CMD_API | CMD_BURST | CMD_CONSOLE | CMD_SELFTEST | CMD_PLOT)
#define HTTP (CMD_READINESS | CMD_API | CMD_BURST | CMD_CONSOLE)
#define KUBE (CMD_READINESS | CMD_BURST | CMD_CONSOLE)
#define RSET (CMD_READINESS | CMD_REPORT | CMD_PLOT)

struct optdef {
	const char *name;
	int has_arg;
	int id;
	unsigned cmds;
	const char *arg;
	const char *help;
};

static const struct optdef OPTS[] = {
    {"env", 1, O_ENV, ALL & ~CMD_SELFTEST & ~CMD_PLOT, "FILE",
     "a stack's env file for the defaults below [.demo/env when LABVM_URL is unset]"},
    {"url", 1, O_URL, HTTP, "URL", "front end base URL [$LABVM_URL]"},
    {"users-file", 1, O_USERS_FILE, HTTP, "FILE",
     "\"user:password\" lines (instead of the next four)"},
    {"user-format", 1, O_USER_FORMAT, HTTP, "FMT", "user names, one %d [student%d]"},
    {"first", 1, O_FIRST, HTTP, "N", "first user number [1]"},
    {"user-count", 1, O_USER_COUNT, HTTP, "N", "users from --first on [200]"},
    {"password-file", 1, O_PASSWORD_FILE, HTTP, "FILE", "the users' password [$LABVM_PASSWORD]"},
    {"kube-url", 1, O_KUBE_URL, KUBE, "URL", "cluster API, read access [$LABVM_KUBE_URL]"},
    {"kube-token-file", 1, O_KUBE_TOKEN_FILE, KUBE, "FILE",
     "bearer token [$LABVM_KUBE_ADMIN_TOKEN_FILE]"},
    {"kube-ca", 1, O_KUBE_CA, KUBE, "FILE", "cluster CA [$LABVM_KUBE_CA]"},
    {"namespace", 1, O_NAMESPACE, KUBE, "NS", "lab namespace [$LABVM_NAMESPACE or labs]"},
    {"label-prefix", 1, O_LABEL_PREFIX, KUBE, "P", "label prefix [labvm.io]"},
    {"console-url", 1, O_CONSOLE_URL, CMD_CONSOLE, "URL", "the bridge itself [$LABVM_CONSOLE_URL]"},
    {"database", 1, O_DATABASE, CMD_REPORT, "CONNINFO", "libpq conninfo [$LABVM_DATABASE]"},
    {"environment", 1, O_ENVIRONMENT, CMD_REPORT, "ENV",
     "sessions of this environment [$LABVM_ENVIRONMENT]"},
    {"out", 1, O_OUT, RSET | CMD_API | CMD_BURST | CMD_CONSOLE | CMD_SELFTEST, "DIR",
     "output folder [labvm-bench-out]"},
    {"name", 1, O_NAME, RSET | CMD_API | CMD_BURST | CMD_CONSOLE, "STEM",
     "output file stem [the subcommand]"},
    {"quiet", 0, O_QUIET, ALL, NULL, "no live progress line"},
    {"lessons", 1, O_LESSONS, RSET, "A,B", "lessons (readiness: interleaved; report: filter)"},
    {"n", 1, O_N, CMD_READINESS, "N", "sessions per lesson [10]"},
    {"concurrency", 1, O_CONCURRENCY, CMD_READINESS, "C", "sessions starting at once [4]"},
    {"poll", 1, O_POLL, CMD_READINESS, "S", "poll interval, like the page [1.0]"},
    {"timeout", 1, O_TIMEOUT, CMD_READINESS, "S", "give up on a session after [1200]"},
    {"retry-wait", 1, O_RETRY_WAIT, CMD_READINESS, "S",
     "wait after capacity_full, at most Retry-After [2]"},
    {"admission-timeout", 1, O_ADMISSION_TIMEOUT, CMD_READINESS, "S",
     "give up waiting for capacity [900]"},
    {"end-existing", 0, O_END_EXISTING, CMD_READINESS | CMD_CONSOLE | CMD_API, NULL,
     "end a bench user's open session first"},
    {"sim-profile", 1, O_SIM_PROFILE, CMD_READINESS, "NAME",
     "simulator only: delay profile for the run, restored after"},
    {"time-scale", 1, O_TIME_SCALE, CMD_READINESS, "F", "simulator only: with --sim-profile [1.0]"},
    {"since", 1, O_SINCE, CMD_REPORT, "T", "RFC 3339 time or 30m/24h/7d ago [24h]"},
    {"until", 1, O_UNTIL, CMD_REPORT, "T", "RFC 3339 time or 30m/24h/7d ago [now]"},
    {"duration", 1, O_DURATION, CMD_API, "S", "seconds per target [10]"},
    {"warmup", 1, O_WARMUP, CMD_API, "S", "not counted, before each target [1]"},
    {"connections", 1, O_CONNECTIONS, CMD_API, "C", "keep-alive connections [16]"},
    {"targets", 1, O_TARGETS, CMD_API, "LIST", "status,lessons,current,healthz [status,lessons]"},
    {"sessions", 1, O_SESSIONS, CMD_API, "N", "ready sessions polled by \"status\" [2]"},
    {"lesson", 1, O_LESSON, CMD_API | CMD_BURST | CMD_CONSOLE, "ID",
     "lesson of the sessions [debian-golden; console: linux-basics]"},
    {"users", 1, O_USERS, CMD_BURST, "M", "users pressing start at once [200]"},
    {"capacity", 1, O_CAPACITY, CMD_BURST, "C",
     "expected vm_capacity [the server's capacity_full answers]"},
    {"sample-ms", 1, O_SAMPLE_MS, CMD_BURST, "MS", "VM count sampling period [20]"},
    {"rounds", 1, O_ROUNDS, CMD_BURST, "R", "bursts, one after the other [1]"},
    {"settle", 1, O_SETTLE, CMD_BURST, "S", "keep sampling after the last answer [3]"},
    {"runs", 1, O_RUNS, CMD_CONSOLE, "N", "interleaved runs per path [3]"},
    {"mb", 1, O_MB, CMD_CONSOLE, "MB", "console output per throughput run [10]"},
    {"keys", 1, O_KEYS, CMD_CONSOLE, "N", "keystrokes per latency run [100]"},
    {"paths", 1, O_PATHS, CMD_CONSOLE, "LIST", "direct,bridge,frontend [all three]"},
    {"rss", 0, O_RSS, CMD_CONSOLE, NULL, "also benchmarks/console-bench.py --only rss"},
    {"in", 1, O_IN, CMD_PLOT, "F.json,..", "readiness or report JSON files (merged)"},
    {"help", 0, O_HELP, ALL, NULL, "this text"},
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

static char *env_or(const char *name, const char *def)
{
	const char *v = getenv(name);
	return v && *v ? xstrdup(v) : def ? xstrdup(def) : NULL;
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

static void defaults(struct opts *o)
{
	o->url = env_or("LABVM_URL", NULL);
	o->console_url = env_or("LABVM_CONSOLE_URL", NULL);
	o->kube_url = env_or("LABVM_KUBE_URL", NULL);
	o->kube_token_file = env_or("LABVM_KUBE_ADMIN_TOKEN_FILE", NULL);
	o->kube_ca = env_or("LABVM_KUBE_CA", NULL);
	o->namespace_ = env_or("LABVM_NAMESPACE", "labs");
	o->label_prefix = xstrdup("labvm.io");
	o->database = env_or("LABVM_DATABASE", NULL);
	o->environment = env_or("LABVM_ENVIRONMENT", NULL);
	o->user_format = xstrdup("student%d");
	o->first = 1;
	o->user_count = 200;
	o->password = env_or("LABVM_PASSWORD", NULL);
	o->out_dir = xstrdup("labvm-bench-out");
	o->n = 10;
	o->concurrency = 4;
	o->poll_s = 1.0;
	o->timeout_s = 1200;
	o->retry_wait_s = 2;
	o->admission_timeout_s = 900;
	o->sim_time_scale = 1.0;
	o->since = xstrdup("24h");
	o->duration_s = 10;
	o->warmup_s = 1;
	o->connections = 16;
	o->targets = xstrdup("status,lessons");
	o->sessions = 2;
	o->users = 200;
	o->capacity = 0;
	o->sample_ms = 20;
	o->rounds = 1;
	o->settle_s = 3;
	o->runs = 3;
	o->mb = 10;
	o->keys = 100;
	o->paths = xstrdup("direct,bridge,frontend");
}

static void set_str(char **dst, const char *v)
{
	free(*dst);
	*dst = xstrdup(v);
}

static int parse(struct opts *o, int ci, int argc, char **argv)
{
	struct option lo[NOPTS + 1];
	memset(lo, 0, sizeof lo);
	for (size_t i = 0; i < NOPTS; i++) {
		lo[i].name = OPTS[i].name;
		lo[i].has_arg = OPTS[i].has_arg ? required_argument : no_argument;
		lo[i].val = OPTS[i].id;
	}
	optind = 1;
	opterr = 0;
	for (;;) {
		int li = -1;
		int c = getopt_long(argc, argv, "", lo, &li);
		if (c == -1)
			break;
		if (c == '?' || c == ':') {
			fprintf(stderr, "labvm-bench %s: unknown option or missing value: %s\n",
			        o->cmd_name, argv[optind - 1]);
			return -1;
		}
		const struct optdef *d = NULL;
		for (size_t i = 0; i < NOPTS; i++)
			if (OPTS[i].id == c)
				d = &OPTS[i];
		if (!d || !(d->cmds & o->cmd)) {
			fprintf(stderr, "labvm-bench %s: --%s does not apply here\n", o->cmd_name,
			        d ? d->name : "?");
			return -1;
		}
		const char *v = optarg;
		double x;
		int rc = 0;
		switch (c) {
		case O_URL:
			set_str(&o->url, v);
			break;
		case O_CONSOLE_URL:
			set_str(&o->console_url, v);
			break;
		case O_KUBE_URL:
			set_str(&o->kube_url, v);
			break;
		case O_KUBE_TOKEN_FILE:
			set_str(&o->kube_token_file, v);
			break;
		case O_KUBE_CA:
			set_str(&o->kube_ca, v);
			break;
		case O_NAMESPACE:
			set_str(&o->namespace_, v);
			break;
		case O_LABEL_PREFIX:
			set_str(&o->label_prefix, v);
			break;
		case O_DATABASE:
			set_str(&o->database, v);
			break;
		case O_ENVIRONMENT:
			set_str(&o->environment, v);
			break;
		case O_USER_FORMAT:
			set_str(&o->user_format, v);
			break;
		case O_FIRST:
			rc = int_arg(d->name, v, 0, 1000000000, &o->first);
			break;
		case O_USER_COUNT:
			rc = int_arg(d->name, v, 1, 1000000, &o->user_count);
			break;
		case O_USERS_FILE:
			set_str(&o->users_file, v);
			break;
		case O_PASSWORD_FILE: {
			char *p = read_secret_file(v);
			if (!p)
				return -1;
			free(o->password);
			o->password = p;
			break;
		}
		case O_OUT:
			set_str(&o->out_dir, v);
			break;
		case O_NAME:
			set_str(&o->name, v);
			break;
		case O_QUIET:
			o->quiet = 1;
			break;
		case O_LESSONS:
			set_str(&o->lessons_arg, v);
			break;
		case O_N:
			rc = int_arg(d->name, v, 1, 100000, &o->n);
			break;
		case O_CONCURRENCY:
			rc = int_arg(d->name, v, 1, 1000, &o->concurrency);
			break;
		case O_POLL:
			rc = num_arg(d->name, v, 0.01, 60, &o->poll_s);
			break;
		case O_TIMEOUT:
			rc = num_arg(d->name, v, 1, 86400, &o->timeout_s);
			break;
		case O_RETRY_WAIT:
			rc = num_arg(d->name, v, 0.01, 600, &o->retry_wait_s);
			break;
		case O_ADMISSION_TIMEOUT:
			rc = num_arg(d->name, v, 0, 86400, &o->admission_timeout_s);
			break;
		case O_END_EXISTING:
			o->end_existing = 1;
			break;
		case O_SIM_PROFILE:
			set_str(&o->sim_profile, v);
			break;
		case O_TIME_SCALE:
			rc = num_arg(d->name, v, 0.001, 1000, &o->sim_time_scale);
			break;
		case O_SINCE:
			set_str(&o->since, v);
			break;
		case O_UNTIL:
			set_str(&o->until, v);
			break;
		case O_DURATION:
			rc = num_arg(d->name, v, 0.1, 86400, &o->duration_s);
			break;
		case O_WARMUP:
			rc = num_arg(d->name, v, 0, 3600, &o->warmup_s);
			break;
		case O_CONNECTIONS:
			rc = int_arg(d->name, v, 1, 1000, &o->connections);
			break;
		case O_TARGETS:
			set_str(&o->targets, v);
			break;
		case O_SESSIONS:
			rc = int_arg(d->name, v, 1, 1000, &o->sessions);
			break;
		case O_LESSON:
			set_str(&o->lesson, v);
			break;
		case O_USERS:
			rc = int_arg(d->name, v, 1, 100000, &o->users);
			break;
		case O_CAPACITY:
			rc = int_arg(d->name, v, 1, 100000, &o->capacity);
			break;
		case O_SAMPLE_MS:
			rc = num_arg(d->name, v, 1, 10000, &o->sample_ms);
			break;
		case O_ROUNDS:
			rc = int_arg(d->name, v, 1, 1000, &o->rounds);
			break;
		case O_SETTLE:
			rc = num_arg(d->name, v, 0, 600, &x), o->settle_s = x;
			break;
		case O_RUNS:
			rc = int_arg(d->name, v, 1, 1000, &o->runs);
			break;
		case O_MB:
			rc = int_arg(d->name, v, 1, 10000, &o->mb);
			break;
		case O_KEYS:
			rc = int_arg(d->name, v, 1, 100000, &o->keys);
			break;
		case O_PATHS:
			set_str(&o->paths, v);
			break;
		case O_RSS:
			o->rss = 1;
			break;
		case O_IN:
			set_str(&o->in, v);
			break;
		case O_ENV:
			break; /* read before the defaults: see load_env_file */
		case O_HELP:
			usage(stdout, ci);
			exit(0);
		default:
			return -1;
		}
		if (rc < 0)
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
	char **strs[] = {&o->url,         &o->console_url, &o->kube_url,     &o->kube_token_file,
	                 &o->kube_ca,     &o->namespace_,  &o->label_prefix, &o->environment,
	                 &o->user_format, &o->users_file,  &o->out_dir,      &o->name,
	                 &o->lessons_arg, &o->sim_profile, &o->since,        &o->until,
	                 &o->targets,     &o->lesson,      &o->paths,        &o->in};
	for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
		free(*strs[i]);
		*strs[i] = NULL;
	}
	if (o->password) {
		explicit_bzero(o->password, strlen(o->password));
		free(o->password);
	}
	if (o->database) {
		explicit_bzero(o->database, strlen(o->database));
		free(o->database);
	}
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
	cJSON *list = NULL;
	long code = kube_list(k, path, sel, &list);
	const cJSON *items = kj_get(list, "items");
	long n = code == 200 && cJSON_IsArray(items) ? cJSON_GetArraySize(items) : -1;
	cJSON_Delete(list);
	free(sel);
	free(path);
	return n;
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

int bench_mkdirs(const char *dir)
{
	char *p = xstrdup(dir);
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			goto fail;
		*s = '/';
	}
	if (mkdir(p, 0755) < 0 && errno != EEXIST)
		goto fail;
	free(p);
	return 0;
fail:
	fprintf(stderr, "labvm-bench: cannot create %s: %s\n", p, strerror(errno));
	free(p);
	return -1;
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
