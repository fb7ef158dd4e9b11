#!/usr/bin/python3
"""kubesim: start-up contract (command line, state dir files, TLS, seeds, nodes,
profiles) and a 200-VM burst (timeout: 150)."""
import concurrent.futures
import http.client
import os
import signal
import ssl
import subprocess
import tempfile
import threading
import time

from simlib import (DVS, KUBESIM, PVCS, SEED, VMIS, VMS, Sim, events_for, free_port, phase, vm,
                    wait_for)
from tap import T

t = T()


@t.test
def starts_and_writes_the_state_dir():
    d = tempfile.mkdtemp(prefix="kubesim-cli-")
    port = free_port()
    p = subprocess.Popen([KUBESIM, "--state-dir", d, "--port", str(port), "--seed", SEED,
                          "--guest", "none"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        line = p.stdout.readline().strip()
        t.eq(line, f"kubesim: ready https://127.0.0.1:{port}", "ready line on stdout")
        for f in ("ca.crt", "admin-token", "backend-token", "kubeconfig", "ready"):
            t.ok(os.path.exists(os.path.join(d, f)), f"{f} written")
        t.eq(open(os.path.join(d, "ready")).read().strip(), f"https://127.0.0.1:{port}",
             "ready holds the URL")
        mt = {f: os.stat(os.path.join(d, f)).st_mtime_ns for f in
              ("ca.crt", "admin-token", "backend-token", "ready")}
        t.ok(mt["ready"] >= max(mt.values()), "ready written last")
        ctx = ssl.create_default_context(cafile=os.path.join(d, "ca.crt"))
        tok = open(os.path.join(d, "admin-token")).read().strip()
        for host in ("127.0.0.1", "localhost"):
            c = http.client.HTTPSConnection(host, port, context=ctx, timeout=5)
            c.request("GET", "/version", headers={"Authorization": "Bearer " + tok})
            t.eq(c.getresponse().status, 200, f"TLS verified for {host}")
            c.close()
        c = http.client.HTTPSConnection("127.0.0.1", port, context=ssl.create_default_context(),
                                        timeout=5)
        try:
            c.request("GET", "/version")
            c.getresponse()
            t.fail("a client without the CA connected")
        except ssl.SSLError:
            pass
        c.close()
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(120)
        except subprocess.TimeoutExpired:
            pass
        t.ok(p.poll() is not None, "SIGTERM stops it")
        t.ok(not os.path.exists(os.path.join(d, "ready")), "ready removed on exit")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        subprocess.run(["rm", "-rf", d])


@t.test
def bad_arguments():
    d = tempfile.mkdtemp(prefix="kubesim-cli-")
    r = subprocess.run([KUBESIM, "--state-dir", d, "--port", str(free_port()), "--guest-net",
                        "10.0.0.0/16"], capture_output=True, text=True, timeout=20)
    t.ok(r.returncode != 0 and "--guest-net" in r.stderr, "non-loopback guest net refused",
         r.stderr)
    r = subprocess.run([KUBESIM, "--state-dir", d, "--port", str(free_port()), "--profile",
                        "slow"], capture_output=True, text=True, timeout=20)
    t.ok(r.returncode != 0, "unknown profile refused")
    subprocess.run(["rm", "-rf", d])


with Sim(guest="none") as sim:
    A = sim.admin

    @t.test
    def cluster_defaults_and_seed():
        names = [n["metadata"]["name"] for n in A.get("/api/v1/namespaces").json["items"]]
        for n in ("default", "kube-system", "labs"):
            t.ok(n in names, f"namespace {n}")
        nodes = A.get("/api/v1/nodes").json["items"]
        t.eq([n["metadata"]["name"] for n in nodes], ["node-1", "node-2", "node-3", "node-4"],
             "four nodes")
        t.eq((nodes[0]["status"]["capacity"]["memory"], nodes[0]["status"]["capacity"]["cpu"]),
             ("32Gi", "16"), "32Gi and 16 CPUs")
        pvc = A.get(PVCS + "/golden-debian-12").json
        t.eq(pvc["status"]["phase"], "Bound", "golden PVC Bound (seed status kept)")
        t.eq(pvc["spec"]["accessModes"], ["ReadOnlyMany"], "ReadOnlyMany")
        ann = pvc["metadata"]["annotations"]
        t.eq(ann.get("labvm.io/image"), "quay.io/containerdisks/debian:12", "image annotation")
        t.eq(ann.get("cdi.kubevirt.io/storage.pod.phase"), "Succeeded", "import done")
        t.eq(pvc["spec"]["resources"]["requests"]["storage"], "10Gi", "10Gi")
        sa = A.get("/api/v1/namespaces/labs/serviceaccounts/labvm-backend")
        t.eq(sa.status, 200, "the backend's ServiceAccount from rbac.yaml")

    @t.test
    def burst_of_200_vms():
        label = {"labvm.io/lab-session": "true", "burst": "yes"}
        local = threading.local()

        def cl():
            if not hasattr(local, "c"):
                local.c = sim.client(sim.backend_token)
            return local.c
        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(20) as ex:
            codes = list(ex.map(lambda i: cl().post(VMS, vm(f"burst-{i}", labels=label,
                                                             memory="256Mi")).status, range(200)))
        t.eq(codes.count(201), 200, "200 creates")
        wait_for(lambda: sum(1 for i in A.get(VMIS + "?labelSelector=burst%3Dyes").json["items"]
                             if i.get("status", {}).get("phase") == "Running") == 200, 60,
                 interval=0.1, what="200 running")
        took = time.monotonic() - t0
        r = sim.backend.get(VMS + "?labelSelector=labvm.io%2Flab-session%3Dtrue%2Cburst%3Dyes")
        t.eq(len(r.json["items"]), 200, "listed with a selector")
        ips = {i["status"]["interfaces"][0]["ipAddress"] for i in
               A.get(VMIS + "?labelSelector=burst%3Dyes").json["items"]}
        t.eq(len(ips), 200, "200 distinct guest addresses")
        with concurrent.futures.ThreadPoolExecutor(20) as ex:
            codes = list(ex.map(lambda i: cl().delete(VMS + f"/burst-{i}").status, range(200)))
        t.eq(codes.count(200), 200, "200 deletes")
        wait_for(lambda: not A.get(VMS).json["items"], 60, interval=0.1, what="all gone")
        t.eq(A.get("/api/v1/namespaces/labs/pods").json["items"], [], "no pods left")
        rss = A.get("/_sim/stats").json["rss_bytes"] / 2**20
        t.diag(f"200 VMs running after {took:.1f}s; all deleted after "
               f"{time.monotonic() - t0:.1f}s; simulator RSS {rss:.0f} MiB")
        t.ok(rss < 400, "simulator memory stays modest")

    @t.test
    def realistic_profile_is_slower():
        # order, not time: a realistic image pull (x4: at least 7 s) that began
        # first is still going when two fast-profile imports, one after the
        # other, begun after it have finished (each about a second, never
        # under 0.2 s); without its delays the pull takes at most 0.75 s
        A.post("/_sim/profile", {"profile": "realistic", "time_scale": 4})
        try:
            A.post(VMS, vm("real-1", disk="container", image="quay.io/containerdisks/fedora:40"))
            wait_for(lambda: "Pulling" in [e["reason"] for e in events_for(sim, "real-1")], 300,
                     interval=0.1, what="real-1's image pull begun")
        finally:
            A.post("/_sim/profile", {"profile": "fast", "time_scale": 1})
        for name in ("fast-dv-1", "fast-dv-2"):
            dv = {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
                  "metadata": {"name": name},
                  "spec": {"source": {"registry": {
                      "url": "docker://quay.io/containerdisks/debian:12"}},
                      "storage": {"resources": {"requests": {"storage": "10Gi"}}}}}
            t.eq(A.post(DVS, dv).status, 201, f"{name} under the fast profile")
            wait_for(lambda: (A.get(f"{DVS}/{name}").json.get("status") or {}).get("phase") ==
                     "Succeeded", 120, interval=0.1, what=f"{name} imported")
        evs = [e["reason"] for e in events_for(sim, "real-1")]
        t.ok("Pulled" not in evs and phase(sim, "real-1") != "Running",
             "the realistic pull begun first is still going", evs)
        A.delete(VMS + "/real-1")
        for name in ("fast-dv-1", "fast-dv-2"):
            A.delete(f"{DVS}/{name}")

t.done()
