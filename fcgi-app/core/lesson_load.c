/* lesson_load.c - reading lessons_dir (lesson.h): every *.json in it,
 * parsed (lesson_parse.c), with its guides read once (size, UTF-8, no
 * symbolic link out of lessons_dir; the folder's URL and the ETag) and no
 * lesson id twice. */
#include "lesson.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/evp.h>

#include "util.h"

#define LESSON_MAX_BYTES (1u << 20)

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
