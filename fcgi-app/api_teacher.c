/* api_teacher.c - the teacher's room (issue #29): the routes under
 * /api/teacher/ and the student's own grade history.
 *
 * Who teaches lesson L: the operators, labvm.conf `teachers`, and the users
 * in L's own "teachers" (api_teaches). Everything is scoped to the lessons
 * the caller teaches and answers 404 otherwise, never 403, so that nobody
 * learns which lessons or sessions exist: a student, or a teacher of
 * another lesson, sees exactly what a wrong id shows.
 *
 *   GET    /api/teacher/lessons                    the lessons I teach, with counts
 *   GET    /api/teacher/lessons/{id}/class         students (session, grades, ticks) and
 *                                                  the line; ETag / If-None-Match -> 304
 *   GET    /api/teacher/lessons/{id}/grades.csv    one row per student and step (RFC 4180)
 *   GET    /api/teacher/audit?lesson=ID            every teacher action on the lesson
 *   POST   /api/teacher/sessions/{id}/console-ticket  {"machine", "mode": "view"|"control"}
 *   POST   /api/teacher/sessions/{id}/extend       {"minutes"} (1..teacher_extend_max_minutes)
 *   POST   /api/teacher/sessions/{id}/reset        a fresh session in the same seat (start.h)
 *   DELETE /api/teacher/sessions/{id}              end it, end_reason "teacher"
 *   GET    /api/sessions/{id}/grades               the owner's own history
 *
 * Every action (watch, take over, extend, reset, end) is a row of
 * teacher_audit (sql/013), written before or with the change it records: an
 * action that cannot be recorded is not done (503). The reads are here, the
 * actions in api_teacher_act.c (teacher.h between them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/sha.h>

#include "api.h"
#include "jsonx.h"
#include "log.h"
#include "provision.h"
#include "pump.h"
#include "session.h"
#include "session_change.h"
#include "start.h"
#include "teacher.h"
#include "ticket.h"

/* ------------------------------------------------------------ who teaches */

/* The caller teaches lesson id (a lesson no longer offered: operators and
 * `teachers` only). */
static int teaches_id(const struct req *r, const char *id)
{
	const struct cfg *c = r->x->cfg;
	const struct lesson *l = id ? lessons_find(r->x->lessons, id) : NULL;
	if (l)
		return api_teaches(c, l, r->user);
	return id && r->user &&
	       (api_user_listed(c->operators, r->user) || api_user_listed(c->teachers, r->user));
}

static enum hres not_found(struct req *r)
{
	resp_error(r, E_NOT_FOUND, "no such lesson or session");
	return H_DONE;
}

/* The {id} session, when the caller teaches its lesson: SESSION_FOUND (s
 * loaded), else answered (404, 503) with *h set. */
int teacher_session(struct req *r, struct session *s, enum hres *h)
{
	int rc = session_load(r->x, r->param, s);
	*h = H_DONE;
	if (rc == SESSION_DBERR) {
		*h = api_db_error(r);
		return -1;
	}
	if (rc != SESSION_FOUND || !teaches_id(r, s->lesson)) {
		session_free(s);
		not_found(r);
		return -1;
	}
	return SESSION_FOUND;
}

/* One row of teacher_audit. 0 / -1 (database). */
int teacher_audit(struct req *r, const char *action, const struct session *s, cJSON *detail)
{
	char *d = detail ? jx_print(detail) : NULL;
	const char *p[7] = {
	    r->x->cfg->environment, r->user, action, s->lesson, s->id, s->user, d ? d : "{}"};
	int rc = db_cmd(&r->x->db,
	                "INSERT INTO teacher_audit (environment, teacher, action, lesson, "
	                "session_id, student, detail) VALUES ($1, $2, $3, $4, $5::uuid, $6, "
	                "$7::jsonb)",
	                7, p);
	cJSON_free(d);
	cJSON_Delete(detail);
	if (rc == 0)
		log_info("teacher %s: %s session %s of %s (lesson %s)", r->user, action, s->id,
		         s->user, s->lesson);
	return rc;
}

/* The value of `name=` in the query string (a lesson id: label characters
 * only, so no decoding), or NULL. */
