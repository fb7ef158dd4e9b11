/* api_metrics.c - GET /api/metrics: the Prometheus text exposition format
 * (0.0.4), for operators only (REMOTE_USER listed in `operators`: the route's
 * NEED_OPERATOR; the front end authenticates, as for every /api/ route;
 * others get 403).
 *
 * Correct behind a load balancer with many labvm.fcgi processes on many
 * hosts: nothing is process-local. At scrape time it derives from PostgreSQL
 * what the sessions table knows (sessions by state, starts, failures, stage
 * durations as histograms) and asks the cluster for the capacity in use; the
 * events the table cannot tell (refusals, console tickets, reaper passes,
 * call latencies) are rows of metric_counters (core/metrics.c), summed over
 * every process. Counters are per environment (labvm.conf). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "admission.h"
#include "api.h"
#include "httpc.h"
#include "jsonx.h"
#include "log.h"
#include "metrics.h"
#include "provision.h"
#include "queue.h"

/* stage durations from the button press (seconds) */
static const double stage_buckets[] = {1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 600};
#define NSB ((int)(sizeof stage_buckets / sizeof stage_buckets[0]))

static const struct family {
	const char *name, *type, *help;
} families[] = {
    {"labvm_start_refusals_total", "counter",
     "Start requests (POST /api/sessions) refused, by the answer's error code."},
    {"labvm_console_tickets_total", "counter", "Console tickets issued."},
    {"labvm_reaper_passes_total", "counter", "labvm-reaper runs, by outcome."},
    {"labvm_reaper_deleted_total", "counter",
     "Sessions ended or objects deleted by the reaper, by why."},
    {"labvm_cluster_request_duration_seconds", "histogram",
     "Kubernetes API call latency, by HTTP method."},
    {"labvm_cluster_request_errors_total", "counter",
     "Kubernetes API calls that failed (unreachable or 5xx), by HTTP method."},
    {"labvm_agent_request_duration_seconds", "histogram",
     "Guest agent call latency, by agent endpoint."},
    {"labvm_agent_request_errors_total", "counter",
     "Guest agent calls that failed (unreachable or 5xx), by endpoint."},
    {"labvm_db_query_duration_seconds", "histogram",
     "PostgreSQL statement latency, by statement verb."},
    {"labvm_db_query_errors_total", "counter", "PostgreSQL statements that failed, by verb."},
};
#define NFAM (sizeof families / sizeof families[0])

