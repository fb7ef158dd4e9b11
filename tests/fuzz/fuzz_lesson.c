/* fuzz_lesson.c - lesson_parse() on any JSON text: a clear error or a
 * lesson, never a crash, a leak or undefined behaviour. */
#include <stdint.h>
#include <stdlib.h>

#include "lesson.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
	struct lesson l;
	char err[512];
	if (lesson_parse((const char *)data, n, &l, err, sizeof err) == 0)
		lesson_free(&l);
	return 0;
}
