/* util.h - small shared helpers: growable buffers, randomness, base64,
 * constant-time comparison, clocks, files. */
#ifndef LABVM_CORE_UTIL_H
#define LABVM_CORE_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Allocation that aborts on failure (labvm.fcgi and the reaper: a process
 * without memory is restarted by its supervisor). Never return NULL. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A growable byte buffer, always NUL-terminated. */
struct buf {
	char *p;
	size_t len, cap;
};
void buf_append(struct buf *b, const void *data, size_t n);
void buf_puts(struct buf *b, const char *s);
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_reset(struct buf *b);
void buf_free(struct buf *b);

/* Cryptographic randomness (OpenSSL RAND_bytes); 0 ok, -1 failure. */
int util_random(void *out, size_t n);
/* 2*n lowercase hex characters of randomness into out (size >= 2n+1). */
int util_random_hex(char *out, size_t n);
/* A random UUID v4, "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx" (out: 37 bytes). */
int util_uuid4(char out[37]);
int util_uuid_valid(const char *s);

/* base64 (standard, padded) of n bytes: malloc'd string. */
char *util_b64(const void *data, size_t n);
/* base64url without padding: malloc'd string. */
char *util_b64url(const void *data, size_t n);
/* decode base64url (no padding) into a malloc'd buffer; NULL on bad input. */
unsigned char *util_b64url_decode(const char *s, size_t *out_len);

/* Constant-time equality of two byte strings (length leaks, contents do not). */
int util_ct_equal(const void *a, size_t alen, const void *b, size_t blen);
/* Wipe a NUL-terminated secret (OPENSSL_cleanse: not optimised away) and free it. */
void util_free_secret(char *s);

/* Milliseconds: monotonic (for durations) and wall clock (epoch). */
int64_t util_mono_ms(void);
double util_mono_s(void);
int64_t util_epoch_s(void);

/* Read a whole file (at most max bytes, else error); malloc'd and NUL-terminated.
 * Returns NULL and sets errno on failure. */
char *util_read_file(const char *path, size_t max, size_t *len);
/* The index of v in a table of n names (the closed sets' enums: states,
 * stages, verdicts; NULL entries skipped), -1 when it is none of them. */
int util_name_index(const char *const *names, size_t n, const char *v);
/* Strip trailing whitespace in place. */
void util_rstrip(char *s);

/* UTF-8 for text that comes from guests, Pods, the cluster or students and
 * goes to the database, a log line, an event or a JSON answer: valid UTF-8
 * (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF; the
 * rules PostgreSQL applies), never a NUL byte (text cannot hold one).
 *
 * utf8_clean_cutn() copies n bytes of src into dst: every well-formed
 * character as it is, every other byte (a stray continuation byte, a
 * truncated or overlong sequence, 0xC0/0xC1/0xF5..0xFF, NUL) as U+FFFD, and
 * stops before the first character that would take the output past max_bytes
 * (a character is never split). dst has room for max_bytes + 1 (the NUL is
 * added); it must not overlap src. Returns the output's length. */
size_t utf8_clean_cutn(char *dst, const void *src, size_t n, size_t max_bytes);
/* The same for a NUL-terminated src (NULL is ""). */
size_t utf8_clean_cut(char *dst, const char *src, size_t max_bytes);
/* malloc'd utf8_clean_cutn() of src. */
char *utf8_clean_dup(const void *src, size_t n, size_t max_bytes);
/* 1 when the n bytes are valid UTF-8 without NUL bytes. */
int utf8_valid(const void *s, size_t n);
/* How many of the n bytes are, from the start (the offset of the first bad one). */
size_t utf8_valid_prefix(const void *s, size_t n);
/* snprintf() whose result is valid UTF-8, cut on a character boundary to
 * fit size (whatever the arguments hold). Returns the length written. */
size_t utf8_snprintf(char *dst, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The whole formatted text, made valid and cut to max_bytes: malloc'd. */
char *utf8_asprintf(size_t max_bytes, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Kubernetes name and label rules. */
int util_label_value_ok(const char *s); /* "" or [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?, <= 63 */
int util_dns_label_ok(const char *s);   /* [a-z0-9]([-a-z0-9]*[a-z0-9])?, <= 63 */

#endif
