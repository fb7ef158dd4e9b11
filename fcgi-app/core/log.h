/* log.h - one-line diagnostics to stderr (the web server's or cron's log).
 *
 * Never pass secrets (tokens, tickets, conninfo) to these functions.
 */
#ifndef LABVM_CORE_LOG_H
#define LABVM_CORE_LOG_H

enum log_level { LOG_ERR = 0, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* program name shown in every line, e.g. "labvm.fcgi" (borrowed, static) */
void log_init(const char *prog, enum log_level level);
void log_set_level(enum log_level level);
/* "text" (default): 2026-01-01T00:00:00.000Z prog[pid] level: message
 * "json": one JSON object per line (ts, level, prog, pid, msg, and
 * session_id when the message names a session), for Loki, journald or
 * similar. 0 ok, -1 unknown format. */
int log_set_format(const char *format);
int log_level_parse(const char *s, enum log_level *out);
int log_enabled(enum log_level level);

void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_err(...)   log_msg(LOG_ERR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