static void family_head(struct buf *b, const char *name, const char *type, const char *help)
{
	buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static const char *lab(char *out, size_t n, const char *v)
{
	metrics_escape(out, n, v ? v : "");
	return out;
}

static int gauge_query(struct req *r, struct buf *b, const char *sql, const char *name,
                       const char *type, const char *help, const char *l1, const char *l2)
{
	const char *p[1] = {r->x->cfg->environment};
	PGresult *res = db_exec(&r->x->db, sql, 1, p);
	if (!res)
		return -1;
	char v1[256], v2[256];
	family_head(b, name, type, help);
	for (int i = 0; i < PQntuples(res); i++) {
		if (l2)
			buf_printf(b, "%s{%s=\"%s\",%s=\"%s\"} %s\n", name, l1,
			           lab(v1, sizeof v1, db_val(res, i, 0)), l2,
			           lab(v2, sizeof v2, db_val(res, i, 1)), db_val(res, i, 2));
		else
			buf_printf(b, "%s{%s=\"%s\"} %s\n", name, l1,
			           lab(v1, sizeof v1, db_val(res, i, 0)), db_val(res, i, 1));
	}
	PQclear(res);
	return 0;
}

static int stage_histograms(struct req *r, struct buf *b)
{
	struct buf sql = {0};
	buf_puts(&sql, "WITH d AS ("
	               "SELECT 'running' AS stage, lesson, coalesce(disk_source, 'none') AS ds, "
	               "extract(epoch FROM running_at - created_at)::float8 AS s FROM sessions "
	               "WHERE environment = $1 AND running_at IS NOT NULL "
	               "UNION ALL "
	               "SELECT 'ready', lesson, coalesce(disk_source, 'none'), "
	               "extract(epoch FROM ready_at - created_at)::float8 FROM sessions "
	               "WHERE environment = $1 AND ready_at IS NOT NULL) "
	               "SELECT stage, lesson, ds, count(*), sum(s)");
	for (int i = 0; i < NSB; i++)
		buf_printf(&sql, ", count(*) FILTER (WHERE s <= %g)", stage_buckets[i]);
	buf_puts(&sql, " FROM d GROUP BY 1, 2, 3 ORDER BY 1, 2, 3");
	const char *p[1] = {r->x->cfg->environment};
	PGresult *res = db_exec(&r->x->db, sql.p, 1, p);
	buf_free(&sql);
	if (!res)
		return -1;
	const char *name = "labvm_start_stage_duration_seconds";
	family_head(b, name, "histogram",
	            "Seconds from the start button to the VMI running (stage=\"running\") and to "
	            "the guest's ready flag (stage=\"ready\"), by lesson and disk source.");
	for (int i = 0; i < PQntuples(res); i++) {
		char ls[512], v1[128], v2[128];
		snprintf(ls, sizeof ls, "stage=\"%s\",lesson=\"%s\",disk_source=\"%s\"",
		         db_val(res, i, 0), lab(v1, sizeof v1, db_val(res, i, 1)),
		         lab(v2, sizeof v2, db_val(res, i, 2)));
		for (int k = 0; k < NSB; k++)
			buf_printf(b, "%s_bucket{%s,le=\"%g\"} %s\n", name, ls, stage_buckets[k],
			           db_val(res, i, 5 + k));
		buf_printf(b, "%s_bucket{%s,le=\"+Inf\"} %s\n", name, ls, db_val(res, i, 3));
		buf_printf(b, "%s_sum{%s} %s\n", name, ls, db_val(res, i, 4));
		buf_printf(b, "%s_count{%s} %s\n", name, ls, db_val(res, i, 3));
	}
	PQclear(res);
	return 0;
}

static const struct family *family_of(const char *row_name)
{
	for (size_t i = 0; i < NFAM; i++) {
		size_t n = strlen(families[i].name);
		if (strncmp(row_name, families[i].name, n) != 0)
			continue;
		const char *rest = row_name + n;
		if (!*rest || (strcmp(families[i].type, "histogram") == 0 &&
		               (!strcmp(rest, "_bucket") || !strcmp(rest, "_sum") ||
		                !strcmp(rest, "_count"))))
			return &families[i];
	}
	return NULL;
}

static int counters(struct req *r, struct buf *b)
{
	/* one family at a time; a histogram's series together, buckets by le */
	const char *sql =
	    "SELECT name, labels, value FROM metric_counters WHERE environment = $1 "
	    "ORDER BY regexp_replace(name, '_(bucket|sum|count)$', ''), "
	    "regexp_replace(labels, ',?le=\"[^\"]*\"', ''), "
	    "CASE WHEN name LIKE '%\\_bucket' THEN 0 WHEN name LIKE '%\\_sum' THEN 1 ELSE 2 END, "
	    "CASE WHEN labels LIKE '%le=\"+Inf\"%' THEN 'Infinity'::float8 "
	    "ELSE coalesce(substring(labels FROM 'le=\"([0-9.e+-]+)\"')::float8, 0) END";
	const char *p[1] = {r->x->cfg->environment};
	PGresult *res = db_exec(&r->x->db, sql, 1, p);
	if (!res)
		return -1;
	const struct family *cur = NULL;
	int seen[NFAM] = {0};
	for (int i = 0; i < PQntuples(res); i++) {
		const char *name = db_val(res, i, 0), *labels = db_val(res, i, 1);
		const struct family *f = family_of(name);
		if (!f)
			continue;
		if (f != cur) {
			size_t fi = (size_t)(f - families);
			if (seen[fi]) /* cannot happen with the ORDER BY; never emit a family twice
			               */
				continue;
			seen[fi] = 1;
			family_head(b, f->name, f->type, f->help);
			cur = f;
		}
		double v = strtod(db_val(res, i, 2), NULL);
		if (labels && *labels)
			buf_printf(b, "%s{%s} %.17g\n", name, labels, v);
		else
			buf_printf(b, "%s %.17g\n", name, v);
	}
	PQclear(res);
	/* the families with no event yet: present, empty (counters at 0) */
	for (size_t i = 0; i < NFAM; i++)
		if (!seen[i] && strcmp(families[i].type, "counter") == 0 &&
		    !strstr(families[i].name, "_errors_total") &&
		    strcmp(families[i].name, "labvm_start_refusals_total") != 0 &&
		    strcmp(families[i].name, "labvm_reaper_deleted_total") != 0 &&
		    strcmp(families[i].name, "labvm_reaper_passes_total") != 0) {
			family_head(b, families[i].name, families[i].type, families[i].help);
			buf_printf(b, "%s 0\n", families[i].name);
		}
	return 0;
}

/* The VM seats, counted and decided as admission does. */
static void capacity(struct req *r, struct buf *b)
{
	struct labctx *x = r->x;
	const struct runtime_ops *rt = &runtime_vm;
	struct admission_facts f;
	long in_use = 0;
	admission_facts_init(&f, ADM_VIEW, 1, rt->capacity(x->cfg));
	int ok = lab_count(x, rt, &in_use) == 200;
	family_head(b, "labvm_cluster_up", "gauge",
	            "1 when the cluster answered this scrape's list of lab VMs.");
	buf_printf(b, "labvm_cluster_up %d\n", ok);
	if (ok) {
		family_head(b, "labvm_vm_capacity_in_use", "gauge",
		            "Lab VMs in the namespace now (every environment, terminating ones "
		            "included), as admission counts them.");
		buf_printf(b, "labvm_vm_capacity_in_use %ld\n", in_use);
		f.in_use = in_use;
		f.line_ahead = queue_seats_ahead(x, rt->name, NULL);
		struct admission a = admission_decide(&f);
		if (f.line_ahead >= 0) {
			family_head(
			    b, "labvm_vm_capacity_free", "gauge",
			    "VM seats a one-machine start could take now (the limit less the "
			    "VMs in use and the seats the waiting line holds), as admission "
			    "decides.");
			buf_printf(b, "labvm_vm_capacity_free %ld\n",
			           a.verdict == ADM_ADMIT ? f.seats - a.short_by : 0);
		}
	}
	family_head(b, "labvm_vm_capacity_limit", "gauge", "vm_capacity of labvm.conf.");
	buf_printf(b, "labvm_vm_capacity_limit %d\n", x->cfg->vm_capacity);
}

/* This host's console bridge (GET /console-stats on console_listen, a
 * local-only path): consoles live in labvm-console, one per host, so these
 * gauges are the answering host's, labelled with it. */
static void console_bridge(struct req *r, struct buf *b)
{
	const char *l = r->x->cfg->console_listen;
	const char *colon = strrchr(l, ':');
	char host[160], me[128], lab[320];
	size_t hl = colon ? (size_t)(colon - l) : 0;
	snprintf(host, sizeof host, "%.*s", (int)(hl < sizeof host ? hl : sizeof host - 1), l);
	if (!host[0] || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "*") == 0)
		snprintf(host, sizeof host, "127.0.0.1");
	else if (strcmp(host, "[::]") == 0)
		snprintf(host, sizeof host, "[::1]");
	char *url = xasprintf("http://%s%s/console-stats", host, colon ? colon : ":7682");
	if (gethostname(me, sizeof me) != 0)
		snprintf(me, sizeof me, "localhost");
	me[sizeof me - 1] = '\0';
	char esc[160];
	metrics_escape(esc, sizeof esc, me);
	snprintf(lab, sizeof lab, "host=\"%s\"", esc);

	CURL *h = curl_easy_init();
	struct buf body = {0};
	char msg[256];
	struct httpc_req rq = {.method = "GET",
	                       .url = url,
	                       .connect_timeout_ms = 500,
	                       .timeout_ms = 1000,
	                       .max_body = 1 << 20,
	                       .no_proxy = 1};
	long code = h ? httpc_call(h, &rq, &body, msg, sizeof msg) : 0;
	cJSON *o = code == 200 ? httpc_json(&body) : NULL;
	family_head(b, "labvm_console_bridge_up", "gauge",
	            "1 when this host's labvm-console answered (console_listen).");
	buf_printf(b, "labvm_console_bridge_up{%s} %d\n", lab, o != NULL);
	static const struct {
		const char *key, *name, *help;
	} g[] = {{"browsers", "labvm_console_connections",
	          "Browser console connections (WebSockets) on this host's labvm-console."},
	         {"sessions", "labvm_console_sessions",
	          "Sessions with a console on this host's labvm-console."},
	         {"consoles", "labvm_console_machine_consoles",
	          "Machine consoles (one per session and machine, each with its own upstream) on "
	          "this host's labvm-console."},
	         {"upstreams_open", "labvm_console_upstreams_open",
	          "Open upstream serial consoles (KubeVirt) of this host's labvm-console."}};
	for (size_t i = 0; o && i < sizeof g / sizeof g[0]; i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, g[i].key);
		if (!cJSON_IsNumber(v))
			continue;
		family_head(b, g[i].name, "gauge", g[i].help);
		buf_printf(b, "%s{%s} %.0f\n", g[i].name, lab, v->valuedouble);
	}
	cJSON_Delete(o);
	buf_free(&body);
	if (h)
		curl_easy_cleanup(h);
	free(url);
}

