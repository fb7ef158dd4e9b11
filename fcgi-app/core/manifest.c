#include "manifest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonx.h"
#include "util.h"

void lab_names_from_session(struct lab_names *n, const char *session_id)
{
	char hex[33];
	size_t j = 0;
	memset(n, 0, sizeof *n);
	snprintf(n->session_id, sizeof n->session_id, "%s", session_id);
	for (size_t i = 0; session_id[i] && j < 32; i++)
		if (session_id[i] != '-')
			hex[j++] = session_id[i];
	hex[j] = '\0';
	snprintf(n->vm, sizeof n->vm, "lab-%s", hex);
	snprintf(n->secret, sizeof n->secret, "lab-%s-cloudinit", hex);
	snprintf(n->disk, sizeof n->disk, "lab-%s-disk", hex);
	snprintf(n->files, sizeof n->files, "lab-%s-files", hex);
}

void lab_names_for_machine(struct lab_names *n, const char *session_id, const char *machine)
{
	lab_names_from_session(n, session_id);
	if (!machine)
		return;
	snprintf(n->machine, sizeof n->machine, "%s", machine);
	snprintf(n->network, sizeof n->network, "%.40s-net", n->vm);
	/* "lab-" + 32 hex + "-" + at most MACHINE_NAME_MAX: a label (63) */
	size_t len = strlen(n->vm);
	snprintf(n->vm + len, sizeof n->vm - len, "-%s", machine);
	snprintf(n->secret, sizeof n->secret, "%s-cloudinit", n->vm);
	snprintf(n->disk, sizeof n->disk, "%s-disk", n->vm);
}

static unsigned hexbyte(const char *h)
{
	unsigned v = 0;
	for (int i = 0; i < 2; i++) {
		char ch = h[i];
		v = v * 16 + (unsigned)(ch >= 'a'   ? ch - 'a' + 10
		                        : ch >= 'A' ? ch - 'A' + 10
		                                    : ch - '0');
	}
	return v;
}

void session_net_plan(const char *session_id, size_t i, struct machine_net *out)
{
	char hex[33];
	size_t j = 0;
	for (size_t k = 0; session_id[k] && j < 32; k++)
		if (session_id[k] != '-')
			hex[j++] = session_id[k];
	while (j < 32)
		hex[j++] = '0';
	hex[32] = '\0';
	/* the uuid's last bytes are random in a v4 uuid */
	unsigned a = hexbyte(hex + 26) & 63, b = hexbyte(hex + 28);
	snprintf(out->address, sizeof out->address, "10.%u.%u.%zu/24", 128 + a, b, 11 + i);
	snprintf(out->mac_pod, sizeof out->mac_pod, "02:1a:%02x:%02x:%02x:%02zx", hexbyte(hex + 24),
	         hexbyte(hex + 26), hexbyte(hex + 28), i & 0xff);
	snprintf(out->mac_net, sizeof out->mac_net, "02:1b:%02x:%02x:%02x:%02zx", hexbyte(hex + 24),
	         hexbyte(hex + 26), hexbyte(hex + 28), i & 0xff);
}

cJSON *manifest_labels(const struct cfg *c, const struct lab_names *n, const char *lesson_id)
{
	cJSON *l = jx_obj();
	jx_add_str(l, c->label.lab_session, "true");
	if (n->pool_hash[0]) {
		jx_add_str(l, c->label.pool, lesson_id);
		jx_add_str(l, c->label.lesson_hash, n->pool_hash);
	} else {
		jx_add_str(l, c->label.session_id, n->session_id);
	}
	jx_add_str(l, c->label.environment, c->environment);
	jx_add_str(l, c->label.lesson, lesson_id);
	if (n->machine[0])
		jx_add_str(l, c->label.machine, n->machine);
	return l;
}

