/* fuzz_ticket.c - ticket_verify() on any input: a forged, truncated or
 * malformed ticket is refused, never crashes; a ticket that verifies has
 * NUL-terminated fields that fit. Also signs the input's fields back. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ticket.h"

static const unsigned char key[] = "fuzz-key-fuzz-key-fuzz-key-0123456789";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
	char *s = malloc(n + 1);
	if (!s)
		return 0;
	memcpy(s, data, n);
	s[n] = '\0';
	struct ticket t;
	enum ticket_status st = ticket_verify(key, sizeof key - 1, s, 1000, &t);
	if (st == TICKET_OK && (strlen(t.sid) >= sizeof t.sid || strlen(t.user) >= sizeof t.user))
		abort();
	/* the input as a user name: a made ticket always verifies */
	if (n <= 128 && !memchr(data, 0, n)) {
		char *tk = ticket_make(key, sizeof key - 1, "0b7e6c1a-8d3c-4c41-9a55-3f0b7a1c2d3e", s,
		                       "lab-x", 2000);
		if (tk && n && ticket_verify(key, sizeof key - 1, tk, 1000, &t) != TICKET_OK)
			abort();
		free(tk);
	}
	free(s);
	return 0;
}
