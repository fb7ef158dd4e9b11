/* forwarded_user(): the user the front end logged in, from the last element
 * of its Forwarded header; what a client put before it does not count, and
 * anything that is not RFC 7239 grammar is no user at all (fail closed). */
#include <stdio.h>
#include <string.h>

#include "../../console-bridge/forwarded.h"
#include "unit.h"

static const char *user(const char *fwd)
{
	static char out[129];
	return forwarded_user(fwd, out, sizeof out) == 0 ? out : NULL;
}

/* What a front end that appends its own element (lighttpd's proxy.forwarded)
 * would pass on after a client sent `client`. */
static const char *appended(const char *client, const char *own)
{
	static char buf[4096];
	snprintf(buf, sizeof buf, "%s, %s", client, own);
	return user(buf);
}

/* s with bytes outside printable ASCII as \xNN, for a test's name */
static const char *shown(const char *s)
{
	static char buf[2][512];
	static int k;
	char *b = buf[k ^= 1];
	size_t n = 0;
	for (; *s && n + 5 < sizeof buf[0]; s++)
		n += (unsigned char)*s >= 0x20 && (unsigned char)*s < 0x7f
		         ? (size_t)snprintf(b + n, 2, "%c", *s)
		         : (size_t)snprintf(b + n, 5, "\\x%02x", (unsigned char)*s);
	b[n] = '\0';
	return b;
}

#define OWN "for=127.0.0.1;proto=http;remote_user=\"B\""

