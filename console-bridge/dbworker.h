/* dbworker.h - the database worker thread (dbworker.c). The lws service thread never
 * touches libpq: it queues requests (db_check, db_recheck) and takes the
 * answers (db_results) when lws_cancel_service() wakes it. */
#ifndef LABVM_CONSOLE_DBWORKER_H
#define LABVM_CONSOLE_DBWORKER_H

#include <stddef.h>
#include <stdint.h>

#include <libwebsockets.h>

enum db_kind {
	DB_CHECK = 1,
	DB_RECHECK,
	DB_ENDED,
	DB_STATUS,
	DB_WATCH_ON,
	DB_WATCH_OFF,
	DB_ACTIVITY
};
enum db_status { DB_OK = 0, DB_NOT_FOUND, DB_VM_MISMATCH, DB_UNAVAILABLE, DB_TICKET_USED };

struct db_result {
	struct db_result *next;
	enum db_kind kind;
	enum db_status status;
	uint64_t conn_id; /* DB_CHECK */
	char sid[37];     /* DB_CHECK, DB_ENDED */
	char user[256];   /* DB_CHECK: owner */
	int state;        /* DB_CHECK: enum session_state of sessions.state, -1 if unknown */
	char runtime[8];  /* DB_CHECK: sessions.runtime ("vm" | "pod") */
	int up;           /* DB_STATUS: database reachable */
};

int db_start(const char *conninfo, const char *environment, const char *bridge_id,
             struct lws_context *ctx);
void db_stop(void);
/* Ask for the owner/state of sid for a connection, and record the ticket's
 * nonce (until exp) in console_tickets_used: a nonce already there (another
 * bridge, or this one before a restart, took the ticket) is DB_TICKET_USED.
 * The answer is a DB_CHECK result. */
int db_check(uint64_t conn_id, const char *sid, const char *vm, const char *nonce, int64_t exp);
/* A teacher's console attached (on, with its user and mode "view" |
 * "control") or went away (off): a row of console_watchers (sql/013),
 * keyed by this bridge (its console_listen) and the connection id. A
 * bridge that (re)connects to the database deletes its own rows first: a
 * crash leaves no watcher behind once it is back. No answer. */
int db_watch(int on, uint64_t conn_id, const char *sid, const char *vm, const char *user,
             const char *mode);
/* Ask which of these sessions are no longer ready: one DB_ENDED result each. */
int db_recheck(char (*sids)[37], size_t n);
/* Record typed input as activity of session sid (sessions.last_activity_at,
 * while it is ready; issue #28). Fire and forget: no result; dropped while
 * the database is down (the next input after it is back records it). */
int db_activity(const char *sid);
/* Take every result so far (a list in arrival order; caller frees each). */
struct db_result *db_results(void);

#endif
