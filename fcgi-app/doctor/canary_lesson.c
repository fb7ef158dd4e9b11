/* canary_lesson.c - check 6's lesson, its sweep and its fence probe (see
 * canary.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canary.h"
#include "jsonx.h"
#include "runtime.h"
#include "session.h"
#include "session_change.h"
#include "util.h"

#define CANARY_DIR   "/root/labvm-canary"
#define CANARY_PROBE CANARY_DIR "/probe.py"

/* The fence probe, a lab file of the canary: one TCP connection to each
 * NAME=HOST:PORT at once, at most T seconds each; one line each, in order:
 * "NAME HOST:PORT open|refused|timeout|unresolved|error-ERRNO ADDRESS" (the
 * address HOST resolved to inside the lab, "-" when none). A policy's
 * denial is a drop (Calico, Cilium): a timeout. */
static const char probe_py[] =
    "import socket, sys, threading\n"
    "T = float(sys.argv[1])\n"
    "ARGS = [a.split('=', 1) for a in sys.argv[2:]]\n"
    "OUT = [('unresolved', '-')] * len(ARGS)\n"
    "def one(i, hp):\n"
    "    host, _, port = hp.rpartition(':')\n"
    "    host = host.strip('[]')\n"
    "    try:\n"
    "        fam, typ, pro, _, addr = socket.getaddrinfo(host, int(port), 0, "
    "socket.SOCK_STREAM)[0]\n"
    "    except (OSError, ValueError):\n"
    "        return\n"
    "    s = socket.socket(fam, typ, pro)\n"
    "    s.settimeout(T)\n"
    "    try:\n"
    "        s.connect(addr)\n"
    "        r = 'open'\n"
    "    except ConnectionRefusedError:\n"
    "        r = 'refused'\n"
    "    except socket.timeout:\n"
    "        r = 'timeout'\n"
    "    except OSError as e:\n"
    "        r = 'error-%d' % (e.errno or 0)\n"
    "    finally:\n"
    "        s.close()\n"
    "    OUT[i] = (r, addr[0])\n"
    "ts = [threading.Thread(target=one, args=(i, a[1])) for i, a in enumerate(ARGS)]\n"
    "for t in ts:\n"
    "    t.start()\n"
    "for t in ts:\n"
    "    t.join()\n"
    "for (name, hp), (r, ip) in zip(ARGS, OUT):\n"
    "    print(name, hp, r, ip)\n";

#define PROBE_TIMEOUT_S 3

/* The first containerDisk VM lesson: the image this cluster is known to run. */
static const struct lesson *model_lesson(const struct doc *d)
{
	for (size_t i = 0; d->have_lessons && i < d->lessons.n; i++) {
		const struct lesson *l = &d->lessons.v[i];
		const struct runtime_ops *rt = runtime_of(l->runtime);
		if (rt->kvm && rt->has_disk && l->disk == DISK_CONTAINERDISK && !l->nmachines)
			return l;
	}
	return NULL;
}

