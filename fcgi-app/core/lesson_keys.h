/* lesson_keys.h - what lesson_parse.c asks of the key tables
 * (lesson_keys.c). */
#ifndef LABVM_LESSON_KEYS_H
#define LABVM_LESSON_KEYS_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "lesson.h"

/* Every key of set's table from object o into dst (a struct lesson,
 * lesson_file or grader_step). each_machine: o is what a lab machine is
 * made of (KEY_EACH_MACHINE keys are required). 0, or -1 with err. */
int lesson_keys_read(enum lesson_key_set set, const cJSON *o, void *dst, int each_machine,
                     char *err, size_t errlen);
/* A key a machine of "machines" may set ("name", or KEY_MACHINE). */
int lesson_key_machine_ok(const char *key);
/* A string key (*dst: a copy, or NULL when absent and not required). */
int lesson_get_str(const cJSON *o, const char *key, int required, char **dst, char *err,
                   size_t errlen);
/* i18n's "ja" object, or NULL. */
const cJSON *lesson_ja_of(const cJSON *i18n);
/* "what: " in front of the message in err (e.g. "files[2]: "). */
void lesson_err_prefix(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A Kubernetes quantity labvm accepts for memory and disks (Mi, Gi, Ti). */
int lesson_quantity_ok(const char *v);

#endif
