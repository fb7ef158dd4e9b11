/* bench.h - labvm-bench: readiness distributions and load figures.
 *
 * One binary, one subcommand per figure (main.c's CMDS; README.md):
 *
 *   readiness   N students start sessions through the HTTP API; per stage times
 *   report      the same distributions from the session rows in PostgreSQL
 *   api         GET load through the front end (req/s, latency)
 *   burst       M users press start at once against capacity C (overshoot)
 *   console     relay throughput and keystroke latency, bridge vs direct
 *   plot        the readiness outputs again from earlier JSON files
 *   class       a class against a full lab: the waiting line beside retry-only
 *
 * Threads: the workers of one subcommand each own their libcurl handle (and
 * kube client); shared results are guarded by the subcommand's own mutex.
 * OOM policy: abort (xmalloc, jsonx): a CLI has nothing to save. */
#ifndef LABVM_BENCH_BENCH_H
#define LABVM_BENCH_BENCH_H

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "config.h"
#include "kube.h"
#include "util.h"

/* ---------------------------------------------------------------- options */

enum bench_cmd {
	CMD_READINESS = 1 << 0,
	CMD_REPORT = 1 << 1,
	CMD_API = 1 << 2,
	CMD_BURST = 1 << 3,
	CMD_CONSOLE = 1 << 4,
	CMD_SELFTEST = 1 << 5,
	CMD_PLOT = 1 << 6,
	CMD_CLASS = 1 << 7,
};

/* Filled from the option table (OPTS in opts.c): one row per flag, with its
 * default, bounds and --help line. */
struct opts {
	const char *cmd_name;
	enum bench_cmd cmd;

	/* targets (defaults from the LABVM_* environment of a stack's env file) */
	char *url;             /* LABVM_URL: the front end */
	char *console_url;     /* LABVM_CONSOLE_URL: the bridge itself */
	char *kube_url;        /* LABVM_KUBE_URL */
	char *kube_token_file; /* LABVM_KUBE_ADMIN_TOKEN_FILE (read access to VMs, VMIs) */
	char *kube_ca;         /* LABVM_KUBE_CA */
	char *namespace_;      /* LABVM_NAMESPACE */
	char *label_prefix;    /* labvm.io */
	char *database;        /* LABVM_DATABASE: SECRET (may hold a password) */
	char *environment;     /* LABVM_ENVIRONMENT */

	/* students */
	char *user_format; /* printf format with one %d, "student%d" */
	int first;         /* first user number */
	int user_count;    /* users available from first on */
	char *users_file;  /* "user:password" lines instead of the format */
	char *password;    /* SECRET: from --password-file or LABVM_PASSWORD */

	/* output */
	char *out_dir;
	char *name; /* file stem in out_dir */
	int quiet;  /* no progress line */

	/* readiness */
	char *lessons_arg;
	char **lessons;
	int nlessons;
	int n; /* sessions per lesson */
	int concurrency;
	double poll_s;
	double timeout_s;    /* per session, from the admitted POST */
	double retry_wait_s; /* after 503 capacity_full */
	double admission_timeout_s;
	int end_existing;  /* end a bench user's open session before starting */
	char *sim_profile; /* simulator only: POST /_sim/profile for the run */
	double sim_time_scale;
	int pool;            /* readiness --pool P: cold beside a warm pool of P (poolbench.c) */
	int class_users;     /* ... --class U: U presses at once against that pool */
	char *operator_name; /* ... the operator who warms the pool */

	/* report */
	char *since, *until;

	/* api */
	double duration_s;
	double warmup_s;
	int connections;
	char *targets; /* "status,lessons" */
	int sessions;  /* ready sessions behind "status" */
	char *lesson;  /* lesson of helper sessions (api, burst, console) */

	/* burst */
	int users;
	int capacity;
	double sample_ms;
	int rounds;
	double settle_s;

	/* console */
	int runs;
	int mb;
	int keys;
	char *paths; /* "direct,bridge,frontend" */
	int rss;     /* also the bridge's memory with 1,000 consoles */

	/* plot */
	char *in; /* comma-separated JSON files */

