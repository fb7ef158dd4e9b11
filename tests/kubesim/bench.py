#!/usr/bin/python3
"""kubesim's own figures: N VMs created, listed with a selector and deleted in
the fast profile (wall time, simulator RSS), with and without guests, and the
cost of one process guest (start ms, MiB), and the cost of the pod network
per guest (--net-cost K: K guests started with and without their network
namespace on the pod network; kernel memory from /proc/meminfo, so run it on
a quiet machine). Not part of `make check`.

    PYTHONPATH=tests/lib tests/kubesim/bench.py [--vms 200] [--runs 3] [--guest none|process]
    PYTHONPATH=tests/lib tests/kubesim/bench.py --vms 0 --guest-cost 0 --net-cost 20
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests"))
import simlib  # noqa: E402

GUEST_UD = simlib.cloud_config(["nohup python3 -m http.server --bind ${LABVM_AGENT_LISTEN%:*} "
                                "8899 >/dev/null 2>&1 &", "touch /root/ready"])


def one_run(n, guest, workers=20):
    with simlib.Sim(guest=guest, *(["--node-memory", "512Gi"])) as sim:
        import threading
        local = threading.local()

        def cl():
            if not hasattr(local, "c"):
                local.c = sim.client(sim.backend_token)
            return local.c
        label = {"labvm.io/lab-session": "true", "bench": "yes"}

        def create(i):
            c = cl()
            if guest != "none":
                r = c.post(simlib.SECRETS, simlib.secret(f"b-{i}", GUEST_UD, labels=label))
                assert r.status == 201, r.raw
            r = c.post(simlib.VMS, simlib.vm(f"b-{i}", f"b-{i}" if guest != "none" else None,
                                              labels=label, memory="1Gi"))
            assert r.status == 201, r.raw

        def running():
            r = sim.admin.get(simlib.VMIS + "?labelSelector=bench%3Dyes")
            return sum(1 for i in r.json["items"] if i.get("status", {}).get("phase") == "Running")

        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(workers) as ex:
            list(ex.map(create, range(n)))
        t_create = time.monotonic() - t0
        simlib.wait_for(lambda: running() == n, 300, interval=0.1, what="all running")
        t_running = time.monotonic() - t0
        if guest != "none":
            simlib.wait_for(lambda: sum(1 for g in sim.admin.get("/_sim/guests").json["guests"]
                                        if g["state"] == "running") == n, 60, interval=0.2)
        time.sleep(1.0)
        stats = sim.admin.get("/_sim/stats").json
        rss_running = stats["rss_bytes"]
        guests = sim.admin.get("/_sim/guests?rss=1").json["guests"] if guest != "none" else []
        guest_rss = sum(g.get("rss_bytes") or 0 for g in guests)
        t1 = time.monotonic()
        r = sim.backend.get(simlib.VMS + "?labelSelector=labvm.io%2Flab-session%3Dtrue")
        t_list = time.monotonic() - t1
        assert r.status == 200 and len(r.json["items"]) == n, (r.status, len(r.json["items"]))
        t2 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(workers) as ex:
            list(ex.map(lambda i: cl().delete(simlib.VMS + f"/b-{i}"), range(n)))
        t_delete_calls = time.monotonic() - t2
        simlib.wait_for(lambda: not sim.admin.get(simlib.VMS).json["items"], 300, interval=0.1,
                        what="all VMs gone")
        t_gone = time.monotonic() - t2
        if guest != "none":
            sim.admin.delete(simlib.SECRETS + "?labelSelector=bench%3Dyes")
            simlib.wait_for(lambda: not sim.admin.get("/_sim/guests").json["guests"] or all(
                g["state"] == "stopped" for g in sim.admin.get("/_sim/guests").json["guests"]),
                60, interval=0.1, what="guests stopped")
            t_guests_gone = time.monotonic() - t2
        stats2 = sim.admin.get("/_sim/stats").json
        return {"create_calls_s": t_create, "all_running_s": t_running, "list_s": t_list,
                "list_bytes": len(r.raw), "delete_calls_s": t_delete_calls,
                "all_gone_s": t_gone, "total_s": time.monotonic() - t0,
                "sim_rss_mib_running": rss_running / 2**20,
                "sim_rss_mib_end": stats2["rss_bytes"] / 2**20,
                "guests_rss_mib_total": guest_rss / 2**20, "requests": stats2["requests"],
                "guests_gone_s": t_guests_gone if guest != "none" else 0.0}


def meminfo():
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":")
            out[k] = int(v.split()[0])
    return out


def guest_cost(k=10, ud=None, net=None):
    """Start k process guests directly (no API) and measure ms to init-in-chroot and MiB;
    with net (a started podnet.PodNetwork) each in its own network namespace on it."""
    import tempfile
    import guests
    d = tempfile.mkdtemp(prefix="kubesim-bench-")
    gs, times = [], []
    ud = (ud or GUEST_UD).encode()
    m0 = meminfo()
    for i in range(k):
        ip = net.pool[i] if net else f"127.250.0.{i + 1}"
        g = guests.ProcessGuest(f"bench-{i}", os.path.join(d, str(i)), ud, ip,
                                boot_delay=0.0, hide=[d], net=net)
        t0 = time.monotonic()
        g.start()
        ok = g.wait_ready(10)
        times.append((time.monotonic() - t0) * 1000)
        assert ok, "guest did not start"
        gs.append(g)
    # wait for the cloud-config (agent listening) to finish, then measure memory
    for i, g in enumerate(gs):
        simlib.wait_for(lambda: g.exec("test -e /root/ready", 5)[0] == 0, 20)
    time.sleep(0.5)
    m1 = meminfo()
    kernel = {key: (m1[key] - m0[key]) / 1024 / k for key in ("Slab", "Percpu")}
    used = ((m0["MemAvailable"] - m1["MemAvailable"]) / 1024) / k
    rss = [g.rss() / 2**20 for g in gs]
    pss = [g.pss() / 2**20 for g in gs]
    upper = []
    for g in gs:
        tot = 0
        for root, _, files in os.walk(os.path.join(g.workdir, "upper")):
            for f in files:
                try:
                    tot += os.lstat(os.path.join(root, f)).st_size
                except OSError:
                    pass
        upper.append(tot / 2**20)
    t0 = time.monotonic()
    for g in gs:
        g.stop()
    stop_ms = (time.monotonic() - t0) * 1000 / k
    import shutil
    shutil.rmtree(d, ignore_errors=True)
    return {"start_ms_median": statistics.median(times), "start_ms_max": max(times),
            "rss_mib_median": statistics.median(rss), "pss_mib_median": statistics.median(pss),
            "upper_mib_median": statistics.median(upper), "stop_ms_mean": stop_ms,
            "kernel_slab_mib_per_guest": kernel["Slab"],
            "kernel_percpu_mib_per_guest": kernel["Percpu"],
            "memavailable_drop_mib_per_guest": used}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vms", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--guest", action="append", default=None)
    ap.add_argument("--guest-cost", type=int, default=10)
    ap.add_argument("--net-cost", type=int, default=0)
    a = ap.parse_args()
    out = {}
    for guest in (a.guest or ["none", "process"]) if a.vms else []:
        runs = [one_run(a.vms, guest) for _ in range(a.runs)]
        out[f"{a.vms} VMs, guest={guest}"] = {k: round(statistics.median(r[k] for r in runs), 3)
                                             for k in runs[0]}
        print(json.dumps({guest: runs}, indent=None), file=sys.stderr)
    if a.guest_cost:
        out["process guest cost, cloud-config starting an HTTP agent"] = {
            k: round(v, 2) for k, v in guest_cost(a.guest_cost).items()}
        out["process guest cost, bare (cloud-config touches a file)"] = {
            k: round(v, 2) for k, v in guest_cost(
                a.guest_cost, "#cloud-config\nruncmd:\n- touch /root/ready\n").items()}
    if a.net_cost:
        import podnet
        bare = "#cloud-config\nruncmd:\n- touch /root/ready\n"
        net = podnet.PodNetwork(simlib.free_port())
        t0 = time.monotonic()
        net.start()
        setup_ms = (time.monotonic() - t0) * 1000
        try:
            for label, n in (("without", None), ("with", net)):
                out[f"process guest, {label} its network namespace on the pod network"] = {
                    k: round(v, 2) for k, v in guest_cost(a.net_cost, bare, n).items()}
        finally:
            net.stop()
        out["pod network set-up (once per simulator), ms"] = round(setup_ms, 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
