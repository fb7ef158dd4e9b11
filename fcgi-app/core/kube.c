#include "kube.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/crypto.h>

#include "callstats.h"
#include "httpc.h"
#include "log.h"

#define KUBE_MAX_BODY  (32u << 20)
#define TOKEN_REREAD_S 60.0

/* The token file's identity: a rotation (the kubelet's atomic writer swaps
 * ..data) gives it a new inode; stat() follows the token -> ..data/token
 * symlink. 0 when it cannot be looked at (the token we have is kept). */
static int token_stat(const struct kube *k, struct stat *st)
{
	return stat(k->cfg->kube_token_file, st) == 0;
}

static int token_moved(const struct kube *k)
{
	struct stat st;
	if (!token_stat(k, &st))
		return 0;
	return (unsigned long long)st.st_dev != k->token_id.dev ||
	       (unsigned long long)st.st_ino != k->token_id.ino ||
	       (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec !=
	           k->token_id.mtime_ns ||
	       (long long)st.st_size != k->token_id.size;
}

static int load_token(struct kube *k)
{
	struct stat st;
	size_t len;
	/* stat before the read: a swap in between makes the next call read again */
	int have_st = token_stat(k, &st);
	char *t = util_read_file(k->cfg->kube_token_file, 64 * 1024, &len);
	if (!t) {
		snprintf(k->msg, sizeof k->msg, "cannot read kube_token_file %s",
		         k->cfg->kube_token_file);
		return -1;
	}
	util_rstrip(t);
	k->token_read_at = util_mono_s();
	if (have_st) {
		k->token_id.dev = (unsigned long long)st.st_dev;
		k->token_id.ino = (unsigned long long)st.st_ino;
		k->token_id.mtime_ns =
		    (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
		k->token_id.size = (long long)st.st_size;
	}
	size_t n = strlen(t);
	if (!k->token || strlen(k->token) != n || CRYPTO_memcmp(k->token, t, n) != 0)
		k->token_gen++;
	util_free_secret(k->token);
	k->token = t;
	return 0;
}

/* A token to send: the file again when it moved or after TOKEN_REREAD_S;
 * -1 when there is none at all. */
static int token_ready(struct kube *k)
{
	if (k->token && util_mono_s() - k->token_read_at <= TOKEN_REREAD_S && !token_moved(k))
		return 0;
	if (load_token(k) < 0 && !k->token)
		return -1;
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
	k->retries = 0;
	k->until = 0; /* a deadline never outlives the request that set it */
}

void kube_deadline(struct kube *k, double until)
{
	k->until = until;
}

/* "HTTP <code> <reason>: <message>" from a Status; a body that is not one
 * (APF's and the other filters' text answers) gives its first line, as
 * printable ASCII. */
static void status_message(struct kube *k, long code)
{
	cJSON *st = cJSON_ParseWithLength(k->body.p ? k->body.p : "", k->body.len);
	const char *m = kj_str(st, "message");
	const char *reason = kj_str(st, "reason");
	char text[160];
	if (!st && k->body.len) {
		size_t n = 0;
		for (size_t i = 0; i < k->body.len && n + 1 < sizeof text; i++) {
			unsigned char ch = (unsigned char)k->body.p[i];
			if (ch == '\n' || ch == '\r')
				break;
			text[n++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
		}
		text[n] = '\0';
		m = n ? text : NULL;
	}
	/* the server's text (it may quote an object's): valid UTF-8, cut on a character */
	utf8_snprintf(k->msg, sizeof k->msg, "HTTP %ld%s%s%s%s", code, reason ? " " : "",
	              reason ? reason : "", m ? ": " : "", m ? m : "");
	cJSON_Delete(st);
}

/* Retry-After in whole seconds (the API server sends delta-seconds; an
 * HTTP-date is read as 1 s) */
struct answer_headers {
	double retry_after; /* -1: none */
};

static size_t on_header(char *data, size_t size, size_t nmemb, void *ud)
{
	struct answer_headers *h = ud;
	size_t n = size * nmemb;
	char line[64];
	if (n > 12 && n < sizeof line && strncasecmp(data, "Retry-After:", 12) == 0) {
		memcpy(line, data + 12, n - 12);
		line[n - 12] = '\0';
		char *p = line, *end;
		while (*p == ' ' || *p == '\t')
			p++;
		long v = strtol(p, &end, 10);
		h->retry_after = end != p && v >= 0 ? (double)v : 1.0;
	}
	return n;
}

/* One request, cut to the deadline. *retry_after: what a 429 asked for
 * (the header, else the Status's details.retryAfterSeconds; -1 none). */
static long call_once(struct kube *k, const char *method, const char *path, const cJSON *body,
                      const char *content_type, cJSON **out, double *retry_after)
{
	char why[CURL_ERROR_SIZE + 64];
	double t0 = util_mono_s();
	long code = 0, timeout_ms = k->cfg->kube_timeout_ms;
	struct answer_headers ah = {-1};

	if (out)
		*out = NULL;
	*retry_after = -1;
	k->msg[0] = '\0';
	if (token_ready(k) < 0)
		return 0;
	if (k->until > 0) {
		double left_ms = (k->until - t0) * 1000.0;
		if (left_ms < 1) {
			snprintf(k->msg, sizeof k->msg,
			         "no time left for %s %s within this request's "
			         "deadline",
			         method, path);
			return 0;
		}
		if (left_ms < timeout_ms)
			timeout_ms = (long)left_ms;
	}

	char *url = xasprintf("%s%s", k->cfg->kube_api, path);
	struct httpc_req rq = {
	    .method = method,
	    .url = url,
	    .json = body,
	    .content_type = content_type,
	    .accept = k->accept,
	    .bearer = k->token,
	    .ca_file = k->cfg->kube_ca_file,
	    .connect_timeout_ms = timeout_ms < 3000 ? timeout_ms : 3000,
	    .timeout_ms = timeout_ms,
	    .max_body = KUBE_MAX_BODY,
	    .on_header = on_header,
	    .header_ud = &ah,
	    .cancel = k->cancel,
	};
	code = httpc_call(k->h, &rq, &k->body, why, sizeof why);
	if (!code) {
		snprintf(k->msg, sizeof k->msg, "cluster API unreachable: %s", why);
	} else {
		cJSON *o = httpc_json(&k->body);
		if (code >= 400)
			status_message(k, code);
		if (code == 429) {
			const cJSON *ra = kj_get(o, "details.retryAfterSeconds");
			*retry_after = ah.retry_after >= 0 ? ah.retry_after
			               : cJSON_IsNumber(ra) && ra->valuedouble >= 0
			                   ? ra->valuedouble
			                   : -1;
		}
		if (code == 401)
			k->token_read_at = 0; /* maybe rotated: re-read next time */
		if (out)
			*out = o;
		else
			cJSON_Delete(o);
	}
	free(url);
	k->ms += (util_mono_s() - t0) * 1000.0;
	k->calls++;
	callstats_add(CALL_CLUSTER, method, util_mono_s() - t0, code == 0 || code >= 500);
	log_debug("kube %s %s -> %ld (%.1f ms)", method, path, code, (util_mono_s() - t0) * 1000.0);
	return code;
}

/* May a 429 be retried now? *wait becomes the pause (Retry-After, bounded);
 * the pause and one more call must fit before the deadline. */
static int retry_fits(struct kube *k, int attempts, double *wait)
{
	double w = *wait < 0 ? 1.0 : *wait < 0.2 ? 0.2 : *wait;
	double call_s = k->cfg->kube_timeout_ms / 1000.0;
	if (w > KUBE_RETRY_WAIT_MAX_S)
		w = KUBE_RETRY_WAIT_MAX_S;
	if (k->until <= 0 || attempts >= KUBE_RETRY_MAX)
		return 0;
	if (util_mono_s() + w + (call_s < 1.0 ? call_s : 1.0) > k->until) {
		size_t n = strlen(k->msg);
		snprintf(k->msg + n, sizeof k->msg - n,
		         " (retried %d times; no time left for "
		         "another within this request's deadline)",
		         attempts);
		return 0;
	}
	*wait = w;
	return 1;
}

static void pause_s(const struct kube *k, double s)
{
	double end = util_mono_s() + s;
	while (!(k->cancel && *k->cancel)) {
		double left = end - util_mono_s();
		if (left <= 0)
			break;
		if (left > 0.1)
			left = 0.1;
		struct timespec ts = {0, (long)(left * 1e9)};
		nanosleep(&ts, NULL);
	}
}

/* kube_call, and for a create the name it creates (NULL otherwise). */
static long call(struct kube *k, const char *method, const char *path, const cJSON *body,
                 const char *content_type, cJSON **out, const char *create_name)
{
	int tried_401 = 0;
	for (int attempts = 0;;) {
		double wait;
		long code = call_once(k, method, path, body, content_type, out, &wait);
		unsigned gen = k->token_gen; /* the token this call sent */
		if (code == 401 && !tried_401) {
			/* a rotated token: the file again, and once more if it changed */
			tried_401 = 1;
			k->token_read_at = 0;
			char keep[sizeof k->msg];
			snprintf(keep, sizeof keep, "%s", k->msg);
			if (token_ready(k) == 0 && k->token_gen != gen) {
				log_info(
				    "kube %s %s: 401 with the old token; the token file changed: "
				    "again with the new one",
				    method, path);
				if (out) {
					cJSON_Delete(*out);
					*out = NULL;
				}
				continue;
			}
			snprintf(k->msg, sizeof k->msg, "%s", keep);
			return code;
		}
		if (code != 429 || !retry_fits(k, attempts, &wait))
			return code;
		attempts++;
		k->retries++;
		log_warn("kube %s %s: %s: retry %d of at most %d in %.1f s", method, path, k->msg,
		         attempts, KUBE_RETRY_MAX, wait);
		if (out) {
			cJSON_Delete(*out);
			*out = NULL;
		}
		pause_s(k, wait);
		if (k->cancel && *k->cancel)
			return code;
		if (create_name) {
			/* never twice: a 429 was not processed, but an answer lost
			 * after the work was done looks the same */
			char *one = xasprintf("%s/%s", path, create_name);
			cJSON *got = NULL;
			long g = call(k, "GET", one, NULL, NULL, &got, NULL);
			free(one);
			if (g == 200) {
				log_warn("kube POST %s: %s already exists: taken as created", path,
				         create_name);
				if (out)
					*out = got;
				else
					cJSON_Delete(got);
				return 200;
			}
			cJSON_Delete(got);
			if (g != 404)
				return g; /* k->msg says why */
		}
	}
}

long kube_call(struct kube *k, const char *method, const char *path, const cJSON *body,
               const char *content_type, cJSON **out)
{
	return call(k, method, path, body, content_type, out, NULL);
}

char *kube_bearer(struct kube *k)
{
	if (token_ready(k) < 0)
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
	return call(k, "POST", path, obj, NULL, out, kj_str(obj, "metadata.name"));
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
	if (token_ready(k) < 0)
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