static cJSON *metadata(const struct cfg *c, const struct lab_names *n, const char *name,
                       const char *ns, const char *lesson_id)
{
	cJSON *m = jx_obj();
	jx_add_str(m, "name", name);
	if (ns)
		jx_add_str(m, "namespace", ns);
	jx_put(m, "labels", manifest_labels(c, n, lesson_id));
	return m;
}

cJSON *manifest_secret(const struct cfg *c, const struct lab_names *n, const struct lesson *l,
                       const char *userdata)
{
	return manifest_secret_net(c, n, l, userdata, NULL);
}

cJSON *manifest_secret_net(const struct cfg *c, const struct lab_names *n, const struct lesson *l,
                           const char *userdata, const char *networkdata)
{
	cJSON *s = jx_obj(), *data;
	char *b64 = util_b64(userdata, strlen(userdata));
	jx_add_str(s, "apiVersion", "v1");
	jx_add_str(s, "kind", "Secret");
	jx_put(s, "metadata", metadata(c, n, n->secret, c->namespace_, l->id));
	jx_add_str(s, "type", "Opaque");
	data = jx_add_obj(s, "data");
	jx_add_str(data, "userdata", b64);
	free(b64);
	if (networkdata) {
		b64 = util_b64(networkdata, strlen(networkdata));
		jx_add_str(data, "networkdata", b64);
		free(b64);
	}
	return s;
}

cJSON *manifest_nad(const struct cfg *c, const struct lab_names *n, const char *lesson_id)
{
	cJSON *o = jx_obj(), *conf = jx_obj();
	jx_add_str(o, "apiVersion", "k8s.cni.cncf.io/v1");
	jx_add_str(o, "kind", "NetworkAttachmentDefinition");
	struct lab_names bare = *n;
	bare.machine[0] = '\0'; /* the session's, not a machine's */
	jx_put(o, "metadata", metadata(c, &bare, n->network, c->namespace_, lesson_id));
	jx_add_str(conf, "cniVersion", "0.3.1");
	jx_add_str(conf, "name", n->network);
	if (c->session_net_ovn) {
		/* an OVN-Kubernetes layer2 secondary network: one logical switch
		 * over every node; no subnets (the guests' addresses come from
		 * cloud-init); OVN-Kubernetes wants the NAD's own "ns/name" */
		char *nad = xasprintf("%s/%s", c->namespace_, n->network);
		jx_add_str(conf, "type", "ovn-k8s-cni-overlay");
		jx_add_str(conf, "topology", "layer2");
		jx_add_str(conf, "netAttachDefName", nad);
		free(nad);
	} else {
		/* the CNI bridge plugin: a bridge on the node, no uplink. A Linux
		 * bridge name has at most 15 characters: "lvn" + 12 hex of the
		 * session (conf/node/lvn-bridge-gc.sh reclaims the leftovers) */
		char bridge[16];
		snprintf(bridge, sizeof bridge, "lvn%.12s", n->network + 4);
		jx_add_str(conf, "type", "bridge");
		jx_add_str(conf, "bridge", bridge);
		jx_add_obj(conf, "ipam");
	}
	char *text = jx_print(conf);
	jx_add_str(jx_add_obj(o, "spec"), "config", text);
	cJSON_free(text);
	cJSON_Delete(conf);
	return o;
}

/* spec.affinity: the launcher pod must run on the node of any pod of the same
 * session (the first one goes anywhere: a group whose term matches its own
 * labels), so a node-local session network reaches every machine. */
static cJSON *same_node_affinity(const struct cfg *c, const struct lab_names *n)
{
	cJSON *aff = jx_obj(), *term = jx_obj();
	jx_add_str(jx_add_obj(jx_add_obj(term, "labelSelector"), "matchLabels"),
	           c->label.session_id, n->session_id);
	jx_add_str(term, "topologyKey", "kubernetes.io/hostname");
	jx_push(jx_add_arr(jx_add_obj(aff, "podAffinity"),
	                   "requiredDuringSchedulingIgnoredDuringExecution"),
	        term);
	return aff;
}

