/* The warm pool's pure parts: a lesson's "warm" and content hash, a pool
 * VM's labels. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "config.h"
#include "lesson.h"
#include "manifest.h"
#include "unit.h"

#define BASE "{\"id\":\"l1\",\"title\":\"T\",\"runtime\":\"%s\",\"image\":\"img\"%s}"

static int parse(const char *runtime, const char *extra, struct lesson *l, char *err)
{
	char json[512];
	snprintf(json, sizeof json, BASE, runtime, extra);
	return lesson_parse(json, strlen(json), l, err, 256);
}

static int is_hex40(const char *s)
{
	if (strlen(s) != 40)
		return 0;
	for (; *s; s++)
		if (!strchr("0123456789abcdef", *s))
			return 0;
	return 1;
}

int main(void)
{
	struct lesson a, b, c;
	char err[256];

	CHECK(parse("vm", "", &a, err) == 0 && a.warm == 0, "no \"warm\": no pool");
	CHECK(is_hex40(a.hash), "the content hash is 40 hex digits (%s)", a.hash);
	CHECK(parse("vm", "", &b, err) == 0 && strcmp(a.hash, b.hash) == 0,
	      "the same text, the same hash");
	lesson_free(&b);
	CHECK(parse("vm", ",\"setup\":\"echo 2\"", &b, err) == 0 && strcmp(a.hash, b.hash) != 0,
	      "a changed lesson, another hash");
	lesson_free(&b);
	CHECK(parse("vm", ",\"warm\":3", &c, err) == 0 && c.warm == 3, "\"warm\": 3");
	lesson_free(&c);
	CHECK(parse("vm", ",\"warm\":-1", &c, err) < 0 && strstr(err, "warm"),
	      "a negative warm is refused (%s)", err);
	CHECK(parse("vm", ",\"warm\":\"2\"", &c, err) < 0, "warm must be a number");
	CHECK(parse("pod", ",\"warm\":1", &c, err) < 0 && strstr(err, "VM lessons"),
	      "a Pod lesson has no pool (%s)", err);

	struct cfg cfg;
	memset(&cfg, 0, sizeof cfg);
	cfg.environment = "dev";
	cfg.label.lab_session = "labvm.io/lab-session";
	cfg.label.session_id = "labvm.io/session-id";
	cfg.label.environment = "labvm.io/environment";
	cfg.label.lesson = "labvm.io/lesson";
	cfg.label.pool = "labvm.io/pool";
	cfg.label.lesson_hash = "labvm.io/lesson-hash";
	cfg.label.lab_pod = "labvm.io/lab-pod";
	struct lab_names n;
	lab_names_from_session(&n, "0f0e0d0c-0b0a-4908-8706-050403020100");
	cJSON *l = manifest_labels(&cfg, &n, "l1");
	CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(l, "labvm.io/session-id")),
	          "0f0e0d0c-0b0a-4908-8706-050403020100", "a session's VM: its session id");
	CHECK(!cJSON_GetObjectItem(l, "labvm.io/pool"), "a session's VM: no pool marker");
	cJSON_Delete(l);
	n.session_id[0] = '\0';
	snprintf(n.pool_hash, sizeof n.pool_hash, "%s", a.hash);
	l = manifest_labels(&cfg, &n, "l1");
	CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(l, "labvm.io/pool")), "l1",
	          "a pool VM: the pool marker names the lesson");
	CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(l, "labvm.io/lesson-hash")), a.hash,
	          "a pool VM: the lesson's content hash");
	CHECK(!cJSON_GetObjectItem(l, "labvm.io/session-id"), "a pool VM: no session id");
	CHECK_STR(cJSON_GetStringValue(cJSON_GetObjectItem(l, "labvm.io/lab-session")), "true",
	          "a pool VM is a lab VM (counted against the capacity)");
	cJSON_Delete(l);
	lesson_free(&a);

	return unit_done();
}
