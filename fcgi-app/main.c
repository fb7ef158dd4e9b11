/* labvm.fcgi - the session API as a FastCGI program.
 *
 * lighttpd (bin-path) or spawn-fcgi hands over the listening socket on fd 0;
 * for Apache's mod_proxy_fcgi or systemd, `fcgi_listen` (or --listen) names
 * a unix socket path or host:port to open. Each process runs fcgi_threads
 * workers; each worker owns its database connection, cluster client and
 * agent client. SIGTERM finishes the requests in flight and exits (libfcgi
 * alone would wait for one more request, see PLATFORM.md). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>
#include <fcgiapp.h>

#include "admission.h"
#include "api.h"
#include "check_lesson.h"
#include "config.h"
#include "drive.h"
#include "lab.h"
#include "lesson.h"
#include "log.h"
#include "metrics.h"
#include "pool.h"
#include "runtime.h"
#include "stream.h"
#include "util.h"

static struct cfg cfg;
static struct lessons lessons;
static int listen_fd;
static int listen_unix; /* the web server talks to us over a unix socket */
static volatile sig_atomic_t stopping;

static void on_term(int sig)
{
	(void)sig;
	stopping = 1;
	FCGX_ShutdownPending();
	shutdown(listen_fd, SHUT_RDWR); /* wakes the accept()s */
}

/* One line per request. A quick successful read (GET, status < 400, under
 * 100 ms) is a debug line: status polls are most of the traffic, lighttpd's
 * or Apache's access log has them, and writing each one here cost about a
 * sixth of the status GET's throughput. Its Server-Timing header carries the
 * same figures. */
static void log_request(const struct req *r, const struct labctx *x)
{
	double ms = (util_mono_s() - r->t0) * 1000.0;
	int quiet = strcmp(r->method, "GET") == 0 && r->status < 400 && ms < 100.0;
	if (quiet && !log_enabled(LOG_DEBUG))
		return;
	log_msg(quiet ? LOG_DEBUG : LOG_INFO,
	        "%s %s %s %d %.1fms (db %.1f, kube %.1f/%u, agent %.1f)", r->user ? r->user : "-",
	        r->method, r->path, r->status, ms, x->db.ms, x->kube.ms, x->kube.calls,
	        x->agent.ms);
}

/* Read what is left of the request's stdin (a body the route did not
 * want, or just its end record), at most STDIN_DRAIN_MAX bytes: 1 when it
 * ended (the web server writes nothing more on this connection). */
#define STDIN_DRAIN_MAX (1 << 20)
static int stdin_drained(FCGX_Request *fr)
{
	char junk[4096];
	long total = 0;
	int n;
	while (total <= STDIN_DRAIN_MAX && (n = FCGX_GetStr(junk, sizeof junk, fr->in)) > 0)
		total += n;
	return FCGX_HasSeenEOF(fr->in) == EOF && !FCGX_GetError(fr->in);
}

static void *worker(void *arg)
{
	struct labctx x;
	FCGX_Request *fr = NULL;
	(void)arg;

	if (labctx_init(&x, &cfg, &lessons) < 0)
		return NULL;
	while (!stopping) {
		int rc;
		/* a request handed to the stream thread is its own: take a new one */
		if (!fr) {
			fr = malloc(sizeof *fr);
			if (!fr || FCGX_InitRequest(fr, listen_fd, 0) != 0) {
				log_err("FCGX_InitRequest failed");
				break;
			}
		}
		/* every worker waits in accept() at once: Linux wakes one per
		 * connection (no herd), and libfcgi keeps no shared state there,
		 * so no lock to hand around (a futex wake and wait per request) */
		rc = stopping ? -1 : FCGX_Accept_r(fr);
		if (rc < 0)
			break;
		struct req r;
		req_init(&r, fr, &x);
		router_dispatch(&r);
		log_request(&r, &x);
		api_metrics_request_done(&r);
		int adopted = r.adopted;
		req_reset(&r);
		if (adopted) {
			fr = NULL;
		} else {
			/* on a unix socket the answer is delivered whatever happens
			 * next: once the web server has sent all it will send (the
			 * request's stdin read to its end), close at once instead
			 * of libfcgi's shutdown() and read until the web server
			 * closes (a TCP RST guard that held this worker for a round
			 * trip through the web server's event loop per request) */
			if (listen_unix && stdin_drained(fr))
				FCGX_Detach(fr);
			FCGX_Finish_r(fr);
			pool_after_request(
			    &x); /* a claim's replacement, after the answer went out */
		}
	}
	if (fr) {
		FCGX_Free(fr, 1);
		free(fr);
	}
	labctx_cleanup(&x);
	return NULL;
}