char *manifest_network_data(const struct machine_net *m)
{
	cJSON *o = jx_obj(), *eths, *e;
	jx_add_num(o, "version", 2);
	eths = jx_add_obj(o, "ethernets");
	e = jx_add_obj(eths, "pod");
	jx_add_str(jx_add_obj(e, "match"), "macaddress", m->mac_pod);
	jx_add_bool(e, "dhcp4", 1);
	e = jx_add_obj(eths, "session");
	jx_add_str(jx_add_obj(e, "match"), "macaddress", m->mac_net);
	jx_push_str(jx_add_arr(e, "addresses"), m->address);
	char *json = jx_print(o);
	char *out = xstrdup(json);
	cJSON_free(json);
	cJSON_Delete(o);
	return out;
}

/* {"name": name, "<key>": value} */
static cJSON *named(const char *name, const char *key, cJSON *value)
{
	cJSON *o = jx_obj();
	jx_add_str(o, "name", name);
	jx_put(o, key, value);
	return o;
}

static cJSON *root_volume(const struct lab_names *n, const struct lesson *l, enum lesson_disk disk)
{
	cJSON *src = jx_obj();
	switch (disk) {
	case DISK_GOLDEN: {
		/* read-only base + per-VM copy-on-write overlay in the launcher pod */
		cJSON *pvc = jx_add_obj(src, "persistentVolumeClaim");
		jx_add_str(pvc, "claimName", l->golden_pvc);
		jx_add_bool(pvc, "readOnly", 1);
		return named("rootdisk", "ephemeral", src);
	}
	case DISK_DATAVOLUME:
		jx_add_str(src, "name", n->disk);
		return named("rootdisk", "dataVolume", src);
	case DISK_CONTAINERDISK:
		break;
	}
	jx_add_str(src, "image", l->image);
	jx_add_str(src, "imagePullPolicy", "IfNotPresent");
	return named("rootdisk", "containerDisk", src);
}

static cJSON *disk_device(const char *name, int boot_order)
{
	cJSON *d = jx_obj();
	jx_add_str(d, "name", name);
	jx_add_str(jx_add_obj(d, "disk"), "bus", "virtio");
	if (boot_order)
		jx_add_num(d, "bootOrder", boot_order);
	return d;
}

/* A fresh per-VM disk imported by CDI from the lesson's image. */
static cJSON *data_volume_template(const struct cfg *c, const struct lab_names *n,
                                   const struct lesson *l)
{
	cJSON *dv = jx_obj();
	cJSON *spec;
	char *url = xasprintf("docker://%s", l->image);
	jx_put(dv, "metadata", metadata(c, n, n->disk, NULL, l->id));
	spec = jx_add_obj(dv, "spec");
	jx_add_str(jx_add_obj(jx_add_obj(spec, "source"), "registry"), "url", url);
	jx_add_str(jx_add_obj(jx_add_obj(jx_add_obj(spec, "storage"), "resources"), "requests"),
	           "storage", l->disk_size);
	free(url);
	return dv;
}

cJSON *manifest_vm(const struct cfg *c, const struct lab_names *n, const struct lesson *l,
                   enum lesson_disk disk)
{
	return manifest_vm_net(c, n, l, disk, NULL);
}

cJSON *manifest_vm_net(const struct cfg *c, const struct lab_names *n, const struct lesson *l,
                       enum lesson_disk disk, const struct machine_net *m)
{
	cJSON *vm = jx_obj(), *spec, *tmpl, *tlabels, *tspec, *domain, *devices, *volumes, *ci;

	jx_add_str(vm, "apiVersion", "kubevirt.io/v1");
	jx_add_str(vm, "kind", "VirtualMachine");
	jx_put(vm, "metadata", metadata(c, n, n->vm, c->namespace_, l->id));
	spec = jx_add_obj(vm, "spec");
	jx_add_str(spec, "runStrategy", "Always");
	if (disk == DISK_DATAVOLUME)
		jx_push(jx_add_arr(spec, "dataVolumeTemplates"), data_volume_template(c, n, l));

