/* canary.h - the parts of check 6 (canary.c): the built-in lesson, the
 * sweep of an earlier run's canaries, the fence probe and its verdicts
 * (canary_lesson.c), the console through labvm-console (canary_console.c). */
#ifndef LABVM_DOCTOR_CANARY_H
#define LABVM_DOCTOR_CANARY_H

#include <cjson/cJSON.h>

#include "doctor.h"

/* The canary lesson, as a lesson file would give it (lesson_parse): the
 * image, memory and deadlines of the first containerDisk VM lesson of
 * lessons_dir (an image this cluster pulls), else Debian's containerdisk.
 * Its grader step checks what its setup wrote; its lab file is the probe.
 * 0, or -1 with err. */
int canary_lesson(const struct doc *d, struct lessons *out, char *err, size_t errlen);

/* End the sessions an earlier run of the doctor left active in its
 * environment (killed mid-way), so that their seats come back. */
void canary_sweep(struct doc *d, struct labctx *x);

/* The probe's command line in a canary: the other canary's agent at
 * peer_ip:agent_port, the API server (kube_api's host and port),
 * each port of the backend's Pod, and the internet address (--internet).
 * malloc'd. */
char *canary_probe_cmd(struct doc *d, struct labctx *x, const struct cfg *cc, const char *peer_ip);

/* The probe's answer (the agent's /run result) as doc lines: canary n's
 * fence, the other canary being m. 0 the fence held (the internet may be a
 * warn), -1 a FAIL line was printed. */
int canary_fence(struct doc *d, int n, int m, const cJSON *res);

/* Open canary n's console through labvm-console with a ticket for its
 * session, and have its shell compute a sum. 0 ok; -1 (a FAIL line said why). */
int canary_console(struct doc *d, const struct cfg *cc, const char *sid, const char *user,
                   const char *vm, int n);

#endif
