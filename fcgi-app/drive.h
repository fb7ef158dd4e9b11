/* drive.h - the session drivers: while an event stream (stream.h) watches a
 * starting session, one of stream_drivers threads moves it on the moment
 * something happens (instead of at the page's next poll): session_advance()
 * as the status GET does, then its runtime's wait (runtime.h: a VMI watch
 * until the phase changes, or the agent's held GET /ready?wait=S until the
 * flag appears), each bounded by the stage's deadline, so a stuck watch or
 * agent costs that driver at most the time left. One process drives a
 * session at a time (LOCK_DRIVE, whichever processes its streams landed
 * on). Nobody watching: the status GET and the reaper move sessions on, as
 * before.
 *
 * Contract: drive_start() before any drive_watch(); drive_watch() and
 * drive_unwatch() pair up per watcher (any thread); drive_stop() ends every
 * driver (a held watch or /ready ends at its next progress check) and
 * joins them. */
#ifndef LABVM_FCGI_DRIVE_H
#define LABVM_FCGI_DRIVE_H

#include "config.h"
#include "lesson.h"

/* Start the drivers (cfg->stream_drivers threads). 0 ok, -1 failure (logged). */
int drive_start(const struct cfg *c, const struct lessons *ls);
void drive_stop(void);

/* A stream began / stopped watching starting session id. */
void drive_watch(const char *session_id);
void drive_unwatch(const char *session_id);

#endif