static void resp_text(struct req *r, int status, const struct buf *b)
{
	r->status = status;
	FCGX_FPrintF(r->fr->out,
	             "Status: %d OK\r\n"
	             "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
	             "Cache-Control: no-store\r\n"
	             "X-Content-Type-Options: nosniff\r\n"
	             "%s\r\n",
	             status, r->headers.p ? r->headers.p : "");
	FCGX_PutStr(b->p ? b->p : "", (int)b->len, r->fr->out);
	if (FCGX_GetError(r->fr->out))
		log_warn("writing the metrics failed (client gone?)");
}

enum hres api_metrics(struct req *r)
{
	struct labctx *x = r->x;
	struct buf b = {0};
	double t0 = util_mono_s();

	/* this process's latest calls too, not only what its flusher wrote */
	metrics_flush(&x->db, x->cfg->environment);
	if (gauge_query(r, &b,
	                "SELECT state, runtime, count(*) FROM sessions WHERE environment = $1 "
	                "GROUP BY 1, 2 ORDER BY 1, 2",
	                "labvm_sessions", "gauge",
	                "Sessions in the database by state and runtime (ended and failed ones "
	                "stay).",
	                "state", "runtime") < 0 ||
	    gauge_query(r, &b,
	                "SELECT lesson, runtime, count(*) FROM sessions WHERE environment = $1 "
	                "GROUP BY 1, 2 ORDER BY 1, 2",
	                "labvm_session_starts_total", "counter",
	                "Starts admitted (a session was created), by lesson and runtime.", "lesson",
	                "runtime") < 0 ||
	    gauge_query(r, &b,
	                "SELECT stage, count(*) FROM sessions WHERE environment = $1 AND "
	                "state = 'failed' GROUP BY 1 ORDER BY 1",
	                "labvm_session_failures_total", "counter",
	                "Sessions that failed, by the stage they had reached.", "stage",
	                NULL) < 0 ||
	    gauge_query(r, &b,
	                "SELECT coalesce(disk_fallback_reason, 'none'), count(*) FROM sessions "
	                "WHERE environment = $1 AND disk_source IS NOT NULL GROUP BY 1 ORDER BY 1",
	                "labvm_session_disk_fallbacks_total", "counter",
	                "Starts by golden-disk fallback reason (none: no fallback).", "reason",
	                NULL) < 0 ||
	    /* issue #28: why sessions ended (idle among the reasons), and the
	     * seat-seconds idle ends gave back (each machine's seat, from the
	     * idle end to the expiry it would otherwise have held on to) */
	    gauge_query(r, &b,
	                "SELECT end_reason, count(*) FROM sessions WHERE environment = $1 AND "
	                "end_reason IS NOT NULL GROUP BY 1 ORDER BY 1",
	                "labvm_sessions_ended_total", "counter",
	                "Sessions ended or failed, by end reason (user, expired, idle, failed, "
	                "operator, orphaned, ...).",
	                "reason", NULL) < 0 ||
	    gauge_query(r, &b,
	                "SELECT runtime, round(coalesce(sum(greatest(0, extract(epoch FROM "
	                "expires_at - ended_at)) * (SELECT count(*) FROM session_vms v "
	                "WHERE v.session_id = s.id)), 0)::numeric, 3) FROM sessions s "
	                "WHERE environment = $1 AND end_reason = 'idle' AND ended_at IS NOT NULL "
	                "GROUP BY 1 ORDER BY 1",
	                "labvm_idle_reclaimed_seat_seconds_total", "counter",
	                "Seat-seconds idle ends gave back to the line: per machine, from the "
	                "idle end to the expiry the session would have held its seat until.",
	                "runtime", NULL) < 0 ||
	    stage_histograms(r, &b) < 0 || counters(r, &b) < 0) {
		buf_free(&b);
		return api_db_error(r);
	}
	capacity(r, &b);
	console_bridge(r, &b);
	family_head(&b, "labvm_metrics_scrape_duration_seconds", "gauge",
	            "How long this answer took to compute.");
	buf_printf(&b, "labvm_metrics_scrape_duration_seconds %.6f\n", util_mono_s() - t0);
	resp_text(r, 200, &b);
	buf_free(&b);
	return H_DONE;
}

void api_metrics_request_done(struct req *r)
{
	const char *env = r->x->cfg->environment;
	char l[96], v[64];
	if (!r->route || !r->status)
		return;
	if (strcmp(r->route, "/api/sessions") == 0 && strcmp(r->method, "POST") == 0 &&
	    r->status != 201) {
		if (r->error[0])
			snprintf(v, sizeof v, "%s", r->error);
		else
			snprintf(v, sizeof v, "status_%d", r->status);
		metrics_escape(l, sizeof l, v);
		char labels[128];
		snprintf(labels, sizeof labels, "reason=\"%s\"", l);
		db_rollback(&r->x->db);
		metrics_count(&r->x->db, env, "labvm_start_refusals_total", labels, 1);
	} else if (strcmp(r->route, "/api/sessions/*/console-ticket") == 0 && r->status == 200) {
		db_rollback(&r->x->db);
		metrics_count(&r->x->db, env, "labvm_console_tickets_total", "", 1);
	}
}
