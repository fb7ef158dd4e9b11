/* Console tickets: round trip, forgery, expiry, malformed input. */
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "ticket.h"
#include "unit.h"
#include "util.h"

static const unsigned char key[] = "0123456789abcdef0123456789abcdef-test-key";
static const unsigned char other[] = "ffffffffffffffffffffffffffffffff-other-key";

int main(void)
{
	struct ticket t;
	const char *sid = "0b7e6c1a-8d3c-4c41-9a55-3f0b7a1c2d3e";
	char *tk = ticket_make(key, sizeof key - 1, sid, "student1", "lab-0b7e", 2000000000);

	CHECK(tk && strncmp(tk, "v1.", 3) == 0, "a ticket is made, version prefix v1.");
	CHECK(ticket_verify(key, sizeof key - 1, tk, 1900000000, &t) == TICKET_OK,
	      "it verifies before expiry");
	CHECK_STR(t.sid, sid, "session id round-trips");
	CHECK_STR(t.user, "student1", "user round-trips");
	CHECK_STR(t.vm, "lab-0b7e", "vm round-trips");
	CHECK(t.exp == 2000000000, "expiry round-trips");
	CHECK(strlen(t.nonce) == 32, "a 128-bit nonce is carried");
	CHECK(ticket_verify(key, sizeof key - 1, tk, 2000000001, &t) == TICKET_EXPIRED,
	      "it is refused after expiry");
	CHECK(ticket_verify(other, sizeof other - 1, tk, 1900000000, &t) == TICKET_BAD_SIGNATURE,
	      "another key does not verify it");

	/* change one payload character: the signature no longer matches */
	char *forged = strdup(tk);
	forged[5] = forged[5] == 'A' ? 'B' : 'A';
	CHECK(ticket_verify(key, sizeof key - 1, forged, 1900000000, &t) != TICKET_OK,
	      "a modified payload is refused");
	/* change the signature */
	strcpy(forged, tk);
	size_t n = strlen(forged);
	forged[n - 2] = forged[n - 2] == 'A' ? 'B' : 'A';
	CHECK(ticket_verify(key, sizeof key - 1, forged, 1900000000, &t) == TICKET_BAD_SIGNATURE,
	      "a modified signature is refused");
	free(forged);

	CHECK(t.role == TICKET_OWNER, "a student's ticket is the owner's (no role)");
	/* a teacher's tickets (issue #29): the role round-trips, signed */
	const enum ticket_role roles[] = {TICKET_VIEW, TICKET_CONTROL};
	for (int i = 0; i < 2; i++) {
		char *rt = ticket_make_role(key, sizeof key - 1, sid, "teacher1", "lab-0b7e",
		                            2000000000, roles[i]);
		CHECK(rt && ticket_verify(key, sizeof key - 1, rt, 1900000000, &t) == TICKET_OK,
		      "a %s ticket verifies", ticket_role_str(roles[i]));
		CHECK(t.role == roles[i], "its role is %s", ticket_role_str(roles[i]));
		CHECK_STR(t.user, "teacher1", "its user is the teacher");
		free(rt);
	}
	CHECK(strcmp(ticket_role_str(TICKET_VIEW), "view") == 0 &&
	          strcmp(ticket_role_str(TICKET_CONTROL), "control") == 0,
	      "role names");
	{
		/* an unknown role, signed with the right key, is no ticket */
		const char *pl = "{\"sid\":\"0b7e6c1a-8d3c-4c41-9a55-3f0b7a1c2d3e\",\"u\":\"t\","
		                 "\"vm\":\"lab-0b7e\",\"exp\":2000000000,\"n\":"
		                 "\"0123456789abcdef0123456789abcdef\",\"r\":\"admin\"}";
		char *b = util_b64url(pl, strlen(pl));
		char *sp = xasprintf("v1.%s", b);
		unsigned char mac[32];
		unsigned int ml = 0;
		HMAC(EVP_sha256(), key, (int)(sizeof key - 1), (const unsigned char *)sp,
		     strlen(sp), mac, &ml);
		char *m64 = util_b64url(mac, sizeof mac);
		char *full = xasprintf("%s.%s", sp, m64);
		CHECK(ticket_verify(key, sizeof key - 1, full, 1900000000, &t) == TICKET_MALFORMED,
		      "an unknown role is refused, even signed");
		free(b);
		free(sp);
		free(m64);
		free(full);
	}

	char *tk2 = ticket_make(key, sizeof key - 1, sid, "student1", "lab-0b7e", 2000000000);
	CHECK(tk2 && strcmp(tk, tk2) != 0, "two tickets for the same session differ (nonce)");

	const char *bad[] = {"",       "v1.",      "v1..",    "v2.abc.def",
	                     "v1.abc", "v1.a.b.c", "garbage", "v1.!!!.???"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECK(ticket_verify(key, sizeof key - 1, bad[i], 1900000000, &t) != TICKET_OK,
		      "malformed ticket \"%s\" is refused", bad[i]);
	CHECK(ticket_verify(key, sizeof key - 1, NULL, 1900000000, &t) == TICKET_MALFORMED,
	      "a missing ticket is refused");

	/* a payload without a signature is refused */
	char *p64 = util_b64url("{\"sid\":\"x\"}", 11);
	char *msg = xasprintf("v1.%s", p64);
	CHECK(ticket_verify(key, sizeof key - 1, msg, 1900000000, &t) != TICKET_OK,
	      "an unsigned payload is refused");
	/* a correctly signed payload (HMAC-SHA256 of "v1.<payload>" with the right
	 * key, as ticket_make signs) that lacks fields is still malformed: the
	 * signature passes, the shape check refuses it */
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int maclen = 0;
	CHECK(HMAC(EVP_sha256(), key, (int)(sizeof key - 1), (const unsigned char *)msg,
	           strlen(msg), mac, &maclen) != NULL &&
	          maclen == 32,
	      "HMAC computed");
	char *m64 = util_b64url(mac, maclen);
	char *signed_msg = xasprintf("%s.%s", msg, m64);
	CHECK(ticket_verify(key, sizeof key - 1, signed_msg, 1900000000, &t) == TICKET_MALFORMED,
	      "a correctly signed payload without the fields is malformed");
	/* the same construction with every field verifies: the signing above is
	 * the real one, so the refusal is the missing fields' */
	char *full = xasprintf("{\"sid\":\"%s\",\"u\":\"student1\",\"vm\":\"lab-0b7e\","
	                       "\"exp\":2000000000,\"n\":\"0123456789abcdef0123456789abcdef\"}",
	                       sid);
	char *f64 = util_b64url(full, strlen(full));
	char *fmsg = xasprintf("v1.%s", f64);
	HMAC(EVP_sha256(), key, (int)(sizeof key - 1), (const unsigned char *)fmsg, strlen(fmsg),
	     mac, &maclen);
	char *fm64 = util_b64url(mac, maclen);
	char *fsigned = xasprintf("%s.%s", fmsg, fm64);
	CHECK(ticket_verify(key, sizeof key - 1, fsigned, 1900000000, &t) == TICKET_OK,
	      "the same signing with every field present verifies");
	free(full);
	free(f64);
	free(fmsg);
	free(fm64);
	free(fsigned);
	free(m64);
	free(signed_msg);
	free(p64);
	free(msg);
	free(tk);
	free(tk2);
	return unit_done();
}
