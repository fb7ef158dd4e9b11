/* api_grade.c - POST /api/sessions/{id}/grade: run the lesson's grader steps
 * in the lab's machines (inside.h: by the agent, or by exec) and keep the
 * result on the session (last_grade) and in its history (grade_steps, every
 * grade: GET /api/sessions/{id}/grades, and the teacher's class view).
 *
 * One grade per session at a time (409 grade_running, LEASE_GRADE), one
 * deadline for the whole grade (a step past it is "not run"), and the token
 * only to the session's own machine (read again before a machine's first
 * step): a frozen or slow agent costs its student one worker for one
 * deadline and the class nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "inside.h"
#include "jsonx.h"
#include "log.h"
#include "session.h"
#include "session_change.h"

#define GRADE_OUTPUT_MAX 8192
#define GRADE_TRUNCATED  "\n[output truncated]"

static char *step_output(const cJSON *res)
{
	const char *out = kj_str(res, "stdout"), *err = kj_str(res, "stderr");
	struct buf b = {0};
	buf_puts(&b, out ? out : "");
	if (err && *err) {
		if (b.len && b.p[b.len - 1] != '\n')
			buf_puts(&b, "\n");
		buf_puts(&b, err);
	}
	if (!b.p)
		buf_puts(&b, "");
	/* what a guest printed, any bytes (an agent the student replaced, a Pod's
	 * exec): valid UTF-8, cut on a character, or the grade's jsonb refuses it */
	char *all = utf8_clean_dup(b.p, b.len, 3 * b.len);
	buf_free(&b);
	if (strlen(all) <= GRADE_OUTPUT_MAX)
		return all;
	char *cut = xmalloc(GRADE_OUTPUT_MAX + sizeof GRADE_TRUNCATED);
	size_t n = utf8_clean_cut(cut, all, GRADE_OUTPUT_MAX);
	memcpy(cut + n, GRADE_TRUNCATED, sizeof GRADE_TRUNCATED);
	free(all);
	return cut;
}

/* The whole grade's deadline: the lesson's grade_timeout_s, else its steps'
 * timeouts (+5 s each for the round trip), never more than grade_timeout_s. */
static int grade_deadline_s(const struct cfg *c, const struct lesson *l)
{
	long sum = 0;
	for (size_t i = 0; i < l->nsteps; i++)
		sum += (l->steps[i].timeout_s ? l->steps[i].timeout_s : c->agent_run_timeout_s) + 5;
	if (l->grade_timeout_s)
		sum = l->grade_timeout_s;
	if (sum < 1)
		sum = 1;
	return sum > c->grade_timeout_s ? c->grade_timeout_s : (int)sum;
}

static void add_step_names(cJSON *e, const struct grader_step *gs, const char *mname)
{
	jx_add_str(e, "name", gs->name);
	if (mname)
		jx_add_str(e, "machine", mname);
	if (gs->name_ja) {
		cJSON *ja = jx_obj();
		jx_add_str(ja, "name", gs->name_ja);
		cJSON *i18n = jx_obj();
		cJSON_AddItemToObject(i18n, "ja", ja);
		cJSON_AddItemToObject(e, "i18n", i18n);
	}
}

static void step_not_run(cJSON *steps, const struct grader_step *gs, const char *mname,
                         int deadline)
{
	char out[160];
	snprintf(out, sizeof out, "not run: the grade's deadline (%d s) passed", deadline);
	cJSON *e = jx_obj();
	add_step_names(e, gs, mname);
	jx_add_bool(e, "passed", 0);
	jx_add_str(e, "output", out);
	jx_add_null(e, "exit_code");
	jx_add_bool(e, "timed_out", 1);
	jx_push(steps, e);
}

/* One step's result (the agent's answer shape) as the grade shows it. */
static int add_step(cJSON *steps, const struct grader_step *gs, const char *mname, const cJSON *res)
{
	const cJSON *ec = cJSON_GetObjectItemCaseSensitive(res, "exit_code");
	const cJSON *to = cJSON_GetObjectItemCaseSensitive(res, "timed_out");
	int ok = cJSON_IsNumber(ec) && ec->valueint == 0 && !cJSON_IsTrue(to);
	char *out = step_output(res);
	cJSON *e = jx_obj();
	add_step_names(e, gs, mname);
	jx_add_bool(e, "passed", ok);
	jx_add_str(e, "output", out);
	if (cJSON_IsNumber(ec))
		jx_add_num(e, "exit_code", ec->valueint);
	else
		jx_add_null(e, "exit_code");
	if (cJSON_IsTrue(to))
		jx_add_bool(e, "timed_out", 1);
	jx_push(steps, e);
	free(out);
	return ok;
}

enum hres api_session_grade(struct req *r)
{
	struct labctx *x = r->x;
	struct session *s = r->sess; /* ready, with its machines (NEED_READY) */
	const struct lesson *l = lessons_find(x->lessons, s->lesson);
	const struct inside_ops *g = inside_of(s);
	struct inside_fail fail = {0, ""};
	int passed = 0;

