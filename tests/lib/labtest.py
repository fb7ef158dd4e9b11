"""Shared fixtures for labvm's integration suites (the stack is up)."""
import os
import subprocess
import time

from labclient import Api, Db, Kube, env, wait_until

PREFIX = "labvm.io"


def reset_world(kube=None, db=None):
    """Leave nothing of earlier suites: faults cleared, the API up, this
    environment's sessions ended and its lab objects gone (the cluster then
    holds no lab VM of any environment this check created)."""
    kube = kube or Kube()
    db = db or Db()
    kube.up()
    kube.clear_faults()
    cordon(kube, False)
    envname = env("LABVM_ENVIRONMENT")
    db.query("UPDATE sessions SET state = 'ended', end_reason = 'user', ended_at = now() "
             "WHERE state IN ('starting', 'ready')")
    # the warm pool (issue #18): no warm requests, no idle pool VM rows
    db.query("DELETE FROM pool_warm")
    db.query("DELETE FROM pool_vms")
    db.query("UPDATE session_queue SET state = 'left', ended_at = now() WHERE state = 'waiting'")
    for kind in ("virtualmachines", "secrets", "network-attachment-definitions", "pods"):
        # lab Pods; a VM's launcher pod goes with its VM
        sel = f"{PREFIX}/lab-session=true" + (",!kubevirt.io" if kind == "pods" else "")
        for o in kube.list(kind, sel):
            kube.delete(kind, o["metadata"]["name"])
    wait_until(lambda: not kube.list("virtualmachines", f"{PREFIX}/lab-session=true"),
               timeout=30, what=f"no lab VMs left (environment {envname} and others)")


def cordon(kube, on=True):
    """Every node of the simulator (un)schedulable, as `kubectl cordon` does:
    what is submitted meanwhile stays Pending (node(s) were unschedulable),
    a transient state that labvm's never-fits check rightly ignores."""
    r = kube.request("GET", "/api/v1/nodes")
    for n in r.json["items"] if r.status == 200 else []:
        if bool((n.get("spec") or {}).get("unschedulable")) != on:
            p = kube.request("PATCH", f"/api/v1/nodes/{n['metadata']['name']}",
                             {"spec": {"unschedulable": on}}, "application/merge-patch+json")
            if p.status != 200:
                raise AssertionError(f"cordon {n['metadata']['name']}: {p}")


def users(first, n):
    return [f"student{i}" for i in range(first, first + n)]


def vm_of(session):
    return session["vms"][0]["name"]


def secret_of(session):
    return vm_of(session) + "-cloudinit"


def frontends():
    """(name, base URL) of every front end of the stack."""
    out = []
    for fe in os.environ.get("LABVM_FRONTENDS", "lighttpd").split():
        out.append((fe, os.environ[f"LABVM_{fe.upper()}_URL"]))
    return out


__all__ = ["Api", "Db", "Kube", "env", "wait_until", "reset_world", "users", "vm_of",
           "secret_of", "frontends", "PREFIX", "time"]


def ready_lab(user, lesson="linux-basics", timeout=180):
    """A ready session of lesson for user (any open session of theirs is ended
    first): (Api, session JSON); AssertionError if it fails or cannot start."""
    api = Api(user)
    api.end_current()
    r = api.start(lesson)
    if r.status != 201:
        raise AssertionError(f"start: {r}")
    s = api.wait_state(r.json["id"], ("ready", "failed"), timeout)
    if s["state"] != "ready":
        raise AssertionError(f"not ready: {s.get('error')}")
    return api, s


def ticket_url(api, sid):
    """The console URL of a fresh ticket for session sid."""
    r = api.ticket(sid)
    if r.status != 200:
        raise AssertionError(f"console-ticket: {r}")
    return r.json["url"]


def lighttpd_fcgi_pids():
    """labvm.fcgi processes serving this stack's lighttpd (same LABVM_CONF;
    Apache's run under spawn-fcgi, unsupervised)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            envs = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if not (cmd and cmd[0].endswith(b"labvm.fcgi") and
                f"LABVM_CONF={env('LABVM_CONF')}".encode() in envs):
            continue
        try:
            ppid = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]
            parent = open(f"/proc/{ppid}/cmdline", "rb").read()
        except OSError:
            continue
        if b"lighttpd" in parent:
            out.append(int(pid))
    return out


def pg_ctl(*args):
    """pg_ctl on the stack's PostgreSQL (e.g. "restart", "-m", "fast")."""
    state = env("LABVM_STATE")
    return subprocess.run(["runuser", "-u", "postgres", "--", "/usr/lib/postgresql/15/bin/pg_ctl",
                           "-D", os.path.join(state, "pg", "data"),
                           "-l", os.path.join(state, "pg", "server.log"), "-w", "-t", "30", *args],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=60)


def reaper_argv(*args, exe="labvm-reaper"):
    """labvm-reaper's command line as the reaper CronJob's Pod runs it: in
    that Pod's network namespace (LABVM_REAPER_NETNS, the simulator's
    reaper-pod.json: the CronJob's labels, an address of its own), where
    NetworkPolicies see it as the cluster would; PostgreSQL and the API
    server are relayed into it (tests/lib/labstack.py reaper-relay)."""
    cmd = [os.path.join(env("LABVM_BIN"), exe), *args]
    ns = os.environ.get("LABVM_REAPER_NETNS")
    return ["nsenter", f"--net={ns}", "--"] + cmd if ns else cmd


def shipped_policies():
    """The NetworkPolicies of conf/k8s/networkpolicy.yaml (what every stack
    applies at the start, as an operator would)."""
    import yaml
    src = os.environ.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    with open(os.path.join(src, "conf", "k8s", "networkpolicy.yaml")) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def np_path(kube, name=None):
    p = f"/apis/networking.k8s.io/v1/namespaces/{kube.ns}/networkpolicies"
    return f"{p}/{name}" if name else p


def restore_fence(kube):
    """Every NetworkPolicy of the namespace deleted and the shipped ones
    created again: how a suite that changed the policies leaves the stack
    (fenced, as its start found it; LABVM_FENCED=0: left without any)."""
    for p in kube.request("GET", np_path(kube)).json.get("items", []):
        kube.request("DELETE", np_path(kube, p["metadata"]["name"]))
    if os.environ.get("LABVM_FENCED", "1") == "0":
        return
    for pol in shipped_policies():
        r = kube.request("POST", np_path(kube), pol)
        if r.status != 201:
            raise AssertionError(f"restoring {pol['metadata']['name']}: {r}")


__all__ += ["reaper_argv", "shipped_policies", "np_path", "restore_fence"]
