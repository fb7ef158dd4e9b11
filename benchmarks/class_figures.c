/* class_figures.c - the figures of `labvm-bench class` (class.c) per mode:
 * the wait, out-of-order admissions, presses, the most lab VMs at once, the
 * line's estimate error and bound; as JSON and as the table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"
#include "jsonx.h"

void class_summarize(const struct crun *r, struct student *st, int n, struct msum *m)
{
	struct dvec w = {0}, ae = {0}, se = {0};
	double presses = 0;
	for (int i = 0; i < n; i++) {
		struct student *s = &st[i];
		if (!isfinite(s->admitted)) {
			if (!m->errors++)
				bench_fmt_cut(m->first_err, sizeof m->first_err, "%s: %s", s->user,
				              s->err[0] ? s->err : "no lab");
			continue;
		}
		m->got++;
		presses += s->tries;
		/* created_at has milliseconds: an admission at once may read 1 ms early */
		dvec_push(&w, fmax(0, s->admitted - s->pressed));
		if (s->joined && isfinite(s->estimate)) {
			m->estimated++;
			dvec_push(&ae, fabs(s->admitted - s->estimate));
			dvec_push(&se, s->admitted - s->estimate);
		}
		if (s->joined) {
			m->joined++;
			if (isfinite(s->bound)) {
				m->bound_checked++;
				m->bound_held += s->admitted <= s->bound;
			}
		}
		for (int j = 0; j < n; j++) {
			struct student *y = &st[j];
			if (j == i || !isfinite(y->admitted) || !(s->pressed < y->pressed))
				continue;
			m->pairs++;
			m->inv += y->admitted < s->admitted;
		}
	}
	/* seats x (first press -> the last working student's end): the
	 * seat-seconds a class had; worked: admission -> stopped working */
	double first = INFINITY, last = -INFINITY, worked = 0;
	for (int i = 0; i < n; i++) {
		struct student *s = &st[i];
		m->walkaways += s->walks;
		m->idle_ends += s->idle_end;
		m->mistakes += s->mistake;
		if (isfinite(s->pressed))
			first = fmin(first, s->pressed);
		if (!isfinite(s->admitted) || !isfinite(s->left))
			continue;
		worked += fmax(0, s->left - s->admitted);
		if (!s->walks)
			last = fmax(last, s->left);
	}
	int seats = r->o->capacity ? r->o->capacity : 8;
	m->utilisation = last > first ? worked / (seats * (last - first)) : NAN;
	struct stats ss;
	if (w.n)
		qsort(w.v, w.n, sizeof *w.v, stats_cmp_double);
	if (ae.n)
		qsort(ae.v, ae.n, sizeof *ae.v, stats_cmp_double);
	m->wait_p95 = w.n ? stats_pct(w.v, w.n, 95) : NAN;
	m->err_p95 = ae.n ? stats_pct(ae.v, ae.n, 95) : NAN;
	stats_compute(w.v, w.n, &m->wait);
	stats_compute(ae.v, ae.n, &m->abserr);
	stats_compute(se.v, se.n, &ss);
	m->signed_med = ss.p50;
	m->presses = m->got ? presses / m->got : NAN;
	m->most = r->samples ? r->most : -1;
	dvec_free(&w);
	dvec_free(&ae);
	dvec_free(&se);
}

