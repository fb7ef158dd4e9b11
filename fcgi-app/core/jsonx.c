#include "jsonx.h"

#include <stdlib.h>
#include <unistd.h>

static void *must(void *p)
{
	if (!p) {
		static const char msg[] = "labvm: out of memory (json)\n";
		if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) {
			/* nothing */
		}
		abort();
	}
	return p;
}

cJSON *jx_obj(void)
{
	return must(cJSON_CreateObject());
}

cJSON *jx_arr(void)
{
	return must(cJSON_CreateArray());
}

cJSON *jx_add_obj(cJSON *o, const char *key)
{
	return must(cJSON_AddObjectToObject(o, key));
}

cJSON *jx_add_arr(cJSON *o, const char *key)
{
	return must(cJSON_AddArrayToObject(o, key));
}

void jx_add_str(cJSON *o, const char *key, const char *v)
{
	if (v)
		must(cJSON_AddStringToObject(o, key, v));
	else
		must(cJSON_AddNullToObject(o, key));
}

void jx_add_num(cJSON *o, const char *key, double v)
{
	must(cJSON_AddNumberToObject(o, key, v));
}

void jx_add_bool(cJSON *o, const char *key, int v)
{
	must(cJSON_AddBoolToObject(o, key, v));
}

void jx_add_null(cJSON *o, const char *key)
{
	must(cJSON_AddNullToObject(o, key));
}

void jx_put(cJSON *o, const char *key, cJSON *item)
{
	if (!cJSON_AddItemToObject(must(o), key, must(item)))
		must(NULL);
}

void jx_push(cJSON *a, cJSON *item)
{
	if (!cJSON_AddItemToArray(must(a), must(item)))
		must(NULL);
}

void jx_push_str(cJSON *a, const char *v)
{
	jx_push(a, must(cJSON_CreateString(v)));
}

char *jx_print(const cJSON *o)
{
	return must(cJSON_PrintUnformatted(o));
}
