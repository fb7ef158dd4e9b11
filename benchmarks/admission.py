#!/usr/bin/python3
"""Admission time per start, excluding the cluster API.

labvm.fcgi reports where each request's time went in a Server-Timing header
(db, kube, agent, app = the whole request inside labvm.fcgi). For N starts
(one user each, ended right after) this prints the distribution of app,
kube, db and app - kube - agent: labvm's own admission work (locks, the
session row, building the cloud-config and manifests, JSON), which is what
labvm adds on top of the cluster.

    . .demo/env; benchmarks/admission.py [--starts 50] [--lesson linux-basics]
"""
import argparse
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from labclient import Api  # noqa: E402
from benchstats import pct  # noqa: E402



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=50)
    ap.add_argument("--lesson", default="linux-basics")
    ap.add_argument("--first-user", type=int, default=150)
    a = ap.parse_args()
    rows = {"app": [], "kube": [], "db": [], "own": []}
    for i in range(a.starts):
        api = Api(f"student{a.first_user + i % 50}")
        api.end_current()
        r = api.start(a.lesson)
        if r.status != 201:
            sys.exit(f"start {i}: {r}")
        st = dict((k, float(v)) for k, v in re.findall(r"(\w+);dur=([\d.]+)",
                                                      r.header("Server-Timing") or ""))
        rows["app"].append(st["app"])
        rows["kube"].append(st["kube"])
        rows["db"].append(st["db"])
        rows["own"].append(st["app"] - st["kube"] - st.get("agent", 0))
        api.end(r.json["id"])
    print(f"{a.starts} starts of {a.lesson}, one at a time (ms, inside labvm.fcgi):")
    print(f"  {'':28s} {'p50':>8s} {'p95':>8s} {'min':>8s} {'max':>8s}")
    names = {"app": "whole start (app)", "kube": "cluster API calls (kube)",
             "db": "database (db)", "own": "admission excl. cluster"}
    for k in ("app", "kube", "db", "own"):
        xs = rows[k]
        print(f"  {names[k]:28s} {statistics.median(xs):8.2f} {pct(xs, 95):8.2f} "
              f"{min(xs):8.2f} {max(xs):8.2f}")


if __name__ == "__main__":
    main()
