#include "kube.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "httpc.h"
#include "log.h"
#include "metrics.h"

#define KUBE_MAX_BODY  (32u << 20)
#define TOKEN_REREAD_S 60.0

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
	util_free_secret(k->token);
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
	util_free_secret(k->token);
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
	/* the server's text (it may quote an object's): valid UTF-8, cut on a character */
	utf8_snprintf(k->msg, sizeof k->msg, "HTTP %ld%s%s%s%s", code, reason ? " " : "",
	              reason ? reason : "", m ? ": " : "", m ? m : "");
	cJSON_Delete(st);
}

long kube_call(struct kube *k, const char *method, const char *path, const cJSON *body,
               const char *content_type, cJSON **out)
{
	char why[CURL_ERROR_SIZE + 64];
	double t0 = util_mono_s();
	long code = 0;

	if (out)
		*out = NULL;
	k->msg[0] = '\0';
	if ((!k->token || util_mono_s() - k->token_read_at > TOKEN_REREAD_S) && load_token(k) < 0 &&
	    !k->token)
		return 0;

	char *url = xasprintf("%s%s", k->cfg->kube_api, path);
	struct httpc_req rq = {
	    .method = method,
	    .url = url,
	    .json = body,
	    .content_type = content_type,
	    .accept = k->accept,
	    .bearer = k->token,
	    .ca_file = k->cfg->kube_ca_file,
	    .connect_timeout_ms = 3000,
	    .timeout_ms = k->cfg->kube_timeout_ms,
	    .max_body = KUBE_MAX_BODY,
	    .cancel = k->cancel,
	};
	code = httpc_call(k->h, &rq, &k->body, why, sizeof why);
	if (!code) {
		snprintf(k->msg, sizeof k->msg, "cluster API unreachable: %s", why);
	} else {
		if (out)
			*out = httpc_json(&k->body);
		if (code >= 400)
			status_message(k, code);
		if (code == 401)
			k->token_read_at = 0; /* maybe rotated: re-read next time */
	}
	free(url);
	k->ms += (util_mono_s() - t0) * 1000.0;
	k->calls++;
	metrics_call(MC_CLUSTER, method, util_mono_s() - t0, code == 0 || code >= 500);
	log_debug("kube %s %s -> %ld (%.1f ms)", method, path, code, (util_mono_s() - t0) * 1000.0);
	return code;
}

char *kube_bearer(struct kube *k)
{
	if ((!k->token || util_mono_s() - k->token_read_at > TOKEN_REREAD_S) && load_token(k) < 0 &&
	    !k->token)
		return NULL;
	return xasprintf("Bearer %s", k->token);
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

long kube_list_meta(struct kube *k, const char *path, const char *label_selector, cJSON **out)
{
	k->accept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,"
	            "application/json";
	long code = kube_list(k, path, label_selector, out);
	k->accept = NULL;
	return code;
}

long kube_count(struct kube *k, const char *path, const char *label_selector, long *n)
{
	cJSON *list = NULL;
	long code = kube_list_meta(k, path, label_selector, &list); /* no specs needed */
	const cJSON *items = kj_get(list, "items");
	if (code == 200 && !cJSON_IsArray(items))
		code = 0;
	*n = code == 200 ? cJSON_GetArraySize(items) : 0;
	cJSON_Delete(list);
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
	else if (strcmp(kind, "network-attachment-definitions") == 0)
		group = "/apis/k8s.cni.cncf.io/v1";
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

/* ------------------------------------------------------------ watch */

struct watch_ud {
	struct buf line;
	int (*on_event)(const cJSON *ev, void *ud);
	void *ud;
	int overflow;
};

#define WATCH_MAX_LINE (4u << 20)

static int watch_data(const char *data, size_t n, void *p)
{
	struct watch_ud *w = p;
	for (size_t i = 0; i < n; i++) {
		if (data[i] != '\n') {
			if (w->line.len >= WATCH_MAX_LINE) {
				w->overflow = 1;
				return 1;
			}
			buf_append(&w->line, data + i, 1);
			continue;
		}
		cJSON *ev = cJSON_ParseWithLength(w->line.p ? w->line.p : "", w->line.len);
		buf_reset(&w->line);
		int stop = ev && w->on_event(ev, w->ud);
		cJSON_Delete(ev);
		if (stop)
			return 1;
	}
	return 0;
}

long kube_watch(struct kube *k, const char *path, long timeout_ms,
                int (*on_event)(const cJSON *ev, void *ud), void *ud)
{
	char why[CURL_ERROR_SIZE + 64];
	struct watch_ud w = {{0}, on_event, ud, 0};
	double t0 = util_mono_s();

	k->msg[0] = '\0';
	if ((!k->token || util_mono_s() - k->token_read_at > TOKEN_REREAD_S) && load_token(k) < 0 &&
	    !k->token)
		return 0;
	char *url = xasprintf("%s%s", k->cfg->kube_api, path);
	struct httpc_req rq = {
	    .method = "GET",
	    .url = url,
	    .bearer = k->token,
	    .ca_file = k->cfg->kube_ca_file,
	    .connect_timeout_ms = 3000,
	    .timeout_ms = timeout_ms,
	    .max_body = KUBE_MAX_BODY,
	    .on_data = watch_data,
	    .data_ud = &w,
	    .cancel = k->cancel,
	};
	long code = httpc_call(k->h, &rq, &k->body, why, sizeof why);
	/* the server ending the watch at timeoutSeconds, or our own timeout
	 * (no event in time), are both a quiet watch */
	if (!code && strstr(why, "imed out"))
		code = 200;
	if (!code)
		snprintf(k->msg, sizeof k->msg, "cluster API unreachable: %s", why);
	else if (w.overflow)
		snprintf(k->msg, sizeof k->msg, "watch event over %u bytes", WATCH_MAX_LINE);
	if (code == 401)
		k->token_read_at = 0;
	buf_free(&w.line);
	free(url);
	k->ms += (util_mono_s() - t0) * 1000.0;
	k->calls++;
	return code;
}
