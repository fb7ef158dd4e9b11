/* console-bridge/bytequeue.c: the chunked byte queue (coalescing, LWS_PRE
 * headroom, text messages kept whole, order under partial consumption) and
 * the replay ring (wrap, the cut after the first newline). */
#include <stdlib.h>
#include <string.h>

#include "../../console-bridge/bytequeue.h"
#include "unit.h"

/* Drain q completely into a malloc'd buffer (binary pieces only), checking
 * that every piece has its headroom and respects BQ_WRITE_MAX. */
static unsigned char *drain(struct bq *q, size_t *len, int *pieces_ok)
{
	unsigned char *out = malloc(q->bytes + 1), *p;
	size_t n, got = 0;
	int is_text;
	*pieces_ok = 1;
	while ((n = bq_peek(q, &p, &is_text)) > 0) {
		if (is_text || n > BQ_WRITE_MAX)
			*pieces_ok = 0;
		memset(p - LWS_PRE, 0xee, LWS_PRE); /* lws_write() may scribble here */
		memcpy(out + got, p, n);
		got += n;
		bq_consume(q, n);
	}
	*len = got;
	return out;
}

static void fill(unsigned char *p, size_t n, size_t from)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)((from + i) * 7 + (from + i) / 251);
}

static void test_queue(void)
{
	struct bq q = {0};
	unsigned char *p;
	int is_text = -1, ok;
	size_t n;

	CHECK(bq_peek(&q, &p, &is_text) == 0 && q.bytes == 0,
	      "an empty queue has nothing to write");
	bq_consume(&q, 5);
	CHECK(q.bytes == 0 && !q.head, "consuming from an empty queue is harmless");

	CHECK(bq_append(&q, "ab", 2, 0) == 0 && bq_append(&q, "cd", 2, 0) == 0 &&
	          bq_append(&q, "", 0, 0) == 0,
	      "binary appends succeed");
	n = bq_peek(&q, &p, &is_text);
	CHECK(q.head == q.tail && n == 4 && memcmp(p, "abcd", 4) == 0 && !is_text && q.bytes == 4,
	      "small binary writes coalesce into one chunk");

	CHECK(bq_append(&q, "{\"type\":\"x\"}", 12, 1) == 0 && bq_append(&q, "ef", 2, 0) == 0,
	      "a text message and more binary appended");
	CHECK(q.head != q.tail && q.head->next && q.head->next->is_text && q.bytes == 18,
	      "a text message gets its own chunk and binary after it does not join it");
	bq_consume(&q, 4);
	n = bq_peek(&q, &p, &is_text);
	CHECK(n == 12 && is_text && memcmp(p, "{\"type\":\"x\"}", 12) == 0,
	      "the text message comes out whole, in order");
	bq_consume(&q, n);
	n = bq_peek(&q, &p, &is_text);
	CHECK(n == 2 && !is_text && memcmp(p, "ef", 2) == 0 && q.bytes == 2,
	      "then the binary written after it");
	bq_consume(&q, 2);
	CHECK(!q.head && !q.tail && q.bytes == 0, "fully consumed: no chunk left");

	/* a text message larger than BQ_WRITE_MAX is still handed out whole */
	size_t big = BQ_WRITE_MAX + 100;
	char *txt = malloc(big);
	memset(txt, 'x', big);
	CHECK(bq_append(&q, txt, big, 1) == 0 && bq_peek(&q, &p, &is_text) == big && is_text,
	      "a large text message is one piece");
	bq_clear(&q);
	free(txt);
	CHECK(!q.head && !q.tail && q.bytes == 0, "bq_clear empties the queue");

	/* 100 KiB at once: pieces of at most BQ_WRITE_MAX, same bytes out */
	size_t len = 100 * 1024, got;
	unsigned char *in = malloc(len), *out;
	fill(in, len, 0);
	CHECK(bq_append(&q, in, len, 0) == 0 && q.bytes == len, "100 KiB appended");
	n = bq_peek(&q, &p, &is_text);
	CHECK(n == BQ_WRITE_MAX, "a large binary chunk is handed out BQ_WRITE_MAX at a time");
	out = drain(&q, &got, &ok);
	CHECK(ok && got == len && memcmp(in, out, len) == 0 && q.bytes == 0 && !q.head,
	      "100 KiB come out complete and in order");
	free(out);

	/* a chunk boundary: 8 KiB - 1, then 2 bytes (do not fit), then 1 byte */
	CHECK(bq_append(&q, in, BQ_CHUNK_MIN - 1, 0) == 0 &&
	          bq_append(&q, in + BQ_CHUNK_MIN - 1, 2, 0) == 0 &&
	          bq_append(&q, in + BQ_CHUNK_MIN + 1, 1, 0) == 0,
	      "appends across a chunk boundary");
	CHECK(q.head != q.tail && q.head->len == BQ_CHUNK_MIN - 1 && q.tail->len == 3,
	      "a write that does not fit starts a new chunk, later ones coalesce into it");
	out = drain(&q, &got, &ok);
	CHECK(ok && got == BQ_CHUNK_MIN + 2 && memcmp(in, out, got) == 0,
	      "bytes across the boundary come out in order");
	free(out);
	free(in);

	/* interleaved appends and partial consumption keep the stream intact */
	size_t total = 600 * 1024, wpos = 0, rpos = 0;
	unsigned char *want = malloc(total), *chunk = malloc(40 * 1024);
	fill(want, total, 0);
	unsigned seed = 12345;
	int intact = 1, bounded = 1;
	while (rpos < total) {
		seed = seed * 1103515245u + 12345u;
		size_t w = (seed >> 8) % (wpos < total / 2 ? 9000 : 40000);
		if (w > total - wpos)
			w = total - wpos;
		memcpy(chunk, want + wpos, w);
		if (bq_append(&q, chunk, w, 0) < 0) {
			intact = 0;
			break;
		}
		wpos += w;
		seed = seed * 1103515245u + 12345u;
		size_t r = (seed >> 8) % 30000 + 1;
		while (r && (n = bq_peek(&q, &p, &is_text)) > 0) {
			if (n > r)
				n = r;
			if (n > BQ_WRITE_MAX)
				bounded = 0;
			if (memcmp(p, want + rpos, n) != 0)
				intact = 0;
			rpos += n;
			r -= n;
			bq_consume(&q, n);
		}
		if (q.bytes != wpos - rpos)
			intact = 0;
	}
	CHECK(
	    intact && bounded && rpos == total && q.bytes == 0,
	    "600 KiB through interleaved appends and partial consumes arrive intact and in order");
	bq_clear(&q);
	free(want);
	free(chunk);
}

