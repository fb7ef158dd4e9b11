#!/usr/bin/python3
"""Console keystroke latency: one byte typed in the browser's WebSocket ->
front end -> labvm-console -> the VMI console -> the guest's echo back, the
figure tests/integration/t500 used to assert (under 1 s) and now leaves to
benchmarks (tests assert that a lone keystroke is echoed, not how fast).

    . .demo/env   # or any stack's env file
    benchmarks/console_latency.py [--keys 100] [--user student1] [--lesson linux-basics]

Starts (or reuses) the user's lab, opens its console once, then types one
key at a time, waiting for each echo; prints min, p50, p90, p99, max in ms
and ends the lab it started."""
import argparse
import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from labclient import Api  # noqa: E402
from labconsole import Console  # noqa: E402
from benchstats import pct  # noqa: E402



async def measure(base, url, user, keys):
    c = await Console.open(base, url, user)
    if not await c.opened(60):
        raise SystemExit(f"console did not open: {c.ctl}")
    await c.until(lambda x: x.out.rstrip().endswith((b"#", b"$")), 30)
    out = []
    for i in range(keys):
        ch = b"abcdefghij"[i % 10:i % 10 + 1]
        n = len(c.out)
        t0 = time.monotonic()
        await c.send(ch)
        if not await c.until(lambda x: ch in x.out[n:], 30):
            raise SystemExit(f"no echo for key {i}")
        out.append((time.monotonic() - t0) * 1000)
        if i % 40 == 39:
            await c.send(b"\x15")   # ^U: keep the line short
            await asyncio.sleep(0.05)
    await c.send(b"\x15")
    await c.close()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--user", default="student1")
    ap.add_argument("--lesson", default="linux-basics")
    a = ap.parse_args()
    base = os.environ.get("LABVM_URL")
    if not base:
        raise SystemExit("LABVM_URL is not set: source a stack's env file (. .demo/env)")
    api = Api(a.user)
    started = None
    cur = api.current()
    if cur.status == 200:
        s = cur.json
    else:
        r = api.start(a.lesson)
        if r.status != 201:
            raise SystemExit(f"start: {r}")
        s = started = r.json
    s = api.wait_state(s["id"], ("ready", "failed"), 300)
    if s["state"] != "ready":
        raise SystemExit(f"lab not ready: {s.get('error')}")
    try:
        r = api.ticket(s["id"])
        ms = asyncio.new_event_loop().run_until_complete(
            measure(base, r.json["url"], a.user, a.keys))
    finally:
        if started:
            api.end(started["id"])
    print(f"keystroke echo ({len(ms)} keys, {base}): min {min(ms):.1f} ms, p50 {pct(ms, 50):.1f}, "
          f"p90 {pct(ms, 90):.1f}, p99 {pct(ms, 99):.1f}, max {max(ms):.1f}")


if __name__ == "__main__":
    main()
