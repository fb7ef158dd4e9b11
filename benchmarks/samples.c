/* samples.c - readiness samples (from `readiness` or `report`): grouping by
 * lesson and disk source, the per-stage distributions, the table, CSV and
 * JSON (and the SVG, svg.c). What one sample measures is metric.c. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "jsonx.h"

struct rsample *rset_add(struct rset *r)
{
	if (r->n == r->cap) {
		r->cap = r->cap ? r->cap * 2 : 64;
		r->s = xrealloc(r->s, sizeof *r->s * r->cap);
	}
	struct rsample *s = &r->s[r->n];
	rsample_init(s, (int)r->n);
	r->n++;
	return s;
}

void rsample_init(struct rsample *s, int idx)
{
	memset(s, 0, sizeof *s);
	s->idx = idx;
	s->post_app_ms = s->admission_wait_s = NAN;
	s->s_submitted = s->s_running = s->s_ready = s->s_failed = s->k_running = NAN;
	s->c_submitted = s->c_running = s->c_ready = s->c_failed = NAN;
}

void rset_free(struct rset *r)
{
	free(r->s);
	free(r->g);
	cJSON_Delete(r->meta);
	memset(r, 0, sizeof *r);
}

static struct rgroup *group_for(struct rset *r, const struct rsample *s)
{
	const char *disk = s->disk_source; /* "" = the start was refused */
	for (size_t i = 0; i < r->ng; i++)
		if (strcmp(r->g[i].lesson, s->lesson) == 0 &&
		    strcmp(r->g[i].disk_source, disk) == 0)
			return &r->g[i];
	r->g = xrealloc(r->g, sizeof *r->g * (r->ng + 1));
	struct rgroup *g = &r->g[r->ng++];
	memset(g, 0, sizeof *g);
	snprintf(g->lesson, sizeof g->lesson, "%s", s->lesson);
	snprintf(g->disk_source, sizeof g->disk_source, "%s", disk);
	return g;
}

void rset_summarize(struct rset *r)
{
	free(r->g);
	r->g = NULL;
	r->ng = 0;
	r->order_violations = 0;
	/* groups in the order of first appearance; refused starts in their own group */
	for (size_t i = 0; i < r->n; i++)
		group_for(r, &r->s[i]);
	double *v = xmalloc(sizeof *v * (r->n ? r->n : 1));
	for (size_t gi = 0; gi < r->ng; gi++) {
		struct rgroup *g = &r->g[gi];
		struct {
			char stage[16];
			int n;
		} fs[8];
		int nfs = 0;
		memset(fs, 0, sizeof fs);
		for (size_t i = 0; i < r->n; i++) {
			const struct rsample *s = &r->s[i];
			if (group_for(r, s) != g)
				continue;
			g->n++;
			if (s->http_status != 201 && !s->created_at[0])
				g->refused++;
			else if (strcmp(s->state, "failed") == 0) {
				g->failed++;
				int k;
				for (k = 0; k < nfs; k++)
					if (strcmp(fs[k].stage, s->stage) == 0)
						break;
				if (k == nfs && nfs < 8) {
					snprintf(fs[nfs].stage, sizeof fs[nfs].stage, "%s",
					         s->stage);
					fs[nfs++].n = 0;
				}
				if (k < nfs)
					fs[k].n++;
			} else if (isfinite(s->s_ready) || isfinite(s->c_ready))
				g->ready++;
			else
				g->other++;
		}
		g->fail_stages[0] = '\0';
		for (int k = 0; k < nfs; k++) {
			size_t l = strlen(g->fail_stages);
			snprintf(g->fail_stages + l, sizeof g->fail_stages - l, "%s%s:%d",
			         k ? " " : "", fs[k].stage, fs[k].n);
		}
		for (int m = 0; m < M_COUNT; m++) {
			size_t k = 0;
			for (size_t i = 0; i < r->n; i++)
				if (group_for(r, &r->s[i]) == g)
					v[k++] = rsample_metric(&r->s[i], (enum metric_id)m);
			stats_compute(v, k, &g->st[m]);
		}
	}
	free(v);
	for (size_t i = 0; i < r->n; i++)
		if (!rsample_order_ok(&r->s[i]))
			r->order_violations++;
}

static void num(FILE *f, double x)
{
	if (isfinite(x))
		fprintf(f, " %8.3f", x);
	else
		fprintf(f, " %8s", "-");
}

