/* lesson_parse(): numbers out of range (the fuzzer's float-cast overflow),
 * minutes shorter than the start deadlines, the grade deadline, files in
 * labvm's reserved places however spelt, text that is not UTF-8. */
#include <stdio.h>
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

	/* files[].path: labvm's own places are refused however they are spelt
	 * (issue #26: the ready flag written before setup ran) */
	static const char *const reserved[] = {
	    "/var/lib/labvm/ready",
	    "//var/lib/labvm/ready",
	    "/var/lib/./labvm/ready",
	    "/var//lib/labvm/./ready",
	    "/var/lib/labvm",
	    "/etc/labvm/agent-token",
	    "/opt/labvm/agent.py",
	    "/opt/labvm/setup.sh",
	    "/var/log/labvm-setup.log",
	    "/run/labvm/ready",
	    "/var/run/labvm/ready",
	    "/labvm/setup.sh",
	    "/dev/termination-log",
	    "/var/log/labvm-agent.log",
	    "/etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf"};
	int all = 1;
	for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++) {
		char j2[512];
		snprintf(j2, sizeof j2,
		         "{" BASE ", \"files\": [{\"path\": \"%s\", \"content\": \"x\"}]}",
		         reserved[i]);
		int bad = parse(j2, err, sizeof err) < 0 && strstr(err, "is labvm's own") &&
		          strstr(err, reserved[i]);
		if (!bad)
			printf("# %s: %s\n", reserved[i], err);
		all &= bad;
	}
	CHECK(all, "every spelling of a reserved path is refused, naming it as given");
	static const char *const dotdot[] = {"/var/lib/labvm/../labvm/x", "/var/run/../etc/labvm/t",
	                                     "/root/..", "/.."};
	all = 1;
	for (size_t i = 0; i < sizeof dotdot / sizeof dotdot[0]; i++) {
		char j2[512];
		snprintf(j2, sizeof j2,
		         "{" BASE ", \"files\": [{\"path\": \"%s\", \"content\": \"x\"}]}",
		         dotdot[i]);
		all &= parse(j2, err, sizeof err) < 0 && strstr(err, "no \"..\" component");
	}
	CHECK(all, "a \"..\" component is refused (resolved through the image's symlinks, "
	           "/var/run/.. is /)");
	CHECK(parse("{" BASE ", \"files\": [{\"path\": \"/root/lab/\", \"content\": \"x\"}]}", err,
	            sizeof err) < 0 &&
	          strstr(err, "name a file"),
	      "a directory is refused (%s)", err);
	CHECK(parse("{" BASE ", \"files\": [{\"path\": \"root/a\", \"content\": \"x\"}]}", err,
	            sizeof err) < 0 &&
	          strstr(err, "must be absolute"),
	      "a relative path is refused (%s)", err);
	j = "{" BASE ", \"files\": [{\"path\": \"//root/./lab//a\", \"content\": \"x\"}, "
	    "{\"path\": \"/etc/labvmx/b\", \"content\": \"y\"}]}";
	CHECK(lesson_parse(j, strlen(j), &l, err, sizeof err) == 0 && l.nfiles == 2 &&
	          strcmp(l.files[0].path, "/root/lab/a") == 0 &&
	          strcmp(l.files[1].path, "/etc/labvmx/b") == 0,
	      "a lesson's own path is normalised (//root/./lab//a is /root/lab/a); /etc/labvmx is "
	      "not /etc/labvm");
	lesson_free(&l);
	j = "{" BASE ", \"machines\": [{\"name\": \"cp\", \"files\": [{\"path\": "
	    "\"/var/lib//labvm/ready\", \"content\": \"\"}]}]}";
	CHECK(parse(j, err, sizeof err) < 0 && strstr(err, "machine \"cp\"") &&
	          strstr(err, "labvm's own"),
	      "a machine's files too (%s)", err);
	j = "{\"id\": \"x\", \"title\": \"\xff\xfe\", \"runtime\": \"vm\", \"image\": \"i\"}";
	CHECK(parse(j, err, sizeof err) < 0 && strstr(err, "not valid UTF-8 from byte offset 22"),
	      "a lesson file that is not UTF-8 is refused, naming the byte (%s)", err);
	return unit_done();
}
