"""Multus secondary networks (k8snetworkplumbingwg/multus-cni, thick plugin;
facts in ../shared/reference/MULTUS-FACTS.md).

- The CRD network-attachment-definitions.k8s.cni.cncf.io/v1 and its schema
  (`spec.config`, a string holding a JSON CNI configuration; nothing else).
- What virt-controller puts on a virt-launcher pod for a VMI with multus
  networks: the `k8s.v1.cni.cncf.io/networks` annotation (KubeVirt >= 1.0
  names the pod-side interfaces "pod" + sha256(network name)[:11]).
- What the kubelet's CNI ADD through Multus does: every NAD named must exist
  (else FailedCreatePodSandBox with Multus's message, the pod never starts),
  its config must be valid JSON CNI; the bridge plugin's `bridge` name and
  `static` IPAM addresses are honoured; the result is the pod's
  `k8s.v1.cni.cncf.io/network-status` annotation.
"""
import hashlib
import json

NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
STATUS_ANNOTATION = "k8s.v1.cni.cncf.io/network-status"
DEFAULT_NETWORK = "kindnet"     # the cluster's default network, as Multus names it

# the CRD's openAPIV3Schema (deployments/multus-daemonset.yml), in the form
# schema.Swagger reads
NAD_DEFS = {
    "v1.NetworkAttachmentDefinition": {
        "description": "NetworkAttachmentDefinition is a CRD schema specified by the Network "
                       "Plumbing Working Group to express the intent for attaching pods to one "
                       "or more logical or physical networks.",
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "description": "NetworkAttachmentDefinition spec defines the desired state of "
                               "a network attachment",
                "type": "object",
                "properties": {
                    "config": {"description": "NetworkAttachmentDefinition config is a "
                                              "JSON-formatted CNI configuration",
                               "type": "string"},
                },
            },
        },
    },
}


def pod_iface_name(network_name):
    """KubeVirt's pod-side interface name of a secondary network."""
    return "pod" + hashlib.sha256(network_name.encode()).hexdigest()[:11]


def split_ref(ref, ns):
    """multus.networkName: "name" or "namespace/name" -> (namespace, name)."""
    if "/" in ref:
        a, b = ref.split("/", 1)
        return a, b
    return ns, ref


def vmi_multus(vmi):
    """[(network name, interface spec, (nad namespace, nad name))] of a VMI's
    secondary (non-default) multus networks."""
    spec = vmi.get("spec") or {}
    ns = vmi["metadata"].get("namespace")
    ifs = {i.get("name"): i for i in (spec.get("domain") or {}).get("devices", {})
           .get("interfaces") or []}
    out = []
    for n in spec.get("networks") or []:
        m = n.get("multus")
        if not isinstance(m, dict) or m.get("default"):
            continue
        out.append((n.get("name"), ifs.get(n.get("name")) or {},
                    split_ref(m.get("networkName") or "", ns)))
    return out


def networks_annotation(vmi):
    """The launcher pod's k8s.v1.cni.cncf.io/networks value, or None."""
    nets = vmi_multus(vmi)
    if not nets:
        return None
    ns = vmi["metadata"].get("namespace")
    out = []
    for name, itf, (nns, nname) in nets:
        e = {"name": nname, "namespace": nns or ns, "interface": pod_iface_name(name)}
        if itf.get("macAddress"):
            e["mac"] = itf["macAddress"]
        out.append(e)
    return json.dumps(out)


def pod_networks(pod):
    """The parsed networks annotation of a pod ([] when none)."""
    v = ((pod.get("metadata") or {}).get("annotations") or {}).get(NETWORKS_ANNOTATION)
    if not v:
        return []
    try:
        a = json.loads(v)
    except ValueError:
        return []
    return [e for e in a if isinstance(e, dict)] if isinstance(a, list) else []


def missing_error(pod, name, ns):
    """Multus's CNI ADD error for a NAD that does not exist."""
    md = pod["metadata"]
    return (f"Failed to create pod sandbox: rpc error: code = Unknown desc = failed to create pod "
            f"network sandbox k8s_{md['name']}_{md.get('namespace')}_{md.get('uid')}_0"
            f"({md.get('uid')}): error adding pod {md.get('namespace')}_{md['name']} to CNI "
            f'network "multus-cni-network": plugin type="multus-shim" name="multus-cni-network" '
            f"failed (add): CmdAdd (shim): CNI request failed with status 400: "
            f"'[{md.get('namespace')}/{md['name']}:{name}]: error loading k8s delegates k8s "
            f"args: TryLoadPodDelegates: error in getting k8s network for pod: "
            f"GetNetworkDelegates: failed getting the delegate: getKubernetesDelegate: cannot "
            f"find a network-attachment-definition ({name}) in namespace ({ns}): "
            f'network-attachment-definitions.k8s.cni.cncf.io "{name}" not found\'')


