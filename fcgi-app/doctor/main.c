/* labvm-doctor - before the class, check that this cluster can really run labs.
 *
 *   labvm-doctor [--json] [--only CHECK[,CHECK...]] [--canary | --no-canary]
 *                [--console ws[s]://HOST:PORT] [--internet HOST:PORT | none]
 *   labvm-doctor --permissions
 *
 * The same labvm.conf ($LABVM_CONF, default /etc/labvm/labvm.conf) and
 * credentials as labvm-reaper: the ServiceAccount token and CA of the
 * config, the database of the config. Runs the checks of checks[] in order
 * and prints one line per finding: ok / warn / FAIL, the check, what it
 * found, and for a problem the fix. Exit status 0 when nothing failed (warns
 * allowed), 1 when a check failed, 2 for a bad command line or config.
 * --permissions prints core/perms.c's table (the one conf/k8s/rbac.yaml must
 * match) as JSON, without a config. See README "Before the class:
 * labvm-doctor". */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "doctor.h"
#include "jsonx.h"
#include "log.h"
#include "perms.h"
#include "runtime.h"
#include "util.h"

/* What the canaries try as "the internet" by default (--internet): a public
 * anycast resolver's HTTPS port, which answers from almost anywhere. The
 * tests always name an address of their own simulator instead. */
#define DOCTOR_INTERNET "1.1.1.1:443"

/* The checks, in the order they run. A new one (the canary's end-to-end lab
 * is check 6) is one more row: it reads what the earlier ones learnt through
 * the doc_*() facts. */
static const struct check checks[] = {
    {1, "credentials",
     "the token is readable and accepted, the CA verifies the API server, the "
     "namespace exists",
     check_credentials},
    {2, "permissions", "a SelfSubjectAccessReview for every verb labvm uses (core/perms.c)",
     check_permissions},
    {3, "apis", "the API groups and versions labvm uses are served, versions in the tested range",
     check_apis},
    {4, "nodes",
     "nodes that run VMs, memory for vm_capacity of each lesson, the session network's "
     "rule",
     check_nodes},
    {5, "lessons", "every lesson passes labvm.fcgi --check; each golden lesson's PVC decision",
     check_lessons},
    {6, "canary",
     "two labs end to end: ready, console, grader, the fence between them; ended and "
     "reclaimed",
     check_canary},
    {7, "reaper", "the reaper runs: its CronJob, its last pass in the database", check_reaper},
    {7, "database", "migrated to this build's schema; session locks and LISTEN/NOTIFY work",
     check_database},
};
#define NCHECKS (sizeof checks / sizeof checks[0])

static const char *const verdict_word[] = {"ok", "warn", "FAIL"};

/* A finding is one line: the server's multi-line messages (libpq's "...\n\tIs
 * the server running...") joined with single spaces. */
static void one_line(char *s)
{
	char *w = s;
	for (char *r = s; *r; r++) {
		int space = *r == '\n' || *r == '\r' || *r == '\t' || *r == ' ';
		if (space && (w == s || w[-1] == ' '))
			continue;
		*w++ = space ? ' ' : *r;
	}
	while (w > s && w[-1] == ' ')
		w--;
	*w = '\0';
}

void doc_line(struct doc *d, enum verdict v, const char *fix, const char *fmt, ...)
{
	char found[2048], fixc[1024] = "";
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(found, sizeof found, fmt, ap);
	va_end(ap);
	/* the cluster's and the database's words may be in it: valid UTF-8 */
	char *clean = utf8_clean_dup(found, strlen(found), sizeof found - 1);
	if (fix)
		utf8_clean_cut(fixc, fix, sizeof fixc - 1);
	one_line(clean);
	one_line(fixc);
	d->n[v]++;
	if (d->json) {
		cJSON *o = jx_obj();
		jx_add_num(o, "number", d->cur->number);
		jx_add_str(o, "check", d->cur->name);
		jx_add_str(o, "status", verdict_word[v]);
		jx_add_str(o, "found", clean);
		jx_add_str(o, "fix", fix ? fixc : NULL);
		jx_push(d->results, o);
	} else {
		printf("%-4s  %d %-11s  %s%s%s\n", verdict_word[v], d->cur->number, d->cur->name,
		       clean, fix ? " -- fix: " : "", fix ? fixc : "");
		fflush(stdout);
	}
	free(clean);
}

