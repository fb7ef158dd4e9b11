/* stop.c - stopping a run: SIGINT/SIGTERM set bench_stop (workers stop
 * starting and end what they started; a second Ctrl-C quits at once), and a
 * sleep that returns early when it is set. */
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

volatile sig_atomic_t bench_stop;

static void on_signal(int sig)
{
	static const char msg[] =
	    "\nlabvm-bench: stopping: ending the sessions it started (Ctrl-C again to quit now)\n";
	if (bench_stop) {
		signal(sig, SIG_DFL);
		raise(sig);
		return;
	}
	bench_stop = 1;
	if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) {
		/* nothing to do */
	}
}

void bench_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

int bench_sleep(double s)
{
	double end = util_mono_s() + s;
	for (;;) {
		if (bench_stop)
			return 1;
		double left = end - util_mono_s();
		if (left <= 0)
			return 0;
		if (left > 0.05)
			left = 0.05;
		struct timespec ts = {0, (long)(left * 1e9)};
		nanosleep(&ts, NULL);
	}
}
