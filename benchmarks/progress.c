/* progress.c - the live line on stderr: done/total, elapsed, ETA. On a
 * terminal it is redrawn in place (twice a second); otherwise (a log, make
 * bench piped) one line every 15 s. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

static void hms(double s, char out[32])
{
	if (s < 0 || s != s) {
		snprintf(out, 32, "--:--");
		return;
	}
	long t = (long)(s + 0.5);
	if (t >= 3600)
		snprintf(out, 32, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
	else
		snprintf(out, 32, "%ld:%02ld", t / 60, t % 60);
}

void progress_start(struct progress *p, const char *what, size_t total, int quiet)
{
	memset(p, 0, sizeof *p);
	p->what = what;
	p->total = total;
	p->t0 = util_mono_s();
	p->tty = isatty(STDERR_FILENO);
	p->quiet = quiet;
	p->last_print = p->tty ? 0 : p->t0;
}

void progress_show(struct progress *p, size_t done, const char *extra, int force)
{
	double now = util_mono_s();
	char el[32], eta[32];
	if (p->quiet)
		return;
	if (!force && now - p->last_print < (p->tty ? 0.5 : 15.0))
		return;
	p->last_print = now;
	hms(now - p->t0, el);
	if (done > 0 && done < p->total)
		hms((now - p->t0) / (double)done * (double)(p->total - done), eta);
	else if (done >= p->total)
		snprintf(eta, sizeof eta, "0:00");
	else
		snprintf(eta, sizeof eta, "--:--");
	fprintf(stderr, "%s%s: %zu/%zu done, elapsed %s, ETA %s%s%s%s", p->tty ? "\r\033[K" : "",
	        p->what, done, p->total, el, eta, extra && *extra ? ", " : "", extra ? extra : "",
	        p->tty ? "" : "\n");
	fflush(stderr);
	p->printed = 1;
}

void progress_end(struct progress *p)
{
	if (!p->quiet && p->tty && p->printed) {
		fputc('\n', stderr);
		fflush(stderr);
	}
}