/* What to listen on. A socket path is used as it is. On TCP labvm trusts
 * whoever connects (REMOTE_USER comes from the connection), so a bare port
 * or ":port" means loopback, and any other address needs
 * FCGI_WEB_SERVER_ADDRS (libfcgi then accepts only those peers). */
static char *listen_address(const char *spec, char *err, size_t errlen)
{
	const char *colon = strrchr(spec, ':');
	int is_port = *spec && strspn(spec, "0123456789") == strlen(spec);
	if (spec[0] == '/' || (!colon && !is_port))
		return xstrdup(spec);
	if (is_port || colon == spec)
		return xasprintf("127.0.0.1:%s", is_port ? spec : colon + 1);
	const char *allow = getenv("FCGI_WEB_SERVER_ADDRS");
	int loopback = strncmp(spec, "127.", 4) == 0 || strncmp(spec, "localhost:", 10) == 0 ||
	               strncmp(spec, "[::1]:", 6) == 0;
	if (!loopback && !(allow && *allow)) {
		snprintf(err, errlen,
		         "%s is not a loopback address: set FCGI_WEB_SERVER_ADDRS to the web "
		         "server's addresses (labvm trusts whoever connects), or listen on "
		         "127.0.0.1 or a socket path",
		         spec);
		return NULL;
	}
	if (!loopback)
		log_info("accepting FastCGI connections on %s from %s only", spec, allow);
	return xstrdup(spec);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: labvm.fcgi [--listen SOCKET|HOST:PORT] [--check]\n"
	           "  Config from $LABVM_CONF (default " CFG_DEFAULT_PATH ").\n"
	           "  --check  load and validate the config and lessons, then exit\n"
	           "  --check LESSON.json...  check lesson files (no config needed): every rule,\n"
	           "           the setup and grader shell syntax, the rendered cloud-config\n");
}

