#include "lesson.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include "util.h"

#define LESSON_MAX_BYTES (1u << 20)

const char *lesson_runtime_str(enum lesson_runtime r)
{
	return r == RUNTIME_POD ? "pod" : "vm";
}

int lesson_runtime_parse(const char *v)
{
	if (v && strcmp(v, "vm") == 0)
		return RUNTIME_VM;
	if (v && strcmp(v, "pod") == 0)
		return RUNTIME_POD;
	return -1;
}

const char *lesson_disk_str(enum lesson_disk d)
{
	switch (d) {
	case DISK_GOLDEN:
		return "golden";
	case DISK_DATAVOLUME:
		return "datavolume";
	case DISK_CONTAINERDISK:
		break;
	}
	return "containerdisk";
}

static int get_str(const cJSON *o, const char *key, int required, char **dst, char *err,
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

/* A number of minutes (a fraction allowed) as whole seconds, at least 1
 * when above 0; absent: def (seconds). */
static int get_minutes_s(const cJSON *o, const char *key, int def, int max_min, int *dst, char *err,
                         size_t errlen)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	if (!v || cJSON_IsNull(v)) {
		*dst = def;
		return 0;
	}
	if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble <= max_min)) {
		snprintf(err, errlen, "\"%s\" must be a number of minutes in 0..%d", key, max_min);
		return -1;
	}
	double sec = v->valuedouble * 60.0;
	*dst = sec > 0 && sec < 1 ? 1 : (int)(sec + 0.5);
	return 0;
}

