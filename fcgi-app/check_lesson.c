/* check_lesson.c - labvm.fcgi --check LESSON.json...: the teacher's check of
 * lesson files before they go to the operators. No labvm.conf needed.
 *
 * For each file: the JSON itself (line and column of a syntax error); every
 * rule labvm applies when it loads lessons (the message names the field, as
 * a path like files[2].mode, and what is expected); keys labvm does not know
 * (warnings: a typo such as "setpu" would otherwise be ignored); paths
 * reserved for labvm's agent (lesson_parse: normalised, then refused); the
 * setup script and each grader command
 * through `sh -n`; and the cloud-config labvm renders for the lesson, checked
 * with cloud-init's own schema (`cloud-init schema`, Debian package
 * cloud-init) when it is installed and with labvm's rules (header, size
 * within a Secret) always. Exit status 0 when every file is usable (warnings
 * allowed), 1 otherwise. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "check_guide.h"
#include "check_lesson.h"
#include "cloudinit.h"
#include "lesson.h"
#include "util.h"

#define LESSON_FILE_MAX  (1u << 20)
#define SECRET_MAX_BYTES (1u << 20) /* Kubernetes: a Secret's data is at most 1 MiB */

struct ctx {
	const char *file;
	int errors, warnings;
};

static void report(struct ctx *c, int error, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void report(struct ctx *c, int error, const char *fmt, ...)
{
	va_list ap;
	printf("%s: %s: ", c->file, error ? "error" : "warning");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (error)
		c->errors++;
	else
		c->warnings++;
}

/* the keys labvm reads there (lesson.h: lesson_parse.c's tables) */
static int known(const char *key, enum lesson_key_set set)
{
	for (size_t i = 0; lesson_key_name(set, i); i++)
		if (strcmp(key, lesson_key_name(set, i)) == 0)
			return 1;
	return 0;
}

static void unknown_keys(struct ctx *c, const cJSON *o, const char *where, enum lesson_key_set set)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, o)
	{
		if (!known(it->string, set)) {
			char list[512] = "";
			for (size_t i = 0; lesson_key_name(set, i); i++) {
				strncat(list, lesson_key_name(set, i),
				        sizeof list - strlen(list) - 3);
				if (lesson_key_name(set, i + 1))
					strncat(list, ", ", sizeof list - strlen(list) - 1);
			}
			report(c, 0, "%s%s\"%s\": unknown key, ignored by labvm (known: %s)", where,
			       *where ? "." : "", it->string, list);
		}
	}
}

/* The check's scratch files live in a directory of its own, made by
 * mkdtemp() (mode 0700, under $TMPDIR or /tmp) and removed at the end: no
 * name another user of the machine can guess or plant a symlink at. */
static char scratch[4096];

static int scratch_open(void)
{
	const char *tmp = getenv("TMPDIR");
	if (!tmp || !*tmp || strchr(tmp, '\''))
		tmp = "/tmp"; /* the path goes into sh -c '...' */
	if ((size_t)snprintf(scratch, sizeof scratch, "%s/labvm-check-XXXXXX", tmp) >=
	        sizeof scratch ||
	    !mkdtemp(scratch)) {
		fprintf(stderr, "labvm.fcgi --check: no private directory under %s: %s\n", tmp,
		        strerror(errno));
		scratch[0] = '\0';
		return -1;
	}
	return 0;
}

static const char *const scratch_files[] = {"script.sh", "script.err", "cloud-config.yaml",
                                            "cloud-init.out", NULL};

static void scratch_close(void)
{
	if (!scratch[0])
		return;
	for (const char *const *f = scratch_files; *f; f++) {
		char *p = xasprintf("%s/%s", scratch, *f);
		unlink(p);
		free(p);
	}
	if (rmdir(scratch) < 0)
		fprintf(stderr, "labvm.fcgi --check: removing %s: %s\n", scratch, strerror(errno));
	scratch[0] = '\0';
}

