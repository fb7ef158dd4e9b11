/* cluster.c - labvm-doctor's checks 1-3: credentials, permissions, APIs
 * (the cluster facts they and the later checks read are facts.c's). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doctor.h"
#include "doctor_gen.h"
#include "jsonx.h"
#include "perms.h"
#include "runtime.h"
#include "util.h"

/* ---------------------------------------------------------- 1 credentials */

void check_credentials(struct doc *d)
{
	const struct cfg *c = &d->cfg;
	size_t len = 0;
	char *tok = util_read_file(c->kube_token_file, 64 * 1024, &len);
	if (!tok) {
		doc_line(
		    d, DOC_FAIL,
		    "kube_token_file in labvm.conf must name the ServiceAccount's token, readable "
		    "by this user (in a Pod: /var/run/secrets/kubernetes.io/serviceaccount/token)",
		    "the token file %s cannot be read: %s", c->kube_token_file, strerror(errno));
	} else {
		util_rstrip(tok);
		if (!*tok)
			doc_line(
			    d, DOC_FAIL,
			    "write the ServiceAccount's token into it (kubectl -n %s create token "
			    "labvm-backend), or point kube_token_file at the projected one",
			    "the token file %s is empty", c->kube_token_file);
		util_free_secret(tok);
	}
	char *ca = util_read_file(c->kube_ca_file, 1 << 20, &len);
	if (!ca)
		doc_line(
		    d, DOC_FAIL,
		    "kube_ca_file in labvm.conf must name the cluster's CA certificate (in a Pod: "
		    "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt)",
		    "the CA file %s cannot be read: %s", c->kube_ca_file, strerror(errno));
	free(ca);
	if (!doc_api(d)) {
		const char *w = d->api_why;
		if (strstr(w, "HTTP 401"))
			doc_line(d, DOC_FAIL,
			         "give labvm a valid token of the ServiceAccount labvm-backend (a "
			         "projected "
			         "token expires: the kubelet rotates the file, so point "
			         "kube_token_file at "
			         "the projected path, not a copy)",
			         "the API server %s refuses the token: %s", c->kube_api, w);
		else if (strstr(w, "certificate") || strstr(w, "SSL"))
			doc_line(
			    d, DOC_FAIL,
			    "kube_ca_file must be the CA that signed the API server's certificate "
			    "(the ServiceAccount's ca.crt, or the kubeconfig's "
			    "certificate-authority-data), and kube_api a name that certificate "
			    "carries",
			    "the CA %s does not verify the API server %s: %s", c->kube_ca_file,
			    c->kube_api, w);
		else
			doc_line(
			    d, DOC_FAIL,
			    "check kube_api in labvm.conf (https://HOST:PORT of the API server; in "
			    "a "
			    "Pod https://kubernetes.default.svc) and that this host may reach it",
			    "the API server %s cannot be used: %s", c->kube_api, w);
		return;
	}
	doc_line(d, DOC_OK, NULL, "the token in %s is accepted%s%s; the CA %s verifies %s",
	         c->kube_token_file, d->user[0] ? " as " : "", d->user, c->kube_ca_file,
	         c->kube_api);

	/* the namespace: a GET of it (the Role labvm-doctor), else a dry-run
	 * create of a Secret, which NamespaceLifecycle refuses (404) in a
	 * namespace that does not exist */
	char *path = xasprintf("/api/v1/namespaces/%s", c->namespace_);
	cJSON *out = NULL;
	long code = kube_get(&d->x.kube, path, &out);
	const char *how = "";
	if (code == 403) {
		cJSON_Delete(out);
		out = NULL;
		char *sp = xasprintf("/api/v1/namespaces/%s/secrets?dryRun=All", c->namespace_);
		cJSON *s = jx_obj(), *md = jx_add_obj(s, "metadata");
		jx_add_str(s, "apiVersion", "v1");
		jx_add_str(s, "kind", "Secret");
		jx_add_str(md, "generateName", "labvm-doctor-");
		jx_add_str(s, "type", "Opaque");
		code = kube_call(&d->x.kube, "POST", sp, s, NULL, &out);
		if (code == 201 || code == 200)
			code = 200;
		how = " (a dry-run create there was admitted; the Role labvm-doctor would let the "
		      "doctor read it)";
		cJSON_Delete(s);
		free(sp);
	}
	if (code == 200)
		doc_line(d, DOC_OK, NULL, "namespace %s exists%s", c->namespace_, how);
	else if (code == 404)
		doc_line(
		    d, DOC_FAIL,
		    "create it (kubectl create namespace NAME) and apply conf/k8s/rbac.yaml into "
		    "it, or set namespace in labvm.conf to the lab namespace",
		    "namespace %s does not exist: %s", c->namespace_, d->x.kube.msg);
	else
		doc_line(d, DOC_WARN,
		         "apply conf/k8s/rbac.yaml (the Role labvm-doctor may read the namespace)",
		         "whether namespace %s exists cannot be told: %s", c->namespace_,
		         d->x.kube.msg);
	cJSON_Delete(out);
	free(path);
}

