/* lesson_parse.c - a lesson from its JSON text (lesson.h): the keys of each
 * object read by their tables (lesson_keys.c), the rules between keys, the
 * machines merge, the grader steps and the content hash. No file is read here
 * (lesson_load.c reads lessons_dir). */
#include "lesson.h"

#include <regex.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <openssl/sha.h>

#include "lesson_keys.h"
#include "util.h"

/* ------------------------------------------------------------ a lesson */

/* One lesson (or one machine's merged view of it) from its JSON object: the
 * keys (lesson_keys.c), then the rules between them. each_machine: o is what
 * a lab machine is made of (a lesson without machines, or a machine). */
static int parse_obj(const cJSON *o, struct lesson *l, int each_machine, char *err, size_t errlen)
{
	memset(l, 0, sizeof *l);
	if (lesson_keys_read(LESSON_KEYS, o, l, each_machine, err, errlen) < 0)
		goto fail;
	/* minutes count from ready: a start may take both deadlines, and a lab
	 * shorter than that is a mistake in the lesson */
	if ((long)l->minutes * 60 < (long)l->running_timeout_s + l->ready_timeout_s) {
		snprintf(err, errlen,
		         "\"minutes\" (%d min) is shorter than the start deadlines "
		         "running_timeout_s + ready_timeout_s (%d s)",
		         l->minutes, l->running_timeout_s + l->ready_timeout_s);
		goto fail;
	}
	if (l->warm && l->runtime != RUNTIME_VM) {
		snprintf(err, errlen, "\"warm\" is for VM lessons (runtime \"vm\")");
		goto fail;
	}
	if (l->max_extensions > 0 && l->extend_s == 0) {
		snprintf(err, errlen,
		         "\"extend_minutes\" is 0 but \"max_extensions\" is %d: an extension "
		         "would add nothing (set max_extensions to 0 for none)",
		         l->max_extensions);
		goto fail;
	}
	if (l->disk == DISK_GOLDEN && (!l->golden_pvc || !util_dns_label_ok(l->golden_pvc))) {
		snprintf(err, errlen, "disk \"golden\" needs \"golden_pvc\", a PVC name");
		goto fail;
	}
	if (l->disk == DISK_DATAVOLUME) {
		if (!l->disk_size)
			l->disk_size = xstrdup("10Gi");
		if (!lesson_quantity_ok(l->disk_size)) {
			snprintf(err, errlen, "\"disk_size\" must be a quantity like 10Gi");
			goto fail;
		}
	}
	return 0;
fail:
	lesson_free(l);
	return -1;
}

/* Grader steps for machine `machine`; a step of the lesson's own list
 * (machine < 0) may name its machine ("machine", default the first). */
static int parse_steps(const cJSON *a, struct lesson *l, int machine, char *err, size_t errlen)
{
	const cJSON *it;
	if (a && !cJSON_IsArray(a)) {
		snprintf(err, errlen, "\"grader\" must be an array");
		return -1;
	}
	l->steps =
	    xrealloc(l->steps, (l->nsteps + (size_t)cJSON_GetArraySize(a) + 1) * sizeof *l->steps);
	cJSON_ArrayForEach(it, a)
	{
		struct grader_step *st = &l->steps[l->nsteps++];
		char *mname = NULL;
		memset(st, 0, sizeof *st);
		if (!cJSON_IsObject(it) ||
		    lesson_keys_read(LESSON_STEP_KEYS, it, st, 0, err, errlen) < 0 ||
		    lesson_get_str(it, "machine", 0, &mname, err, errlen) < 0) {
			if (!cJSON_IsObject(it))
				snprintf(
				    err, errlen,
				    "must be an object {\"name\", \"command\", \"timeout_s\"}");
			lesson_err_prefix(err, errlen, "grader[%zu]", l->nsteps - 1);
			return -1;
		}
		if (machine >= 0) {
			if (mname) {
				snprintf(err, errlen,
				         "a machine's own grader steps run on it: no \"machine\"");
				free(mname);
				return -1;
			}
			st->machine = machine;
		} else {
			int i = mname ? lesson_machine_index(l, mname) : 0;
			if (i < 0) {
				snprintf(err, errlen,
				         "grader step \"%s\": there is no machine \"%.64s\"",
				         st->name, mname);
				free(mname);
				return -1;
			}
			st->machine = i;
		}
		free(mname);
	}
	return 0;
}

/* "machines": [{"name", and any key lesson_key_machine_ok() allows}]: each
 * machine is the lesson with its own keys replacing the lesson's. */
