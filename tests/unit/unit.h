/* unit.h - a tiny TAP harness for labvm's C unit tests (tests/run counts
 * the lines). CHECK(cond, fmt, ...) is one test point. */
#ifndef LABVM_TESTS_UNIT_H
#define LABVM_TESTS_UNIT_H

#include <stdio.h>
#include <string.h>

static int unit_n, unit_failed;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		int unit_ok_ = !!(cond);                                                           \
		unit_n++;                                                                          \
		printf("%s %d - ", unit_ok_ ? "ok" : "not ok", unit_n);                            \
		printf(__VA_ARGS__);                                                               \
		printf("\n");                                                                      \
		if (!unit_ok_) {                                                                   \
			unit_failed++;                                                             \
			printf("#   %s:%d: %s\n", __FILE__, __LINE__, #cond);                      \
		}                                                                                  \
		fflush(stdout);                                                                    \
	} while (0)

#define CHECK_STR(got, want, ...)                                                                  \
	do {                                                                                       \
		const char *g_ = (got), *w_ = (want);                                              \
		CHECK(g_ &&w_ ? strcmp(g_, w_) == 0 : g_ == w_, __VA_ARGS__);                      \
		if (!(g_ && w_ ? strcmp(g_, w_) == 0 : g_ == w_))                                  \
			printf("#   got \"%s\", want \"%s\"\n", g_ ? g_ : "(null)",                \
			       w_ ? w_ : "(null)");                                                \
	} while (0)

static inline int unit_done(void)
{
	printf("1..%d\n", unit_n);
	return unit_failed ? 1 : 0;
}

#endif
