"""What the apiserver and KubeVirt's/CDI's admission webhooks check beyond the
schema: object names, labels, owner references, Secret data, and KubeVirt's
VM/VMI rules (inline cloud-init limit, running vs runStrategy, volume sources,
disk/volume and interface/network pairing). Also the defaults the apiserver
fills in on create."""
import base64
import re

import errors
from labelsel import valid_label_key, valid_label_value
from util import dig, parse_quantity

DNS1123_SUB = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
SUB_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
           "'-' or '.', and must start and end with an alphanumeric character (e.g. "
           "'example.com', regex used for validation is "
           "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
LABEL_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
             "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or "
             "'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
CLOUD_INIT_MAX = 2048
RUN_STRATEGIES = ("Always", "Halted", "Manual", "RerunOnFailure", "Once", "WaitAsReceiver")
VOLUME_SOURCES = ("hostDisk", "persistentVolumeClaim", "cloudInitNoCloud", "cloudInitConfigDrive",
                  "sysprep", "containerDisk", "ephemeral", "emptyDisk", "dataVolume", "configMap",
                  "secret", "downwardAPI", "serviceAccount", "downwardMetrics", "memoryDump",
                  "containerPath")


def _q(v):
    import json
    return json.dumps(v)


def check_meta(res, obj, causes, creating=True):
    md = obj.get("metadata") or {}
    name = md.get("name")
    if not name:
        if not (creating and md.get("generateName")):
            causes.append(("FieldValueRequired", "metadata.name",
                           "Required value: name or generateName is required"))
    else:
        if res.group == "rbac.authorization.k8s.io":
            if name in (".", "..") or "/" in name or "%" in name:
                causes.append(("FieldValueInvalid", "metadata.name",
                               f"Invalid value: {_q(name)}: may not contain '/'"))
        elif res.plural in ("namespaces",):
            if not DNS1123_LABEL.match(name) or len(name) > 63:
                causes.append(("FieldValueInvalid", "metadata.name",
                               f"Invalid value: {_q(name)}: {LABEL_MSG}"))
        elif not DNS1123_SUB.match(name) or len(name) > 253:
            causes.append(("FieldValueInvalid", "metadata.name",
                           f"Invalid value: {_q(name)}: {SUB_MSG}"))
    for k, v in (md.get("labels") or {}).items():
        if not valid_label_key(k):
            causes.append(("FieldValueInvalid", "metadata.labels",
                           f"Invalid value: {_q(k)}: name part must consist of alphanumeric "
                           "characters, '-', '_' or '.', and must start and end with an "
                           "alphanumeric character"))
        if not valid_label_value(v if isinstance(v, str) else str(v)):
            causes.append(("FieldValueInvalid", "metadata.labels",
                           f"Invalid value: {_q(v)}: a valid label must be an empty string or "
                           "consist of alphanumeric characters, '-', '_' or '.', and must start "
                           "and end with an alphanumeric character (e.g. 'MyValue',  or "
                           "'my_value',  or '12345', regex used for validation is "
                           "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"))
    ann = md.get("annotations") or {}
    size = 0
    for k, v in ann.items():
        size += len(k) + len(v or "")
        if not valid_label_key(k):
            causes.append(("FieldValueInvalid", "metadata.annotations",
                           f"Invalid value: {_q(k)}: name part must consist of alphanumeric "
                           "characters, '-', '_' or '.', and must start and end with an "
                           "alphanumeric character"))
    if size > 256 * 1024:
        causes.append(("FieldValueTooLong", "metadata.annotations",
                       "Too long: must have at most 262144 bytes"))
    for i, o in enumerate(md.get("ownerReferences") or []):
        for f in ("apiVersion", "kind", "name", "uid"):
            if not o.get(f):
                msg = {"apiVersion": "Invalid value: \"\": version must not be empty",
                       "kind": "Invalid value: \"\": kind must not be empty",
                       "name": "Invalid value: \"\": name must not be empty",
                       "uid": "Invalid value: \"\": uid must not be empty"}[f]
                causes.append(("FieldValueInvalid", f"metadata.ownerReferences.{f}", msg))
    ctrl = [o for o in md.get("ownerReferences") or [] if o.get("controller")]
    if len(ctrl) > 1:
        causes.append(("FieldValueInvalid", "metadata.ownerReferences",
                       "Invalid value: ...: Only one reference can have Controller set to true"))
    for f in md.get("finalizers") or []:
        if not isinstance(f, str) or not valid_label_key(f) or ("/" not in f and f not in (
                "foregroundDeletion", "orphan", "kubernetes")):
            causes.append(("FieldValueInvalid", "metadata.finalizers",
                           f"Invalid value: {_q(f)}: name is neither a standard finalizer name "
                           "nor is it fully qualified"))


