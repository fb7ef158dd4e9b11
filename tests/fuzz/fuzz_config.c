/* fuzz_config.c - cfg_load() on any labvm.conf text (written to a file of
 * its own in /dev/shm): a clear error or a configuration. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
	static char path[64];
	if (!path[0])
		snprintf(path, sizeof path, "/dev/shm/labvm-fuzz-conf-%d", (int)getpid());
	FILE *f = fopen(path, "w");
	if (!f)
		return 0;
	fwrite(data, 1, n, f);
	fclose(f);
	struct cfg c;
	char err[1024];
	if (cfg_load(path, &c, 0, err, sizeof err) == 0)
		cfg_free(&c);
	else
		cfg_free(&c);
	return 0;
}
