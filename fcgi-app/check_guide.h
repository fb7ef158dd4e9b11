/* check_guide.h - labvm.fcgi --check: a lesson's guide (check_guide.c). */
#ifndef LABVM_FCGI_CHECK_GUIDE_H
#define LABVM_FCGI_CHECK_GUIDE_H

#include "lesson.h"

/* One problem: error (1) or warning (0), the message names the field, the
 * guide's path, the line and what is expected. */
typedef void (*check_guide_report_fn)(void *ctx, int error, const char *msg);

/* Scan guide g (loaded) of lesson l from lessons_dir dir; field is "guide"
 * or "i18n.ja.guide". Returns the number of errors reported. */
int check_guide(const struct lesson *l, const struct lesson_guide *g, const char *field,
                const char *dir, check_guide_report_fn report, void *rctx);

#endif
