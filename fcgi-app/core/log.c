/* log.c - one write(2) per line, so lines from threads never interleave. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static const char *log_prog = "labvm";
static enum log_level log_max = LOG_INFO;
static const char *const level_name[] = {"error", "warn", "info", "debug"};

void log_init(const char *prog, enum log_level level)
{
	log_prog = prog;
	log_max = level;
}

void log_set_level(enum log_level level)
{
	log_max = level;
}

int log_enabled(enum log_level level)
{
	return level <= log_max;
}

int log_level_parse(const char *s, enum log_level *out)
{
	static const struct {
		const char *name;
		enum log_level level;
	} names[] = {{"err", LOG_ERR},      {"error", LOG_ERR}, {"warn", LOG_WARN},
	             {"warning", LOG_WARN}, {"info", LOG_INFO}, {"debug", LOG_DEBUG}};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (strcasecmp(s, names[i].name) == 0) {
			*out = names[i].level;
			return 0;
		}
	}
	return -1;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	char line[2048];
	struct timespec ts;
	struct tm tm;
	va_list ap;
	int n, m;

	if (level > log_max)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(line, sizeof line,
	             "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s[%d] %s: ", tm.tm_year + 1900,
	             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
	             ts.tv_nsec / 1000000, log_prog, (int)getpid(), level_name[level]);
	if (n < 0)
		return;
	va_start(ap, fmt);
	m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	n += m;
	if ((size_t)n > sizeof line - 2)
		n = sizeof line - 2;
	/* one line per message: fold embedded newlines */
	for (int i = 0; i < n; i++)
		if (line[i] == '\n' || line[i] == '\r')
			line[i] = ' ';
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0) {
		/* nowhere left to report it */
	}
}
