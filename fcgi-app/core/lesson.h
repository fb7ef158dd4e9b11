/* lesson.h - lessons: JSON files in lessons_dir, loaded and validated once
 * at start (a bad lesson file stops the program with a clear message).
 *
 * lesson.c is the model (the enums' names, where a lesson's files may go, a
 * session's machines, find and free); lesson_parse.c reads a file through its
 * key tables (one row a key: type, field, default, limits, the value's rule,
 * whether a machine may set it); lesson_guide.c reads the guides. A new key:
 * a field here and a row in lesson_parse.c's lesson_keys[]. */
#ifndef LABVM_CORE_LESSON_H
#define LABVM_CORE_LESSON_H

#include <stddef.h>

enum lesson_runtime { RUNTIME_VM, RUNTIME_POD };
enum lesson_disk { DISK_CONTAINERDISK, DISK_GOLDEN, DISK_DATAVOLUME };

struct lesson_file {
	char *path; /* absolute path in the guest */
	char *content;
	char *mode; /* octal string, e.g. "0644" */
};

struct grader_step {
	char *name;
	char *name_ja; /* "i18n": {"ja": {"name"}}, or NULL */
	char *command; /* run with /bin/sh -c by the guest agent */
	int timeout_s; /* 0 = the configured default */
	int machine;   /* index into the lesson's machines (0 when it has none) */
};

/* A lesson's guide (lesson field "guide", "i18n": {"ja": {"guide"}}): a
 * Markdown file relative to lessons_dir, read once at load (at most
 * LESSON_GUIDE_MAX bytes, valid UTF-8 without NUL bytes) and kept in memory
 * with its ETag, so that serving it (GET /api/lessons/{id}/guide) never reads
 * a file or the database. */
#define LESSON_GUIDE_MAX (4u << 20)
/* The front ends serve a guide's images from lessons_dir's folder "guides"
 * at this URL: a guide in guides/<name>/ has its images there, at
 * /guides/<name>/... (conf/lighttpd, conf/apache). */
#define LESSON_GUIDE_DIR "guides/"

struct lesson_guide {
	char *path;    /* as the lesson names it (relative to lessons_dir); NULL = none */
	char *text;    /* the Markdown (NUL-terminated), once loaded */
	size_t len;    /* its bytes */
	char *folder;  /* the URL of its folder ("/guides/<name>/"), NULL when it is not in one */
	char etag[36]; /* "\"<32 hex>\"": the first 128 bits of SHA-256 of the answer's parts */
};

/* A machine's name: a DNS-1123 label short enough for the VM name
 * "lab-<32 hex>-<name>" to stay a label (63). */
#define MACHINE_NAME_MAX 20

struct lesson {
	char *id;
	char *title;
	char *description;
	char *title_ja; /* optional translations ("i18n": {"ja": {...}}) */
	char *description_ja;
	enum lesson_runtime runtime;
	int minutes;
	char *image; /* containerDisk image (vm) or container image (pod) */
	enum lesson_disk disk;
	char *golden_pvc; /* disk golden */
	char *disk_size;  /* disk datavolume, e.g. "10Gi" */
	char *memory;     /* e.g. "1Gi" */
	int cpus;
	int running_timeout_s; /* default 150 */
	int ready_timeout_s;   /* default 300 */
	struct lesson_file *files;
	size_t nfiles;
	char *setup; /* shell script; NULL = nothing to set up */
	char *shell; /* pod lessons: the console's program (default /bin/bash, else /bin/sh) */
	struct grader_step *steps;
	size_t nsteps;
	int grade_timeout_s; /* the whole grade's deadline; 0 = from the steps */
	/* "machines": several VMs per session. Each entry is a whole lesson
	 * (what the machine does not set comes from the lesson) with its name
	 * in `machine`; its grader steps are the lesson's (steps[].machine says
	 * where they run), so machines[i].steps is empty. A lesson without
	 * "machines" is its own single machine (machine NULL). */
	char *machine;
	struct lesson *machines;
	size_t nmachines;
	int warm; /* VMs kept ready ahead of a press (the warm pool); 0 = none */
	/* issue #28, in seconds: "idle_minutes" (-1 absent: the configured
	 * default; 0 never), "extend_minutes" (default 15) and "max_extensions"
	 * (default 2). Minutes may have a fraction (0.5 = 30 s): time-scaled
	 * tests and benchmarks use that. */
	int idle_s;
	int extend_s;
	int max_extensions;
	char hash[41]; /* content hash: the first 40 hex digits of the file's SHA-256 */
	struct lesson_guide guide, guide_ja; /* the lesson's own (not a machine's) */
	/* "teachers": REMOTE_USERs who teach this lesson (besides labvm.conf
	 * `teachers` and the operators, who teach every lesson; issue #29) */
	char **teachers;
	size_t nteachers;
};