/* ---------------------------------------------------------- 2 permissions */

/* A SelfSubjectAccessReview: 1 allowed, 0 not, -1 the review itself failed
 * (why in the client's msg). reason gets the authorizer's words. */
static int review(struct doc *d, const struct perm *p, const char *verb, char *reason, size_t rlen)
{
	char res[96], *sub;
	snprintf(res, sizeof res, "%s", p->resource);
	sub = strchr(res, '/');
	if (sub)
		*sub++ = '\0';
	cJSON *req = jx_obj(), *spec = jx_add_obj(req, "spec"), *out = NULL;
	cJSON *ra = jx_add_obj(spec, "resourceAttributes");
	jx_add_str(req, "apiVersion", "authorization.k8s.io/v1");
	jx_add_str(req, "kind", "SelfSubjectAccessReview");
	if (p->scope != PERM_CLUSTER_SCOPED)
		jx_add_str(ra, "namespace", d->cfg.namespace_);
	jx_add_str(ra, "verb", verb);
	jx_add_str(ra, "group", p->group);
	jx_add_str(ra, "resource", res);
	if (sub)
		jx_add_str(ra, "subresource", sub);
	if (p->scope == PERM_OWN_NAMESPACE)
		jx_add_str(ra, "name", d->cfg.namespace_);
	long code =
	    kube_call(&d->x.kube, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
	              req, NULL, &out);
	int rc = -1;
	reason[0] = '\0';
	if (code == 201 || code == 200) {
		rc = cJSON_IsTrue(kj_get(out, "status.allowed")) ? 1 : 0;
		const char *r = kj_str(out, "status.reason");
		const char *e = kj_str(out, "status.evaluationError");
		snprintf(reason, rlen, "%s%s%s", r ? r : "", r && e ? "; " : "", e ? e : "");
	}
	cJSON_Delete(req);
	cJSON_Delete(out);
	return rc;
}

void check_permissions(struct doc *d)
{
	if (!doc_api(d)) {
		doc_line(d, DOC_WARN, NULL, "not checked: the API server cannot be used (check 1)");
		return;
	}
	int asked = 0, granted = 0, bad_required = 0;
	size_t rows = 0;
	for (size_t i = 0; i < perm_count; i++) {
		const struct perm *p = &perm_table[i];
		char *verbs = xstrdup(p->verbs), *save = NULL, denied[128] = "", reason[512];
		rows++;
		for (char *v = strtok_r(verbs, " ", &save); v; v = strtok_r(NULL, " ", &save)) {
			int r = review(d, p, v, reason, sizeof reason);
			if (r < 0) {
				doc_line(d, DOC_WARN,
				         "the cluster must allow SelfSubjectAccessReview "
				         "(Kubernetes grants "
				         "it to every authenticated user: system:basic-user)",
				         "not checked: a SelfSubjectAccessReview was refused: %s",
				         d->x.kube.msg);
				free(verbs);
				return;
			}
			asked++;
			if (r) {
				granted++;
			} else {
				size_t n = strlen(denied);
				snprintf(denied + n, sizeof denied - n, "%s%s", n ? ", " : "", v);
			}
		}
		free(verbs);
		if (!denied[0])
			continue;
		char where[128], fix[512];
		if (p->scope == PERM_CLUSTER_SCOPED)
			snprintf(where, sizeof where, "at the cluster scope");
		else
			snprintf(where, sizeof where, "in namespace %s", d->cfg.namespace_);
		if (p->grant == PERM_BY_CLUSTER)
			snprintf(fix, sizeof fix,
			         "the cluster's own ClusterRole %s (bound to system:authenticated) "
			         "grants "
			         "this; restore it",
			         p->by);
		else
			snprintf(
			    fix, sizeof fix,
			    "kubectl apply -f conf/k8s/rbac.yaml (the %s %s grants %s on %s, bound "
			    "to the ServiceAccount labvm-backend)",
			    perm_grant_kind(p->grant), perm_grant_name(p->grant), p->verbs,
			    p->resource);
		int req = perm_grant_required(p->grant);
		bad_required += req;
		doc_line(d, req ? DOC_FAIL : DOC_WARN, fix,
		         "%s %s%s%s is denied %s (used by %s): %s", denied, p->resource,
		         *p->group ? " in API group " : "", p->group, where, p->who, p->what);
	}
	if (granted == asked)
		doc_line(d, DOC_OK, NULL,
		         "all %d verbs on %zu resources are granted (SelfSubjectAccessReview; the "
		         "table core/perms.c that conf/k8s/rbac.yaml matches)",
		         asked, rows);
	else if (!bad_required)
		doc_line(d, DOC_OK, NULL, "%d of %d verbs granted: every one labvm itself needs",
		         granted, asked);
}

