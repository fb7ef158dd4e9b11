/* The waiting line's estimate (core/queue.h queue_kth_free): when the k-th
 * seat frees, each seat freeing at its session's end and then held by the
 * place it went to for the longest (or the typical) hold. */
#include <stdlib.h>
#include <string.h>

#include "queue.h"
#include "unit.h"

static long long kth(const long long *ends, size_t n, long k, long long hold)
{
	long long t[8];
	memcpy(t, ends, n * sizeof *t);
	return queue_kth_free(t, n, k, hold);
}

int main(void)
{
	static const long long three[] = {30, 10, 20}; /* three seats, ending out of order */
	static const long long one[] = {5};
	static const struct {
		const long long *ends;
		size_t n;
		long k;
		long long hold, want;
		const char *what;
	} cases[] = {
	    {three, 3, 1, 100, 10, "the first seat to free is the earliest end"},
	    {three, 3, 2, 100, 20, "the second, the next end"},
	    {three, 3, 3, 100, 30, "the third, the last end"},
	    {three, 3, 4, 100, 110, "the fourth: the first seat again, after its next holder"},
	    {three, 3, 5, 100, 120, "the fifth: the second seat again"},
	    {three, 3, 7, 100, 210, "the seventh: the first seat a third time"},
	    {three, 3, 4, 0, 10, "holds of 0: a freed seat frees again at once"},
	    {one, 1, 1, 50, 5, "one seat: its end"},
	    {one, 1, 3, 50, 105, "one seat, the third place: two holds later"},
	    {three, 3, 0, 100, 0, "k 0: nothing to wait for"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		long long got = kth(cases[i].ends, cases[i].n, cases[i].k, cases[i].hold);
		CHECK(got == cases[i].want, "%s (k=%ld: %lld, want %lld)", cases[i].what,
		      cases[i].k, got, cases[i].want);
	}
	return unit_done();
}
