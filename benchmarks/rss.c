/* rss.c - `labvm-bench console --rss`: the bridge's memory with 1,000 open
 * consoles.
 *
 * VmRSS of a private labvm-console (the stack's labvm.conf, its own port)
 * with RSS_CONSOLES idle consoles open, 3 s after the last one opened:
 *   shared    browsers sharing the consoles of up to RSS_LABS real labs
 *             (first one browser per lab: "rss_sim_separate");
 *   separate  every browser with its own upstream, to a minimal stand-in of
 *             the KubeVirt console endpoint started here (TLS,
 *             plain.kubevirt.io, a prompt and an echo: no cluster boots 1,000
 *             guests on one machine), the sessions as database rows of a
 *             private environment. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "db.h"
#include "jsonx.h"
#include "ticket.h"
#include "ws.h"

#define RSS_CONSOLES 1000
#define RSS_LABS     4
#define RSS_ENV      "bench-console"
#define FAKE_BANNER  "\r\nbench login: root (automatic login)\r\nroot@bench:~# "

struct spec {
	char sid[40], user[64], vm[80];
};

struct rss {
	struct opts *o;
	struct wsx *x;
	const struct helper *lab;
	char tmp[64];
	struct cfg cfg;
	struct wsc *c; /* RSS_CONSOLES */
	int nc;        /* started */
};

static long rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = 0;
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "VmRSS: %ld", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static int loopback_port(int port, int *out)
{
	struct sockaddr_in a;
	socklen_t n = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), rc = -1;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons((uint16_t)port);
	if (fd < 0)
		return -1;
	if (out) { /* a free port: bind to 0 */
		if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
		    getsockname(fd, (struct sockaddr *)&a, &n) == 0) {
			*out = ntohs(a.sin_port);
			rc = 0;
		}
	} else if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) { /* answers? */
		rc = 0;
	}
	close(fd);
	return rc;
}

/* in a child: nothing of the parent's but stdin/out/err and keep */
static void child_fds(int keep)
{
	long max = sysconf(_SC_OPEN_MAX);
	for (int fd = 3; fd < (max > 0 && max < 65536 ? max : 65536); fd++)
		if (fd != keep)
			close(fd);
	signal(SIGPIPE, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGTERM, SIG_DFL);
}

