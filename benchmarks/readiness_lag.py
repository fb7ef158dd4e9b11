#!/usr/bin/python3
"""Readiness detection lag: from the moment the guest creates its ready flag
to the moment a browser learns it.

    . .demo/env   # or any stack's env file
    benchmarks/readiness_lag.py [--sessions 50] [--via events|poll] [--poll 1.0]
                                [--lesson linux-basics]

--via events (default): the client follows the start as the page does, on
GET /api/sessions/{id}/events (text/event-stream through the front end, as
EventSource reads it); the lag ends when the ready event's last byte
arrives. Nobody polls: the server's drivers see the flag (a VMI watch, then
the agent's held GET /ready?wait).

--via poll: the client polls GET /api/sessions/{id} every --poll seconds (the
page before the event stream, and any client that polls); the lag ends at
the ready_at the poll recorded (the old figure: flag -> database).

The flag's time comes from the guest agent (/ready answers {"since": the
flag's mtime}). Both clocks are this host's (process guests share it; a
QEMU guest syncs it from the host's RTC). Sessions run one after another,
so each measures an idle system. Prints p50, p95, p99 (nearest rank)."""
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
from sse import Stream, events_path  # noqa: E402
from benchstats import pct  # noqa: E402


def ts(s):
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()



def flag_time(db, sid):
    ip, tok = db.one("SELECT ip, agent_token FROM session_vms WHERE session_id = %s", sid)
    c = http.client.HTTPConnection(ip, 8899, timeout=5)
    c.request("GET", "/ready", headers={"Authorization": f"Bearer {tok}"})
    since = json.loads(c.getresponse().read())["since"]
    c.close()
    return since


def follow_events(a, sid):
    """The ready event's arrival (epoch seconds) and the session it carries."""
    st = Stream(events_path(sid), a.user, timeout=120)
    if st.status != 200:
        sys.exit(f"events: {st.status} {st.body}")
    while True:
        e = st.next()
        if e is None:
            sys.exit(f"session {sid}: the stream ended without a final event")
        s = e.json
        if s["state"] != "starting":
            st.close()
            # the event's monotonic arrival on this host's wall clock
            return time.time() - (time.monotonic() - e.t), s


def follow_poll(api, sid, every):
    while True:
        s = api.get(sid).json
        if s["state"] != "starting":
            return ts(s["ready_at"]) if s.get("ready_at") else None, s
        time.sleep(every)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--via", choices=("events", "poll"), default="events")
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
        if a.via == "events":
            seen, s = follow_events(api, sid)
        else:
            seen, s = follow_poll(api, sid, a.poll)
        if s["state"] != "ready":
            sys.exit(f"session {sid} {s['state']}: {s.get('error')}")
        lag = seen - flag_time(db, sid)
        lags.append(lag)
        totals.append(ts(s["ready_at"]) - ts(s["created_at"]))
        print(f"session {i + 1:2d}/{a.sessions}: flag -> "
              f"{'ready event received' if a.via == 'events' else 'ready_at'} "
              f"{lag * 1000:7.1f} ms (press -> ready {totals[-1]:.2f} s)", flush=True)
        api.end(sid)
    how = ("flag written -> ready event received by the client (event stream)"
           if a.via == "events" else f"flag written -> ready_at, poll every {a.poll:g} s")
    print(f"\nreadiness detection lag over {len(lags)} sessions, {how}:")
    print(f"  p50 {pct(lags, 50) * 1000:.0f} ms, p95 {pct(lags, 95) * 1000:.0f} ms, "
          f"p99 {pct(lags, 99) * 1000:.0f} ms, min {min(lags) * 1000:.0f} ms, "
          f"max {max(lags) * 1000:.0f} ms, mean {statistics.mean(lags) * 1000:.0f} ms")
    print(f"  (button press -> ready: median {statistics.median(totals):.2f} s)")


if __name__ == "__main__":
    main()