def cni_config(nad):
    """(config dict, None) or (None, why) of a NAD's spec.config."""
    text = ((nad or {}).get("spec") or {}).get("config")
    if not isinstance(text, str) or not text.strip():
        return None, "the network-attachment-definition has no config"
    try:
        c = json.loads(text)
    except ValueError as e:
        return None, f"error parsing the CNI config: {e}"
    if not isinstance(c, dict):
        return None, "the CNI config is not a JSON object"
    if "plugins" in c and isinstance(c["plugins"], list) and c["plugins"]:
        first = c["plugins"][0]
        c = dict(first, name=c.get("name"), cniVersion=c.get("cniVersion"))
    if not c.get("type"):
        return None, "the CNI config names no plugin type"
    return c, None


def bridge_name(conf, nad):
    """The bridge plugin's bridge (default "cni0", as the plugin's own default)."""
    return conf.get("bridge") or "cni0"


OVN_TYPE = "ovn-k8s-cni-overlay"
PLUGINS = ("bridge", OVN_TYPE)      # the CNI plugins this simulated cluster has


def plugin_error(conf, nad):
    """Why the CNI ADD of this config fails here (None: it does not): a plugin
    the nodes do not have (libcni's "failed to find plugin"), an OVN-Kubernetes
    topology other than layer2 (localnet needs a bridge mapping on every node,
    not modelled), or a netAttachDefName that is not this NAD."""
    t = conf.get("type")
    if t not in PLUGINS:
        return f'failed to find plugin "{t}" in path [/opt/cni/bin]'
    if t == OVN_TYPE:
        if conf.get("topology") != "layer2":
            return (f"OVN-Kubernetes topology {conf.get('topology')!r} is not served by this "
                    "simulated cluster (layer2 only)")
        md = (nad or {}).get("metadata") or {}
        want = f"{md.get('namespace')}/{md.get('name')}"
        if conf.get("netAttachDefName") != want or not conf.get("name"):
            return (f"OVN-Kubernetes: netAttachDefName {conf.get('netAttachDefName')!r} does "
                    f"not name this NetworkAttachmentDefinition ({want}), or no network name")
    return None


def l2_domain(conf, node):
    """(domain, bridge) of a secondary network for sessnet.py: the bridge
    plugin's bridge lives on the pod's node (containernetworking/plugins
    plugins/main/bridge: no uplink), an OVN-Kubernetes layer2 network is one
    switch for the cluster, keyed by the config's `name` (network names are
    cluster-wide there, not namespaced). (None, None): no L2 here."""
    import sessnet
    if conf.get("type") == "bridge":
        return node, bridge_name(conf, None)
    if conf.get("type") == OVN_TYPE and conf.get("topology") == "layer2":
        return sessnet.OVERLAY, sessnet.overlay_bridge(conf.get("name") or "")
    return None, None


def static_ips(conf):
    """Addresses of a static IPAM section (CIDR strings)."""
    ipam = conf.get("ipam") or {}
    if ipam.get("type") != "static":
        return []
    return [a["address"] for a in ipam.get("addresses") or []
            if isinstance(a, dict) and isinstance(a.get("address"), str)]


def network_status(default_ip, default_mac, attached):
    """The pod's network-status annotation: the default network, then each
    attachment {name "ns/nad", interface, mac, ips}."""
    out = [{"name": DEFAULT_NETWORK, "interface": "eth0", "ips": [default_ip] if default_ip else [],
            "mac": default_mac, "default": True, "dns": {}}]
    for a in attached:
        e = {"name": a["name"], "interface": a["interface"], "mac": a["mac"], "dns": {}}
        if a.get("ips"):
            e["ips"] = [ip.split("/")[0] for ip in a["ips"]]
        out.append(e)
    return json.dumps(out, indent=4)


def guest_network_data(raw):
    """cloud-init network data (v2, YAML or JSON) -> {mac: [CIDR addresses]}."""
    if not raw:
        return {}
    try:
        import yaml
        d = yaml.safe_load(raw)
    except Exception:  # noqa: BLE001 - a guest's cloud-init ignores bad network data
        return {}
    out = {}
    eths = (d or {}).get("ethernets") if isinstance(d, dict) else None
    for e in (eths or {}).values():
        if not isinstance(e, dict):
            continue
        mac = ((e.get("match") or {}).get("macaddress") or "").lower()
        addrs = [a for a in e.get("addresses") or [] if isinstance(a, str)]
        if mac and addrs:
            out[mac] = addrs
    return out