void doc_gib(char *out, size_t n, long long bytes)
{
	snprintf(out, n, "%.1f GiB", (double)bytes / (1024.0 * 1024.0 * 1024.0));
}

int doc_need_vms(const struct doc *d)
{
	for (size_t i = 0; i < d->lessons.n; i++)
		if (runtime_of(d->lessons.v[i].runtime)->kvm)
			return 1;
	return 0;
}

int doc_need_cdi(const struct doc *d)
{
	int need = 0;
	for (size_t i = 0; i < d->lessons.n; i++) {
		const struct lesson *l = &d->lessons.v[i];
		for (size_t m = 0; runtime_of(l->runtime)->has_disk && m < lesson_nmachines(l);
		     m++) {
			enum lesson_disk k = lesson_machine(l, m)->disk;
			if (k == DISK_DATAVOLUME)
				need = 2;
			else if (k == DISK_GOLDEN && need < 1)
				need = 1;
		}
	}
	return need;
}

int doc_need_machines(const struct doc *d)
{
	for (size_t i = 0; i < d->lessons.n; i++)
		if (d->lessons.v[i].nmachines > 1)
			return 1;
	return 0;
}

int doc_print_permissions(void)
{
	cJSON *a = jx_arr();
	for (size_t i = 0; i < perm_count; i++) {
		const struct perm *p = &perm_table[i];
		cJSON *o = jx_obj(), *verbs = jx_arr();
		jx_add_str(o, "kind",
		           *perm_grant_kind(p->grant) ? perm_grant_kind(p->grant) : NULL);
		jx_add_str(o, "name",
		           *perm_grant_name(p->grant) ? perm_grant_name(p->grant) : NULL);
		jx_add_str(o, "granted_by_cluster", p->by);
		jx_add_str(o, "apiGroup", p->group);
		jx_add_str(o, "resource", p->resource);
		char *v = xstrdup(p->verbs), *save = NULL;
		for (char *w = strtok_r(v, " ", &save); w; w = strtok_r(NULL, " ", &save))
			jx_push_str(verbs, w);
		free(v);
		jx_put(o, "verbs", verbs);
		jx_add_str(o, "scope",
		           p->scope == PERM_NAMESPACED      ? "namespace"
		           : p->scope == PERM_OWN_NAMESPACE ? "the namespace itself"
		                                            : "cluster");
		jx_add_bool(o, "required", perm_grant_required(p->grant));
		jx_add_str(o, "who", p->who);
		jx_add_str(o, "without_it", p->what);
		jx_push(a, o);
	}
	char *s = jx_print(a);
	printf("%s\n", s);
	free(s);
	cJSON_Delete(a);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: labvm-doctor [--json] [--only CHECK[,CHECK...]] [--canary|--no-canary]\n"
	           "                    [--console ws[s]://HOST:PORT] [--internet HOST:PORT|none]\n"
	           "       labvm-doctor --permissions\n"
	           "  Checks that this cluster and database can run labs, before the class.\n"
	           "  Config from $LABVM_CONF (default " CFG_DEFAULT_PATH ").\n"
	           "  Exit status: 0 nothing failed, 1 a check failed, 2 usage or config.\n"
	           "  The checks, in order:\n");
	for (size_t i = 0; i < NCHECKS; i++)
		fprintf(f, "    %d %-12s %s\n", checks[i].number, checks[i].name, checks[i].what);
}

/* --only's list: 1 when check c was named (or no list was given). */
static int selected(const char *only, const struct check *c)
{
	if (!only)
		return 1;
	size_t n = strlen(c->name);
	for (const char *p = only; *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		if (len == n && strncmp(p, c->name, n) == 0)
			return 1;
		p += len + (e ? 1 : 0);
	}
	return 0;
}

static int only_valid(const char *only)
{
	for (const char *p = only; *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		int known = 0;
		for (size_t i = 0; i < NCHECKS; i++)
			if (strlen(checks[i].name) == len && strncmp(p, checks[i].name, len) == 0)
				known = 1;
		if (!known) {
			fprintf(stderr, "labvm-doctor: --only: no check called '%.*s'\n", (int)len,
			        p);
			return 0;
		}
		p += len + (e ? 1 : 0);
	}
	return *only != '\0';
}