/* ------------------------------------------------------------------ 3 apis */

/* The versions labvm is tested against (the simulator's, tests/kubesim),
 * one table: a version outside it is a warn. */
static const struct tested {
	const char *what;
	int major, min_minor, max_minor;
} tested[] = {
    {"Kubernetes", 1, 34, 35},
    {"KubeVirt", 1, 9, 9},
    {"CDI", 1, 66, 66},
};

/* "v1.34.2+k3s1" -> 1, 34 */
static int parse_version(const char *v, int *major, int *minor)
{
	if (!v)
		return -1;
	if (*v == 'v')
		v++;
	return sscanf(v, "%d.%d", major, minor) == 2 ? 0 : -1;
}

static void version_line(struct doc *d, int which, const char *found, const char *extra)
{
	const struct tested *t = &tested[which];
	int ma, mi;
	char range[32];
	if (t->min_minor == t->max_minor)
		snprintf(range, sizeof range, "%d.%d", t->major, t->min_minor);
	else
		snprintf(range, sizeof range, "%d.%d to %d.%d", t->major, t->min_minor, t->major,
		         t->max_minor);
	if (!found) {
		doc_line(d, DOC_WARN, NULL,
		         "%s: its version cannot be read%s (labvm is tested with %s)", t->what,
		         extra, range);
		return;
	}
	if (parse_version(found, &ma, &mi) < 0 || ma != t->major || mi < t->min_minor ||
	    mi > t->max_minor) {
		char fix[256];
		snprintf(fix, sizeof fix,
		         "labvm is tested with %s %s: use that, or try a whole lab on this one "
		         "first (make try-lesson against it, the canary once it is built)",
		         t->what, range);
		doc_line(d, DOC_WARN, fix, "%s %s is outside the tested range %s%s", t->what, found,
		         range, extra);
		return;
	}
	doc_line(d, DOC_OK, NULL, "%s %s (tested: %s)%s", t->what, found, range, extra);
}

/* A group labvm may need: served with version and resource? need: 2 FAIL
 * when missing, 1 warn, 0 not needed. */
static int api_group(struct doc *d, const char *group, const char *version, const char *resource,
                     int need, const char *why, const char *fix)
{
	const cJSON *g = doc_group(d, group);
	int ok = g && doc_group_has_version(g, version) && doc_serves(d, group, version, resource);
	if (ok) {
		doc_line(d, DOC_OK, NULL, "%s/%s serves %s%s%s", group, version, resource,
		         need ? ": " : " (no lesson needs it)", need ? why : "");
		return 1;
	}
	char what[160];
	if (!g)
		snprintf(what, sizeof what, "the API group %s is not served", group);
	else if (!doc_group_has_version(g, version))
		snprintf(what, sizeof what, "%s is served, but not its version %s", group, version);
	else
		snprintf(what, sizeof what, "%s/%s does not serve %s", group, version, resource);
	if (!need)
		doc_line(d, DOC_OK, NULL, "%s; no lesson needs it", what);
	else
		doc_line(d, need > 1 ? DOC_FAIL : DOC_WARN, fix, "%s: %s", what, why);
	return 0;
}

static void lessons_with(const struct doc *d, int (*pred)(const struct lesson *), char *out,
                         size_t n)
{
	out[0] = '\0';
	int k = 0;
	for (size_t i = 0; i < d->lessons.n; i++) {
		if (!pred(&d->lessons.v[i]))
			continue;
		size_t len = strlen(out);
		if (k++ < 4)
			snprintf(out + len, n - len, "%s%s", len ? ", " : "", d->lessons.v[i].id);
		else if (k == 5)
			snprintf(out + len, n - len, ", ...");
	}
}

static int is_vm(const struct lesson *l)
{
	return runtime_of(l->runtime)->kvm;
}

static int has_machines(const struct lesson *l)
{
	return l->nmachines > 1;
}