void rset_print(const struct rset *r, FILE *f, int show_client)
{
	for (size_t gi = 0; gi < r->ng; gi++) {
		const struct rgroup *g = &r->g[gi];
		if (!g->disk_source[0]) {
			fprintf(f, "\n%s: %zu start(s) refused:", g->lesson, g->refused);
			for (size_t i = 0; i < r->n; i++) {
				const struct rsample *s = &r->s[i];
				if (strcmp(s->lesson, g->lesson) == 0 && !s->disk_source[0])
					fprintf(f, " %d %s;", s->http_status,
					        s->start_error[0] ? s->start_error : "-");
			}
			fputc('\n', f);
			continue;
		}
		fprintf(f, "\n%s, %s %s: %zu started, %zu ready, %zu failed%s%s%s", g->lesson,
		        strcmp(g->disk_source, "pod") == 0 ? "runtime" : "disk", g->disk_source,
		        g->n, g->ready, g->failed, g->fail_stages[0] ? " (" : "", g->fail_stages,
		        g->fail_stages[0] ? ")" : "");
		if (g->other)
			fprintf(f, ", %zu neither (ended, timed out or interrupted)", g->other);
		fputc('\n', f);
		fprintf(f, "  %-7s %-24s %5s %8s %8s %8s %8s %8s %8s %8s\n", "side", "stage (s)",
		        "n", "min", "p50", "p90", "p99", "max", "mean", "stdev");
		for (int m = 0; m < M_COUNT; m++) {
			const struct stats *st = &g->st[m];
			if (!show_client && strcmp(bench_metrics[m].side, "server") != 0)
				continue;
			if (st->n == 0 && strcmp(bench_metrics[m].side, "server") != 0)
				continue;
			fprintf(f, "  %-7s %-24s %5zu", bench_metrics[m].side,
			        bench_metrics[m].label, st->n);
			num(f, st->min);
			num(f, st->p50);
			num(f, st->p90);
			num(f, st->p99);
			num(f, st->max);
			num(f, st->mean);
			num(f, st->stdev);
			fputc('\n', f);
		}
	}
	fprintf(f, "\nstage order (request <= submitted <= running <= ready, both clocks): %s",
	        r->order_violations ? "VIOLATED" : "holds");
	if (r->order_violations)
		fprintf(f, " (%d sample(s) out of order)", r->order_violations);
	fprintf(f, " for all %zu samples\n", r->n);
}

/* ------------------------------------------------------------------ CSV */

static void csv_str(FILE *f, const char *s)
{
	if (!s || !*s)
		return;
	if (!strpbrk(s, ",\"\r\n")) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

static void csv_num(FILE *f, double x, int prec)
{
	if (isfinite(x))
		fprintf(f, "%.*f", prec, x);
}

static const char CSV_HEADER[] =
    "idx,user,lesson,session_id,http_status,start_error,admission_retries,"
    "admission_wait_s,disk_source,fallback_reason,state,stage,end_reason,created_at,polls,"
    "post_app_ms,server_submitted_s,server_running_s,server_ready_s,server_failed_s,"
    "cluster_running_s,client_submitted_s,client_running_s,client_ready_s,client_failed_s,"
    "error\n";

static int write_csv(const struct rset *r, const char *path)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fputs(CSV_HEADER, f);
	for (size_t i = 0; i < r->n; i++) {
		const struct rsample *s = &r->s[i];
		fprintf(f, "%d,", s->idx);
		csv_str(f, s->user);
		fputc(',', f);
		csv_str(f, s->lesson);
		fputc(',', f);
		csv_str(f, s->session_id);
		fprintf(f, ",%d,", s->http_status);
		csv_str(f, s->start_error);
		fprintf(f, ",%d,", s->admission_retries);
		csv_num(f, s->admission_wait_s, 3);
		fputc(',', f);
		csv_str(f, s->disk_source);
		fputc(',', f);
		csv_str(f, s->fallback_reason);
		fputc(',', f);
		csv_str(f, s->state);
		fputc(',', f);
		csv_str(f, s->stage);
		fputc(',', f);
		csv_str(f, s->end_reason);
		fputc(',', f);
		csv_str(f, s->created_at);
		fprintf(f, ",%d,", s->polls);
		csv_num(f, s->post_app_ms, 2);
		double t[] = {s->s_submitted, s->s_running, s->s_ready, s->s_failed, s->k_running,
		              s->c_submitted, s->c_running, s->c_ready, s->c_failed};
		for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
			fputc(',', f);
			csv_num(f, t[k], 3);
		}
		fputc(',', f);
		csv_str(f, s->error);
		fputc('\n', f);
	}
	return fclose(f) == 0 ? 0 : -1;
}

/* ----------------------------------------------------------------- JSON */

static void jnum(cJSON *o, const char *k, double x)
{
	bench_jnum(o, k, x, 6);
}

static void jstr(cJSON *o, const char *k, const char *v)
{
	jx_add_str(o, k, v && *v ? v : NULL);
}

