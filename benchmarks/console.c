/* console.c - `labvm-bench console`: the console benchmark. Relay throughput
 * and keystroke latency through the bridge against a direct connection to the
 * VMI console, and (--rss) the bridge's memory with 1,000 open consoles.
 *
 *   throughput  `head -c MB | tr '\0' x | fold -w 99` in the guest; MB/s of
 *               console bytes received until the end marker (pty and all);
 *               median over --runs, paths interleaved within each run; and
 *               the bridge's CPU per MB relayed when it runs on this machine.
 *   latency     `stty -icanon; cat >/dev/null`, then one keystroke at a time:
 *               time until the tty's echo comes back; p50/p90/p99.
 *   rss         see rss.c.
 *
 * Paths: "direct" (the cluster's console subresource, wss, plain.kubevirt.io,
 * the read token), "bridge" (labvm-console's own port, --console-url) and
 * "frontend" (the front end's /console/, as the browser does). The bridge
 * paths use a fresh ticket from POST /api/sessions/{id}/console-ticket each
 * time. KubeVirt allows one console per VMI and a new one kicks the old, so
 * the paths run one after the other on the same lab, never at once. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "jsonx.h"
#include "ws.h"

/* ------------------------------------------------------------- the method */

static int fresh_prompt(struct wsx *x, struct wsc *c)
{
	wsc_clear(c);
	if (wsc_send(x, c, "\003\r", 2) < 0)
		return -1;
	wsc_drain(x, c, 0.3);
	wsc_clear(c);
	static const char cmd[] = "echo PROMPT-$((40+2))\r";
	if (wsc_send(x, c, cmd, sizeof cmd - 1) < 0 || wsc_until(x, c, "PROMPT-42\r\n", 15) < 0)
		return -1;
	wsc_drain(x, c, 0.2);
	wsc_clear(c);
	return 0;
}

static int throughput_once(struct wsx *x, struct wsc *c, int mb, double *mbps, size_t *bytes)
{
	char cmd[160];
	if (fresh_prompt(x, c) < 0)
		return -1;
	snprintf(cmd, sizeof cmd,
	         "head -c %d /dev/zero | tr '\\0' x | fold -w 99; echo DONE-$((40+2))\r",
	         mb * 1000 * 1000);
	size_t start = c->rx_total;
	c->tail_len = 0;
	double t0 = util_mono_s();
	if (wsc_send(x, c, cmd, strlen(cmd)) < 0)
		return -1;
	double end = t0 + 300;
	while (!wsc_tail_has(c, "DONE-42\r\n")) {
		if (c->state != WS_OPEN || util_mono_s() > end || bench_stop)
			return -1;
		wsx_pump(x);
		if (c->rx.len > RX_KEEP_MAX / 2)
			wsc_clear(c);
	}
	double dt = util_mono_s() - t0;
	*bytes = c->rx_total - start;
	*mbps = (double)*bytes / dt / 1e6;
	wsc_clear(c);
	return 0;
}

static int latency_once(struct wsx *x, struct wsc *c, int keys, struct dvec *out)
{
	static const char setup[] = "stty -icanon; cat >/dev/null\r";
	if (fresh_prompt(x, c) < 0 || wsc_send(x, c, setup, sizeof setup - 1) < 0)
		return -1;
	wsc_drain(x, c, 0.5);
	for (int i = 0; i < keys; i++) {
		char ch[2] = {(char)('a' + i % 26), '\0'};
		wsc_clear(c);
		double t0 = util_mono_s();
		if (wsc_send(x, c, ch, 1) < 0 || wsc_until(x, c, ch, 10) < 0)
			return -1;
		dvec_push(out, (util_mono_s() - t0) * 1000.0);
		struct timespec ts = {0, 5 * 1000000L};
		nanosleep(&ts, NULL);
	}
	wsc_send(x, c, "\003", 1);
	wsc_send(x, c, "stty icanon\r", 12);
	wsc_drain(x, c, 0.2);
	return 0;
}

/* ------------------------------------------------------------ connections */

