/* lesson_keys.c - a lesson's key tables, one per object (like config.c's
 * keys[]): each key's type, field, default, limits, the value's rule and
 * whether a machine may set it; reading an object by its table. --check's
 * known keys come from the same tables (lesson_key_name). */
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

/* ------------------------------------------------------------ the key tables */

enum key_type {
	KEY_STR,     /* a string (char *): NULL, or def, when absent */
	KEY_INT,     /* an integer (int) in min..max: idef when absent */
	KEY_ENUM,    /* a string naming an enum value (stored as int): idef when absent */
	KEY_OWN,     /* an object or array: read by `read`, or (read NULL) by the code named */
	KEY_MINUTES, /* minutes, a fraction allowed, stored as whole seconds (int; at least 1
	              * when above 0): idef seconds when absent, 0..max minutes */
};

/* flags */
#define KEY_REQUIRED 1u /* absent or null is an error */
/* required where a lab machine is made: of a lesson without "machines", and of each machine */
#define KEY_EACH_MACHINE 2u
#define KEY_MACHINE      4u /* a machine may set it ("machines": [{"name", ...}]) */

struct lesson_key {
	const char *name;
	enum key_type type;
	size_t off;                  /* the field read into (not KEY_OWN) */
	unsigned flags;              /* KEY_REQUIRED, KEY_EACH_MACHINE, KEY_MACHINE */
	const char *def;             /* KEY_STR: the value when absent (NULL: none) */
	int idef, min, max;          /* KEY_INT: when absent, and the bounds; KEY_ENUM: idef */
	int (*parse)(const char *v); /* KEY_ENUM: the value, -1 when the text names none */
	int (*ok)(const char *v);    /* KEY_STR: the value's rule (NULL: any string) */
	const char *must;            /* what the value must be (KEY_STR with ok, KEY_ENUM) */
	int (*read)(const cJSON *v, void *dst, char *err, size_t errlen); /* KEY_OWN */
};

#define L(field) offsetof(struct lesson, field)
#define F(field) offsetof(struct lesson_file, field)
#define G(field) offsetof(struct grader_step, field)

/* KEY_ENUM stores through an int */
_Static_assert(sizeof(enum lesson_runtime) == sizeof(int) &&
                   sizeof(enum lesson_disk) == sizeof(int),
               "lesson enums are int-sized");

static int label_ok(const char *v)
{
	return *v && util_label_value_ok(v);
}

static int program_ok(const char *v)
{
	return v[0] == '/' && strlen(v) <= 255 && !strchr(v, ' ');
}

static int match(const char *re, const char *s)
{
	regex_t r;
	int ok;
	if (regcomp(&r, re, REG_EXTENDED | REG_NOSUB) != 0)
		return 0;
	ok = regexec(&r, s, 0, NULL, 0) == 0;
	regfree(&r);
	return ok;
}

int lesson_quantity_ok(const char *v)
{
	return match("^[1-9][0-9]*(Mi|Gi|Ti)$", v);
}

static int read_lesson_ja(const cJSON *v, void *dst, char *err, size_t errlen);
static int read_files(const cJSON *v, void *dst, char *err, size_t errlen);
static int read_step_ja(const cJSON *v, void *dst, char *err, size_t errlen);
static int read_teachers(const cJSON *v, void *dst, char *err, size_t errlen);

/* A lesson's keys, read in this order (each value's rule as it is read, then
 * the rules between keys, parse_obj). A machine is the lesson with the keys
 * marked KEY_MACHINE replaced by its own. */
