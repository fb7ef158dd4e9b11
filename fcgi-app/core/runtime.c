/* runtime.c - the runtimes' table (runtime.h): one row per runtime. */
#include "runtime.h"

#include <string.h>

const struct runtime_ops *const runtime_all[] = {
    &runtime_vm,
    &runtime_pod,
    NULL,
};

const struct runtime_ops *runtime_of(enum lesson_runtime r)
{
	for (size_t i = 0; runtime_all[i]; i++)
		if (runtime_all[i]->id == r)
			return runtime_all[i];
	/* a lesson's or a session row's runtime is parsed from these names
	 * (lesson_runtime_parse): never another */
	return runtime_all[0];
}

const struct runtime_ops *runtime_named(const char *name)
{
	for (size_t i = 0; name && runtime_all[i]; i++)
		if (strcmp(runtime_all[i]->name, name) == 0)
			return runtime_all[i];
	return NULL;
}
