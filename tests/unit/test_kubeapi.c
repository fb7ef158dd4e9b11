/* console-bridge/kubeapi.c: kube_api parsing (the accepted forms and the
 * refused ones, as the bridge's configuration check has always had them) and
 * the bearer token: read, kept while unchanged, re-read on rotation, kept
 * when the file turns empty or vanishes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../console-bridge/kubeapi.h"
#include "log.h"
#include "unit.h"

static void parses(const char *api, const char *host, int port, const char *prefix)
{
	struct kubeapi k;
	memset(&k, 0, sizeof k);
	int rc = kubeapi_parse(api, &k);
	CHECK(rc == 0 && strcmp(k.host, host) == 0 && k.port == port &&
	          strcmp(k.prefix, prefix) == 0,
	      "%s -> host %s port %d prefix '%s'", api, host, port, prefix);
	if (rc == 0 && (strcmp(k.host, host) || k.port != port || strcmp(k.prefix, prefix)))
		printf("#   got host %s port %d prefix '%s'\n", k.host, k.port, k.prefix);
}

static void refused(const char *api)
{
	struct kubeapi k;
	memset(&k, 0, sizeof k);
	CHECK(kubeapi_parse(api, &k) < 0, "%s is refused", api);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

int main(void)
{
	log_init("test_kubeapi", LOG_ERR);

	parses("https://kubernetes.default.svc", "kubernetes.default.svc", 443, "");
	parses("https://127.0.0.1:6443", "127.0.0.1", 6443, "");
	parses("https://h:6443/", "h", 6443, "");
	parses("https://h/k8s/", "h", 443, "/k8s");
	parses("https://h:1/a//", "h", 1, "/a");
	parses("https://h:65535/api/v1", "h", 65535, "/api/v1");
	parses("https://[::1]:6443", "::1", 6443, "");
	parses("https://[::1]/p", "::1", 443, "/p");
	parses("https://h//", "h", 443, "");
	refused("http://h");
	refused("h:6443");
	refused("https://");
	refused("https://:6443");
	refused("https:///x");
	refused("https://[::1");
	refused("https://[::1]x");
	refused("https://h:");
	refused("https://h:0");
	refused("https://h:65536");
	refused("https://h:12x");
	refused("https://h:6443:1");
	refused("https://h:99999999999999");

	char dir[] = "/tmp/test_kubeapi.XXXXXX", path[64];
	if (!mkdtemp(dir)) {
		CHECK(0, "mkdtemp");
		return unit_done();
	}
	snprintf(path, sizeof path, "%s/token", dir);
	struct kubeapi k;
	memset(&k, 0, sizeof k);
	k.token_file = path;
	CHECK(kubeapi_load_token(&k) < 0 && !k.bearer, "no token file, no token");

	write_file(path, "tok-one\n");
	CHECK(kubeapi_load_token(&k) == 0 && k.bearer && strcmp(k.bearer, "Bearer tok-one") == 0,
	      "the token is read, trailing newline stripped, as a Bearer value");
	char *first = k.bearer;
	CHECK(kubeapi_load_token(&k) == 0 && k.bearer == first,
	      "an unchanged file is not read again");

	write_file(path, "tok-two-rotated\n");
	CHECK(kubeapi_load_token(&k) == 0 && k.bearer &&
	          strcmp(k.bearer, "Bearer tok-two-rotated") == 0,
	      "a rotated token file is read again");

	write_file(path, "\n");
	CHECK(kubeapi_load_token(&k) == 0 && k.bearer &&
	          strcmp(k.bearer, "Bearer tok-two-rotated") == 0,
	      "an emptied file keeps the token we have");

	unlink(path);
	CHECK(kubeapi_load_token(&k) == 0 && k.bearer &&
	          strcmp(k.bearer, "Bearer tok-two-rotated") == 0,
	      "a vanished file keeps the token we have");
	kubeapi_free(&k);
	CHECK(!k.bearer, "kubeapi_free drops the token");
	rmdir(dir);
	return unit_done();
}
