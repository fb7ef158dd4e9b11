/* control.c - the browser's control messages (see control.h). */
#include <string.h>

#include <cjson/cJSON.h>

#include "control.h"

int control_resize(const void *p, size_t n, int *cols, int *rows)
{
	if (!p || n == 0 || n > CONTROL_MAX)
		return 0;
	cJSON *o = cJSON_ParseWithLength(p, n);
	const cJSON *type = cJSON_GetObjectItemCaseSensitive(o, "type");
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "cols");
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(o, "rows");
	int ok = cJSON_IsString(type) && strcmp(type->valuestring, "resize") == 0 &&
	         cJSON_IsNumber(c) && cJSON_IsNumber(r) && c->valuedouble >= 1 &&
	         r->valuedouble >= 1 && c->valuedouble <= 1000 && r->valuedouble <= 1000;
	if (ok) {
		*cols = (int)c->valuedouble;
		*rows = (int)r->valuedouble;
	}
	cJSON_Delete(o);
	return ok;
}
