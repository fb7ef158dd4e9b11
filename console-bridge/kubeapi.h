/* kubeapi.h - where the API server is and how to authenticate to it, for
 * every upstream kind: host, port and path prefix of kube_api, and the
 * service-account token as an Authorization value, re-read when the file
 * changes (rotation). */
#ifndef LABVM_CONSOLE_KUBEAPI_H
#define LABVM_CONSOLE_KUBEAPI_H

#include <stdint.h>

struct kubeapi {
	char host[256];
	int port;
	char prefix[256];       /* path part of kube_api without trailing '/', usually "" */
	const char *token_file; /* kube_token_file */
	char *bearer;           /* "Bearer <token>" (SECRET: never logged) */
	struct {
		int64_t mtime_ns;
		uint64_t ino;
		int64_t size;
	} token_stat;
};

/* https://host[:port][/path] (host may be [v6]); 0, or -1 when it is not that. */
int kubeapi_parse(const char *api, struct kubeapi *k);
/* (Re-)read k->token_file when it changed. 0 when a token is available (on a
 * read error the previous one is kept), -1 when there is none. */
int kubeapi_load_token(struct kubeapi *k);
void kubeapi_free(struct kubeapi *k);

#endif
