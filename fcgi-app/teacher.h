/* teacher.h - what the teacher's reads (api_teacher.c) and actions
 * (api_teacher_act.c) share. */
#ifndef LABVM_FCGI_TEACHER_H
#define LABVM_FCGI_TEACHER_H

#include "api.h"
#include "jsonx.h"
#include "session.h"

/* The {id} session, when the caller teaches its lesson: SESSION_FOUND (s
 * loaded), else answered (404, 503) with *h set and -1. */
int teacher_session(struct req *r, struct session *s, enum hres *h);
/* One row of teacher_audit (takes detail, which may be NULL). 0 / -1. */
int teacher_audit(struct req *r, const char *action, const struct session *s, cJSON *detail);

#endif
