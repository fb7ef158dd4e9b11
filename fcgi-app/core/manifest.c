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
	cJSON *s = jx_obj();
	char *b64 = util_b64(userdata, strlen(userdata));
	jx_add_str(s, "apiVersion", "v1");
	jx_add_str(s, "kind", "Secret");
	jx_put(s, "metadata", metadata(c, n, n->secret, c->namespace_, l->id));
	jx_add_str(s, "type", "Opaque");
	jx_add_str(jx_add_obj(s, "data"), "userdata", b64);
	free(b64);
	return s;
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
	jx_push(jx_add_arr(devices, "interfaces"), named("default", "masquerade", jx_obj()));
	jx_push(jx_add_arr(tspec, "networks"), named("default", "pod", jx_obj()));
	/* lab VMs are disposable: no graceful shutdown wait when deleted */
	jx_add_num(tspec, "terminationGracePeriodSeconds", 0);

	volumes = jx_add_arr(tspec, "volumes");
	jx_push(volumes, root_volume(n, l, disk));
	ci = jx_obj();
	jx_add_str(jx_add_obj(ci, "secretRef"), "name", n->secret);
	jx_push(volumes, named("cloudinitdisk", "cloudInitNoCloud", ci));
	return vm;
}

cJSON *manifest_owner_patch(const char *vm_name, const char *vm_uid)
{
	cJSON *p = jx_obj();
	cJSON *r = jx_obj();
	jx_add_str(r, "apiVersion", "kubevirt.io/v1");
	jx_add_str(r, "kind", "VirtualMachine");
	jx_add_str(r, "name", vm_name);
	jx_add_str(r, "uid", vm_uid);
	jx_add_bool(r, "blockOwnerDeletion", 0);
	jx_push(jx_add_arr(jx_add_obj(p, "metadata"), "ownerReferences"), r);
	return p;
}
