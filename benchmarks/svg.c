/* svg.c - a self-contained SVG of readiness distributions, written by hand:
 * per stage a panel with its own seconds axis (logarithmic when the values
 * span more than a decade, as golden vs fresh disk do), one row per (disk
 * source, lesson): a box from p25 to p75, the median as a thick line,
 * whiskers to min and max, every sample as a dot, and the numbers as a hover
 * tooltip (<title>). No scripts, no external references. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define W       1060
#define LABEL_W 330
#define X0      (LABEL_W + 10)
#define X1      (W - 40)
#define ROW_H   26
#define STAGE_H 22

static const char *const PALETTE[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                      "#9467bd", "#8c564b", "#e377c2", "#17becf"};

struct axis {
	int log;
	double lo, hi; /* domain (log: of log10 values) */
};

static void xml(FILE *f, const char *s)
{
	for (; s && *s; s++) {
		switch (*s) {
		case '&':
			fputs("&amp;", f);
			break;
		case '<':
			fputs("&lt;", f);
			break;
		case '>':
			fputs("&gt;", f);
			break;
		case '"':
			fputs("&quot;", f);
			break;
		default:
			fputc(*s, f);
		}
	}
}

static double xpos(const struct axis *a, double v)
{
	double t;
	if (a->log) {
		if (v < pow(10, a->lo))
			v = pow(10, a->lo);
		t = (log10(v) - a->lo) / (a->hi - a->lo);
	} else {
		t = (v - a->lo) / (a->hi - a->lo);
	}
	if (t < 0)
		t = 0;
	if (t > 1)
		t = 1;
	return X0 + t * (X1 - X0);
}

