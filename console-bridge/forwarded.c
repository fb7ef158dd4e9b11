/* forwarded.c - the user the front end logged in, from its Forwarded header. */
#include "forwarded.h"

#include <string.h>
#include <strings.h>

/* The user the front end authenticated, from the last element of its
 * Forwarded header (RFC 7239; lighttpd's proxy.forwarded "remote_user", or
 * Apache's RequestHeader): remote_user="..." with backslash escapes. The
 * last element is the one our own front end added; anything before it came
 * from the client. 0 ok, -1 none. */
int forwarded_user(const char *fwd, char *out, size_t outlen)
{
	const char *last = fwd, *p;
	int inq = 0;
	for (p = fwd; *p; p++) {
		if (inq && *p == '\\' && p[1])
			p++;
		else if (*p == '"')
			inq = !inq;
		else if (!inq && *p == ',')
			last = p + 1;
	}
	for (p = last; *p;) {
		while (*p == ' ' || *p == '\t' || *p == ';')
			p++;
		if (strncasecmp(p, "remote_user=", 12) != 0) {
			/* skip this pair */
			int q = 0;
			for (; *p && (q || *p != ';'); p++) {
				if (q && *p == '\\' && p[1])
					p++;
				else if (*p == '"')
					q = !q;
			}
			continue;
		}
		p += 12;
		size_t n = 0;
		if (*p == '"') {
			for (p++; *p && *p != '"'; p++) {
				if (*p == '\\' && p[1])
					p++;
				if (n + 1 >= outlen)
					return -1;
				out[n++] = *p;
			}
			if (*p != '"')
				return -1;
		} else {
			for (; *p && *p != ';' && *p != ',' && *p != ' '; p++) {
				if (n + 1 >= outlen)
					return -1;
				out[n++] = *p;
			}
		}
		out[n] = '\0';
		return n ? 0 : -1;
	}
	return -1;
}