cJSON *class_mode_json(const struct msum *m, const struct student *st, int n, double t0)
{
	cJSON *e = jx_obj();
	jx_add_str(e, "mode", m->mode);
	jx_add_num(e, "students", n);
	jx_add_num(e, "got_a_lab", m->got);
	jx_add_num(e, "errors", m->errors);
	jx_add_str(e, "first_error", m->errors ? m->first_err : NULL);
	cJSON *ws = bench_stats_json(&m->wait, 2, 0);
	bench_jnum(ws, "p95", m->wait_p95, 2);
	jx_put(e, "wait_s", ws);
	bench_jnum(e, "presses_per_student", m->presses, 2);
	jx_add_num(e, "out_of_order_pairs", (double)m->inv);
	jx_add_num(e, "ordered_pairs", (double)m->pairs);
	bench_jnum(e, "out_of_order_pct", m->pairs ? 100.0 * (double)m->inv / (double)m->pairs : 0,
	           2);
	if (m->most >= 0)
		jx_add_num(e, "most_lab_vms_at_once", (double)m->most);
	else
		jx_add_null(e, "most_lab_vms_at_once");
	jx_add_num(e, "joined_the_line", m->joined);
	jx_add_num(e, "estimate_given", m->estimated);
	cJSON *es = bench_stats_json(&m->abserr, 2, 0);
	bench_jnum(es, "p95", m->err_p95, 2);
	jx_put(e, "estimate_abs_error_s", es);
	bench_jnum(e, "estimate_signed_error_median_s", m->signed_med, 2);
	jx_add_num(e, "walkaways", m->walkaways);
	jx_add_num(e, "idle_ends", m->idle_ends);
	jx_add_num(e, "working_students_ended_by_mistake", m->mistakes);
	bench_jnum(e, "seat_utilisation", m->utilisation, 3);
	jx_add_num(e, "bound_checked", m->bound_checked);
	jx_add_num(e, "bound_held", m->bound_held);
	cJSON *arr = jx_add_arr(e, "students_detail");
	for (int i = 0; i < n; i++) {
		const struct student *s = &st[i];
		cJSON *x = jx_obj();
		jx_add_str(x, "user", s->user);
		bench_jnum(x, "press_s", s->pressed - t0, 3);
		bench_jnum(x, "hold_s", s->hold, 3);
		bench_jnum(x, "wait_s", s->admitted - s->pressed, 3);
		bench_jnum(x, "seen_after_admission_s", s->seen - s->admitted, 3);
		jx_add_num(x, "presses", s->tries);
		jx_add_bool(x, "joined", s->joined);
		if (s->joined)
			jx_add_num(x, "position", (double)s->position);
		bench_jnum(x, "estimate_error_s", s->admitted - s->estimate, 3);
		bench_jnum(x, "bound_minus_admission_s", s->bound - s->admitted, 3);
		jx_add_bool(x, "walks_away", s->walks);
		bench_jnum(x, "worked_s", s->left - s->admitted, 3);
		jx_add_bool(x, "ended_idle", s->idle_end);
		jx_add_str(x, "error", s->err[0] ? s->err : NULL);
		jx_push(arr, x);
	}
	return e;
}

/* ------------------------------------------------------------- the table */

/* x with `digits` decimals (signed: a + for positives), or "-" */
static void cell_num(char *out, double x, int digits, int sign)
{
	if (isfinite(x))
		snprintf(out, 32, sign ? "%+.*f" : "%.*f", digits, x);
	else
		snprintf(out, 32, "-");
}

void class_print_table(const struct msum *m, int nm, const struct opts *o)
{
	char c[2][32];
	printf("\n  %-44s", "");
	for (int k = 0; k < nm; k++)
		printf(" %18s", m[k].shown);
	printf("\n");
#define ROW(label, ...)                                                                            \
	do {                                                                                       \
		printf("  %-44s", label);                                                          \
		for (int k = 0; k < nm; k++) {                                                     \
			__VA_ARGS__;                                                               \
			printf(" %18s", c[k]);                                                     \
		}                                                                                  \
		printf("\n");                                                                      \
	} while (0)
	ROW("got a lab", snprintf(c[k], 32, "%d of %d", m[k].got, o->students));
	ROW("wait for a lab p50 (s)", cell_num(c[k], m[k].wait.p50, 1, 0));
	ROW("wait p90 (s)", cell_num(c[k], m[k].wait.p90, 1, 0));
	ROW("wait p95 (s)", cell_num(c[k], m[k].wait_p95, 1, 0));
	ROW("wait max (s)", cell_num(c[k], m[k].wait.max, 1, 0));
	ROW("wait mean (s)", cell_num(c[k], m[k].wait.mean, 1, 0));
	ROW("presses per student (mean)", cell_num(c[k], m[k].presses, 2, 0));
	ROW("out-of-order admissions (pairs)",
	    snprintf(c[k], 32, "%ld of %ld", m[k].inv, m[k].pairs));
	ROW("out-of-order admissions (% of pairs)",
	    cell_num(c[k], m[k].pairs ? 100.0 * (double)m[k].inv / (double)m[k].pairs : 0, 1, 0));
	ROW("most lab VMs at once",
	    m[k].most >= 0 ? snprintf(c[k], 32, "%ld", m[k].most) : snprintf(c[k], 32, "-"));
	ROW("joined the line", snprintf(c[k], 32, "%d", m[k].joined));
	ROW("estimate given on joining", snprintf(c[k], 32, "%d", m[k].estimated));
	ROW("estimate error |admitted - estimate| p50 (s)", cell_num(c[k], m[k].abserr.p50, 1, 0));
	ROW("estimate error p95 (s)", cell_num(c[k], m[k].err_p95, 1, 0));
	ROW("estimate error, signed median (s)", cell_num(c[k], m[k].signed_med, 1, 1));
	ROW("bound held (admitted <= no_later_than)",
	    snprintf(c[k], 32, "%d of %d", m[k].bound_held, m[k].bound_checked));
	ROW("walk-aways (stop, never come back)", snprintf(c[k], 32, "%d", m[k].walkaways));
	ROW("sessions ended idle", snprintf(c[k], 32, "%d", m[k].idle_ends));
	ROW("working students ended by mistake", snprintf(c[k], 32, "%d", m[k].mistakes));
	ROW("seat utilisation (worked / available)", cell_num(c[k], m[k].utilisation, 3, 0));
#undef ROW
}
