#!/usr/bin/python3
"""benchmarks/backend_pod.py: what running labvm as the backend Pod costs
(tests/stack --backend pod, `make demo BACKEND=pod`) against the default
stack whose processes run in the host's namespaces.

For each mode it starts its own stack (tests/lib/labstack.py, in
.bench/backend-<mode>/, ports from --port-base, lighttpd only, the process
guests of the fast profile), then measures:

  1. start -> ready: --labs sequential starts of --lesson by one student
     through the front end (POST, then GET every 0.1 s until ready; the
     lab is ended before the next one);
  2. a plain API round trip: --gets GET /api/healthz (the front end,
     labvm.fcgi, PostgreSQL and the API server; with --backend pod every hop
     out of the Pod goes through tests/lib/nsrelay.py).

    benchmarks/backend_pod.py [--labs 7] [--gets 300] [--lesson linux-basics]
                              [--port-base LABVM_PORT_BASE+300]

Prints medians per mode and the ratio pod/host; writes
benchmarks/out/backend-pod.json. The machine is shared: run it twice.
"""
import argparse
import json
import os
import statistics
import sys
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SRC, "tests", "lib"))
import labstack  # noqa: E402
from labclient import Api  # noqa: E402


def run_mode(mode, a):
    st = labstack.Stack(os.path.join(SRC, ".bench", f"backend-{mode}"), port_base=a.port_base,
                        frontend="lighttpd", backend=mode, capacity=4, extra_lessons=False)
    st.down()
    env = st.up()
    out = {"ready_s": [], "healthz_ms": []}
    try:
        api = Api("student1", base=env["LABVM_URL"])
        api.end_current()
        for _ in range(a.labs):
            t0 = time.monotonic()
            r = api.start(a.lesson)
            if r.status != 201:
                raise SystemExit(f"{mode}: start: {r}")
            s = api.wait_state(r.json["id"], ("ready", "failed"), 180, interval=0.1)
            if s["state"] != "ready":
                raise SystemExit(f"{mode}: the lab failed: {s.get('error')}")
            out["ready_s"].append(time.monotonic() - t0)
            api.end(r.json["id"])
        for _ in range(a.gets):
            t0 = time.monotonic()
            r = api.request("GET", "/api/healthz")
            if r.status != 200:
                raise SystemExit(f"{mode}: healthz {r}")
            out["healthz_ms"].append((time.monotonic() - t0) * 1000)
    finally:
        st.down()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--labs", type=int, default=7)
    ap.add_argument("--gets", type=int, default=300)
    ap.add_argument("--lesson", default="linux-basics")
    ap.add_argument("--port-base", type=int,
                    default=int(os.environ.get("LABVM_PORT_BASE", 18000)) + 300)
    a = ap.parse_args()
    res = {}
    for mode in ("host", "pod"):
        res[mode] = run_mode(mode, a)
    med = {m: {k: statistics.median(v) for k, v in r.items()} for m, r in res.items()}
    print(f"{'':30} {'host':>9} {'pod':>9} {'pod/host':>9}")
    for k, label, unit in (("ready_s", "start -> ready", "s"),
                           ("healthz_ms", "GET /api/healthz", "ms")):
        h, p = med["host"][k], med["pod"][k]
        print(f"{label + ' (' + unit + ', median)':30} {h:9.3f} {p:9.3f} {p / h:9.2f}")
    print(f"({a.labs} labs of {a.lesson} and {a.gets} GETs per mode; "
          f"start -> ready per lab: host {[round(x, 2) for x in res['host']['ready_s']]}, "
          f"pod {[round(x, 2) for x in res['pod']['ready_s']]})")
    os.makedirs(os.path.join(SRC, "benchmarks", "out"), exist_ok=True)
    with open(os.path.join(SRC, "benchmarks", "out", "backend-pod.json"), "w") as f:
        json.dump({"samples": res, "medians": med, "lesson": a.lesson}, f, indent=1)


if __name__ == "__main__":
    main()
