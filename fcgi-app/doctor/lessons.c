/* lessons.c - labvm-doctor's check 5: every lesson file of lessons_dir
 * passes labvm.fcgi --check (check_lesson.c itself, linked in), labvm.fcgi
 * can load them all, and every golden lesson's PVC decision with its reason
 * (golden.c's golden_check, the call the start makes). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_lesson.h"
#include "doctor.h"
#include "golden.h"
#include "runtime.h"
#include "util.h"

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* check_lesson_files() on one file, its stdout caught: the exit status, and
 * in first the first error line (without the file name), *nerr the errors. */
static int check_one(const char *path, char *first, size_t flen, int *nerr, int *nwarn)
{
	first[0] = '\0';
	*nerr = *nwarn = 0;
	FILE *tmp = tmpfile();
	if (!tmp)
		return -1;
	fflush(stdout);
	int saved = dup(STDOUT_FILENO);
	if (saved < 0 || dup2(fileno(tmp), STDOUT_FILENO) < 0) {
		if (saved >= 0)
			close(saved);
		fclose(tmp);
		return -1;
	}
	char *argv[1] = {(char *)path};
	int rc = check_lesson_files(1, argv);
	fflush(stdout);
	dup2(saved, STDOUT_FILENO);
	close(saved);
	rewind(tmp);
	char line[2048];
	while (fgets(line, sizeof line, tmp)) {
		char *e = strstr(line, ": error: ");
		if (e) {
			if (!(*nerr)++) {
				util_rstrip(e);
				snprintf(first, flen, "%s", e + 9);
			}
		} else if (strstr(line, ": warning: ")) {
			(*nwarn)++;
		}
	}
	fclose(tmp);
	return rc;
}

/* What the PVC that golden.c read looks like (its decision is golden.c's). */
static void pvc_detail(struct doc *d, const char *name, char *out, size_t n)
{
	char *path = kube_path("persistentvolumeclaims", d->cfg.namespace_, name);
	cJSON *pvc = NULL;
	if (kube_get(&d->x.kube, path, &pvc) == 200) {
		char modes[96] = "";
		const cJSON *m;
		cJSON_ArrayForEach(m, kj_get(pvc, "spec.accessModes"))
		{
			size_t len = strlen(modes);
			if (cJSON_IsString(m))
				snprintf(modes + len, sizeof modes - len, "%s%s", len ? ", " : "",
				         m->valuestring);
		}
		const cJSON *ann = kj_get(pvc, "metadata.annotations");
		const cJSON *img = cJSON_GetObjectItemCaseSensitive(ann, d->cfg.label.image);
		snprintf(out, n, "%s, %s, %s %s",
		         kj_str(pvc, "status.phase") ? kj_str(pvc, "status.phase") : "no phase",
		         modes[0] ? modes : "no access modes", d->cfg.label.image,
		         cJSON_IsString(img) ? img->valuestring : "not set");
	}
	cJSON_Delete(pvc);
	free(path);
}

