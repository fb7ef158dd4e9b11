"""The kubelet's containers for pods that are not virt-launchers: each runs
as a pod guest (podguest.PodGuest) through the node's guest runtime, the
same way virt-handler runs a VMI's guest.

- Start: once the images are pulled, the container is created with its
  Secret volumes (keys, or `items` with their paths and modes), env,
  capabilities and workingDir; ContainerCreating until the guest runs, then
  phase Running, the pod IP, state `running`.
- Readiness: without a readinessProbe the container is ready once running;
  with an exec probe the kubelet runs it in the container after
  `initialDelaySeconds`, every `periodSeconds` (default 10), each under
  `timeoutSeconds` (default 1); `successThreshold` successes in a row make it
  ready, `failureThreshold` (default 3) failures in a row unready. The pod's
  `ContainersReady` and `Ready` conditions follow.
- The end: when the container's command exits, its state is `terminated`
  (exitCode, reason Completed or Error, the termination message from
  terminationMessagePath, or with FallbackToLogsOnError the log's tail when
  that is empty and it failed). restartPolicy Never: phase Failed or
  Succeeded; OnFailure restarts a failure, Always anything: restartCount + 1,
  `lastState` the terminated one, `waiting: CrashLoopBackOff` during the
  back-off (the profile's attach_retry doubled per restart, at most 5 min).
- seccomp: the effective `seccompProfile` (the container's, else the pod's)
  RuntimeDefault runs the container under the runtime's default profile
  (podguest.py, seccomp_exec.py); Unconfined, or none (the kubelet's default
  without `--seccomp-default`), under none. Localhost: this node has no
  profile files (/var/lib/kubelet/seccomp is empty), so as the kubelet does
  for a missing file the container is not created: `waiting:
  CreateContainerError`, event Failed, retried.
- A container that cannot be created (the runtime refused it) is terminated
  with exit code 128, reason StartError."""
import base64
import os
import threading
import time

import util
from util import dig

from .base import cond
from .runtime import GuestWorkers

SECCOMP_ROOT = "/var/lib/kubelet/seccomp/"
PROBE_DEFAULTS = {"initialDelaySeconds": 0, "periodSeconds": 10, "timeoutSeconds": 1,
                  "successThreshold": 1, "failureThreshold": 3}


# What an image runs when the pod gives no command (its ENTRYPOINT): every
# image is this host's root (podguest.py), so an image whose entrypoint is a
# program of a cluster component maps to the simulator's stand-in for it.
# The program travels in the command (python3 -c), as it would in the image:
# the container's root is the host's, but its /tmp is its own, so a checkout
# under /tmp (a CI clone) would not be there by path.
_SIM = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGE_ENTRYPOINTS = {
    # CDI's importer (cmd/cdi-importer): cdi_importer.py
    "quay.io/kubevirt/cdi-importer": os.path.join(_SIM, "cdi_importer.py"),
}


def entrypoint(image):
    repo = (image or "").rsplit("@", 1)[0]
    if ":" in repo.rsplit("/", 1)[-1]:
        repo = repo.rsplit(":", 1)[0]
    prog = IMAGE_ENTRYPOINTS.get(repo)
    if not prog:
        return None
    with open(prog) as f:
        return ["/usr/bin/python3", "-I", "-c", f.read()]


def is_launcher(pod):
    """A VMI's virt-launcher pod: KubeVirt's `kubevirt.io: virt-launcher` label
    (template.go). Not `kubevirt.io/created-by`: that label also reaches pods
    KubeVirt never made (a DataVolume of a VM carries it to its PVC and on to
    CDI's importer pod)."""
    return (pod["metadata"].get("labels") or {}).get("kubevirt.io") == "virt-launcher"