static int uses_cdi(const struct lesson *l)
{
	for (size_t m = 0; runtime_of(l->runtime)->has_disk && m < lesson_nmachines(l); m++)
		if (lesson_machine(l, m)->disk != DISK_CONTAINERDISK)
			return 1;
	return 0;
}

/* labvm's NetworkPolicies (the names of conf/k8s/networkpolicy.yaml, built
 * in) in the lab namespace; their enforcement is the CNI's business, which
 * no API shows: only traffic does (the canary, check 6). */
static void check_netpols(struct doc *d)
{
	static const char *const shipped[] = {DOCTOR_NETPOLS NULL};
	char *path = xasprintf("/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies",
	                       d->cfg.namespace_);
	cJSON *out = NULL;
	long code = kube_get(&d->x.kube, path, &out);
	free(path);
	if (code != 200) {
		doc_line(
		    d, DOC_WARN,
		    "apply conf/k8s/rbac.yaml (the Role labvm-doctor may list NetworkPolicies)",
		    "whether labvm's NetworkPolicies are applied cannot be told: %s",
		    d->x.kube.msg);
		cJSON_Delete(out);
		return;
	}
	char missing[256] = "", have[256] = "";
	int n = 0;
	for (const char *const *s = shipped; *s; s++) {
		int found = 0;
		const cJSON *it;
		cJSON_ArrayForEach(it, kj_get(out, "items"))
		{
			const char *nm = kj_str(it, "metadata.name");
			if (nm && strcmp(nm, *s) == 0)
				found = 1;
		}
		char *dst = found ? have : missing;
		size_t len = strlen(dst);
		snprintf(dst + len, sizeof have - len, "%s%s", len ? ", " : "", *s);
		n += found;
	}
	cJSON_Delete(out);
	if (missing[0])
		doc_line(
		    d, DOC_FAIL,
		    "kubectl apply -f conf/k8s/networkpolicy.yaml (with the lab namespace and the "
		    "backend's labels it names)",
		    "labvm's NetworkPolicies %s are not in namespace %s: nothing fences the labs "
		    "(a student's machine reaches other labs' agents on %d, the API server, the "
		    "backend)",
		    missing, d->cfg.namespace_, d->cfg.agent_port);
	else
		doc_line(d, DOC_OK, NULL, "labvm's %d NetworkPolicies are in namespace %s (%s)", n,
		         d->cfg.namespace_, have);
	doc_line(
	    d, DOC_WARN,
	    "use a CNI that enforces NetworkPolicy (Calico, Cilium, OVN-Kubernetes; flannel "
	    "alone does not); the canary will test the fence from inside a lab",
	    "whether the network enforces NetworkPolicies is not verified: the API stores them "
	    "whatever the CNI does, and only traffic tells (the canary, check 6)");
}