enum path_kind { P_DIRECT, P_BRIDGE, P_FRONTEND, P_COUNT };
static const char *const PATH_NAME[P_COUNT] = {"direct", "bridge", "frontend"};

struct ctx {
	struct opts *o;
	struct wsx x;
	struct bapi api;
	struct helper lab; /* the lab the paths open consoles to */
	char *bearer;      /* SECRET */
	char *basic;       /* SECRET */
};

/* the browser's way: a single-use ticket, then the bridge's "open" status */
static int open_bridge(struct ctx *cx, struct wsc *c, const char *base, const char *auth)
{
	char *path = xasprintf("/api/sessions/%s/console-ticket", cx->lab.sid);
	cJSON *empty = jx_obj(), *t = NULL;
	long code = bapi_call(&cx->api, "POST", path, empty, &t);
	free(path);
	cJSON_Delete(empty);
	const char *url = kj_str(t, "url");
	if (code != 200 || !url) {
		snprintf(c->why, sizeof c->why, "console-ticket: HTTP %ld %s", code,
		         bapi_error_code(t));
		cJSON_Delete(t);
		return -1;
	}
	/* the ticket's url is a path on the same host */
	char *full = xasprintf("%s%s", base, url);
	cJSON_Delete(t);
	int rc = wsc_open(&cx->x, c, full, BRIDGE_PROTO, auth, 30);
	explicit_bzero(full, strlen(full));
	free(full);
	if (rc < 0)
		return -1;
	double end = util_mono_s() + 30;
	while (!strstr(c->last_text, "\"open\"")) {
		if (strstr(c->last_text, "\"closed\"")) {
			snprintf(c->why, sizeof c->why, "bridge refused: %.150s", c->last_text);
			return -1;
		}
		if (c->state != WS_OPEN || util_mono_s() > end || bench_stop) {
			if (!c->why[0])
				snprintf(c->why, sizeof c->why,
				         "no \"open\" status from the bridge");
			return -1;
		}
		wsx_pump(&cx->x);
	}
	return 0;
}

static char *ws_origin(const char *http_url)
{
	/* scheme and authority of the front end URL, ws instead of http */
	const char *h = strstr(http_url, "://");
	if (!h)
		return NULL;
	const char *slash = strchr(h + 3, '/');
	size_t n = slash ? (size_t)(slash - (h + 3)) : strlen(h + 3);
	int tls = strncmp(http_url, "https", 5) == 0;
	return xasprintf("%s://%.*s", tls ? "wss" : "ws", (int)n, h + 3);
}

static int open_path(struct ctx *cx, enum path_kind k, struct wsc *c)
{
	struct opts *o = cx->o;
	if (k == P_DIRECT) {
		char *url = xasprintf("%s/apis/subresources.kubevirt.io/v1/namespaces/%s/"
		                      "virtualmachineinstances/%s/console",
		                      o->kube_url, o->namespace_, cx->lab.vm);
		char *wss = xasprintf("wss%s", strstr(url, "://"));
		int rc = wsc_open(&cx->x, c, wss, KUBEVIRT_PROTO, cx->bearer, 30);
		free(url);
		free(wss);
		return rc;
	}
	if (k == P_BRIDGE) {
		char *base = ws_origin(o->console_url);
		/* straight to labvm-console: this benchmark is the front end */
		cx->x.forwarded_user = cx->lab.user;
		int rc = base ? open_bridge(cx, c, base, NULL) : -1;
		cx->x.forwarded_user = NULL;
		free(base);
		return rc;
	}
	char *base = ws_origin(o->url);
	int rc = base ? open_bridge(cx, c, base, cx->basic) : -1;
	free(base);
	return rc;
}

/* The stack's labvm-console (tests/stack writes $LABVM_STATE/pids/console),
 * when it runs on this machine; -1 otherwise. */
static pid_t bridge_pid_of_stack(void)
{
	const char *state = getenv("LABVM_STATE");
	if (!state || !*state)
		return -1;
	char *path = xasprintf("%s/pids/console", state);
	char *text = util_read_file(path, 64, NULL);
	free(path);
	long pid = text ? strtol(text, NULL, 10) : -1;
	free(text);
	return pid > 0 && kill((pid_t)pid, 0) == 0 ? (pid_t)pid : -1;
}

