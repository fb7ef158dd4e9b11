#!/usr/bin/python3
"""kubesim: pods as guests (container command, capabilities, Secret volumes,
readiness probes, container states) and the exec subresource over
v4/v5.channel.k8s.io WebSockets and SPDY/3.1, with python3-kubernetes'
stream() and Debian's kubectl (timeout: 240)."""
import asyncio
import base64
import fcntl
import json
import os
import pty
import select
import ssl
import struct
import subprocess
import termios
import time
import urllib.parse

import websockets

from simlib import (KUBECTL, PODS, SECRETS, VMS, Sim, cloud_config, secret, vm, wait_for,
                    wait_running)
from tap import T

t = T()
sim = Sim()
A, B = sim.admin, sim.backend
CTX = ssl.create_default_context(cafile=sim.ca)
try:
    from kubernetes import client as kclient
    from kubernetes.stream import stream as kstream
    NO_PYK = None
except ImportError:
    NO_PYK = "python3-kubernetes not installed"
NO_KUBECTL = None if os.access(KUBECTL, os.X_OK) else f"Debian's kubectl not at {KUBECTL}"


def lab_pod(name, command, probe=None, caps_drop=("ALL",), secret_name=None, image="debian:12",
            restart="Never", **sc):
    c = {"name": "lab", "image": image, "command": command,
         "securityContext": dict({"capabilities": {"drop": list(caps_drop)},
                                  "allowPrivilegeEscalation": False}, **sc),
         "resources": {"requests": {"memory": "64Mi", "cpu": "100m"},
                       "limits": {"memory": "256Mi", "cpu": "1"}},
         "terminationMessagePolicy": "FallbackToLogsOnError"}
    spec = {"restartPolicy": restart, "automountServiceAccountToken": False,
            "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [c]}
    if probe:
        c["readinessProbe"] = probe
    if secret_name:
        c["volumeMounts"] = [{"name": "lab", "mountPath": "/lab", "readOnly": True}]
        spec["volumes"] = [{"name": "lab", "secret": {
            "secretName": secret_name, "defaultMode": 0o444,
            "items": [{"key": "setup", "path": "setup.sh", "mode": 0o555},
                      {"key": "f0", "path": "files/etc/motd"}]}}]
    return {"metadata": {"name": name, "labels": {"labvm.io/lab-session": "true"}}, "spec": spec}


def pod(name):
    return A.get(f"{PODS}/{name}").json


def cstate(name):
    return (pod(name).get("status", {}).get("containerStatuses") or [{}])[0].get("state") or {}


def ready(name):
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in pod(name).get("status", {}).get("conditions") or [])


def running(name):
    return "running" in cstate(name)


def exec_url(name, argv, stdin=False, stdout=True, stderr=True, tty=False):
    q = [("command", a) for a in argv] + [("stdin", str(stdin).lower()),
                                          ("stdout", str(stdout).lower()),
                                          ("stderr", str(stderr).lower()),
                                          ("tty", str(tty).lower())]
    return (sim.url.replace("https://", "wss://") + f"{PODS}/{name}/exec?" +
            urllib.parse.urlencode(q))


def ws(name, argv, protos=("v5.channel.k8s.io", "v4.channel.k8s.io"), token=None, **kw):
    return websockets.connect(exec_url(name, argv, **kw), ssl=CTX, subprotocols=list(protos),
                              extra_headers={"Authorization": "Bearer " + (token or
                                                                           sim.backend_token)},
                              open_timeout=5, max_size=None)


async def collect(w, timeout=10):
    """-> ({channel: bytes}, [frames]) until the server closes."""
    out, frames = {}, []
    try:
        while True:
            m = await asyncio.wait_for(w.recv(), timeout)
            t.ok(isinstance(m, bytes), "binary frames only")
            frames.append(m)
            if m:
                out[m[0]] = out.get(m[0], b"") + m[1:]
    except websockets.ConnectionClosed:
        pass
    return out, frames