static void child_stop(pid_t pid, const char *what)
{
	int st = 0;
	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	double end = util_mono_s() + 10;
	while (waitpid(pid, &st, WNOHANG) == 0) {
		if (util_mono_s() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			break;
		}
		struct timespec ts = {0, 20 * 1000000L};
		nanosleep(&ts, NULL);
	}
	if (what && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
		printf("  %s exited with status %d\n", what,
		       WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

/* A private labvm-console: the stack's labvm.conf with the overrides (key,
 * value, ..., NULL) on a port of its own. Its pid (and base URL), or -1. */
static pid_t bridge_start(struct rss *r, const char *const *kv, char *base, size_t bn)
{
	int port;
	char *text = util_read_file(cfg_path(), 1 << 20, NULL), *save = NULL;
	if (!text || loopback_port(0, &port) < 0) {
		fprintf(stderr, "labvm-bench console: rss: cannot read %s\n", cfg_path());
		free(text);
		return -1;
	}
	char *conf = xasprintf("%s/bridge-%d.conf", r->tmp, port);
	char *logf = xasprintf("%s/bridge-%d.log", r->tmp, port);
	FILE *f = fopen(conf, "w");
	for (char *l = strtok_r(text, "\n", &save); f && l; l = strtok_r(NULL, "\n", &save)) {
		size_t k = strspn(l, " \t"), n = strcspn(l + k, " \t=");
		int skip = (n == 14 && strncmp(l + k, "console_listen", n) == 0) ||
		           (n == 9 && strncmp(l + k, "log_level", n) == 0);
		for (int i = 0; kv[i] && !skip; i += 2)
			skip = strlen(kv[i]) == n && strncmp(l + k, kv[i], n) == 0;
		if (!skip)
			fprintf(f, "%s\n", l);
	}
	if (f) {
		for (int i = 0; kv[i]; i += 2)
			fprintf(f, "%s = %s\n", kv[i], kv[i + 1]);
		fprintf(f, "console_listen = 127.0.0.1:%d\nlog_level = warn\n", port);
		fclose(f);
	}
	free(text);
	const char *bin = getenv("LABVM_BIN");
	char exe[4096], *bridge = NULL;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (bin && *bin)
		bridge = xasprintf("%s/labvm-console", bin);
	else if (n > 0 && (exe[n] = '\0', 1))
		bridge = xasprintf("%s/labvm-console", dirname(exe));
	pid_t pid = f && bridge ? fork() : -1;
	if (pid == 0) {
		int fd = open(logf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		child_fds(-1);
		setenv("LABVM_CONF", conf, 1);
		execl(bridge, bridge, (char *)NULL);
		_exit(127);
	}
	double end = util_mono_s() + 10;
	while (pid > 0 && loopback_port(port, NULL) < 0) {
		if (waitpid(pid, NULL, WNOHANG) != 0 || util_mono_s() > end) {
			fprintf(stderr,
			        "labvm-bench console: rss: the private bridge did not start; "
			        "see %s\n",
			        logf);
			child_stop(pid, NULL);
			pid = -1;
			break;
		}
		struct timespec ts = {0, 50 * 1000000L};
		nanosleep(&ts, NULL);
	}
	snprintf(base, bn, "ws://127.0.0.1:%d", port);
	free(conf);
	free(logf);
	free(bridge);
	return pid;
}

/* consoles [from, to) of specs (round robin) through the bridge at base, in
 * batches, each until the bridge says "open". 0, or -1 (message on stderr). */
static int open_many(struct rss *r, const char *base, const struct spec *sp, int nsp, int from,
                     int to, int batch)
{
	struct wsx *x = r->x;
	for (int i = from; i < to; i += batch) {
		int end = i + batch < to ? i + batch : to;
		for (int j = i; j < end; j++) {
			const struct spec *s = &sp[j % nsp];
			char *t = ticket_make(r->cfg.ticket_key, r->cfg.ticket_key_len, s->sid,
			                      s->user, s->vm, (int64_t)time(NULL) + 120);
			char *url = xasprintf("%s%s%s?ticket=%s", base, r->cfg.console_path, s->sid,
			                      t ? t : "");
			wsc_start(x, &r->c[j], url, BRIDGE_PROTO, NULL);
			explicit_bzero(url, strlen(url));
			free(url);
			if (t) {
				explicit_bzero(t, strlen(t));
				free(t);
			}
			r->nc = j + 1;
		}
		double deadline = util_mono_s() + 30;
		for (;;) {
			int pending = 0, bad = -1;
			for (int j = i; j < end && bad < 0; j++) {
				const struct wsc *c = &r->c[j];
				if (strstr(c->last_text, "\"closed\"") || c->state == WS_FAILED ||
				    c->state == WS_CLOSED)
					bad = j;
				else if (c->state != WS_OPEN || !strstr(c->last_text, "\"open\""))
					pending++;
			}
			if (bad < 0 && !pending)
				break;
			if (bad >= 0 || util_mono_s() > deadline || bench_stop) {
				const struct wsc *c = &r->c[bad >= 0 ? bad : i];
				fprintf(stderr, "labvm-bench console: rss: console %d of %d: %s\n",
				        (bad >= 0 ? bad : i) + 1, to,
				        c->last_text[0] ? c->last_text
				        : c->why[0]     ? c->why
				                        : "no \"open\" within 30 s");
				return -1;
			}
			wsx_pump(x);
		}
	}
	return 0;
}

static void close_many(struct rss *r)
{
	for (int j = 0; j < r->nc; j++)
		if (r->c[j].wsi && r->c[j].state == WS_OPEN) {
			r->c[j].closing = 1;
			lws_callback_on_writable(r->c[j].wsi);
		}
	double end = util_mono_s() + 5;
	for (int left = 1; left && util_mono_s() < end;) {
		left = 0;
		for (int j = 0; j < r->nc; j++)
			left += r->c[j].wsi != NULL;
		if (left)
			wsx_pump(r->x);
	}
	for (int j = 0; j < r->nc; j++)
		wsc_close(r->x, &r->c[j]);
	r->nc = 0;
}

static cJSON *rss_figures(cJSON *res, const char *key, int browsers, int upstreams, long idle,
                          long rss, const char *per, double open_s)
{
	cJSON *e = jx_add_obj(res, key);
	jx_add_num(e, "browsers", browsers);
	jx_add_num(e, "upstreams", upstreams);
	jx_add_num(e, "rss_idle_kib", (double)idle);
	jx_add_num(e, "rss_kib", (double)rss);
	jx_add_num(e, per, bench_round((double)(rss - idle) / browsers, 3));
	if (open_s >= 0)
		jx_add_num(e, "open_s", bench_round(open_s, 3));
	return e;
}

static int rss_shared(struct rss *r, const char *lesson, cJSON *res)
{
	struct opts *o = r->o;
	struct helper more[RSS_LABS - 1];
	struct spec sp[RSS_LABS];
	int nlabs = bench_user_count(o) < RSS_LABS ? bench_user_count(o) : RSS_LABS, ns = 0,
	    rc = -1;
	char base[64], maxper[16];

	memset(more, 0, sizeof more);
	for (int i = 1; i < nlabs; i++)
		more[i - 1].uidx = i;
	if (nlabs > 1 && bench_helpers_start(o, lesson, more, nlabs - 1) < 0)
		printf("  not every lab started; continuing with the ready ones\n");
	bench_copy(sp[0].sid, sizeof sp[0].sid, r->lab->sid);
	bench_copy(sp[0].user, sizeof sp[0].user, r->lab->user);
	bench_copy(sp[0].vm, sizeof sp[0].vm, r->lab->vm);
	ns = 1;
	for (int i = 0; i < nlabs - 1; i++)
		if (more[i].ready) {
			bench_copy(sp[ns].sid, sizeof sp[ns].sid, more[i].sid);
			bench_copy(sp[ns].user, sizeof sp[ns].user, more[i].user);
			bench_copy(sp[ns].vm, sizeof sp[ns].vm, more[i].vm);
			ns++;
		}
	snprintf(maxper, sizeof maxper, "%d", RSS_CONSOLES);
	const char *kv[] = {"console_max_per_session", maxper, "console_linger_s", "5", NULL};
	pid_t pid = bench_stop ? -1 : bridge_start(r, kv, base, sizeof base);
	if (pid < 0)
		goto out;
	bench_sleep(0.5);
	long idle = rss_kib(pid);
	/* one browser per lab: as many separate upstreams as there are labs */
	if (open_many(r, base, sp, ns, 0, ns, 10) < 0)
		goto stop;
	bench_sleep(3);
	long r1 = rss_kib(pid);
	rss_figures(res, "rss_sim_separate", ns, ns, idle, r1, "per_console_kib", -1);
	printf(
	    "  rss sim separate: %d browsers on %d lab consoles: %.1f MiB (idle bridge %.1f MiB, "
	    "%.1f KiB per console)\n",
	    ns, ns, r1 / 1024.0, idle / 1024.0, (double)(r1 - idle) / ns);
	fflush(stdout);
	double t0 = util_mono_s();
	if (open_many(r, base, sp, ns, ns, RSS_CONSOLES, 50) < 0)
		goto stop;
	double took = util_mono_s() - t0;
	bench_sleep(3);
	long r2 = rss_kib(pid);
	rss_figures(res, "rss_shared", RSS_CONSOLES, ns, idle, r2, "per_browser_kib", took);
	printf("  rss shared: %d browsers on %d lab consoles: %.1f MiB (idle bridge %.1f MiB, "
	       "%.1f KiB per browser; opened in %.1f s)\n",
	       RSS_CONSOLES, ns, r2 / 1024.0, idle / 1024.0, (double)(r2 - idle) / RSS_CONSOLES,
	       took);
	rc = 0;
stop:
	close_many(r);
	child_stop(pid, "the private bridge");
out:
	for (int i = 0; i < nlabs - 1; i++)
		bench_helper_end(o, NULL, &more[i]);
	return rc;
}

/* ---- the stand-in console endpoint (a child process) */

struct fake_pss {
	unsigned char *out; /* LWS_PRE headroom */
	size_t len;
};

static void fake_queue(struct lws *wsi, struct fake_pss *p, const void *data, size_t n)
{
	p->out = xrealloc(p->out, LWS_PRE + p->len + n);
	memcpy(p->out + LWS_PRE + p->len, data, n);
	p->len += n;
	lws_callback_on_writable(wsi);
}

static int cb_fake(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                   size_t len)
{
	struct fake_pss *p = user;
	switch (reason) {
	case LWS_CALLBACK_ESTABLISHED:
		fake_queue(wsi, p, FAKE_BANNER, sizeof FAKE_BANNER - 1);
		return 0;
	case LWS_CALLBACK_RECEIVE:
		fake_queue(wsi, p, in, len);
		return 0;
	case LWS_CALLBACK_SERVER_WRITEABLE:
		if (p->len) {
			int m = lws_write(wsi, p->out + LWS_PRE, p->len, LWS_WRITE_BINARY);
			p->len = 0;
			if (m < 0)
				return -1;
		}
		return 0;
	case LWS_CALLBACK_CLOSED:
		free(p->out);
		p->out = NULL;
		return 0;
	default:
		break;
	}
	return lws_callback_http_dummy(wsi, reason, user, in, len);
}

static const struct lws_protocols FAKE_PROTOCOLS[] = {
    {"http", lws_callback_http_dummy, 0, 0, 0, NULL, 0},
    {KUBEVIRT_PROTO, cb_fake, sizeof(struct fake_pss), 4096, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* A self-signed certificate for 127.0.0.1 (its own CA) and the endpoint on a
 * free port: its pid, or -1. */
static pid_t fake_start(struct rss *r, int *port, char *crt, char *key, size_t n)
{
	int st = 0, pfd[2];
	snprintf(crt, n, "%s/fake.crt", r->tmp);
	snprintf(key, n, "%s/fake.key", r->tmp);
	pid_t pid = fork();
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		child_fds(-1);
		execlp("openssl", "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
		       "-keyout", key, "-out", crt, "-days", "1", "-subj", "/CN=127.0.0.1",
		       "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", (char *)NULL);
		_exit(127);
	}
	while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (pid < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || loopback_port(0, port) < 0 ||
	    pipe(pfd) < 0) {
		fprintf(stderr,
		        "labvm-bench console: rss: no certificate for the stand-in (openssl)\n");
		return -1;
	}
	pid = fork();
	if (pid == 0) {
		struct lws_context_creation_info info;
		child_fds(pfd[1]);
		memset(&info, 0, sizeof info);
		lws_set_log_level(LLL_ERR, NULL);
		info.port = *port;
		info.iface = "127.0.0.1";
		info.protocols = FAKE_PROTOCOLS;
		info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
		info.ssl_cert_filepath = crt;
		info.ssl_private_key_filepath = key;
		struct lws_context *ctx = lws_create_context(&info);
		if (!ctx || write(pfd[1], "r", 1) != 1)
			_exit(1);
		close(pfd[1]);
		for (;;)
			lws_service(ctx, 0);
	}
	close(pfd[1]);
	char c = 0;
	struct pollfd pl = {pfd[0], POLLIN, 0};
	if (pid < 0 || poll(&pl, 1, 10000) != 1 || read(pfd[0], &c, 1) != 1 || c != 'r') {
		fprintf(stderr, "labvm-bench console: rss: the stand-in endpoint did not start\n");
		child_stop(pid, NULL);
		pid = -1;
	}
	close(pfd[0]);
	return pid;
}

static int rss_separate(struct rss *r, cJSON *res)
{
	struct opts *o = r->o;
	char crt[128], key[128], base[64], api[64];
	int port, rc = -1, n = 0;
	struct spec *sp = NULL;
	struct db d;
	const char *env[] = {RSS_ENV};

	pid_t fake = fake_start(r, &port, crt, key, sizeof crt);
	if (fake < 0)
		return -1;
	db_init(&d, o->database ? o->database : r->cfg.database);
	char count[16];
	snprintf(count, sizeof count, "%d", RSS_CONSOLES);
	const char *p2[] = {RSS_ENV, count};
	PGresult *q = NULL;
	if (db_cmd(&d, "DELETE FROM sessions WHERE environment = $1", 1, env) < 0 ||
	    db_cmd(
	        &d,
	        "INSERT INTO sessions (id, user_name, lesson, runtime, environment, state, "
	        "expires_at) SELECT gen_random_uuid(), 'bench-console-' || i, 'bench', 'vm', $1, "
	        "'ready', now() + interval '1 hour' FROM generate_series(0, $2::int - 1) AS i",
	        2, p2) < 0 ||
	    db_cmd(&d,
	           "INSERT INTO session_vms (session_id, vm_name, secret_name, agent_token) "
	           "SELECT id, 'bench-c-' || substr(user_name, 15), 'none', 'none' FROM sessions "
	           "WHERE environment = $1",
	           1, env) < 0 ||
	    !(q = db_exec(&d,
	                  "SELECT s.id, s.user_name, v.vm_name FROM sessions s JOIN session_vms v "
	                  "ON v.session_id = s.id WHERE s.environment = $1",
	                  1, env))) {
		fprintf(stderr, "labvm-bench console: rss: database: %s\n", d.msg);
		goto out;
	}
	n = PQntuples(q);
	sp = xcalloc((size_t)n + 1, sizeof *sp);
	for (int i = 0; i < n; i++) {
		bench_copy(sp[i].sid, sizeof sp[i].sid, db_val(q, i, 0));
		bench_copy(sp[i].user, sizeof sp[i].user, db_val(q, i, 1));
		bench_copy(sp[i].vm, sizeof sp[i].vm, db_val(q, i, 2));
	}
	PQclear(q);
	snprintf(api, sizeof api, "https://127.0.0.1:%d", port);
	const char *kv[] = {"environment",      RSS_ENV, "kube_api", api, "kube_ca_file", crt,
	                    "console_linger_s", "5",     NULL};
	pid_t pid = bench_stop ? -1 : bridge_start(r, kv, base, sizeof base);
	if (pid < 0)
		goto out;
	bench_sleep(0.5);
	long idle = rss_kib(pid);
	double t0 = util_mono_s();
	if (open_many(r, base, sp, n, 0, n, 50) < 0)
		goto stop;
	double took = util_mono_s() - t0;
	bench_sleep(3);
	long rr = rss_kib(pid);
	/* still alive and relaying: a keystroke on a few of them */
	for (int j = 0; j<n; j += n / 10> 0 ? n / 10 : 1) {
		wsc_clear(&r->c[j]);
		if (wsc_send(r->x, &r->c[j], "k", 1) < 0 ||
		    wsc_until(r->x, &r->c[j], "k", 10) < 0) {
			fprintf(stderr, "labvm-bench console: rss: console %d does not echo\n",
			        j + 1);
			goto stop;
		}
	}
	rss_figures(res, "rss_separate", n, n, idle, rr, "per_console_kib", took);
	printf("  rss separate: %d browsers, %d upstreams (TLS) to a stand-in endpoint: %.1f MiB "
	       "(idle bridge %.1f MiB, %.1f KiB per console; opened in %.1f s)\n",
	       n, n, rr / 1024.0, idle / 1024.0, (double)(rr - idle) / n, took);
	rc = 0;
stop:
	close_many(r);
	child_stop(pid, "the private bridge");
out:
	db_cmd(&d, "DELETE FROM sessions WHERE environment = $1", 1, env);
	db_close(&d);
	free(sp);
	child_stop(fake, NULL);
	return rc;
}

static void rm_tree(const char *dir)
{
	DIR *dh = opendir(dir);
	struct dirent *e;
	while (dh && (e = readdir(dh)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			char *p = xasprintf("%s/%s", dir, e->d_name);
			unlink(p);
			free(p);
		}
	if (dh)
		closedir(dh);
	rmdir(dir);
}

int console_rss(struct opts *o, struct wsx *x, const struct helper *lab, const char *lesson)
{
	struct rss r;
	char err[512];
	int rc = 0;

	memset(&r, 0, sizeof r);
	r.o = o;
	r.x = x;
	r.lab = lab;
	printf("\nrss: a private labvm-console with %d idle consoles (shared: up to %d labs; "
	       "separate: a stand-in endpoint)\n",
	       RSS_CONSOLES, RSS_LABS);
	fflush(stdout);
	if (cfg_load(cfg_path(), &r.cfg, CFG_NEED_TICKET_KEY, err, sizeof err) < 0) {
		fprintf(stderr, "labvm-bench console: rss: %s (LABVM_CONF)\n", err);
		return -1;
	}
	snprintf(r.tmp, sizeof r.tmp, "/tmp/labvm-bench-rss-XXXXXX");
	if (!mkdtemp(r.tmp)) {
		fprintf(stderr, "labvm-bench console: rss: mkdtemp: %s\n", strerror(errno));
		cfg_free(&r.cfg);
		return -1;
	}
	r.c = xcalloc(RSS_CONSOLES, sizeof *r.c);
	cJSON *res = jx_obj();
	if (rss_shared(&r, lesson, res) < 0 || bench_stop || rss_separate(&r, res) < 0)
		rc = -1;
	if (bench_mkdirs(o->out_dir) == 0) {
		char *json = xasprintf("%s/%s-rss.json", o->out_dir, o->name);
		if (bench_write_json(json, res) == 0)
			printf("\nfigures: %s\n", json);
		free(json);
	}
	cJSON_Delete(res);
	free(r.c);
	rm_tree(r.tmp);
	cfg_free(&r.cfg);
	return rc;
}