def validate_secret(obj, causes):
    total = 0
    for k, v in (obj.get("data") or {}).items():
        if not SECRET_KEY.match(k) or len(k) > 253:
            causes.append(("FieldValueInvalid", "data",
                           f"Invalid value: {_q(k)}: a valid config key must consist of "
                           "alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
                           "'KEY_NAME',  or 'key-name', regex used for validation is "
                           "'[-._a-zA-Z0-9]+')"))
        total += len(base64.b64decode(v or ""))
    if total > 1024 * 1024:
        causes.append(("FieldValueTooLong", "data", "Too long: must have at most 1048576 bytes"))


def decode_secret_data(obj):
    """Base64-decode check of data values; merges stringData into data. Returns an error
    message for a malformed value (the apiserver's JSON decoder rejects it with 400)."""
    data = obj.get("data")
    if data is not None and not isinstance(data, dict):
        return None
    for k, v in (data or {}).items():
        if v is None:
            continue
        try:
            base64.b64decode(v, validate=True)
        except Exception:  # noqa: BLE001
            return f"illegal base64 data at input byte {len(v) // 4 * 4}"
    sd = obj.pop("stringData", None)
    if sd:
        d = dict(obj.get("data") or {})
        for k, v in sd.items():
            d[k] = base64.b64encode((v or "").encode()).decode()
        obj["data"] = d
    return None


