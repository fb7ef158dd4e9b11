/* check_guide.c - labvm.fcgi --check: a lesson's guide (lesson field
 * "guide", i18n.ja.guide), read the way labvm reads it at load, then its
 * Markdown scanned line by line for what the page (web/guide.js) acts on:
 *
 *   - a heading "## Check: STEP" (any level) names a grader step: STEP is a
 *     step's name or its Japanese name; when machines' steps share a name,
 *     "Check: MACHINE: STEP" says whose;
 *   - a fenced block with info string "run" or "run:MACHINE" gets a Run in
 *     terminal button: MACHINE must be one of the lesson's machines;
 *   - links are http, https or relative to the guide's folder (no "..",
 *     no leading "/" or "//"), images relative to the guide's folder only,
 *     and a relative target must exist there.
 *
 * The page enforces the link and image rules itself (the check is for the
 * teacher, not the defence). The scan is a line scanner, not a full
 * CommonMark parser: fenced code and code spans are skipped, links are
 * [text](url), ![alt](src), <scheme:...> autolinks and [label]: url
 * definitions. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "check_guide.h"
#include "util.h"

struct gctx {
	const struct lesson *l;
	const struct lesson_guide *g;
	const char *field; /* "guide" or "i18n.ja.guide" */
	const char *dir;   /* lessons_dir */
	check_guide_report_fn report;
	void *rctx;
	int errors;
	unsigned char *seen; /* per grader step: a heading names it */
};