	/* class (class.c): a class against a full lab, the line beside retry-only */
	int students;
	char *hold;           /* session length: "uniform:MIN:MAX", "exp:MEAN", "fixed:S" */
	double spread_s;      /* presses within this many seconds */
	int seed;             /* the class (press times, holds, reactions) */
	char *mode;           /* both | line | retry */
	double reaction_s;    /* retry-only: 0..this after Retry-After */
	double retry_after_s; /* retry-only: wait this instead of Retry-After (0: the server's) */
	double place_poll_s;  /* the line: poll the place every (--poll) */
	/* class walk-aways (issue #28): a share of the students stops working at a
	 * random moment of their hold and never comes back (the page stays open);
	 * with --idle-lesson the class runs in line mode twice, idle ending off
	 * (--lesson) and on (--idle-lesson) */
	double walkaway;   /* 0..1 */
	char *idle_lesson; /* the same lesson with idle_minutes */
	double
	    activity_s; /* a working student's activity every (typing, as the bridge records it) */
};

/* opts.c: a stack's env file (--env, $LABVM_ENV_FILE or .demo/env) into the
 * environment, unless --help; then every option's default (its environment
 * variable when set, else the table's); then the command line for o->cmd:
 * 0 ok, -1 a bad option (message on stderr), 1 --help was asked. */
void opts_env_defaults(int argc, char **argv);
void opts_defaults(struct opts *o);
int opts_parse(struct opts *o, int argc, char **argv);
/* The --help lines of the options of cmd. */
void opts_usage(FILE *f, enum bench_cmd cmd);
void opts_free(struct opts *o);

/* ------------------------------------------------------------------- stop */

/* stop.c: set by SIGINT/SIGTERM: workers stop starting, end what they started. */
extern volatile sig_atomic_t bench_stop;
void bench_signals(void);
/* Sleep s seconds, in small steps; returns early (1) when bench_stop is set. */
int bench_sleep(double s);

/* ------------------------------------------------------------ API client */

struct bapi {
	CURL *h;
	char *base; /* front end URL, no trailing slash */
	char *user;
	char *password; /* SECRET */
	struct buf body;
	char err[CURL_ERROR_SIZE];
	double ms;                                           /* client-side time of the last call */
	double st_app_ms, st_db_ms, st_kube_ms, st_agent_ms; /* Server-Timing, NAN if absent */
	long retry_after; /* Retry-After of the last answer, -1 if none */
	char msg[512];    /* transport error of the last call */
};

int bapi_init(struct bapi *a, const char *base, const char *user, const char *password);
void bapi_cleanup(struct bapi *a);
/* One call; path starts with "/". Returns the HTTP status or 0 when the front
 * end could not be reached (a->msg). *out (if out) gets the parsed body or NULL. */
long bapi_call(struct bapi *a, const char *method, const char *path, const cJSON *body,
               cJSON **out);
/* "error" code of an error answer (borrowed) or "". */
const char *bapi_error_code(const cJSON *o);

/* A helper session: a ready lab that a benchmark works on (api, console). */
struct helper {
	int uidx;      /* the user (bench_user), set by the caller */
	char user[64]; /* filled by the start */
	char sid[40];
	char vm[80];
	int ours;  /* started by us: end it afterwards */
	int ready; /* the start succeeded */
};

/* A ready session of lesson for user h->uidx: a new one, or the user's open
 * one (left open) unless --end-existing; waits for capacity and readiness up
 * to timeout s. Through a (that user's client), or a client of its own when a
 * is NULL. 0 ok, -1 (message on stderr). */
int bench_helper_start(const struct opts *o, struct bapi *a, const char *lesson, struct helper *h,
                       double timeout);
/* n of them at once (a thread and client each, 600 s): 0 when all are ready. */
int bench_helpers_start(const struct opts *o, const char *lesson, struct helper *h, int n);
/* End it if we started it (a: as for the start); 0 ok or not ours, -1 failed
 * (3 tries). */
int bench_helper_end(const struct opts *o, struct bapi *a, struct helper *h);

/* users.c: user i (0-based, from --first / the users file) and its password (borrowed) */
int bench_users_load(struct opts *o);
int bench_user_count(const struct opts *o);
void bench_user(const struct opts *o, int i, char out[64]);
const char *bench_password(const struct opts *o, int i);
void bench_users_free(void);

/* cluster.c: a kube client on the admin (read) token: 0 ok, -1 not configured / failed. */
int bench_kube(const struct opts *o, struct cfg *c, struct kube *k);
void bench_kube_free(struct cfg *c, struct kube *k);
/* Count VirtualMachines labelled <prefix>/lab-session=true; -1 on failure. */
long bench_count_lab_vms(const struct opts *o, struct kube *k);

/* Simulator only: set / read the delay profile (POST|GET /_sim/profile).
 * 0 ok, -1 not a simulator or failed. name NULL: read only. */
