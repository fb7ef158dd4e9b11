#!/usr/bin/python3
"""Status reads beside the front end's own speed: through one front end, with
the same HTTP Basic login, one after another in one run (wrk):

    static     a static file of the page (GET /app.css)
    lessons    GET /api/lessons (labvm.fcgi, no database)
    session    GET /api/sessions/{id} of a ready session (labvm.fcgi + PostgreSQL)

and where a session read's time goes (its Server-Timing: db, app; median
of --samples sequential reads).

    . .demo/env   # or any stack's env file
    benchmarks/status_reads.py [--seconds 5] [--connections 16] [--rounds 3] [--url URL]

Prints req/s per target and round, the medians, and the ratios to the static
file. The machine is shared: compare figures of one run only."""
import argparse
import base64
import os
import re
import statistics
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from labclient import Api  # noqa: E402


def wrk(url, auth, seconds, conns):
    out = subprocess.run(["wrk", "-t2", f"-c{conns}", f"-d{seconds}s", "-H", f"Authorization: {auth}",
                          url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    if bad:
        sys.exit(f"{url}: {bad.group(1)} answers were not 2xx:\n{out}")
    return rps


def timing(url, auth, n):
    figs = {}
    for _ in range(n):
        rq = urllib.request.Request(url, headers={"Authorization": auth})
        with urllib.request.urlopen(rq) as r:
            r.read()
            for part in (r.headers.get("Server-Timing") or "").split(","):
                m = re.match(r"\s*(\w+);dur=([\d.]+)", part)
                if m:
                    figs.setdefault(m.group(1), []).append(float(m.group(2)))
    return {k: statistics.median(v) for k, v in figs.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--connections", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--url", default=os.environ.get("LABVM_URL"))
    ap.add_argument("--user", default="student196")
    a = ap.parse_args()
    api = Api(a.user, base=a.url)
    api.end_current()
    s = api.start("linux-basics").json
    s = api.wait_state(s["id"])
    sid = s["id"] if isinstance(s, dict) else s
    auth = "Basic " + base64.b64encode(f"{a.user}:{api.password}".encode()).decode()
    targets = [("static", "/app.css"), ("lessons", "/api/lessons"), ("session", f"/api/sessions/{sid}")]
    res = {k: [] for k, _ in targets}
    try:
        for rnd in range(a.rounds):
            for k, p in targets:
                res[k].append(wrk(a.url + p, auth, a.seconds, a.connections))
            print(f"round {rnd + 1}: " + ", ".join(f"{k} {res[k][-1]:.0f}/s" for k, _ in targets),
                  flush=True)
        st = timing(f"{a.url}/api/sessions/{sid}", auth, a.samples)
    finally:
        api.end(sid)
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"\nmedian req/s through {a.url}, {a.connections} connections, Basic auth:")
    for k, _ in targets:
        print(f"  {k:8s} {med[k]:7.0f}/s  {med[k] / med['static'] * 100:5.1f} % of the static file")
    print("session read, Server-Timing medians (ms): " +
          ", ".join(f"{k} {v:.2f}" for k, v in st.items()))


if __name__ == "__main__":
    main()
