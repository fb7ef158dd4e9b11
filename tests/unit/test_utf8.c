/* UTF-8 for untrusted text (util.h utf8_*): a property test over random
 * byte strings and cut points (the output is valid UTF-8, never longer than
 * the limit, the input with each ill-formed byte replaced by U+FFFD, and cut
 * only where the next character would not fit), the cases issue #26 names
 * (Japanese text, systemctl's bullet, gcc's quotes straddling byte 1023;
 * 0xff, stray continuation bytes, NUL), and the message builders that use it
 * (session_pod_ended: a Pod's termination message). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "session.h"
#include "unit.h"
#include "util.h"

/* out (len bytes) is in[0..n) with every ill-formed byte as U+FFFD, cut
 * before the first unit that would pass max: "" when it is, else why not. */
static const char *ref_prefix(const unsigned char *in, size_t n, const unsigned char *out,
                              size_t len, size_t max)
{
	size_t i = 0, j = 0;
	while (i < n) {
		size_t k = unit_utf8_char(in + i, n - i);
		size_t w = k ? k : 3;
		if (j + w > max) {
			if (j != len)
				return "cut late";
			return "";
		}
		if (j + w > len)
			return j == len ? "cut early" : "ends inside a character";
		if (k ? memcmp(out + j, in + i, k) != 0 : memcmp(out + j, "\xEF\xBF\xBD", 3) != 0)
			return k ? "a well-formed character changed"
			         : "an ill-formed byte not U+FFFD";
		i += k ? k : 1;
		j += w;
	}
	return j == len ? "" : "more output than input";
}

static uint64_t rng = 0x9E3779B97F4A7C15u;
static uint32_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

/* Random bytes, mostly pieces of text: ASCII, well-formed characters of
 * every length, and the ill-formed bytes that break them. */
static size_t random_text(unsigned char *b, size_t cap)
{
	static const char *const pieces[] = {"a",
	                                     " ",
	                                     "\n",
	                                     "\xE3\x81\x82" /* あ */,
	                                     "\xE2\x97\x8F" /* ● */,
	                                     "\xE2\x80\x98" /* ‘ */,
	                                     "\xE2\x80\x99" /* ’ */,
	                                     "\xC3\xA9" /* é */,
	                                     "\xF0\x9F\x98\x80" /* 😀 */,
	                                     "\xEF\xBF\xBD" /* U+FFFD itself */,
	                                     "\xFF",
	                                     "\x80",
	                                     "\xBF",
	                                     "\xC0\x80" /* overlong NUL */,
	                                     "\xC1\xBF",
	                                     "\xE0\x80\x80",
	                                     "\xED\xA0\x80" /* a surrogate */,
	                                     "\xF4\x90\x80\x80" /* > U+10FFFF */,
	                                     "\xF5\x80\x80\x80",
	                                     "\xE3\x81" /* cut short */,
	                                     "\xF0\x9F\x98",
	                                     "\x00" /* NUL */};
	size_t n = 0, want = rnd() % cap;
	while (n < want) {
		if (rnd() % 8 == 0) {
			b[n++] = (unsigned char)rnd(); /* any byte at all */
			continue;
		}
		const char *p = pieces[rnd() % (sizeof pieces / sizeof pieces[0])];
		size_t k = *p ? strlen(p) : 1;
		if (n + k > cap)
			break;
		memcpy(b + n, p, k);
		n += k;
	}
	return n;
}

