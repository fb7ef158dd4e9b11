/* server.h - the listening side: the browser protocol's lws callback, the
 * admission checks (URL, ticket, single use, then the database's answer),
 * and the local GET /console-stats. */
#ifndef LABVM_CONSOLE_SERVER_H
#define LABVM_CONSOLE_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <libwebsockets.h>

#include "dbworker.h"

int server_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                    size_t len);
/* The database's answer to a connection's check (a DB_CHECK result). */
void server_check_answer(const struct db_result *r);
/* Check and close-handshake timeouts, the stalled-reader rule; forgets
 * expired ticket nonces. */
void server_tick(int64_t now_ms);
/* SIGTERM: close every browser connection with 1001. */
void server_close_all(void);
void server_free(void);

#endif
