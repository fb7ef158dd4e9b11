/* fuzz_request.c - labvm.fcgi's request parsing and routing: the input is
 * a FastCGI request (parameters "NAME=value" lines, an empty line, the
 * body), sent as FastCGI records over a real socket to libfcgi and then
 * handled by req_init() and router_dispatch() exactly as a worker does. The
 * database and the cluster are unreachable addresses on loopback (refused at
 * once), so every route runs to an answer. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <curl/curl.h>
#include <fcgiapp.h>

#include "api.h"
#include "config.h"
#include "lab.h"
#include "lesson.h"

static struct cfg cfg;
static struct lessons lessons;
static struct labctx x;
static int lfd = -1;
static char sock_path[108];

static void put_record(char **p, size_t *n, size_t *cap, int type, const char *c, size_t len)
{
	if (*n + len + 8 > *cap) {
		*cap = (*n + len + 8) * 2;
		*p = realloc(*p, *cap);
	}
	unsigned char h[8] = {1, (unsigned char)type, 0, 1, (unsigned char)(len >> 8),
	                      (unsigned char)len, 0, 0};
	memcpy(*p + *n, h, 8);
	memcpy(*p + *n + 8, c, len);
	*n += 8 + len;
}

static void nv(char **b, size_t *n, size_t *cap, const char *k, size_t kl, const char *v,
               size_t vl)
{
	if (*n + kl + vl + 8 > *cap) {
		*cap = (*n + kl + vl + 8) * 2;
		*b = realloc(*b, *cap);
	}
	unsigned char *o = (unsigned char *)*b + *n;
	size_t i = 0;
	size_t ls[2] = {kl, vl};
	for (int j = 0; j < 2; j++) {
		if (ls[j] < 128) {
			o[i++] = (unsigned char)ls[j];
		} else {
			o[i++] = (unsigned char)(0x80 | (ls[j] >> 24));
			o[i++] = (unsigned char)(ls[j] >> 16);
			o[i++] = (unsigned char)(ls[j] >> 8);
			o[i++] = (unsigned char)ls[j];
		}
	}
	memcpy(o + i, k, kl);
	memcpy(o + i + kl, v, vl);
	*n += i + kl + vl;
}

static int setup(void)
{
	char dir[] = "/tmp/labvm-fuzz-XXXXXX", path[256], err[512];
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof path, "%s/labvm.conf", dir);
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fprintf(f, "database = host=127.0.0.1 port=9 dbname=none connect_timeout=1\n"
	           "kube_api = https://127.0.0.1:9\nkube_timeout_ms = 300\n"
	           "kube_token_file = %s/labvm.conf\nkube_ca_file = /dev/null\n"
	           "lessons_dir = %s/lessons\nagent_ready_timeout_ms = 100\n",
	           dir, LABVM_SRC "/conf");
	fclose(f);
	if (cfg_load(path, &cfg, 0, err, sizeof err) < 0 ||
	    lessons_load(cfg.lessons_dir, &lessons, err, sizeof err) < 0) {
		fprintf(stderr, "fuzz_request setup: %s\n", err);
		return -1;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	FCGX_Init();
	if (labctx_init(&x, &cfg, &lessons) < 0)
		return -1;
	snprintf(sock_path, sizeof sock_path, "%s/fcgi.sock", dir);
	lfd = FCGX_OpenSocket(sock_path, 16);
	return lfd < 0 ? -1 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
	if (lfd < 0 && setup() < 0)
		abort();
	/* parameters until an empty line, then the body */
	char *params = NULL, *recs = NULL;
	size_t pn = 0, pcap = 0, rn = 0, rcap = 0;
	const char *p = (const char *)data, *end = p + n;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		if (le == p) {
			p++;
			break;
		}
		const char *eq = memchr(p, '=', (size_t)(le - p));
		if (eq)
			nv(&params, &pn, &pcap, p, (size_t)(eq - p), eq + 1, (size_t)(le - eq - 1));
		p = nl ? nl + 1 : end;
	}
	size_t body = (size_t)(end - p);
	char begin[8] = {0, 1, 0, 0, 0, 0, 0, 0};
	put_record(&recs, &rn, &rcap, 1, begin, 8);
	for (size_t o = 0; o < pn; o += 65535)
		put_record(&recs, &rn, &rcap, 4, params + o, pn - o > 65535 ? 65535 : pn - o);
	put_record(&recs, &rn, &rcap, 4, "", 0);
	for (size_t o = 0; o < body; o += 65535)
		put_record(&recs, &rn, &rcap, 5, p + o, body - o > 65535 ? 65535 : body - o);
	put_record(&recs, &rn, &rcap, 5, "", 0);

	int c = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	memcpy(sa.sun_path, sock_path, strlen(sock_path) + 1);
	int sz = 1 << 22;
	setsockopt(c, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
	if (connect(c, (struct sockaddr *)&sa, sizeof sa) == 0 &&
	    write(c, recs, rn) == (ssize_t)rn) {
		shutdown(c, SHUT_WR);
		FCGX_Request fr;
		FCGX_InitRequest(&fr, lfd, 0);
		if (FCGX_Accept_r(&fr) == 0) {
			struct req r;
			req_init(&r, &fr, &x);
			router_dispatch(&r);
			req_reset(&r);
			FCGX_Finish_r(&fr);
		}
		FCGX_Free(&fr, 1);
	}
	close(c);
	free(params);
	free(recs);
	return 0;
}