B.post(SECRETS, {"metadata": {"name": "p-files"}, "data": {
    "setup": base64.b64encode(b"#!/bin/sh\necho setting up\nmkdir -p /etc/lab\n").decode(),
    "f0": base64.b64encode(b"welcome\n").decode()}})
SETUP = "sh /lab/setup.sh > /tmp/setup.out 2>&1; rc=$?; if [ $rc -ne 0 ]; then " \
        "tail -c 1024 /tmp/setup.out > /dev/termination-log; exit $rc; fi; " \
        "cp -r /lab/files/. /; touch /tmp/ready; exec sleep infinity"
PROBE = {"exec": {"command": ["test", "-e", "/tmp/ready"]}, "periodSeconds": 1}
t.eq(B.post(PODS, lab_pod("p-main", ["/bin/sh", "-c", SETUP], PROBE, secret_name="p-files")).status,
     201, "the backend creates a lab pod")


@t.test
def pod_runs_its_command_and_gets_ready():
    wait_for(lambda: ready("p-main"), 15, what="p-main Ready")
    p = pod("p-main")
    st = p["status"]
    t.eq(st["phase"], "Running", "phase")
    t.ok(st.get("podIP"), "a pod IP", st)
    r = sim.exec_pod("p-main", ["ip", "-4", "-o", "addr", "show", "eth0"])
    t.ok(r[0] == 0 and f" {st['podIP']}/".encode() in r[1],
         "its own network namespace, with the pod IP on eth0", r)
    cs = st["containerStatuses"][0]
    t.ok(cs["ready"] and cs["started"] and "startedAt" in cs["state"]["running"], "running", cs)
    conds = {c["type"]: c["status"] for c in st["conditions"]}
    t.eq((conds.get("ContainersReady"), conds.get("Initialized"), conds.get("PodScheduled")),
         ("True", "True", "True"), "conditions")
    r = sim.exec_pod("p-main", ["cat", "/etc/motd"])
    t.eq(r, (0, b"welcome\n", b""), "the Secret's item reached its path, setup copied it")
    r = sim.exec_pod("p-main", ["sh", "-c", "stat -c %a /lab/setup.sh /lab/files/etc/motd; "
                                "touch /lab/x"])
    t.eq(r[1], b"555\n444\n", "item modes and defaultMode")
    t.ok(b"Read-only file system" in r[2], "the Secret volume is read-only", r)
    r = sim.exec_pod("p-main", ["sh", "-c", "echo $$; cat /proc/1/cmdline | tr '\\0' ' '"])
    t.ok(r[1].startswith(b"") and b"sleep infinity" in r[1], "own PID namespace: PID 1 is the "
         "container's command", r)
    r = sim.exec_pod("p-main", ["sh", "-c", "test -e /var/run/secrets/kubernetes.io && echo sa"])
    t.ok(b"sa" not in r[1], "no service-account token mounted")
    r = sim.exec_pod("p-main", ["ls", sim.dir])
    t.ok(r[0] != 0 or not r[1].strip(), "the simulator's state dir is hidden", r)