static int query_lesson(struct req *r, char *out, size_t n)
{
	const char *q = FCGX_GetParam("QUERY_STRING", r->fr->envp);
	for (const char *p = q; p && *p;) {
		if (strncmp(p, "lesson=", 7) == 0) {
			p += 7;
			size_t w = strcspn(p, "&");
			if (!w || w >= n)
				return -1;
			memcpy(out, p, w);
			out[w] = '\0';
			return util_label_value_ok(out) ? 0 : -1;
		}
		const char *amp = strchr(p, '&');
		p = amp ? amp + 1 : NULL;
	}
	return -1;
}

/* ------------------------------------------------------------ lessons */

enum hres api_teacher_lessons(struct req *r)
{
	struct labctx *x = r->x;
	const char *p[1] = {x->cfg->environment};
	PGresult *cnt = db_exec(&x->db,
	                        "SELECT lesson, count(*) FILTER (WHERE state = 'starting'), "
	                        "count(*) FILTER (WHERE state = 'ready') FROM sessions "
	                        "WHERE environment = $1 AND state IN ('starting', 'ready') "
	                        "GROUP BY lesson",
	                        1, p);
	PGresult *q = cnt ? db_exec(&x->db,
	                            "SELECT lesson, count(*) FROM session_queue "
	                            "WHERE environment = $1 AND state = 'waiting' GROUP BY lesson",
	                            1, p)
	                  : NULL;
	if (!q) {
		PQclear(cnt);
		return api_db_error(r);
	}
	cJSON *o = jx_obj();
	jx_add_str(o, "teacher", r->user);
	cJSON *a = jx_add_arr(o, "lessons");
	int any = 0;
	for (size_t i = 0; i < x->lessons->n; i++) {
		const struct lesson *l = &x->lessons->v[i];
		if (!api_teaches(x->cfg, l, r->user))
			continue;
		any = 1;
		long starting = 0, ready = 0, queued = 0;
		for (int k = 0; k < PQntuples(cnt); k++)
			if (strcmp(PQgetvalue(cnt, k, 0), l->id) == 0) {
				starting = atol(PQgetvalue(cnt, k, 1));
				ready = atol(PQgetvalue(cnt, k, 2));
			}
		for (int k = 0; k < PQntuples(q); k++)
			if (strcmp(PQgetvalue(q, k, 0), l->id) == 0)
				queued = atol(PQgetvalue(q, k, 1));
		cJSON *e = jx_obj();
		jx_add_str(e, "id", l->id);
		jx_add_str(e, "title", l->title);
		if (l->title_ja)
			jx_add_str(jx_add_obj(jx_add_obj(e, "i18n"), "ja"), "title", l->title_ja);
		jx_add_str(e, "runtime", lesson_runtime_str(l->runtime));
		jx_add_num(e, "minutes", l->minutes);
		jx_add_num(e, "steps", (double)l->nsteps);
		jx_add_num(e, "active", (double)(starting + ready));
		jx_add_num(e, "starting", (double)starting);
		jx_add_num(e, "ready", (double)ready);
		jx_add_num(e, "queued", (double)queued);
		jx_push(a, e);
	}
	PQclear(cnt);
	PQclear(q);
	if (!any) {
		/* a student, or a teacher of nothing: there is no teacher's room */
		cJSON_Delete(o);
		return not_found(r);
	}
	resp_json(r, 200, o);
	return H_DONE;
}

/* ------------------------------------------------------------ class */

/* The grades of one session, as the class and the student's history show
 * them, from "MS:RESULTS,MS:RESULTS,..." (sql/013 grades, oldest first: the
 * epoch milliseconds of each grade and its results, one '0' or '1' per step
 * in step order; one string per session, parsed here rather than as JSON:
 * the class view of 200 students x 10 grades reads 2,000 of them). Each
 * grade is {"at", "passed", "total", "results"}; the latest grade's result
 * per step and whether a step ever passed go to latest[] and ever[]
 * (nsteps, the lesson's). */
