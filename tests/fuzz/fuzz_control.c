/* fuzz_control.c - labvm-console's reading of the browser's control messages
 * (text frames on the console WebSocket: {"type":"resize","cols","rows"}). */
#include <stdint.h>
#include <stdlib.h>

#include "../../console-bridge/control.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
	int cols = -1, rows = -1;
	if (control_resize(data, n, &cols, &rows) &&
	    (cols < 1 || cols > 1000 || rows < 1 || rows > 1000))
		abort();
	if (n > CONTROL_MAX && control_resize(data, n, &cols, &rows))
		abort();
	return 0;
}
