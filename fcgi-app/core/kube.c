#include "kube.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"

#define KUBE_MAX_BODY  (32u << 20)
#define TOKEN_REREAD_S 60.0

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud)
{
	struct buf *b = ud;
	size_t n = size * nmemb;
	if (b->len + n > KUBE_MAX_BODY)
		return 0; /* abort the transfer */
	buf_append(b, data, n);
	return n;
}

static int load_token(struct kube *k)
{
	size_t len;
	char *t = util_read_file(k->cfg->kube_token_file, 64 * 1024, &len);
	if (!t) {
		snprintf(k->msg, sizeof k->msg, "cannot read kube_token_file %s",
		         k->cfg->kube_token_file);
		return -1;
	}
	util_rstrip(t);
	k->token_read_at = util_mono_s();
	if (k->token && strcmp(k->token, t) == 0) {
		free(t);
		return 0;
	}
	char *hdr = xasprintf("Authorization: Bearer %s", t);
	struct curl_slist *l = curl_slist_append(NULL, "Accept: application/json");
	struct curl_slist *l2 = l ? curl_slist_append(l, hdr) : NULL;
	memset(hdr, 0, strlen(hdr));
	free(hdr);
	if (!l2) {
		curl_slist_free_all(l);
		free(t);
		snprintf(k->msg, sizeof k->msg, "out of memory");
		return -1;
	}
	curl_slist_free_all(k->hdrs);
	k->hdrs = l2;
	if (k->token) {
		memset(k->token, 0, strlen(k->token));
		free(k->token);
	}
	k->token = t;
	return 0;
}

int kube_init(struct kube *k, const struct cfg *c)
{
	memset(k, 0, sizeof *k);
	k->cfg = c;
	k->h = curl_easy_init();
	if (!k->h) {
		snprintf(k->msg, sizeof k->msg, "curl_easy_init failed");
		return -1;
	}
	/* a missing token file is not fatal here: every call retries it */
	if (load_token(k) < 0)
		log_warn("%s (will retry)", k->msg);
	return 0;
}

void kube_cleanup(struct kube *k)
{
	if (k->h)
		curl_easy_cleanup(k->h);
	curl_slist_free_all(k->hdrs);
	if (k->token) {
		memset(k->token, 0, strlen(k->token));
		free(k->token);
	}
	buf_free(&k->body);
	memset(k, 0, sizeof *k);
}

void kube_reset_timer(struct kube *k)
{
	k->ms = 0;
	k->calls = 0;
}

static void status_message(struct kube *k, long code)
{
	cJSON *st = cJSON_ParseWithLength(k->body.p ? k->body.p : "", k->body.len);
	const char *m = kj_str(st, "message");
	const char *reason = kj_str(st, "reason");
	snprintf(k->msg, sizeof k->msg, "HTTP %ld%s%s%s%s", code, reason ? " " : "",
	         reason ? reason : "", m ? ": " : "", m ? m : "");
	cJSON_Delete(st);
}