int bench_sim_profile(struct kube *k, const char *name, double time_scale, char *out_name, size_t n,
                      double *out_scale);

/* ------------------------------------------------------------------ stats */

struct stats {
	size_t n;
	double min, p25, p50, p75, p90, p99, max, mean, stdev;
};

/* Percentile p (0..100) of a sorted array, linear interpolation between
 * closest ranks (rank = p/100 * (n-1), as numpy's default). n >= 1. */
double stats_pct(const double *sorted, size_t n, double p);
/* Stats of the finite values in v (copied and sorted; NANs skipped). stdev is
 * the sample standard deviation (n-1); 0 when n < 2. n == 0: everything NAN. */
void stats_compute(const double *v, size_t n, struct stats *s);
int stats_cmp_double(const void *a, const void *b);

/* Growable array of doubles. */
struct dvec {
	double *v;
	size_t n, cap;
};
void dvec_push(struct dvec *d, double x);
void dvec_free(struct dvec *d);

/* --------------------------------------------------------------- progress */

struct progress {
	const char *what;
	size_t total;
	double t0;
	double last_print;
	int tty;
	int quiet;
	int printed;
};

void progress_start(struct progress *p, const char *what, size_t total, int quiet);
/* Print the live line (done/total, elapsed, ETA, extra); rate-limited unless force. */
void progress_show(struct progress *p, size_t done, const char *extra, int force);
void progress_end(struct progress *p);

/* ------------------------------------------------- readiness samples */

/* One session start, from readiness (client and server side) or report
 * (server side only). Times in seconds; NAN when the stage was not reached
 * or not measured. */
struct rsample {
	int idx;
	char user[64];
	char lesson[64];
	char session_id[40];
	int http_status;       /* of the admitted (or last) POST; 0 = unreachable */
	char start_error[40];  /* error code of a refused start */
	int admission_retries; /* 503 capacity_full answers before admission */
	double admission_wait_s;
	char disk_source[24];
	char fallback_reason[24];
	char state[16]; /* final state as seen */
	char stage[16]; /* last stage (the failure stage when failed) */
	char end_reason[16];
	char error[256];
	char created_at[32]; /* RFC 3339, server clock */
	int polls;
	double post_app_ms; /* Server-Timing app;dur of the admitted POST */
	/* server side: the session's own timestamps minus created_at */
	double s_submitted, s_running, s_ready, s_failed;
	/* cluster side: VMI Running phaseTransitionTimestamp minus created_at */
	double k_running;
	/* client side: from sending the admitted POST (monotonic clock) */
	double c_submitted, c_running, c_ready, c_failed;
};

enum metric_id {
	M_S_SUBMITTED,
	M_S_RUNNING,
	M_S_READY,
	M_S_BOOT, /* running -> ready */
	M_K_RUNNING,
	M_C_SUBMITTED,
	M_C_RUNNING,
	M_C_READY,
	M_COUNT
};

struct metric {
	const char *key;   /* JSON/CSV name */
	const char *side;  /* server | cluster | client */
	const char *label; /* table text */
};
/* metric.c */
extern const struct metric bench_metrics[M_COUNT];
double rsample_metric(const struct rsample *s, enum metric_id m);
/* 1 when every reached stage is in order (request <= submitted <= running <= ready),
 * on both clocks. */
int rsample_order_ok(const struct rsample *s);

/* Samples grouped by (lesson, disk source). */
struct rgroup {
	char lesson[64];
	char disk_source[24];
	size_t n, ready, failed, refused, other;
	struct stats st[M_COUNT];
	char fail_stages[160]; /* "booting:2 setting_up:1" */
};

struct rset {
	struct rsample *s;
	size_t n, cap;
	struct rgroup *g;
	size_t ng;
	int order_violations;
	/* run description, in every output */
	cJSON *meta; /* owned */
};

/* A new sample (all times NAN), appended. */
struct rsample *rset_add(struct rset *r);
void rsample_init(struct rsample *s, int idx);
void rset_free(struct rset *r);
/* Group and compute the stats. */
void rset_summarize(struct rset *r);
/* The table on stdout. show_client: the client/cluster rows too. */
void rset_print(const struct rset *r, FILE *f, int show_client);
/* DIR/STEM.csv (one row per sample), .json (meta, summary, samples), .svg;
 * prints the paths. 0 ok, -1 (message on stderr). */
