#include "util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

static void oom(void)
{
	static const char msg[] = "labvm: out of memory\n";
	if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0) {
		/* nothing to do */
	}
	abort();
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		oom();
	return p;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		oom();
	return p;
}

void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		oom();
	return p;
}

char *xstrdup(const char *s)
{
	char *p = strdup(s ? s : "");
	if (!p)
		oom();
	return p;
}

char *xstrndup(const char *s, size_t n)
{
	char *p = strndup(s, n);
	if (!p)
		oom();
	return p;
}

char *xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *p;
	va_start(ap, fmt);
	if (vasprintf(&p, fmt, ap) < 0)
		oom();
	va_end(ap);
	return p;
}

static void buf_grow(struct buf *b, size_t extra)
{
	size_t need = b->len + extra + 1;
	if (need <= b->cap)
		return;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap *= 2;
	b->p = xrealloc(b->p, cap);
	b->cap = cap;
}

void buf_append(struct buf *b, const void *data, size_t n)
{
	buf_grow(b, n);
	if (n)
		memcpy(b->p + b->len, data, n);
	b->len += n;
	b->p[b->len] = '\0';
}

void buf_puts(struct buf *b, const char *s)
{
	buf_append(b, s, strlen(s));
}

void buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;
	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	buf_grow(b, (size_t)n);
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->p)
		b->p[0] = '\0';
}

void util_free_secret(char *s)
{
	if (!s)
		return;
	OPENSSL_cleanse(s, strlen(s));
	free(s);
}

void buf_free(struct buf *b)
{
	free(b->p);
	b->p = NULL;
	b->len = b->cap = 0;
}

int util_random(void *out, size_t n)
{
	return RAND_bytes(out, (int)n) == 1 ? 0 : -1;
}

int util_random_hex(char *out, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char raw[64];
	if (n > sizeof raw || util_random(raw, n) < 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex[raw[i] >> 4];
		out[2 * i + 1] = hex[raw[i] & 15];
	}
	out[2 * n] = '\0';
	OPENSSL_cleanse(raw, sizeof raw);
	return 0;
}

int util_uuid4(char out[37])
{
	unsigned char u[16];
	if (util_random(u, sizeof u) < 0)
		return -1;
	u[6] = (unsigned char)((u[6] & 0x0f) | 0x40);
	u[8] = (unsigned char)((u[8] & 0x3f) | 0x80);
	snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
	         u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
	         u[13], u[14], u[15]);
	return 0;
}

int util_uuid_valid(const char *s)
{
	if (!s || strlen(s) != 36)
		return 0;
	for (int i = 0; i < 36; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return 0;
		} else if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i])) {
			return 0;
		}
	}
	return 1;
}

char *util_b64(const void *data, size_t n)
{
	char *out = xmalloc(4 * ((n + 2) / 3) + 1);
	EVP_EncodeBlock((unsigned char *)out, data, (int)n);
	return out;
}

char *util_b64url(const void *data, size_t n)
{
	char *out = util_b64(data, n);
	size_t len = strlen(out);
	while (len && out[len - 1] == '=')
		out[--len] = '\0';
	for (size_t i = 0; i < len; i++) {
		if (out[i] == '+')
			out[i] = '-';
		else if (out[i] == '/')
			out[i] = '_';
	}
	return out;
}

unsigned char *util_b64url_decode(const char *s, size_t *out_len)
{
	size_t n = strlen(s);
	if (n % 4 == 1 || n > (1u << 20))
		return NULL;
	char *tmp = xmalloc(n + 4);
	size_t i;
	for (i = 0; i < n; i++) {
		char c = s[i];
		if (c == '-')
			c = '+';
		else if (c == '_')
			c = '/';
		else if (!isalnum((unsigned char)c)) {
			free(tmp);
			return NULL;
		}
		tmp[i] = c;
	}
	while (i % 4)
		tmp[i++] = '=';
	tmp[i] = '\0';
	unsigned char *out = xmalloc(i / 4 * 3 + 1);
	int m = EVP_DecodeBlock(out, (unsigned char *)tmp, (int)i);
	if (m < 0) {
		free(tmp);
		free(out);
		return NULL;
	}
	/* EVP_DecodeBlock counts padding bytes as output: take them off */
	size_t pad = i - n;
	*out_len = (size_t)m - pad;
	out[*out_len] = '\0';
	free(tmp);
	return out;
}

int util_ct_equal(const void *a, size_t alen, const void *b, size_t blen)
{
	if (alen != blen)
		return 0;
	return CRYPTO_memcmp(a, b, alen) == 0;
}

int64_t util_mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double util_mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int64_t util_epoch_s(void)
{
	return (int64_t)time(NULL);
}

