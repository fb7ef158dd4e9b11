/* selftest.c - `labvm-bench selftest [--out DIR]`: the figures' arithmetic
 * and writers, offline (percentiles, stdev, time parsing, stage order,
 * grouping, CSV quoting, JSON and SVG files). Prints TAP lines; exit status 1
 * when a check fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "jsonx.h"

static int n_checks, n_failed;

static void check(int ok, const char *what)
{
	n_checks++;
	if (!ok)
		n_failed++;
	printf("%s %d - %s\n", ok ? "ok" : "not ok", n_checks, what);
}

static int near(double a, double b)
{
	return fabs(a - b) < 1e-9;
}

static char *slurp(const char *path)
{
	return util_read_file(path, 1 << 24, NULL);
}

int cmd_selftest(struct opts *o)
{
	struct stats s;

	/* percentiles: linear interpolation between closest ranks */
	double v1[] = {15, 20, 35, 40, 50};
	stats_compute(v1, 5, &s);
	check(s.n == 5 && near(s.min, 15) && near(s.max, 50) && near(s.p50, 35),
	      "min, max, median of 5");
	check(near(s.p25, 20) && near(s.p75, 40), "p25, p75 of 5 (exact ranks)");
	check(near(s.p90, 46) && near(s.p99, 49.6), "p90 = 46, p99 = 49.6 (interpolated)");
	check(near(s.mean, 32) && near(s.stdev, sqrt(207.5)), "mean 32, sample stdev sqrt(207.5)");
	double v2[] = {3, NAN, 1, 2, INFINITY};
	stats_compute(v2, 5, &s);
	check(s.n == 3 && near(s.p50, 2) && near(s.min, 1) && near(s.max, 3),
	      "non-finite values are skipped");
	double v3[] = {7};
	stats_compute(v3, 1, &s);
	check(s.n == 1 && near(s.p99, 7) && near(s.stdev, 0), "one sample: all 7, stdev 0");
	stats_compute(NULL, 0, &s);
	check(s.n == 0 && isnan(s.p50), "no samples: NAN");
	double v4[] = {4, 1, 3, 2};
	stats_compute(v4, 4, &s);
	check(near(s.p50, 2.5) && near(s.p90, 3.7), "even count: p50 2.5, p90 3.7");

	/* times */
	check(near(bench_parse_time("2026-11-29T16:09:09.144Z"), 1795968549.144),
	      "RFC 3339 with milliseconds");
	check(near(bench_parse_time("2026-11-29T17:09:09+01:00"), 1795968549),
	      "RFC 3339 with an offset");
	check(isnan(bench_parse_time("yesterday")) && isnan(bench_parse_time(NULL)),
	      "bad times are NAN");
	char buf[32];
	bench_fmt_time(1795968549.144, buf);
	check(strcmp(buf, "2026-11-29T16:09:09.144Z") == 0, "formatting a time");

	/* samples: order check, grouping, writers */
	struct rset r;
	memset(&r, 0, sizeof r);
	for (int i = 0; i < 6; i++) {
		struct rsample *x = rset_add(&r);
		snprintf(x->lesson, sizeof x->lesson, "%s",
		         i % 2 ? "linux-basics" : "debian,\"golden\"");
		snprintf(x->disk_source, sizeof x->disk_source, "%s",
		         i % 2 ? "containerdisk" : "golden");
		snprintf(x->state, sizeof x->state, "ready");
		bench_fmt_time(1795968540.0 + i, x->created_at);
		snprintf(x->error, sizeof x->error, "line one\nline \"two\"");
		x->http_status = 201;
		x->s_submitted = 0.1 * (i + 1);
		x->s_running = 1 + i;
		x->s_ready = 5 + 2 * i;
		x->c_submitted = 0.12 * (i + 1);
		x->c_running = 1.5 + i;
		x->c_ready = 5.5 + 2 * i;
	}
	struct rsample *bad = rset_add(&r);
	*bad = r.s[0];
	bad->idx = 6;
	bad->s_running = 20; /* after ready: out of order */
	struct rsample *refused = rset_add(&r);
	snprintf(refused->lesson, sizeof refused->lesson, "linux-basics");
	refused->http_status = 503;
	snprintf(refused->start_error, sizeof refused->start_error, "capacity_full");
	check(rsample_order_ok(&r.s[0]) && !rsample_order_ok(bad) && rsample_order_ok(refused),
	      "stage order check");
	struct rsample skip = r.s[1];
	skip.s_running = NAN; /* ready without running */
	check(!rsample_order_ok(&skip), "a later stage without an earlier one is out of order");
	rset_summarize(&r);
	check(r.ng == 3 && r.order_violations == 1,
	      "three groups (one of refused starts), one violation");
	check(r.g[0].n == 4 && r.g[0].st[M_S_READY].n == 4 && r.g[1].st[M_S_READY].n == 3 &&
	          near(r.g[1].st[M_S_READY].p50, 11),
	      "per-group counts and median");
	check(r.g[2].refused == 1 && r.g[2].disk_source[0] == '\0', "refused start grouped apart");
	check(near(r.g[1].st[M_S_BOOT].p50, 7), "running -> ready derived (5, 7, 9)");
	r.meta = jx_obj();
	jx_add_str(r.meta, "description", "selftest <&> run");

	const char *dir = o->out_dir;
	int wrote = rset_write(&r, dir, "selftest", "selftest <plot>") == 0;
	check(wrote, "CSV, JSON and SVG written");
	char *p = xasprintf("%s/selftest.csv", dir);
	char *csv = slurp(p);
	free(p);
	check(csv && strncmp(csv, "idx,user,lesson,session_id,http_status,", 39) == 0,
	      "CSV header");
	check(csv && strstr(csv, "\"debian,\"\"golden\"\"\"") &&
	          strstr(csv, "\"line one\nline \"\"two\"\"\""),
	      "CSV quoting of commas, quotes and newlines");
	int lines = 0;
	for (char *c = csv; c && *c; c++)
		lines += *c == '\n';
	check(lines == 1 + 7 * 2 + 1, "CSV: header and 8 rows (7 errors hold a newline)");
	free(csv);
	p = xasprintf("%s/selftest.json", dir);
	char *js = slurp(p);
	free(p);
	cJSON *j = js ? cJSON_Parse(js) : NULL;
	check(j && cJSON_GetArraySize(kj_get(j, "samples")) == 8 &&
	          cJSON_GetArraySize(kj_get(j, "groups")) == 3,
	      "JSON parses: 8 samples, 3 groups");
	const cJSON *p50 = kj_get(j, "groups.1.stats.server_ready.p50");
	check(cJSON_IsNumber(p50) && near(p50->valuedouble, 11), "JSON group stats");
	check(cJSON_IsNull(kj_get(j, "samples.7.server_ready_s")),
	      "JSON null for unreached stages");
	cJSON_Delete(j);
	free(js);
	p = xasprintf("%s/selftest.svg", dir);
	char *svg = slurp(p);
	free(p);
	check(svg && strstr(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\"") &&
	          strstr(svg, "</svg>") && strstr(svg, "selftest &lt;plot&gt;") &&
	          strstr(svg, "selftest &lt;&amp;&gt; run") && !strstr(svg, "<script"),
	      "SVG: self-contained, escaped text");
	int circles = 0;
	for (char *c = svg; c && (c = strstr(c, "<circle")); c++)
		circles++;
	/* dots: 7 started samples x (server submitted, running, ready, running->ready,
	 * client ready) minus the unreached ones */
	check(circles == 7 * 5, "SVG: one dot per sample and plotted stage");
	free(svg);
	rset_free(&r);

	printf("1..%d\n", n_checks);
	return n_failed ? 1 : 0;
}