static cJSON *rset_json(const struct rset *r)
{
	cJSON *root = jx_obj();
	jx_put(root, "meta", r->meta ? cJSON_Duplicate(r->meta, 1) : jx_obj());
	cJSON *m = jx_add_obj(root, "methods");
	jx_add_str(m, "unit", "seconds");
	jx_add_str(m, "percentiles", "linear interpolation between closest ranks (numpy default)");
	jx_add_str(m, "stdev", "sample standard deviation (n-1)");
	jx_add_str(m, "server",
	           "the session's own timestamps minus created_at (the button press, "
	           "server clock); running_at and ready_at are set by the poll that saw "
	           "the change, so they carry up to one poll interval");
	jx_add_str(m, "cluster",
	           "the VMI's Running phaseTransitionTimestamp minus created_at "
	           "(cluster clock; needs read access to VMIs)");
	jx_add_str(m, "client", "labvm-bench's monotonic clock from sending the admitted POST");
	cJSON *ms = jx_add_arr(root, "metrics");
	for (int i = 0; i < M_COUNT; i++) {
		cJSON *e = jx_obj();
		jx_add_str(e, "key", bench_metrics[i].key);
		jx_add_str(e, "side", bench_metrics[i].side);
		jx_add_str(e, "label", bench_metrics[i].label);
		jx_push(ms, e);
	}
	jx_add_num(root, "order_violations", r->order_violations);
	cJSON *groups = jx_add_arr(root, "groups");
	for (size_t gi = 0; gi < r->ng; gi++) {
		const struct rgroup *g = &r->g[gi];
		cJSON *e = jx_obj();
		jx_add_str(e, "lesson", g->lesson);
		jstr(e, "disk_source", g->disk_source);
		jx_add_num(e, "n", (double)g->n);
		jx_add_num(e, "ready", (double)g->ready);
		jx_add_num(e, "failed", (double)g->failed);
		jx_add_num(e, "refused", (double)g->refused);
		jx_add_num(e, "other", (double)g->other);
		jstr(e, "fail_stages", g->fail_stages);
		cJSON *st = jx_add_obj(e, "stats");
		for (int k = 0; k < M_COUNT; k++)
			jx_put(st, bench_metrics[k].key, bench_stats_json(&g->st[k], 6, 1));
		jx_push(groups, e);
	}
	cJSON *samples = jx_add_arr(root, "samples");
	for (size_t i = 0; i < r->n; i++) {
		const struct rsample *s = &r->s[i];
		cJSON *e = jx_obj();
		jx_add_num(e, "idx", s->idx);
		jstr(e, "user", s->user);
		jstr(e, "lesson", s->lesson);
		jstr(e, "session_id", s->session_id);
		jx_add_num(e, "http_status", s->http_status);
		jstr(e, "start_error", s->start_error);
		jx_add_num(e, "admission_retries", s->admission_retries);
		jnum(e, "admission_wait_s", s->admission_wait_s);
		jstr(e, "disk_source", s->disk_source);
		jstr(e, "fallback_reason", s->fallback_reason);
		jstr(e, "state", s->state);
		jstr(e, "stage", s->stage);
		jstr(e, "end_reason", s->end_reason);
		jstr(e, "created_at", s->created_at);
		jx_add_num(e, "polls", s->polls);
		jnum(e, "post_app_ms", s->post_app_ms);
		jnum(e, "server_submitted_s", s->s_submitted);
		jnum(e, "server_running_s", s->s_running);
		jnum(e, "server_ready_s", s->s_ready);
		jnum(e, "server_failed_s", s->s_failed);
		jnum(e, "cluster_running_s", s->k_running);
		jnum(e, "client_submitted_s", s->c_submitted);
		jnum(e, "client_running_s", s->c_running);
		jnum(e, "client_ready_s", s->c_ready);
		jnum(e, "client_failed_s", s->c_failed);
		jstr(e, "error", s->error);
		jx_push(samples, e);
	}
	return root;
}

int rset_write(const struct rset *r, const char *dir, const char *stem, const char *title)
{
	char *csv = xasprintf("%s/%s.csv", dir, stem);
	char *json = xasprintf("%s/%s.json", dir, stem);
	char *svg = xasprintf("%s/%s.svg", dir, stem);
	int rc = -1;

	if (bench_mkdirs(dir) < 0)
		goto out;
	if (write_csv(r, csv) < 0) {
		fprintf(stderr, "labvm-bench: writing %s: %s\n", csv, strerror(errno));
		goto out;
	}
	cJSON *root = rset_json(r);
	int bad = bench_write_json(json, root);
	cJSON_Delete(root);
	if (bad)
		goto out;
	if (svg_write_rset(r, svg, title) < 0) {
		fprintf(stderr, "labvm-bench: writing %s: %s\n", svg, strerror(errno));
		goto out;
	}
	printf("\nraw samples: %s\n             %s\nplot:        %s\n", csv, json, svg);
	rc = 0;
out:
	free(csv);
	free(json);
	free(svg);
	return rc;
}