static cJSON *grades_json(const char *rows, size_t nsteps, signed char *latest, char *ever)
{
	cJSON *out = jx_arr();
	for (size_t i = 0; i < nsteps; i++) {
		latest[i] = -1;
		ever[i] = 0;
	}
	for (const char *p = rows; p && *p;) {
		char *end;
		long long ms = strtoll(p, &end, 10);
		if (end == p || *end != ':')
			break;
		const char *res = end + 1;
		size_t n = strspn(res, "01");
		char at[40];
		time_t sec = (time_t)(ms / 1000);
		struct tm tm;
		gmtime_r(&sec, &tm);
		size_t k = strftime(at, sizeof at, "%Y-%m-%dT%H:%M:%S", &tm);
		snprintf(at + k, sizeof at - k, ".%03dZ", (int)(ms % 1000));
		int passed = 0;
		for (size_t i = 0; i < n; i++) {
			int ok = res[i] == '1';
			passed += ok;
			if (i < nsteps) {
				latest[i] = (signed char)ok;
				ever[i] |= (char)ok;
			}
		}
		for (size_t i = n; i < nsteps; i++)
			latest[i] = -1; /* a grade of fewer steps (the lesson changed) */
		cJSON *g = jx_obj();
		jx_add_str(g, "at", at);
		jx_add_num(g, "passed", passed);
		jx_add_num(g, "total", (double)n);
		char *r = xstrndup(res, n);
		jx_add_str(g, "results", r);
		free(r);
		jx_push(out, g);
		p = res + n;
		if (*p != ',')
			break;
		p++;
	}
	return out;
}

/* Each session's grades (grades_json's form), for SQL over sessions aliased s */
#define GRADE_ROWS                                                                                 \
	"(SELECT string_agg(floor(extract(epoch FROM g.graded_at) * 1000)::bigint::text || ':' "   \
	"|| "                                                                                      \
	"g.results, ',' ORDER BY g.graded_at) FROM grades g WHERE g.session_id = s.id)"

static void add_ticks(cJSON *row, const struct lesson *l, const signed char *latest,
                      const char *ever, cJSON *grades)
{
	cJSON *ticks = jx_add_arr(row, "steps");
	int passed = 0;
	for (size_t i = 0; i < l->nsteps; i++) {
		cJSON *t = jx_obj();
		jx_add_str(t, "name", l->steps[i].name);
		jx_add_str(t, "machine",
		           l->nmachines ? l->machines[l->steps[i].machine].machine : NULL);
		if (latest[i] < 0)
			jx_add_null(t, "passed");
		else
			jx_add_bool(t, "passed", latest[i]);
		jx_add_bool(t, "ever", ever[i]);
		passed += latest[i] > 0;
		jx_push(ticks, t);
	}
	int n = cJSON_GetArraySize(grades);
	cJSON *pr = jx_add_obj(row, "progress");
	jx_add_num(pr, "passed", passed);
	jx_add_num(pr, "total", (double)l->nsteps);
	jx_add_num(pr, "grades", n);
	const cJSON *last = n ? cJSON_GetArrayItem(grades, n - 1) : NULL;
	jx_add_str(pr, "graded_at", last ? kj_str(last, "at") : NULL);
}

/* Issue #28's columns (sql/012: idle_ends_at, last_activity_at): 1 when
 * the schema has them, asked once per process (a migration comes with a
 * restart). */
static int idle_columns(struct labctx *x)
{
	static _Atomic int known = -1;
	if (known >= 0)
		return known;
	PGresult *r =
	    db_exec(&x->db,
	            "SELECT count(*) FROM information_schema.columns WHERE table_schema = "
	            "current_schema() AND table_name = 'sessions' AND column_name IN "
	            "('idle_ends_at', 'last_activity_at')",
	            0, NULL);
	if (!r)
		return 0; /* asked again next time */
	int has = atoi(PQgetvalue(r, 0, 0)) == 2;
	PQclear(r);
	known = has;
	return has;
}

/* The class of lesson l today: students (the newest session of each) and
 * the line. NULL on database trouble. */
