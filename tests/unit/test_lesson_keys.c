/* lesson_parse.c's key tables: every key that labvm.fcgi --check calls known
 * is one the parser reads (a wrong type is refused, naming the key), a
 * machine may set exactly the keys marked for machines, and the value rules
 * and defaults of the table (lesson_file_path_ok, the enums' names). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lesson.h"
#include "unit.h"

#define BASE "\"id\": \"x\", \"title\": \"t\", \"runtime\": \"vm\", \"image\": \"i\""

static int parse(const char *json, char *err, size_t n)
{
	struct lesson l;
	int rc = lesson_parse(json, strlen(json), &l, err, n);
	if (rc == 0)
		lesson_free(&l);
	return rc;
}

/* what a machine may set (README.md, "machines"): the rest is the lesson's */
static const char *const machine_may[] = {"image", "disk",  "golden_pvc", "disk_size", "memory",
                                          "cpus",  "files", "setup",      "grader",    NULL};

static int in(const char *k, const char *const *list)
{
	for (; *list; list++)
		if (strcmp(k, *list) == 0)
			return 1;
	return 0;
}

int main(void)
{
	char err[512], json[1024], want[96];
	size_t n = 0;

	/* each key of the lesson: a wrong type (true) is refused, naming it;
	 * "i18n" is only read when it is an object (as before) */
	int all = 1;
	for (size_t i = 0; lesson_key_name(LESSON_KEYS, i); i++, n++) {
		const char *k = lesson_key_name(LESSON_KEYS, i);
		if (strcmp(k, "i18n") == 0)
			continue;
		snprintf(json, sizeof json, "{%s, \"%s\": true}", BASE, k);
		/* the base's own keys: the later duplicate is not read by cJSON */
		if (strstr(BASE, k))
			snprintf(json, sizeof json, "{\"%s\": true, %s}", k, BASE);
		snprintf(want, sizeof want, "\"%s\"", k);
		int ok = parse(json, err, sizeof err) < 0 && strstr(err, want);
		if (!ok)
			printf("# %s: %s\n", k, err);
		all &= ok;
	}
	/* 26: issue #29's teachers, issue #28's idle_minutes, extend_minutes, max_extensions */
	CHECK(all && n == 26, "each of the %zu lesson keys --check knows is read by lesson_parse",
	      n);

	/* each key in a machine: allowed exactly when the table marks it */
	all = 1;
	for (size_t i = 0; lesson_key_name(LESSON_KEYS, i); i++) {
		const char *k = lesson_key_name(LESSON_KEYS, i);
		snprintf(json, sizeof json, "{%s, \"machines\": [{\"name\": \"a\", \"%s\": null}]}",
		         BASE, k);
		int rc = parse(json, err, sizeof err);
		int refused = rc < 0 && strstr(err, "unknown key");
		if (refused == in(k, machine_may)) {
			printf("# machine key %s: %s\n", k, rc < 0 ? err : "accepted");
			all = 0;
		}
	}
	CHECK(all, "a machine may set image, disk, golden_pvc, disk_size, memory, cpus, files, "
	           "setup, grader (and its name); any other lesson key is an unknown key there");
	snprintf(json, sizeof json,
	         "{%s, \"memory\": \"2Gi\", \"cpus\": 2, \"machines\": [{\"name\": \"a\"}, "
	         "{\"name\": \"b\", \"memory\": \"4Gi\", \"disk\": \"datavolume\"}]}",
	         BASE);
	struct lesson l;
	int rc = lesson_parse(json, strlen(json), &l, err, sizeof err);
	CHECK(rc == 0 && l.nmachines == 2 && strcmp(l.machines[0].memory, "2Gi") == 0 &&
	          strcmp(l.machines[1].memory, "4Gi") == 0 && l.machines[1].cpus == 2 &&
	          l.machines[1].disk == DISK_DATAVOLUME &&
	          strcmp(l.machines[1].disk_size, "10Gi") == 0 && l.machines[0].disk_size == NULL,
	      "a machine's own keys replace the lesson's, the rest come from the lesson, and the "
	      "rules between keys run for it (datavolume's 10Gi)");
	if (rc == 0)
		lesson_free(&l);

	/* the defaults of the table */
	snprintf(json, sizeof json,
	         "{%s, \"files\": [{\"path\": \"/root/a\", \"content\": \"\"}], "
	         "\"grader\": [{\"name\": \"s\", \"command\": \"true\"}]}",
	         BASE);
	rc = lesson_parse(json, strlen(json), &l, err, sizeof err);
	CHECK(rc == 0 && l.minutes == 60 && l.cpus == 1 && l.running_timeout_s == 150 &&
	          l.ready_timeout_s == 300 && l.grade_timeout_s == 0 && l.warm == 0 &&
	          strcmp(l.memory, "1Gi") == 0 && l.disk == DISK_CONTAINERDISK && !l.disk_size &&
	          !l.shell && !l.setup && strcmp(l.files[0].mode, "0644") == 0 &&
	          l.steps[0].timeout_s == 0 && l.steps[0].machine == 0,
	      "defaults: 60 minutes, 1 cpu, 150/300 s, 1Gi, containerdisk, files 0644");
	CHECK(rc == 0 && l.idle_s == -1 && l.extend_s == 900 && l.max_extensions == 2,
	      "defaults (issue #28): idle_minutes the configured one (-1), extend_minutes 15, "
	      "max_extensions 2");
	if (rc == 0)
		lesson_free(&l);

	/* minutes with a fraction are seconds; a tiny one at least 1 s; the rules */
	snprintf(json, sizeof json,
	         "{%s, \"idle_minutes\": 0.2, \"extend_minutes\": 0.001, \"max_extensions\": 1}",
	         BASE);
	rc = lesson_parse(json, strlen(json), &l, err, sizeof err);
	CHECK(rc == 0 && l.idle_s == 12 && l.extend_s == 1 && l.max_extensions == 1,
	      "idle_minutes 0.2 is 12 s, extend_minutes 0.001 is 1 s");
	if (rc == 0)
		lesson_free(&l);
	snprintf(json, sizeof json, "{%s, \"extend_minutes\": 0, \"max_extensions\": 1}", BASE);
	int bad = lesson_parse(json, strlen(json), &l, err, sizeof err) < 0 &&
	          strstr(err, "extend_minutes");
	snprintf(json, sizeof json, "{%s, \"idle_minutes\": -1}", BASE);
	bad &= lesson_parse(json, strlen(json), &l, err, sizeof err) < 0 &&
	       strstr(err, "idle_minutes") != NULL;
	CHECK(bad,
	      "extensions of 0 minutes and a negative idle_minutes are refused, naming the key");

	/* each set's names are unique (a row twice would be read twice) */
	static const enum lesson_key_set sets[] = {LESSON_KEYS, LESSON_JA_KEYS, LESSON_FILE_KEYS,
	                                           LESSON_STEP_KEYS};
	all = 1;
	for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++)
		for (size_t i = 0; lesson_key_name(sets[s], i); i++)
			for (size_t j = i + 1; lesson_key_name(sets[s], j); j++)
				all &= strcmp(lesson_key_name(sets[s], i),
				              lesson_key_name(sets[s], j)) != 0;
	CHECK(all && lesson_key_name(LESSON_JA_KEYS, 3) == NULL &&
	          lesson_key_name(LESSON_FILE_KEYS, 3) == NULL &&
	          lesson_key_name(LESSON_STEP_KEYS, 5) == NULL,
	      "names unique in each set; i18n.ja has 3 keys, a file 3, a grader step 5");

	/* a file's place */
	static const struct {
		const char *path, *norm, *why;
	} places[] = {
	    {"/root/lab/a", "/root/lab/a", NULL},
	    {"//root/./lab//a", "/root/lab/a", NULL},
	    {"root/a", NULL, "must be absolute"},
	    {"/root/../etc/x", NULL, "must have no \"..\" component"},
	    {"/root/", NULL, "must name a file, not a directory"},
	    {"/var/lib//labvm/ready", NULL,
	     "is labvm's own (/var/lib/labvm): choose another place"},
	    {"/labvmx/a", "/labvmx/a", NULL},
	};
	for (size_t i = 0; i < sizeof places / sizeof places[0]; i++) {
		char norm[LESSON_PATH_MAX + 1] = "", why[128] = "";
		rc = lesson_file_path_ok(places[i].path, norm, sizeof norm, why, sizeof why);
		if (places[i].norm)
			CHECK(rc == 0 && strcmp(norm, places[i].norm) == 0, "file path %s: %s",
			      places[i].path, norm);
		else
			CHECK(rc < 0 && strncmp(why, places[i].why, strlen(places[i].why)) == 0,
			      "file path %s refused: %s", places[i].path, why);
	}

	/* the enums' names */
	CHECK(lesson_runtime_parse("vm") == RUNTIME_VM &&
	          lesson_runtime_parse("pod") == RUNTIME_POD && lesson_runtime_parse("Pod") < 0 &&
	          lesson_runtime_parse(NULL) < 0 &&
	          strcmp(lesson_runtime_str(RUNTIME_POD), "pod") == 0,
	      "runtime names");
	CHECK(lesson_disk_parse("golden") == DISK_GOLDEN &&
	          lesson_disk_parse("datavolume") == DISK_DATAVOLUME &&
	          lesson_disk_parse("containerdisk") == DISK_CONTAINERDISK &&
	          lesson_disk_parse("") < 0 &&
	          strcmp(lesson_disk_str(DISK_DATAVOLUME), "datavolume") == 0 &&
	          strcmp(lesson_disk_str(DISK_CONTAINERDISK), "containerdisk") == 0,
	      "disk names");
	return unit_done();
}
