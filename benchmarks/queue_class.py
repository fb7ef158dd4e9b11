#!/usr/bin/python3
"""A class against a full lab: the waiting line (issue #20) beside retry-only.

N students press Start within a few seconds of each other against a lab of C
seats; each keeps the lab it gets for a random time (uniform HOLD_MIN..HOLD_MAX
seconds), then ends it. Two runs of the same class:

  retry  the page before the line: capacity_full, wait Retry-After (plus a
         student's reaction, 0-3 s), press Start again
  queue  "queue": true: a place in line, polled every 2 s as the page does;
         the estimate shown on joining is kept to compare with the start

Printed per run: the wait from the first press to the session (p50, p90,
max), order inversions (pairs where the one who pressed later started first,
over all pairs: 0 is first come first served), the most sessions at once
(capacity); for the line, the estimate's error (actual start - estimated at
joining; p50 of the absolute error, p90) and how often the bound (the k-th
earliest expiry) held. The retry run goes first, so the line's estimate has
recent history to learn from.

    . .check/env; benchmarks/queue_class.py [--students 30] [--hold-min 10] [--hold-max 40]
"""
import argparse
import os
import random
import statistics
import sys
import threading
import time
from datetime import datetime

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from labclient import Api, Db  # noqa: E402


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    return xs[max(0, min(len(xs) - 1, int(round(p / 100.0 * len(xs) + 0.5)) - 1))]


def ts(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp() if s else None


def student(a, i, mode, out, t0):
    api = Api(f"student{a.first_user + i}", timeout=60)
    api.end_current()
    time.sleep(t0 + random.uniform(0, a.spread) - time.time())
    pressed = time.time()
    rec = {"i": i, "pressed": pressed, "tries": 0}
    while True:
        rec["tries"] += 1
        body = {"lesson": a.lesson, "queue": True} if mode == "queue" else {"lesson": a.lesson}
        r = api.request("POST", "/api/sessions", body)
        if r.status == 201:
            sid = r.json["id"]
            break
        if r.status == 202:
            sid = r.json["id"]
            q = r.json["queue"]
            rec["estimate"], rec["bound"] = ts(q.get("estimate")), ts(q.get("no_later_than"))
            rec["position"] = q.get("position")
            while True:
                time.sleep(2.0)
                g = api.get(sid)
                if g.status == 200 and g.json.get("state") in ("starting", "ready"):
                    break
                if g.status != 200 or g.json.get("state") != "queued":
                    rec["error"] = f"place: {g}"
                    out[i] = rec
                    return
            break
        if r.status == 503 and r.json.get("error") == "capacity_full":
            wait = int(r.header("Retry-After") or 30)
            time.sleep(wait + random.uniform(0, 3))
            continue
        rec["error"] = f"start: {r}"
        out[i] = rec
        return
    rec["started"] = time.time()
    time.sleep(random.uniform(a.hold_min, a.hold_max))
    api.end(sid)
    out[i] = rec


def run(a, mode, db):
    out = [None] * a.students
    t0 = time.time() + 2
    most = [0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            n = db.one("SELECT count(*) FROM sessions WHERE state IN ('starting', 'ready')")[0]
            most[0] = max(most[0], n)
            time.sleep(0.2)
    w = threading.Thread(target=watch, daemon=True)
    w.start()
    ths = [threading.Thread(target=student, args=(a, i, mode, out, t0)) for i in range(a.students)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    stop.set()
    w.join()
    ok = [r for r in out if r and "started" in r]
    bad = [r for r in out if not r or "started" not in r]
    waits = [r["started"] - r["pressed"] for r in ok]
    inv = pairs = 0
    for x in ok:
        for y in ok:
            if x["pressed"] < y["pressed"]:
                pairs += 1
                inv += y["started"] < x["started"]
    print(f"\n{mode}: {len(ok)} of {a.students} students got a lab ({len(bad)} errors)"
          f"{' ' + bad[0].get('error', '') if bad and bad[0] else ''}")
    print(f"  wait for a lab (s): p50 {pct(waits, 50):.1f}  p90 {pct(waits, 90):.1f}  "
          f"max {max(waits):.1f}  mean {statistics.mean(waits):.1f}")
    print(f"  presses per student: mean {statistics.mean(r['tries'] for r in ok):.2f}")
    print(f"  order inversions: {inv} of {pairs} pairs ({100.0 * inv / max(1, pairs):.1f}%)")
    print(f"  most sessions at once: {most[0]} (capacity {a.capacity})")
    joined = [r for r in ok if r.get("position")]
    if joined:
        errs = [r["started"] - r["estimate"] for r in joined if r.get("estimate")]
        held = [r["started"] <= r["bound"] + 3 for r in joined if r.get("bound")]
        berr = [r["bound"] - r["started"] for r in joined if r.get("bound")]
        print(f"  joined the line: {len(joined)}; estimate given to {len(errs)}")
        if errs:
            print(f"  estimate error (actual - estimated, s): p50 |err| "
                  f"{pct([abs(e) for e in errs], 50):.1f}  p90 |err| "
                  f"{pct([abs(e) for e in errs], 90):.1f}  median signed {statistics.median(errs):+.1f}")
        if held:
            print(f"  bound held (start <= bound + 3 s of polling): {sum(held)} of {len(held)}; "
                  f"bound - actual median {statistics.median(berr):.0f} s")
    return {"waits": waits, "inv": inv, "pairs": pairs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--students", type=int, default=30)
    ap.add_argument("--capacity", type=int, default=int(os.environ.get("LABVM_CAPACITY", 8)))
    ap.add_argument("--lesson", default="linux-basics")
    ap.add_argument("--first-user", type=int, default=100)
    ap.add_argument("--spread", type=float, default=3.0, help="presses within this many seconds")
    ap.add_argument("--hold-min", type=float, default=10.0)
    ap.add_argument("--hold-max", type=float, default=40.0)
    ap.add_argument("--modes", default="retry,queue")
    a = ap.parse_args()
    db = Db()
    print(f"class: {a.students} students, {a.capacity} seats, lesson {a.lesson}, each keeps "
          f"the lab {a.hold_min:.0f}-{a.hold_max:.0f} s (uniform), presses within {a.spread:.0f} s")
    res = {m: run(a, m, db) for m in a.modes.split(",")}
    if "retry" in res and "queue" in res:
        r, q = res["retry"]["waits"], res["queue"]["waits"]
        print(f"\nline vs retry: p50 wait {pct(q, 50):.1f} vs {pct(r, 50):.1f} s, "
              f"p90 {pct(q, 90):.1f} vs {pct(r, 90):.1f} s, max {max(q):.1f} vs {max(r):.1f} s")


if __name__ == "__main__":
    main()
