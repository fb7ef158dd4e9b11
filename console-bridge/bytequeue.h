/* bytequeue.h - the bridge's two buffers, free of lws connections (unit
 * tested in tests/unit/test_bytequeue.c):
 *
 *   struct bq    a byte queue of chunks, each with LWS_PRE bytes of headroom,
 *                so a chunk is written in place (lws_write() puts the frame
 *                header into the headroom or into already-sent bytes of the
 *                same chunk); small binary writes coalesce, text messages stay
 *                whole;
 *   struct ring  the last RING_SIZE bytes of console output, replayed to a
 *                browser that attaches.
 *
 * Neither is thread safe; the bridge uses them on the lws service thread. */
#ifndef LABVM_CONSOLE_BYTEQUEUE_H
#define LABVM_CONSOLE_BYTEQUEUE_H

#include <stddef.h>

#include <libwebsockets.h> /* LWS_PRE */

#define BQ_WRITE_MAX (32 * 1024) /* bq_peek() hands out at most this much binary data */
#define BQ_CHUNK_MIN (8 * 1024)  /* binary chunks coalesce small writes up to this */
#define RING_SIZE    (8 * 1024)  /* replayed to a (re)connecting browser */

struct bq_chunk {
	struct bq_chunk *next;
	size_t off, len, cap; /* payload: data[LWS_PRE + off .. LWS_PRE + len) */
	int is_text;          /* a whole text message (never coalesced) */
	unsigned char data[];
};

struct bq {
	struct bq_chunk *head, *tail;
	size_t bytes; /* payload not yet consumed */
};

/* Append a copy; binary data coalesces into the tail chunk. 0, or -1 on OOM
 * (the queue is unchanged then). */
int bq_append(struct bq *q, const void *p, size_t n, int is_text);
/* The next piece to write: a text message whole, else at most BQ_WRITE_MAX
 * bytes of the head chunk; *p has LWS_PRE writable bytes before it. 0 when
 * the queue is empty. */
size_t bq_peek(struct bq *q, unsigned char **p, int *is_text);
/* Drop n bytes (at most what bq_peek() returned) from the head. */
void bq_consume(struct bq *q, size_t n);
void bq_clear(struct bq *q);

struct ring {
	unsigned char *buf; /* RING_SIZE, allocated on the first ring_put() */
	size_t start, len;
};

/* Remember output; when the ring cannot be allocated the bytes are skipped
 * (replay is a convenience). */
void ring_put(struct ring *r, const void *p, size_t n);
/* Append the ring's content to q. When the ring has wrapped, start after the
 * first newline so the replay does not begin inside an escape sequence or a
 * UTF-8 character. 0, or -1 on OOM. */
int ring_replay(const struct ring *r, struct bq *q);
void ring_free(struct ring *r);

#endif