long kube_call(struct kube *k, const char *method, const char *path, const cJSON *body,
               const char *content_type, cJSON **out)
{
	char *url, *json = NULL, *ct = NULL;
	struct curl_slist *hdrs = NULL, *tail;
	long code = 0;
	CURLcode rc;
	double t0 = util_mono_s();

	if (out)
		*out = NULL;
	k->msg[0] = '\0';
	if ((!k->hdrs || util_mono_s() - k->token_read_at > TOKEN_REREAD_S) && load_token(k) < 0 &&
	    !k->hdrs)
		return 0;

	url = xasprintf("%s%s", k->cfg->kube_api, path);
	curl_easy_reset(k->h);
	buf_reset(&k->body);
	hdrs = k->hdrs;
	if (body) {
		json = cJSON_PrintUnformatted(body);
		if (!json) {
			free(url);
			snprintf(k->msg, sizeof k->msg, "out of memory");
			return 0;
		}
		/* a per-call copy: the shared list plus Content-Type */
		hdrs = NULL;
		for (struct curl_slist *s = k->hdrs; s; s = s->next) {
			tail = curl_slist_append(hdrs, s->data);
			if (!tail)
				goto oom;
			hdrs = tail;
		}
		ct =
		    xasprintf("Content-Type: %s", content_type ? content_type : "application/json");
		tail = curl_slist_append(hdrs, ct);
		if (!tail)
			goto oom;
		hdrs = tail;
		/* no "Expect: 100-continue" round trip before large bodies (Secrets) */
		tail = curl_slist_append(hdrs, "Expect:");
		if (!tail)
			goto oom;
		hdrs = tail;
	}
	if (curl_easy_setopt(k->h, CURLOPT_URL, url) != CURLE_OK ||
	    curl_easy_setopt(k->h, CURLOPT_HTTPHEADER, hdrs) != CURLE_OK ||
	    curl_easy_setopt(k->h, CURLOPT_CAINFO, k->cfg->kube_ca_file) != CURLE_OK ||
	    curl_easy_setopt(k->h, CURLOPT_SSL_VERIFYPEER, 1L) != CURLE_OK ||
	    curl_easy_setopt(k->h, CURLOPT_SSL_VERIFYHOST, 2L) != CURLE_OK ||
	    curl_easy_setopt(k->h, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
	    curl_easy_setopt(k->h, CURLOPT_CONNECTTIMEOUT_MS, 3000L) != CURLE_OK ||
	    curl_easy_setopt(k->h, CURLOPT_TIMEOUT_MS, (long)k->cfg->kube_timeout_ms) != CURLE_OK ||
	    curl_easy_setopt(k->h, CURLOPT_TCP_KEEPALIVE, 1L) != CURLE_OK ||
	    curl_easy_setopt(k->h, CURLOPT_ERRORBUFFER, k->err) != CURLE_OK ||
	    curl_easy_setopt(k->h, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK ||
	    curl_easy_setopt(k->h, CURLOPT_WRITEDATA, &k->body) != CURLE_OK ||
	    curl_easy_setopt(k->h, CURLOPT_CUSTOMREQUEST, method) != CURLE_OK)
		goto setopt;
	if (json && (curl_easy_setopt(k->h, CURLOPT_POSTFIELDS, json) != CURLE_OK ||
	             curl_easy_setopt(k->h, CURLOPT_POSTFIELDSIZE, (long)strlen(json)) != CURLE_OK))
		goto setopt;
	if (strcmp(method, "GET") == 0 && curl_easy_setopt(k->h, CURLOPT_HTTPGET, 1L) != CURLE_OK)
		goto setopt;

	k->err[0] = '\0';
	rc = curl_easy_perform(k->h);
	if (rc != CURLE_OK) {
		snprintf(k->msg, sizeof k->msg, "cluster API unreachable: %s",
		         k->err[0] ? k->err : curl_easy_strerror(rc));
		code = 0;
	} else {
		curl_easy_getinfo(k->h, CURLINFO_RESPONSE_CODE, &code);
		if (out && k->body.len)
			*out = cJSON_ParseWithLength(k->body.p, k->body.len);
		if (code >= 400)
			status_message(k, code);
		if (code == 401)
			k->token_read_at = 0; /* maybe rotated: re-read next time */
	}
	goto done;
setopt:
	snprintf(k->msg, sizeof k->msg, "curl setup failed");
	goto done;
oom:
	snprintf(k->msg, sizeof k->msg, "out of memory");
done:
	if (hdrs != k->hdrs)
		curl_slist_free_all(hdrs);
	free(ct);
	if (json)
		cJSON_free(json);
	free(url);
	k->ms += (util_mono_s() - t0) * 1000.0;
	k->calls++;
	metrics_call(MC_CLUSTER, method, util_mono_s() - t0, code == 0 || code >= 500);
	log_debug("kube %s %s -> %ld (%.1f ms)", method, path, code, (util_mono_s() - t0) * 1000.0);
	return code;
}

long kube_get(struct kube *k, const char *path, cJSON **out)
{
	return kube_call(k, "GET", path, NULL, NULL, out);
}

long kube_list(struct kube *k, const char *path, const char *label_selector, cJSON **out)
{
	if (!label_selector)
		return kube_get(k, path, out);
	char *esc = curl_easy_escape(k->h, label_selector, 0);
	if (!esc) {
		snprintf(k->msg, sizeof k->msg, "out of memory");
		return 0;
	}
	char *p = xasprintf("%s?labelSelector=%s", path, esc);
	curl_free(esc);
	long code = kube_get(k, p, out);
	free(p);
	return code;
}

long kube_create(struct kube *k, const char *path, const cJSON *obj, cJSON **out)
{
	return kube_call(k, "POST", path, obj, NULL, out);
}

long kube_merge_patch(struct kube *k, const char *path, const cJSON *patch, cJSON **out)
{
	return kube_call(k, "PATCH", path, patch, "application/merge-patch+json", out);
}

int kube_delete(struct kube *k, const char *path, const char *propagation)
{
	cJSON *opts = cJSON_CreateObject();
	long code;
	if (!opts || !cJSON_AddStringToObject(opts, "kind", "DeleteOptions") ||
	    !cJSON_AddStringToObject(opts, "apiVersion", "v1") ||
	    !cJSON_AddStringToObject(opts, "propagationPolicy",
	                             propagation ? propagation : "Background")) {
		cJSON_Delete(opts);
		snprintf(k->msg, sizeof k->msg, "out of memory");
		return 0;
	}
	code = kube_call(k, "DELETE", path, opts, NULL, NULL);
	cJSON_Delete(opts);
	return code == 200 || code == 202 || code == 404;
}

char *kube_path(const char *kind, const char *ns, const char *name)
{
	const char *group;
	if (strcmp(kind, "virtualmachines") == 0 || strcmp(kind, "virtualmachineinstances") == 0)
		group = "/apis/kubevirt.io/v1";
	else if (strcmp(kind, "datavolumes") == 0)
		group = "/apis/cdi.kubevirt.io/v1beta1";
	else
		group = "/api/v1";
	if (name)
		return xasprintf("%s/namespaces/%s/%s/%s", group, ns, kind, name);
	return xasprintf("%s/namespaces/%s/%s", group, ns, kind);
}

const cJSON *kj_get(const cJSON *o, const char *dotted_path)
{
	char key[256];
	const char *p = dotted_path;
	while (o && *p) {
		const char *dot = strchr(p, '.');
		size_t n = dot ? (size_t)(dot - p) : strlen(p);
		if (n >= sizeof key)
			return NULL;
		memcpy(key, p, n);
		key[n] = '\0';
		if (cJSON_IsArray(o)) {
			char *end;
			long i = strtol(key, &end, 10);
			o = *end ? NULL : cJSON_GetArrayItem(o, (int)i);
		} else {
			o = cJSON_GetObjectItemCaseSensitive(o, key);
		}
		p += n + (dot ? 1 : 0);
	}
	return o;
}

const char *kj_str(const cJSON *o, const char *dotted_path)
{
	const cJSON *v = kj_get(o, dotted_path);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}
