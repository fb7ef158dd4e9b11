/* util: base64url, constant-time compare, uuid, names. */
#include <stdlib.h>
#include <string.h>

#include "unit.h"
#include "util.h"

int main(void)
{
	const char *samples[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar", "\xff\xfe\x00"};
	for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
		size_t n = i == 7 ? 3 : strlen(samples[i]);
		char *e = util_b64url(samples[i], n);
		size_t m = 99;
		unsigned char *d = util_b64url_decode(e, &m);
		CHECK(d && m == n && memcmp(d, samples[i], n) == 0 && !strpbrk(e, "+/="),
		      "base64url round trip of %zu bytes (\"%s\")", n, e);
		free(e);
		free(d);
	}
	size_t m;
	CHECK(util_b64url_decode("a", &m) == NULL, "base64url: impossible length refused");
	CHECK(util_b64url_decode("ab$d", &m) == NULL, "base64url: bad character refused");
	char *b = util_b64("hello", 5);
	CHECK_STR(b, "aGVsbG8=", "standard base64 keeps padding");
	free(b);

	CHECK(util_ct_equal("abc", 3, "abc", 3), "ct_equal: equal");
	CHECK(!util_ct_equal("abc", 3, "abd", 3), "ct_equal: differ");
	CHECK(!util_ct_equal("abc", 3, "abcd", 4), "ct_equal: lengths differ");

	char u1[37], u2[37];
	CHECK(util_uuid4(u1) == 0 && util_uuid4(u2) == 0 && strcmp(u1, u2) != 0, "uuids differ");
	CHECK(util_uuid_valid(u1) && u1[14] == '4', "a v4 uuid is valid");
	CHECK(!util_uuid_valid("current") &&
	          !util_uuid_valid("0b7e6c1a-8d3c-4c41-9a55-3f0b7a1c2d3") &&
	          !util_uuid_valid("0B7E6C1A-8D3C-4C41-9A55-3F0B7A1C2D3E") &&
	          !util_uuid_valid("0b7e6c1a-8d3c-4c41-9a55-3f0b7a1c2d3e' OR 1=1"),
	      "non-uuids are refused");

	CHECK(util_label_value_ok("linux-basics") && util_label_value_ok("") &&
	          util_label_value_ok("a.b_c-1"),
	      "label values accepted");
	CHECK(!util_label_value_ok("-x") && !util_label_value_ok("a/b") &&
	          !util_label_value_ok(
	              "0123456789012345678901234567890123456789012345678901234567890123"),
	      "bad label values refused");
	CHECK(util_dns_label_ok("lab-0b7e") && !util_dns_label_ok("Lab") &&
	          !util_dns_label_ok("a_b"),
	      "dns labels");

	char hex[65];
	CHECK(util_random_hex(hex, 32) == 0 && strlen(hex) == 64, "random hex token of 64 chars");
	struct buf bf = {0};
	for (int i = 0; i < 1000; i++)
		buf_printf(&bf, "%d,", i);
	CHECK(bf.len == strlen(bf.p) && strncmp(bf.p, "0,1,2,", 6) == 0, "buf grows");
	buf_free(&bf);
	return unit_done();
}