int canary_lesson(const struct doc *d, struct lessons *out, char *err, size_t errlen)
{
	const struct lesson *m = model_lesson(d);
	cJSON *o = jx_obj();
	jx_add_str(o, "id", "labvm-doctor-canary");
	jx_add_str(o, "title", "labvm-doctor's canary");
	jx_add_str(o, "description",
	           "A lab started by labvm-doctor to try this cluster end to end.");
	jx_add_str(o, "runtime", "vm");
	jx_add_num(o, "minutes", 15);
	jx_add_str(o, "image", m ? m->image : "quay.io/containerdisks/debian:12");
	jx_add_str(o, "disk", "containerdisk");
	jx_add_str(o, "memory", m ? m->memory : "1Gi");
	jx_add_num(o, "cpus", 1);
	jx_add_num(o, "running_timeout_s", m ? m->running_timeout_s : 150);
	jx_add_num(o, "ready_timeout_s", m ? m->ready_timeout_s : 300);
	cJSON *files = jx_add_arr(o, "files"), *f = jx_obj();
	jx_add_str(f, "path", CANARY_PROBE);
	jx_add_str(f, "mode", "0755");
	jx_add_str(f, "content", probe_py);
	jx_push(files, f);
	jx_add_str(o, "setup",
	           "#!/bin/sh\nset -e\necho \"labvm-doctor canary\" > " CANARY_DIR "/setup-ran\n");
	cJSON *steps = jx_add_arr(o, "grader"), *g = jx_obj();
	jx_add_str(g, "name", "the canary's setup ran");
	jx_add_str(g, "command", "grep -q 'labvm-doctor canary' " CANARY_DIR "/setup-ran");
	jx_push(steps, g);
	char *json = jx_print(o);
	cJSON_Delete(o);
	out->n = 0;
	out->v = xcalloc(1, sizeof *out->v);
	int rc = lesson_parse(json, strlen(json), &out->v[0], err, errlen);
	cJSON_free(json);
	if (rc < 0) {
		free(out->v);
		out->v = NULL;
		return -1;
	}
	out->n = 1;
	return 0;
}

void canary_sweep(struct doc *d, struct labctx *x)
{
	const char *p[1] = {x->cfg->environment};
	PGresult *res = db_exec(&x->db,
	                        "SELECT id::text FROM sessions WHERE environment = $1 AND state IN "
	                        "('starting', 'ready') ORDER BY created_at",
	                        1, p);
	if (!res)
		return;
	int n = PQntuples(res), ended = 0;
	for (int i = 0; i < n; i++) {
		struct session s;
		if (session_load(x, PQgetvalue(res, i, 0), &s) != SESSION_FOUND)
			continue;
		if (session_active(&s) && session_finish(x, &s, SESSION_ENDED, "user", NULL) == 0)
			ended++;
		session_free(&s);
	}
	PQclear(res);
	if (ended)
		doc_line(d, DOC_WARN,
		         "nothing to do: a doctor stopped mid-way leaves them, and the next run "
		         "ends them",
		         "%d canary session%s of an earlier run %s still open in environment %s: "
		         "ended now",
		         ended, ended == 1 ? "" : "s", ended == 1 ? "was" : "were",
		         x->cfg->environment);
}

/* "HOST:PORT" of an http(s) URL (an IPv6 literal stays bracketed). */
static int url_host_port(const char *url, char *host, size_t hn, int *port)
{
	const char *h = strstr(url, "://");
	if (!h)
		return -1;
	int tls = strncmp(url, "https", 5) == 0;
	h += 3;
	size_t len = strcspn(h, "/");
	const char *colon = NULL;
	if (*h == '[') {
		const char *rb = memchr(h, ']', len);
		if (!rb)
			return -1;
		colon = rb[1] == ':' ? rb + 1 : NULL;
	} else {
		colon = memchr(h, ':', len);
	}
	size_t hl = colon ? (size_t)(colon - h) : len;
	if (!hl || hl >= hn)
		return -1;
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = colon ? atoi(colon + 1) : tls ? 443 : 80;
	return *port > 0 && *port < 65536 ? 0 : -1;
}

/* An argument safe in single quotes (addresses and host names always are). */
static int quotable(const char *s)
{
	return strchr(s, '\'') == NULL && strlen(s) < 300;
}

static void add_target(struct buf *b, const char *name, const char *host, int port)
{
	char t[400];
	int v6 = strchr(host, ':') != NULL && host[0] != '[';
	snprintf(t, sizeof t, " '%s=%s%s%s:%d'", name, v6 ? "[" : "", host, v6 ? "]" : "", port);
	if (quotable(host))
		buf_append(b, t, strlen(t));
}

/* kube_api's host and port, as the configuration names them: the guest
 * resolves a name itself (kubernetes.default.svc: the cluster DNS gives the
 * Service's ClusterIP; a host install's public name: its public address,
 * which the policy's ipBlock would let through). A loopback address there
 * is the lab's own: refused, and the line shows it. */