/* How many VMs a session of this lesson has, and the i-th one's lesson. */
size_t lesson_nmachines(const struct lesson *l);
const struct lesson *lesson_machine(const struct lesson *l, size_t i);
/* The index of machine `name` (NULL or "": the first), -1 when none. */
int lesson_machine_index(const struct lesson *l, const char *name);

struct lessons {
	struct lesson *v;
	size_t n;
};

/* A file's path as labvm writes it: absolute, "//" and "/./" collapsed
 * into out. 0 ok; LESSON_PATH_RELATIVE, LESSON_PATH_DOTDOT (a ".."
 * component: resolved by the guest's kernel, through the image's symlinks,
 * it may land anywhere, e.g. /var/run/../etc is /etc), LESSON_PATH_DIR (it
 * names no file: "/", or a trailing "/" or "/."), LESSON_PATH_LONG. */
enum {
	LESSON_PATH_RELATIVE = -1,
	LESSON_PATH_DOTDOT = -2,
	LESSON_PATH_DIR = -3,
	LESSON_PATH_LONG = -4
};
#define LESSON_PATH_MAX 1024
int lesson_path_normalise(const char *path, char *out, size_t outlen);
/* The reserved place a normalised path is in or is (labvm's agent, token,
 * state and ready flags, setup script and log, the console's autologin, a
 * Pod's files, flag and termination log), or NULL when it is the lesson's. */
const char *lesson_path_reserved(const char *normalised);
/* A lesson file's path (files[].path): normalised into norm, 0; or -1 with
 * why ("must be absolute ...", "is labvm's own (/etc/labvm): ...") when it
 * is not a place a lesson may write. */
int lesson_file_path_ok(const char *path, char *norm, size_t normlen, char *why, size_t whylen);

/* Load every *.json in dir (sorted by file name). -1 with err on the first bad file. */
int lessons_load(const char *dir, struct lessons *out, char *err, size_t errlen);
/* Parse one lesson from JSON text (used by lessons_load and the tests). */
int lesson_parse(const char *json, size_t len, struct lesson *out, char *err, size_t errlen);
/* Check a guide path as the lesson names it: 0, or -1 with why in err. */
int lesson_guide_path_ok(const char *path, char *err, size_t errlen);
/* Read the lesson's guides from dir (its lessons_dir): 0, or -1 with err
 * naming the field, the file and what is wrong (missing, too large, not
 * UTF-8 at line N, a symbolic link out of dir). lessons_load calls it. */
int lesson_guides_load(struct lesson *l, const char *dir, char *err, size_t errlen);
/* The guide to serve for lang ("ja" prefers guide_ja): NULL when the lesson
 * has none; *served is the language of the one returned ("en" or "ja"). */
const struct lesson_guide *lesson_guide_for(const struct lesson *l, const char *lang,
                                            const char **served);
const struct lesson *lessons_find(const struct lessons *ls, const char *id);
/* user is named in the lesson's own "teachers" */
int lesson_has_teacher(const struct lesson *l, const char *user);
void lesson_free(struct lesson *l);
void lessons_free(struct lessons *ls);

const char *lesson_runtime_str(enum lesson_runtime r);
/* "vm" / "pod" to the enum; -1 when it is neither. */
int lesson_runtime_parse(const char *v);
const char *lesson_disk_str(enum lesson_disk d);
/* "containerdisk" / "golden" / "datavolume" to the enum; -1 when it is none. */
int lesson_disk_parse(const char *v);

/* The keys labvm reads in a lesson file, by the object they stand in
 * (labvm.fcgi --check warns about any other): the i-th one's name, NULL
 * past the last. A machine ("machines": [{...}]) may set only "name" and the
 * keys lesson_parse.c marks for machines; any other is an error there. */
enum lesson_key_set {
	LESSON_KEYS,      /* the lesson's own */
	LESSON_JA_KEYS,   /* "i18n": {"ja": {...}} */
	LESSON_FILE_KEYS, /* "files": [{...}] */
	LESSON_STEP_KEYS  /* "grader": [{...}] */
};
const char *lesson_key_name(enum lesson_key_set set, size_t i);

#endif