/* user + system CPU seconds of a process (all its threads) */
static double bridge_cpu_s(pid_t pid)
{
	char path[64], line[1024];
	unsigned long ut = 0, st = 0;
	if (pid <= 0)
		return 0;
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	char *got = fgets(line, sizeof line, f);
	fclose(f);
	char *p = got ? strrchr(line, ')') : NULL;
	/* after "pid (comm)": state ppid pgrp session tty tpgid flags minflt cminflt
	 * majflt cmajflt utime stime */
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return 0;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

int cmd_console(struct opts *o)
{
	struct ctx cx;
	int use[P_COUNT] = {0}, rc = 0;
	const char *lesson = o->lesson ? o->lesson : "linux-basics";
	struct dvec tp[P_COUNT], lat[P_COUNT], cpu = {0};
	pid_t bridge_pid = bridge_pid_of_stack();
	char *copyp = xstrdup(o->paths), *save = NULL;

	memset(&cx, 0, sizeof cx);
	memset(tp, 0, sizeof tp);
	memset(lat, 0, sizeof lat);
	cx.o = o;
	for (char *t = strtok_r(copyp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int k;
		for (k = 0; k < P_COUNT; k++)
			if (strcmp(PATH_NAME[k], t) == 0)
				use[k] = 1;
		if (!strcmp(t, "direct") + !strcmp(t, "bridge") + !strcmp(t, "frontend") == 0) {
			fprintf(stderr,
			        "labvm-bench console: unknown path %s (direct, bridge, "
			        "frontend)\n",
			        t);
			free(copyp);
			return 2;
		}
	}
	free(copyp);
	if (!o->url) {
		fprintf(stderr, "labvm-bench console: no --url (or LABVM_URL)\n");
		return 2;
	}
	if (use[P_DIRECT] && (!o->kube_url || !o->kube_token_file || !o->kube_ca)) {
		fprintf(stderr, "labvm-bench console: the direct path needs --kube-url, "
		                "--kube-token-file and --kube-ca\n");
		return 2;
	}
	if (use[P_BRIDGE] && !o->console_url) {
		fprintf(stderr, "labvm-bench console: the bridge path needs --console-url (or "
		                "LABVM_CONSOLE_URL); or leave it out with --paths\n");
		return 2;
	}
	if (bench_users_load(o) < 0)
		return 2;
	if (use[P_DIRECT]) {
		char *tok = util_read_file(o->kube_token_file, 64 * 1024, NULL);
		if (!tok) {
			fprintf(stderr, "labvm-bench console: cannot read %s\n",
			        o->kube_token_file);
			return 2;
		}
		util_rstrip(tok);
		cx.bearer = xasprintf("Bearer %s", tok);
		explicit_bzero(tok, strlen(tok));
		free(tok);
	}
	bench_user(o, 0, cx.lab.user);
	{
		char *up = xasprintf("%s:%s", cx.lab.user, bench_password(o, 0));
		char *b = util_b64(up, strlen(up));
		cx.basic = xasprintf("Basic %s", b);
		explicit_bzero(up, strlen(up));
		explicit_bzero(b, strlen(b));
		free(up);
		free(b);
	}
	if (wsx_init(&cx.x, use[P_DIRECT] ? o->kube_ca : NULL) < 0) {
		fprintf(stderr, "labvm-bench console: libwebsockets context failed\n");
		rc = 1;
		goto out;
	}
	if (bapi_init(&cx.api, o->url, cx.lab.user, bench_password(o, 0)) < 0) {
		rc = 1;
		goto out;
	}

	/* one ready lab */
	printf("labvm-bench console: a %s lab for %s; %d run(s) of %d MB and %d keystrokes per "
	       "path\n",
	       lesson, cx.lab.user, o->runs, o->mb, o->keys);
	fflush(stdout);
	if (bench_helper_start(o, &cx.api, lesson, &cx.lab, 600) < 0) {
		rc = 1;
		goto out;
	}
	printf("lab ready: session %s, VM %s\n", cx.lab.sid, cx.lab.vm);
	fflush(stdout);

	struct progress pr;
	size_t total = (size_t)o->runs * 2 * (size_t)(use[0] + use[1] + use[2]), done = 0;
	progress_start(&pr, "console", total, o->quiet);
	for (int run = 1; run <= o->runs && !bench_stop && !rc; run++) {
		for (int phase = 0; phase < 2 && !rc; phase++) {
			/* the first path rotates from run to run: whoever follows a
			 * direct connection finds the bridge's upstream kicked */
			for (int kk = 0; kk < P_COUNT && !bench_stop; kk++) {
				int k = (kk + run - 1) % P_COUNT;
				struct wsc c;
				if (!use[k])
					continue;
				if (open_path(&cx, (enum path_kind)k, &c) < 0) {
					fprintf(stderr, "\nlabvm-bench console: opening %s: %s\n",
					        PATH_NAME[k], c.why);
					wsc_close(&cx.x, &c);
					rc = 1;
					break;
				}
				if (phase == 0) {
					double mbps, cpu0 = bridge_cpu_s(bridge_pid);
					size_t bytes;
					if (throughput_once(&cx.x, &c, o->mb, &mbps, &bytes) < 0) {
						fprintf(stderr,
						        "\nlabvm-bench console: %s throughput run "
						        "failed%s%s\n",
						        PATH_NAME[k], c.why[0] ? ": " : "", c.why);
						rc = 1;
					} else {
						dvec_push(&tp[k], mbps);
						if (k == P_BRIDGE && bridge_pid > 0 && bytes)
							dvec_push(
							    &cpu,
							    (bridge_cpu_s(bridge_pid) - cpu0) *
							        1000 / ((double)bytes / 1e6));
					}
				} else if (latency_once(&cx.x, &c, o->keys, &lat[k]) < 0) {
					fprintf(
					    stderr,
					    "\nlabvm-bench console: %s latency run failed%s%s\n",
					    PATH_NAME[k], c.why[0] ? ": " : "", c.why);
					rc = 1;
				}
				wsc_close(&cx.x, &c);
				char extra[64];
				snprintf(extra, sizeof extra, "run %d, %s %s", run,
				         phase ? "latency" : "throughput", PATH_NAME[k]);
				progress_show(&pr, ++done, extra, 1);
				bench_sleep(0.5);
			}
		}
	}
	progress_end(&pr);

	cJSON *root = jx_obj(), *paths = jx_add_obj(root, "paths");
	jx_add_str(root, "command", "console");
	jx_add_str(root, "lesson", lesson);
	jx_add_num(root, "runs", o->runs);
	jx_add_num(root, "mb_per_run", o->mb);
	jx_add_num(root, "keys_per_run", o->keys);
	jx_add_str(root, "method",
	           "throughput: head -c MB /dev/zero | tr '\\0' x | fold -w 99 in "
	           "the guest, console bytes per second until the end marker, median "
	           "of runs; latency: one byte to `cat` with -icanon until its echo");
	printf("\n  %-9s %12s  %-28s %9s %9s %9s %9s\n", "path", "MB/s median", "runs", "RTT p50",
	       "p90", "p99", "max (ms)");
	double med[P_COUNT], p50[P_COUNT], p99[P_COUNT];
	for (int k = 0; k < P_COUNT; k++) {
		struct stats ts, ls;
		med[k] = p50[k] = p99[k] = NAN;
		if (!use[k])
			continue;
		stats_compute(tp[k].v, tp[k].n, &ts);
		stats_compute(lat[k].v, lat[k].n, &ls);
		med[k] = ts.p50;
		p50[k] = ls.p50;
		p99[k] = ls.p99;
		char runs[64] = "";
		for (size_t i = 0; i < tp[k].n && strlen(runs) < 50; i++)
			snprintf(runs + strlen(runs), sizeof runs - strlen(runs), "%s%.2f",
			         i ? " " : "", tp[k].v[i]);
		printf("  %-9s %12.2f  %-28s %9.3f %9.3f %9.3f %9.3f\n", PATH_NAME[k], ts.p50, runs,
		       ls.p50, ls.p90, ls.p99, ls.max);
		cJSON *e = jx_add_obj(paths, PATH_NAME[k]);
		cJSON *arr = jx_add_arr(e, "throughput_mbps_runs");
		for (size_t i = 0; i < tp[k].n; i++)
			jx_push(arr, cJSON_CreateNumber(bench_round(tp[k].v[i], 3)));
		if (isfinite(ts.p50))
			jx_add_num(e, "throughput_mbps_median", bench_round(ts.p50, 3));
		cJSON *l = jx_add_obj(e, "keystroke_rtt_ms");
		jx_add_num(l, "n", (double)ls.n);
		if (ls.n) {
			jx_add_num(l, "p50", bench_round(ls.p50, 3));
			jx_add_num(l, "p90", bench_round(ls.p90, 3));
			jx_add_num(l, "p99", bench_round(ls.p99, 3));
			jx_add_num(l, "max", bench_round(ls.max, 3));
		}
	}
	for (int k = P_BRIDGE; k < P_COUNT; k++) {
		if (!use[k] || !use[P_DIRECT] || !isfinite(med[k]) || !isfinite(med[P_DIRECT]))
			continue;
		char key[48];
		double ratio = med[k] / med[P_DIRECT];
		printf("  throughput ratio %s/direct: %.2f; added keystroke latency p50 %+.3f ms, "
		       "p99 %+.3f ms\n",
		       PATH_NAME[k], ratio, p50[k] - p50[P_DIRECT], p99[k] - p99[P_DIRECT]);
		snprintf(key, sizeof key, "throughput_ratio_%s", PATH_NAME[k]);
		jx_add_num(root, key, bench_round(ratio, 3));
		snprintf(key, sizeof key, "added_rtt_p50_ms_%s", PATH_NAME[k]);
		jx_add_num(root, key, bench_round(p50[k] - p50[P_DIRECT], 3));
		snprintf(key, sizeof key, "added_rtt_p99_ms_%s", PATH_NAME[k]);
		jx_add_num(root, key, bench_round(p99[k] - p99[P_DIRECT], 3));
	}
	if (cpu.n) {
		struct stats cs;
		stats_compute(cpu.v, cpu.n, &cs);
		printf("  bridge CPU while relaying: %.1f ms per MB (median), i.e. one core would "
		       "relay about %.0f MB/s\n",
		       cs.p50, cs.p50 > 0 ? 1000 / cs.p50 : INFINITY);
		jx_add_num(root, "bridge_cpu_ms_per_mb", bench_round(cs.p50, 3));
	}
	dvec_free(&cpu);
	printf(
	    "  (MB/s of console output received, pty and all; RTT = keystroke to its echo. "
	    "Paths run\n   one after the other on the same lab: a new console kicks the old.)\n");
	bench_write_figures(o, root);
	cJSON_Delete(root);
	if (o->rss && !bench_stop && console_rss(o, &cx.x, &cx.lab, lesson) < 0)
		rc = 1;
out:
	if (cx.lab.ours) {
		if (bench_helper_end(o, &cx.api, &cx.lab) == 0)
			printf("ended session %s\n", cx.lab.sid);
		else
			fprintf(stderr, "labvm-bench console: ending session %s failed\n",
			        cx.lab.sid);
	}
	for (int k = 0; k < P_COUNT; k++) {
		dvec_free(&tp[k]);
		dvec_free(&lat[k]);
	}
	bapi_cleanup(&cx.api);
	wsx_free(&cx.x);
	if (cx.bearer) {
		explicit_bzero(cx.bearer, strlen(cx.bearer));
		free(cx.bearer);
	}
	if (cx.basic) {
		explicit_bzero(cx.basic, strlen(cx.basic));
		free(cx.basic);
	}
	if (bench_stop)
		rc = 130;
	return rc;
}