static const struct lesson_key lesson_keys[] = {
    {"id", KEY_STR, L(id), KEY_REQUIRED, .ok = label_ok,
     .must = "a label value ([A-Za-z0-9._-], at most 63)"},
    {"title", KEY_STR, L(title), KEY_REQUIRED},
    {"description", KEY_STR, L(description)},
    {"minutes", KEY_INT, L(minutes), .idef = 60, .min = 1, .max = 24 * 60},
    {"setup", KEY_STR, L(setup), KEY_MACHINE},
    {"shell", KEY_STR, L(shell), .ok = program_ok, .must = "an absolute path to a program"},
    {"i18n", KEY_OWN, .read = read_lesson_ja},
    {"runtime", KEY_ENUM, L(runtime), KEY_REQUIRED, .parse = lesson_runtime_parse,
     .must = "\"vm\" or \"pod\""},
    {"image", KEY_STR, L(image), KEY_EACH_MACHINE | KEY_MACHINE},
    {"memory", KEY_STR, L(memory), KEY_MACHINE, .def = "1Gi", .ok = lesson_quantity_ok,
     .must = "a quantity like 512Mi or 2Gi"},
    {"golden_pvc", KEY_STR, L(golden_pvc), KEY_MACHINE}, /* disk "golden": parse_obj */
    {"disk_size", KEY_STR, L(disk_size), KEY_MACHINE},   /* disk "datavolume": parse_obj */
    {"cpus", KEY_INT, L(cpus), KEY_MACHINE, .idef = 1, .min = 1, .max = 64},
    {"running_timeout_s", KEY_INT, L(running_timeout_s), .idef = 150, .min = 1, .max = 86400},
    {"ready_timeout_s", KEY_INT, L(ready_timeout_s), .idef = 300, .min = 1, .max = 86400},
    {"grade_timeout_s", KEY_INT, L(grade_timeout_s), .idef = 0, .min = 1, .max = 3600},
    {"warm", KEY_INT, L(warm), .idef = 0, .min = 0, .max = 1000},
    /* issue #28: idle ending (-1 absent: the configured idle_minutes) and extensions */
    {"idle_minutes", KEY_MINUTES, L(idle_s), .idef = -1, .max = 24 * 60},
    {"extend_minutes", KEY_MINUTES, L(extend_s), .idef = 15 * 60, .max = 24 * 60},
    {"max_extensions", KEY_INT, L(max_extensions), .idef = 2, .min = 0, .max = 100},
    {"disk", KEY_ENUM, L(disk), KEY_MACHINE, .idef = DISK_CONTAINERDISK, .parse = lesson_disk_parse,
     .must = "\"golden\", \"containerdisk\" or \"datavolume\""},
    {"files", KEY_OWN, .flags = KEY_MACHINE, .read = read_files},
    {"grader", KEY_OWN, .flags = KEY_MACHINE},    /* parse_steps: the lesson's, each machine's */
    {"machines", KEY_OWN},                        /* parse_machines */
    {"guide", KEY_OWN},                           /* parse_guide_paths: the lesson's own */
    {"teachers", KEY_OWN, .read = read_teachers}, /* issue #29: who teaches it */
};

/* "i18n": {"ja": {...}} of a lesson */
static const struct lesson_key ja_keys[] = {
    {"title", KEY_STR, L(title_ja)},
    {"description", KEY_STR, L(description_ja)},
    {"guide", KEY_OWN}, /* parse_guide_paths */
};

/* "files": [{...}] (read_files checks the path and the mode) */
static const struct lesson_key file_keys[] = {
    {"path", KEY_STR, F(path), KEY_REQUIRED},
    {"content", KEY_STR, F(content), KEY_REQUIRED},
    {"mode", KEY_STR, F(mode), .def = "0644"},
};

/* "grader": [{...}] */
static const struct lesson_key step_keys[] = {
    {"name", KEY_STR, G(name), KEY_REQUIRED},
    {"i18n", KEY_OWN, .read = read_step_ja}, /* {"ja": {"name"}} */
    {"command", KEY_STR, G(command), KEY_REQUIRED},
    {"timeout_s", KEY_INT, G(timeout_s), .idef = 0, .min = 0, .max = 300}, /* 0: the default */
    {"machine", KEY_OWN}, /* parse_steps: a machine's name */
};

#define NKEYS(t) (sizeof t / sizeof t[0])

static const struct {
	const struct lesson_key *v;
	size_t n;
} key_sets[] = {
    [LESSON_KEYS] = {lesson_keys, NKEYS(lesson_keys)},
    [LESSON_JA_KEYS] = {ja_keys, NKEYS(ja_keys)},
    [LESSON_FILE_KEYS] = {file_keys, NKEYS(file_keys)},
    [LESSON_STEP_KEYS] = {step_keys, NKEYS(step_keys)},
};

const char *lesson_key_name(enum lesson_key_set set, size_t i)
{
	if ((size_t)set >= NKEYS(key_sets) || i >= key_sets[set].n)
		return NULL;
	return key_sets[set].v[i].name;
}

