/* ticket.h - console tickets: short-lived, HMAC-SHA256 signed, bound to a
 * user, a session and a VM.
 *
 *   "v1." base64url(payload) "." base64url(HMAC-SHA256(key, "v1." base64url(payload)))
 *   payload = {"sid": session id, "u": user, "vm": VM name, "exp": epoch s, "n": nonce}
 *   plus, for a teacher's ticket (issue #29), "r": "view" | "control": the
 *   ticket's user is the teacher, not the session's owner; the bridge lets
 *   it in for any owner and drops every input byte of a "view" one.
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

/* Whose ticket it is: the session's owner's, or a teacher's (issue #29). */
enum ticket_role { TICKET_OWNER = 0, TICKET_VIEW, TICKET_CONTROL };

struct ticket {
	enum ticket_role role;
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
/* The same with a role (TICKET_OWNER: exactly ticket_make's ticket). */
char *ticket_make_role(const unsigned char *key, size_t keylen, const char *sid, const char *user,
                       const char *vm, int64_t exp, enum ticket_role role);
const char *ticket_role_str(enum ticket_role r);

/* Check signature (constant time), shape and expiry against now. */
enum ticket_status ticket_verify(const unsigned char *key, size_t keylen, const char *token,
                                 int64_t now, struct ticket *out);

const char *ticket_status_str(enum ticket_status st);

#endif
