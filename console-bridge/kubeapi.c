/* kubeapi.c - the API server address and the bearer token (kubeapi.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <libwebsockets.h>

#include "kubeapi.h"
#include "log.h"
#include "util.h"

int kubeapi_parse(const char *api, struct kubeapi *k)
{
	const char *prot, *ads, *path;
	char copy[1024];
	int port = 0;

	if (strncmp(api, "https://", 8) != 0 || strlen(api) >= sizeof copy)
		return -1;
	memcpy(copy, api, strlen(api) + 1);
	if (lws_parse_uri(copy, &prot, &ads, &port, &path) || strcmp(prot, "https") != 0)
		return -1;
	size_t hl = strlen(ads);
	if (!hl || hl >= sizeof k->host)
		return -1;
	/* lws_parse_uri() takes the port with atoi(): insist on digits only, and on
	 * nothing between the host (or "[v6]") and the port or the path */
	const char *after = api + (ads - copy) + hl;
	if (*after == ']')
		after++;
	else if (api[ads - copy - 1] == '[')
		return -1; /* "[v6" without "]" */
	if (*after == ':') {
		const char *d = after + 1;
		long n = 0;
		for (; *d >= '0' && *d <= '9' && n <= 65535; d++)
			n = n * 10 + (*d - '0');
		if (d == after + 1 || (*d && *d != '/') || n < 1 || n > 65535)
			return -1;
		port = (int)n;
	} else if (*after && *after != '/') {
		return -1;
	} else {
		port = 443;
	}
	/* the path comes back without its leading '/', or "/" when there is none */
	size_t pl = strcmp(path, "/") == 0 ? 0 : strlen(path);
	while (pl && path[pl - 1] == '/')
		pl--;
	if (pl + 1 >= sizeof k->prefix)
		return -1;
	memcpy(k->host, ads, hl + 1);
	k->port = port;
	k->prefix[0] = '\0';
	if (pl) {
		k->prefix[0] = '/';
		memcpy(k->prefix + 1, path, pl);
		k->prefix[pl + 1] = '\0';
	}
	return 0;
}

/* Service-account tokens rotate: re-read the file whenever it changed. On a
 * read error keep the token we have (if any). */
int kubeapi_load_token(struct kubeapi *k)
{
	struct stat st;
	const char *path = k->token_file;

	if (stat(path, &st) < 0) {
		log_warn("kube_token_file %s: %s", path, strerror(errno));
		return k->bearer ? 0 : -1;
	}
	int64_t mt = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	if (k->bearer && mt == k->token_stat.mtime_ns && (uint64_t)st.st_ino == k->token_stat.ino &&
	    (int64_t)st.st_size == k->token_stat.size)
		return 0;
	size_t len;
	char *tok = util_read_file(path, 64 * 1024, &len);
	if (!tok) {
		log_warn("kube_token_file %s: %s", path, strerror(errno));
		return k->bearer ? 0 : -1;
	}
	util_rstrip(tok);
	if (!*tok) {
		free(tok);
		log_warn("kube_token_file %s is empty", path);
		return k->bearer ? 0 : -1;
	}
	size_t n = strlen(tok) + 8;
	char *bearer = malloc(n);
	if (!bearer) {
		explicit_bzero(tok, strlen(tok));
		free(tok);
		return k->bearer ? 0 : -1;
	}
	snprintf(bearer, n, "Bearer %s", tok);
	explicit_bzero(tok, strlen(tok));
	free(tok);
	if (k->bearer) {
		explicit_bzero(k->bearer, strlen(k->bearer));
		free(k->bearer);
		log_info("kube_token_file changed: using the new token for new consoles");
	}
	k->bearer = bearer;
	k->token_stat.mtime_ns = mt;
	k->token_stat.ino = (uint64_t)st.st_ino;
	k->token_stat.size = (int64_t)st.st_size;
	return 0;
}

void kubeapi_free(struct kubeapi *k)
{
	if (k->bearer) {
		explicit_bzero(k->bearer, strlen(k->bearer));
		free(k->bearer);
		k->bearer = NULL;
	}
}
