#include "golden.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define CDI_POD_PHASE "cdi.kubevirt.io/storage.pod.phase"

const char *golden_reason_str(enum golden_reason r)
{
	switch (r) {
	case GOLDEN_OK:
		return NULL;
	case GOLDEN_NOT_FOUND:
		return "not_found";
	case GOLDEN_FORBIDDEN:
		return "forbidden";
	case GOLDEN_IMPORTING:
		return "importing";
	case GOLDEN_SINGLE_NODE:
		return "single_node";
	case GOLDEN_IMAGE_MISMATCH:
		return "image_mismatch";
	case GOLDEN_DELETING:
		return "deleting";
	case GOLDEN_UNAVAILABLE:
		break;
	}
	return "unavailable";
}

static const char *map_str(const cJSON *map, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(map, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int has_cdi_annotation(const cJSON *ann)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, ann)
	{
		if (it->string && strncmp(it->string, "cdi.kubevirt.io/", 16) == 0)
			return 1;
	}
	return 0;
}

enum golden_reason golden_check_pvc(const struct cfg *c, const cJSON *pvc, const char *image)
{
	const cJSON *meta = cJSON_GetObjectItemCaseSensitive(pvc, "metadata");
	const cJSON *ann = cJSON_GetObjectItemCaseSensitive(meta, "annotations");
	const cJSON *labels = cJSON_GetObjectItemCaseSensitive(meta, "labels");
	const cJSON *modes = kj_get(pvc, "spec.accessModes");
	const char *phase = kj_str(pvc, "status.phase");
	const char *cdi = map_str(ann, CDI_POD_PHASE);
	const char *img;
	const cJSON *m;
	int shared = 0;

	if (!cJSON_IsObject(pvc) || !cJSON_IsObject(meta))
		return GOLDEN_UNAVAILABLE;
	if (cJSON_GetObjectItemCaseSensitive(meta, "deletionTimestamp") &&
	    !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(meta, "deletionTimestamp")))
		return GOLDEN_DELETING;
	if (cdi && strcmp(cdi, "Succeeded") != 0)
		return GOLDEN_IMPORTING;
	if (!phase || strcmp(phase, "Bound") != 0)
		return has_cdi_annotation(ann) ? GOLDEN_IMPORTING : GOLDEN_UNAVAILABLE;
	cJSON_ArrayForEach(m, modes)
	{
		if (cJSON_IsString(m) && (strcmp(m->valuestring, "ReadOnlyMany") == 0 ||
		                          strcmp(m->valuestring, "ReadWriteMany") == 0))
			shared = 1;
	}
	if (!shared)
		return GOLDEN_SINGLE_NODE;
	img = map_str(ann, c->label.image);
	if (!img)
		img = map_str(labels, c->label.image);
	if (!img || strcmp(img, image) != 0)
		return GOLDEN_IMAGE_MISMATCH;
	return GOLDEN_OK;
}

enum golden_reason golden_check(struct kube *k, const struct cfg *c, const struct lesson *l,
                                char *detail, size_t detail_len)
{
	char *path = kube_path("persistentvolumeclaims", c->namespace_, l->golden_pvc);
	cJSON *pvc = NULL;
	long code = kube_get(k, path, &pvc);
	enum golden_reason r;

	free(path);
	if (code == 200)
		r = golden_check_pvc(c, pvc, l->image);
	else if (code == 404)
		r = GOLDEN_NOT_FOUND;
	else if (code == 403 || code == 401)
		r = GOLDEN_FORBIDDEN;
	else
		r = GOLDEN_UNAVAILABLE;
	if (detail)
		snprintf(detail, detail_len, "pvc %s: %s", l->golden_pvc,
		         code == 200 ? "checked" : k->msg);
	cJSON_Delete(pvc);
	return r;
}
