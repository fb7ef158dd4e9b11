/* main.c - labvm-bench: the subcommands (CMDS), the usage text and main.
 * Options are opts.c; the students' credentials users.c; the cluster and
 * simulator helpers cluster.c; the stop flag stop.c. Nothing calls in here. */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "log.h"

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
	opts_usage(f, CMDS[cmd_index].cmd);
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
		opts_env_defaults(argc - 1, argv + 1);
	opts_defaults(&o);
	int pr = opts_parse(&o, argc - 1, argv + 1);
	if (pr != 0) {
		if (pr > 0)
			usage(stdout, ci); /* --help */
		opts_free(&o);
		return pr > 0 ? 0 : 2;
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
	bench_users_free();
	opts_free(&o);
	return rc;
}
