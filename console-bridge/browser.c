/* browser.c - one browser WebSocket (browser.h). Runs on the lws service
 * thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "bridge.h"
#include "browser.h"
#include "log.h"
#include "util.h"

void bc_link(struct bconn *c, struct lws *wsi)
{
	c->wsi = wsi;
	c->id = ++B->next_conn_id;
	c->is_ws = 1;
	bc_set_state(c, BC_NEW);
	lws_dll2_add_head(&c->all, &B->conns);
}

void bc_unlink(struct bconn *c)
{
	if (!lws_dll2_is_detached(&c->all))
		lws_dll2_remove(&c->all);
	bq_clear(&c->out);
	c->state = BC_CLOSING;
	c->is_ws = 0;
}

struct bconn *bc_find(uint64_t id)
{
	for (struct lws_dll2 *d = lws_dll2_get_head(&B->conns); d; d = d->next) {
		struct bconn *c = lws_container_of(d, struct bconn, all);
		if (c->id == id)
			return c;
	}
	return NULL;
}

void bc_set_state(struct bconn *c, enum bc_state st)
{
	c->state = st;
	c->t_state = util_mono_ms();
}

static int send_json(struct bconn *c, cJSON *o)
{
	char *s = o ? cJSON_PrintUnformatted(o) : NULL;
	int rc = s ? bq_append(&c->out, s, strlen(s), 1) : -1;
	cJSON_free(s);
	cJSON_Delete(o);
	return rc;
}

int bc_send_status(struct bconn *c, const char *state)
{
	cJSON *o = cJSON_CreateObject();
	if (!o || !cJSON_AddStringToObject(o, "type", "status") ||
	    !cJSON_AddStringToObject(o, "state", state)) {
		cJSON_Delete(o);
		return -1;
	}
	if (send_json(c, o) < 0)
		return -1;
	lws_callback_on_writable(c->wsi);
	return 0;
}

int bc_send(struct bconn *c, const void *p, size_t n)
{
	if (bq_append(&c->out, p, n, 0) < 0)
		return -1;
	lws_callback_on_writable(c->wsi);
	if (c->out.bytes <= BS_DOWN_HIGH)
		return 0;
	if (!c->t_high)
		c->t_high = util_mono_ms();
	return 1;
}

/* refusals by class, for /console-stats */
static int refuse_index(int code)
{
	switch (code) {
	case BS_CLOSE_BAD_URL:
	case BS_CLOSE_TICKET:
		return 0;
	case BS_CLOSE_FORBIDDEN:
		return 1;
	case BS_CLOSE_NOT_READY:
		return 2;
	case BS_CLOSE_ENDED:
		return 3;
	case BS_CLOSE_TOO_MANY:
		return 4;
	case BS_CLOSE_UPSTREAM:
		return 5;
	case BS_CLOSE_UNAVAILABLE:
		return 6;
	default:
		return 7;
	}
}

void bc_close(struct bconn *c, int code, const char *reason, int flush)
{
	if (c->state == BC_CLOSING)
		return;
	if (c->state == BC_NEW || c->state == BC_CHECKING)
		B->st.refused[refuse_index(code)]++;
	if (c->sess)
		log_info("session %s: console %llu closed: %d %s", c->sid,
		         (unsigned long long)c->id, code, reason);
	else
		log_info("session %s: console %llu refused (peer %s): %d %s",
		         c->sid[0] ? c->sid : "-", (unsigned long long)c->id, c->peer, code,
		         reason);
	bc_set_state(c, BC_CLOSING);
	c->close_code = code;
	snprintf(c->close_reason, sizeof c->close_reason, "%s", reason);
	if (!flush)
		bq_clear(&c->out);
	cJSON *o = cJSON_CreateObject();
	if (!o || !cJSON_AddStringToObject(o, "type", "closed") ||
	    !cJSON_AddNumberToObject(o, "code", code) ||
	    !cJSON_AddStringToObject(o, "reason", c->close_reason)) {
		cJSON_Delete(o);
	} else if (send_json(c, o) < 0) {
		bq_clear(&c->out); /* the close frame alone still carries the reason */
	}
	if (c->rx_paused) {
		lws_rx_flow_control(c->wsi, 1); /* let lws see the peer's close */
		c->rx_paused = 0;
	}
	lws_callback_on_writable(c->wsi);
}

void bc_rx(struct bconn *c, int enable)
{
	if (enable) {
		c->want_pause = 0;
		if (c->rx_paused && c->state == BC_ATTACHED) {
			lws_rx_flow_control(c->wsi, 1);
			c->rx_paused = 0;
		}
	} else if (!c->rx_paused) {
		c->want_pause = 1;
		lws_callback_on_writable(c->wsi);
	}
}

int bc_writeable(struct bconn *c)
{
	unsigned char *p;
	int is_text = 0;
	size_t n;

	if (c->want_pause) {
		c->want_pause = 0;
		if (!c->rx_paused && c->state == BC_ATTACHED) {
			lws_rx_flow_control(c->wsi, 0);
			c->rx_paused = 1;
		}
	}
	n = bq_peek(&c->out, &p, &is_text);
	if (!n) {
		if (c->state == BC_CLOSING) {
			lws_close_reason(c->wsi, (enum lws_close_status)c->close_code,
			                 (unsigned char *)c->close_reason, strlen(c->close_reason));
			return -1;
		}
		return 0;
	}
	int m = lws_write(c->wsi, p, n, is_text ? LWS_WRITE_TEXT : LWS_WRITE_BINARY);
	if (m < (int)n) {
		log_info("session %s: console %llu: write failed, dropping",
		         c->sid[0] ? c->sid : "-", (unsigned long long)c->id);
		return -1;
	}
	bq_consume(&c->out, n);
	int low = c->out.bytes <= BS_DOWN_LOW;
	if (low)
		c->t_high = 0;
	if (c->out.head || c->state == BC_CLOSING)
		lws_callback_on_writable(c->wsi);
	return low;
}
