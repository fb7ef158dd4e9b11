/* report.c - `labvm-bench report`: readiness distributions from the session
 * rows in PostgreSQL (every row keeps created_at, submitted_at, running_at,
 * ready_at and the failure stage), so production history is measured without
 * new load. Server side only: no client or cluster times exist there. Reads
 * no secrets (agent tokens stay in session_vms) and prints no user names. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "db.h"
#include "jsonx.h"

/* "30m", "24h", "7d", "90s" ago -> RFC 3339; anything else is passed on to
 * PostgreSQL as a timestamptz literal. */
static char *when_arg(const char *v)
{
	char *end;
	double n = strtod(v, &end);
	if (end != v && n >= 0 && end[0] && !end[1] && strchr("smhd", end[0])) {
		double mul = end[0] == 's' ? 1 : end[0] == 'm' ? 60 : end[0] == 'h' ? 3600 : 86400;
		char out[32];
		bench_fmt_time((double)time(NULL) - n * mul, out);
		return xstrdup(out);
	}
	return xstrdup(v);
}

static double val(const PGresult *res, int row, int col)
{
	const char *v = db_val(res, row, col);
	return v ? strtod(v, NULL) : NAN;
}

int cmd_report(struct opts *o)
{
	struct db d;
	struct rset rs;
	char *since = NULL, *until = NULL;
	int rc = 1;

	memset(&rs, 0, sizeof rs);
	if (!o->database) {
		fprintf(stderr, "labvm-bench report: no --database (or LABVM_DATABASE)\n");
		return 2;
	}
	since = when_arg(o->since);
	until = o->until ? when_arg(o->until) : NULL;
	char *lessons = o->lessons_arg ? xstrdup(o->lessons_arg) : NULL;
	db_init(&d, o->database);
	if (db_ensure(&d) < 0) {
		fprintf(stderr, "labvm-bench report: cannot connect to the database: %s\n", d.msg);
		goto out;
	}
	const char *p[4] = {o->environment, since, until, lessons};
	PGresult *res = db_exec(
	    &d,
	    "SELECT id::text, lesson, COALESCE(disk_source, CASE WHEN runtime = 'pod' THEN 'pod' "
	    "ELSE 'unknown' END), disk_fallback_reason, "
	    "state, stage, end_reason, error, "
	    "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), "
	    "extract(epoch from submitted_at - created_at), "
	    "extract(epoch from running_at - created_at), "
	    "extract(epoch from ready_at - created_at), "
	    "CASE WHEN state = 'failed' THEN extract(epoch from ended_at - created_at) END, "
	    "to_char($2::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), "
	    "to_char(COALESCE($3::timestamptz, now()) AT TIME ZONE 'UTC', "
	    "        'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') "
	    "FROM sessions "
	    "WHERE runtime = 'vm' AND ($1::text IS NULL OR environment = $1) "
	    "AND created_at >= $2::timestamptz "
	    "AND ($3::timestamptz IS NULL OR created_at < $3::timestamptz) "
	    "AND ($4::text IS NULL OR lesson = ANY (string_to_array($4, ','))) "
	    "ORDER BY created_at",
	    4, p);
	if (!res) {
		fprintf(stderr, "labvm-bench report: query failed: %s\n", d.msg);
		goto out;
	}
	int rows = PQntuples(res);
	for (int i = 0; i < rows; i++) {
		struct rsample *x = rset_add(&rs);
		x->http_status = 201; /* every row is an admitted start */
		bench_copy(x->session_id, sizeof x->session_id, db_val(res, i, 0));
		bench_copy(x->lesson, sizeof x->lesson, db_val(res, i, 1));
		bench_copy(x->disk_source, sizeof x->disk_source, db_val(res, i, 2));
		bench_copy(x->fallback_reason, sizeof x->fallback_reason, db_val(res, i, 3));
		bench_copy(x->state, sizeof x->state, db_val(res, i, 4));
		bench_copy(x->stage, sizeof x->stage, db_val(res, i, 5));
		bench_copy(x->end_reason, sizeof x->end_reason, db_val(res, i, 6));
		bench_copy(x->error, sizeof x->error, db_val(res, i, 7));
		bench_copy(x->created_at, sizeof x->created_at, db_val(res, i, 8));
		x->s_submitted = val(res, i, 9);
		x->s_running = val(res, i, 10);
		x->s_ready = val(res, i, 11);
		x->s_failed = val(res, i, 12);
	}
	/* the window as PostgreSQL understood it (also when there are no rows) */
	PGresult *w =
	    db_exec(&d,
	            "SELECT to_char($1::timestamptz AT TIME ZONE 'UTC', "
	            "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), to_char(COALESCE($2::timestamptz, "
	            "now()) AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
	            2, (const char *const[]){since, until});
	char from[32] = "?", to[32] = "?";
	if (w) {
		bench_copy(from, sizeof from, db_val(w, 0, 0));
		bench_copy(to, sizeof to, db_val(w, 0, 1));
		PQclear(w);
	}
	PQclear(res);

	cJSON *m = jx_obj();
	jx_add_str(m, "command", "report");
	jx_add_str(m, "environment", o->environment ? o->environment : "(all)");
	jx_add_str(m, "lessons", o->lessons_arg ? o->lessons_arg : "(all)");
	jx_add_str(m, "from", from);
	jx_add_str(m, "to", to);
	char when[32];
	bench_fmt_time((double)time(NULL), when);
	jx_add_str(m, "when", when);
	char *desc = xasprintf("report: %d session(s) from the database, environment %s, "
	                       "lessons %s, created %s .. %s",
	                       rows, o->environment ? o->environment : "(all)",
	                       o->lessons_arg ? o->lessons_arg : "(all)", from, to);
	jx_add_str(m, "description", desc);
	rs.meta = m;
	rset_summarize(&rs);
	printf("%s\nTimes in seconds from the button press (created_at), server clock; running_at "
	       "and ready_at\nare set by the poll that saw the change. Percentiles by linear "
	       "interpolation; stdev is the\nsample standard deviation.\n",
	       desc);
	free(desc);
	if (rows == 0)
		printf("\nno sessions in this window\n");
	else
		rset_print(&rs, stdout, 0);
	rc = rset_write(&rs, o->out_dir, o->name, "labvm readiness (from the database)") < 0;
	if (rs.order_violations)
		rc = 1;
out:
	db_close(&d);
	rset_free(&rs);
	free(since);
	free(until);
	free(lessons);
	return rc;
}
