/* ticket.h - console tickets: short-lived, HMAC-SHA256 signed, bound to a
 * user, a session and a VM.
 *
 *   "v1." base64url(payload) "." base64url(HMAC-SHA256(key, "v1." base64url(payload)))
 *   payload = {"sid": session id, "u": user, "vm": VM name, "exp": epoch s, "n": nonce}
 *
 * labvm.fcgi makes them; labvm-console verifies them locally (no database
 * round trip on its event loop) and enforces single use by the nonce.
 * Tickets are secrets: never log them. */
#ifndef LABVM_CORE_TICKET_H
#define LABVM_CORE_TICKET_H

#include <stddef.h>
#include <stdint.h>

#define TICKET_MAX_LEN 2048
/* The longest user name (REMOTE_USER, bytes) a ticket can carry: even when
 * every byte is JSON-escaped the ticket stays under TICKET_MAX_LEN. The API
 * refuses longer names with a clear error. */
#define TICKET_USER_MAX 128

struct ticket {
	char sid[37];
	char user[256];
	char vm[64];
	int64_t exp;
	char nonce[33];
};

enum ticket_status {
	TICKET_OK = 0,
	TICKET_MALFORMED,
	TICKET_BAD_SIGNATURE,
	TICKET_EXPIRED,
};

/* A new ticket valid until exp (epoch seconds); malloc'd, NULL on failure. */
char *ticket_make(const unsigned char *key, size_t keylen, const char *sid, const char *user,
                  const char *vm, int64_t exp);

/* Check signature (constant time), shape and expiry against now. */
enum ticket_status ticket_verify(const unsigned char *key, size_t keylen, const char *token,
                                 int64_t now, struct ticket *out);

const char *ticket_status_str(enum ticket_status st);

#endif