static cJSON *class_json(struct labctx *x, const struct lesson *l)
{
	const char *p[2] = {x->cfg->environment, l->id};
	char *sql = xasprintf(
	    "SELECT s.user_name, s.id::text, s.state, s.stage, s.runtime, labvm_ts(s.created_at), "
	    "labvm_ts(s.ready_at), labvm_ts(s.expires_at), labvm_ts(s.ended_at), s.end_reason, "
	    "s.watchers::text, "
	    "(SELECT json_agg(json_build_array(v.vm_name, v.machine, v.stage) "
	    "ORDER BY v.ord, v.vm_name)::text FROM session_vms v WHERE v.session_id = "
	    "s.id), " GRADE_ROWS
	    ", %s FROM (SELECT DISTINCT ON (user_name) * FROM sessions WHERE environment = $1 AND "
	    "lesson = $2 AND created_at >= date_trunc('day', now()) "
	    "ORDER BY user_name, created_at DESC) s ORDER BY s.user_name",
	    idle_columns(x) ? "labvm_ts(s.idle_ends_at), labvm_ts(s.last_activity_at)"
	                    : "NULL::text, NULL::text");
	PGresult *res = db_exec(&x->db, sql, 2, p);
	free(sql);
	if (!res)
		return NULL;
	PGresult *q = db_exec(&x->db,
	                      "SELECT q.id::text, q.user_name, labvm_ts(q.joined_at), "
	                      "(SELECT count(*) FROM session_queue o WHERE o.environment = "
	                      "q.environment AND o.pool = q.pool AND o.state = 'waiting' AND "
	                      "o.seq <= q.seq) FROM session_queue q WHERE q.environment = $1 AND "
	                      "q.lesson = $2 AND q.state = 'waiting' ORDER BY q.seq",
	                      2, p);
	if (!q) {
		PQclear(res);
		return NULL;
	}
	cJSON *o = jx_obj();
	cJSON *lj = jx_add_obj(o, "lesson");
	jx_add_str(lj, "id", l->id);
	jx_add_str(lj, "title", l->title);
	if (l->title_ja)
		jx_add_str(jx_add_obj(jx_add_obj(lj, "i18n"), "ja"), "title", l->title_ja);
	cJSON *sa = jx_add_arr(lj, "steps");
	for (size_t i = 0; i < l->nsteps; i++) {
		cJSON *st = jx_obj();
		jx_add_str(st, "name", l->steps[i].name);
		if (l->steps[i].name_ja)
			jx_add_str(jx_add_obj(jx_add_obj(st, "i18n"), "ja"), "name",
			           l->steps[i].name_ja);
		jx_add_str(st, "machine",
		           l->nmachines ? l->machines[l->steps[i].machine].machine : NULL);
		jx_push(sa, st);
	}
	signed char *latest = xcalloc(l->nsteps + 1, 1);
	char *ever = xcalloc(l->nsteps + 1, 1);
	cJSON *students = jx_add_arr(o, "students");
	for (int i = 0; i < PQntuples(res); i++) {
		cJSON *row = jx_obj();
		jx_add_str(row, "user", db_val(res, i, 0));
		cJSON *s = jx_add_obj(row, "session");
		jx_add_str(s, "id", db_val(res, i, 1));
		jx_add_str(s, "state", db_val(res, i, 2));
		jx_add_str(s, "stage", db_val(res, i, 3));
		jx_add_str(s, "runtime", db_val(res, i, 4));
		jx_add_str(s, "created_at", db_val(res, i, 5));
		jx_add_str(s, "ready_at", db_val(res, i, 6));
		jx_add_str(s, "expires_at", db_val(res, i, 7));
		jx_add_str(s, "ended_at", db_val(res, i, 8));
		jx_add_str(s, "end_reason", db_val(res, i, 9));
		jx_add_str(s, "idle_ends_at", db_val(res, i, 13));
		jx_add_str(s, "last_activity_at", db_val(res, i, 14));
		cJSON *w = cJSON_Parse(db_val(res, i, 10) ? db_val(res, i, 10) : "[]");
		if (!cJSON_IsArray(w)) {
			cJSON_Delete(w);
			w = jx_arr();
		}
		jx_put(s, "watchers", w);
		cJSON *vms = cJSON_Parse(db_val(res, i, 11) ? db_val(res, i, 11) : "[]"), *v;
		cJSON *ms = jx_add_arr(s, "machines");
		cJSON_ArrayForEach(v, vms)
		{
			cJSON *m = jx_obj();
			const cJSON *vn = cJSON_GetArrayItem(v, 0), *mn = cJSON_GetArrayItem(v, 1),
			            *stg = cJSON_GetArrayItem(v, 2);
			jx_add_str(m, "name", cJSON_IsString(vn) ? vn->valuestring : NULL);
			jx_add_str(m, "machine", cJSON_IsString(mn) ? mn->valuestring : NULL);
			jx_add_str(m, "stage", cJSON_IsString(stg) ? stg->valuestring : NULL);
			jx_push(ms, m);
		}
		cJSON_Delete(vms);
		cJSON *grades = grades_json(db_val(res, i, 12), l->nsteps, latest, ever);
		add_ticks(row, l, latest, ever, grades);
		jx_put(row, "grades", grades);
		jx_push(students, row);
	}
	free(latest);
	free(ever);
	cJSON *qa = jx_add_arr(o, "queue");
	for (int i = 0; i < PQntuples(q); i++) {
		cJSON *e = jx_obj();
		jx_add_str(e, "id", db_val(q, i, 0));
		jx_add_str(e, "user", db_val(q, i, 1));
		jx_add_str(e, "joined_at", db_val(q, i, 2));
		jx_add_num(e, "position", strtod(PQgetvalue(q, i, 3), NULL));
		jx_push(qa, e);
	}
	PQclear(res);
	PQclear(q);
	return o;
}

