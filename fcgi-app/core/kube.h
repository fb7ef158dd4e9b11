/* kube.h - a small Kubernetes API client over httpc.h: one keep-alive
 * handle per thread, bearer token from the service-account file (re-read
 * when it rotates), TLS verified against the cluster CA, cJSON bodies.
 *
 * Not thread-safe: one struct kube per worker thread. */
#ifndef LABVM_CORE_KUBE_H
#define LABVM_CORE_KUBE_H

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "config.h"
#include "util.h"

struct kube {
	const struct cfg *cfg;
	CURL *h;
	char *token;          /* secret */
	double token_read_at; /* monotonic seconds */
	struct buf body;      /* last response body */
	char msg[512];        /* last error, fit for logs and answers (no secrets) */
	double ms;            /* time spent in API calls since kube_reset_timer */
	unsigned calls;
	const char *accept;         /* the next calls' Accept header (NULL: application/json) */
	const volatile int *cancel; /* set: calls end at once (httpc_req.cancel) */
	/* kube_deadline(): every call ends by then; 429s are retried within it */
	double until;
	unsigned retries; /* 429s retried since kube_reset_timer */
	/* the token file as last read (a rotation swaps it: a new inode) */
	struct {
		unsigned long long dev, ino;
		long long mtime_ns, size;
	} token_id;
	unsigned token_gen; /* bumped when a re-read found a different token */
};

/* 0 ok, -1 failure (message in k->msg). */
int kube_init(struct kube *k, const struct cfg *c);
void kube_cleanup(struct kube *k);
/* Zero the call figures (ms, calls, retries) and clear the deadline. */
void kube_reset_timer(struct kube *k);

/* The deadline of what the caller is doing (monotonic seconds, util_mono_s();
 * 0: none, the default). Under one, every call's timeout is cut to end by
 * then (a call with no time left fails at once, code 0), and a 429 (API
 * Priority and Fairness, or a Status TooManyRequests) is retried, waiting
 * its Retry-After (the header, else details.retryAfterSeconds; at most
 * KUBE_RETRY_WAIT_MAX_S), while the wait and a call still fit: at most
 * KUBE_RETRY_MAX times. Without a deadline a 429 is answered as it came. A
 * create retried this way first asks for the object by name and takes it
 * if it is there: never created twice. The way back after a failure should
 * clear the deadline (0) before it deletes. */
#define KUBE_RETRY_MAX        8
#define KUBE_RETRY_WAIT_MAX_S 10.0
void kube_deadline(struct kube *k, double until);

/* One API call. method "GET", "POST", "PATCH", "DELETE", "PUT"; path starts
 * with "/"; body may be NULL; content_type NULL means application/json.
 * Returns the HTTP status, or 0 when the API could not be reached (k->msg).
 * *out (if out != NULL) gets the parsed JSON body (caller cJSON_Delete()s),
 * or NULL. On statuses >= 400, k->msg carries the Status message. The token
 * file is looked at before every call (a rotation is seen at once) and a
 * 401 is tried once more when the file then holds another token. */
long kube_call(struct kube *k, const char *method, const char *path, const cJSON *body,
               const char *content_type, cJSON **out);

/* Convenience wrappers. */
/* "Bearer <token>" for a client of its own (the exec WebSocket), read as
 * kube_call() does; NULL when there is no token. A secret: the caller frees
 * it with util_free_secret(). */
char *kube_bearer(struct kube *k);
long kube_get(struct kube *k, const char *path, cJSON **out);
/* List with a label selector (may be NULL); path of the collection. */
long kube_list(struct kube *k, const char *path, const char *label_selector, cJSON **out);
/* The same list as metadata only (the API server's PartialObjectMetadataList:
 * items carry metadata, no spec, no data), so that a large backlog of
 * Secrets never hits the answer cap. A server without it answers the full
 * list, which reads the same. */
long kube_list_meta(struct kube *k, const char *path, const char *label_selector, cJSON **out);
/* How many objects a list returns (*n; 0 unless the answer is 200 with items). */
long kube_count(struct kube *k, const char *path, const char *label_selector, long *n);
/* POST obj to the collection path. Retried after a 429 under a deadline
 * (kube_deadline): then the object is looked up by its metadata.name first,
 * and an existing one is the answer (200, *out the object). */
long kube_create(struct kube *k, const char *path, const cJSON *obj, cJSON **out);
long kube_merge_patch(struct kube *k, const char *path, const cJSON *patch, cJSON **out);
/* DELETE with propagationPolicy (e.g. "Background", "Foreground"); 404 counts as done:
 * returns 1 when deleted or already gone, 0 otherwise (k->msg). */
int kube_delete(struct kube *k, const char *path, const char *propagation);

/* A watch (path carries ?watch=true and its selectors): on_event gets each
 * event ({"type", "object"}) as it arrives and returns 1 to end the watch.
 * Returns the HTTP status (200 also when the watch ended quietly at
 * timeout_ms), or 0 when the API could not be reached (k->msg). A watch
 * that hangs costs at most timeout_ms. */
long kube_watch(struct kube *k, const char *path, long timeout_ms,
                int (*on_event)(const cJSON *ev, void *ud), void *ud);

/* Collection and object paths (malloc'd). kind: "secrets", "persistentvolumeclaims",
 * "pods", "virtualmachines", "virtualmachineinstances", "datavolumes". name may be NULL. */
char *kube_path(const char *kind, const char *ns, const char *name);

/* JSON accessors over parsed objects (borrowed strings; NULL when absent). */
const char *kj_str(const cJSON *o, const char *dotted_path);
const cJSON *kj_get(const cJSON *o, const char *dotted_path);

#endif
