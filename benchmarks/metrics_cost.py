#!/usr/bin/python3
"""benchmarks/metrics_cost.py: what GET /api/metrics costs.

Starts its own stack (tests/lib/labstack.py, in .bench-metrics/, ports from
--port-base, lighttpd with two labvm.fcgi processes) with `operators =
teacher`, adds --rows synthetic past sessions (so the scrape-time queries
have a class-sized history to read), then measures:

  1. scrape time: --scrapes sequential scrapes (p50, p95, max), answer size
     and number of series;
  2. API throughput without and with a scrape every second: `labvm-bench api`
     (targets status and lessons, --duration s each, 16 connections) twice,
     req/s and p99 side by side.

    benchmarks/metrics_cost.py [--rows 5000] [--scrapes 50] [--duration 10] [--port-base 16700]

Prints a table and writes benchmarks/out/metrics-cost.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SRC, "tests", "lib"))
import labstack  # noqa: E402
from labclient import Api  # noqa: E402
from benchstats import pct  # noqa: E402

SEED = """
INSERT INTO sessions (id, user_name, lesson, runtime, environment, state, stage, disk_source,
                      disk_fallback_reason, created_at, submitted_at, running_at, ready_at,
                      ended_at, expires_at, end_reason)
SELECT gen_random_uuid(), 'past' || g, (ARRAY['linux-basics','debian-golden','fresh-disk'])[1 + g % 3],
       'vm', '{env}', CASE WHEN g % 20 = 0 THEN 'failed' ELSE 'ended' END,
       CASE WHEN g % 20 = 0 THEN 'setting_up' ELSE 'ready' END,
       (ARRAY['containerdisk','golden','datavolume'])[1 + g % 3], NULL,
       t, t + interval '1 s', t + (5 + g % 40) * interval '1 s',
       CASE WHEN g % 20 = 0 THEN NULL ELSE t + (20 + g % 200) * interval '1 s' END,
       t + interval '1 hour', t + interval '2 hours', CASE WHEN g % 20 = 0 THEN 'failed' ELSE 'user' END
FROM generate_series(1, {rows}) AS g, LATERAL (SELECT now() - g * interval '17 s' AS t) AS x
"""



def bench_api(bindir, url, duration, out, name):
    r = subprocess.run([os.path.join(bindir, "labvm-bench"), "api", "--url", url, "--duration", str(duration),
                        "--warmup", "1", "--targets", "status,lessons", "--sessions", "2", "--lesson", "linux-basics",
                        "--first", "380", "--user-count", "10", "--out", out, "--name", name, "--quiet",
                        "--end-existing"],
                       capture_output=True, text=True, env=dict(os.environ, LABVM_PASSWORD=labstack.PASSWORD))
    if r.returncode != 0:
        raise SystemExit(f"labvm-bench api failed: {r.stderr[-800:]}")
    return {t["target"]: t for t in json.load(open(os.path.join(out, f"{name}.json")))["targets"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=5000)
    ap.add_argument("--scrapes", type=int, default=50)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--port-base", type=int, default=int(os.environ.get("LABVM_BENCH_PORT_BASE", 16700)))
    ap.add_argument("--state", default=os.path.join(SRC, ".bench-metrics"))
    a = ap.parse_args()
    bindir = os.environ.get("LABVM_BIN") or os.path.join(SRC, "build", "bin")
    out = os.path.join(SRC, "benchmarks", "out")
    os.makedirs(out, exist_ok=True)
    s = labstack.Stack(a.state, port_base=a.port_base, frontend="lighttpd", bindir=bindir)
    if s.running_any():
        s.down()
    res = {"rows": a.rows}
    try:
        s.pg_up()
        s.kube_up()
        s.write_conf()
        with open(s.conf, "a") as f:
            f.write("operators = teacher\n")
        subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", s.database, "-c",
                        "DELETE FROM sessions WHERE user_name LIKE 'past%'", "-c",
                        SEED.format(env=s.environment, rows=a.rows)], check=True)
        s.console_up()
        s.lighttpd_up()
        url = s.url("lighttpd")
        s.wait_http(url + "/api/healthz")
        op = Api("teacher", base=url, password=labstack.PASSWORD)
        times, size, series = [], 0, 0
        for _ in range(a.scrapes):
            t0 = time.monotonic()
            r = op.request("GET", "/api/metrics")
            times.append(time.monotonic() - t0)
            assert r.status == 200, r
            size = len(r.body)
            series = sum(1 for ln in r.body.splitlines() if ln and not ln.startswith("#"))
        res["scrape_ms"] = {"p50": 1000 * statistics.median(times), "p95": 1000 * pct(times, 95),
                            "max": 1000 * max(times)}
        res["scrape_bytes"], res["series"] = size, series

        res["api_without"] = bench_api(bindir, url, a.duration, out, "metrics-cost-without")
        stop, during = threading.Event(), []

        def scraper():
            sc = Api("teacher", base=url, password=labstack.PASSWORD)
            while not stop.is_set():
                t0 = time.monotonic()
                sc.request("GET", "/api/metrics")
                during.append(time.monotonic() - t0)
                stop.wait(max(0.0, 1.0 - (time.monotonic() - t0)))
        th = threading.Thread(target=scraper, daemon=True)
        th.start()
        res["api_with"] = bench_api(bindir, url, a.duration, out, "metrics-cost-with")
        stop.set()
        th.join()
        res["scrape_under_load_ms"] = {"n": len(during), "p50": 1000 * statistics.median(during),
                                       "max": 1000 * max(during)}
    finally:
        s.down()
    with open(os.path.join(out, "metrics-cost.json"), "w") as f:
        json.dump(res, f, indent=1)
    sm = res["scrape_ms"]
    print(f"scrape of /api/metrics with {a.rows} past sessions: p50 {sm['p50']:.1f} ms, p95 {sm['p95']:.1f} ms, "
          f"max {sm['max']:.1f} ms; {res['scrape_bytes']} bytes, {res['series']} series")
    ul = res["scrape_under_load_ms"]
    print(f"scrape under API load (1/s, {ul['n']} scrapes): p50 {ul['p50']:.1f} ms, max {ul['max']:.1f} ms")
    print(f"{'target':8s} {'req/s without':>14s} {'req/s scraped 1/s':>18s} {'p99 ms without':>15s} {'p99 ms scraped':>15s}")
    for tg in ("status", "lessons"):
        w, s2 = res["api_without"][tg], res["api_with"][tg]
        print(f"{tg:8s} {w['req_per_s']:14.0f} {s2['req_per_s']:18.0f} {w['latency_ms']['p99']:15.2f} "
              f"{s2['latency_ms']['p99']:15.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
