/* lesson_parse(): numbers out of range (the fuzzer's float-cast overflow),
 * minutes shorter than the start deadlines, the grade deadline. */
#include <string.h>

#include "lesson.h"
#include "unit.h"

static int parse(const char *json, char *err, size_t n)
{
	struct lesson l;
	int rc = lesson_parse(json, strlen(json), &l, err, n);
	if (rc == 0)
		lesson_free(&l);
	return rc;
}

#define BASE "\"id\": \"x\", \"title\": \"t\", \"runtime\": \"vm\", \"image\": \"i\""

int main(void)
{
	char err[512];
	CHECK(parse("{" BASE ", \"minutes\": 1e300}", err, sizeof err) < 0 &&
	          strstr(err, "\"minutes\" must be an integer"),
	      "minutes 1e300 is refused, not cast (%s)", err);
	CHECK(parse("{" BASE ", \"cpus\": -1e300}", err, sizeof err) < 0, "cpus -1e300 refused");
	CHECK(parse("{" BASE ", \"cpus\": 2147483648}", err, sizeof err) < 0, "cpus 2^31 refused");
	CHECK(parse("{" BASE ", \"cpus\": 1.5}", err, sizeof err) < 0, "cpus 1.5 refused");
	CHECK(parse("{" BASE ", \"minutes\": 5}", err, sizeof err) < 0 &&
	          strstr(err, "shorter than the start deadlines") && strstr(err, "450 s"),
	      "5 minutes < 150 + 300 s of deadlines is refused (%s)", err);
	CHECK(parse("{" BASE ", \"minutes\": 1, \"running_timeout_s\": 30, "
	            "\"ready_timeout_s\": 30}",
	            err, sizeof err) == 0,
	      "1 minute with 60 s of deadlines is accepted");
	struct lesson l;
	const char *j = "{" BASE ", \"grade_timeout_s\": 20}";
	CHECK(lesson_parse(j, strlen(j), &l, err, sizeof err) == 0 && l.grade_timeout_s == 20,
	      "grade_timeout_s is read");
	lesson_free(&l);
	CHECK(parse("{" BASE ", \"grade_timeout_s\": 0}", err, sizeof err) < 0,
	      "grade_timeout_s 0 refused");
	return unit_done();
}
