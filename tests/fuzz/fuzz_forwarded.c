/* fuzz_forwarded.c - labvm-console's reading of the front end's Forwarded
 * header (a request header of the WebSocket handshake). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../console-bridge/forwarded.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
	char *s = malloc(n + 1), out[129];
	if (!s)
		return 0;
	memcpy(s, data, n);
	s[n] = '\0';
	if (forwarded_user(s, out, sizeof out) == 0 && (!out[0] || strlen(out) >= sizeof out))
		abort();
	free(s);
	return 0;
}
