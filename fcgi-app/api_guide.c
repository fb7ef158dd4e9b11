/* api_guide.c - GET /api/lessons/{id}/guide?lang=en|ja: the lesson's guide,
 * {"lesson", "lang", "markdown", "folder"}.
 *
 * The guides were read when the lessons were loaded (lesson_guides_load):
 * answering reads neither a file nor the database, so the guide stays
 * readable while PostgreSQL restarts. lang=ja serves the Japanese guide when
 * the lesson has one, else the English one ("lang" says which was served;
 * any other or no lang is English). The answer carries an ETag (a hash of
 * what it holds) and "Cache-Control: private, no-cache": the browser keeps
 * it, asks again each time with If-None-Match, and gets 304 while the guide
 * is unchanged. "folder" is the URL of the guide's folder under /guides/,
 * where the front ends serve its images (null when the guide is not in a
 * folder of its own there: it then has no images). */
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "jsonx.h"

#define GUIDE_CACHE "private, no-cache"

/* The lang= value of the query ("en" when absent); "ja" or "en" only. */
static const char *query_lang(struct req *r)
{
	const char *q = FCGX_GetParam("QUERY_STRING", r->fr->envp);
	for (const char *p = q; p && *p;) {
		const char *end = strchr(p, '&');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (n == 7 && strncmp(p, "lang=ja", 7) == 0)
			return "ja";
		p = end ? end + 1 : p + n;
	}
	return "en";
}

/* If-None-Match names etag (weak comparison, RFC 9110 13.1.2), or is "*".
 * A front end that compresses the answer may have changed the tag it gave
 * the browser to "<tag>-br" or "<tag>-gzip" (lighttpd's mod_deflate): the
 * same guide. */
static int tag_is(const char *p, const char *etag, size_t *used)
{
	static const char *const enc[] = {"", "-br", "-gzip", "-deflate", "-zstd", NULL};
	size_t el = strlen(etag) - 1; /* without the closing quote */
	if (strncmp(p, etag, el) != 0)
		return 0;
	for (const char *const *e = enc; *e; e++) {
		size_t n = strlen(*e);
		if (strncmp(p + el, *e, n) == 0 && p[el + n] == '"') {
			*used = el + n + 1;
			return 1;
		}
	}
	return 0;
}

int api_none_match(const char *inm, const char *etag)
{
	for (const char *p = inm; p && *p;) {
		size_t used = 0;
		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		if (*p == '*')
			return 1;
		if (strncmp(p, "W/", 2) == 0)
			p += 2;
		if (tag_is(p, etag, &used) &&
		    (p[used] == '\0' || p[used] == ',' || p[used] == ' ' || p[used] == '\t'))
			return 1;
		const char *next = strchr(p, ',');
		if (!next)
			break;
		p = next;
	}
	return 0;
}

enum hres api_lesson_guide(struct req *r)
{
	const struct lesson *l = lessons_find(r->x->lessons, r->param);
	if (!l) {
		resp_error(r, E_UNKNOWN_LESSON, "no such lesson");
		return H_DONE;
	}
	const char *served = "en";
	const struct lesson_guide *g = lesson_guide_for(l, query_lang(r), &served);
	if (!g) {
		resp_error(r, E_NO_GUIDE, "lesson %s has no guide", l->id);
		return H_DONE;
	}
	if (api_none_match(FCGX_GetParam("HTTP_IF_NONE_MATCH", r->fr->envp), g->etag)) {
		resp_json_cached(r, 304, NULL, GUIDE_CACHE, g->etag);
		return H_DONE;
	}
	cJSON *o = jx_obj();
	jx_add_str(o, "lesson", l->id);
	jx_add_str(o, "lang", served);
	/* the text is valid UTF-8 without NUL bytes (checked at load) */
	jx_add_str(o, "markdown", g->text);
	jx_add_str(o, "folder", g->folder); /* NULL: null */
	resp_json_cached(r, 200, o, GUIDE_CACHE, g->etag);
	return H_DONE;
}
