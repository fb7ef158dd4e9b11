#!/usr/bin/python3
"""One labvm-reaper pass over 1,000 sessions and 1,000 cluster objects.

Builds, in an environment of its own (so nothing else is touched):
  - 1,000 session rows: 300 ready and expired, 300 ready and not expired,
    400 ended long ago;
  - 1,000 cluster objects: a VM (runStrategy Halted: no guest) and its
    Secret for each of the 300 expired and 100 of the live sessions (800),
    plus 100 orphan VMs and 100 orphan Secrets without any session row;
then times one reaper run (grace 0) and checks what it did.

    . .demo/env; benchmarks/reaper_scale.py [--runs 3]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from labclient import Db, Kube, env  # noqa: E402
from labtest import reaper_argv  # noqa: E402

P = "labvm.io"


def vm(name, envname, sid):
    return {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": name, "labels": {f"{P}/lab-session": "true",
                                                  f"{P}/environment": envname,
                                                  f"{P}/session-id": sid}},
            "spec": {"runStrategy": "Halted", "template": {"spec": {
                "domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}}}}}


def secret(name, envname, sid):
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "labels": {f"{P}/lab-session": "true",
                                                  f"{P}/environment": envname,
                                                  f"{P}/session-id": sid}},
            "data": {"userdata": "I2Nsb3VkLWNvbmZpZwo="}}


def build(kube, db, envname):
    ids = [str(uuid.uuid4()) for _ in range(1000)]
    expired, live, ended = ids[:300], ids[300:600], ids[600:]
    with db.conn.cursor() as c:
        for group, state, exp in ((expired, "ready", "now() - interval '1 minute'"),
                                  (live, "ready", "now() + interval '1 hour'"),
                                  (ended, "ended", "now() - interval '1 day'")):
            for sid in group:
                c.execute(
                    f"INSERT INTO sessions (id, user_name, lesson, runtime, environment, state, "
                    f"stage, created_at, expires_at, ready_at, running_at, submitted_at) VALUES "
                    f"(%s, %s, 'linux-basics', 'vm', %s, %s, 'ready', now() - interval '2 hours', "
                    f"{exp}, now() - interval '2 hours', now() - interval '2 hours', "
                    f"now() - interval '2 hours')", (sid, f"bench-{sid[:8]}", envname, state))
                name = "lab-" + sid.replace("-", "")
                c.execute("INSERT INTO session_vms (session_id, vm_name, secret_name, agent_token, "
                          "ip, deleted_at) VALUES (%s, %s, %s, 'x', '127.0.0.1', %s)",
                          (sid, name, name + "-cloudinit", None if state == "ready" else "now()"))
    for sid in expired + live[:100]:
        name = "lab-" + sid.replace("-", "")
        kube.create("virtualmachines", vm(name, envname, sid))
        kube.create("secrets", secret(name + "-cloudinit", envname, sid))
    for i in range(100):
        sid = str(uuid.uuid4())
        kube.create("virtualmachines", vm(f"orphan-{i}-{sid[:8]}", envname, sid))
        kube.create("secrets", secret(f"orphan-{i}-{sid[:8]}-ci", envname, sid))
    return ids


def cleanup(kube, db, envname):
    sel = f"{P}/lab-session=true,{P}/environment={envname}"
    for kind in ("virtualmachines", "secrets"):
        for o in kube.list(kind, sel):
            kube.delete(kind, o["metadata"]["name"])
    db.query("DELETE FROM sessions WHERE environment = %s", envname)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    kube, db = Kube(), Db()
    with open(env("LABVM_CONF")) as f:
        text = f.read()
    walls = []
    for run in range(a.runs):
        envname = f"reaperbench{run}"
        fd, conf = tempfile.mkstemp(suffix=".conf")
        with os.fdopen(fd, "w") as f:
            f.write(re.sub(r"(?m)^environment = .*$", f"environment = {envname}", text))
        try:
            t0 = time.monotonic()
            build(kube, db, envname)
            print(f"run {run + 1}: built 1000 sessions and 1000 objects in "
                  f"{time.monotonic() - t0:.1f} s", flush=True)
            t0 = time.monotonic()
            r = subprocess.run(reaper_argv("--grace", "0"),
                               env=dict(os.environ, LABVM_CONF=conf), capture_output=True,
                               text=True)
            wall = time.monotonic() - t0
            walls.append(wall)
            summary = [l for l in r.stdout.splitlines() if l.startswith("labvm-reaper:")]
            print(f"run {run + 1}: reaper pass {wall:.2f} s wall, exit {r.returncode}")
            print("   " + (summary[-1] if summary else r.stdout[-500:] + r.stderr[-500:]))
            ended = db.one("SELECT count(*) FROM sessions WHERE environment = %s "
                           "AND end_reason = 'expired'", envname)[0]
            left = len(kube.list("virtualmachines", f"{P}/lab-session=true,{P}/environment={envname}"))
            print(f"   expired sessions ended: {ended}/300; VMs left (live sessions, or "
                  f"terminating): {left}")
        finally:
            cleanup(kube, db, envname)
            os.unlink(conf)
    walls.sort()
    print(f"\nreaper pass over 1000 sessions + 1000 objects: median {walls[len(walls) // 2]:.2f} s "
          f"(runs: {', '.join(f'{w:.2f}' for w in walls)})")


if __name__ == "__main__":
    main()