class PodContainers:
    def __init__(self, kubelet):
        self.k = kubelet
        self.sim = kubelet.sim
        self.api = kubelet.api
        self.store = kubelet.store
        self.runtime = kubelet.runtime
        self.enabled = getattr(self.sim.guest_class, "kind", "") in ("process", "qemu")
        self.probes = {}       # uid -> {"next", "ok", "fail", "ready", "busy"}
        self.restart_at = {}   # uid -> monotonic time of the next start after a crash
        self.workers = GuestWorkers(2, self.sim.log)
        self.lock = threading.Lock()

    # ---------------------------------------------------------------- start
    def _volumes(self, pod):
        ns = pod["metadata"].get("namespace")
        spec = pod["spec"]
        c = spec["containers"][0]
        by_name = {v["name"]: v for v in spec.get("volumes") or []}
        out = []
        for m in c.get("volumeMounts") or []:
            v = by_name.get(m.get("name")) or {}
            sec = v.get("secret")
            if not sec:
                continue
            s = self.store.get("secrets", ns, sec.get("secretName")) or {}
            data = {k: base64.b64decode(x) for k, x in (s.get("data") or {}).items()}
            mode = sec.get("defaultMode", 0o644)
            if sec.get("items"):
                files = {it["path"]: (data[it["key"]], it.get("mode", mode))
                         for it in sec["items"] if it["key"] in data}
            else:
                files = {k: (d, mode) for k, d in data.items()}
            out.append((m["mountPath"], files))
        return out

    def start(self, pod):
        """Create the container (the caller holds the store lock)."""
        from podguest import PodGuest, capabilities, seccomp_missing
        md = pod["metadata"]
        uid = md["uid"]
        spec = pod["spec"]
        c = spec["containers"][0]
        sc = dict(spec.get("securityContext") or {})
        sc.update(c.get("securityContext") or {})
        command = list(c.get("command") or entrypoint(c.get("image")) or []) + \
            list(c.get("args") or [])
        if not command:
            command = ["/bin/sh"]          # the image's default entrypoint
        env = {e["name"]: e.get("value", "") for e in c.get("env") or [] if "name" in e}
        prof = sc.get("seccompProfile") or {}
        seccomp = prof.get("type") or "Unconfined"
        if seccomp == "Localhost":
            f = SECCOMP_ROOT + (prof.get("localhostProfile") or "")
            self._create_error(pod, f'failed to generate security options for container '
                                    f'"{c.get("name")}": failed to generate seccomp security '
                                    f'profile option: cannot load seccomp profile "{f}": '
                                    f'open {f}: no such file or directory')
            return
        if seccomp == "RuntimeDefault" and seccomp_missing():
            self._create_error(pod, seccomp_missing())
            return
        ip = self.k.ips.get(uid) or self.k.ipam.alloc()
        self.k.ips[uid] = ip
        if dig(pod, "status", "podIP") != ip:
            # the sandbox has its address before the container starts, and the
            # kubelet reports it (so the policy agent knows it: podnet.attach
            # waits for that)
            pod = self.k._pod_status(pod, podIP=ip, podIPs=[{"ip": ip}]) or pod
        kw = dict(name=md["name"], workdir=self.sim.guest_dir(md.get("namespace"), md["name"], uid),
                  ip=ip, command=command, env=env, caps=capabilities(sc),
                  no_new_privs=sc.get("allowPrivilegeEscalation") is False,
                  volumes=self._volumes(pod), working_dir=c.get("workingDir"),
                  termination_path=c.get("terminationMessagePath"),
                  hostname=spec.get("hostname") or md["name"], log=self.sim.log,
                  hide=[self.sim.state_dir], net=self.sim.podnet,
                  seccomp=None if seccomp == "Unconfined" else seccomp)
        if self.sim.dns is not None:
            kw["resolv_conf"] = self.sim.dns.resolv_conf(md.get("namespace"), vm=False,
                                                         policy=spec.get("dnsPolicy"))
        self.runtime.start(uid, PodGuest, kw, f"pod {md.get('namespace')}/"
                           f"{md['name']}")
        self.probes.pop(uid, None)

    def _create_error(self, pod, msg):
        """The runtime refused to create the container: waiting CreateContainerError,
        retried after the back-off like the kubelet's sync loop."""
        k = (pod["metadata"]["uid"], "create-retry")
        if self.k.due.get(k, 0) > time.monotonic():
            return
        self.api.event(pod, "Warning", "Failed", "Error: " + msg, "kubelet")
        self.k._pod_status(pod, containerStatuses=self.k._container_statuses(
            pod, {"waiting": {"reason": "CreateContainerError", "message": msg}}))
        self.k.due[k] = time.monotonic() + self.k.profile.delay("attach_retry") * 5

    def pending(self, pod):
        """A bound pod whose images are there: create its container, then Running."""
        uid = pod["metadata"]["uid"]
        gs = self.runtime.state.get(uid)
        if gs is None:
            self.start(pod)
            return
        if gs == "starting":
            return
        if gs == "running":
            self._running_status(pod)
            return
        g = self.runtime.guests.get(uid)
        if g is not None and getattr(g, "init_pid", None) and g.exit_code() is not None:
            self.running(pod)      # it ran and already ended: terminated, its exit code
            return
        # could not be created
        why = self.runtime.errors.get(uid) or "the container could not be created"
        self._ended(pod, 128, "StartError", why)

    def _running_status(self, pod):
        uid = pod["metadata"]["uid"]
        ip = self.k.ips.get(uid)
        probe = dig(pod, "spec", "containers", 0, "readinessProbe")
        ready = probe is None
        now = util.now_rfc3339()
        rc = dig(pod, "status", "containerStatuses", 0, "restartCount") or 0
        last = dig(pod, "status", "containerStatuses", 0, "lastState") or {}
        sts = self.k._container_statuses(pod, {"running": {"startedAt": now}}, ready, True)
        for s in sts:
            s["restartCount"], s["lastState"] = rc, last
            s["containerID"] = "containerd://" + uid.replace("-", "")[:32] + f"{rc:08x}"
        r = "True" if ready else "False"
        rr = "" if ready else "ContainersNotReady"
        msg = "" if ready else f"containers with unready status: [{sts[0]['name']}]"
        self.k._pod_status(pod, phase="Running", podIP=ip, podIPs=[{"ip": ip}],
                           containerStatuses=sts,
                           conditions=[cond("Initialized", "True"),
                                       cond("ContainersReady", r, rr, msg),
                                       cond("Ready", r, rr, msg)])
        self.api.event(pod, "Normal", "Created", f"Created container {sts[0]['name']}", "kubelet")
        self.api.event(pod, "Normal", "Started", f"Started container {sts[0]['name']}", "kubelet")
        if probe is not None:
            p = dict(PROBE_DEFAULTS, **probe)
            self.probes[uid] = {"next": time.monotonic() + p["initialDelaySeconds"], "ok": 0,
                                "fail": 0, "ready": False, "busy": False}
            self.k.due[(uid, "probe")] = self.probes[uid]["next"]

    # ------------------------------------------------------------- running
    def running(self, pod):
        uid = pod["metadata"]["uid"]
        gs = self.runtime.state.get(uid)
        if gs in ("failed", "succeeded", "stopped"):
            g = self.runtime.guests.get(uid)
            code = g.exit_code() if g is not None else None
            if code is None:
                code = 137
            c = dig(pod, "spec", "containers", 0) or {}
            msg = g.termination_message(c.get("terminationMessagePolicy") ==
                                        "FallbackToLogsOnError") if g is not None else ""
            self._ended(pod, code, "Completed" if code == 0 else "Error", msg)
            if g is not None:
                self.runtime.workers.submit(uid, g.stop)
            return
        if gs != "running":
            return
        if "running" not in (dig(pod, "status", "containerStatuses", 0, "state") or {}):
            self._running_status(pod)      # restarted after a back-off
            return
        pr = self.probes.get(uid)
        if pr is None:
            return
        probe = dict(PROBE_DEFAULTS, **(dig(pod, "spec", "containers", 0, "readinessProbe") or {}))
        ready = dig(pod, "status", "containerStatuses", 0, "ready")
        if pr["ready"] != bool(ready):
            self._set_ready(pod, pr["ready"])
        if pr["busy"] or time.monotonic() < pr["next"]:
            return
        cmd = dig(probe, "exec", "command")
        g = self.runtime.guests.get(uid)
        if not cmd or g is None:
            return
        pr["busy"] = True

        def go():
            try:
                code, _, _ = g.exec_argv(cmd, timeout=probe["timeoutSeconds"])
            except Exception:  # noqa: BLE001 - the container went away
                code = None
            with self.store.lock:
                if code == 0:
                    pr["ok"] += 1
                    pr["fail"] = 0
                    if pr["ok"] >= probe["successThreshold"]:
                        pr["ready"] = True
                else:
                    pr["fail"] += 1
                    pr["ok"] = 0
                    if pr["fail"] >= probe["failureThreshold"]:
                        pr["ready"] = False
                pr["busy"] = False
                pr["next"] = time.monotonic() + probe["periodSeconds"]
                self.k.due[(uid, "probe")] = pr["next"]
            self.k.mgr.wake.set()
        self.workers.submit(uid, go)

    def _set_ready(self, pod, ready):
        sts = [dict(s, ready=ready) for s in dig(pod, "status", "containerStatuses") or []]
        r = "True" if ready else "False"
        rr = "" if ready else "ContainersNotReady"
        msg = "" if ready else f"containers with unready status: [{sts[0]['name']}]"
        self.k._pod_status(pod, containerStatuses=sts,
                           conditions=[cond("ContainersReady", r, rr, msg),
                                       cond("Ready", r, rr, msg)])
        if not ready:
            self.api.event(pod, "Warning", "Unhealthy", "Readiness probe failed: ", "kubelet")

    def _ended(self, pod, code, reason, message):
        uid = pod["metadata"]["uid"]
        policy = dig(pod, "spec", "restartPolicy") or "Always"
        st0 = dig(pod, "status", "containerStatuses", 0) or {}
        started = dig(st0, "state", "running", "startedAt") or util.now_rfc3339()
        term = {"exitCode": code, "reason": reason, "startedAt": started,
                "finishedAt": util.now_rfc3339(),
                "containerID": st0.get("containerID") or ""}
        if message:
            term["message"] = message
        self.probes.pop(uid, None)
        restart = policy == "Always" or (policy == "OnFailure" and code != 0)
        name = dig(pod, "spec", "containers", 0, "name")
        if restart:
            rc = (st0.get("restartCount") or 0) + 1
            back = min(300.0, self.k.profile.delay("attach_retry") * 5 * 2 ** min(rc - 1, 8))
            self.restart_at[uid] = time.monotonic() + back
            self.k.due[(uid, "restart")] = self.restart_at[uid]
            sts = [dict(st0, ready=False, started=False, restartCount=rc, lastState={
                "terminated": term}, state={"waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {int(back)}s restarting failed container={name} "
                               f"pod={pod['metadata']['name']}_{pod['metadata'].get('namespace')}"
                               f"({uid})"}})]
            self.k._pod_status(pod, phase="Running", containerStatuses=sts, conditions=[
                cond("ContainersReady", "False", "ContainersNotReady",
                     f"containers with unready status: [{name}]"),
                cond("Ready", "False", "ContainersNotReady",
                     f"containers with unready status: [{name}]")])
            self.api.event(pod, "Warning", "BackOff", "Back-off restarting failed container",
                           "kubelet")
            return
        sts = [dict(st0, ready=False, started=False, state={"terminated": term})]
        self.k._pod_status(pod, phase="Succeeded" if code == 0 else "Failed",
                           containerStatuses=sts, conditions=[
                               cond("ContainersReady", "False", "PodCompleted"),
                               cond("Ready", "False", "PodCompleted")])

    def crashed(self, pod):
        """A restarting container's back-off is over: start it again."""
        uid = pod["metadata"]["uid"]
        t = self.restart_at.get(uid)
        if t is None:
            return False
        if time.monotonic() < t:
            return True
        if self.runtime.state.get(uid) not in (None, "stopped", "failed", "succeeded"):
            return True
        # the old guest's stop is queued on the same worker, before the new start
        del self.restart_at[uid]
        self.runtime.state.pop(uid, None)
        self.runtime.guests.pop(uid, None)
        self.start(pod)
        return True

    # ----------------------------------------------------------- deletion
    def terminate(self, pod):
        """True while the container is still going down."""
        uid = pod["metadata"]["uid"]
        gs = self.runtime.state.get(uid)
        if gs in ("starting", "running", "stopping"):
            if gs != "stopping":
                self.runtime.stop(uid)
            return True
        g = self.runtime.guests.get(uid)
        if g is not None and gs in ("failed", "succeeded"):
            self.runtime.workers.submit(uid, g.stop)      # idempotent: its files go
        self.probes.pop(uid, None)
        self.restart_at.pop(uid, None)
        return False