/* "i18n": {"ja": {...}}: a lesson's title and description, a grader step's name */
static const cJSON *kj_get_ja(const cJSON *o)
{
	const cJSON *i18n = cJSON_GetObjectItemCaseSensitive(o, "i18n");
	const cJSON *ja = cJSON_GetObjectItemCaseSensitive(i18n, "ja");
	return cJSON_IsObject(ja) ? ja : NULL;
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

/* "files[2]: " in front of a message about one item of an array */
static void item_prefix(char *err, size_t errlen, const char *array, size_t i)
{
	char tmp[512];
	snprintf(tmp, sizeof tmp, "%s", err);
	snprintf(err, errlen, "%s[%zu]: %s", array, i, tmp);
}

static int parse_steps(const cJSON *a, struct lesson *l, int machine, char *err, size_t errlen);
static int parse_guide_paths(const cJSON *o, struct lesson *l, char *err, size_t errlen);
static void guide_free(struct lesson_guide *g);
static int parse_machines(const cJSON *o, struct lesson *l, char *err, size_t errlen);

/* One lesson (or one machine's merged view of it) from its JSON object. */
static int parse_obj(const cJSON *o, struct lesson *l, int image_required, char *err, size_t errlen)
{
	char *s = NULL;
	const cJSON *a, *it;

	memset(l, 0, sizeof *l);
	if (get_str(o, "id", 1, &l->id, err, errlen) < 0 ||
	    get_str(o, "title", 1, &l->title, err, errlen) < 0 ||
	    get_str(o, "description", 0, &l->description, err, errlen) < 0 ||
	    get_int(o, "minutes", 60, 1, 24 * 60, &l->minutes, err, errlen) < 0 ||
	    get_str(o, "setup", 0, &l->setup, err, errlen) < 0 ||
	    get_str(o, "shell", 0, &l->shell, err, errlen) < 0)
		goto fail;
	if (l->shell && (l->shell[0] != '/' || strlen(l->shell) > 255 || strchr(l->shell, ' '))) {
		snprintf(err, errlen, "\"shell\" must be an absolute path to a program");
		goto fail;
	}
	const cJSON *ja = kj_get_ja(o);
	if (ja && (get_str(ja, "title", 0, &l->title_ja, err, errlen) < 0 ||
	           get_str(ja, "description", 0, &l->description_ja, err, errlen) < 0)) {
		char tmp[512];
		snprintf(tmp, sizeof tmp, "%s", err);
		snprintf(err, errlen, "i18n.ja: %s", tmp);
		goto fail;
	}
	if (!*l->id || !util_label_value_ok(l->id)) {
		snprintf(err, errlen, "\"id\" must be a label value ([A-Za-z0-9._-], at most 63)");
		goto fail;
	}
	if (get_str(o, "runtime", 1, &s, err, errlen) < 0)
		goto fail;
	int rt = lesson_runtime_parse(s);
	if (rt < 0) {
		snprintf(err, errlen, "\"runtime\" must be \"vm\" or \"pod\"");
		goto fail;
	}
	l->runtime = (enum lesson_runtime)rt;
	free(s);
	s = NULL;
	if (get_str(o, "image", image_required, &l->image, err, errlen) < 0 ||
	    get_str(o, "memory", 0, &l->memory, err, errlen) < 0 ||
	    get_str(o, "golden_pvc", 0, &l->golden_pvc, err, errlen) < 0 ||
	    get_str(o, "disk_size", 0, &l->disk_size, err, errlen) < 0 ||
	    get_int(o, "cpus", 1, 1, 64, &l->cpus, err, errlen) < 0 ||
	    get_int(o, "running_timeout_s", 150, 1, 86400, &l->running_timeout_s, err, errlen) <
	        0 ||
	    get_int(o, "ready_timeout_s", 300, 1, 86400, &l->ready_timeout_s, err, errlen) < 0 ||
	    get_int(o, "grade_timeout_s", 0, 1, 3600, &l->grade_timeout_s, err, errlen) < 0 ||
	    get_int(o, "warm", 0, 0, 1000, &l->warm, err, errlen) < 0 ||
	    get_minutes_s(o, "idle_minutes", -1, 24 * 60, &l->idle_s, err, errlen) < 0 ||
	    get_minutes_s(o, "extend_minutes", 15 * 60, 24 * 60, &l->extend_s, err, errlen) < 0 ||
	    get_int(o, "max_extensions", 2, 0, 100, &l->max_extensions, err, errlen) < 0)
		goto fail;
	if (l->max_extensions > 0 && l->extend_s == 0) {
		snprintf(err, errlen,
		         "\"extend_minutes\" is 0 but \"max_extensions\" is %d: an extension "
		         "would add nothing (set max_extensions to 0 for none)",
		         l->max_extensions);
		goto fail;
	}
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
	if (!l->memory)
		l->memory = xstrdup("1Gi");
	if (!match("^[1-9][0-9]*(Mi|Gi|Ti)$", l->memory)) {
		snprintf(err, errlen, "\"memory\" must be a quantity like 512Mi or 2Gi");
		goto fail;
	}
	if (get_str(o, "disk", 0, &s, err, errlen) < 0)
		goto fail;
	if (!s || strcmp(s, "containerdisk") == 0) {
		l->disk = DISK_CONTAINERDISK;
	} else if (strcmp(s, "golden") == 0) {
		l->disk = DISK_GOLDEN;
		if (!l->golden_pvc || !util_dns_label_ok(l->golden_pvc)) {
			snprintf(err, errlen, "disk \"golden\" needs \"golden_pvc\", a PVC name");
			goto fail;
		}
	} else if (strcmp(s, "datavolume") == 0) {
		l->disk = DISK_DATAVOLUME;
		if (!l->disk_size)
			l->disk_size = xstrdup("10Gi");
		if (!match("^[1-9][0-9]*(Mi|Gi|Ti)$", l->disk_size)) {
			snprintf(err, errlen, "\"disk_size\" must be a quantity like 10Gi");
			goto fail;
		}
	} else {
		snprintf(err, errlen,
		         "\"disk\" must be \"golden\", \"containerdisk\" or \"datavolume\"");
		goto fail;
	}
	free(s);
	s = NULL;

	a = cJSON_GetObjectItemCaseSensitive(o, "files");
	if (a && !cJSON_IsArray(a)) {
		snprintf(err, errlen, "\"files\" must be an array");
		goto fail;
	}
	l->files = xcalloc((size_t)cJSON_GetArraySize(a) + 1, sizeof *l->files);
	cJSON_ArrayForEach(it, a)
	{
		struct lesson_file *f = &l->files[l->nfiles++];
		if (!cJSON_IsObject(it) || get_str(it, "path", 1, &f->path, err, errlen) < 0 ||
		    get_str(it, "content", 1, &f->content, err, errlen) < 0 ||
		    get_str(it, "mode", 0, &f->mode, err, errlen) < 0) {
			if (!cJSON_IsObject(it))
				snprintf(err, errlen,
				         "must be an object {\"path\", \"content\", \"mode\"}");
			item_prefix(err, errlen, "files", l->nfiles - 1);
			goto fail;
		}
		char norm[LESSON_PATH_MAX + 1];
		int pr = lesson_path_normalise(f->path, norm, sizeof norm);
		if (pr < 0) {
			utf8_snprintf(err, errlen, "files[%zu].path: \"%.200s\" must %s",
			              l->nfiles - 1, f->path,
			              pr == LESSON_PATH_DOTDOT ? "have no \"..\" component"
			              : pr == LESSON_PATH_DIR
			                  ? "name a file, not a directory"
			                  : "be absolute (start with /, at most "
			                    "1024 bytes)");
			goto fail;
		}
		const char *rsv = lesson_path_reserved(norm);
		if (rsv) {
			/* a lesson's file there could mark the lab ready before its
			 * setup ran, or replace the agent or its token */
			utf8_snprintf(err, errlen,
			              "files[%zu].path: \"%.200s\" is labvm's own (%s): choose "
			              "another place, e.g. under /root/lab/",
			              l->nfiles - 1, f->path, rsv);
			goto fail;
		}
		if (strcmp(norm, f->path) != 0) {
			free(f->path);
			f->path = xstrdup(norm); /* written where it was checked */
		}
		if (!f->mode)
			f->mode = xstrdup("0644");
		if (!match("^0?[0-7]{3}$", f->mode)) {
			snprintf(err, errlen, "files[%zu].mode: \"%s\" must be octal like 0644",
			         l->nfiles - 1, f->mode);
			goto fail;
		}
	}

	return 0;
fail:
	free(s);
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
		const cJSON *sja = cJSON_IsObject(it) ? kj_get_ja(it) : NULL;
		if (!cJSON_IsObject(it) || get_str(it, "name", 1, &st->name, err, errlen) < 0 ||
		    (sja && get_str(sja, "name", 0, &st->name_ja, err, errlen) < 0) ||
		    get_str(it, "command", 1, &st->command, err, errlen) < 0 ||
		    get_int(it, "timeout_s", 0, 0, 300, &st->timeout_s, err, errlen) < 0 ||
		    get_str(it, "machine", 0, &mname, err, errlen) < 0) {
			if (!cJSON_IsObject(it))
				snprintf(
				    err, errlen,
				    "must be an object {\"name\", \"command\", \"timeout_s\"}");
			item_prefix(err, errlen, "grader", l->nsteps - 1);
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

/* "machines": [{"name", and any of image, disk, golden_pvc, disk_size,
 * memory, cpus, files, setup, grader}]: each machine is the lesson with its
 * own keys replacing the lesson's. */
static const char *const machine_keys[] = {"name",   "image", "disk",  "golden_pvc", "disk_size",
                                           "memory", "cpus",  "files", "setup",      "grader"};

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
			size_t j = 0;
			while (j < sizeof machine_keys / sizeof machine_keys[0] &&
			       strcmp(k->string, machine_keys[j]) != 0)
				j++;
			if (j == sizeof machine_keys / sizeof machine_keys[0]) {
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

/* ------------------------------------------------------------ guides */

int lesson_guide_path_ok(const char *path, char *err, size_t errlen)
{
	const char *p = path;
	if (!*path || path[0] == '/' || strlen(path) > 1024) {
		snprintf(
		    err, errlen,
		    "must be a file relative to lessons_dir (not absolute, at most 1024 bytes)");
		return -1;
	}
	/* each segment a plain name: no "..", ".", empty or hidden segment (the
	 * front ends serve no dot file either) */
	while (*p) {
		const char *end = strchr(p, '/');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (n == 0 || p[0] == '.' || memchr(p, '\\', n)) {
			snprintf(
			    err, errlen,
			    "must stay inside lessons_dir: no \"..\", \".\", hidden or empty path "
			    "segments, no backslashes");
			return -1;
		}
		p += n;
		if (*p == '/')
			p++;
	}
	if (path[strlen(path) - 1] == '/') {
		snprintf(err, errlen, "must name a file, not a folder");
		return -1;
	}
	return 0;
}

static int parse_guide_paths(const cJSON *o, struct lesson *l, char *err, size_t errlen)
{
	char why[256];
	const cJSON *ja = kj_get_ja(o);
	if (get_str(o, "guide", 0, &l->guide.path, err, errlen) < 0)
		return -1;
	if (ja && get_str(ja, "guide", 0, &l->guide_ja.path, err, errlen) < 0) {
		char tmp[512];
		snprintf(tmp, sizeof tmp, "%s", err);
		snprintf(err, errlen, "i18n.ja: %s", tmp);
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

static int guide_load(struct lesson_guide *g, const char *field, const char *lang, const char *dir,
                      char *err, size_t errlen)
{
	char *full = xasprintf("%s/%s", dir, g->path);
	char rdir[PATH_MAX], rfull[PATH_MAX];
	struct stat st;
	int rc = -1;

	if (!realpath(dir, rdir) || !realpath(full, rfull)) {
		snprintf(err, errlen,
		         "%s: \"%.200s\": %s (the path is relative to lessons_dir %.200s)", field,
		         g->path, strerror(errno), dir);
		goto out;
	}
	size_t dl = strlen(rdir);
	if (strncmp(rfull, rdir, dl) != 0 || rfull[dl] != '/') {
		snprintf(err, errlen, "%s: \"%.200s\" is a symbolic link out of lessons_dir", field,
		         g->path);
		goto out;
	}
	if (stat(rfull, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: \"%.200s\" is not a regular file", field, g->path);
		goto out;
	}
	g->text = util_read_file(rfull, LESSON_GUIDE_MAX, &g->len);
	if (!g->text) {
		if (errno == EFBIG)
			snprintf(err, errlen, "%s: \"%.200s\" is larger than %u bytes (4 MiB)",
			         field, g->path, LESSON_GUIDE_MAX);
		else
			snprintf(err, errlen, "%s: \"%.200s\": %s", field, g->path,
			         strerror(errno));
		goto out;
	}
	size_t bad = utf8_valid_prefix(g->text, g->len);
	if (bad < g->len) {
		size_t line = 1;
		for (size_t i = 0; i < bad; i++)
			line += g->text[i] == '\n';
		snprintf(err, errlen, "%s: \"%.200s\", line %zu: %s (a guide is UTF-8 text)", field,
		         g->path, line, g->text[bad] ? "not valid UTF-8" : "a NUL byte");
		free(g->text);
		g->text = NULL;
		g->len = 0;
		goto out;
	}
	/* its folder's URL, when the guide sits in a folder of its own under guides/ */
	const char *slash = strrchr(g->path, '/');
	size_t gl = strlen(LESSON_GUIDE_DIR);
	if (strncmp(g->path, LESSON_GUIDE_DIR, gl) == 0 && slash && slash > g->path + gl)
		g->folder = xasprintf("/%.*s/", (int)(slash - g->path), g->path);
	{
		/* the ETag: the answer's parts (lang served, folder, the bytes) */
		unsigned char md[EVP_MAX_MD_SIZE];
		unsigned mdlen = 0;
		const char *f = g->folder ? g->folder : "";
		EVP_MD_CTX *c = EVP_MD_CTX_new();
		if (!c || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1 ||
		    EVP_DigestUpdate(c, lang, strlen(lang) + 1) != 1 ||
		    EVP_DigestUpdate(c, f, strlen(f) + 1) != 1 ||
		    EVP_DigestUpdate(c, g->text, g->len) != 1 ||
		    EVP_DigestFinal_ex(c, md, &mdlen) != 1 || mdlen < 16) {
			EVP_MD_CTX_free(c);
			snprintf(err, errlen, "%s: hashing the guide failed (OpenSSL)", field);
			goto out;
		}
		EVP_MD_CTX_free(c);
		g->etag[0] = '"';
		for (int i = 0; i < 16; i++)
			snprintf(g->etag + 1 + 2 * i, 3, "%02x", md[i]);
		g->etag[33] = '"';
		g->etag[34] = '\0';
	}
	rc = 0;
out:
	free(full);
	return rc;
}

int lesson_guides_load(struct lesson *l, const char *dir, char *err, size_t errlen)
{
	if (l->guide.path && guide_load(&l->guide, "\"guide\"", "en", dir, err, errlen) < 0)
		return -1;
	if (l->guide_ja.path &&
	    guide_load(&l->guide_ja, "i18n.ja.guide", "ja", dir, err, errlen) < 0)
		return -1;
	return 0;
}

const struct lesson_guide *lesson_guide_for(const struct lesson *l, const char *lang,
                                            const char **served)
{
	if (lang && strcmp(lang, "ja") == 0 && l->guide_ja.text) {
		*served = "ja";
		return &l->guide_ja;
	}
	*served = "en";
	return l->guide.text ? &l->guide : NULL;
}

static void guide_free(struct lesson_guide *g)
{
	free(g->path);
	free(g->text);
	free(g->folder);
	memset(g, 0, sizeof *g);
}

int lesson_path_normalise(const char *path, char *out, size_t outlen)
{
	size_t o = 0, plen = strlen(path);
	int dir = 1; /* what is written so far names a directory ("/", ".../.") */
	if (path[0] != '/')
		return LESSON_PATH_RELATIVE;
	if (plen > LESSON_PATH_MAX || outlen < 2)
		return LESSON_PATH_LONG;
	for (const char *p = path; *p;) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		const char *e = strchr(p, '/');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return LESSON_PATH_DOTDOT;
		if (n == 1 && p[0] == '.') {
			dir = 1;
		} else {
			if (o + 1 + n + 1 > outlen)
				return LESSON_PATH_LONG;
			out[o++] = '/';
			memcpy(out + o, p, n);
			o += n;
			dir = 0;
		}
		p += n;
	}
	if (dir || path[plen - 1] == '/')
		return LESSON_PATH_DIR;
	out[o] = '\0';
	return 0;
}

/* labvm's own places in a guest (cloudinit.c, manifest.c): a directory
 * holds everything under it. /var/run and /var/lock are symlinks into /run
 * in Debian's images (and most others). */
static const char *const reserved_paths[] = {
    "/opt/labvm",     /* the agent, the setup script (GUEST_AGENT_PATH, GUEST_SETUP_PATH) */
    "/etc/labvm",     /* the agent's token (GUEST_TOKEN_PATH) */
    "/var/lib/labvm", /* setup.started, setup.rc, agent.listening, ready (GUEST_STATE_DIR) */
    "/var/log/labvm-setup.log", /* GUEST_SETUP_LOG */
    "/var/log/labvm-agent.log",
    "/etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf", /* GUEST_AUTOLOGIN */
    "/run/labvm", /* a Pod's ready flag, setup log */
    "/var/run/labvm",
    "/var/lock/labvm",
    "/labvm",               /* a Pod's files and setup script (its Secret's mount) */
    "/dev/termination-log", /* a Pod's termination message */
    NULL};

const char *lesson_path_reserved(const char *norm)
{
	for (const char *const *r = reserved_paths; *r; r++) {
		size_t n = strlen(*r);
		if (strncmp(norm, *r, n) == 0 && (norm[n] == '\0' || norm[n] == '/'))
			return *r;
	}
	return NULL;
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

size_t lesson_nmachines(const struct lesson *l)
{
	return l->nmachines ? l->nmachines : 1;
}

const struct lesson *lesson_machine(const struct lesson *l, size_t i)
{
	return l->nmachines ? &l->machines[i] : l;
}

int lesson_machine_index(const struct lesson *l, const char *name)
{
	if (!name || !*name)
		return 0;
	for (size_t i = 0; i < l->nmachines; i++)
		if (strcmp(l->machines[i].machine, name) == 0)
			return (int)i;
	return -1;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

static int is_json(const struct dirent *d)
{
	size_t n = strlen(d->d_name);
	return d->d_name[0] != '.' && n > 5 && strcmp(d->d_name + n - 5, ".json") == 0;
}

int lessons_load(const char *dir, struct lessons *out, char *err, size_t errlen)
{
	struct dirent **names;
	int n = scandir(dir, &names, is_json, by_name);
	int rc = 0;

	memset(out, 0, sizeof *out);
	if (n < 0) {
		snprintf(err, errlen, "lessons_dir %s: %s", dir, strerror(errno));
		return -1;
	}
	out->v = xcalloc((size_t)n + 1, sizeof *out->v);
	for (int i = 0; i < n; i++) {
		char *path = xasprintf("%s/%s", dir, names[i]->d_name);
		size_t len;
		char *text = rc ? NULL : util_read_file(path, LESSON_MAX_BYTES, &len);
		char sub[512];
		if (!rc && !text) {
			snprintf(err, errlen, "%s: %s", path, strerror(errno));
			rc = -1;
		} else if (!rc && lesson_parse(text, len, &out->v[out->n], sub, sizeof sub) < 0) {
			snprintf(err, errlen, "%s: %s", path, sub);
			rc = -1;
		} else if (!rc && lesson_guides_load(&out->v[out->n], dir, sub, sizeof sub) < 0) {
			snprintf(err, errlen, "%s: %s", path, sub);
			lesson_free(&out->v[out->n]);
			rc = -1;
		} else if (!rc && lessons_find(out, out->v[out->n].id)) {
			snprintf(err, errlen, "%s: lesson id \"%s\" is used twice", path,
			         out->v[out->n].id);
			lesson_free(&out->v[out->n]);
			rc = -1;
		} else if (!rc) {
			out->n++;
		}
		free(text);
		free(path);
		free(names[i]);
	}
	free(names);
	if (rc)
		lessons_free(out);
	return rc;
}

const struct lesson *lessons_find(const struct lessons *ls, const char *id)
{
	for (size_t i = 0; i < ls->n; i++)
		if (strcmp(ls->v[i].id, id) == 0)
			return &ls->v[i];
	return NULL;
}

void lesson_free(struct lesson *l)
{
	for (size_t i = 0; i < l->nfiles; i++) {
		free(l->files[i].path);
		free(l->files[i].content);
		free(l->files[i].mode);
	}
	for (size_t i = 0; i < l->nsteps; i++) {
		free(l->steps[i].name);
		free(l->steps[i].name_ja);
		free(l->steps[i].command);
	}
	for (size_t i = 0; i < l->nmachines; i++)
		lesson_free(&l->machines[i]);
	free(l->machines);
	free(l->machine);
	free(l->files);
	free(l->steps);
	free(l->id);
	free(l->title);
	free(l->description);
	free(l->title_ja);
	free(l->description_ja);
	free(l->image);
	free(l->shell);
	free(l->golden_pvc);
	free(l->disk_size);
	free(l->memory);
	free(l->setup);
	guide_free(&l->guide);
	guide_free(&l->guide_ja);
	memset(l, 0, sizeof *l);
}

void lessons_free(struct lessons *ls)
{
	for (size_t i = 0; i < ls->n; i++)
		lesson_free(&ls->v[i]);
	free(ls->v);
	memset(ls, 0, sizeof *ls);
}