def validate_vmi_spec(spec, prefix, causes):
    """KubeVirt ValidateVirtualMachineInstanceSpec (the parts that matter here)."""
    if not isinstance(spec, dict):
        causes.append(("FieldValueRequired", prefix, f"{prefix} must be set"))
        return
    volumes = spec.get("volumes") or []
    vnames = {}
    for i, v in enumerate(volumes):
        f = f"{prefix}.volumes[{i}]"
        n = v.get("name")
        if n in vnames:
            causes.append(("FieldValueDuplicate", f"{f}.name",
                           f"{f}.name '{n}' must not be used multiple times."))
        vnames[n] = v
        srcs = [s for s in VOLUME_SOURCES if v.get(s) is not None]
        if len(srcs) != 1:
            causes.append(("FieldValueRequired", f,
                           f"{f} must have exactly one source type set"))
        ci = v.get("cloudInitNoCloud")
        if ci is None:
            ci = v.get("cloudInitConfigDrive")
        if isinstance(ci, dict):
            kind = "cloudInitNoCloud" if v.get("cloudInitNoCloud") is not None else "cloudInitConfigDrive"
            cf = f"{f}.{kind}"
            udsrc = [k for k in ("userData", "userDataBase64", "secretRef") if ci.get(k)]
            ndsrc = [k for k in ("networkData", "networkDataBase64", "networkDataSecretRef")
                     if ci.get(k)]
            if len(udsrc) > 1:
                causes.append(("FieldValueInvalid", cf, f"{cf} must have only one userdatasource set."))
            if len(ndsrc) > 1:
                causes.append(("FieldValueInvalid", cf, f"{cf} must have only one networkdata source set."))
            if not udsrc and not ndsrc:
                causes.append(("FieldValueRequired", cf, f"{cf} must have at least one "
                               "userdatasource or one networkdatasource set."))
            ud = None
            if ci.get("userData"):
                ud = ci["userData"].encode()
            elif ci.get("userDataBase64"):
                try:
                    ud = base64.b64decode(ci["userDataBase64"], validate=True)
                except Exception:  # noqa: BLE001
                    causes.append(("FieldValueInvalid", f"{cf}.userDataBase64",
                                   f"{prefix}.volumes[{i}].{kind}.userDataBase64 is not a valid "
                                   "base64 value."))
            if ud is not None and len(ud) > CLOUD_INIT_MAX:
                causes.append(("FieldValueInvalid", cf, f"{cf} userdata exceeds {CLOUD_INIT_MAX} "
                               "byte limit. Should use UserDataSecretRef for larger data."))
            nd = None
            if ci.get("networkData"):
                nd = ci["networkData"].encode()
            elif ci.get("networkDataBase64"):
                try:
                    nd = base64.b64decode(ci["networkDataBase64"], validate=True)
                except Exception:  # noqa: BLE001
                    causes.append(("FieldValueInvalid", f"{cf}.networkDataBase64",
                                   f"{prefix}.volumes[{i}].{kind}.networkDataBase64 is not a "
                                   "valid base64 value."))
            if nd is not None and len(nd) > CLOUD_INIT_MAX:
                causes.append(("FieldValueInvalid", cf, f"{cf} networkdata exceeds "
                               f"{CLOUD_INIT_MAX} byte limit. Should use NetworkDataSecretRef "
                               "for larger data."))
        cd = v.get("containerDisk")
        if isinstance(cd, dict) and not cd.get("image"):
            causes.append(("FieldValueRequired", f"{f}.containerDisk.image",
                           f"{f}.containerDisk.image must be set"))
        eph = v.get("ephemeral")
        if isinstance(eph, dict) and not dig(eph, "persistentVolumeClaim", "claimName"):
            causes.append(("FieldValueRequired", f"{f}.ephemeral.persistentVolumeClaim.claimName",
                           f"{f}.ephemeral.persistentVolumeClaim.claimName is required"))
    disks = dig(spec, "domain", "devices", "disks") or []
    seen = set()
    for i, d in enumerate(disks):
        f = f"{prefix}.domain.devices.disks[{i}]"
        n = d.get("name")
        if n not in vnames:
            causes.append(("FieldValueInvalid", f"{f}.name", f"{f}.name '{n}' not found."))
        if n in seen:
            causes.append(("FieldValueDuplicate", f"{f}.name",
                           f"{f}.name '{n}' must not be used multiple times."))
        seen.add(n)
        types = [t for t in ("disk", "lun", "cdrom") if d.get(t) is not None]
        if len(types) > 1:
            causes.append(("FieldValueInvalid", f, f"{f} can only have a single target type "
                           "defined"))
    nets = {n.get("name") for n in spec.get("networks") or []}
    for i, itf in enumerate(dig(spec, "domain", "devices", "interfaces") or []):
        f = f"{prefix}.domain.devices.interfaces[{i}]"
        if itf.get("name") not in nets:
            causes.append(("FieldValueInvalid", f"{f}.name",
                           f"{f}.name '{itf.get('name')}' not found."))
    for i, n in enumerate(spec.get("networks") or []):
        if n.get("pod") is None and n.get("multus") is None:
            causes.append(("FieldValueRequired", f"{prefix}.networks[{i}]",
                           f"should have a network type"))
    mem = dig(spec, "domain", "resources", "requests", "memory")
    if mem is not None:
        try:
            if parse_quantity(mem) < 0:
                raise ValueError
        except ValueError:
            causes.append(("FieldValueInvalid", f"{prefix}.domain.resources.requests.memory",
                           f"{prefix}.domain.resources.requests.memory '{mem}': must be greater "
                           "than or equal to 0."))
    elif dig(spec, "domain", "memory", "guest") is None and \
            dig(spec, "domain", "resources", "limits", "memory") is None:
        causes.append(("FieldValueRequired", f"{prefix}.domain.resources.requests.memory",
                       f"{prefix}.domain.resources.requests.memory or "
                       f"{prefix}.domain.memory.guest must be set"))


def validate_vm(obj, causes, warnings):
    spec = obj.get("spec") or {}
    if spec.get("running") is not None and spec.get("runStrategy") is not None:
        causes.append(("FieldValueInvalid", "spec.running",
                       "Running and RunStrategy are mutually exclusive. Note that Running is "
                       "deprecated, please use RunStrategy instead"))
    if spec.get("running") is not None:
        warnings.append("spec.running is deprecated, please use spec.runStrategy instead.")
    rs = spec.get("runStrategy")
    if rs is not None and rs not in RUN_STRATEGIES:
        causes.append(("FieldValueInvalid", "spec.runStrategy",
                       f"Invalid RunStrategy ({rs})"))
    tmpl = spec.get("template")
    if not isinstance(tmpl, dict):
        causes.append(("FieldValueRequired", "spec.template", "missing virtual machine template."))
        return
    validate_vmi_spec(tmpl.get("spec"), "spec.template.spec", causes)