/* ------------------------------------------------------------ reading keys */

int lesson_get_str(const cJSON *o, const char *key, int required, char **dst, char *err,
                   size_t errlen)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v)) {
		if (required) {
			snprintf(err, errlen, "\"%s\" is required (a string)", key);
			return -1;
		}
		*dst = NULL;
		return 0;
	}
	if (!cJSON_IsString(v)) {
		snprintf(err, errlen, "\"%s\" must be a string", key);
		return -1;
	}
	*dst = xstrdup(v->valuestring);
	return 0;
}

static int get_int(const cJSON *o, const char *key, int def, int min, int max, int *dst, char *err,
                   size_t errlen)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v)) {
		*dst = def;
		return 0;
	}
	/* compare as doubles first: casting 1e300 to int is undefined (found by
	 * tests/fuzz, regression input tests/fuzz/regress/lesson/) */
	if (!cJSON_IsNumber(v) || !(v->valuedouble >= min && v->valuedouble <= max) ||
	    v->valuedouble != (double)(int)v->valuedouble) {
		snprintf(err, errlen, "\"%s\" must be an integer in %d..%d", key, min, max);
		return -1;
	}
	*dst = (int)v->valuedouble;
	return 0;
}

/* One key of o into dst (the struct the table's offsets are of). each_machine:
 * o is what a lab machine is made of (KEY_EACH_MACHINE keys are required). */
static int read_key(const cJSON *o, const struct lesson_key *k, void *dst, int each_machine,
                    char *err, size_t errlen)
{
	char *slot = (char *)dst + k->off;
	int required = (k->flags & KEY_REQUIRED) || (each_machine && (k->flags & KEY_EACH_MACHINE));
	char *s = NULL;

	switch (k->type) {
	case KEY_STR: {
		char **p = (char **)(void *)slot;
		if (lesson_get_str(o, k->name, required, p, err, errlen) < 0)
			return -1;
		if (!*p && k->def)
			*p = xstrdup(k->def);
		if (*p && k->ok && !k->ok(*p)) {
			snprintf(err, errlen, "\"%s\" must be %s", k->name, k->must);
			return -1;
		}
		return 0;
	}
	case KEY_INT:
		return get_int(o, k->name, k->idef, k->min, k->max, (int *)(void *)slot, err,
		               errlen);
	case KEY_ENUM: {
		if (lesson_get_str(o, k->name, required, &s, err, errlen) < 0)
			return -1;
		int v = s ? k->parse(s) : k->idef;
		free(s);
		if (v < 0) {
			snprintf(err, errlen, "\"%s\" must be %s", k->name, k->must);
			return -1;
		}
		*(int *)(void *)slot = v;
		return 0;
	}
	case KEY_MINUTES: {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k->name);
		int *dst_s = (int *)(void *)slot;
		if (!v || cJSON_IsNull(v)) {
			*dst_s = k->idef;
			return 0;
		}
		if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= k->max)) {
			snprintf(err, errlen, "\"%s\" must be a number of minutes in 0..%d",
			         k->name, k->max);
			return -1;
		}
		double sec = v->valuedouble * 60.0;
		*dst_s = sec > 0 && sec < 1 ? 1 : (int)(sec + 0.5);
		return 0;
	}
	case KEY_OWN:
		return k->read
		           ? k->read(cJSON_GetObjectItemCaseSensitive(o, k->name), dst, err, errlen)
		           : 0;
	}
	return 0;
}

static int read_keys(const cJSON *o, const struct lesson_key *keys, size_t n, void *dst,
                     int each_machine, char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++)
		if (read_key(o, &keys[i], dst, each_machine, err, errlen) < 0)
			return -1;
	return 0;
}

/* "i18n": {"ja": {...}}, when it is an object */
const cJSON *lesson_ja_of(const cJSON *i18n)
{
	const cJSON *ja = cJSON_GetObjectItemCaseSensitive(i18n, "ja");
	return cJSON_IsObject(ja) ? ja : NULL;
}

/* "what: " in front of a message (e.g. "files[2]: ") */
void lesson_err_prefix(char *err, size_t errlen, const char *fmt, ...)
{
	char tmp[512], what[64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof what, fmt, ap);
	va_end(ap);
	snprintf(tmp, sizeof tmp, "%s", err);
	snprintf(err, errlen, "%s: %s", what, tmp);
}