static int parse_machines(const cJSON *o, struct lesson *l, char *err, size_t errlen)
{
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "machines"), *m;
	char sub[400];
	if (!a || cJSON_IsNull(a))
		return 0;
	if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) < 1) {
		snprintf(err, errlen, "\"machines\" must be a non-empty array");
		return -1;
	}
	if (l->runtime != RUNTIME_VM) {
		snprintf(err, errlen, "\"machines\" needs \"runtime\": \"vm\"");
		return -1;
	}
	l->machines = xcalloc((size_t)cJSON_GetArraySize(a) + 1, sizeof *l->machines);
	cJSON_ArrayForEach(m, a)
	{
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(m, "name"), *k;
		if (!cJSON_IsObject(m) || !cJSON_IsString(name)) {
			snprintf(err, errlen, "\"machines\" items must be objects with a \"name\"");
			return -1;
		}
		const char *n = name->valuestring;
		if (!util_dns_label_ok(n) || strlen(n) > MACHINE_NAME_MAX) {
			snprintf(err, errlen,
			         "machine name \"%.64s\" must be a DNS-1123 label (a-z, 0-9, '-', "
			         "at most %d characters)",
			         n, MACHINE_NAME_MAX);
			return -1;
		}
		if (lesson_machine_index(l, n) >= 0) {
			snprintf(err, errlen, "machine name \"%s\" is used twice", n);
			return -1;
		}
		cJSON_ArrayForEach(k, m)
		{
			if (!lesson_key_machine_ok(k->string)) {
				snprintf(err, errlen, "machine \"%s\": unknown key \"%.64s\"", n,
				         k->string);
				return -1;
			}
		}
		cJSON *merged = cJSON_Duplicate(o, 1);
		cJSON_DeleteItemFromObjectCaseSensitive(merged, "machines");
		cJSON_DeleteItemFromObjectCaseSensitive(merged, "grader");
		cJSON_ArrayForEach(k, m)
		{
			if (strcmp(k->string, "name") == 0 || strcmp(k->string, "grader") == 0)
				continue;
			cJSON_DeleteItemFromObjectCaseSensitive(merged, k->string);
			cJSON_AddItemToObject(merged, k->string, cJSON_Duplicate(k, 1));
		}
		struct lesson *ml = &l->machines[l->nmachines];
		int rc = parse_obj(merged, ml, 1, sub, sizeof sub);
		cJSON_Delete(merged);
		if (rc < 0) {
			snprintf(err, errlen, "machine \"%s\": %s", n, sub);
			return -1;
		}
		ml->machine = xstrdup(n);
		l->nmachines++;
		if (parse_steps(cJSON_GetObjectItemCaseSensitive(m, "grader"), l,
		                (int)l->nmachines - 1, sub, sizeof sub) < 0) {
			snprintf(err, errlen, "machine \"%s\": %s", n, sub);
			return -1;
		}
	}
	return 0;
}

/* "guide" and "i18n": {"ja": {"guide"}}: the paths (lesson_guide.c reads the files) */
static int parse_guide_paths(const cJSON *o, struct lesson *l, char *err, size_t errlen)
{
	char why[256];
	const cJSON *ja = lesson_ja_of(cJSON_GetObjectItemCaseSensitive(o, "i18n"));
	if (lesson_get_str(o, "guide", 0, &l->guide.path, err, errlen) < 0)
		return -1;
	if (ja && lesson_get_str(ja, "guide", 0, &l->guide_ja.path, err, errlen) < 0) {
		lesson_err_prefix(err, errlen, "%s", "i18n.ja");
		return -1;
	}
	if (l->guide.path && lesson_guide_path_ok(l->guide.path, why, sizeof why) < 0) {
		snprintf(err, errlen, "\"guide\": \"%.200s\" %s", l->guide.path, why);
		return -1;
	}
	if (l->guide_ja.path && lesson_guide_path_ok(l->guide_ja.path, why, sizeof why) < 0) {
		snprintf(err, errlen, "i18n.ja.guide: \"%.200s\" %s", l->guide_ja.path, why);
		return -1;
	}
	if (l->guide_ja.path && !l->guide.path) {
		snprintf(err, errlen,
		         "i18n.ja.guide needs \"guide\" too (the English guide every other "
		         "language falls back to)");
		return -1;
	}
	return 0;
}

int lesson_parse(const char *json, size_t len, struct lesson *l, char *err, size_t errlen)
{
	memset(l, 0, sizeof *l);
	size_t at = utf8_valid_prefix(json, len);
	if (at < len) {
		/* every text of a lesson goes to pages, Secrets and logs as it is */
		snprintf(err, errlen,
		         "not valid UTF-8 from byte offset %zu on: save the file as UTF-8", at);
		return -1;
	}
	cJSON *o = cJSON_ParseWithLength(json, len);
	if (!cJSON_IsObject(o)) {
		snprintf(err, errlen, "not a JSON object");
		cJSON_Delete(o);
		return -1;
	}
	const cJSON *ms = cJSON_GetObjectItemCaseSensitive(o, "machines");
	int multi = ms && !cJSON_IsNull(ms);
	/* the machines first (the lesson's grader steps name them), then the
	 * lesson's own steps, which go first in the grade */
	if (parse_obj(o, l, !multi, err, errlen) < 0)
		goto fail;
	if (parse_guide_paths(o, l, err, errlen) < 0)
		goto fail;
	if (parse_machines(o, l, err, errlen) < 0)
		goto fail;
	/* the machines' own steps were collected first: the lesson's go in front */
	struct grader_step *mine = l->steps;
	size_t nmine = l->nsteps;
	l->steps = NULL;
	l->nsteps = 0;
	int rc = parse_steps(cJSON_GetObjectItemCaseSensitive(o, "grader"), l, -1, err, errlen);
	if (nmine) {
		l->steps = xrealloc(l->steps, (l->nsteps + nmine + 1) * sizeof *l->steps);
		memcpy(l->steps + l->nsteps, mine, nmine * sizeof *mine);
		l->nsteps += nmine;
	}
	free(mine);
	if (rc < 0)
		goto fail;
	if (l->warm && l->nmachines) {
		snprintf(err, errlen,
		         "\"warm\" is for single-machine lessons (not with \"machines\")");
		goto fail;
	}
	{
		/* the content hash: a pool VM of another version of the lesson is stale */
		unsigned char md[SHA256_DIGEST_LENGTH];
		SHA256((const unsigned char *)json, len, md);
		for (int i = 0; i < 20; i++)
			snprintf(l->hash + 2 * i, 3, "%02x", md[i]);
	}
	cJSON_Delete(o);
	return 0;
fail:
	cJSON_Delete(o);
	lesson_free(l);
	return -1;
}
