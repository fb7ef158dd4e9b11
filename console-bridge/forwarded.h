/* forwarded.h - labvm-console compares a console ticket's user with the user
 * the front end logged in on the WebSocket request, which the front end says
 * in its Forwarded header (RFC 7239): lighttpd's proxy.forwarded
 * "remote_user" appends `remote_user="..."` (backslash escapes) to the
 * element it adds; Apache's `RequestHeader set Forwarded` replaces the
 * header. No libwebsockets here: unit tests and tests/fuzz use it alone. */
#ifndef LABVM_CONSOLE_FORWARDED_H
#define LABVM_CONSOLE_FORWARDED_H

#include <stddef.h>

/* The remote_user of the LAST element of a Forwarded header value (the one
 * our front end added; earlier ones came from the client) into out. 0 ok,
 * -1 none, empty or too long. */
int forwarded_user(const char *fwd, char *out, size_t outlen);

#endif
