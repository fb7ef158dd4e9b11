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
/* Strip trailing whitespace in place. */
void util_rstrip(char *s);

/* Kubernetes name and label rules. */
int util_label_value_ok(const char *s); /* "" or [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?, <= 63 */
int util_dns_label_ok(const char *s);   /* [a-z0-9]([-a-z0-9]*[a-z0-9])?, <= 63 */

#endif