static void api_target(struct buf *b, const struct cfg *cc)
{
	char host[256];
	int port;
	if (url_host_port(cc->kube_api, host, sizeof host, &port) < 0)
		return;
	char *bare = host[0] == '[' ? host + 1 : host;
	bare[strcspn(bare, "]")] = '\0';
	add_target(b, "api", bare, port);
}

/* Every container port of the backend's Pods (conf/k8s/labvm-backend.yaml's
 * label); none: a host install, not tried. */
static void backend_targets(struct buf *b, struct labctx *x, const struct cfg *cc)
{
	char *path = kube_path("pods", cc->namespace_, NULL);
	cJSON *list = NULL;
	long code = kube_list(&x->kube, path, "app.kubernetes.io/name=labvm-backend", &list);
	free(path);
	const cJSON *pod,
	    *items = code == 200 ? cJSON_GetObjectItemCaseSensitive(list, "items") : NULL;
	int n = 0;
	cJSON_ArrayForEach(pod, items)
	{
		const char *ip = kj_str(pod, "status.podIP");
		const cJSON *ct;
		if (!ip || n >= 8)
			continue;
		cJSON_ArrayForEach(ct, kj_get(pod, "spec.containers"))
		{
			const cJSON *pt;
			cJSON_ArrayForEach(pt, cJSON_GetObjectItemCaseSensitive(ct, "ports"))
			{
				const cJSON *cp =
				    cJSON_GetObjectItemCaseSensitive(pt, "containerPort");
				if (cJSON_IsNumber(cp) && n < 8) {
					add_target(b, "backend", ip, cp->valueint);
					n++;
				}
			}
		}
	}
	cJSON_Delete(list);
}

char *canary_probe_cmd(struct doc *d, struct labctx *x, const struct cfg *cc, const char *peer_ip)
{
	struct buf b = {0};
	char head[80];
	snprintf(head, sizeof head, "python3 " CANARY_PROBE " %d", PROBE_TIMEOUT_S);
	buf_append(&b, head, strlen(head));
	add_target(&b, "peer", peer_ip, cc->agent_port);
	api_target(&b, cc);
	backend_targets(&b, x, cc);
	char ihost[256], iurl[320];
	int iport;
	snprintf(iurl, sizeof iurl, "tcp://%s", d->internet ? d->internet : "");
	if (d->internet && url_host_port(iurl, ihost, sizeof ihost, &iport) == 0) {
		char *bare = ihost[0] == '[' ? ihost + 1 : ihost;
		bare[strcspn(bare, "]")] = '\0';
		add_target(&b, "internet", bare, iport);
	}
	buf_append(&b, "", 1);
	return b.p;
}

/* The probe's lines, by target name: "HOST:PORT result" joined with ", ". */
struct seen {
	char got[600];  /* every one */
	char open[600]; /* those that answered */
	int n, nopen;
};

static void seen_add(struct seen *s, const char *hp, const char *result)
{
	size_t l = strlen(s->got);
	snprintf(s->got + l, sizeof s->got - l, "%s%s %s", s->n ? ", " : "", hp,
	         strcmp(result, "timeout") == 0 ? "dropped (timeout)" : result);
	s->n++;
	if (strcmp(result, "open") == 0) {
		l = strlen(s->open);
		snprintf(s->open + l, sizeof s->open - l, "%s%s", s->nopen ? ", " : "", hp);
		s->nopen++;
	}
}

