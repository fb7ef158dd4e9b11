/* metric.c - what one readiness sample measures: the stages (bench_metrics,
 * the names in every table, CSV, JSON and SVG), a sample's value of each,
 * and the check that its stages are in order on both clocks. samples.c and
 * svg.c both read these; nothing here calls back. */
#include <math.h>

#include "bench.h"

const struct metric bench_metrics[M_COUNT] = {
    [M_S_SUBMITTED] = {"server_submitted", "server", "press -> submitted"},
    [M_S_RUNNING] = {"server_running", "server", "press -> VMI Running"},
    [M_S_READY] = {"server_ready", "server", "press -> ready"},
    [M_S_BOOT] = {"server_running_to_ready", "server", "Running -> ready"},
    [M_K_RUNNING] = {"cluster_running", "cluster", "press -> VMI Running"},
    [M_C_SUBMITTED] = {"client_submitted", "client", "request -> 201"},
    [M_C_RUNNING] = {"client_running", "client", "request -> Running seen"},
    [M_C_READY] = {"client_ready", "client", "request -> ready seen"},
};

double rsample_metric(const struct rsample *s, enum metric_id m)
{
	switch (m) {
	case M_S_SUBMITTED:
		return s->s_submitted;
	case M_S_RUNNING:
		return s->s_running;
	case M_S_READY:
		return s->s_ready;
	case M_S_BOOT:
		return s->s_ready - s->s_running; /* NAN unless both */
	case M_K_RUNNING:
		return s->k_running;
	case M_C_SUBMITTED:
		return s->c_submitted;
	case M_C_RUNNING:
		return s->c_running;
	case M_C_READY:
		return s->c_ready;
	default:
		return NAN;
	}
}

/* a <= b for the reached ones (NAN = not reached: no constraint) */
static int le(double a, double b)
{
	return !isfinite(a) || !isfinite(b) || a <= b + 1e-9;
}

int rsample_order_ok(const struct rsample *s)
{
	/* server clock: created_at (0) <= submitted <= running <= ready */
	double sv[4] = {0, s->s_submitted, s->s_running, s->s_ready};
	/* client clock: request sent (0) <= 201 <= running seen <= ready seen */
	double cv[4] = {0, s->c_submitted, s->c_running, s->c_ready};
	for (int i = 0; i < 4; i++)
		for (int j = i + 1; j < 4; j++)
			if (!le(sv[i], sv[j]) || !le(cv[i], cv[j]))
				return 0;
	/* a later stage reached implies the earlier ones (for started sessions) */
	if (s->http_status == 201) {
		if (isfinite(s->s_ready) && !isfinite(s->s_running))
			return 0;
		if (isfinite(s->s_running) && !isfinite(s->s_submitted))
			return 0;
		if (isfinite(s->c_ready) && !isfinite(s->c_submitted))
			return 0;
	}
	return 1;
}
