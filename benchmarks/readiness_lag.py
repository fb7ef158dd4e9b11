#!/usr/bin/python3
"""Readiness detection lag: from the moment the guest creates its ready flag
to the moment labvm records ready_at, when the browser polls
GET /api/sessions/{id} at its own interval (the page polls every second).

    . .demo/env   # or any stack's env file
    benchmarks/readiness_lag.py [--sessions 20] [--poll 1.0] [--lesson linux-basics]

The flag's time comes from the guest agent (/ready answers {"since": the
flag's mtime}); ready_at from the session. Both clocks are this host's
(process guests share it; a QEMU guest syncs it from the host's RTC).
Sessions run one after another, so each measures an idle system."""
import argparse
import datetime
import http.client
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from labclient import Api, Db  # noqa: E402


def ts(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def pct(xs, p):
    xs = sorted(xs)
    k = max(0, min(len(xs) - 1, int(round(p / 100.0 * len(xs) + 0.5)) - 1))  # nearest rank
    return xs[k]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=20)
    ap.add_argument("--poll", type=float, default=1.0, help="browser poll interval (s)")
    ap.add_argument("--lesson", default="linux-basics")
    ap.add_argument("--user", default="student199")
    a = ap.parse_args()
    api, db = Api(a.user), Db()
    lags, totals = [], []
    api.end_current()
    for i in range(a.sessions):
        r = api.start(a.lesson)
        if r.status != 201:
            sys.exit(f"start: {r}")
        sid = r.json["id"]
        while True:
            s = api.get(sid).json
            if s["state"] != "starting":
                break
            time.sleep(a.poll)
        if s["state"] != "ready":
            sys.exit(f"session {sid} {s['state']}: {s.get('error')}")
        ip, tok = db.one("SELECT ip, agent_token FROM session_vms WHERE session_id = %s", sid)
        c = http.client.HTTPConnection(ip, 8899, timeout=5)
        c.request("GET", "/ready", headers={"Authorization": f"Bearer {tok}"})
        since = json.loads(c.getresponse().read())["since"]
        c.close()
        lag = ts(s["ready_at"]) - since
        lags.append(lag)
        totals.append(ts(s["ready_at"]) - ts(s["created_at"]))
        print(f"session {i + 1:2d}/{a.sessions}: flag -> ready_at {lag * 1000:7.1f} ms "
              f"(press -> ready {totals[-1]:.2f} s)", flush=True)
        api.end(sid)
    print(f"\nreadiness detection lag over {len(lags)} sessions, poll every {a.poll:g} s:")
    print(f"  median {statistics.median(lags) * 1000:.0f} ms, p95 {pct(lags, 95) * 1000:.0f} ms, "
          f"min {min(lags) * 1000:.0f} ms, max {max(lags) * 1000:.0f} ms, "
          f"mean {statistics.mean(lags) * 1000:.0f} ms")
    print(f"  (button press -> ready: median {statistics.median(totals):.2f} s)")


if __name__ == "__main__":
    main()
