/* log.c - one write(2) per line, so lines from threads never interleave. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

static const char *log_prog = "labvm";
static enum log_level log_max = LOG_INFO;
static const char *const level_name[] = {"error", "warn", "info", "debug"};
static int log_json;

int log_set_format(const char *format)
{
	if (strcmp(format, "text") == 0)
		log_json = 0;
	else if (strcmp(format, "json") == 0)
		log_json = 1;
	else
		return -1;
	return 0;
}

/* The first session id (a UUID: 8-4-4-4-12 hex) in s, copied to out[37]. */
static int find_uuid(const char *s, char *out)
{
	static const int group[] = {8, 4, 4, 4, 12};
	for (const char *start = s; *s; s++) {
		const char *p = s;
		int ok = s == start || !((s[-1] >= '0' && s[-1] <= '9') ||
		                         (s[-1] >= 'a' && s[-1] <= 'f') || s[-1] == '-');
		for (int g = 0; g < 5 && ok; g++) {
			for (int i = 0; i < group[g]; i++, p++)
				if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) {
					ok = 0;
					break;
				}
			if (ok && g < 4 && *p++ != '-')
				ok = 0;
		}
		if (ok && !((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') || *p == '-')) {
			memcpy(out, s, 36);
			out[36] = '\0';
			return 1;
		}
	}
	return 0;
}

/* JSON string body of s (valid UTF-8) into out (escaped; control characters
 * as \u00XX), whole characters only. */
static size_t json_escape(char *out, size_t cap, const char *s)
{
	size_t o = 0;
	while (*s) {
		unsigned char c = (unsigned char)*s;
		size_t k = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
		size_t w = c == '"' || c == '\\' ? 2 : c < 0x20 ? 6 : k;
		if (o + w + 1 > cap)
			break;
		if (w == 2 && k == 1) {
			out[o++] = '\\';
			out[o++] = (char)c;
		} else if (w == 6) {
			o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
		} else {
			memcpy(out + o, s, k);
			o += k;
		}
		s += k;
	}
	out[o] = '\0';
	return o;
}

static void log_json_line(enum log_level level, const struct tm *tm, long ms, const char *msg)
{
	char line[4608], esc[4096], sid[37];
	int n = snprintf(line, sizeof line,
	                 "{\"ts\":\"%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ\",\"level\":\"%s\","
	                 "\"prog\":\"%s\",\"pid\":%d,\"msg\":\"",
	                 tm->tm_year + 1900, tm->tm_mon + 1, tm->tm_mday, tm->tm_hour, tm->tm_min,
	                 tm->tm_sec, ms, level_name[level], log_prog, (int)getpid());
	if (n < 0)
		return;
	json_escape(esc, sizeof esc, msg);
	if (find_uuid(msg, sid))
		n += snprintf(line + n, sizeof line - (size_t)n, "%s\",\"session_id\":\"%s\"}\n",
		              esc, sid);
	else
		n += snprintf(line + n, sizeof line - (size_t)n, "%s\"}\n", esc);
	if ((size_t)n >= sizeof line)
		return; /* cannot happen: esc is bounded */
	if (write(STDERR_FILENO, line, (size_t)n) < 0) {
		/* nowhere left to report it */
	}
}

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
	/* the message may quote a guest, a Pod or the cluster: formatted whole,
	 * then valid UTF-8 cut on a character (the last line of defence for the
	 * JSON lines, and no half character at the end of a text line) */
	char *raw = NULL;
	va_start(ap, fmt);
	if (vasprintf(&raw, fmt, ap) < 0)
		raw = NULL;
	va_end(ap);
	if (log_json) {
		char msg[2048];
		utf8_clean_cut(msg, raw ? raw : "(out of memory)", sizeof msg - 1);
		free(raw);
		log_json_line(level, &tm, ts.tv_nsec / 1000000, msg);
		return;
	}
	n = snprintf(line, sizeof line,
	             "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s[%d] %s: ", tm.tm_year + 1900,
	             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
	             ts.tv_nsec / 1000000, log_prog, (int)getpid(), level_name[level]);
	if (n < 0) {
		free(raw);
		return;
	}
	m = (int)utf8_clean_cut(line + n, raw ? raw : "(out of memory)",
	                        sizeof line - (size_t)n - 2);
	free(raw);
	n += m;
	/* one line per message: fold embedded newlines */
	for (int i = 0; i < n; i++)
		if (line[i] == '\n' || line[i] == '\r')
			line[i] = ' ';
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)n) < 0) {
		/* nowhere left to report it */
	}
}