@t.test
def zero_capabilities_in_a_pod_but_root_in_a_vm():
    wait_for(lambda: ready("p-main"), 15)
    probes = {
        "mount": "mount -t tmpfs none /mnt",
        "unshare": "unshare --mount --uts true",
        "raw socket": "python3 -c 'import socket; socket.socket(socket.AF_INET, "
                      "socket.SOCK_RAW, socket.IPPROTO_ICMP)'",
    }
    r = sim.exec_pod("p-main", ["grep", "-E", "^Cap(Eff|Prm|Bnd)", "/proc/self/status"])
    t.eq(r[1].decode().split(), ["CapPrm:", "0000000000000000", "CapEff:", "0000000000000000",
                                 "CapBnd:", "0000000000000000"], "no capability at all")
    r = sim.exec_pod("p-main", ["id", "-u"])
    t.eq(r[1], b"0\n", "still uid 0 (capabilities, not the uid, are what is dropped)")
    for what, cmd in probes.items():
        r = sim.exec_pod("p-main", ["sh", "-c", cmd])
        t.ok(r[0] != 0, f"{what} fails in the lab pod", r)
    B.post(SECRETS, secret("p-vm", cloud_config(["touch /root/ok"])))
    B.post(VMS, vm("p-vm", "p-vm"))
    wait_running(sim, "p-vm")
    wait_for(lambda: sim.exec("p-vm", "test -e /root/ok")["exit_code"] == 0, 10)
    for what, cmd in probes.items():
        r = sim.exec("p-vm", cmd)
        t.eq(r["exit_code"], 0, f"{what} works for root in a VM guest", r)
    # the runtime's default set without a drop: NET_RAW is in it, SYS_ADMIN is not
    t.eq(B.post(PODS, lab_pod("p-default", ["sleep", "infinity"], caps_drop=())).status, 201)
    wait_for(lambda: running("p-default"), 15)
    t.eq(sim.exec_pod("p-default", ["sh", "-c", probes["raw socket"]])[0], 0,
         "the default set has NET_RAW")
    t.ok(sim.exec_pod("p-default", ["sh", "-c", probes["mount"]])[0] != 0,
         "the default set has no SYS_ADMIN")


# the readiness probe keeps its own record in the container: 'p' for a pass,
# 'f' for a failure; it fails while /tmp/fails holds a count above 0
PROBE_SH = ("n=$(cat /tmp/fails 2>/dev/null || echo 0); if [ \"$n\" -gt 0 ]; then "
            "echo $((n - 1)) > /tmp/fails; echo f >> /tmp/probes; exit 1; fi; "
            "echo p >> /tmp/probes")


def probe_record(name):
    return sim.exec_pod(name, ["sh", "-c", "cat /tmp/probes 2>/dev/null; true"])[1].decode().split()


def ready_in(obj):
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


@t.test
def readiness_probe_delay_and_failure_threshold():
    def probe(delay):
        return {"exec": {"command": ["sh", "-c", PROBE_SH]}, "initialDelaySeconds": delay,
                "periodSeconds": 1, "failureThreshold": 2}
    # p-late runs first and so longer than p-probe, but its initial delay
    # (an hour) is beyond this test: it must not be probed nor be ready
    t.eq(B.post(PODS, lab_pod("p-late", ["sleep", "infinity"], probe(3600))).status, 201)
    wait_for(lambda: running("p-late"), 30, what="p-late running")
    t.eq(B.post(PODS, lab_pod("p-probe", ["sleep", "infinity"], probe(1))).status, 201)
    wait_for(lambda: running("p-probe"), 30, what="p-probe running")
    wait_for(lambda: ready("p-probe"), 60, what="p-probe ready")
    t.ok("p" in probe_record("p-probe"), "p-probe ready once its probe passed",
         probe_record("p-probe"))
    t.ok(running("p-late") and not ready("p-late"),
         "p-late: running, not ready before its initialDelaySeconds", pod("p-late")["status"])
    t.eq(probe_record("p-late"), [], "p-late: not probed before its initialDelaySeconds")

    # one failure, then passes: below failureThreshold 2, Ready never goes False
    # (every change of the pod is seen through a watch, up to a sentinel)
    n0 = len(probe_record("p-probe"))
    rv = pod("p-probe")["metadata"]["resourceVersion"]
    w = A.watch(PODS + f"?watch=1&resourceVersion={rv}&fieldSelector=metadata.name%3Dp-probe"
                "&timeoutSeconds=600", timeout=120)
    sim.exec_pod("p-probe", ["sh", "-c", "echo 1 > /tmp/fails"])
    wait_for(lambda: "fpp" in "".join(probe_record("p-probe")[n0:]), 60, interval=0.2,
             what="a failed probe, then two passes")
    t.eq(A.patch(f"{PODS}/p-probe", {"metadata": {"annotations": {"t/sentinel": "1"}}}).status,
         200, "the sentinel")
    seen = []
    while True:
        e = w.next()
        if e is None:
            break
        seen.append(ready_in(e["object"]))
        if (e["object"]["metadata"].get("annotations") or {}).get("t/sentinel"):
            break
    w.close()
    t.ok(seen and all(seen), "one failed probe (below failureThreshold 2): Ready stayed True",
         seen)

    # failures from now on: unready after two in a row, still Running
    n1 = len(probe_record("p-probe"))
    sim.exec_pod("p-probe", ["sh", "-c", "echo 1000000 > /tmp/fails"])
    wait_for(lambda: not ready("p-probe"), 60, what="unready after two failures")
    got = "".join(probe_record("p-probe")[n1:])
    t.ok(len(got.split("p")[-1]) >= 2, "unready after two failed probes in a row", got)
    conds = {c["type"]: c for c in pod("p-probe")["status"]["conditions"]}
    t.eq(conds["Ready"].get("reason"), "ContainersNotReady", "reason")
    t.eq(pod("p-probe")["status"]["phase"], "Running", "still Running")