def validate_dv(obj, causes):
    spec = obj.get("spec") or {}
    if not spec.get("source") and not spec.get("sourceRef"):
        causes.append(("FieldValueRequired", "spec.source",
                       "Data volume should have either Source or SourceRef, or be externally "
                       "populated"))
    if not spec.get("pvc") and not spec.get("storage"):
        causes.append(("FieldValueRequired", "spec",
                       "Missing Data volume PVC"))
    src = spec.get("source") or {}
    if len([k for k, v in src.items() if v is not None]) > 1:
        causes.append(("FieldValueInvalid", "spec.source",
                       "Data volume source must have only one source type"))


def validate_pvc(obj, causes):
    spec = obj.get("spec") or {}
    if not spec.get("accessModes"):
        causes.append(("FieldValueRequired", "spec.accessModes",
                       "Required value: at least 1 access mode is required"))
    for m in spec.get("accessModes") or []:
        if m not in ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"):
            causes.append(("FieldValueNotSupported", "spec.accessModes",
                           f'Unsupported value: "{m}": supported values: "ReadOnlyMany", '
                           '"ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"'))
    if dig(spec, "resources", "requests", "storage") is None and not spec.get("volumeName"):
        causes.append(("FieldValueRequired", "spec.resources[storage]", "Required value"))


def validate_workload(res, obj, causes):
    """A few of the apiserver's checks of Deployments, CronJobs and Pods beyond
    the schema (pkg/apis/{apps,batch,core}/validation)."""
    spec = obj.get("spec") or {}
    if res.plural == "deployments":
        sel = spec.get("selector")
        if not sel:
            causes.append(("FieldValueRequired", "spec.selector", "Required value"))
        else:
            from labelsel import match_label_selector_obj
            labels = dig(spec, "template", "metadata", "labels") or {}
            if not match_label_selector_obj(sel, labels):
                causes.append(("FieldValueInvalid", "spec.template.metadata.labels",
                               f"Invalid value: {_q(labels)}: `selector` does not match "
                               "template `labels`"))
        pod = dig(spec, "template", "spec") or {}
        _pod_spec(pod, "spec.template.spec", causes, ("Always",))
    elif res.plural == "cronjobs":
        sched = spec.get("schedule")
        if not sched:
            causes.append(("FieldValueRequired", "spec.schedule", "Required value"))
        elif not (sched.startswith("@") or len(sched.split()) == 5):
            causes.append(("FieldValueInvalid", "spec.schedule", f"Invalid value: {_q(sched)}: "
                           f"unparseable schedule: expected exactly 5 fields, found "
                           f"{len(sched.split())}: {_q(sched)}"))
        cp = spec.get("concurrencyPolicy", "Allow")
        if cp not in ("Allow", "Forbid", "Replace"):
            causes.append(("FieldValueNotSupported", "spec.concurrencyPolicy",
                           f'Unsupported value: "{cp}": supported values: "Allow", "Forbid", '
                           '"Replace"'))
        pod = dig(spec, "jobTemplate", "spec", "template", "spec") or {}
        _pod_spec(pod, "spec.jobTemplate.spec.template.spec", causes, ("OnFailure", "Never"))
    elif res.plural == "jobs":
        # pkg/apis/batch/validation ValidateJobSpec: a Job's pods are not restarted
        # in place forever (restartPolicy OnFailure or Never)
        pod = dig(spec, "template", "spec") or {}
        _pod_spec(pod, "spec.template.spec", causes, ("OnFailure", "Never"))
    elif res.plural == "pods":
        _pod_spec(spec, "spec", causes, ("Always", "OnFailure", "Never"))


def _pod_spec(pod, f, causes, restart):
    cs = pod.get("containers") or []
    if not cs:
        causes.append(("FieldValueRequired", f"{f}.containers", "Required value"))
    names = set()
    for i, c in enumerate(cs):
        n = c.get("name")
        if not n:
            causes.append(("FieldValueRequired", f"{f}.containers[{i}].name", "Required value"))
        elif n in names:
            causes.append(("FieldValueDuplicate", f"{f}.containers[{i}].name",
                           f"Duplicate value: {_q(n)}"))
        names.add(n)
        if not c.get("image"):
            causes.append(("FieldValueRequired", f"{f}.containers[{i}].image", "Required value"))
    rp = pod.get("restartPolicy", "Always")
    if rp not in restart:
        causes.append(("FieldValueNotSupported", f"{f}.restartPolicy",
                       f'Unsupported value: "{rp}": supported values: '
                       + ", ".join(f'"{r}"' for r in restart)))
    vols = {v.get("name") for v in pod.get("volumes") or []}
    for i, c in enumerate(cs):
        for j, m in enumerate(c.get("volumeMounts") or []):
            if m.get("name") not in vols:
                causes.append(("FieldValueNotFound", f"{f}.containers[{i}].volumeMounts[{j}].name",
                               f"Not found: {_q(m.get('name'))}"))


