/* console-bridge/control.c: the browser's resize message, and everything that
 * is not one (a serial console ignores them all; an exec stream gets a size
 * only from a well-formed message). */
#include <stdio.h>
#include <string.h>

#include "../../console-bridge/control.h"
#include "unit.h"

static int parse(const char *s, int *cols, int *rows)
{
	*cols = *rows = -1;
	return control_resize(s, strlen(s), cols, rows);
}

int main(void)
{
	int c, r;
	CHECK(parse("{\"type\":\"resize\",\"cols\":120,\"rows\":40}", &c, &r) && c == 120 &&
	          r == 40,
	      "a resize message gives its size");
	CHECK(parse("{\"rows\":1,\"cols\":1000,\"type\":\"resize\"}", &c, &r) && c == 1000 &&
	          r == 1,
	      "any key order; the bounds 1 and 1000 are allowed");
	CHECK(parse("{\"type\":\"resize\",\"cols\":80.9,\"rows\":24}", &c, &r) && c == 80 &&
	          r == 24,
	      "a fractional size is cut to whole cells");
	static const char *const bad[] = {
	    "",
	    "{",
	    "null",
	    "[]",
	    "{\"type\":\"resize\"}",
	    "{\"type\":\"resize\",\"cols\":0,\"rows\":24}",
	    "{\"type\":\"resize\",\"cols\":80,\"rows\":1001}",
	    "{\"type\":\"resize\",\"cols\":-5,\"rows\":24}",
	    "{\"type\":\"resize\",\"cols\":\"80\",\"rows\":24}",
	    "{\"type\":\"RESIZE\",\"cols\":80,\"rows\":24}",
	    "{\"type\":\"ping\",\"cols\":80,\"rows\":24}",
	    "{\"type\":1,\"cols\":80,\"rows\":24}",
	    "{\"type\":\"resize\",\"cols\":1e309,\"rows\":24}",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int ok = parse(bad[i], &c, &r);
		CHECK(!ok && c == -1 && r == -1, "refused, size untouched: %s", bad[i]);
	}
	char big[CONTROL_MAX + 64];
	int n =
	    snprintf(big, sizeof big, "{\"type\":\"resize\",\"cols\":80,\"rows\":24,\"pad\":\"");
	memset(big + n, 'x', sizeof big - (size_t)n - 3);
	memcpy(big + sizeof big - 3, "\"}", 3);
	CHECK(!parse(big, &c, &r), "a message longer than CONTROL_MAX is not one");
	CHECK(!control_resize(NULL, 0, &c, &r), "no bytes");
	return unit_done();
}
