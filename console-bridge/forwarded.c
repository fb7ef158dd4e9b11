/* forwarded.c - the user the front end logged in, from its Forwarded header.
 *
 * RFC 7239 section 4, with the list rule and tokens of RFC 7230:
 *   Forwarded         = 1#forwarded-element     (OWS "," OWS between elements)
 *   forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
 *   forwarded-pair    = token "=" value          (once per element, any case)
 *   value             = token / quoted-string
 * The value is read whole, strictly: a client's unclosed quote, a stray
 * escape or a second remote_user could otherwise move where "the last
 * element" starts (issue #26 item 2), so anything off the grammar is no
 * user. */
#include "forwarded.h"

#include <string.h>
#include <strings.h>

#define MAX_PAIRS 16 /* per element (lighttpd's own has at most 5) */

static int is_tchar(unsigned char c)
{
	if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
		return 1;
	return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int is_qdtext(unsigned char c)
{
	return c == '\t' || c == ' ' || c == 0x21 || (c >= 0x23 && c <= 0x5B) ||
	       (c >= 0x5D && c <= 0x7E) || c >= 0x80;
}

static int is_escapable(unsigned char c) /* HTAB / SP / VCHAR / obs-text */
{
	return c == '\t' || (c >= 0x20 && c <= 0x7E) || c >= 0x80;
}

struct name {
	const char *p;
	size_t n;
};

/* One value at *pp (token or quoted-string); decoded into out when out is
 * not NULL. Length of the decoded value, or -1 when malformed or too long. */
static long value(const char **pp, char *out, size_t outlen)
{
	const char *p = *pp;
	size_t n = 0;
	if (*p != '"') {
		for (; is_tchar((unsigned char)*p); p++, n++)
			if (out && n + 1 < outlen)
				out[n] = *p;
		if (!n)
			return -1;
	} else {
		for (p++; *p != '"'; p++, n++) {
			if (*p == '\\') {
				p++;
				if (!is_escapable((unsigned char)*p))
					return -1; /* incl. a backslash at the end */
			} else if (!is_qdtext((unsigned char)*p)) {
				return -1; /* incl. the end: unterminated */
			}
			if (out && n + 1 < outlen)
				out[n] = *p;
		}
		p++;
	}
	if (out && n + 1 > outlen)
		return -1;
	if (out)
		out[n] = '\0';
	*pp = p;
	return (long)n;
}

int forwarded_user(const char *fwd, char *out, size_t outlen)
{
	const char *p = fwd;
	long user = -1; /* the current element's remote_user (decoded into out) */
	struct name seen[MAX_PAIRS];
	size_t nseen = 0;

	if (!outlen || strnlen(fwd, FORWARDED_MAX + 1) > FORWARDED_MAX)
		return -1;
	out[0] = '\0';
	while (*p == ' ' || *p == '\t')
		p++;
	for (;;) {
		if (*p == ';') {
			p++; /* an empty pair */
			continue;
		}
		if (*p && *p != ',' && *p != ' ' && *p != '\t') {
			/* a pair: token "=" value */
			const char *name = p;
			while (is_tchar((unsigned char)*p))
				p++;
			size_t nl = (size_t)(p - name);
			if (!nl || *p != '=' || nseen == MAX_PAIRS)
				return -1;
			for (size_t i = 0; i < nseen; i++)
				if (seen[i].n == nl && strncasecmp(seen[i].p, name, nl) == 0)
					return -1; /* a parameter twice in one element */
			seen[nseen++] = (struct name){name, nl};
			p++;
			int is_user = nl == 11 && strncasecmp(name, "remote_user", 11) == 0;
			long v = value(&p, is_user ? out : NULL, outlen);
			if (v < 0)
				return -1;
			if (is_user)
				user = v;
			if (*p == ';') {
				p++;
				continue;
			}
		}
		/* the element ends: OWS, then "," or the end */
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p)
			break;
		if (*p != ',')
			return -1;
		p++;
		while (*p == ' ' || *p == '\t')
			p++;
		/* the next element (an empty one, or the end, counts too: the
		 * last element is then empty and has no user) */
		user = -1;
		out[0] = '\0';
		nseen = 0;
		if (!*p)
			break;
	}
	if (user <= 0) {
		out[0] = '\0';
		return -1;
	}
	return 0;
}