static void say(struct gctx *c, int error, size_t line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void say(struct gctx *c, int error, size_t line, const char *fmt, ...)
{
	char msg[768], full[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (line)
		snprintf(full, sizeof full, "%s %s, line %zu: %s", c->field, c->g->path, line, msg);
	else
		snprintf(full, sizeof full, "%s %s: %s", c->field, c->g->path, msg);
	c->report(c->rctx, error, full);
	if (error)
		c->errors++;
}

static void machines_list(const struct lesson *l, char *out, size_t n)
{
	out[0] = '\0';
	for (size_t i = 0; i < l->nmachines; i++) {
		if (i)
			strncat(out, ", ", n - strlen(out) - 1);
		strncat(out, l->machines[i].machine, n - strlen(out) - 1);
	}
}

/* ------------------------------------------------------------ steps */

static int step_named(const struct grader_step *st, const char *name)
{
	return strcmp(st->name, name) == 0 || (st->name_ja && strcmp(st->name_ja, name) == 0);
}

static void check_heading(struct gctx *c, size_t line, const char *spec)
{
	const struct lesson *l = c->l;
	int found = -1, count = 0;
	for (size_t i = 0; i < l->nsteps; i++)
		if (step_named(&l->steps[i], spec)) {
			found = (int)i;
			count++;
		}
	/* "MACHINE: STEP" when the name alone is not a step's */
	if (!count && l->nmachines) {
		const char *colon = strstr(spec, ": ");
		if (colon) {
			char m[64];
			snprintf(m, sizeof m, "%.*s", (int)(colon - spec), spec);
			int mi = lesson_machine_index(l, m);
			if (*m && mi >= 0)
				for (size_t i = 0; i < l->nsteps; i++)
					if (l->steps[i].machine == mi &&
					    step_named(&l->steps[i], colon + 2)) {
						found = (int)i;
						count++;
					}
		}
	}
	if (count == 1) {
		c->seen[found] = 1;
		return;
	}
	if (count > 1) {
		say(c, 1, line,
		    "\"Check: %s\" names %d grader steps (machines' steps share the name): write "
		    "\"Check: MACHINE: %s\"",
		    spec, count, spec);
		return;
	}
	char names[1024] = "";
	for (size_t i = 0; i < l->nsteps; i++) {
		if (i)
			strncat(names, "; ", sizeof names - strlen(names) - 1);
		strncat(names, l->steps[i].name, sizeof names - strlen(names) - 1);
	}
	say(c, 1, line, "\"Check: %s\" is not a grader step of this lesson (its steps: %s)", spec,
	    *names ? names : "none");
}

/* ------------------------------------------------------------ links */

/* The URL's scheme in lower case ("" when relative), the way browsers and
 * markdown-it see it: leading blanks and controls skipped, tabs and line
 * breaks dropped, the entities of ':' decoded. */
static void url_scheme(const char *url, char *out, size_t n)
{
	char buf[256];
	size_t k = 0;
	const char *p = url;
	while (*p && (unsigned char)*p <= ' ')
		p++;
	for (; *p && k + 1 < sizeof buf; p++) {
		if (*p == '\t' || *p == '\n' || *p == '\r')
			continue;
		if (*p == '&') {
			static const char *const colon[] = {"&colon;", "&#58;", "&#x3a;", "&#0058;",
			                                    NULL};
			int hit = 0;
			for (const char *const *e = colon; *e; e++)
				if (strncasecmp(p, *e, strlen(*e)) == 0) {
					buf[k++] = ':';
					p += strlen(*e) - 1;
					hit = 1;
					break;
				}
			if (hit)
				continue;
		}
		buf[k++] = (char)tolower((unsigned char)*p);
	}
	buf[k] = '\0';
	out[0] = '\0';
	size_t i = 0;
	if (!isalpha((unsigned char)buf[0]))
		return;
	while (buf[i] && (isalnum((unsigned char)buf[i]) || strchr("+.-", buf[i])))
		i++;
	if (buf[i] == ':')
		snprintf(out, n, "%.*s", (int)i, buf);
}

static void check_target(struct gctx *c, size_t line, const char *url, int image)
{
	char scheme[64];
	const char *what = image ? "image" : "link";
	url_scheme(url, scheme, sizeof scheme);
	if (*scheme) {
		if (image)
			say(c, 1, line,
			    "image \"%.200s\": images come only from the guide's own folder (a "
			    "relative path such as pic.png), not %s: URLs",
			    url, scheme);
		else if (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)
			say(c, 1, line,
			    "link \"%.200s\": links are http, https or relative only (not %s:)",
			    url, scheme);
		return;
	}
	if (url[0] == '#' && !image)
		return; /* this page */
	if (!*url) {
		say(c, 1, line, "%s with an empty target", what);
		return;
	}
	if (url[0] == '/' || url[0] == '\\') {
		say(c, 1, line, "%s \"%.200s\": %s", what, url,
		    url[1] == '/' || url[1] == '\\'
		        ? "a protocol-relative URL (//host) goes to another site: write https://"
		        : "write a path relative to the guide's folder (no leading /)");
		return;
	}
	/* the path without its query or fragment, each segment a plain name */
	char path[1024];
	snprintf(path, sizeof path, "%s", url);
	path[strcspn(path, "?#")] = '\0';
	for (char *seg = path; *seg;) {
		size_t n = strcspn(seg, "/");
		if ((n == 2 && strncmp(seg, "..", 2) == 0) || (n && seg[0] == '.' && n != 1)) {
			say(c, 1, line,
			    "%s \"%.200s\": it must stay inside the guide's folder (no \"..\" or "
			    "hidden "
			    "files)",
			    what, url);
			return;
		}
		seg += n;
		if (*seg == '/')
			seg++;
	}
	if (!c->g->folder) {
		say(c, 1, line,
		    "%s \"%.200s\": relative %ss need the guide in a folder of its own under "
		    "%s (e.g. %s<lesson>/guide.md), which the front ends serve",
		    what, url, what, LESSON_GUIDE_DIR, LESSON_GUIDE_DIR);
		return;
	}
	/* the file, next to the guide */
	const char *slash = strrchr(c->g->path, '/');
	char *file = xasprintf("%s/%.*s/%s", c->dir, (int)(slash - c->g->path), c->g->path, path);
	struct stat st;
	if (stat(file, &st) < 0 || !S_ISREG(st.st_mode))
		say(c, 1, line, "%s \"%.200s\": no such file in the guide's folder (%s)", what, url,
		    file);
	free(file);
}

/* The link destination at p (after "("): *end past it. */
static char *link_dest(const char *p, const char **end)
{
	while (*p == ' ' || *p == '\t')
		p++;
	const char *s = p;
	if (*p == '<') {
		s = ++p;
		while (*p && *p != '>')
			p++;
		*end = *p ? p + 1 : p;
		return xstrndup(s, (size_t)(p - s));
	}
	int depth = 0;
	while (*p && !isspace((unsigned char)*p)) {
		if (*p == '\\' && p[1]) {
			p += 2;
			continue;
		}
		if (*p == '(')
			depth++;
		else if (*p == ')' && depth-- == 0)
			break;
		p++;
	}
	*end = p;
	return xstrndup(s, (size_t)(p - s));
}

/* Links and images of one line (code spans already blanked). */
static void scan_links(struct gctx *c, size_t line, char *t)
{
	/* [label]: url (a link reference definition) */
	const char *d = t;
	int sp = 0;
	while (*d == ' ' && sp < 4) {
		d++;
		sp++;
	}
	if (sp < 4 && *d == '[') {
		const char *close = strstr(d, "]:");
		if (close && !memchr(d + 1, '[', (size_t)(close - d - 1))) {
			const char *e;
			char *u = link_dest(close + 2, &e);
			if (*u)
				check_target(c, line, u, 0);
			free(u);
			return;
		}
	}
	for (char *p = t; *p; p++) {
		if (*p == '\\' && p[1]) {
			p++;
			continue;
		}
		if (p[0] == ']' && p[1] == '(') {
			/* the '[' that opens this text: an image when '!' precedes it */
			int depth = 0, image = 0;
			for (char *q = p - 1; q >= t; q--) {
				if (*q == ']')
					depth++;
				else if (*q == '[' && depth-- == 0) {
					image = q > t && q[-1] == '!';
					break;
				}
			}
			const char *e;
			char *u = link_dest(p + 2, &e);
			check_target(c, line, u, image);
			free(u);
			p = (char *)e - 1 > p ? (char *)e - 1 : p;
		} else if (*p == '<') {
			/* <scheme:...> or <user@host> */
			const char *q = p + 1;
			size_t n = strcspn(q, "> \t<");
			if (q[n] == '>' && n) {
				char *u = xstrndup(q, n);
				char scheme[64];
				url_scheme(u, scheme, sizeof scheme);
				if (*scheme)
					check_target(c, line, u, 0);
				else if (strchr(u, '@'))
					say(c, 1, line,
					    "link <%.200s>: an e-mail address becomes a mailto: "
					    "link; links "
					    "are http, https or relative only",
					    u);
				free(u);
				p += n + 1;
			}
		}
	}
}

/* Blank `code spans` of a line (a run of N backticks to the next run of N). */
static void blank_code_spans(char *t)
{
	for (char *p = t; *p;) {
		if (*p != '`') {
			p++;
			continue;
		}
		size_t n = strspn(p, "`");
		char *q = p + n, *close = NULL;
		while ((q = strchr(q, '`'))) {
			size_t m = strspn(q, "`");
			if (m == n) {
				close = q;
				break;
			}
			q += m;
		}
		if (!close) {
			p += n;
			continue;
		}
		memset(p, ' ', (size_t)(close + n - p));
		p = close + n;
	}
}

/* ------------------------------------------------------------ the scan */

static void check_run_info(struct gctx *c, size_t line, const char *info)
{
	const struct lesson *l = c->l;
	char ms[512];
	if (strcmp(info, "run") == 0) {
		if (l->nmachines)
			say(c, 0, line,
			    "a run block without a machine types into %s (the first machine): "
			    "write ```run:%s to say so",
			    l->machines[0].machine, l->machines[0].machine);
		return;
	}
	const char *m = info + 4;
	if (!l->nmachines) {
		say(c, 1, line, "```run:%s names a machine, but the lesson has none (write ```run)",
		    m);
		return;
	}
	if (!*m || lesson_machine_index(l, m) < 0) {
		machines_list(l, ms, sizeof ms);
		say(c, 1, line, "```run:%s: there is no machine \"%s\" (the machines: %s)", m, m,
		    ms);
	}
}

int check_guide(const struct lesson *l, const struct lesson_guide *g, const char *field,
                const char *dir, check_guide_report_fn report, void *rctx)
{
	struct gctx c = {l, g, field, dir, report, rctx, 0, NULL};
	c.seen = xcalloc(l->nsteps + 1, 1);
	char fence = 0;
	size_t fence_n = 0, fence_line = 0, line = 0, run_lines = 0;
	int in_run = 0;
	char *text = xstrndup(g->text, g->len);
	/* strsep keeps empty lines (strtok would merge them) */
	for (char *rest = text; rest;) {
		char *t = strsep(&rest, "\n");
		line++;
		size_t tl = strlen(t);
		if (tl && t[tl - 1] == '\r')
			t[--tl] = '\0';
		const char *s = t;
		int ind = 0;
		while (*s == ' ' && ind < 4) {
			s++;
			ind++;
		}
		if (ind < 4 && (*s == '`' || *s == '~') && s[1] == *s && s[2] == *s) {
			size_t n = strspn(s, *s == '`' ? "`" : "~");
			const char *after = s + n;
			while (*after == ' ' || *after == '\t')
				after++;
			if (fence && *s == fence && n >= fence_n && !*after) {
				if (in_run && !run_lines)
					say(&c, 0, fence_line, "an empty run block");
				fence = 0;
				in_run = 0;
				continue;
			}
			if (!fence && !(*s == '`' && strchr(after, '`'))) {
				fence = *s;
				fence_n = n;
				fence_line = line;
				char info[128];
				snprintf(info, sizeof info, "%.*s", (int)strcspn(after, " \t"),
				         after);
				in_run = strcmp(info, "run") == 0 || strncmp(info, "run:", 4) == 0;
				run_lines = 0;
				if (in_run)
					check_run_info(&c, line, info);
				continue;
			}
		}
		if (fence) {
			if (*t)
				run_lines++;
			continue;
		}
		/* an ATX heading: "## Check: STEP" */
		if (ind < 4 && *s == '#') {
			size_t n = strspn(s, "#");
			if (n <= 6 && (s[n] == ' ' || s[n] == '\t')) {
				const char *h = s + n;
				while (*h == ' ' || *h == '\t')
					h++;
				if (strncmp(h, "Check:", 6) == 0) {
					char spec[512];
					const char *b = h + 6;
					while (*b == ' ' || *b == '\t')
						b++;
					snprintf(spec, sizeof spec, "%s", b);
					/* closing #s and blanks */
					size_t k = strlen(spec);
					while (k && (spec[k - 1] == ' ' || spec[k - 1] == '\t'))
						spec[--k] = '\0';
					size_t k2 = k;
					while (k2 && spec[k2 - 1] == '#')
						k2--;
					if (k2 < k && (k2 == 0 || spec[k2 - 1] == ' ')) {
						spec[k2] = '\0';
						while (k2 && spec[k2 - 1] == ' ')
							spec[--k2] = '\0';
					}
					check_heading(&c, line, spec);
				}
			}
		}
		char *copy = xstrdup(t);
		blank_code_spans(copy);
		scan_links(&c, line, copy);
		free(copy);
	}
	if (fence)
		say(&c, 1, fence_line, "a code block that is never closed (``` or ~~~)");
	for (size_t i = 0; i < l->nsteps; i++)
		if (!c.seen[i])
			say(&c, 0, 0, "grader step \"%s\"%s%s has no \"## Check: %s\" heading",
			    l->steps[i].name, l->nmachines ? " on " : "",
			    l->nmachines ? l->machines[l->steps[i].machine].machine : "",
			    l->steps[i].name);
	if (!g->len)
		say(&c, 0, 0, "the guide is empty");
	free(text);
	free(c.seen);
	return c.errors;
}