def validate_netpol(obj, causes):
    """The apiserver's NetworkPolicy validation (pkg/apis/networking/validation)."""
    import ipaddress
    spec = obj.get("spec") or {}
    for i, t in enumerate(spec.get("policyTypes") or []):
        if t not in ("Ingress", "Egress"):
            causes.append(("FieldValueNotSupported", f"spec.policyTypes[{i}]",
                           f'Unsupported value: "{t}": supported values: "Ingress", "Egress"'))
    for sect, key in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(spec.get(sect) or []):
            for j, pp in enumerate(rule.get("ports") or []):
                f = f"spec.{sect}[{i}].ports[{j}]"
                proto = pp.get("protocol", "TCP")
                if proto not in ("TCP", "UDP", "SCTP"):
                    causes.append(("FieldValueNotSupported", f"{f}.protocol",
                                   f'Unsupported value: "{proto}": supported values: "SCTP", '
                                   '"TCP", "UDP"'))
                port, end = pp.get("port"), pp.get("endPort")
                if isinstance(port, int) and not 1 <= port <= 65535:
                    causes.append(("FieldValueInvalid", f"{f}.port", f"Invalid value: {port}: "
                                   "must be between 1 and 65535, inclusive"))
                if end is not None:
                    if not isinstance(port, int):
                        causes.append(("FieldValueForbidden", f"{f}.endPort", "Forbidden: may "
                                       "not be specified when port is non-numeric"))
                    elif end < port:
                        causes.append(("FieldValueInvalid", f"{f}.endPort", f"Invalid value: "
                                       f"{end}: must be greater than or equal to port"))
            for j, peer in enumerate(rule.get(key) or []):
                f = f"spec.{sect}[{i}].{key}[{j}]"
                n = sum(1 for k in ("podSelector", "namespaceSelector", "ipBlock")
                        if peer.get(k) is not None)
                if n == 0:
                    causes.append(("FieldValueRequired", f, "Required value: must specify a peer"))
                elif peer.get("ipBlock") is not None and n > 1:
                    causes.append(("FieldValueForbidden", f, "Forbidden: may not specify both "
                                   "ipBlock and another peer"))
                blk = peer.get("ipBlock")
                if blk is None:
                    continue
                try:
                    net = ipaddress.ip_network(blk.get("cidr") or "", strict=False)
                except ValueError:
                    causes.append(("FieldValueInvalid", f"{f}.ipBlock.cidr",
                                   f"Invalid value: {_q(blk.get('cidr') or '')}: must be a valid "
                                   "CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"))
                    continue
                for k, e in enumerate(blk.get("except") or []):
                    try:
                        en = ipaddress.ip_network(e, strict=False)
                        ok = en.version == net.version and en.subnet_of(net) and en != net
                    except ValueError:
                        ok = False
                    if not ok:
                        causes.append(("FieldValueInvalid", f"{f}.ipBlock.except[{k}]",
                                       f"Invalid value: {_q(e)}: must be a strict subset of "
                                       "`cidr`"))


WEBHOOKS = {
    "virtualmachines": "virtualmachine-validator.kubevirt.io",
    "virtualmachineinstances": "virtualmachineinstances-create-validator.kubevirt.io",
    "datavolumes": "datavolume-validate.cdi.kubevirt.io",
}


def webhook_error(res, causes):
    """KubeVirt/CDI webhook denial as the apiserver passes it on (422 Invalid)."""
    msgs = [c[2] for c in causes]
    if len(msgs) > 10:
        text = ", ".join(msgs[:10]) + f", and {len(msgs) - 10} more validation errors"
    else:
        text = ", ".join(msgs)
    e = errors.ApiError(422, f'admission webhook "{WEBHOOKS[res.plural]}" denied the request: '
                        f"{text}", "Invalid",
                        {"causes": [{"reason": c[0], "message": c[2], "field": c[1]}
                                    for c in causes]})
    return e
