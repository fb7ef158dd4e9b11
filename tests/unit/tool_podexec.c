/* tool_podexec POD CONTAINER COMMAND: run COMMAND in a lab Pod exactly as
 * labvm.fcgi's grader does (podexec.c: the exec WebSocket through
 * libwebsockets, TLS verified against kube_ca_file and kube_api's host, the
 * token from kube_token_file through kube.c), with the labvm.conf of
 * $LABVM_CONF, and print the result as one JSON object: {"rc", "exit_code",
 * "timed_out", "out", "err", "msg"}. The integration suites use it to point
 * the grader's client at an API server of their choosing (an IPv6 literal,
 * a server with the wrong certificate, one that offers h2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>

#include "../../fcgi-app/podexec.h"
#include "config.h"
#include "jsonx.h"
#include "kube.h"

int main(int argc, char **argv)
{
	struct cfg c;
	struct kube k;
	struct podexec_result r;
	char err[512], msg[512] = "";

	if (argc != 4) {
		fprintf(stderr, "usage: tool_podexec POD CONTAINER COMMAND\n");
		return 2;
	}
	if (cfg_load(cfg_path(), &c, 0, err, sizeof err) < 0) {
		fprintf(stderr, "config: %s\n", err);
		return 2;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (kube_init(&k, &c) < 0) {
		fprintf(stderr, "kube: %s\n", k.msg);
		return 2;
	}
	char *bearer = kube_bearer(&k);
	int rc = bearer
	             ? podexec_run(&c, bearer, argv[1], argv[2], argv[3], 20, &r, msg, sizeof msg)
	             : -1;
	if (!bearer) {
		snprintf(msg, sizeof msg, "no token: %.400s", k.msg);
		memset(&r, 0, sizeof r);
		r.exit_code = -1;
	}
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "rc", rc);
	cJSON_AddNumberToObject(o, "exit_code", r.exit_code);
	cJSON_AddBoolToObject(o, "timed_out", r.timed_out);
	cJSON_AddStringToObject(o, "out", r.out ? r.out : "");
	cJSON_AddStringToObject(o, "err", r.err ? r.err : "");
	cJSON_AddStringToObject(o, "msg", msg);
	char *s = jx_print(o);
	puts(s);
	cJSON_free(s);
	cJSON_Delete(o);
	if (bearer) {
		util_free_secret(bearer);
		podexec_result_free(&r);
	}
	kube_cleanup(&k);
	cfg_free(&c);
	curl_global_cleanup();
	return rc < 0 ? 1 : 0;
}