char *util_read_file(const char *path, size_t max, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct buf b = {0};
	char chunk[4096];
	ssize_t n;

	if (fd < 0)
		return NULL;
	while ((n = read(fd, chunk, sizeof chunk)) > 0) {
		if (b.len + (size_t)n > max) {
			close(fd);
			buf_free(&b);
			errno = EFBIG;
			return NULL;
		}
		buf_append(&b, chunk, (size_t)n);
	}
	close(fd);
	if (n < 0) {
		int e = errno;
		buf_free(&b);
		errno = e;
		return NULL;
	}
	if (!b.p)
		buf_append(&b, "", 0);
	if (len)
		*len = b.len;
	return b.p;
}

void util_rstrip(char *s)
{
	size_t n = strlen(s);
	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
}

int util_label_value_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0)
		return 1;
	if (n > 63 || !isalnum((unsigned char)s[0]) || !isalnum((unsigned char)s[n - 1]))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("-_.", s[i]))
			return 0;
	return 1;
}

int util_dns_label_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-'))
			return 0;
	return 1;
}

/* ------------------------------------------------------------------ UTF-8 */

/* The length of the well-formed character at s (n bytes left), or 0 when
 * the bytes there are not one (Unicode 15, table 3-7; NUL counts as not). */
static size_t utf8_char(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	unsigned char lo = 0x80, hi = 0xBF;
	size_t len;
	if (c >= 0x01 && c <= 0x7F)
		return 1;
	if (c >= 0xC2 && c <= 0xDF) {
		len = 2;
	} else if (c >= 0xE0 && c <= 0xEF) {
		len = 3;
		if (c == 0xE0)
			lo = 0xA0; /* no overlong forms */
		else if (c == 0xED)
			hi = 0x9F; /* no surrogates */
	} else if (c >= 0xF0 && c <= 0xF4) {
		len = 4;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F; /* nothing above U+10FFFF */
	} else {
		return 0; /* NUL, a continuation byte, C0, C1, F5..FF */
	}
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if ((s[i] & 0xC0) != 0x80)
			return 0;
	return len;
}

size_t utf8_clean_cutn(char *dst, const void *src, size_t n, size_t max_bytes)
{
	static const char repl[3] = {(char)0xEF, (char)0xBF, (char)0xBD}; /* U+FFFD */
	const unsigned char *s = src;
	size_t i = 0, o = 0;
	while (i < n) {
		size_t k = utf8_char(s + i, n - i);
		if (k) {
			if (o + k > max_bytes)
				break;
			memcpy(dst + o, s + i, k);
			i += k;
		} else {
			if (o + 3 > max_bytes)
				break;
			memcpy(dst + o, repl, 3);
			i++;
			k = 3;
		}
		o += k;
	}
	dst[o] = '\0';
	return o;
}

size_t utf8_clean_cut(char *dst, const char *src, size_t max_bytes)
{
	return utf8_clean_cutn(dst, src ? src : "", src ? strlen(src) : 0, max_bytes);
}

char *utf8_clean_dup(const void *src, size_t n, size_t max_bytes)
{
	/* at most 3 output bytes per input byte */
	size_t cap = n <= max_bytes / 3 ? 3 * n : max_bytes;
	char *out = xmalloc(cap + 1);
	utf8_clean_cutn(out, src, n, cap);
	return out;
}

size_t utf8_valid_prefix(const void *s, size_t n)
{
	const unsigned char *p = s;
	size_t i = 0;
	while (i < n) {
		size_t k = utf8_char(p + i, n - i);
		if (!k)
			break;
		i += k;
	}
	return i;
}

int utf8_valid(const void *s, size_t n)
{
	return utf8_valid_prefix(s, n) == n;
}

static char *utf8_vasprintf(size_t max_bytes, const char *fmt, va_list ap)
{
	char *raw;
	if (vasprintf(&raw, fmt, ap) < 0)
		oom();
	char *out = utf8_clean_dup(raw, strlen(raw), max_bytes);
	free(raw);
	return out;
}

size_t utf8_snprintf(char *dst, size_t size, const char *fmt, ...)
{
	va_list ap;
	if (!size)
		return 0;
	va_start(ap, fmt);
	char *s = utf8_vasprintf(size - 1, fmt, ap);
	va_end(ap);
	size_t n = strlen(s);
	memcpy(dst, s, n + 1);
	free(s);
	return n;
}

char *utf8_asprintf(size_t max_bytes, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = utf8_vasprintf(max_bytes, fmt, ap);
	va_end(ap);
	return s;
}

int util_name_index(const char *const *names, size_t n, const char *v)
{
	for (size_t i = 0; v && i < n; i++)
		if (names[i] && strcmp(names[i], v) == 0)
			return (int)i;
	return -1;
}