@t.test
def setup_failure_is_terminated_with_code_and_message():
    B.post(SECRETS, {"metadata": {"name": "p-bad"}, "data": {
        "setup": base64.b64encode(b"echo about to fail\necho oops >&2\nexit 7\n").decode(),
        "f0": ""}})
    t.eq(B.post(PODS, lab_pod("p-fail", ["/bin/sh", "-c", SETUP], PROBE,
                              secret_name="p-bad")).status, 201)
    wait_for(lambda: pod("p-fail").get("status", {}).get("phase") == "Failed", 15,
             what="p-fail Failed")
    term = cstate("p-fail").get("terminated") or {}
    t.eq((term.get("exitCode"), term.get("reason")), (7, "Error"), "exit code and reason")
    t.eq(term.get("message"), "about to fail\noops\n", "the termination message")
    # without a termination message, FallbackToLogsOnError gives the log's tail
    t.eq(B.post(PODS, lab_pod("p-fail2", ["sh", "-c", "echo last words; exit 3"])).status, 201)
    wait_for(lambda: "terminated" in cstate("p-fail2"), 15)
    term = cstate("p-fail2")["terminated"]
    t.eq((term.get("exitCode"), term.get("message")), (3, "last words\n"), "log tail")
    t.eq(B.post(PODS, lab_pod("p-done", ["true"])).status, 201)
    wait_for(lambda: pod("p-done").get("status", {}).get("phase") == "Succeeded", 15)
    t.eq(cstate("p-done")["terminated"]["reason"], "Completed", "exit 0: Completed")
    r = B.get(f"{PODS}/p-fail/exec?command=true&stdout=true")
    t.eq((r.status, r.json.get("message")), (400, "cannot exec into a container in a completed "
                                             "pod; current phase is Failed"), "no exec when done")


@t.test
def crash_of_a_ready_pod_with_restart_always():
    t.eq(B.post(PODS, lab_pod("p-crash", ["sh", "-c", "while [ ! -e /tmp/die ]; do sleep 0.1; "
                                          "done; rm /tmp/die; exit 9"], restart="Always")).status,
         201)
    wait_for(lambda: ready("p-crash"), 15)
    sim.exec_pod("p-crash", ["touch", "/tmp/die"])
    wait_for(lambda: (pod("p-crash")["status"]["containerStatuses"][0].get("restartCount") or 0)
             >= 1, 15, what="restartCount 1")
    cs = pod("p-crash")["status"]["containerStatuses"][0]
    t.eq(cs.get("lastState", {}).get("terminated", {}).get("exitCode"), 9,
         "lastState is the terminated one", cs)
    t.eq(cs["state"].get("waiting", {}).get("reason"), "CrashLoopBackOff", "back-off", cs)
    t.ok(not ready("p-crash"), "not ready meanwhile")
    wait_for(lambda: running("p-crash"), 20, what="restarted")
    t.eq(sim.exec_pod("p-crash", ["test", "-e", "/tmp/die"])[0], 1,
         "a fresh container (its writes are gone)")


