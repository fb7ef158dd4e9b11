/* text.c - RFC 3339 times (the server's created_at and the like) to epoch
 * seconds and back, a bounded copy and a bounded printf. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "bench.h"

double bench_parse_time(const char *s)
{
	struct tm tm;
	double frac = 0;
	char *end;

	if (!s)
		return NAN;
	memset(&tm, 0, sizeof tm);
	end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!end) {
		memset(&tm, 0, sizeof tm);
		end = strptime(s, "%Y-%m-%d %H:%M:%S", &tm);
	}
	if (!end)
		return NAN;
	if (*end == '.') {
		double scale = 0.1;
		end++;
		while (*end >= '0' && *end <= '9') {
			frac += (*end - '0') * scale;
			scale /= 10;
			end++;
		}
	}
	double off = 0;
	if (*end == 'Z') {
		end++;
	} else if (*end == '+' || *end == '-') {
		int sign = *end == '-' ? -1 : 1;
		int hh = 0, mm = 0;
		if (sscanf(end + 1, "%2d:%2d", &hh, &mm) < 1)
			return NAN;
		off = sign * (hh * 3600 + mm * 60);
		end += 1 + (strlen(end + 1) >= 5 && end[3] == ':' ? 5 : 2);
	} else {
		return NAN;
	}
	if (*end)
		return NAN;
	return (double)timegm(&tm) + frac - off;
}

void bench_fmt_time(double t, char out[32])
{
	long long msec = llround(t * 1000.0);
	time_t s = (time_t)(msec / 1000);
	struct tm tm;
	char tmp[96];
	gmtime_r(&s, &tm);
	snprintf(tmp, sizeof tmp, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
	         tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(msec % 1000));
	snprintf(out, 32, "%.31s", tmp);
}

void bench_copy(char *dst, size_t n, const char *src)
{
	size_t l = src ? strlen(src) : 0;
	if (!n)
		return;
	if (l >= n)
		l = n - 1;
	if (l)
		memcpy(dst, src, l);
	dst[l] = '\0';
}

void bench_fmt_cut(char *out, size_t n, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out, n, fmt, ap);
	va_end(ap);
}