/* "\"<32 hex>\"": the first 128 bits of SHA-256 of the answer */
static void etag_of(const char *text, char out[36])
{
	unsigned char md[SHA256_DIGEST_LENGTH];
	SHA256((const unsigned char *)text, strlen(text), md);
	out[0] = '"';
	for (int i = 0; i < 16; i++)
		snprintf(out + 1 + 2 * i, 3, "%02x", md[i]);
	out[33] = '"';
	out[34] = '\0';
}

enum hres api_teacher_class(struct req *r)
{
	const struct lesson *l = lessons_find(r->x->lessons, r->param);
	if (!l || !api_teaches(r->x->cfg, l, r->user))
		return not_found(r);
	cJSON *o = class_json(r->x, l);
	if (!o)
		return api_db_error(r);
	/* live without polling fast: the page asks every few seconds with
	 * If-None-Match and gets 304 (no body) while nothing changed */
	char *text = jx_print(o);
	cJSON_Delete(o);
	char etag[36];
	etag_of(text, etag);
	if (api_none_match(FCGX_GetParam("HTTP_IF_NONE_MATCH", r->fr->envp), etag))
		resp_json_text(r, 304, NULL, "no-cache", etag);
	else
		resp_json_text(r, 200, text, "no-cache", etag);
	cJSON_free(text);
	return H_DONE;
}

/* ------------------------------------------------------------ grades.csv */

/* One RFC 4180 field: quoted when it holds a comma, a quote, CR or LF (a
 * quote doubled); a field a spreadsheet would run as a formula (= + - @ at
 * its start, from a user name) is quoted too, as it is: the data stay the
 * data. */
static void csv_field(struct buf *b, const char *v, int last)
{
	v = v ? v : "";
	int quote = strpbrk(v, ",\"\r\n") != NULL || strchr("=+-@", v[0] ? v[0] : 'x') != NULL;
	if (quote) {
		buf_puts(b, "\"");
		for (const char *p = v; *p; p++) {
			if (*p == '"')
				buf_puts(b, "\"\"");
			else
				buf_append(b, p, 1);
		}
		buf_puts(b, "\"");
	} else {
		buf_puts(b, v);
	}
	buf_puts(b, last ? "\r\n" : ",");
}

enum hres api_teacher_grades_csv(struct req *r)
{
	struct labctx *x = r->x;
	const struct lesson *l = lessons_find(x->lessons, r->param);
	if (!l || !api_teaches(x->cfg, l, r->user))
		return not_found(r);
	const char *p[2] = {x->cfg->environment, l->id};
	/* per student: the newest session of the day; per step, over every
	 * session of the day: the latest result, attempts, the first pass */
	PGresult *res = db_exec(
	    &x->db,
	    "WITH ss AS (SELECT id, user_name, created_at FROM sessions WHERE environment = $1 "
	    "AND lesson = $2 AND created_at >= date_trunc('day', now())), "
	    "latest AS (SELECT DISTINCT ON (user_name) user_name, id FROM ss "
	    "ORDER BY user_name, created_at DESC) "
	    "SELECT latest.user_name, latest.id::text, g.ord, "
	    "(array_agg(g.passed ORDER BY g.graded_at DESC))[1]::text, count(g.step), "
	    "labvm_ts(min(g.graded_at) FILTER (WHERE g.passed)) FROM latest "
	    "LEFT JOIN (SELECT ss.user_name, gs.* FROM grade_steps gs JOIN ss ON ss.id = "
	    "gs.session_id) g ON g.user_name = latest.user_name "
	    "GROUP BY latest.user_name, latest.id, g.ord ORDER BY latest.user_name, g.ord",
	    2, p);
	if (!res)
		return api_db_error(r);
	struct buf b = {0};
	static const char *const head[] = {"user",   "session",  "machine",        "step",
	                                   "latest", "attempts", "first_passed_at"};
	for (int i = 0; i < 7; i++)
		csv_field(&b, head[i], i == 6);
	int n = PQntuples(res);
	for (int i = 0; i < n;) {
		const char *user = PQgetvalue(res, i, 0);
		int j = i;
		while (j < n && strcmp(PQgetvalue(res, j, 0), user) == 0)
			j++;
		for (size_t k = 0; k < l->nsteps; k++) {
			const char *latest = "", *first = "";
			char attempts[16] = "0";
			for (int m = i; m < j; m++) {
				const char *ord = db_val(res, m, 2);
				if (ord && atol(ord) == (long)k) {
					latest = strcmp(PQgetvalue(res, m, 3), "true") == 0
					             ? "passed"
					             : "failed";
					snprintf(attempts, sizeof attempts, "%s",
					         PQgetvalue(res, m, 4));
					first = PQgetvalue(res, m, 5);
				}
			}
			csv_field(&b, user, 0);
			csv_field(&b, PQgetvalue(res, i, 1), 0);
			csv_field(&b, l->nmachines ? l->machines[l->steps[k].machine].machine : "",
			          0);
			csv_field(&b, l->steps[k].name, 0);
			csv_field(&b, *latest ? latest : "not graded", 0);
			csv_field(&b, attempts, 0);
			csv_field(&b, first, 1);
		}
		i = j;
	}
	PQclear(res);
	resp_header(r, "Content-Disposition", "attachment; filename=\"%s-grades.csv\"", l->id);
	resp_raw(r, 200, "text/csv; charset=utf-8; header=present", b.p, b.len);
	buf_free(&b);
	return H_DONE;
}