	tmpl = jx_add_obj(spec, "template");
	tlabels = manifest_labels(c, n, l->id);
	jx_add_str(tlabels, "kubevirt.io/domain", n->vm);
	jx_put(jx_add_obj(tmpl, "metadata"), "labels", tlabels);

	tspec = jx_add_obj(tmpl, "spec");
	domain = jx_add_obj(tspec, "domain");
	jx_add_num(jx_add_obj(domain, "cpu"), "cores", l->cpus);
	jx_add_str(jx_add_obj(jx_add_obj(domain, "resources"), "requests"), "memory", l->memory);
	devices = jx_add_obj(domain, "devices");
	jx_push(jx_add_arr(devices, "disks"), disk_device("rootdisk", 1));
	jx_push(cJSON_GetObjectItem(devices, "disks"), disk_device("cloudinitdisk", 0));
	cJSON *ifs = jx_add_arr(devices, "interfaces");
	cJSON *nets = jx_add_arr(tspec, "networks");
	cJSON *iface = named("default", "masquerade", jx_obj());
	jx_push(ifs, iface);
	jx_push(nets, named("default", "pod", jx_obj()));
	if (m && n->network[0]) {
		/* the session network: a second interface, bridge binding, a fixed
		 * MAC the network data matches */
		jx_add_str(iface, "macAddress", m->mac_pod);
		iface = named("session", "bridge", jx_obj());
		jx_add_str(iface, "macAddress", m->mac_net);
		jx_push(ifs, iface);
		cJSON *mu = jx_obj();
		jx_add_str(mu, "networkName", n->network);
		jx_push(nets, named("session", "multus", mu));
	}
	if (m && n->network[0] && !c->session_net_ovn)
		jx_put(tspec, "affinity", same_node_affinity(c, n));
	if (n->machine[0])
		jx_add_str(tspec, "hostname", n->machine);
	/* lab VMs are disposable: no graceful shutdown wait when deleted */
	jx_add_num(tspec, "terminationGracePeriodSeconds", 0);

	volumes = jx_add_arr(tspec, "volumes");
	jx_push(volumes, root_volume(n, l, disk));
	ci = jx_obj();
	jx_add_str(jx_add_obj(ci, "secretRef"), "name", n->secret);
	if (m && n->network[0])
		jx_add_str(jx_add_obj(ci, "networkDataSecretRef"), "name", n->secret);
	jx_push(volumes, named("cloudinitdisk", "cloudInitNoCloud", ci));
	return vm;
}

static cJSON *owner_patch(const char *api_version, const char *kind, const char *name,
                          const char *uid)
{
	cJSON *p = jx_obj();
	cJSON *r = jx_obj();
	jx_add_str(r, "apiVersion", api_version);
	jx_add_str(r, "kind", kind);
	jx_add_str(r, "name", name);
	jx_add_str(r, "uid", uid);
	jx_add_bool(r, "blockOwnerDeletion", 0);
	jx_push(jx_add_arr(jx_add_obj(p, "metadata"), "ownerReferences"), r);
	return p;
}

cJSON *manifest_owner_patch(const char *vm_name, const char *vm_uid)
{
	return owner_patch("kubevirt.io/v1", "VirtualMachine", vm_name, vm_uid);
}

cJSON *manifest_pod_owner_patch(const char *pod_name, const char *pod_uid)
{
	return owner_patch("v1", "Pod", pod_name, pod_uid);
}

