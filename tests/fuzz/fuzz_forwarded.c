/* fuzz_forwarded.c - labvm-console's reading of the front end's Forwarded
 * header (a request header of the WebSocket handshake). Besides not
 * crashing: a user found is non-empty and fits; and whatever a client sent,
 * once a front end has appended its own element (lighttpd's proxy.forwarded
 * with a client's header left in place) the answer is that element's user
 * or none, never one the client chose (issue #26 item 2). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../console-bridge/forwarded.h"

static const char OWN[] = ", for=127.0.0.1;proto=http;remote_user=\"front\\\"end\"";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
	char *s = malloc(n + sizeof OWN), out[129];
	if (!s)
		return 0;
	memcpy(s, data, n);
	s[n] = '\0';
	if (forwarded_user(s, out, sizeof out) == 0 && (!out[0] || strlen(out) >= sizeof out))
		abort();
	size_t l = strlen(s); /* up to the first NUL, as a header value */
	memcpy(s + l, OWN, sizeof OWN);
	if (forwarded_user(s, out, sizeof out) == 0 && strcmp(out, "front\"end") != 0)
		abort(); /* the client's text decided the user */
	free(s);
	return 0;
}