static void golden_lines(struct doc *d)
{
	static const struct {
		enum golden_reason r;
		enum verdict v;
		const char *fix;
	} fixes[] = {
	    {GOLDEN_NOT_FOUND, DOC_FAIL,
	     "create it (conf/k8s/golden-pvc.yaml: a CDI DataVolume), or correct golden_pvc"},
	    {GOLDEN_FORBIDDEN, DOC_FAIL,
	     "kubectl apply -f conf/k8s/rbac.yaml (the Role labvm-backend: get "
	     "persistentvolumeclaims)"},
	    {GOLDEN_IMPORTING, DOC_WARN,
	     "wait for CDI's import to finish (its storage.pod.phase "
	     "annotation Succeeded)"},
	    {GOLDEN_SINGLE_NODE, DOC_FAIL,
	     "a golden disk must be ReadOnlyMany or ReadWriteMany (VMs land on every node): import "
	     "it into a ReadWriteMany class, or clone it into a ReadOnlyMany one "
	     "(conf/k8s/golden-pvc.yaml says how)"},
	    {GOLDEN_IMAGE_MISMATCH, DOC_FAIL,
	     "once it holds the lesson's image, annotate it: kubectl annotate pvc NAME "
	     "labvm.io/image=IMAGE"},
	    {GOLDEN_DELETING, DOC_FAIL, "it is being deleted: make it again"},
	    {GOLDEN_UNAVAILABLE, DOC_WARN, "wait until it is Bound (or see the API error)"},
	};
	if (!doc_api(d)) {
		doc_line(d, DOC_WARN, NULL,
		         "golden disks not checked: the API server cannot be used (check 1)");
		return;
	}
	for (size_t i = 0; i < d->lessons.n; i++) {
		const struct lesson *les = &d->lessons.v[i];
		for (size_t m = 0; runtime_of(les->runtime)->has_disk && m < lesson_nmachines(les);
		     m++) {
			const struct lesson *l = lesson_machine(les, m);
			if (l->disk != DISK_GOLDEN)
				continue;
			char detail[600], who[128];
			if (l->machine)
				snprintf(who, sizeof who, "lesson %s, machine %s", les->id,
				         l->machine);
			else
				snprintf(who, sizeof who, "lesson %s", les->id);
			enum golden_reason r =
			    golden_check(&d->x.kube, &d->cfg, l, detail, sizeof detail);
			if (r == GOLDEN_OK) {
				doc_line(d, DOC_OK, NULL,
				         "%s: golden PVC %s is used (Bound, shared by the nodes, "
				         "image %s)",
				         who, l->golden_pvc, l->image);
				continue;
			}
			size_t k = 0;
			while (k + 1 < sizeof fixes / sizeof fixes[0] && fixes[k].r != r)
				k++;
			if (strstr(detail, ": checked"))
				pvc_detail(d, l->golden_pvc, detail, sizeof detail);
			doc_line(
			    d, fixes[k].v, fixes[k].fix,
			    "%s: golden PVC %s is not used: %s (%s); every start boots from the "
			    "containerDisk %s instead",
			    who, l->golden_pvc, golden_reason_str(r), detail, l->image);
		}
	}
}

void check_lessons(struct doc *d)
{
	const char *dir = d->cfg.lessons_dir;
	DIR *dh = opendir(dir);
	if (!dh) {
		doc_line(d, DOC_FAIL, "lessons_dir in labvm.conf must name the lessons' folder",
		         "lessons_dir %s cannot be read", dir);
		return;
	}
	char **files = NULL;
	size_t nf = 0;
	struct dirent *e;
	while ((e = readdir(dh))) {
		size_t len = strlen(e->d_name);
		if (len > 5 && strcmp(e->d_name + len - 5, ".json") == 0 && e->d_name[0] != '.') {
			files = xrealloc(files, (nf + 1) * sizeof *files);
			files[nf++] = xasprintf("%s/%s", dir, e->d_name);
		}
	}
	closedir(dh);
	if (nf)
		qsort(files, nf, sizeof *files, by_name);
	int good = 0, warns = 0;
	for (size_t i = 0; i < nf; i++) {
		char first[1024], fix[1400];
		int nerr, nwarn;
		int rc = check_one(files[i], first, sizeof first, &nerr, &nwarn);
		const char *base = strrchr(files[i], '/') + 1;
		warns += nwarn;
		if (rc == 0) {
			good++;
			continue;
		}
		snprintf(
		    fix, sizeof fix,
		    "labvm.fcgi --check %s lists every error (make check-lesson LESSON=...); fix "
		    "the file or take it out of lessons_dir",
		    files[i]);
		if (rc < 0)
			doc_line(d, DOC_WARN, NULL, "%s: not checked (no temporary file)", base);
		else
			doc_line(d, DOC_FAIL, fix, "%s fails labvm.fcgi --check (%d error%s): %s",
			         base, nerr, nerr == 1 ? "" : "s", nerr ? first : "see its output");
	}
	char wtxt[80] = "";
	if (warns)
		snprintf(wtxt, sizeof wtxt, "; %d warning%s (labvm.fcgi --check shows them)", warns,
		         warns == 1 ? "" : "s");
	if (nf && good == (int)nf)
		doc_line(
		    d, DOC_OK, NULL,
		    "%zu lesson files pass labvm.fcgi --check (rules, shell syntax, cloud-config, "
		    "guides)%s",
		    nf, wtxt);
	else if (!nf)
		doc_line(d, DOC_FAIL, "put the lessons (conf/lessons/*.json) into lessons_dir",
		         "no lesson files (*.json) in %s", dir);
	for (size_t i = 0; i < nf; i++)
		free(files[i]);
	free(files);
	if (!d->have_lessons) {
		doc_line(d, DOC_FAIL, "fix the file it names (labvm.fcgi --check shows the same)",
		         "labvm.fcgi cannot load the lessons and will not start: %s",
		         d->lessons_err);
		return;
	}
	golden_lines(d);
}