static void doc_free(struct doc *d)
{
	cJSON_Delete(d->groups);
	cJSON_Delete(d->kubevirt);
	cJSON_Delete(d->results);
	labctx_cleanup(&d->x);
	lessons_free(&d->lessons);
	cfg_free(&d->cfg);
}

int main(int argc, char **argv)
{
	static struct doc doc;
	struct doc *d = &doc;
	const char *only = NULL;
	char err[1024];

	log_init("labvm-doctor", LOG_ERR);
	d->canary = 1;
	d->internet = DOCTOR_INTERNET;
	d->api = -1;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0) {
			d->json = 1;
		} else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
			only = argv[++i];
			if (!only_valid(only))
				return 2;
		} else if (strcmp(argv[i], "--no-canary") == 0) {
			d->canary = 0;
		} else if (strcmp(argv[i], "--canary") == 0) {
			d->canary = 1;
		} else if (strcmp(argv[i], "--console") == 0 && i + 1 < argc) {
			d->console_url = argv[++i];
			if (strncmp(d->console_url, "ws://", 5) != 0 &&
			    strncmp(d->console_url, "wss://", 6) != 0) {
				fprintf(stderr, "labvm-doctor: --console: a ws:// or wss:// URL\n");
				return 2;
			}
		} else if (strcmp(argv[i], "--internet") == 0 && i + 1 < argc) {
			d->internet = strcmp(argv[i + 1], "none") == 0 ? NULL : argv[i + 1];
			i++;
			if (d->internet && !strrchr(d->internet, ':')) {
				fprintf(stderr, "labvm-doctor: --internet: HOST:PORT or none\n");
				return 2;
			}
		} else if (strcmp(argv[i], "--permissions") == 0) {
			return doc_print_permissions();
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	d->conf_path = cfg_path();
	if (cfg_load(d->conf_path, &d->cfg, 0, err, sizeof err) < 0) {
		fprintf(stderr, "labvm-doctor: %s: %s\n", d->conf_path, err);
		if (d->json) {
			cJSON *o = jx_obj();
			jx_add_str(o, "config", d->conf_path);
			jx_add_str(o, "error", err);
			char *s = jx_print(o);
			printf("%s\n", s);
			free(s);
			cJSON_Delete(o);
		}
		return 2;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (lessons_load(d->cfg.lessons_dir, &d->lessons, err, sizeof err) < 0)
		snprintf(d->lessons_err, sizeof d->lessons_err, "%s", err);
	else
		d->have_lessons = 1;
	if (labctx_init(&d->x, &d->cfg, d->have_lessons ? &d->lessons : NULL) < 0) {
		fprintf(stderr, "labvm-doctor: cannot set up the cluster client\n");
		doc_free(d);
		curl_global_cleanup();
		return 2;
	}
	d->results = jx_arr();
	if (!d->json)
		printf("labvm-doctor: %s: environment %s, namespace %s, API server %s\n",
		       d->conf_path, d->cfg.environment, d->cfg.namespace_, d->cfg.kube_api);
	for (size_t i = 0; i < NCHECKS; i++) {
		if (!selected(only, &checks[i]))
			continue;
		d->cur = &checks[i];
		checks[i].run(d);
	}
	int rc = d->n[DOC_FAIL] ? 1 : 0;
	if (d->json) {
		cJSON *o = jx_obj();
		jx_add_str(o, "config", d->conf_path);
		jx_add_str(o, "environment", d->cfg.environment);
		jx_add_str(o, "namespace", d->cfg.namespace_);
		jx_add_str(o, "kube_api", d->cfg.kube_api);
		jx_put(o, "results", d->results);
		d->results = NULL;
		jx_add_num(o, "ok", d->n[DOC_OK]);
		jx_add_num(o, "warn", d->n[DOC_WARN]);
		jx_add_num(o, "fail", d->n[DOC_FAIL]);
		jx_add_num(o, "exit", rc);
		char *s = jx_print(o);
		printf("%s\n", s);
		free(s);
		cJSON_Delete(o);
	} else {
		printf("labvm-doctor: %d ok, %d warn, %d FAIL%s\n", d->n[DOC_OK], d->n[DOC_WARN],
		       d->n[DOC_FAIL], rc ? ": fix the FAIL lines before the class" : "");
	}
	doc_free(d);
	curl_global_cleanup();
	return rc;
}
