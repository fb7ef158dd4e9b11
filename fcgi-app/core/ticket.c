#include "ticket.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "util.h"

static int sign(const unsigned char *key, size_t keylen, const char *msg, size_t n,
                unsigned char mac[32])
{
	unsigned int len = 0;
	if (!HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)msg, n, mac, &len) ||
	    len != 32)
		return -1;
	return 0;
}

const char *ticket_role_str(enum ticket_role r)
{
	return r == TICKET_VIEW ? "view" : r == TICKET_CONTROL ? "control" : "owner";
}

char *ticket_make(const unsigned char *key, size_t keylen, const char *sid, const char *user,
                  const char *vm, int64_t exp)
{
	return ticket_make_role(key, keylen, sid, user, vm, exp, TICKET_OWNER);
}

char *ticket_make_role(const unsigned char *key, size_t keylen, const char *sid, const char *user,
                       const char *vm, int64_t exp, enum ticket_role role)
{
	char nonce[33];
	unsigned char mac[32];
	char *json, *p64, *m64, *signed_part, *out = NULL;
	cJSON *o;

	if (util_random_hex(nonce, 16) < 0)
		return NULL;
	o = cJSON_CreateObject();
	if (!o || !cJSON_AddStringToObject(o, "sid", sid) ||
	    !cJSON_AddStringToObject(o, "u", user) || !cJSON_AddStringToObject(o, "vm", vm) ||
	    !cJSON_AddNumberToObject(o, "exp", (double)exp) ||
	    !cJSON_AddStringToObject(o, "n", nonce) ||
	    (role != TICKET_OWNER && !cJSON_AddStringToObject(o, "r", ticket_role_str(role)))) {
		cJSON_Delete(o);
		return NULL;
	}
	json = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (!json)
		return NULL;
	p64 = util_b64url(json, strlen(json));
	cJSON_free(json);
	signed_part = xasprintf("v1.%s", p64);
	if (sign(key, keylen, signed_part, strlen(signed_part), mac) == 0) {
		m64 = util_b64url(mac, sizeof mac);
		out = xasprintf("%s.%s", signed_part, m64);
		free(m64);
	}
	free(p64);
	free(signed_part);
	return out;
}

static int copy_str(const cJSON *o, const char *name, char *dst, size_t size)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	if (!cJSON_IsString(v) || !v->valuestring[0] || strlen(v->valuestring) >= size)
		return -1;
	memcpy(dst, v->valuestring, strlen(v->valuestring) + 1);
	return 0;
}

enum ticket_status ticket_verify(const unsigned char *key, size_t keylen, const char *token,
                                 int64_t now, struct ticket *out)
{
	const char *dot1, *dot2;
	unsigned char mac[32], *given, *payload;
	size_t given_len, payload_len;
	enum ticket_status st = TICKET_MALFORMED;

	memset(out, 0, sizeof *out);
	if (!token || strlen(token) > TICKET_MAX_LEN || strncmp(token, "v1.", 3) != 0)
		return TICKET_MALFORMED;
	dot1 = token + 2;
	dot2 = strchr(dot1 + 1, '.');
	if (!dot2 || strchr(dot2 + 1, '.'))
		return TICKET_MALFORMED;
	given = util_b64url_decode(dot2 + 1, &given_len);
	if (!given)
		return TICKET_MALFORMED;
	if (sign(key, keylen, token, (size_t)(dot2 - token), mac) < 0 ||
	    !util_ct_equal(mac, sizeof mac, given, given_len)) {
		free(given);
		return TICKET_BAD_SIGNATURE;
	}
	free(given);

	char *p64 = xstrndup(dot1 + 1, (size_t)(dot2 - dot1 - 1));
	payload = util_b64url_decode(p64, &payload_len);
	free(p64);
	if (!payload)
		return TICKET_MALFORMED;
	cJSON *o = cJSON_ParseWithLength((const char *)payload, payload_len);
	free(payload);
	if (!cJSON_IsObject(o))
		goto out;
	const cJSON *exp = cJSON_GetObjectItemCaseSensitive(o, "exp");
	if (copy_str(o, "sid", out->sid, sizeof out->sid) < 0 ||
	    copy_str(o, "u", out->user, sizeof out->user) < 0 ||
	    copy_str(o, "vm", out->vm, sizeof out->vm) < 0 ||
	    copy_str(o, "n", out->nonce, sizeof out->nonce) < 0 || !cJSON_IsNumber(exp))
		goto out;
	out->exp = (int64_t)exp->valuedouble;
	const cJSON *role = cJSON_GetObjectItemCaseSensitive(o, "r");
	if (role) {
		if (!cJSON_IsString(role))
			goto out;
		if (strcmp(role->valuestring, "view") == 0)
			out->role = TICKET_VIEW;
		else if (strcmp(role->valuestring, "control") == 0)
			out->role = TICKET_CONTROL;
		else
			goto out; /* an unknown role is no ticket */
	}
	st = now > out->exp ? TICKET_EXPIRED : TICKET_OK;
out:
	cJSON_Delete(o);
	if (st != TICKET_OK && st != TICKET_EXPIRED)
		memset(out, 0, sizeof *out);
	return st;
}

const char *ticket_status_str(enum ticket_status st)
{
	switch (st) {
	case TICKET_OK:
		return "ok";
	case TICKET_MALFORMED:
		return "malformed ticket";
	case TICKET_BAD_SIGNATURE:
		return "bad ticket signature";
	case TICKET_EXPIRED:
		return "ticket expired";
	}
	return "bad ticket";
}
