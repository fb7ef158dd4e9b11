/* bytequeue.c - the chunked byte queue and the replay ring (bytequeue.h). */
#include <stdlib.h>
#include <string.h>

#include "bytequeue.h"

/* ------------------------------------------------------------------ queue */

int bq_append(struct bq *q, const void *p, size_t n, int is_text)
{
	struct bq_chunk *t = q->tail;

	if (!n && !is_text)
		return 0;
	if (!is_text && t && !t->is_text && t->cap - t->len >= n) {
		memcpy(t->data + LWS_PRE + t->len, p, n);
		t->len += n;
		q->bytes += n;
		return 0;
	}
	size_t cap = is_text || n >= BQ_CHUNK_MIN ? n : BQ_CHUNK_MIN;
	struct bq_chunk *c = malloc(sizeof *c + LWS_PRE + cap);
	if (!c)
		return -1;
	c->next = NULL;
	c->off = 0;
	c->len = n;
	c->cap = cap;
	c->is_text = is_text;
	if (n)
		memcpy(c->data + LWS_PRE, p, n);
	if (t)
		t->next = c;
	else
		q->head = c;
	q->tail = c;
	q->bytes += n;
	return 0;
}

size_t bq_peek(struct bq *q, unsigned char **p, int *is_text)
{
	struct bq_chunk *c = q->head;
	if (!c)
		return 0;
	size_t n = c->len - c->off;
	*p = c->data + LWS_PRE + c->off;
	*is_text = c->is_text;
	if (!c->is_text && n > BQ_WRITE_MAX)
		n = BQ_WRITE_MAX;
	return n;
}

void bq_consume(struct bq *q, size_t n)
{
	struct bq_chunk *c = q->head;
	if (!c)
		return;
	c->off += n;
	q->bytes -= n;
	if (c->off >= c->len) {
		q->head = c->next;
		if (!q->head)
			q->tail = NULL;
		free(c);
	}
}

void bq_clear(struct bq *q)
{
	struct bq_chunk *c = q->head, *n;
	for (; c; c = n) {
		n = c->next;
		free(c);
	}
	q->head = q->tail = NULL;
	q->bytes = 0;
}

/* ------------------------------------------------------------------- ring */

void ring_put(struct ring *r, const void *data, size_t n)
{
	const unsigned char *p = data;

	if (!r->buf) {
		r->buf = malloc(RING_SIZE);
		if (!r->buf)
			return; /* replay is a convenience; skip it under memory pressure */
	}
	if (n >= RING_SIZE) {
		memcpy(r->buf, p + n - RING_SIZE, RING_SIZE);
		r->start = 0;
		r->len = RING_SIZE;
		return;
	}
	size_t end = (r->start + r->len) % RING_SIZE;
	size_t first = RING_SIZE - end < n ? RING_SIZE - end : n;
	memcpy(r->buf + end, p, first);
	memcpy(r->buf, p + first, n - first);
	r->len += n;
	if (r->len > RING_SIZE) {
		r->start = (r->start + r->len - RING_SIZE) % RING_SIZE;
		r->len = RING_SIZE;
	}
}

int ring_replay(const struct ring *r, struct bq *q)
{
	if (!r->buf || !r->len)
		return 0;
	unsigned char *tmp = malloc(r->len);
	if (!tmp)
		return -1;
	size_t first = RING_SIZE - r->start;
	if (first > r->len)
		first = r->len;
	memcpy(tmp, r->buf + r->start, first);
	memcpy(tmp + first, r->buf, r->len - first);
	size_t skip = 0;
	if (r->len == RING_SIZE) {
		unsigned char *nl = memchr(tmp, '\n', r->len);
		if (nl)
			skip = (size_t)(nl - tmp) + 1;
	}
	int rc = bq_append(q, tmp + skip, r->len - skip, 0);
	free(tmp);
	return rc;
}

void ring_free(struct ring *r)
{
	free(r->buf);
	r->buf = NULL;
	r->start = r->len = 0;
}