cJSON *manifest_pod_secret(const struct cfg *c, const struct lab_names *n, const struct lesson *l)
{
	cJSON *s = jx_obj(), *data;
	jx_add_str(s, "apiVersion", "v1");
	jx_add_str(s, "kind", "Secret");
	jx_put(s, "metadata", metadata(c, n, n->files, c->namespace_, l->id));
	jx_add_str(s, "type", "Opaque");
	data = jx_add_obj(s, "data");
	if (l->setup) {
		char *b = util_b64(l->setup, strlen(l->setup));
		jx_add_str(data, "setup.sh", b);
		free(b);
	}
	for (size_t i = 0; i < l->nfiles; i++) {
		char key[32];
		char *b = util_b64(l->files[i].content, strlen(l->files[i].content));
		snprintf(key, sizeof key, "f%zu", i);
		jx_add_str(data, key, b);
		free(b);
	}
	return s;
}

/* The container's command (see manifest.h). Setup's output goes to the log
 * too; its last 2 KiB are the termination message when it fails. */
static const char pod_script[] =
    "mkdir -p /run/labvm || exit 1\n"
    "if [ -d /labvm/files ]; then cp -RpL /labvm/files/. / || exit 1; fi\n"
    "rc=0\n"
    "if [ -f /labvm/setup.sh ]; then\n"
    "  /bin/sh /labvm/setup.sh > /run/labvm/setup.log 2>&1; rc=$?\n"
    "  cat /run/labvm/setup.log\n"
    "fi\n"
    "if [ \"$rc\" -ne 0 ]; then\n"
    "  tail -c 2048 /run/labvm/setup.log > /dev/termination-log\n"
    "  exit \"$rc\"\n"
    "fi\n"
    ": > " POD_READY_FLAG "\n"
    "exec sleep infinity\n";

static cJSON *str_array(const char *const *v)
{
	cJSON *a = jx_arr();
	for (; *v; v++)
		jx_push(a, cJSON_CreateString(*v));
	return a;
}