int main(void)
{
	unsigned char in[600], out[2000];
	int bad_valid = 0, bad_len = 0, bad_prefix = 0, bad_agree = 0, bad_nul = 0;
	const char *why = "";
	for (int round = 0; round < 20000; round++) {
		size_t n = random_text(in, sizeof in);
		size_t max = rnd() % (3 * n + 8);
		size_t len = utf8_clean_cutn((char *)out, in, n, max);
		bad_len += len > max || out[len] != '\0';
		bad_valid += !unit_utf8_valid(out, len);
		bad_nul += memchr(out, 0, len) != NULL;
		const char *w = ref_prefix(in, n, out, len, max);
		if (*w) {
			bad_prefix++;
			why = w;
		}
		bad_agree += utf8_valid(in, n) != unit_utf8_valid(in, n);
	}
	CHECK(bad_len == 0, "property: never more than the limit (%d failures)", bad_len);
	CHECK(bad_valid == 0, "property: the output is valid UTF-8 (%d failures)", bad_valid);
	CHECK(bad_nul == 0, "property: no NUL byte in the output (%d failures)", bad_nul);
	CHECK(bad_prefix == 0,
	      "property: the input with U+FFFD for each ill-formed byte, cut only where the "
	      "next character would not fit (%d failures: %s)",
	      bad_prefix, why);
	CHECK(bad_agree == 0, "property: utf8_valid() agrees with the reference (%d failures)",
	      bad_agree);

	/* the texts straddling the old cut at byte 1023 */
	const char *texts[] = {"\xE3\x82\xBB\xE3\x83\x83\xE3\x83\x88\xE3\x82\xA2\xE3\x83\x83"
	                       "\xE3\x83\x97\xE5\xA4\xB1\xE6\x95\x97" /* セットアップ失敗 */,
	                       "\xE2\x97\x8F nginx.service - A high performance web server",
	                       "error: \xE2\x80\x98x\xE2\x80\x99 undeclared"};
	for (size_t t = 0; t < 3; t++) {
		struct buf b = {0};
		while (b.len < 1023 - 1)
			buf_puts(&b, "x");
		for (int i = 0; i < 40; i++)
			buf_puts(&b, texts[t]);
		int all = 1;
		for (size_t shift = 0; shift < 4; shift++) {
			char dst[1024];
			size_t len = utf8_clean_cutn(dst, b.p + shift, b.len - shift, 1023);
			all &= len <= 1023 && len >= 1020 &&
			       unit_utf8_valid((unsigned char *)dst, len) &&
			       memcmp(dst, b.p + shift, len) == 0;
		}
		CHECK(all,
		      "text %zu straddling byte 1023: cut before the character, nothing replaced",
		      t);
		buf_free(&b);
	}
	char dst[64];
	CHECK_STR((utf8_clean_cutn(dst,
	                           "a\xff"
	                           "b\x80"
	                           "c",
	                           5, 63),
	           dst),
	          "a\xEF\xBF\xBD"
	          "b\xEF\xBF\xBD"
	          "c",
	          "0xff and a stray continuation byte: U+FFFD each");
	CHECK_STR((utf8_clean_cutn(dst, "a\0b", 3, 63), dst),
	          "a\xEF\xBF\xBD"
	          "b",
	          "a NUL byte (PostgreSQL text cannot hold one) becomes U+FFFD");
	CHECK_STR((utf8_clean_cutn(dst, "\xC0\x80\xED\xA0\x80", 5, 63), dst),
	          "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD",
	          "overlong NUL and a surrogate: every byte replaced");
	CHECK_STR((utf8_clean_cutn(dst, "ab\xE3\x81\x82", 5, 4), dst), "ab",
	          "a character that does not fit whole is left out, not split");
	CHECK_STR((utf8_clean_cutn(dst, "ab\xff", 3, 4), dst), "ab",
	          "so is a U+FFFD that does not fit");
	CHECK_STR((utf8_clean_cut(dst, NULL, 10), dst), "", "NULL is the empty text");
	CHECK(utf8_valid("", 0) && !utf8_valid("\0", 1), "the empty text is valid, a NUL is not");

	/* snprintf / asprintf: formatted whole, then cut (never a split character) */
	char sm[8];
	size_t sl = utf8_snprintf(sm, sizeof sm, "%s%s", "abcde", "\xE3\x81\x82");
	CHECK(sl == 5 && strcmp(sm, "abcde") == 0, "utf8_snprintf cuts before a character (%zu)",
	      sl);
	char *as = utf8_asprintf(1023, "exit %d: %s", 3, "\xff");
	CHECK_STR(as, "exit 3: \xEF\xBF\xBD", "utf8_asprintf replaces ill-formed bytes");
	free(as);
	char *big = utf8_clean_dup("\xff\xff\xff\xff", 4, 7);
	CHECK(strlen(big) == 6, "utf8_clean_dup keeps to its limit (%zu bytes)", strlen(big));
	free(big);

	/* a Pod's termination message: the kubelet's text, cut into the message */
	struct buf msg = {0};
	while (msg.len < 1100)
		buf_puts(&msg, "\xE3\x81\x82\xE2\x97\x8F\xE2\x80\x98");
	cJSON *pod = cJSON_CreateObject();
	cJSON *st = cJSON_AddObjectToObject(pod, "status");
	cJSON_AddStringToObject(st, "phase", "Failed");
	cJSON *cs = cJSON_AddArrayToObject(st, "containerStatuses");
	cJSON *c = cJSON_CreateObject();
	cJSON_AddItemToArray(cs, c);
	cJSON_AddStringToObject(c, "name", "lab");
	cJSON *term = cJSON_AddObjectToObject(cJSON_AddObjectToObject(c, "state"), "terminated");
	cJSON_AddNumberToObject(term, "exitCode", 3);
	cJSON_AddStringToObject(term, "reason", "Error");
	cJSON_AddStringToObject(term, "message", msg.p);
	int all = 1;
	for (size_t cut = 900; cut < 1030; cut++) {
		char why2[1100];
		int ended = session_pod_ended(pod, why2, cut);
		size_t l = strlen(why2);
		all &= ended == 1 && l < cut && unit_utf8_valid((unsigned char *)why2, l);
	}
	CHECK(all, "session_pod_ended: a multi-byte termination message, every cut: valid UTF-8");
	cJSON_ReplaceItemInObject(term, "message", cJSON_CreateString("bad \xff\x80 bytes"));
	char why3[256];
	session_pod_ended(pod, why3, sizeof why3);
	CHECK(strstr(why3, "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes") != NULL,
	      "session_pod_ended: ill-formed bytes of a message replaced: %s", why3);
	cJSON_Delete(pod);
	buf_free(&msg);
	return unit_done();
}