@t.test
def image_pull_errors():
    t.eq(B.post(PODS, lab_pod("p-img", ["true"], image="registry.example/doesnotexist:1")).status,
         201)
    wait_for(lambda: (cstate("p-img").get("waiting") or {}).get("reason") == "ErrImagePull", 10,
             what="ErrImagePull")
    wait_for(lambda: (cstate("p-img").get("waiting") or {}).get("reason") == "ImagePullBackOff",
             10, what="then ImagePullBackOff")
    t.eq(pod("p-img")["status"]["phase"], "Pending", "Pending meanwhile")


@t.test
def exec_channels_every_first_byte():
    wait_for(lambda: ready("p-main"), 15)
    data = bytes(range(256)) * 4

    async def go(proto):
        async with ws("p-main", ["cat"], protos=(proto,), stdin=True, stderr=False) as w:
            t.eq(w.subprotocol, proto, "negotiated")
            first = await asyncio.wait_for(w.recv(), 5)
            t.eq(first, b"\x01", "the kubelet's empty frame on stdout first")
            for i in range(256):       # every value as the first byte of stdin's data
                await w.send(b"\x00" + data[i:i + 3])
            if proto.startswith("v5"):
                await w.send(b"\xff\x00")          # close stdin: cat ends
            else:
                await w.send(b"\x07junk")          # unknown channel: ignored
                await w.send(b"\x00")              # empty data: nothing
            got = b""
            deadline = time.monotonic() + 5
            want = b"".join(data[i:i + 3] for i in range(256))
            while len(got) < len(want) and time.monotonic() < deadline:
                m = await asyncio.wait_for(w.recv(), 5)
                t.eq(m[:1], b"\x01", "stdout channel")
                got += m[1:]
            t.eq(got, want, f"{proto}: bytes 0..255 as first data bytes pass both ways")
            if proto.startswith("v5"):
                out, _ = await collect(w)
                t.eq(json.loads(out.get(3, b"{}")), {"metadata": {}, "status": "Success"},
                     "Success on the error channel")
    asyncio.run(go("v5.channel.k8s.io"))
    asyncio.run(go("v4.channel.k8s.io"))


@t.test
def exec_exit_codes_stderr_and_protocol_choice():
    wait_for(lambda: ready("p-main"), 15)

    async def go():
        async with ws("p-main", ["sh", "-c", "echo out; echo err >&2; exit 3"],
                      protos=("v4.channel.k8s.io", "v5.channel.k8s.io")) as w:
            t.eq(w.subprotocol, "v4.channel.k8s.io", "the client's first choice")
            out, frames = await collect(w)
            t.eq(frames[0], b"\x01", "empty stdout frame first")
        t.eq((out.get(1), out.get(2)), (b"out\n", b"err\n"), "stdout and stderr channels")
        st = json.loads(out[3])
        t.eq((st["status"], st["reason"], st["details"]["causes"]),
             ("Failure", "NonZeroExitCode", [{"reason": "ExitCode", "message": "3"}]),
             "NonZeroExitCode with the code in details.causes")
        t.ok(st["message"].startswith("command terminated with non-zero exit code"), st)
        try:
            async with ws("p-main", ["true"], protos=("channel.k8s.io",)):
                pass
            t.fail("an unsupported protocol was accepted")
        except websockets.InvalidStatusCode as e:
            t.eq(e.status_code, 400, "unsupported protocols: 400")
    asyncio.run(go())
    r = B.get(f"{PODS}/p-main/exec?command=true")
    t.eq((r.status, r.json.get("message")),
         (400, "you must specify at least 1 of stdin, stdout, stderr"), "no stream")
    r = B.get(f"{PODS}/p-main/exec?command=true&stdout=true&container=nope")
    t.eq((r.status, r.json.get("message")), (400, "container nope is not valid for pod p-main"))
    alice = sim.client(sim.token("alice"))
    r = alice.get(f"{PODS}/p-main/exec?command=true&stdout=true")
    t.eq((r.status, r.json.get("reason")), (403, "Forbidden"), "exec needs pods/exec get (the GET)")


