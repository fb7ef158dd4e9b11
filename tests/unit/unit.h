/* unit.h - a tiny TAP harness for labvm's C unit tests (tests/run counts
 * the lines). CHECK(cond, fmt, ...) is one test point. */
#ifndef LABVM_TESTS_UNIT_H
#define LABVM_TESTS_UNIT_H

#include <stddef.h>
#include <stdint.h>
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

/* UTF-8 as the tests read it: an independent reading of RFC 3629 (decode,
 * then check the value), not labvm's util.c. The
 * length of the character at s, or 0 when it is not a well-formed one. */
static inline size_t unit_utf8_char(const unsigned char *s, size_t n)
{
	static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
	unsigned c = s[0];
	size_t len;
	uint32_t cp;
	if (c == 0)
		return 0;
	if (c < 0x80)
		return 1;
	if ((c & 0xE0) == 0xC0) {
		len = 2;
		cp = c & 0x1F;
	} else if ((c & 0xF0) == 0xE0) {
		len = 3;
		cp = c & 0x0F;
	} else if ((c & 0xF8) == 0xF0) {
		len = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3F);
	}
	if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return len;
}

static inline int unit_utf8_valid(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t k = unit_utf8_char(s + i, n - i);
		if (!k)
			return 0;
		i += k;
	}
	return 1;
}

static inline int unit_done(void)
{
	printf("1..%d\n", unit_n);
	return unit_failed ? 1 : 0;
}

#endif
