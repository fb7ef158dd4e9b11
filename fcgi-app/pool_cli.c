/* labvm-pool - the warm pool from the command line (issue #18).
 *
 *   labvm-pool warm LESSON COUNT [--from TIME] [--until TIME]
 *        warm LESSON for a class: COUNT VMs from TIME (default now) until TIME
 *        (default two hours later); TIME is a timestamp PostgreSQL reads
 *        ("2026-12-02 09:00+09"), "now", or "+INTERVAL" from now ("+90 minutes")
 *   labvm-pool cancel ID       cancel a warm request (its VMs go at the next tick)
 *   labvm-pool status          the warm requests, the pool per lesson, its VMs (JSON)
 *   labvm-pool tick [--watch SECONDS]
 *        one pass of the pool's upkeep (the reaper does one every minute):
 *        stale and failed VMs replaced, starting ones checked, each pool filled
 *
 * Config from $LABVM_CONF, lessons from its lessons_dir. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "jsonx.h"
#include "lab.h"
#include "log.h"
#include "pool.h"

static volatile sig_atomic_t stopping;

static void on_term(int sig)
{
	(void)sig;
	stopping = 1;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: labvm-pool warm LESSON COUNT [--from TIME] [--until TIME]\n"
	           "       labvm-pool cancel ID\n"
	           "       labvm-pool status\n"
	           "       labvm-pool tick [--watch SECONDS]\n"
	           "  TIME: a timestamp (\"2026-12-02 09:00+09\"), \"now\", or \"+90 minutes\".\n"
	           "  Config from $LABVM_CONF (default " CFG_DEFAULT_PATH ").\n");
}

static int print_status(struct labctx *x)
{
	cJSON *o = pool_status_json(x);
	if (!o) {
		fprintf(stderr, "labvm-pool: database: %s\n", x->db.msg);
		return 1;
	}
	char *s = cJSON_Print(o);
	printf("%s\n", s);
	cJSON_free(s);
	cJSON_Delete(o);
	return 0;
}

static int tick(struct labctx *x, int watch)
{
	int rc = 0;
	do {
		struct pool_counts k = {0};
		double t0 = util_mono_s();
		rc = pool_tick(x, NULL, &k) < 0;
		printf("labvm-pool: tick created=%d ready=%d failed=%d stale=%d surplus=%d "
		       "vanished=%d full=%d held=%d errors=%d status=%s duration_ms=%.0f\n",
		       k.created, k.became_ready, k.failed, k.stale, k.surplus, k.vanished, k.full,
		       k.held, k.errors, rc ? "incomplete" : "ok", (util_mono_s() - t0) * 1000.0);
		fflush(stdout);
		for (int i = 0; watch && i < watch * 10 && !stopping; i++)
			usleep(100 * 1000);
	} while (watch && !stopping);
	return rc;
}

int main(int argc, char **argv)
{
	struct cfg cfg;
	struct lessons lessons;
	struct labctx x;
	char err[1024];
	int rc = 2;

	log_init("labvm-pool", LOG_INFO);
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	const char *cmd = argv[1];
	const char *from = NULL, *until = NULL;
	int watch = 0;
	char *pos[2] = {NULL, NULL};
	int npos = 0;
	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--from") == 0 && i + 1 < argc) {
			from = argv[++i];
		} else if (strcmp(argv[i], "--until") == 0 && i + 1 < argc) {
			until = argv[++i];
		} else if (strcmp(argv[i], "--watch") == 0 && i + 1 < argc) {
			char *end;
			long w = strtol(argv[++i], &end, 10);
			if (*end || w < 1 || w > 3600) {
				fprintf(stderr, "labvm-pool: --watch wants seconds (1..3600)\n");
				return 2;
			}
			watch = (int)w;
		} else if (npos < 2 && argv[i][0] != '-') {
			pos[npos++] = argv[i];
		} else {
			usage(stderr);
			return 2;
		}
	}
	int want = strcmp(cmd, "warm") == 0 ? 2 : strcmp(cmd, "cancel") == 0 ? 1 : 0;
	if ((strcmp(cmd, "warm") && strcmp(cmd, "cancel") && strcmp(cmd, "status") &&
	     strcmp(cmd, "tick")) ||
	    npos != want) {
		usage(stderr);
		return 2;
	}
	long count = 0, id = 0;
	if (want) {
		char *end;
		long v = strtol(pos[want - 1], &end, 10);
		if (*end || v < 1) {
			fprintf(stderr, "labvm-pool: '%s' is not a positive number\n",
			        pos[want - 1]);
			return 2;
		}
		if (want == 2)
			count = v;
		else
			id = v;
	}
	if (cfg_load(cfg_path(), &cfg, 0, err, sizeof err) < 0) {
		log_err("config: %s", err);
		return 1;
	}
	if (lessons_load(cfg.lessons_dir, &lessons, err, sizeof err) < 0) {
		log_err("lessons: %s", err);
		cfg_free(&cfg);
		return 1;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (labctx_init(&x, &cfg, &lessons) < 0) {
		rc = 1;
		goto out;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_term;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	if (strcmp(cmd, "warm") == 0) {
		const char *user = getenv("USER");
		char *by = xasprintf("cli:%s", user ? user : "?");
		long n = pool_warm_add(&x, pos[0], count > 1000 ? 1001 : (int)count, from, until,
		                       by, err, sizeof err);
		free(by);
		if (n < 0) {
			fprintf(stderr, "labvm-pool: %s\n", n == -2 ? x.db.msg : err);
			rc = 1;
		} else {
			printf("labvm-pool: warm request %ld: %ld VMs of lesson %s\n", n, count,
			       pos[0]);
			rc = 0;
		}
	} else if (strcmp(cmd, "cancel") == 0) {
		int c = pool_warm_cancel(&x, id);
		if (c < 0)
			fprintf(stderr, "labvm-pool: database: %s\n", x.db.msg);
		else if (c == 0)
			fprintf(stderr, "labvm-pool: no warm request %ld\n", id);
		else
			printf("labvm-pool: warm request %ld cancelled\n", id);
		rc = c > 0 ? 0 : 1;
	} else if (strcmp(cmd, "status") == 0) {
		rc = print_status(&x);
	} else {
		rc = tick(&x, watch);
	}
	labctx_cleanup(&x);
out:
	lessons_free(&lessons);
	cfg_free(&cfg);
	curl_global_cleanup();
	return rc;
}
