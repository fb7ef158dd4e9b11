#!/usr/bin/python3
"""kubesim: a pod's seccompProfile is applied as the kubelet and containerd
apply it: RuntimeDefault (pod- or container-level; the container's wins) runs
the command and every exec under the runtime's default profile, so a
syscall the capabilities alone allow but the profile denies (keyctl,
personality with an odd persona) fails with EPERM; Unconfined, or no
profile (the kubelet's default), leaves it alone; Localhost (no profile
file on the node) is CreateContainerError (timeout: 120)."""
from simlib import PODS, Sim, wait_for
from tap import T

t = T()
sim = Sim()
A, B = sim.admin, sim.backend

# keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_PROCESS_KEYRING, create): allowed to any
# process by the kernel (no capability needed), refused by the default profile
PROBE = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
def call(*a):
    r = libc.syscall(*a)
    return "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()]
print("keyctl", call(250, 0, -2, 1))
print("personality", call(135, ctypes.c_ulong(0x40000)), call(135, ctypes.c_ulong(0xffffffff)))
print("seccomp", [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")][0])
"""
SECCOMP_OF_PID1 = ["sh", "-c", "grep '^Seccomp:' /proc/1/status"]


def lab_pod(name, pod_profile=None, container_profile=None):
    c = {"name": "lab", "image": "debian:12", "command": ["sleep", "infinity"],
         "securityContext": {"capabilities": {"drop": ["ALL"]},
                             "allowPrivilegeEscalation": False}}
    if container_profile:
        c["securityContext"]["seccompProfile"] = container_profile
    spec = {"restartPolicy": "Never", "automountServiceAccountToken": False, "containers": [c]}
    if pod_profile:
        spec["securityContext"] = {"seccompProfile": pod_profile}
    return {"metadata": {"name": name, "labels": {"labvm.io/lab-session": "true"}}, "spec": spec}


def pod(name):
    return A.get(f"{PODS}/{name}").json


def running(name):
    st = (pod(name).get("status", {}).get("containerStatuses") or [{}])[0].get("state") or {}
    return "running" in st


RD, UNC = {"type": "RuntimeDefault"}, {"type": "Unconfined"}
PODS_ = {"s-rd": (RD, None), "s-unc": (UNC, None), "s-none": (None, None),
         "s-over-unc": (RD, UNC), "s-over-rd": (UNC, RD)}
for n, (pp, cp) in PODS_.items():
    t.eq(B.post(PODS, lab_pod(n, pp, cp)).status, 201, f"create {n}")


def probe(name):
    wait_for(lambda: running(name), 30, what=f"{name} running")
    r = sim.exec_pod(name, ["/usr/bin/python3", "-c", PROBE])
    t.eq(r[0], 0, f"{name}: the probe ran", r)
    out = dict(ln.split(" ", 1) for ln in r[1].decode().splitlines())
    return out, sim.exec_pod(name, SECCOMP_OF_PID1)[1].split()[-1:]


@t.test
def runtime_default_denies_keyctl():
    out, pid1 = probe("s-rd")
    t.eq(out.get("keyctl"), "EPERM", "keyctl under RuntimeDefault: EPERM", out)
    t.eq(out.get("personality"), "EPERM ok", "personality: an odd persona EPERM, the query ok",
         out)
    t.eq(out.get("seccomp"), "2", "an exec'd process runs under a filter", out)
    t.eq(pid1, [b"2"], "so does the container's command (PID 1)")


@t.test
def unconfined_and_unset_allow_it():
    for n in ("s-unc", "s-none"):
        out, pid1 = probe(n)
        t.eq(out.get("keyctl"), "ok", f"{n}: keyctl allowed (capabilities do not gate it)", out)
        t.eq(out.get("personality"), "ok ok", f"{n}: personality allowed", out)
        t.eq((out.get("seccomp"), pid1), ("0", [b"0"]), f"{n}: no filter at all", out)


@t.test
def container_profile_overrides_pod():
    out, pid1 = probe("s-over-unc")
    t.eq((out.get("keyctl"), pid1), ("ok", [b"0"]),
         "pod RuntimeDefault, container Unconfined: unconfined", out)
    out, pid1 = probe("s-over-rd")
    t.eq((out.get("keyctl"), pid1), ("EPERM", [b"2"]),
         "pod Unconfined, container RuntimeDefault: confined", out)


@t.test
def legitimate_work_still_runs():
    r = sim.exec_pod("s-rd", ["sh", "-c", "mkdir -p /tmp/a && echo hi > /tmp/a/f && "
                              "python3 -c 'import subprocess,threading; t=threading.Thread("
                              "target=print); t.start(); t.join(); "
                              "print(subprocess.run([\"cat\", \"/tmp/a/f\"], capture_output=True)"
                              ".stdout.decode().strip())'"])
    t.eq(r, (0, b"\nhi\n", b""), "files, threads and subprocesses (clone3 -> clone) work")
    r = sim.exec_pod("s-rd", ["unshare", "-r", "true"])
    t.ok(r[0] != 0 and b"Operation not permitted" in r[2], "unshare: EPERM", r)


@t.test
def localhost_profile_missing_is_create_container_error():
    m = lab_pod("s-local", {"type": "Localhost", "localhostProfile": "profiles/lab.json"})
    t.eq(B.post(PODS, m).status, 201, "a Localhost profile is accepted by the API")

    def waiting():
        st = (pod("s-local").get("status", {}).get("containerStatuses") or [{}])[0]
        return (st.get("state") or {}).get("waiting", {}).get("reason") == "CreateContainerError"
    wait_for(waiting, 30, what="CreateContainerError")
    p = pod("s-local")
    w = p["status"]["containerStatuses"][0]["state"]["waiting"]
    t.ok("/var/lib/kubelet/seccomp/profiles/lab.json" in w.get("message", ""),
         "the message names the missing file", w)
    t.eq(p["status"].get("phase"), "Pending", "the pod stays Pending")
    evs = A.get("/api/v1/namespaces/labs/events").json["items"]
    t.ok(any(e["involvedObject"].get("name") == "s-local" and e["reason"] == "Failed" and
             "cannot load seccomp profile" in e["message"] for e in evs), "event Failed")


sim.stop()
t.done()
