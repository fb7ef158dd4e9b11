/* forwarded_user(): the user the front end logged in, from the last element
 * of its Forwarded header; what a client put before it does not count. */
#include <string.h>

#include "../../console-bridge/forwarded.h"
#include "unit.h"

static const char *user(const char *fwd)
{
	static char out[129];
	return forwarded_user(fwd, out, sizeof out) == 0 ? out : NULL;
}

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
	CHECK(user("remote_user=\"\"") == NULL, "empty is none");
	CHECK(user("remote_user=\"unterminated") == NULL, "unterminated is none");
	CHECK(user("") == NULL && user(";;;") == NULL && user("for=1") == NULL, "no user");
	char big[400];
	memset(big, 'a', sizeof big);
	memcpy(big, "remote_user=", 12);
	big[sizeof big - 1] = '\0';
	CHECK(user(big) == NULL, "longer than the buffer is none");
	return unit_done();
}
