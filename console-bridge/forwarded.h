/* forwarded.h - labvm-console compares a console ticket's user with the user
 * the front end logged in on the WebSocket request, which the front end says
 * in its Forwarded header (RFC 7239): lighttpd's proxy.forwarded
 * "remote_user" appends `remote_user="..."` (backslash escapes) to the
 * element it adds; Apache's `RequestHeader set Forwarded` replaces the
 * header. Both front ends drop a client's own Forwarded header first
 * (conf/lighttpd, conf/apache). No libwebsockets here: unit tests and
 * tests/fuzz use it alone. */
#ifndef LABVM_CONSOLE_FORWARDED_H
#define LABVM_CONSOLE_FORWARDED_H

#include <stddef.h>

/* The longest Forwarded value read at all (bytes); longer is no user. */
#define FORWARDED_MAX 2048

/* The remote_user of the LAST element of a Forwarded header value (the one
 * our front end added; earlier ones came from the client, or from its
 * X-Forwarded-For) into out. The whole value must be RFC 7239 grammar
 * (1#forwarded-element, pairs of token "=" (token / quoted-string), no
 * parameter twice in an element, OWS only around commas); anything else,
 * and an empty or too long user, or none in the last element, is -1: the
 * caller refuses (fail closed). 0 ok. */
int forwarded_user(const char *fwd, char *out, size_t outlen);

#endif