int canary_fence(struct doc *d, int n, int m, const cJSON *res)
{
	struct seen peer = {0}, api = {0}, be = {0}, net = {0};
	const char *out = kj_str(res, "stdout");
	char *text = xstrdup(out ? out : ""), *save = NULL;
	for (char *ln = strtok_r(text, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
		char name[16], hp[320], result[32], addr[80], where[420];
		if (sscanf(ln, "%15s %319s %31s %79s", name, hp, result, addr) != 4)
			continue;
		/* a name: where it led inside the lab */
		size_t hl = strcspn(hp, ":");
		if (strcmp(addr, "-") != 0 && (strncmp(hp, addr, hl) != 0 || addr[hl]))
			snprintf(where, sizeof where, "%s (%s)", hp, addr);
		else
			snprintf(where, sizeof where, "%s", hp);
		struct seen *s = strcmp(name, "peer") == 0       ? &peer
		                 : strcmp(name, "api") == 0      ? &api
		                 : strcmp(name, "backend") == 0  ? &be
		                 : strcmp(name, "internet") == 0 ? &net
		                                                 : NULL;
		if (s)
			seen_add(s, where, result);
	}
	free(text);
	if (!peer.n) {
		const char *err = kj_str(res, "stderr");
		doc_line(d, DOC_FAIL, "the guest image needs python3 (the agent runs on it)",
		         "canary %d's fence probe gave no answer: %s", n, err ? err : "");
		return -1;
	}
	static const char fence_fix[] =
	    "apply conf/k8s/networkpolicy.yaml unchanged in the lab namespace, on a CNI that "
	    "enforces NetworkPolicy (Calico, Cilium, OVN-Kubernetes)";
	if (peer.nopen)
		doc_line(d, DOC_FAIL, fence_fix,
		         "canary %d reached canary %d's agent at %s: one lab can reach another "
		         "lab's grading agent",
		         n, m, peer.open);
	if (api.nopen)
		doc_line(d, DOC_FAIL, fence_fix,
		         "canary %d reached the API server at %s: a lab can talk to Kubernetes", n,
		         api.open);
	if (be.nopen)
		doc_line(
		    d, DOC_FAIL, fence_fix,
		    "canary %d reached the backend's Pod at %s: a lab can talk to labvm itself", n,
		    be.open);
	if (!peer.nopen && !api.nopen && !be.nopen) {
		doc_line(
		    d, DOC_OK, NULL,
		    "the fence holds from inside canary %d: canary %d's agent %s; the API server "
		    "%s; %s%s",
		    n, m, peer.got, api.n ? api.got : "not tried",
		    be.n ? "the backend's Pod " : "no backend Pod (a host install: not tried)",
		    be.n ? be.got : "");
	} else if (!peer.nopen || !api.nopen || !be.nopen) {
		/* what held, so that the FAIL lines are the whole story */
		char held[1400] = "";
		size_t l = 0;
		if (!peer.nopen)
			l += (size_t)snprintf(held + l, sizeof held - l, "; canary %d's agent %s",
			                      m, peer.got);
		if (!api.nopen && api.n && l < sizeof held)
			l += (size_t)snprintf(held + l, sizeof held - l, "; the API server %s",
			                      api.got);
		if (!be.nopen && be.n && l < sizeof held)
			snprintf(held + l, sizeof held - l, "; the backend's Pod %s", be.got);
		if (held[0])
			doc_line(d, DOC_OK, NULL,
			         "the rest of the fence holds from inside canary %d: %s", n,
			         held + 2);
	}
	if (!d->internet)
		doc_line(d, DOC_WARN,
		         "give --internet HOST:PORT (an address the labs should reach)",
		         "canary %d: the internet was not tried (--internet none)", n);
	else if (net.nopen)
		doc_line(d, DOC_OK, NULL, "canary %d reaches the internet (%s)", n, net.got);
	else
		doc_line(d, DOC_WARN,
		         "if lessons download anything (apt, pip, git), allow the labs' egress "
		         "(the ipBlock rule of labvm-lab-vms, the cluster's egress gateway or NAT)",
		         "canary %d cannot reach the internet: %s", n,
		         net.n ? net.got : "no answer");
	return peer.nopen || api.nopen || be.nopen ? -1 : 0;
}