void check_apis(struct doc *d)
{
	if (!doc_api(d)) {
		doc_line(d, DOC_WARN, NULL, "not checked: the API server cannot be used (check 1)");
		return;
	}
	if (!d->have_lessons)
		doc_line(d, DOC_WARN, "see check 5",
		         "the lessons cannot be loaded: what they need is not "
		         "known, every group is taken as needed");
	cJSON *v = NULL;
	long code = kube_get(&d->x.kube, "/version", &v);
	version_line(d, 0, code == 200 ? kj_str(v, "gitVersion") : NULL, "");
	cJSON_Delete(v);
	if (!d->groups && (doc_fetch_groups(d), !d->groups)) {
		doc_line(d, DOC_FAIL, "check that the API server answers GET /apis (discovery)",
		         "the API groups cannot be listed: %s", d->x.kube.msg);
		return;
	}
	char list[256], why[384];
	int all = !d->have_lessons;
	int need_vm = all || doc_need_vms(d);

	/* KubeVirt: its API, its console subresource, its version */
	lessons_with(d, is_vm, list, sizeof list);
	snprintf(why, sizeof why, "VM lessons (%s)", list[0] ? list : "all of them");
	const char *kvfix = "install KubeVirt (its operator and the KubeVirt CR, "
	                    "https://kubevirt.io/user-guide/cluster_admin/installation/)";
	int kv = api_group(d, "kubevirt.io", "v1", "virtualmachines", need_vm ? 2 : 0, why, kvfix);
	if (kv)
		api_group(d, "kubevirt.io", "v1", "virtualmachineinstances", need_vm ? 2 : 0, why,
		          kvfix);
	api_group(d, "subresources.kubevirt.io", "v1", "virtualmachineinstances/console",
	          need_vm ? 2 : 0, "the VM labs' terminals (labvm-console)",
	          "virt-api serves it (an APIService): check that virt-api runs and "
	          "kubectl get apiservice v1.subresources.kubevirt.io is Available");
	if (kv) {
		cJSON *kvv = NULL;
		const char *found = NULL;
		char extra[160] = "";
		if (kube_get(&d->x.kube, "/apis/subresources.kubevirt.io/v1/version", &kvv) == 200)
			found = kj_str(kvv, "gitVersion");
		const cJSON *cr = doc_kubevirt(d);
		if (!found)
			found = kj_str(cr, "status.observedKubeVirtVersion");
		const char *phase = kj_str(cr, "status.phase");
		if (cr && phase && strcmp(phase, "Deployed") != 0)
			snprintf(extra, sizeof extra, "; the KubeVirt CR is %s, not Deployed",
			         phase);
		version_line(d, 1, found, extra);
		cJSON_Delete(kvv);
	}

	/* CDI, where a lesson's disk is golden (imported by CDI) or a datavolume */
	int need = all ? 2 : doc_need_cdi(d);
	lessons_with(d, uses_cdi, list, sizeof list);
	snprintf(why, sizeof why, "%s (%s)",
	         need == 2 ? "the datavolume disks (and the golden disks' import) of lessons"
	                   : "the golden disks' import (CDI DataVolumes) of lessons",
	         list[0] ? list : "-");
	int cdi =
	    api_group(d, "cdi.kubevirt.io", "v1beta1", "datavolumes", need, why,
	              need == 2 ? "install CDI (containerized-data-importer, its operator and "
	                          "CR), or change those lessons to disk containerdisk"
	                        : "golden PVCs are imported by CDI (conf/k8s/golden-pvc.yaml): "
	                          "install CDI, or make the PVCs some other way");
	if (cdi) {
		cJSON *l = NULL;
		long c = kube_get(&d->x.kube, "/apis/cdi.kubevirt.io/v1beta1/cdis", &l);
		const cJSON *it = cJSON_GetArrayItem(kj_get(l, "items"), 0);
		version_line(d, 2, c == 200 ? kj_str(it, "status.observedVersion") : NULL,
		             c == 403
		                 ? " (the ClusterRole labvm-doctor of conf/k8s/rbac.yaml lets the "
		                   "doctor read the CDI CR)"
		                 : "");
		cJSON_Delete(l);
	}

	/* Multus, where a lesson has machines (the session network) */
	int nm = all || doc_need_machines(d);
	lessons_with(d, has_machines, list, sizeof list);
	snprintf(why, sizeof why, "the session network of multi-machine lessons (%s)",
	         list[0] ? list : "-");
	int multus =
	    api_group(d, "k8s.cni.cncf.io", "v1", "network-attachment-definitions", nm ? 2 : 0, why,
	              "install Multus (k8snetworkplumbingwg/multus-cni, thick plugin), or "
	              "take those lessons out of lessons_dir");
	if (multus && nm) {
		if (d->cfg.session_net_ovn) {
			if (doc_group(d, "k8s.ovn.org"))
				doc_line(d, DOC_OK, NULL,
				         "session_network ovn-layer2: OVN-Kubernetes is there "
				         "(k8s.ovn.org "
				         "is served); its multi-network support "
				         "(--enable-multi-network) "
				         "is not visible from the API: the canary will tell");
			else
				doc_line(
				    d, DOC_WARN,
				    "session_network = ovn-layer2 needs OVN-Kubernetes as the "
				    "cluster "
				    "network with multi-network on; otherwise use same-node (a "
				    "bridge "
				    "CNI plugin on every node)",
				    "session_network ovn-layer2, but OVN-Kubernetes' API group "
				    "k8s.ovn.org is not served: the session networks' NADs "
				    "(ovn-k8s-cni-overlay, topology layer2) have no plugin to run "
				    "them");
		} else {
			doc_line(
			    d, DOC_OK, NULL,
			    "session_network same-node: a session's machines share a node (a "
			    "required pod affinity) on a CNI bridge; the nodes need the bridge "
			    "plugin in their CNI bin dir, which the API does not show");
		}
	}

	/* NetworkPolicy: served, labvm's policies there; enforcement is the
	 * CNI's, which the API cannot show */
	if (!api_group(d, "networking.k8s.io", "v1", "networkpolicies", 2,
	               "the fence between labs (conf/k8s/networkpolicy.yaml)",
	               "a Kubernetes API server always serves it: check the API server"))
		return;
	check_netpols(d);
}
