#!/usr/bin/python3
"""Grading time per step: a pod lesson (each step by exec through the API
server: a WebSocket, v5.channel.k8s.io) beside a VM lesson (each step
through the guest agent over HTTP).

For each lesson one lab is started and graded --grades times; the figure is
the grade request's time inside labvm.fcgi (Server-Timing app) divided by
the lesson's steps, and the client's round trip per grade.

    . .demo/env; benchmarks/grade_steps.py [--grades 20] [--pod k8s-pod-intro] [--vm debian-golden]
"""
import argparse
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from labclient import Api  # noqa: E402


def timing(r, key):
    m = re.search(rf"\b{key};dur=([0-9.]+)", r.header("Server-Timing") or "")
    return float(m.group(1)) if m else float("nan")


def run(lesson, user, grades):
    api = Api(user, timeout=120)
    api.end_current()
    r = api.start(lesson)
    if r.status != 201:
        sys.exit(f"start {lesson}: {r}")
    s = api.wait_state(r.json["id"], ("ready",), 300)
    per_step, client = [], []
    steps = 0
    try:
        for _ in range(grades):
            t0 = time.monotonic()
            g = api.grade(s["id"])
            client.append((time.monotonic() - t0) * 1000)
            if g.status != 200:
                sys.exit(f"grade {lesson}: {g}")
            steps = g.json["total"]
            per_step.append(timing(g, "app") / max(1, steps))
    finally:
        api.end(s["id"])
    return steps, per_step, client


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grades", type=int, default=20)
    ap.add_argument("--pod", default="k8s-pod-intro")
    ap.add_argument("--vm", default="debian-golden")
    ap.add_argument("--user", type=int, default=245)
    a = ap.parse_args()
    print(f"grading: {a.grades} grades per lesson, one lab each")
    print(f"  {'lesson':<16} {'runtime':<8} {'steps':>5} {'ms/step p50':>12} {'p90':>8} "
          f"{'grade RTT p50 (ms)':>19}")
    for lesson, rt, user in ((a.pod, "pod", a.user), (a.vm, "vm", a.user + 1)):
        steps, ps, cl = run(lesson, f"student{user}", a.grades)
        ps.sort()
        print(f"  {lesson:<16} {rt:<8} {steps:>5} {statistics.median(ps):>12.1f} "
              f"{ps[int(0.9 * (len(ps) - 1))]:>8.1f} {statistics.median(cl):>19.1f}")


if __name__ == "__main__":
    main()