@t.test
def exec_tty_and_resize():
    wait_for(lambda: ready("p-main"), 15)

    async def go():
        async with ws("p-main", ["/bin/sh"], stdin=True, tty=True) as w:
            await w.send(b"\x04" + json.dumps({"Width": 123, "Height": 45}).encode())
            await asyncio.sleep(0.2)
            await w.send(b"\x00stty size; exit 5\n")
            out, _ = await collect(w)
        t.ok(b"45 123" in out.get(1, b""), "the resize reached the pty", out)
        t.ok(2 not in out, "no stderr channel with a tty")
        st = json.loads(out[3])
        t.eq(st["details"]["causes"][0]["message"], "5", "the exit code")
        async with ws("p-main", ["/bin/sh"], stdin=True, tty=True) as w:
            # two resize messages split across frames, then joined in one
            msg = json.dumps({"Width": 90, "Height": 30}).encode()
            await w.send(b"\x04" + msg[:5])
            await w.send(b"\x04" + msg[5:] + json.dumps({"Width": 91, "Height": 31}).encode())
            await asyncio.sleep(0.2)
            await w.send(b"\x00stty size; exit\n")
            out, _ = await collect(w)
        t.ok(b"31 91" in out.get(1, b""), "split and joined resize messages", out)
    asyncio.run(go())


def alive(name, pid):
    r = sim.exec_pod(name, ["sh", "-c", f"kill -0 {pid} 2>/dev/null && echo alive; true"])
    return r[1].strip() == b"alive"


@t.test
def exec_hangup_without_a_tty_leaves_the_command_running():
    """A client that goes away kills nothing without a tty (the kubelet and
    containerd wait for the process; CONFORMANCE.md "Pods / exec"); the
    exec'd process leads a session of its own (runc's setsid); with a tty
    the command is hung up."""
    wait_for(lambda: ready("p-main"), 15)
    show = "echo $$ $(cut -d' ' -f5,6 /proc/$$/stat)"

    async def first_line(w):
        got = b""
        while b"\n" not in got:
            m = await asyncio.wait_for(w.recv(), 10)
            if m and m[0] == 1:
                got += m[1:]
        return got.decode().split()

    async def go():
        async with ws("p-main", ["sh", "-c", show + "; sleep 60; touch /tmp/outlived"]) as w:
            plain = await first_line(w)
        async with ws("p-main", ["/bin/sh", "-c", show + "; exec sleep 61"], stdin=True,
                      tty=True) as w:
            tty = await first_line(w)
        return plain, tty
    plain, tty = asyncio.run(go())
    t.eq(plain[1:], [plain[0], plain[0]], "without a tty: its own process group and session",
         plain)
    t.eq(tty[1:], [tty[0], tty[0]], "with a tty too", tty)
    # both clients have hung up: the tty's command is hung up; then, a
    # second on (the old hang-up took up to one), the other still runs
    wait_for(lambda: not alive("p-main", tty[0]), 10, what="the tty exec hung up")
    time.sleep(1.5)
    t.ok(alive("p-main", plain[0]), "the non-tty command still runs after its client left")
    sim.exec_pod("p-main", ["sh", "-c", f"kill -KILL -{plain[0]}"])
    wait_for(lambda: not alive("p-main", plain[0]), 10, what="killed by its process group")
    t.eq(sim.exec_pod("p-main", ["test", "-e", "/tmp/outlived"])[0], 1, "it never got there")


