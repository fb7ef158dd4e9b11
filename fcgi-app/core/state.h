/* state.h - a session's state (sql/001_sessions.sql's closed set), shared by
 * labvm.fcgi, labvm-reaper and labvm-console: parsed once where a row is read. */
#ifndef LABVM_CORE_STATE_H
#define LABVM_CORE_STATE_H

enum session_state { SESSION_STARTING, SESSION_READY, SESSION_FAILED, SESSION_ENDED };

const char *session_state_str(enum session_state st);
/* The enum of a database value; -1 when it is not one. */
int session_state_parse(const char *v);

#endif
