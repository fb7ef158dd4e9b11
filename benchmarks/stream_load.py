#!/usr/bin/python3
"""API latency beside open event streams: p99 of the status GET and of a
start, with no stream open and with --streams open event streams
(GET /api/sessions/{id}/events, read as a browser reads them), in one run.

    . .demo/env   # or any stack's env file (the test lessons: test-long-setup)
    benchmarks/stream_load.py [--streams 200] [--watched 4] [--starts 300] [--seconds 10]
                                [--runs 1]

The streams watch --watched starts that stay starting (test-long-setup: its
setup runs ten minutes), --streams / --watched tabs each, so the stream
drivers are busy too (held agent requests); those starts exist in both
measurements (a start counts the cluster's lab VMs), only the streams differ. The status GET is wrk on a ready
session (16 connections, --seconds); a start is POST /api/sessions of a
light lesson then DELETE, one after another (--starts of them); the start's
p99 is of those. Needs vm_capacity >= watched + 2."""
import argparse
import multiprocessing
import base64
import os
import re
import selectors
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from labclient import Api  # noqa: E402
from sse import Stream, events_path  # noqa: E402
from benchstats import pct  # noqa: E402



def wrk_p99(url, auth, seconds):
    out = subprocess.run(["wrk", "-t2", "-c16", f"-d{seconds}s", "--latency", "-H",
                          f"Authorization: {auth}", url],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
    v = float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    if re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out):
        sys.exit(f"status GET: answers that were not 2xx:\n{out}")
    return v, rps


def starts(api, lesson, n):
    lat = []
    for _ in range(n):
        t0 = time.monotonic()
        r = api.start(lesson)
        lat.append((time.monotonic() - t0) * 1000)
        if r.status != 201:
            sys.exit(f"start: {r}")
        api.end(r.json["id"])
    return lat


def hold_streams(url, watched, n, q, stop):
    """Open n streams over the watched sessions, read them until stop; put
    "open" (or an error) when they are open, then (still open, bytes read)."""
    streams = []
    try:
        for i in range(n):
            user, wsid = watched[i % len(watched)]
            st = Stream(events_path(wsid), user, base=url, timeout=60)
            if st.status != 200:
                q.put(f"stream {i}: {st.status} {st.body}")
                return
            streams.append(st)
    except Exception as e:  # noqa: BLE001 - reported to the parent
        q.put(f"stream: {e}")
        return
    sel = selectors.DefaultSelector()
    for st in streams:
        st.conn.sock.setblocking(False)
        sel.register(st.conn.sock, selectors.EVENT_READ, st)
    q.put("open")
    got = 0
    while not stop.is_set():
        for key, _ in sel.select(0.5):
            try:
                data = key.fileobj.recv(65536)
            except BlockingIOError:
                continue
            if not data:
                sel.unregister(key.fileobj)
                continue
            got += len(data)
    q.put((len(sel.get_map()), got))
    for st in streams:
        st.close()


def measure(a, reader, api_status, sid, auth, api_start):
    p99, rps = wrk_p99(f"{a.url}/api/sessions/{sid}", auth, a.seconds)
    lat = starts(api_start, a.lesson, a.starts)
    return p99, rps, pct(lat, 99), statistics.median(lat)


def with_streams(a, api_status, sid, auth, api_start, watched):
    """One measurement with a.streams streams open on the watched starts."""
    # the streams live in a process of their own, read as they come (so
    # this process's GIL does not slow the start loop down)
    ctx = multiprocessing.get_context("fork")
    q, stop = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=hold_streams,
                        args=(a.url, [(api.user, wsid) for api, wsid in watched],
                              a.streams, q, stop))
    child.start()
    msg = q.get(timeout=120)
    if msg != "open":
        sys.exit(msg)
    time.sleep(2)
    p1 = measure(a, None, api_status, sid, auth, api_start)
    stop.set()
    open_now, nbytes = q.get(timeout=30)
    child.join(30)
    return p1, open_now, nbytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--streams", type=int, default=200)
    ap.add_argument("--watched", type=int, default=4)
    ap.add_argument("--starts", type=int, default=300,
                    help="starts per measurement (p99 of 300 is the 3rd slowest)")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--runs", type=int, default=1,
                    help="measurements of each kind, alternating (0 streams, then streams)")
    ap.add_argument("--lesson", default="linux-basics")
    ap.add_argument("--url", default=os.environ.get("LABVM_URL"))
    a = ap.parse_args()
    status_user, start_user = "student195", "student194"
    watchers = [f"student{170 + i}" for i in range(a.watched)]
    api_status, api_start = Api(status_user, base=a.url), Api(start_user, base=a.url)
    for u in [status_user, start_user] + watchers:
        Api(u, base=a.url).end_current()
    s = api_status.start(a.lesson).json
    api_status.wait_state(s["id"])
    sid = s["id"]
    auth = "Basic " + base64.b64encode(f"{status_user}:{api_status.password}".encode()).decode()
    ratios, watched = [], []
    try:
        # the watched starts exist in both measurements (a start lists the
        # cluster's lab VMs: the same cluster either way); only the streams
        # on them (and the drivers those start) differ
        for u in watchers:
            api = Api(u, base=a.url)
            r = api.start("test-long-setup")
            if r.status != 201:
                sys.exit(f"start test-long-setup: {r}")
            watched.append((api, r.json["id"]))
        for run in range(a.runs):
            tag = f"run {run + 1}/{a.runs}: " if a.runs > 1 else ""
            p0 = measure(a, None, api_status, sid, auth, api_start)
            print(f"{tag}0 streams:   status GET p99 {p0[0]:.1f} ms ({p0[1]:.0f}/s), "
                  f"start p99 {p0[2]:.0f} ms (median {p0[3]:.0f} ms)", flush=True)
            p1, open_now, nbytes = with_streams(a, api_status, sid, auth, api_start, watched)
            print(f"{tag}{a.streams} streams ({open_now} still open at the end, "
                  f"{nbytes} bytes read): status GET p99 {p1[0]:.1f} ms ({p1[1]:.0f}/s), "
                  f"start p99 {p1[2]:.0f} ms (median {p1[3]:.0f} ms)")
            ratios.append((p1[0] / p0[0], p1[2] / p0[2]))
            print(f"{tag}ratio with/without streams: status GET p99 {ratios[-1][0]:.2f}x, "
                  f"start p99 {ratios[-1][1]:.2f}x", flush=True)
    finally:
        for api, wsid in watched:
            api.end(wsid)
        api_status.end(sid)
    if a.runs > 1:
        g, st = [r[0] for r in ratios], [r[1] for r in ratios]
        print(f"\nover {a.runs} runs, p99 with/without {a.streams} streams: "
              f"status GET median {statistics.median(g):.2f}x (worst {max(g):.2f}x), "
              f"start median {statistics.median(st):.2f}x (worst {max(st):.2f}x)")


if __name__ == "__main__":
    main()
