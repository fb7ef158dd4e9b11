/* plot.c - `labvm-bench plot --in FILE.json[,FILE2.json]`: the table, CSV,
 * JSON and SVG again from the raw samples of earlier readiness or report
 * runs (several files are merged: repeated runs, or a run per lesson). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "jsonx.h"

static double jd(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void js(char *dst, size_t n, const cJSON *o, const char *k)
{
	bench_copy(dst, n, kj_str(o, k));
}

static int load(struct rset *rs, const char *path, cJSON *files)
{
	char *text = util_read_file(path, 256u << 20, NULL);
	if (!text) {
		fprintf(stderr, "labvm-bench plot: cannot read %s: %s\n", path, strerror(errno));
		return -1;
	}
	cJSON *j = cJSON_Parse(text);
	free(text);
	const cJSON *samples = kj_get(j, "samples"), *e;
	if (!cJSON_IsArray(samples)) {
		fprintf(stderr,
		        "labvm-bench plot: %s has no \"samples\" (a readiness or report "
		        "JSON?)\n",
		        path);
		cJSON_Delete(j);
		return -1;
	}
	cJSON_ArrayForEach(e, samples)
	{
		struct rsample *x = rset_add(rs);
		js(x->user, sizeof x->user, e, "user");
		js(x->lesson, sizeof x->lesson, e, "lesson");
		js(x->session_id, sizeof x->session_id, e, "session_id");
		x->http_status = (int)jd(e, "http_status");
		js(x->start_error, sizeof x->start_error, e, "start_error");
		x->admission_retries = (int)jd(e, "admission_retries");
		x->admission_wait_s = jd(e, "admission_wait_s");
		js(x->disk_source, sizeof x->disk_source, e, "disk_source");
		js(x->fallback_reason, sizeof x->fallback_reason, e, "fallback_reason");
		js(x->state, sizeof x->state, e, "state");
		js(x->stage, sizeof x->stage, e, "stage");
		js(x->end_reason, sizeof x->end_reason, e, "end_reason");
		js(x->created_at, sizeof x->created_at, e, "created_at");
		js(x->error, sizeof x->error, e, "error");
		x->polls = isfinite(jd(e, "polls")) ? (int)jd(e, "polls") : 0;
		x->post_app_ms = jd(e, "post_app_ms");
		x->s_submitted = jd(e, "server_submitted_s");
		x->s_running = jd(e, "server_running_s");
		x->s_ready = jd(e, "server_ready_s");
		x->s_failed = jd(e, "server_failed_s");
		x->k_running = jd(e, "cluster_running_s");
		x->c_submitted = jd(e, "client_submitted_s");
		x->c_running = jd(e, "client_running_s");
		x->c_ready = jd(e, "client_ready_s");
		x->c_failed = jd(e, "client_failed_s");
	}
	cJSON *m = cJSON_DetachItemFromObjectCaseSensitive(j, "meta");
	cJSON *f = jx_obj();
	jx_add_str(f, "file", path);
	jx_put(f, "meta", m ? m : jx_obj());
	jx_push(files, f);
	cJSON_Delete(j);
	return 0;
}

int cmd_plot(struct opts *o)
{
	struct rset rs;
	char **in = NULL;
	int nin = 0, rc = 0;

	memset(&rs, 0, sizeof rs);
	if (!o->in) {
		fprintf(stderr, "labvm-bench plot: give --in FILE.json[,FILE.json...]\n");
		return 2;
	}
	char *copy = xstrdup(o->in), *save = NULL;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		in = xrealloc(in, sizeof *in * (size_t)(nin + 1));
		in[nin++] = t;
	}
	cJSON *meta = jx_obj(), *files = jx_add_arr(meta, "from");
	jx_add_str(meta, "command", "plot");
	for (int i = 0; i < nin && rc == 0; i++)
		if (load(&rs, in[i], files) < 0)
			rc = 2;
	if (rc) {
		cJSON_Delete(meta);
		rset_free(&rs);
		free(in);
		free(copy);
		return rc;
	}
	/* one file: its description; several: say how many */
	const char *d1 = kj_str(files, "0.meta.description");
	char *desc =
	    nin == 1 && d1 ? xstrdup(d1) : xasprintf("%zu samples merged from %d files", rs.n, nin);
	jx_add_str(meta, "description", desc);
	const char *w = kj_str(files, "0.meta.when");
	if (w)
		jx_add_str(meta, "when", w);
	rs.meta = meta;
	for (size_t i = 0; i < rs.n; i++)
		rs.s[i].idx = (int)i;
	rset_summarize(&rs);
	printf("%s\n", desc);
	rset_print(&rs, stdout, 1);
	if (rset_write(&rs, o->out_dir, o->name, "labvm readiness") < 0 || rs.order_violations)
		rc = 1;
	free(desc);
	rset_free(&rs);
	free(in);
	free(copy);
	return rc;
}
