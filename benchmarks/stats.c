/* stats.c - distributions by sorting: percentiles by linear interpolation
 * between closest ranks (numpy's default), sample standard deviation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

int stats_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y ? 1 : 0;
}

double stats_pct(const double *sorted, size_t n, double p)
{
	if (n == 0)
		return NAN;
	if (p <= 0)
		return sorted[0];
	if (p >= 100)
		return sorted[n - 1];
	double rank = p / 100.0 * (double)(n - 1);
	size_t lo = (size_t)floor(rank);
	double frac = rank - (double)lo;
	if (lo + 1 >= n)
		return sorted[n - 1];
	return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * frac;
}

void stats_compute(const double *v, size_t n, struct stats *s)
{
	double *x = xmalloc(sizeof *x * (n ? n : 1));
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (isfinite(v[i]))
			x[m++] = v[i];
	memset(s, 0, sizeof *s);
	s->n = m;
	if (m == 0) {
		s->min = s->p25 = s->p50 = s->p75 = s->p90 = s->p99 = s->max = s->mean = s->stdev =
		    NAN;
		free(x);
		return;
	}
	qsort(x, m, sizeof *x, stats_cmp_double);
	double sum = 0;
	for (size_t i = 0; i < m; i++)
		sum += x[i];
	s->mean = sum / (double)m;
	double ss = 0;
	for (size_t i = 0; i < m; i++)
		ss += (x[i] - s->mean) * (x[i] - s->mean);
	s->stdev = m > 1 ? sqrt(ss / (double)(m - 1)) : 0;
	s->min = x[0];
	s->max = x[m - 1];
	s->p25 = stats_pct(x, m, 25);
	s->p50 = stats_pct(x, m, 50);
	s->p75 = stats_pct(x, m, 75);
	s->p90 = stats_pct(x, m, 90);
	s->p99 = stats_pct(x, m, 99);
	free(x);
}

void dvec_push(struct dvec *d, double x)
{
	if (d->n == d->cap) {
		d->cap = d->cap ? d->cap * 2 : 256;
		d->v = xrealloc(d->v, sizeof *d->v * d->cap);
	}
	d->v[d->n++] = x;
}

void dvec_free(struct dvec *d)
{
	free(d->v);
	memset(d, 0, sizeof *d);
}