int main(void)
{
	CHECK_STR(user("for=127.0.0.1;proto=http;remote_user=\"student1\""), "student1",
	          "lighttpd's element");
	CHECK_STR(user("remote_user=\"student1\""), "student1", "Apache's RequestHeader");
	CHECK_STR(user("for=1.2.3.4;remote_user=\"evil\", for=127.0.0.1;remote_user=\"student2\""),
	          "student2", "the last element wins over the client's");
	CHECK(user("remote_user=\"evil\", for=127.0.0.1;proto=http") == NULL,
	      "a client's element alone does not count");
	CHECK_STR(user("for=\"[::1]\";remote_user=\"a\\\"b\\\\c\""), "a\"b\\c", "escapes");
	CHECK_STR(user("for=\"x,y\";remote_user=\"q\""), "q", "a comma inside quotes");
	CHECK_STR(user("Remote_User=plain"), "plain", "a token, any case");
	CHECK_STR(user("for=\"6.6.6.6\", for=127.0.0.1;proto=http;remote_user=\"s1\""), "s1",
	          "lighttpd's element after one it made from X-Forwarded-For");
	CHECK_STR(user("for=\"6.6.6.6\"  ,\tfor=127.0.0.1;remote_user=\"s1\" "), "s1",
	          "optional white space around commas and at the ends");
	CHECK_STR(user("remote_user=\"caf\xc3\xa9\""), "caf\xc3\xa9",
	          "obs-text in a quoted string");
	CHECK(user("remote_user=\"\"") == NULL, "empty is none");
	CHECK(user("remote_user=\"unterminated") == NULL, "unterminated is none");
	CHECK(user("") == NULL && user(";;;") == NULL && user("for=1") == NULL, "no user");
	char big[400];
	memset(big, 'a', sizeof big);
	memcpy(big, "remote_user=", 12);
	big[sizeof big - 1] = '\0';
	CHECK(user(big) == NULL, "longer than the buffer is none");

	/* the client's header with lighttpd's element appended: whatever the
	 * client sent, the answer is lighttpd's user or none (issue #26 item 2) */
	static const char *const crafted[] = {
	    "for=x;remote_user=A;a=\"",     /* the issue's: an unclosed quote */
	    "remote_user=A;a=\"",           /* ... without the for */
	    "for=x;remote_user=\"A\";a=\"", /* ... after a quoted user */
	    "remote_user=\"A",              /* the user's own quote left open */
	    "remote_user=\"A\\",            /* ... ending in a backslash */
	    "remote_user=\"A\\\"",          /* ... its close quote escaped */
	    "for=x;remote_user=A;a=\"\\\"", /* an escaped quote inside the open one */
	    "a=\"x\\",                      /* a backslash escaping lighttpd's comma */
	    "remote_user=A;x",              /* a pair without "=" */
	    "remote_user=A;=x",             /* a pair without a name */
	    "remote_user=A\\",              /* a backslash in a token */
	    "remote_user=A\"",              /* a quote in a token */
	    "remote_user=A;remote_user=",   /* an empty value */
	    "remote_user=\"A\"x",           /* text after a quoted string */
	    "remote_user=A B",              /* white space inside an element */
	    "remote_user = A",              /* ... around "=" */
	    "remote_user=A\r\nX: y",        /* control characters */
	    "remote_user=A\x01",            /* ... */
	    "remote_user=\"A\x01\"",        /* ... inside quotes */
	};
	for (size_t i = 0; i < sizeof crafted / sizeof crafted[0]; i++) {
		const char *u = appended(crafted[i], OWN);
		CHECK(u == NULL || strcmp(u, "B") == 0,
		      "the client's \"%s\" before lighttpd's element: B or none, never A (%s)",
		      shown(crafted[i]), u ? shown(u) : "none");
	}
	CHECK(user("for=x;remote_user=A;a=\", " OWN) == NULL,
	      "the issue's header as lighttpd passed it on: malformed, so no user");

	/* malformed anywhere in the header: no user (the bridge refuses) */
	static const char *const bad[] = {
	    "remote_user=\"A\", for=\"x",          /* unbalanced quotes */
	    "for=\"x\"\", remote_user=\"A\"",      /* a stray quote */
	    "for=\"x\\\", remote_user=\"A\"",      /* an escape eating the close quote */
	    "for=x\\y, remote_user=\"A\"",         /* a backslash outside quotes */
	    "remote_user=\"A\\\x01\"",             /* an escaped control character */
	    "remote_user=\"A\"\"B\"",              /* two quoted strings */
	    "remote_user=\"A\";remote_user=\"B\"", /* remote_user twice */
	    "for=1;for=2;remote_user=\"A\"",       /* a parameter twice */
	    "Remote_User=\"A\";remote_user=\"A\"", /* ... in another case */
	    "remote_user=",                        /* an empty token */
	    "remote_user=\"A\";",                  /* a trailing ";" makes an empty pair: fine? */
	    "remote_user=\"A\", ",                 /* the last element empty */
	    "remote_user=\"A\",",                  /* ... */
	    "remote_user=\"A\" ;proto=http",       /* white space before ";" */
	    "remote_user=\"A\"; proto=http",       /* ... after it */
	    "remote_user=\"A\";pro to=http",       /* in a name */
	    "remote_user=\"A\";pr@to=http",        /* a name that is not a token */
	    "remote_user=\"A\";proto=ht[tp",       /* a value that is not a token */
	    "remote_user=\"A\"\n",                 /* a line feed */
	    "remote_user=\"A\0B\"",                /* (cut at the NUL: unterminated) */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int fine = strcmp(bad[i], "remote_user=\"A\";") == 0; /* an empty pair is grammar */
		const char *u = user(bad[i]);
		if (fine)
			CHECK_STR(u, "A", "\"%s\": an empty pair is RFC 7239 grammar",
			          shown(bad[i]));
		else
			CHECK(u == NULL, "malformed \"%s\": no user (%s)", shown(bad[i]),
			      u ? shown(u) : "none");
	}

	/* oversized: a header longer than FORWARDED_MAX is none, whatever its end */
	static char huge[FORWARDED_MAX + 64];
	size_t n = 0;
	while (n + 8 < FORWARDED_MAX + 8)
		n += (size_t)snprintf(huge + n, sizeof huge - n, "for=1, ");
	snprintf(huge + n, sizeof huge - n, "remote_user=\"A\"");
	CHECK(strlen(huge) > FORWARDED_MAX && user(huge) == NULL,
	      "longer than FORWARDED_MAX (%d): no user", FORWARDED_MAX);
	const char *tail = strstr(huge + strlen(huge) - 200, ", ") + 2;
	CHECK_STR(user(tail), "A", "the same header's last elements alone: A");
	return unit_done();
}
