/* output.c - what every subcommand writes: folders, JSON files, rounded
 * figures and the stats objects in them. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "jsonx.h"

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

int bench_write_json(const char *path, const cJSON *root)
{
	char *text = cJSON_Print(root);
	errno = 0;
	FILE *f = fopen(path, "w");
	int bad = !f || !text;
	if (f) {
		bad = bad || fputs(text, f) < 0 || fputc('\n', f) < 0;
		bad = fclose(f) != 0 || bad;
	}
	if (bad)
		fprintf(stderr, "labvm-bench: writing %s: %s\n", path,
		        errno ? strerror(errno) : "failed");
	cJSON_free(text);
	return bad ? -1 : 0;
}

int bench_write_figures(const struct opts *o, const cJSON *root)
{
	if (bench_mkdirs(o->out_dir) < 0)
		return -1;
	char *path = xasprintf("%s/%s.json", o->out_dir, o->name);
	int rc = bench_write_json(path, root);
	if (rc == 0)
		printf("\nfigures: %s\n", path);
	free(path);
	return rc;
}

double bench_round(double x, int digits)
{
	double scale = pow(10, digits);
	return round(x * scale) / scale;
}

void bench_jnum(cJSON *o, const char *k, double x, int digits)
{
	if (isfinite(x))
		jx_add_num(o, k, bench_round(x, digits));
	else
		jx_add_null(o, k);
}

cJSON *bench_stats_json(const struct stats *s, int digits, int quartiles)
{
	cJSON *o = jx_obj();
	jx_add_num(o, "n", (double)s->n);
	bench_jnum(o, "min", s->min, digits);
	if (quartiles)
		bench_jnum(o, "p25", s->p25, digits);
	bench_jnum(o, "p50", s->p50, digits);
	if (quartiles)
		bench_jnum(o, "p75", s->p75, digits);
	bench_jnum(o, "p90", s->p90, digits);
	bench_jnum(o, "p99", s->p99, digits);
	bench_jnum(o, "max", s->max, digits);
	bench_jnum(o, "mean", s->mean, digits);
	bench_jnum(o, "stdev", s->stdev, digits);
	return o;
}
