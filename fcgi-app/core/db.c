#include "db.h"

#include <stdio.h>
#include <string.h>

#include "callstats.h"
#include "log.h"
#include "util.h"

void db_init(struct db *d, const char *conninfo)
{
	memset(d, 0, sizeof *d);
	d->conninfo = conninfo;
}

void db_close(struct db *d)
{
	if (d->conn)
		PQfinish(d->conn);
	d->conn = NULL;
}

void db_reset_timer(struct db *d)
{
	d->ms = 0;
}

static void set_msg(struct db *d, const char *what, const char *m)
{
	/* the server's text may quote a value: valid UTF-8, cut on a character */
	utf8_snprintf(d->msg, sizeof d->msg, "%s: %s", what, m && *m ? m : "unknown error");
	util_rstrip(d->msg);
}

PGconn *db_connect(const char *conninfo, int connect_timeout_s)
{
	char ct[16];
	snprintf(ct, sizeof ct, "%d", connect_timeout_s > 0 ? connect_timeout_s : 5);
	/* defaults first: the expanded conninfo (dbname) overrides them */
	const char *const keys[] = {
	    "connect_timeout",  "keepalives",       "keepalives_idle", "keepalives_interval",
	    "keepalives_count", "tcp_user_timeout", "dbname",          NULL};
	const char *const vals[] = {ct, "1", "10", "5", "3", "25000", conninfo, NULL};
	return PQconnectdbParams(keys, vals, 1);
}

static int setup_session(struct db *d)
{
	char sql[256];
	snprintf(sql, sizeof sql,
	         "SET TIME ZONE 'UTC'; SET application_name = 'labvm'; "
	         "SET idle_in_transaction_session_timeout = %d; SET idle_session_timeout = %d",
	         d->idle_tx_timeout_s * 1000, d->idle_session_timeout_s * 1000);
	PGresult *r = PQexec(d->conn, sql);
	int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
	if (!ok)
		set_msg(d, "database setup", PQresultErrorMessage(r));
	PQclear(r);
	return ok ? 0 : -1;
}

int db_ensure(struct db *d)
{
	if (d->conn && PQstatus(d->conn) == CONNECTION_OK && !d->broken)
		return 0;
	if (d->conn)
		PQreset(d->conn);
	else
		d->conn = db_connect(d->conninfo, 5);
	if (!d->conn) {
		set_msg(d, "database", "out of memory");
		return -1;
	}
	if (PQstatus(d->conn) != CONNECTION_OK) {
		set_msg(d, "database unreachable", PQerrorMessage(d->conn));
		d->broken = 1;
		return -1;
	}
	d->broken = 0;
	d->prepared = 0; /* a new server session: nothing is prepared on it */
	return setup_session(d);
}

PGresult *db_exec(struct db *d, const char *sql, int n, const char *const *params)
{
	double t0 = util_mono_s();
	PGresult *r;
	ExecStatusType st;

	d->sqlstate[0] = '\0';
	if (db_ensure(d) < 0)
		return NULL;
	r = PQexecParams(d->conn, sql, n, NULL, params, NULL, NULL, 0);
	d->ms += (util_mono_s() - t0) * 1000.0;
	st = PQresultStatus(r);
	callstats_add(CALL_DB, sql, util_mono_s() - t0,
	              !(r && (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)));
	if (r && (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK))
		return r;
	set_msg(d, "database", r ? PQresultErrorMessage(r) : PQerrorMessage(d->conn));
	const char *ss = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	snprintf(d->sqlstate, sizeof d->sqlstate, "%s", ss ? ss : "");
	if (PQstatus(d->conn) != CONNECTION_OK)
		d->broken = 1;
	log_debug("sql failed: %s", d->msg);
	PQclear(r);
	return NULL;
}

PGresult *db_exec_prepared(struct db *d, unsigned slot, const char *sql, int n,
                           const char *const *params)
{
	char name[16];
	double t0 = util_mono_s();
	PGresult *r;
	ExecStatusType st;

	if (slot >= 32 || db_ensure(d) < 0)
		return slot >= 32 ? db_exec(d, sql, n, params) : NULL;
	snprintf(name, sizeof name, "s%u", slot);
	if (!(d->prepared & (1u << slot))) {
		r = PQprepare(d->conn, name, sql, n, NULL);
		if (PQresultStatus(r) != PGRES_COMMAND_OK) {
			set_msg(d, "database",
			        r ? PQresultErrorMessage(r) : PQerrorMessage(d->conn));
			if (PQstatus(d->conn) != CONNECTION_OK)
				d->broken = 1;
			PQclear(r);
			d->ms += (util_mono_s() - t0) * 1000.0;
			return NULL;
		}
		PQclear(r);
		d->prepared |= 1u << slot;
	}
	r = PQexecPrepared(d->conn, name, n, params, NULL, NULL, 0);
	d->ms += (util_mono_s() - t0) * 1000.0;
	st = PQresultStatus(r);
	if (r && (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK))
		return r;
	set_msg(d, "database", r ? PQresultErrorMessage(r) : PQerrorMessage(d->conn));
	if (PQstatus(d->conn) != CONNECTION_OK)
		d->broken = 1;
	PQclear(r);
	return NULL;
}

int db_cmd(struct db *d, const char *sql, int n, const char *const *params)
{
	PGresult *r = db_exec(d, sql, n, params);
	PQclear(r);
	return r ? 0 : -1;
}

int db_begin(struct db *d)
{
	return db_cmd(d, "BEGIN", 0, NULL);
}

int db_commit(struct db *d)
{
	return db_cmd(d, "COMMIT", 0, NULL);
}

void db_rollback(struct db *d)
{
	if (d->conn && PQstatus(d->conn) == CONNECTION_OK &&
	    PQtransactionStatus(d->conn) != PQTRANS_IDLE) {
		PGresult *r = PQexec(d->conn, "ROLLBACK");
		PQclear(r);
	}
}

const char *db_val(const PGresult *res, int r, int c)
{
	if (PQgetisnull(res, r, c))
		return NULL;
	return PQgetvalue(res, r, c);
}
