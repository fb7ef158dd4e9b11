/* lesson.c - the lesson model (lesson.h): the enums' names, where a lesson's
 * files and guides may be, a session's machines, the guide to serve, finding
 * and freeing lessons. A lesson from its text is lesson_parse.c; reading
 * lessons_dir, lesson_load.c. */
#include "lesson.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const runtime_names[] = {[RUNTIME_VM] = "vm", [RUNTIME_POD] = "pod"};
static const char *const disk_names[] = {[DISK_CONTAINERDISK] = "containerdisk",
                                         [DISK_GOLDEN] = "golden",
                                         [DISK_DATAVOLUME] = "datavolume"};

static int name_index(const char *const *names, size_t n, const char *v)
{
	for (size_t i = 0; v && i < n; i++)
		if (strcmp(v, names[i]) == 0)
			return (int)i;
	return -1;
}

const char *lesson_runtime_str(enum lesson_runtime r)
{
	return r == RUNTIME_POD ? runtime_names[RUNTIME_POD] : runtime_names[RUNTIME_VM];
}

int lesson_runtime_parse(const char *v)
{
	return name_index(runtime_names, sizeof runtime_names / sizeof runtime_names[0], v);
}

const char *lesson_disk_str(enum lesson_disk d)
{
	return (size_t)d < sizeof disk_names / sizeof disk_names[0]
	           ? disk_names[d]
	           : disk_names[DISK_CONTAINERDISK];
}

int lesson_disk_parse(const char *v)
{
	return name_index(disk_names, sizeof disk_names / sizeof disk_names[0], v);
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

int lesson_file_path_ok(const char *path, char *norm, size_t normlen, char *why, size_t whylen)
{
	int pr = lesson_path_normalise(path, norm, normlen);
	const char *rsv = pr < 0 ? NULL : lesson_path_reserved(norm);
	if (pr < 0)
		snprintf(why, whylen, "must %s",
		         pr == LESSON_PATH_DOTDOT ? "have no \"..\" component"
		         : pr == LESSON_PATH_DIR
		             ? "name a file, not a directory"
		             : "be absolute (start with /, at most 1024 bytes)");
	else if (rsv) /* a lesson's file there could mark the lab ready before its
	               * setup ran, or replace the agent or its token */
		snprintf(why, whylen,
		         "is labvm's own (%s): choose another place, e.g. under /root/lab/", rsv);
	return pr < 0 || rsv ? -1 : 0;
}

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

int lesson_has_teacher(const struct lesson *l, const char *user)
{
	for (size_t i = 0; user && i < l->nteachers; i++)
		if (strcmp(l->teachers[i], user) == 0)
			return 1;
	return 0;
}

const struct lesson *lessons_find(const struct lessons *ls, const char *id)
{
	for (size_t i = 0; i < ls->n; i++)
		if (strcmp(ls->v[i].id, id) == 0)
			return &ls->v[i];
	return NULL;
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

void lesson_free(struct lesson *l)
{
	for (size_t i = 0; i < l->nteachers; i++)
		free(l->teachers[i]);
	free(l->teachers);
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