static int read_lesson_ja(const cJSON *v, void *dst, char *err, size_t errlen)
{
	const cJSON *ja = lesson_ja_of(v);
	if (ja && read_keys(ja, ja_keys, NKEYS(ja_keys), dst, 0, err, errlen) < 0) {
		lesson_err_prefix(err, errlen, "%s", "i18n.ja");
		return -1;
	}
	return 0;
}

static int read_step_ja(const cJSON *v, void *dst, char *err, size_t errlen)
{
	struct grader_step *st = dst;
	const cJSON *ja = lesson_ja_of(v);
	return ja ? lesson_get_str(ja, "name", 0, &st->name_ja, err, errlen) : 0;
}

/* "teachers": ["user", ...]: REMOTE_USERs (1..128 bytes, no control bytes) */
static int read_teachers(const cJSON *a, void *dst, char *err, size_t errlen)
{
	struct lesson *l = dst;
	const cJSON *it;
	if (!a || cJSON_IsNull(a))
		return 0;
	if (!cJSON_IsArray(a)) {
		snprintf(err, errlen, "\"teachers\" must be an array of user names");
		return -1;
	}
	l->teachers = xcalloc((size_t)cJSON_GetArraySize(a) + 1, sizeof *l->teachers);
	cJSON_ArrayForEach(it, a)
	{
		int ok = cJSON_IsString(it) && it->valuestring[0] && strlen(it->valuestring) <= 128;
		for (const char *c = ok ? it->valuestring : ""; *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				ok = 0;
		if (!ok) {
			snprintf(err, errlen,
			         "teachers[%zu]: must be a user name (1..128 bytes, no control "
			         "characters)",
			         l->nteachers);
			return -1;
		}
		l->teachers[l->nteachers++] = xstrdup(it->valuestring);
	}
	return 0;
}

/* "files": its items by file_keys, then where each may go (lesson.h) */
static int read_files(const cJSON *a, void *dst, char *err, size_t errlen)
{
	struct lesson *l = dst;
	const cJSON *it;
	if (a && !cJSON_IsArray(a)) {
		snprintf(err, errlen, "\"files\" must be an array");
		return -1;
	}
	l->files = xcalloc((size_t)cJSON_GetArraySize(a) + 1, sizeof *l->files);
	cJSON_ArrayForEach(it, a)
	{
		struct lesson_file *f = &l->files[l->nfiles++];
		if (!cJSON_IsObject(it) ||
		    read_keys(it, file_keys, NKEYS(file_keys), f, 0, err, errlen) < 0) {
			if (!cJSON_IsObject(it))
				snprintf(err, errlen,
				         "must be an object {\"path\", \"content\", \"mode\"}");
			lesson_err_prefix(err, errlen, "files[%zu]", l->nfiles - 1);
			return -1;
		}
		char norm[LESSON_PATH_MAX + 1], why[128];
		if (lesson_file_path_ok(f->path, norm, sizeof norm, why, sizeof why) < 0) {
			utf8_snprintf(err, errlen, "files[%zu].path: \"%.200s\" %s", l->nfiles - 1,
			              f->path, why);
			return -1;
		}
		if (strcmp(norm, f->path) != 0) {
			free(f->path);
			f->path = xstrdup(norm); /* written where it was checked */
		}
		if (!match("^0?[0-7]{3}$", f->mode)) {
			snprintf(err, errlen, "files[%zu].mode: \"%s\" must be octal like 0644",
			         l->nfiles - 1, f->mode);
			return -1;
		}
	}
	return 0;
}

int lesson_key_machine_ok(const char *key)
{
	for (size_t i = 0; i < NKEYS(lesson_keys); i++)
		if (strcmp(lesson_keys[i].name, key) == 0)
			return (lesson_keys[i].flags & KEY_MACHINE) != 0;
	return strcmp(key, "name") == 0;
}

int lesson_keys_read(enum lesson_key_set set, const cJSON *o, void *dst, int each_machine,
                     char *err, size_t errlen)
{
	return read_keys(o, key_sets[set].v, key_sets[set].n, dst, each_machine, err, errlen);
}