static double nice_step(double range, int target)
{
	double raw = range / target, mag = pow(10, floor(log10(raw)));
	double r = raw / mag;
	return (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * mag;
}

static void fmt_secs(char *out, size_t n, double v)
{
	snprintf(out, n, "%.3f", v);
	if (strchr(out, '.')) { /* 0.200 -> 0.2, 5.000 -> 5 */
		size_t l = strlen(out);
		while (l && out[l - 1] == '0')
			out[--l] = '\0';
		if (l && out[l - 1] == '.')
			out[--l] = '\0';
	}
}

/* metrics drawn, in order; client and cluster rows only when measured */
static const enum metric_id PLOTTED[] = {M_S_SUBMITTED, M_S_RUNNING, M_K_RUNNING,
                                         M_S_READY,     M_S_BOOT,    M_C_READY};

static int in_group(const struct rset *r, const struct rgroup *g, const struct rsample *s)
{
	(void)r;
	return strcmp(g->lesson, s->lesson) == 0 && strcmp(g->disk_source, s->disk_source) == 0;
}

/* the axis of one stage panel: log when the values span more than a decade,
 * else linear over a nice range around them */
static void axis_for(struct axis *ax, double vmin, double vmax)
{
	if (!isfinite(vmin) || !isfinite(vmax) || vmax <= 0) {
		vmin = 0.1;
		vmax = 1;
	}
	if (vmin > 0 && vmax / vmin > 10) {
		ax->log = 1;
		ax->lo = floor(log10(vmin));
		ax->hi = ceil(log10(vmax));
		if (ax->hi - ax->lo < 1)
			ax->hi = ax->lo + 1;
		return;
	}
	ax->log = 0;
	double span = vmax - (vmin > 0 ? vmin : 0);
	if (span <= 0)
		span = vmax > 0 ? vmax : 1;
	double step = nice_step(span * 1.1, 6);
	ax->lo = floor((vmin - span * 0.05) / step) * step;
	if (ax->lo < 0 || vmin / vmax < 0.3)
		ax->lo = 0;
	ax->hi = ceil((vmax + span * 0.05) / step) * step;
	if (ax->hi <= ax->lo)
		ax->hi = ax->lo + step;
}

static void ticks_for(const struct axis *ax, struct dvec *t)
{
	if (ax->log) {
		for (int e = (int)ax->lo; e <= (int)ax->hi; e++)
			for (int m = 1; m <= 5; m = m == 1 ? 2 : m + 3) {
				double v = m * pow(10, e);
				if (log10(v) >= ax->lo - 1e-9 && log10(v) <= ax->hi + 1e-9)
					dvec_push(t, v);
			}
		return;
	}
	double step = nice_step(ax->hi - ax->lo, 6);
	for (double v = ax->lo; v <= ax->hi + step * 1e-6; v += step)
		dvec_push(t, v);
}

int svg_write_rset(const struct rset *r, const char *path, const char *title)
{
	size_t np = sizeof PLOTTED / sizeof PLOTTED[0];
	int rows = 0, stages = 0;

	for (size_t k = 0; k < np; k++) {
		int any = 0;
		for (size_t gi = 0; gi < r->ng; gi++)
			if (r->g[gi].disk_source[0] && r->g[gi].st[PLOTTED[k]].n) {
				any = 1;
				rows++;
			}
		stages += any;
	}
	int top = 122;
	int panel_extra = STAGE_H + 16 + 10; /* title, tick labels, gap */
	int H = top + stages * panel_extra + rows * ROW_H + 60;
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fprintf(f,
	        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
	        "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Arial, sans-serif\" "
	        "font-size=\"12\">\n",
	        W, H, W, H);
	fputs("<title>", f);
	xml(f, title);
	fputs("</title>\n<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n", f);
	fputs("<text x=\"20\" y=\"30\" font-size=\"17\" font-weight=\"bold\">", f);
	xml(f, title);
	fputs("</text>\n", f);

	/* the run's description */
	const char *sub[2] = {kj_str(r->meta, "description"), kj_str(r->meta, "when")};
	for (int i = 0, y = 50; i < 2; i++) {
		if (!sub[i])
			continue;
		fprintf(f, "<text x=\"20\" y=\"%d\" fill=\"#444\">", y);
		xml(f, sub[i]);
		fputs("</text>\n", f);
		y += 16;
	}
	fputs("<text x=\"20\" y=\"86\" fill=\"#444\">seconds from the button press, one axis per "
	      "stage; box p25-p75, thick line p50, whiskers min-max, dots = sessions; hover a row "
	      "for n, p90, p99, mean, stdev</text>\n",
	      f);

	/* legend: one colour per (disk source, lesson) */
	int lx = 20, ci = 0;
	for (size_t gi = 0; gi < r->ng; gi++) {
		const struct rgroup *g = &r->g[gi];
		if (!g->disk_source[0])
			continue;
		fprintf(f, "<rect x=\"%d\" y=\"97\" width=\"12\" height=\"12\" fill=\"%s\"/>", lx,
		        PALETTE[ci % 8]);
		fprintf(f, "<text x=\"%d\" y=\"107\">", lx + 16);
		xml(f, g->disk_source);
		fputs(" (", f);
		xml(f, g->lesson);
		fprintf(f, ")</text>\n");
		lx += 40 + 7 * (int)(strlen(g->disk_source) + strlen(g->lesson));
		ci++;
	}

	int y = top;
	for (size_t k = 0; k < np; k++) {
		enum metric_id m = PLOTTED[k];
		int nrows = 0;
		double vmin = INFINITY, vmax = -INFINITY;
		for (size_t gi = 0; gi < r->ng; gi++) {
			const struct stats *st = &r->g[gi].st[m];
			if (!r->g[gi].disk_source[0] || !st->n)
				continue;
			nrows++;
			if (st->min < vmin)
				vmin = st->min;
			if (st->max > vmax)
				vmax = st->max;
		}
		if (!nrows)
			continue;
		struct axis ax;
		struct dvec ticks = {0};
		axis_for(&ax, vmin, vmax);
		ticks_for(&ax, &ticks);

		fprintf(f, "<text x=\"20\" y=\"%d\" font-weight=\"bold\">%s: ", y + 15,
		        bench_metrics[m].side);
		xml(f, bench_metrics[m].label);
		fprintf(f,
		        "</text><text x=\"%d\" y=\"%d\" fill=\"#888\" font-size=\"10\" "
		        "text-anchor=\"end\">%s axis, s</text>\n",
		        X0 - 8, y + 15 + 16, ax.log ? "log" : "linear");
		y += STAGE_H;
		int gy0 = y + 16, gy1 = gy0 + nrows * ROW_H;
		fputs("<g stroke=\"#e6e6e6\" stroke-width=\"1\">\n", f);
		for (size_t i = 0; i < ticks.n; i++)
			fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>\n",
			        xpos(&ax, ticks.v[i]), gy0 - 2, xpos(&ax, ticks.v[i]), gy1);
		fputs("</g>\n", f);
		fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#999\"/>\n", X0,
		        gy0 - 2, X1, gy0 - 2);
		for (size_t i = 0; i < ticks.n; i++) {
			char lab[32];
			fmt_secs(lab, sizeof lab, ticks.v[i]);
			fprintf(f,
			        "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\" "
			        "font-size=\"10\">%s</text>\n",
			        xpos(&ax, ticks.v[i]), gy0 - 5, lab);
		}
		dvec_free(&ticks);
		y = gy0;
		ci = 0;
		for (size_t gi = 0; gi < r->ng; gi++) {
			const struct rgroup *g = &r->g[gi];
			const struct stats *st = &g->st[m];
			if (!g->disk_source[0])
				continue;
			const char *col = PALETTE[ci++ % 8];
			if (!st->n)
				continue;
			double cy = y + ROW_H / 2.0;
			fprintf(f, "<g>\n<title>");
			xml(f, bench_metrics[m].side);
			fputs(" ", f);
			xml(f, bench_metrics[m].label);
			fputs(", ", f);
			xml(f, g->disk_source);
			fputs(" (", f);
			xml(f, g->lesson);
			fprintf(f,
			        "): n=%zu min=%.3f p25=%.3f p50=%.3f p75=%.3f p90=%.3f p99=%.3f "
			        "max=%.3f mean=%.3f stdev=%.3f s</title>\n",
			        st->n, st->min, st->p25, st->p50, st->p75, st->p90, st->p99,
			        st->max, st->mean, st->stdev);
			fprintf(f, "<text x=\"36\" y=\"%.1f\">", cy + 4);
			xml(f, g->disk_source);
			fputs(" (", f);
			xml(f, g->lesson);
			fprintf(f, ") n=%zu, p50 %.2f s</text>\n", st->n, st->p50);
			double xmn = xpos(&ax, st->min), xmx = xpos(&ax, st->max);
			double x25 = xpos(&ax, st->p25), x75 = xpos(&ax, st->p75);
			double x50 = xpos(&ax, st->p50);
			fprintf(
			    f,
			    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>"
			    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>"
			    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
			    "stroke=\"%s\"/>\n",
			    xmn, cy, xmx, cy, col, xmn, cy - 5, xmn, cy + 5, col, xmx, cy - 5, xmx,
			    cy + 5, col);
			fprintf(
			    f,
			    "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"14\" fill=\"%s\" "
			    "fill-opacity=\"0.25\" stroke=\"%s\"/>"
			    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
			    "stroke-width=\"3\"/>\n",
			    x25, cy - 7, x75 - x25 < 1 ? 1 : x75 - x25, col, col, x50, cy - 9, x50,
			    cy + 9, col);
			for (size_t i = 0; i < r->n; i++) {
				const struct rsample *s = &r->s[i];
				double v = rsample_metric(s, m);
				if (!in_group(r, g, s) || !isfinite(v))
					continue;
				fprintf(f,
				        "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.2\" fill=\"%s\" "
				        "fill-opacity=\"0.6\"/>\n",
				        xpos(&ax, v), cy + (double)((s->idx * 37) % 11 - 5), col);
			}
			fputs("</g>\n", f);
			y += ROW_H;
		}
		y += 10;
	}
	fprintf(f,
	        "<text x=\"20\" y=\"%d\" fill=\"#666\" font-size=\"11\">server = the session's own "
	        "timestamps (running_at and ready_at are set by the poll that saw the change); "
	        "cluster = the VMI's Running</text>\n"
	        "<text x=\"20\" y=\"%d\" fill=\"#666\" font-size=\"11\">phaseTransitionTimestamp; "
	        "client = as seen by labvm-bench from sending the POST. Percentiles by linear "
	        "interpolation.</text>\n",
	        H - 34, H - 19);
	fputs("</svg>\n", f);
	return fclose(f) == 0 ? 0 : -1;
}
