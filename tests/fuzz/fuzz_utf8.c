/* fuzz_utf8.c - the builders of messages from untrusted text (util.h utf8_*,
 * session_pod_ended) and the lesson path rule, on any bytes and any cut:
 * the output is valid UTF-8 (an independent reading of RFC 3629, from the
 * unit tests), never longer than the limit, the input with each ill-formed
 * byte as U+FFFD, cut only where the next character would not fit; a
 * normalised lesson path is absolute, has no empty, "." or ".." component,
 * and normalises to itself. The first two bytes choose the limit. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../unit/unit.h"
#include "lesson.h"
#include "session.h"
#include "util.h"

static void check_cut(const uint8_t *in, size_t n, size_t max)
{
	char *out = malloc(max + 1);
	if (!out)
		return;
	size_t len = utf8_clean_cutn(out, in, n, max);
	if (len > max || out[len] != '\0' || !unit_utf8_valid((const unsigned char *)out, len))
		abort();
	/* the input with U+FFFD for each ill-formed byte, cut before the first
	 * unit that does not fit */
	size_t i = 0, j = 0;
	while (i < n) {
		size_t k = unit_utf8_char(in + i, n - i), w = k ? k : 3;
		if (j + w > max)
			break;
		if (j + w > len)
			abort(); /* cut early, or inside a character */
		if (k ? memcmp(out + j, in + i, k) != 0 : memcmp(out + j, "\xEF\xBF\xBD", 3) != 0)
			abort();
		i += k ? k : 1;
		j += w;
	}
	if (j != len)
		abort();
	if (utf8_valid(in, n) != unit_utf8_valid(in, n))
		abort();
	free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
	if (n < 2)
		return 0;
	size_t max = ((size_t)data[0] << 8 | data[1]) % 4096;
	const uint8_t *in = data + 2;
	n -= 2;
	check_cut(in, n, max);

	char *s = malloc(n + 1);
	if (!s)
		return 0;
	memcpy(s, in, n);
	s[n] = '\0';

	/* the message builders: a formatted text and a Pod's termination message */
	char buf[4097];
	size_t sz = max + 1;
	size_t l = utf8_snprintf(buf, sz, "setup failed: %s", s);
	if (l >= sz || !unit_utf8_valid((unsigned char *)buf, l))
		abort();
	cJSON *pod = cJSON_CreateObject();
	cJSON *st = cJSON_AddObjectToObject(pod, "status");
	cJSON_AddStringToObject(st, "phase", "Failed");
	cJSON *c = cJSON_CreateObject();
	cJSON_AddItemToArray(cJSON_AddArrayToObject(st, "containerStatuses"), c);
	cJSON_AddStringToObject(c, "name", "lab");
	cJSON *term = cJSON_AddObjectToObject(cJSON_AddObjectToObject(c, "state"),
	                                      data[0] & 1 ? "terminated" : "waiting");
	cJSON_AddStringToObject(term, "message", s);
	cJSON_AddStringToObject(term, "reason", s);
	cJSON_AddStringToObject(st, "message", s);
	if (session_pod_ended(pod, buf, sz) != 1 || strlen(buf) >= sz ||
	    !unit_utf8_valid((unsigned char *)buf, strlen(buf)))
		abort();
	cJSON_Delete(pod);

	/* a lesson's file path */
	char norm[LESSON_PATH_MAX + 1], again[LESSON_PATH_MAX + 1];
	if (lesson_path_normalise(s, norm, sizeof norm) == 0) {
		if (norm[0] != '/' || strstr(norm, "//") || strstr(norm, "/./") ||
		    strstr(norm, "/../") || norm[strlen(norm) - 1] == '/' ||
		    (strlen(norm) >= 2 && strcmp(norm + strlen(norm) - 2, "/.") == 0) ||
		    (strlen(norm) >= 3 && strcmp(norm + strlen(norm) - 3, "/..") == 0) ||
		    lesson_path_normalise(norm, again, sizeof again) != 0 ||
		    strcmp(norm, again) != 0)
			abort();
		const char *r = lesson_path_reserved(norm);
		if (r && strncmp(norm, r, strlen(r)) != 0)
			abort();
	}
	free(s);
	return 0;
}