cJSON *manifest_pod(const struct cfg *c, const struct lab_names *n, const struct lesson *l)
{
	cJSON *pod = jx_obj(), *spec, *ctr, *sc, *res, *probe, *mnt, *vol, *sec, *items;
	const char *cmd[] = {"/bin/sh", "-c", pod_script, NULL};
	const char *probe_cmd[] = {"test", "-e", POD_READY_FLAG, NULL};
	const char *drop[] = {"ALL", NULL};
	char cpus[16];

	jx_add_str(pod, "apiVersion", "v1");
	jx_add_str(pod, "kind", "Pod");
	jx_put(pod, "metadata", metadata(c, n, n->vm, c->namespace_, l->id));
	/* the positive mark of a lab Pod: on the Pod only (manifest_is_lab_pod) */
	jx_add_str(cJSON_GetObjectItemCaseSensitive(
	               cJSON_GetObjectItemCaseSensitive(pod, "metadata"), "labels"),
	           c->label.lab_pod, "true");
	spec = jx_add_obj(pod, "spec");
	jx_add_str(spec, "restartPolicy", "Never");
	jx_add_bool(spec, "automountServiceAccountToken", 0);
	jx_add_bool(spec, "enableServiceLinks", 0);
	/* lab Pods are disposable: no graceful shutdown wait when deleted */
	jx_add_num(spec, "terminationGracePeriodSeconds", 0);
	jx_add_str(jx_add_obj(jx_add_obj(spec, "securityContext"), "seccompProfile"), "type",
	           "RuntimeDefault");

	ctr = jx_obj();
	jx_add_str(ctr, "name", POD_CONTAINER);
	jx_add_str(ctr, "image", l->image);
	jx_add_str(ctr, "imagePullPolicy", "IfNotPresent");
	jx_put(ctr, "command", str_array(cmd));
	jx_add_str(ctr, "workingDir", "/root");
	if (l->shell) {
		/* the console's program (labvm-console execs $LABVM_SHELL, else bash, else sh) */
		cJSON *e = jx_obj();
		jx_add_str(e, "name", "LABVM_SHELL");
		jx_add_str(e, "value", l->shell);
		jx_push(jx_add_arr(ctr, "env"), e);
	}
	jx_add_str(ctr, "terminationMessagePolicy", "FallbackToLogsOnError");
	sc = jx_add_obj(ctr, "securityContext");
	jx_put(jx_add_obj(sc, "capabilities"), "drop", str_array(drop));
	jx_add_bool(sc, "allowPrivilegeEscalation", 0);
	jx_add_bool(sc, "privileged", 0);
	jx_add_str(jx_add_obj(sc, "seccompProfile"), "type", "RuntimeDefault");
	res = jx_add_obj(ctr, "resources");
	snprintf(cpus, sizeof cpus, "%d", l->cpus);
	jx_add_str(jx_add_obj(res, "requests"), "memory", l->memory);
	jx_add_str(cJSON_GetObjectItem(res, "requests"), "cpu", "100m");
	jx_add_str(jx_add_obj(res, "limits"), "memory", l->memory);
	jx_add_str(cJSON_GetObjectItem(res, "limits"), "cpu", cpus);
	probe = jx_add_obj(ctr, "readinessProbe");
	jx_put(jx_add_obj(probe, "exec"), "command", str_array(probe_cmd));
	jx_add_num(probe, "periodSeconds", 1);
	jx_add_num(probe, "timeoutSeconds", 5);
	jx_add_num(probe, "failureThreshold", 3);
	mnt = jx_obj();
	jx_add_str(mnt, "name", "lab");
	jx_add_str(mnt, "mountPath", "/labvm");
	jx_add_bool(mnt, "readOnly", 1);
	jx_push(jx_add_arr(ctr, "volumeMounts"), mnt);
	jx_push(jx_add_arr(spec, "containers"), ctr);

	vol = jx_obj();
	jx_add_str(vol, "name", "lab");
	sec = jx_add_obj(vol, "secret");
	jx_add_str(sec, "secretName", n->files);
	jx_add_num(sec, "defaultMode", 0400);
	items = jx_add_arr(sec, "items");
	if (l->setup) {
		cJSON *it = jx_obj();
		jx_add_str(it, "key", "setup.sh");
		jx_add_str(it, "path", "setup.sh");
		jx_push(items, it);
	}
	for (size_t i = 0; i < l->nfiles; i++) {
		cJSON *it = jx_obj();
		char key[32];
		char *path = xasprintf("files%s", l->files[i].path);
		snprintf(key, sizeof key, "f%zu", i);
		jx_add_str(it, "key", key);
		jx_add_str(it, "path", path);
		jx_add_num(it, "mode", (double)strtol(l->files[i].mode, NULL, 8));
		jx_push(items, it);
		free(path);
	}
	if (cJSON_GetArraySize(items) == 0)
		cJSON_DeleteItemFromObject(sec, "items"); /* an empty Secret: nothing projected */
	jx_push(jx_add_arr(spec, "volumes"), vol);
	return pod;
}

static int label_is(const cJSON *labels, const char *key, const char *value)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(labels, key);
	return cJSON_IsString(v) && strcmp(v->valuestring, value) == 0;
}

int manifest_is_lab_pod(const struct cfg *c, const cJSON *pod)
{
	const cJSON *md = cJSON_GetObjectItemCaseSensitive(pod, "metadata");
	const cJSON *labels = cJSON_GetObjectItemCaseSensitive(md, "labels"), *o;
	if (label_is(labels, c->label.lab_pod, "true"))
		return 1;
	/* a Pod of the previous release (no mark): see manifest.h */
	if (cJSON_GetObjectItemCaseSensitive(labels, c->label.lab_pod) ||
	    !label_is(labels, c->label.lab_session, "true") ||
	    cJSON_GetObjectItemCaseSensitive(labels, "kubevirt.io") ||
	    cJSON_GetObjectItemCaseSensitive(labels, "cdi.kubevirt.io"))
		return 0;
	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(md, "ownerReferences")) if (
	    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "controller"))) return 0;
	return 1;
}