	if (!l) {
		resp_error(r, E_LESSON_GONE, "lesson \"%s\" is no longer offered", s->lesson);
		return H_DONE;
	}
	int deadline = grade_deadline_s(x->cfg, l);
	int got = session_lease_take(x, s->id, LEASE_GRADE, (deadline + 10) * 1000L);
	if (got < 0)
		return api_db_error(r);
	/* a grade is activity (issue #28), a refused one too: the student is there */
	if (session_touch(x, s->id) < 0)
		log_warn("session %s: recording the grade as activity failed: %s", s->id,
		         x->db.msg);
	if (got == 0) {
		cJSON *e = error_json(E_GRADE_RUNNING,
		                      "a grade of this lab is still running: wait for its result");
		jx_add_num(e, "retry_after_s", 2);
		resp_header(r, "Retry-After", "2");
		resp_error_json(r, E_GRADE_RUNNING, e);
		return H_DONE;
	}
	/* the lease holder calls the agents: one of the process's agent slots
	 * (http.h) while it does */
	if (!agent_slot_take(x, s->user)) {
		session_lease_release(x, s->id, LEASE_GRADE);
		return api_agent_busy(r);
	}
	double end = util_mono_s() + deadline;
	cJSON *o = jx_obj();
	cJSON *steps = jx_arr();
	size_t nm = lesson_nmachines(l);
	int *mpassed = xcalloc(nm + 1, sizeof *mpassed), *mtotal = xcalloc(nm + 1, sizeof *mtotal);
	int *checked = xcalloc(s->nvms + 1, sizeof *checked);
	for (size_t i = 0; i < l->nsteps; i++) {
		const struct grader_step *gs = &l->steps[i];
		const char *mname = l->nmachines ? l->machines[gs->machine].machine : NULL;
		struct session_vm *vm = session_vm_find(s, mname);
		cJSON *res = NULL;
		int timeout = gs->timeout_s ? gs->timeout_s : x->cfg->agent_run_timeout_s;
		long left_ms = (long)((end - util_mono_s()) * 1000.0);
		if (left_ms < 500) {
			step_not_run(steps, gs, mname, deadline);
			mtotal[gs->machine]++;
			continue;
		}
		if (timeout * 1000L > left_ms)
			timeout = (int)(left_ms / 1000) > 0 ? (int)(left_ms / 1000) : 1;
		if (!vm) {
			inside_unreachable(&fail, s, i, mname, "no such machine");
			goto out;
		}
		if (g->run(x, s, vm, &checked[vm - s->vms], gs, i, mname, timeout, left_ms, &res,
		           &fail) < 0)
			goto out;
		int ok = add_step(steps, gs, mname, res);
		passed += ok;
		mpassed[gs->machine] += ok;
		mtotal[gs->machine]++;
		cJSON_Delete(res);
	}
	jx_add_num(o, "passed", passed);
	jx_add_num(o, "total", (double)l->nsteps);
	jx_put(o, "steps", steps);
	steps = NULL;
	if (l->nmachines) {
		/* the grade per machine, in the lesson's order */
		cJSON *ms = jx_add_arr(o, "machines");
		for (size_t i = 0; i < nm; i++) {
			cJSON *m = jx_obj();
			jx_add_str(m, "machine", l->machines[i].machine);
			jx_add_num(m, "passed", mpassed[i]);
			jx_add_num(m, "total", mtotal[i]);
			jx_push(ms, m);
		}
	}
	char *json = jx_print(o);
	const char *p[2] = {s->id, json};
	/* the last grade and its place in the history (sql/013 grade_steps: one
	 * row per step), in one statement: they never disagree */
	if (db_cmd(&x->db,
	           "WITH g AS (UPDATE sessions SET last_grade = $2::jsonb, "
	           "graded_at = clock_timestamp(), grade_until = NULL WHERE id = $1::uuid "
	           "RETURNING id, graded_at), "
	           "e AS (SELECT v, ord FROM jsonb_array_elements($2::jsonb->'steps') "
	           "WITH ORDINALITY AS e(v, ord)), "
	           "steps AS (INSERT INTO grade_steps (session_id, graded_at, ord, machine, step, "
	           "passed) SELECT g.id, g.graded_at, e.ord - 1, e.v->>'machine', e.v->>'name', "
	           "(e.v->>'passed')::boolean FROM g, e) "
	           "INSERT INTO grades (session_id, graded_at, passed, total, results) "
	           "SELECT g.id, g.graded_at, ($2::jsonb->>'passed')::int, "
	           "jsonb_array_length($2::jsonb->'steps'), coalesce((SELECT string_agg(CASE WHEN "
	           "(e.v->>'passed')::boolean THEN '1' ELSE '0' END, '' ORDER BY e.ord) FROM e), "
	           "'') FROM g",
	           2, p) < 0) {
		log_warn("session %s: storing the grade failed: %s", s->id, x->db.msg);
		session_lease_release(x, s->id, LEASE_GRADE);
	}
	cJSON_free(json);
	log_info("session %s (%s, %s): graded %d/%zu", s->id, s->user, s->lesson, passed,
	         l->nsteps);
out:
	agent_slot_release(s->user);
	free(mpassed);
	free(mtotal);
	free(checked);
	cJSON_Delete(steps);
	if (fail.msg[0]) {
		/* a machine could not be reached: no grade is kept */
		session_lease_release(x, s->id, LEASE_GRADE);
		cJSON_Delete(o);
		resp_error(r, fail.code, "%s", fail.msg);
	} else {
		resp_json(r, 200, o);
	}
	return H_DONE;
}
