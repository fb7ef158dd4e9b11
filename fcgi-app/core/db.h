/* db.h - PostgreSQL access (libpq): one connection per worker thread,
 * connected lazily, reset after the server went away. Parameters always
 * out of band. The conninfo is a secret: never logged. */
#ifndef LABVM_CORE_DB_H
#define LABVM_CORE_DB_H

#include <libpq-fe.h>

#include "pgconn.h"

struct db {
	PGconn *conn;
	const char *conninfo; /* borrowed from the config */
	int broken;           /* the last failure was a lost connection */
	char msg[512];        /* last error (server message; no secrets) */
	double ms;            /* time spent in queries since db_reset_timer */
	char sqlstate[6];     /* SQLSTATE of the last failure ("" when none) */
	/* set by the owner before the first query (0: the server's default) */
	int idle_tx_timeout_s;      /* idle_in_transaction_session_timeout */
	int idle_session_timeout_s; /* idle_session_timeout (session-level locks) */
	unsigned prepared;          /* bit i: statement "s<i>" is prepared on conn */
};

/* SQLSTATE 55P03: a lock_timeout ran out. */
#define DB_LOCK_NOT_AVAILABLE "55P03"

void db_init(struct db *d, const char *conninfo);
void db_close(struct db *d);
/* Connect if needed (or reset a bad connection). 0 ok, -1 failure (d->msg). */
int db_ensure(struct db *d);
void db_reset_timer(struct db *d);

/* Run a statement with n text parameters (NULL = SQL NULL). Returns the
 * result when it is PGRES_TUPLES_OK or PGRES_COMMAND_OK, else NULL (d->msg,
 * d->broken). The caller PQclear()s the result. */
PGresult *db_exec(struct db *d, const char *sql, int n, const char *const *params);
/* db_exec() of a statement prepared once per connection as "s<slot>"
 * (slot < 32, one fixed sql per slot): no parse and plan per call, for the
 * hot reads. */
PGresult *db_exec_prepared(struct db *d, unsigned slot, const char *sql, int n,
                           const char *const *params);
/* The same, for statements whose result does not matter beyond success. 0 / -1. */
int db_cmd(struct db *d, const char *sql, int n, const char *const *params);

int db_begin(struct db *d);
int db_commit(struct db *d);
void db_rollback(struct db *d);

/* Value of row r, column c, or NULL when SQL NULL (borrowed from res). */
const char *db_val(const PGresult *res, int r, int c);

#endif
