/* log: the text and JSON-lines formats (one line per event, session_id
 * picked out of the message, escaping, valid UTF-8 whatever the message
 * holds); metrics: label escaping. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "log.h"
#include "metrics.h"
#include "unit.h"

/* Run one log call with stderr redirected to a file; return what it wrote. */
static char *capture(const char *msg)
{
	char path[] = "/tmp/labvm-test-log-XXXXXX";
	int fd = mkstemp(path);
	int saved = dup(STDERR_FILENO);
	dup2(fd, STDERR_FILENO);
	log_msg(LOG_INFO, "%s", msg);
	dup2(saved, STDERR_FILENO);
	close(saved);
	static char buf[8192];
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
	buf[n > 0 ? n : 0] = '\0';
	close(fd);
	unlink(path);
	return buf;
}

static char *capturef(const char *prefix, const char *arg, const char *suffix)
{
	char msg[512];
	snprintf(msg, sizeof msg, "%s%s%s", prefix, arg, suffix);
	return capture(msg);
}

int main(void)
{
	log_init("labvm-test", LOG_INFO);
	const char *sid = "0b6f4c1e-9a2d-4c3b-8e7f-112233445566";
	char *out = capturef("user x: session ", sid, " ready");
	CHECK(strstr(out, "labvm-test[") && strstr(out, "] info: user x: session ") &&
	          out[strlen(out) - 1] == '\n' && strchr(out, '\n') == out + strlen(out) - 1,
	      "text: one line with prog, pid, level, message");
	CHECK(log_set_format("yaml") < 0, "unknown format refused");
	CHECK(log_set_format("json") == 0, "json accepted");
	out = capturef("user x: session ", sid, " ready");
	CHECK(out[0] == '{' && strstr(out, "\"level\":\"info\"") &&
	          strstr(out, "\"prog\":\"labvm-test\"") && strstr(out, "\"pid\":"),
	      "json: level, prog, pid");
	char want[128];
	snprintf(want, sizeof want, "\"session_id\":\"%s\"}\n", sid);
	CHECK(strstr(out, want) != NULL, "json: session_id picked out of the message: %s", out);
	CHECK(strstr(out, "\"msg\":\"user x: session 0b6f4c1e") != NULL, "json: msg");
	out = capturef("a \"quoted\" \\ back\nslash ", "\x01", "");
	CHECK(strstr(out, "a \\\"quoted\\\" \\\\ back\\u000aslash \\u0001\"") != NULL &&
	          strchr(out, '\n') == out + strlen(out) - 1,
	      "json: quotes, backslash, newline and control characters escaped, one line: %s", out);
	CHECK(strstr(out, "session_id") == NULL, "json: no session_id when none is named");
	out = capturef("VM lab-", "0b6f4c1e9a2d4c3b8e7f112233445566aa", "");
	CHECK(strstr(out, "session_id") == NULL, "json: a hex VM name is no session id");
	out = capturef("x", "a0b6f4c1e-9a2d-4c3b-8e7f-112233445566", "");
	CHECK(strstr(out, "session_id") == NULL,
	      "json: a UUID inside a longer hex run is not taken");
	/* a guest's text: ill-formed bytes, and a message far over the line's
	 * size in multi-byte characters: valid UTF-8, well-formed JSON, one line */
	static char big[6000];
	big[0] = '\0';
	strcat(big, "setup: \xff\x80\xc0\xaf ");
	while (strlen(big) + 8 < sizeof big)
		strcat(big, "\xE3\x81\x82\xE2\x97\x8F");
	int all = 1;
	for (int shift = 0; shift < 3; shift++) {
		out = capture(big + (shift ? 11 + shift : 0));
		cJSON *j = cJSON_Parse(out);
		all &= unit_utf8_valid((unsigned char *)out, strlen(out)) && cJSON_IsObject(j) &&
		       strchr(out, '\n') == out + strlen(out) - 1;
		cJSON_Delete(j);
	}
	CHECK(all, "json: ill-formed bytes and a long multi-byte message: valid UTF-8, valid JSON, "
	           "one line");
	out = capture("a\"\x01\xE3\x81\x82");
	CHECK(strstr(out, "a\\\"\\u0001\xE3\x81\x82\"") != NULL,
	      "json: escapes beside "
	      "a multi-byte character: %s",
	      out);
	log_set_format("text");
	all = 1;
	for (int shift = 0; shift < 3; shift++) {
		out = capture(big + 12 + shift);
		all &= unit_utf8_valid((unsigned char *)out, strlen(out)) &&
		       strchr(out, '\n') == out + strlen(out) - 1 && strlen(out) < 2048;
	}
	CHECK(all, "text: a long multi-byte message is cut on a character, one line");
	out = capture("bad \xff byte");
	CHECK(strstr(out, "bad \xEF\xBF\xBD byte\n") != NULL, "text: an ill-formed byte is U+FFFD");

	char esc[64];
	metrics_escape(esc, sizeof esc, "a\"b\\c\nd");
	CHECK_STR(esc, "a\\\"b\\\\c\\nd", "metrics label value escaping");
	return unit_done();
}
