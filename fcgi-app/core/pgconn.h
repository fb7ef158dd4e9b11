/* pgconn.h - the one way every labvm binary (labvm.fcgi, labvm-reaper,
 * labvm-console) opens a PostgreSQL connection. */
#ifndef LABVM_CORE_PGCONN_H
#define LABVM_CORE_PGCONN_H

#include <libpq-fe.h>

/* The operator's conninfo plus TCP keepalives (a dead peer or a cut network
 * is noticed in about 25 s, not two hours) and a connect timeout; values
 * written in the conninfo win. NULL only when out of memory; check
 * PQstatus(). */
PGconn *db_connect(const char *conninfo, int connect_timeout_s);

#endif