int rset_write(const struct rset *r, const char *dir, const char *stem, const char *title);

/* SVG: box plot (p25-p75, whiskers min-max, median, samples as dots) per
 * stage and group, one seconds axis per stage (log scale when the values span
 * more than a decade). Self-contained, no scripts. */
int svg_write_rset(const struct rset *r, const char *path, const char *title);

/* text.c: RFC 3339 "YYYY-MM-DDTHH:MM:SS[.fff]Z" (or +00:00) -> epoch seconds; NAN if bad. */
double bench_parse_time(const char *s);
/* "2026-11-29T16:09:09.144Z" of epoch seconds (out: 32 bytes). */
void bench_fmt_time(double t, char out[32]);
/* Copy src (NULL = "") into dst of size n, truncated at n-1 bytes. */
void bench_copy(char *dst, size_t n, const char *src);
/* snprintf that cuts quietly at the buffer's end */
__attribute__((format(printf, 3, 4))) void bench_fmt_cut(char *out, size_t n, const char *fmt, ...);

/* ----------------------------------------------------------------- output */

/* mkdir -p */
int bench_mkdirs(const char *dir);
/* root, indented, into path; 0 ok, -1 (message on stderr). */
int bench_write_json(const char *path, const cJSON *root);
/* OUT/NAME.json (--out, --name), and "figures: PATH" on stdout. */
int bench_write_figures(const struct opts *o, const cJSON *root);
/* x rounded to `digits` decimals. */
double bench_round(double x, int digits);
/* k: x rounded to `digits` decimals, or null when x is not finite. */
void bench_jnum(cJSON *o, const char *k, double x, int digits);
/* {n, min, [p25,] p50, [p75,] p90, p99, max, mean, stdev}, rounded. */
cJSON *bench_stats_json(const struct stats *s, int digits, int quartiles);

/* ------------------------------------------------------------------ class */

/* `labvm-bench class` (class.c runs it, class_figures.c sums it up) */
struct crun;

/* One student of the class: who, when they press, how long they keep the lab */
struct student {
	struct crun *r;
	int i;
	char user[64];
	double offset, hold; /* s: the press after the start signal, the lab kept */
	uint64_t rng;        /* reactions */
	/* results (wall clock, s; NAN when not reached) */
	double pressed, admitted, seen;
	int tries;
	int joined;
	long position;
	double estimate, bound;
	char sid[40];
	char err[200];
	/* walk-aways (issue #28) */
	int walks;        /* this student walks away */
	double walk_frac; /* ... at this share of the hold */
	double left;      /* wall: stopped working (walked away, or ended the lab) */
	int mistake;      /* a working student's lab ended for idleness */
	int idle_end;     /* the session ended with end_reason idle */
};

/* One mode's run of the class (class.c run_mode) */
struct crun {
	const struct opts *o;
	const char *lesson;
	int line;
	int idle;  /* -1: no walk-away pair; 0 idle ending off, 1 on */
	double t0; /* wall: the start signal */
	pthread_barrier_t bar;
	/* sampler */
	volatile int sampling;
	long most, samples, sample_failures;
};

/* The figures of one mode over its students */
struct msum {
	const char *mode, *shown;
	int got, errors;
	struct stats wait, abserr;
	double wait_p95, err_p95;
	double presses, signed_med;
	long inv, pairs, most;
	int joined, estimated, bound_checked, bound_held;
	char first_err[200];
	/* walk-aways (issue #28) */
	int walkaways, idle_ends, mistakes;
	double utilisation; /* seat-seconds worked / seat-seconds available */
};

void class_summarize(const struct crun *r, struct student *st, int n, struct msum *m);
/* the mode's figures and every student's, times from t0 (the start signal) */
cJSON *class_mode_json(const struct msum *m, const struct student *st, int n, double t0);
/* the table, one column per mode */
void class_print_table(const struct msum *m, int nm, const struct opts *o);

/* ------------------------------------------------------------- commands */

int cmd_readiness(struct opts *o);
/* readiness --pool: press-to-ready with a warm pool beside cold starts (poolbench.c);
 * k: cluster read access for --class's VM count, or NULL. */
int bench_pool_run(struct opts *o, struct kube *k, const char *profile);
int cmd_report(struct opts *o);
int cmd_api(struct opts *o);
int cmd_burst(struct opts *o);
int cmd_console(struct opts *o);
int cmd_selftest(struct opts *o);
int cmd_plot(struct opts *o);
int cmd_class(struct opts *o);

#endif
