/* doctor.h - labvm-doctor: before the class, check that this cluster and
 * this database can really run labs (issue #31).
 *
 * The checks are one table (main.c checks[]), run in its order; each prints
 * one line per finding: ok / warn / FAIL, the check, what it found, and for
 * a problem the fix in plain words (--json: the same as one JSON document).
 * A check reads the facts it needs through doc_*() below, which ask the
 * cluster or the database once per run and remember the answer, so a check
 * that comes later (the canary, check 6, when it is built) takes what the
 * earlier ones learnt instead of asking again. */
#ifndef LABVM_DOCTOR_H
#define LABVM_DOCTOR_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "lab.h"
#include "lesson.h"

enum verdict { DOC_OK = 0, DOC_WARN, DOC_FAIL };

struct doc;

struct check {
	int number;       /* the numbering (#31): 1-7 */
	const char *name; /* what the line and --only call it */
	const char *what; /* one line for --help */
	void (*run)(struct doc *d);
};

struct doc {
	struct cfg cfg;
	const char *conf_path;
	struct lessons lessons; /* lessons_load() of lessons_dir, as labvm.fcgi loads them */
	int have_lessons;
	char lessons_err[1024]; /* why lessons_load() failed */
	struct labctx x;        /* the reaper's: this process's cluster client and database */
	int json;
	int canary; /* --canary / --no-canary (check 6) */
	const char
	    *console_url;     /* --console: labvm-console's address (NULL: ws://console_listen) */
	const char *internet; /* --internet HOST:PORT the canaries should reach (NULL: none) */
	const struct check *cur;
	cJSON *results; /* every line, for --json */
	int n[3];       /* lines by verdict */

	/* facts, asked for once (doc_api() and friends) */
	int api;            /* -1 not asked, 0 unusable (credentials failed), 1 usable */
	char api_why[600];  /* why not */
	char user[256];     /* whom the token authenticates ("" unknown) */
	cJSON *groups;      /* GET /apis (APIGroupList), NULL when it failed */
	int kubevirt_asked; /* doc_kubevirt() ran */
	cJSON *kubevirt;    /* the first KubeVirt CR (NULL: none, or not readable) */
	long kubevirt_code; /* the list's HTTP status */
};

/* One finding of the running check. fix: what to do, NULL for ok lines.
 * Text from the cluster is cleaned (valid UTF-8, cut on a character). */
void doc_line(struct doc *d, enum verdict v, const char *fix, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* 1 when the API server takes this process's token (check 1 asked: the
 * other checks say "not checked" instead of failing again); why in d->api_why. */
int doc_api(struct doc *d);
/* GET /apis into d->groups (once; it stays NULL when that failed). */
void doc_fetch_groups(struct doc *d);
/* The APIGroup entry g lists version among its versions[]. */
int doc_group_has_version(const cJSON *g, const char *version);
/* The served group's preferred version's APIGroup entry from /apis, or NULL. */
const cJSON *doc_group(struct doc *d, const char *group);
/* 1 when group/version serves resource (GET /apis/<group>/<version>). */
int doc_serves(struct doc *d, const char *group, const char *version, const char *resource);
/* The KubeVirt CR (cluster-wide list; everyone may read it: KubeVirt's
 * kubevirt.io:default), NULL when there is none or it cannot be read. */
const cJSON *doc_kubevirt(struct doc *d);
/* KubeVirt's spec.configuration.developerConfiguration.useEmulation. */
int doc_emulation(struct doc *d);

/* What the lessons need. */
int doc_need_vms(const struct doc *d);      /* some lesson is runtime vm */
int doc_need_cdi(const struct doc *d);      /* 2: a datavolume disk, 1: golden only, 0 */
int doc_need_machines(const struct doc *d); /* some lesson has machines (a session network) */

/* "1.5 GiB" */
void doc_gib(char *out, size_t n, long long bytes);

/* The checks (one file each). */
void check_credentials(struct doc *d);
void check_permissions(struct doc *d);
void check_apis(struct doc *d);
void check_nodes(struct doc *d);
void check_lessons(struct doc *d);
void check_canary(struct doc *d);
void check_reaper(struct doc *d);
void check_database(struct doc *d);

/* --permissions: perm_table as JSON on stdout. */
int doc_print_permissions(void);

#endif
