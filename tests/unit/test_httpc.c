/* httpc: the one JSON-over-HTTP client, against a loopback server in a thread
 * that records each request and sends a canned answer. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "httpc.h"
#include "unit.h"

struct server {
	int fd;
	int port;
	const char *answer; /* the whole HTTP answer for the next request */
	char request[8192]; /* what came in: head and body */
};

static void *serve_one(void *ud)
{
	struct server *sv = ud;
	struct pollfd pf = {sv->fd, POLLIN, 0};
	struct timeval tv = {10, 0};
	size_t got = 0;
	/* a safety net, not a measurement: a client that never comes does not hang the test */
	if (poll(&pf, 1, 10000) != 1)
		return NULL;
	int c = accept(sv->fd, NULL, NULL);
	if (c < 0)
		return NULL;
	setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	memset(sv->request, 0, sizeof sv->request);
	for (;;) {
		ssize_t n = read(c, sv->request + got, sizeof sv->request - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
		char *end = strstr(sv->request, "\r\n\r\n");
		if (!end)
			continue;
		const char *cl = strcasestr(sv->request, "\r\nContent-Length:");
		size_t want = cl && cl < end ? (size_t)atol(cl + 17) : 0;
		if (got >= (size_t)(end + 4 - sv->request) + want)
			break;
	}
	size_t left = strlen(sv->answer);
	for (const char *p = sv->answer; left;) {
		ssize_t n = send(c, p, left, MSG_NOSIGNAL); /* the client may have given up */
		if (n <= 0)
			break;
		p += n;
		left -= (size_t)n;
	}
	close(c);
	return NULL;
}

/* One call against the server; the answer is sent once the request is in. */
static long roundtrip(struct server *sv, CURL *h, struct httpc_req *rq, struct buf *body, char *msg,
                      size_t msglen)
{
	pthread_t t;
	pthread_create(&t, NULL, serve_one, sv);
	long code = httpc_call(h, rq, body, msg, msglen);
	pthread_join(t, NULL);
	return code;
}

int main(void)
{
	struct server sv = {0};
	struct sockaddr_in a = {0};
	socklen_t alen = sizeof a;
	char url[64], msg[512];
	struct buf body = {0};

	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sv.fd = socket(AF_INET, SOCK_STREAM, 0);
	if (sv.fd < 0 || bind(sv.fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(sv.fd, 4) < 0 ||
	    getsockname(sv.fd, (struct sockaddr *)&a, &alen) < 0) {
		CHECK(0, "a loopback listener");
		return unit_done();
	}
	sv.port = ntohs(a.sin_port);
	snprintf(url, sizeof url, "http://127.0.0.1:%d/x", sv.port);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	CURL *h = curl_easy_init();

	/* GET with a bearer token: libcurl's CURLAUTH_BEARER writes the header */
	sv.answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n"
	            "Connection: close\r\n\r\n{\"ok\":true}";
	struct httpc_req get = {.method = "GET",
	                        .url = url,
	                        .bearer = "t0ken-s3cret",
	                        .connect_timeout_ms = 5000,
	                        .timeout_ms = 10000,
	                        .max_body = 1024,
	                        .no_proxy = 1};
	long code = roundtrip(&sv, h, &get, &body, msg, sizeof msg);
	cJSON *j = httpc_json(&body);
	CHECK(code == 200 && cJSON_IsTrue(cJSON_GetObjectItem(j, "ok")),
	      "GET: status 200 and the JSON body (got %ld, %s)", code, msg);
	cJSON_Delete(j);
	CHECK(strncmp(sv.request, "GET /x HTTP/1.1\r\n", 17) == 0, "GET: the request line");
	CHECK(strstr(sv.request, "\r\nAuthorization: Bearer t0ken-s3cret\r\n") != NULL,
	      "GET: Authorization: Bearer <token>");
	CHECK(strstr(sv.request, "\r\nAccept: application/json\r\n") != NULL,
	      "GET: Accept: application/json");
	CHECK(!strstr(sv.request, "Content-Type:"), "GET: no Content-Type without a body");

	/* PATCH with a JSON body and its own content type */
	cJSON *patch = cJSON_CreateObject();
	cJSON_AddStringToObject(patch, "a", "b");
	sv.answer = "HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
	struct httpc_req pr = get;
	pr.method = "PATCH";
	pr.json = patch;
	pr.content_type = "application/merge-patch+json";
	code = roundtrip(&sv, h, &pr, &body, msg, sizeof msg);
	CHECK(code == 404 && msg[0] == '\0', "PATCH: an error status is an answer, not a failure");
	CHECK(strncmp(sv.request, "PATCH /x HTTP/1.1\r\n", 19) == 0, "PATCH: the request line");
	CHECK(strstr(sv.request, "\r\nContent-Type: application/merge-patch+json\r\n") != NULL,
	      "PATCH: the given Content-Type");
	CHECK(!strstr(sv.request, "100-continue"), "PATCH: no Expect: 100-continue");
	const char *b = strstr(sv.request, "\r\n\r\n");
	CHECK(b && strcmp(b + 4, "{\"a\":\"b\"}") == 0, "PATCH: the body is the serialized JSON");
	cJSON_Delete(patch);

	/* HTTP Basic when there is no bearer */
	struct httpc_req basic = get;
	basic.bearer = NULL;
	basic.user = "student1";
	basic.password = "labvm";
	sv.answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
	code = roundtrip(&sv, h, &basic, &body, msg, sizeof msg);
	CHECK(code == 200 &&
	          strstr(sv.request, "\r\nAuthorization: Basic c3R1ZGVudDE6bGFidm0=\r\n"),
	      "Basic: Authorization: Basic base64(user:password)");

	/* an answer over the cap fails the call */
	static char big[4096];
	char head[128];
	memset(big, 'x', 2000);
	snprintf(head, sizeof head,
	         "HTTP/1.1 200 OK\r\nContent-Length: 2000\r\nConnection: close\r\n\r\n");
	memmove(big + strlen(head), big, 2000);
	memcpy(big, head, strlen(head));
	sv.answer = big;
	code = roundtrip(&sv, h, &get, &body, msg, sizeof msg);
	CHECK(code == 0 && msg[0] && body.len <= get.max_body,
	      "a body over max_body fails the call (%ld, %s)", code, msg);
	CHECK(!strstr(msg, "t0ken-s3cret"), "the failure message has no credential");

	/* nobody listening: 0 and a reason */
	close(sv.fd);
	code = httpc_call(h, &get, &body, msg, sizeof msg);
	CHECK(code == 0 && msg[0], "a closed port: no status, a reason (%s)", msg);

	buf_free(&body);
	curl_easy_cleanup(h);
	curl_global_cleanup();
	return unit_done();
}