/* A new file in the scratch directory with text in it: its path, or NULL. */
static char *scratch_write(const char *name, const char *text)
{
	char *path = xasprintf("%s/%s", scratch, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	size_t n = strlen(text);
	int ok = fd >= 0 && write(fd, text, n) == (ssize_t)n;
	if (fd >= 0)
		close(fd);
	if (!ok) {
		free(path);
		return NULL;
	}
	return path;
}

/* sh -n on text; 0 when the shell parses it, else -1 with the shell's message */
static int sh_syntax(const char *text, char *msg, size_t msglen)
{
	msg[0] = '\0';
	char *path = scratch[0] ? scratch_write("script.sh", text) : NULL;
	if (!path)
		return 0; /* cannot check: not the lesson's fault */
	char *out = xasprintf("%s/script.err", scratch);
	char *cmd = xasprintf("/bin/sh -n '%s' 2>'%s'", path, out);
	int rc = system(cmd);
	size_t len = 0;
	char *err = util_read_file(out, 4096, &len);
	if (rc != 0 && err) {
		util_rstrip(err);
		/* the temporary file name means nothing to the teacher */
		char *p = strstr(err, path);
		p = p ? p + strlen(path) : err;
		int line = 0, used = 0;
		if (sscanf(p, ": %d: %n", &line, &used) == 1 && used > 0)
			snprintf(msg, msglen, "line %d: %s", line, p + used);
		else
			snprintf(msg, msglen, "%s", p);
		for (char *q = msg; *q; q++)
			if (*q == '\n')
				*q = ' ';
	}
	unlink(path);
	unlink(out);
	free(err);
	free(path);
	free(out);
	free(cmd);
	return rc == 0 ? 0 : -1;
}

static void check_cloud_config(struct ctx *c, const struct lesson *l)
{
	char *ud =
	    cloudinit_build(l, "0000000000000000000000000000000000000000000000000000000000000000");
	if (!ud) {
		report(c, 1, "the cloud-config could not be rendered (out of memory)");
		return;
	}
	size_t n = strlen(ud);
	if (strncmp(ud, "#cloud-config\n", 14) != 0)
		report(c, 1, "cloud-config: does not start with #cloud-config");
	if (n > SECRET_MAX_BYTES)
		report(
		    c, 1,
		    "files, setup: the rendered cloud-config is %zu bytes; a Secret holds at most "
		    "%u: make the lab files smaller or fetch them in setup",
		    n, SECRET_MAX_BYTES);
	if (access("/usr/bin/cloud-init", X_OK) != 0) {
		printf(
		    "%s: note: cloud-init is not installed here: the cloud-config (%zu bytes) was "
		    "checked with labvm's rules only (apt-get install cloud-init for its schema)\n",
		    c->file, n);
		free(ud);
		return;
	}
	char *path = scratch[0] ? scratch_write("cloud-config.yaml", ud) : NULL;
	if (!path) {
		free(ud);
		return;
	}
	char *out = xasprintf("%s/cloud-init.out", scratch);
	char *cmd = xasprintf("/usr/bin/cloud-init schema -c '%s' >'%s' 2>&1", path, out);
	int rc = system(cmd);
	size_t len;
	char *text = util_read_file(out, 1 << 16, &len);
	if (rc != 0) {
		if (text) {
			util_rstrip(text);
			for (char *q = text; *q; q++)
				if (*q == '\n')
					*q = ' ';
		}
		report(c, 1, "cloud-config: cloud-init's schema refuses it: %s",
		       text ? text : "(no output)");
	} else {
		printf("%s: cloud-config: %zu bytes, valid for cloud-init's schema\n", c->file, n);
	}
	unlink(path);
	unlink(out);
	free(text);
	free(path);
	free(out);
	free(cmd);
	free(ud);
}

/* The lesson's guides (check_guide.c): read as labvm reads them at load,
 * relative to the lesson file's folder (its lessons_dir), then scanned. */
static void guide_report(void *ctx, int error, const char *msg)
{
	report(ctx, error, "%s", msg);
}

static void check_guides(struct ctx *c, struct lesson *l)
{
	char err[768];
	const char *slash = strrchr(c->file, '/');
	char *dir = slash ? xstrndup(c->file, (size_t)(slash - c->file)) : xstrdup(".");
	if (slash && slash == c->file) {
		free(dir);
		dir = xstrdup("/");
	}
	if (lesson_guides_load(l, dir, err, sizeof err) < 0) {
		report(c, 1, "%s", err);
	} else {
		if (l->guide.text)
			check_guide(l, &l->guide, "guide", dir, guide_report, c);
		if (l->guide_ja.text)
			check_guide(l, &l->guide_ja, "i18n.ja.guide", dir, guide_report, c);
		if (l->guide.text)
			printf("%s: guide: %s (%zu bytes)%s%s%s\n", c->file, l->guide.path,
			       l->guide.len, l->guide_ja.text ? ", Japanese " : "",
			       l->guide_ja.text ? l->guide_ja.path : "",
			       l->guide.folder ? "" : " (no folder of its own: no images)");
	}
	free(dir);
}

static void check_one(const char *file, int *bad)
{
	struct ctx c = {file, 0, 0};
	size_t len;
	char *text = util_read_file(file, LESSON_FILE_MAX, &len);
	if (!text) {
		report(&c, 1, "cannot read it (or it is over %u bytes)", LESSON_FILE_MAX);
		*bad = 1;
		return;
	}
	cJSON *o = cJSON_ParseWithLength(text, len);
	if (!o) {
		const char *at = cJSON_GetErrorPtr();
		int line = 1, col = 1;
		for (const char *p = text; at && p < at && p < text + len; p++) {
			if (*p == '\n') {
				line++;
				col = 1;
			} else {
				col++;
			}
		}
		report(&c, 1, "line %d, column %d: not valid JSON here (a missing comma or quote?)",
		       line, col);
		printf("%s: NOT usable (1 errors, 0 warnings)\n", file);
		free(text);
		*bad = 1;
		return;
	}
	struct lesson l;
	char err[512];
	if (lesson_parse(text, len, &l, err, sizeof err) < 0) {
		report(&c, 1, "%s", err);
	} else {
		/* the file name: lessons are found by their id, the file name is the operators' */
		const char *base = strrchr(file, '/');
		base = base ? base + 1 : file;
		char *want = xasprintf("%s.json", l.id);
		if (strcmp(base, want) != 0)
			report(&c, 0,
			       "\"id\": \"%s\", but the file is called %s (operators expect %s)",
			       l.id, base, want);
		free(want);
		char msg[512];
		/* every machine's files and setup (a lesson without machines is its one) */
		for (size_t mi = 0; mi < lesson_nmachines(&l); mi++) {
			const struct lesson *m = lesson_machine(&l, mi);
			char pre[64] = "";
			if (m->machine)
				snprintf(pre, sizeof pre, "machine %s: ", m->machine);
			if (m->setup && sh_syntax(m->setup, msg, sizeof msg) < 0)
				report(&c, 1, "%ssetup: not a valid shell script: %s", pre, msg);
		}
		for (size_t i = 0; i < l.nsteps; i++)
			if (sh_syntax(l.steps[i].command, msg, sizeof msg) < 0)
				report(
				    &c, 1,
				    "grader[%zu].command (\"%s\"): not a valid shell command: %s",
				    i, l.steps[i].name, msg);
		if (l.nsteps == 0)
			report(&c, 0, "\"grader\": no steps: Grade will have nothing to say");
		/* idle ending: against the lab's own length (the configured
		 * idle_warning_s is checked by labvm.fcgi --check, with the config) */
		if (l.idle_s > 0 && l.idle_s >= l.minutes * 60)
			report(&c, 0,
			       "\"idle_minutes\" (%d s) is not shorter than \"minutes\" (%d min): "
			       "the lab expires before it could end for idleness",
			       l.idle_s, l.minutes);
		if (l.max_extensions > 0 &&
		    (long)l.minutes * 60 + (long)l.max_extensions * l.extend_s > 24L * 3600)
			report(&c, 0,
			       "\"minutes\" plus %d extensions of %d s run past a day: is that "
			       "meant?",
			       l.max_extensions, l.extend_s);
		if (l.runtime == RUNTIME_VM)
			for (size_t mi = 0; mi < lesson_nmachines(&l); mi++)
				check_cloud_config(&c, lesson_machine(&l, mi));
		check_guides(&c, &l);
		if (!c.errors)
			printf("%s: lesson \"%s\" (%s, %s disk): %zu files, %s, %zu grader steps, "
			       "timeouts %d s running / %d s ready\n",
			       file, l.id, lesson_runtime_str(l.runtime), lesson_disk_str(l.disk),
			       l.nfiles, l.setup ? "a setup script" : "no setup", l.nsteps,
			       l.running_timeout_s, l.ready_timeout_s);
		if (!c.errors && l.nmachines)
			printf("%s: %zu machines on a session network, %zu seats per session\n",
			       file, l.nmachines, l.nmachines);
		lesson_free(&l);
	}
	unknown_keys(&c, o, "", LESSON_KEYS);
	const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "files"), *it;
	int i = 0;
	char where[32];
	const cJSON *arr = cJSON_IsArray(a) ? a : NULL;
	cJSON_ArrayForEach(it, arr)
	{
		snprintf(where, sizeof where, "files[%d]", i++);
		if (cJSON_IsObject(it))
			unknown_keys(&c, it, where, LESSON_FILE_KEYS);
	}
	a = cJSON_GetObjectItemCaseSensitive(o, "grader");
	i = 0;
	arr = cJSON_IsArray(a) ? a : NULL;
	cJSON_ArrayForEach(it, arr)
	{
		snprintf(where, sizeof where, "grader[%d]", i++);
		if (cJSON_IsObject(it))
			unknown_keys(&c, it, where, LESSON_STEP_KEYS);
	}
	const cJSON *ja =
	    cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "i18n"), "ja");
	if (cJSON_IsObject(ja))
		unknown_keys(&c, ja, "i18n.ja", LESSON_JA_KEYS);
	printf("%s: %s (%d errors, %d warnings)\n", file, c.errors ? "NOT usable" : "ok", c.errors,
	       c.warnings);
	if (c.errors)
		*bad = 1;
	cJSON_Delete(o);
	free(text);
}

int check_lesson_files(int n, char **files)
{
	int bad = 0;
	if (scratch_open() < 0)
		printf("labvm.fcgi --check: the shell syntax and cloud-init's schema are not "
		       "checked (no private directory for their files)\n");
	for (int i = 0; i < n; i++)
		check_one(files[i], &bad);
	scratch_close();
	return bad ? 1 : 0;
}