@t.test(skip=NO_PYK)
def python3_kubernetes_stream():
    wait_for(lambda: ready("p-main"), 15)
    cfg = kclient.Configuration()
    cfg.host = sim.url
    cfg.ssl_ca_cert = sim.ca
    cfg.api_key = {"authorization": "Bearer " + sim.backend_token}
    api = kclient.CoreV1Api(kclient.ApiClient(cfg))
    out = kstream(api.connect_get_namespaced_pod_exec, "p-main", "labs",
                  command=["cat", "/etc/motd"], stderr=True, stdin=False, stdout=True, tty=False)
    t.eq(out, "welcome\n", "stream() with preloaded content")
    r = kstream(api.connect_get_namespaced_pod_exec, "p-main", "labs",
                command=["sh", "-c", "read x; echo got $x; echo e >&2; exit 4"], stderr=True,
                stdin=True, stdout=True, tty=False, _preload_content=False)
    r.write_stdin("hello\n")
    r.run_forever(timeout=10)
    t.eq((r.returncode, r.read_stdout(1), r.read_stderr(1)), (4, "got hello\n", "e\n"),
         "stdin, stdout, stderr and the exit code")
    r = kstream(api.connect_get_namespaced_pod_exec, "p-main", "labs", command=["/bin/sh"],
                stderr=False, stdin=True, stdout=True, tty=True, _preload_content=False)
    r.write_channel(4, json.dumps({"Width": 77, "Height": 22}))
    time.sleep(0.2)
    r.write_stdin("stty size; exit 0\n")
    r.run_forever(timeout=10)
    t.ok("22 77" in r.read_stdout(1), "resize through write_channel(4)")
    t.eq(r.returncode, 0, "Success")


@t.test(skip=NO_KUBECTL)
def debian_kubectl_exec_over_spdy():
    wait_for(lambda: ready("p-main"), 15)
    kc = sim.kubeconfig(sim.backend_token)

    def k(*args, inp=None):
        r = subprocess.run([KUBECTL, "--kubeconfig", kc, "--request-timeout=20s"] + list(args),
                           input=inp, capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout, r.stderr
    rc, out, err = k("exec", "p-main", "--", "sh", "-c", "cat /etc/motd; echo e >&2; exit 3")
    t.eq((rc, out), (3, "welcome\n"), f"exit code and stdout ({err})")
    t.ok(err.startswith("e\n") and "command terminated with exit code 3" in err, err)
    rc, out, err = k("exec", "-i", "p-main", "--", "sh", "-c", "tr a-z A-Z; echo end",
                     inp="from stdin\n")
    t.eq((rc, out), (0, "FROM STDIN\nend\n"), f"stdin until its end ({err})")
    # a terminal: kubectl under a pty sends its size on the resize stream
    pid, fd = pty.fork()
    if pid == 0:
        fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 101, 0, 0))
        os.execv(KUBECTL, [KUBECTL, "--kubeconfig", kc, "exec", "-it", "p-main", "--",
                           "sh", "-c", "stty size; exit 6"])
    out = b""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.5)
        if r:
            try:
                b = os.read(fd, 4096)
            except OSError:
                break
            if not b:
                break
            out += b
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    t.ok(b"33 101" in out, "the terminal's size reached the command", out)
    t.eq(os.waitstatus_to_exitcode(status), 6, "kubectl -it exits with the command's code")


@t.test
def deleting_the_pod_kills_its_processes():
    t.eq(B.post(PODS, lab_pod("p-del", ["sh", "-c", "exec sleep infinity"])).status, 201)
    wait_for(lambda: running("p-del"), 15)
    pid = sim.exec_pod("p-del", ["sh", "-c", "echo $PPID"])
    t.eq(pid[0], 0, "exec works before the delete")
    t.eq(B.delete(f"{PODS}/p-del").status, 200, "delete")
    wait_for(lambda: A.get(f"{PODS}/p-del").status == 404, 10, what="pod gone")
    r = B.get(f"{PODS}/p-del/exec?command=true&stdout=true")
    t.eq(r.status, 404, "exec of a gone pod: 404")


print(sim.logtext()[-3000:]) if __import__('os').environ.get('SIMLOG') else None
sim.stop()
t.done()