int main(int argc, char **argv)
{
	char err[1024];
	const char *listen = NULL;
	int check_only = 0;

	log_init("labvm.fcgi", LOG_INFO);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--listen") == 0 && i + 1 < argc) {
			listen = argv[++i];
		} else if (strcmp(argv[i], "--check") == 0) {
			if (i + 1 < argc &&
			    argv[i + 1][0] != '-') /* the teacher's check of files */
				return check_lesson_files(argc - i - 1, argv + i + 1);
			check_only = 1;
		} else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (cfg_load(cfg_path(), &cfg, CFG_NEED_TICKET_KEY, err, sizeof err) < 0) {
		log_err("config: %s", err);
		return 1;
	}
	if (lessons_load(cfg.lessons_dir, &lessons, err, sizeof err) < 0) {
		log_err("lessons: %s", err);
		return 1;
	}
	/* a lesson whose machines can never all fit its capacity: refused by
	 * --check, and a warning at start (admission answers never_fits) */
	for (size_t i = 0; i < lessons.n; i++) {
		const struct lesson *l = &lessons.v[i];
		const struct runtime_ops *rt = runtime_of(l->runtime);
		size_t nm = lesson_nmachines(l);
		struct admission_facts f;
		admission_facts_init(&f, ADM_VIEW, (long)nm, rt->capacity(&cfg));
		f.in_use = 0;
		if (admission_decide(&f).verdict != ADM_NEVER_FITS)
			continue;
		if (check_only) {
			log_err("lessons: lesson \"%s\" has %zu machines but %s_capacity is %d: it "
			        "could never start",
			        l->id, nm, rt->name, rt->capacity(&cfg));
			return 1;
		}
		log_warn("lesson \"%s\" has %zu machines but %s_capacity is %d: it will never "
		         "start",
		         l->id, nm, rt->name, rt->capacity(&cfg));
	}
	/* an idle end the warning would announce before anyone could be idle */
	for (size_t i = 0; i < lessons.n; i++) {
		const struct lesson *l = &lessons.v[i];
		int idle = lab_idle_s(&cfg, l);
		if (idle <= 0 || idle > cfg.idle_warning_s)
			continue;
		if (check_only) {
			log_err(
			    "lessons: lesson \"%s\": its idle end (%d s without activity) is not "
			    "longer than idle_warning_s (%d s): the warning would come at once",
			    l->id, idle, cfg.idle_warning_s);
			return 1;
		}
		log_warn("lesson \"%s\": idle end %d s, idle_warning_s %d s: the warning comes at "
		         "once",
		         l->id, idle, cfg.idle_warning_s);
	}
	/* the reaper spares young unknown objects for orphan_grace_s: at least
	 * the longest start of the largest lesson (refused by --check, which the
	 * service runs first; a warning at start; the reaper itself uses that
	 * much while a start is in flight) */
	const char *most = NULL;
	int grace = lab_min_orphan_grace_s(&cfg, &lessons, &most);
	if (cfg.orphan_grace_s < grace) {
		size_t nm = 1;
		const struct lesson *ml = most ? lessons_find(&lessons, most) : NULL;
		if (ml)
			nm = lesson_nmachines(ml);
		if (check_only) {
			log_err(
			    "orphan_grace_s: %d is shorter than the longest start of lesson \"%s\" "
			    "(%zu machines: %d s with kube_timeout_ms %d and "
			    "capacity_lock_timeout_ms %d): the reaper could delete the objects of "
			    "a start in flight; set orphan_grace_s = %d or more",
			    cfg.orphan_grace_s, most ? most : "-", nm, grace, cfg.kube_timeout_ms,
			    cfg.capacity_lock_timeout_ms, grace);
			return 1;
		}
		log_warn(
		    "orphan_grace_s %d is shorter than the longest start of lesson \"%s\" (%zu "
		    "machines: %d s): set orphan_grace_s = %d or more (the reaper uses %d s "
		    "while a start is in flight)",
		    cfg.orphan_grace_s, most ? most : "-", nm, grace, grace, grace);
	}
	if (check_only) {
		printf("labvm.fcgi: config %s and %zu lessons are valid\n", cfg_path(), lessons.n);
		return 0;
	}
	if (!listen && cfg.fcgi_listen[0])
		listen = cfg.fcgi_listen;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0 || FCGX_Init() != 0) {
		log_err("library initialisation failed");
		return 1;
	}
	if (listen) {
		char *addr = listen_address(listen, err, sizeof err);
		if (!addr) {
			log_err("listen: %s", err);
			return 2;
		}
		umask(0007);
		listen_fd = FCGX_OpenSocket(addr, 128);
		free(addr);
		if (listen_fd < 0) {
			log_err("cannot listen on %s: %s", listen, strerror(errno));
			return 1;
		}
	} else if (FCGX_IsCGI()) {
		log_err("not started by a FastCGI server: use --listen or fcgi_listen");
		return 2;
	}

	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	listen_unix =
	    getsockname(listen_fd, (struct sockaddr *)&ss, &sl) == 0 && ss.ss_family == AF_UNIX;

	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_term; /* no SA_RESTART: accept() must return */
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);

	int n = cfg.fcgi_threads;
	pthread_t *th = calloc((size_t)n, sizeof *th);
	if (!th)
		return 1;
	log_info("serving %zu lessons, environment %s, namespace %s, %d workers", lessons.n,
	         cfg.environment, cfg.namespace_, n);
	for (int i = 0; i < n; i++)
		if (pthread_create(&th[i], NULL, worker, NULL) != 0) {
			log_err("cannot start worker %d", i);
			return 1;
		}
	metrics_flusher_start(cfg.database, cfg.environment);
	if (stream_start(&cfg, &lessons) < 0 || drive_start(&cfg, &lessons) < 0)
		return 1;
	for (int i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	metrics_flusher_stop();
	free(th);
	stream_stop();
	drive_stop();
	log_info("stopped");
	lessons_free(&lessons);
	cfg_free(&cfg);
	curl_global_cleanup();
	return 0;
}
