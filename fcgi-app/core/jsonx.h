/* jsonx.h - terse cJSON building for labvm.fcgi and the reaper, whose OOM
 * policy is to abort (the supervisor restarts the process): every builder
 * either succeeds or aborts, so callers need no per-call checks and never
 * leak half-built trees. Not for labvm-console (which drops one session on
 * OOM instead). */
#ifndef LABVM_CORE_JSONX_H
#define LABVM_CORE_JSONX_H

#include <cjson/cJSON.h>

cJSON *jx_obj(void);
cJSON *jx_arr(void);
cJSON *jx_add_obj(cJSON *o, const char *key);
cJSON *jx_add_arr(cJSON *o, const char *key);
void jx_add_str(cJSON *o, const char *key, const char *v); /* NULL v -> JSON null */
void jx_add_num(cJSON *o, const char *key, double v);
void jx_add_bool(cJSON *o, const char *key, int v);
void jx_add_null(cJSON *o, const char *key);
void jx_put(cJSON *o, const char *key, cJSON *item); /* takes ownership */
void jx_push(cJSON *a, cJSON *item);                 /* takes ownership */
void jx_push_str(cJSON *a, const char *v);
/* Serialize (malloc'd, free with cJSON_free). */
char *jx_print(const cJSON *o);

#endif
