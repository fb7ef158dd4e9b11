/* stream.h - the event streams of GET /api/sessions/{id}/events, without a
 * worker per watcher.
 *
 * The handler (api_events.c) checks the request like any session route,
 * writes the stream's headers and the events the client has not seen yet,
 * then hands its FCGX_Request to this process's one stream thread
 * (stream_adopt) and goes back to accepting requests. The stream thread
 * polls every open stream's socket (a closed or aborted client drops it),
 * LISTENs on PostgreSQL channel labvm_session_event (sql/007) on a
 * connection of its own, and on each notification writes the session's
 * new events (session_events_load) to the streams of that session; a
 * comment line keeps idle streams open; when the database comes back after
 * a restart, every stream catches up from its last event id.
 *
 * Nothing here is state that outlives a request: the event ids are database
 * sequence numbers, so any process resumes any stream (Last-Event-ID).
 *
 * A stream that watches a starting session has it driven meanwhile
 * (drive.h): drive_watch() when adopted, drive_unwatch() when it ends. */
#ifndef LABVM_FCGI_STREAM_H
#define LABVM_FCGI_STREAM_H

#include <fcgiapp.h>

#include "config.h"
#include "lesson.h"
#include "session.h"

/* Start the stream thread. 0 ok, -1 failure (logged). */
int stream_start(const struct cfg *c, const struct lessons *ls);
/* End every open stream (the clients reconnect elsewhere) and stop. */
void stream_stop(void);

/* Room for one more stream in this process (stream_max). */
int stream_has_room(void);

/* Per user, across every process and host (table stream_slots, sql/011):
 * each open stream holds one of the user's stream_max_per_user slots, a row
 * this process renews while the stream is open (a process that died lets
 * its rows expire after a minute). Take one: the slot (>= 0), -1 every slot
 * is taken (429 too_many_streams), -2 database trouble. */
int stream_slot_take(struct db *d, const char *user);
/* Give a slot back (the stream was not adopted after all). 0 / -1. */
int stream_slot_release(struct db *d, const char *user, int slot);

/* Take over fr (headers and the first events already written; its stdin
 * read to the end): from now on only the stream thread uses and finishes
 * it, and gives back the user's slot when it ends. `last` is the id of the
 * last event written. through (?until=end, issue #28): the stream goes
 * on past ready until the session ends or fails, and carries
 * `event: warning` {"kind": "idle"|"expiry", "ends_at", "remaining_s"} once
 * per warning, idle_warning_s before an idle end or an expiry; it also ends
 * the session when session_due() says it is due (idle, expired). */
void stream_adopt(FCGX_Request *fr, const char *session_id, long long last, int starting,
                  const char *user, int slot, int through);

/* One event as the stream carries it: "id: SEQ\ndata: JSON\n\n" (malloc'd). */
char *stream_event_text(long long seq, const struct session *s);

#endif