static unsigned char *replay(const struct ring *r, size_t *len)
{
	struct bq q = {0};
	int ok;
	if (ring_replay(r, &q) < 0)
		return NULL;
	unsigned char *out = drain(&q, len, &ok);
	bq_clear(&q);
	return out;
}

static void test_ring(void)
{
	struct ring r = {0};
	unsigned char *out;
	size_t len;

	out = replay(&r, &len);
	CHECK(out && len == 0 && !r.buf, "an empty ring replays nothing (and allocates nothing)");
	free(out);

	ring_put(&r, "line 1\nprompt# ", 15);
	out = replay(&r, &len);
	CHECK(out && len == 15 && memcmp(out, "line 1\nprompt# ", 15) == 0,
	      "before it wraps the ring replays everything, first line included");
	free(out);

	/* 10,000 bytes of numbered lines in pieces of 37: the last RING_SIZE bytes
	 * remain, and the replay starts after the first newline among them */
	size_t total = 0;
	char *all = malloc(20000);
	for (int i = 0; total < 10000; i++)
		total += (size_t)sprintf(all + total, "line %05d of the console\n", i);
	ring_free(&r);
	for (size_t off = 0; off < total; off += 37)
		ring_put(&r, all + off, total - off < 37 ? total - off : 37);
	CHECK(r.len == RING_SIZE, "the ring keeps RING_SIZE bytes");
	const char *tail = all + total - RING_SIZE;
	const char *cut = memchr(tail, '\n', RING_SIZE) + 1;
	size_t want = (size_t)(all + total - cut);
	out = replay(&r, &len);
	CHECK(out && len == want && memcmp(out, cut, want) == 0,
	      "a wrapped ring replays the last bytes from the first line start (%zu bytes)", want);
	free(out);

	/* the same output in one write larger than the ring gives the same replay */
	struct ring r2 = {0};
	ring_put(&r2, all, total);
	out = replay(&r2, &len);
	CHECK(out && len == want && memcmp(out, cut, want) == 0,
	      "one write larger than the ring keeps its last RING_SIZE bytes");
	free(out);
	ring_free(&r2);

	/* wrapped output without any newline is replayed whole */
	memset(all, 'z', 3 * RING_SIZE / 2);
	ring_put(&r, all, RING_SIZE / 2);
	ring_put(&r, all, RING_SIZE);
	out = replay(&r, &len);
	CHECK(out && len == RING_SIZE && memchr(out, '\n', len) == NULL,
	      "a wrapped ring without a newline replays all RING_SIZE bytes");
	free(out);

	ring_free(&r);
	CHECK(!r.buf && !r.len && !r.start, "ring_free resets the ring");
	free(all);
}

int main(void)
{
	test_queue();
	test_ring();
	return unit_done();
}