/* ------------------------------------------------------------ audit */

enum hres api_teacher_audit(struct req *r)
{
	struct labctx *x = r->x;
	char lesson[64];
	if (query_lesson(r, lesson, sizeof lesson) < 0 || !teaches_id(r, lesson))
		return not_found(r);
	const char *p[2] = {x->cfg->environment, lesson};
	PGresult *res = db_exec(&x->db,
	                        "SELECT labvm_ts(at), teacher, action, session_id::text, student, "
	                        "detail::text FROM teacher_audit WHERE environment = $1 AND "
	                        "lesson = $2 ORDER BY at DESC, id DESC LIMIT 1000",
	                        2, p);
	if (!res)
		return api_db_error(r);
	cJSON *o = jx_obj();
	jx_add_str(o, "lesson", lesson);
	cJSON *a = jx_add_arr(o, "actions");
	for (int i = 0; i < PQntuples(res); i++) {
		cJSON *e = jx_obj();
		jx_add_str(e, "at", db_val(res, i, 0));
		jx_add_str(e, "teacher", db_val(res, i, 1));
		jx_add_str(e, "action", db_val(res, i, 2));
		jx_add_str(e, "session", db_val(res, i, 3));
		jx_add_str(e, "student", db_val(res, i, 4));
		cJSON *d = cJSON_Parse(db_val(res, i, 5) ? db_val(res, i, 5) : "{}");
		jx_put(e, "detail", d ? d : jx_obj());
		jx_push(a, e);
	}
	PQclear(res);
	resp_json(r, 200, o);
	return H_DONE;
}

/* ------------------------------------------------------------ the student's */

enum hres api_session_grades(struct req *r)
{
	struct labctx *x = r->x;
	const struct session *s = r->sess;
	const struct lesson *l = lessons_find(x->lessons, s->lesson);
	size_t n = l ? l->nsteps : 0;
	const char *p[1] = {s->id};
	PGresult *res =
	    db_exec(&x->db, "SELECT " GRADE_ROWS " FROM (SELECT $1::uuid AS id) s", 1, p);
	if (!res)
		return api_db_error(r);
	signed char *latest = xcalloc(n + 1, 1);
	char *ever = xcalloc(n + 1, 1);
	cJSON *o = jx_obj();
	jx_add_str(o, "session", s->id);
	cJSON *names = jx_add_arr(o, "steps");
	for (size_t i = 0; i < n; i++) {
		cJSON *st = jx_obj();
		jx_add_str(st, "name", l->steps[i].name);
		if (l->steps[i].name_ja)
			jx_add_str(jx_add_obj(jx_add_obj(st, "i18n"), "ja"), "name",
			           l->steps[i].name_ja);
		jx_add_str(st, "machine",
		           l->nmachines ? l->machines[l->steps[i].machine].machine : NULL);
		jx_push(names, st);
	}
	jx_put(o, "grades", grades_json(db_val(res, 0, 0), n, latest, ever));
	free(latest);
	free(ever);
	PQclear(res);
	resp_json(r, 200, o);
	return H_DONE;
}
