#!/usr/bin/python3
"""An extra front end in front of the running stack's database, simulator and
console bridge, with its own labvm.fcgi and labvm.conf (the stack's, with some
keys changed): the e2e test's "capacity set to 1" without restarting the
shared stack.

    tests/e2e/frontend.py up   --state DIR --frontend lighttpd|apache --port-base B [--set key=value ...]
    tests/e2e/frontend.py down --state DIR

`up` renders conf/lighttpd/labvm.conf.in or conf/apache/labvm.conf.in through
tests/lib/labstack.py (the same templates as the stack), listens on B+80
(lighttpd) or B+90 (Apache), waits for /api/healthz and prints the URL.
Reads LABVM_CONF and LABVM_CONSOLE_URL from the environment (tests/run sets them).
"""
import argparse
import os
import sys
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import labstack  # noqa: E402


def write_conf(stack, overrides):
    with open(os.environ["LABVM_CONF"]) as f:
        lines = f.read().splitlines()
    out, seen = [], set()
    for line in lines:
        key = line.split("=", 1)[0].strip() if "=" in line and not line.lstrip().startswith("#") else None
        if key in overrides:
            out.append(f"{key} = {overrides[key]}")
            seen.add(key)
        else:
            out.append(line)
    out += [f"{k} = {v}" for k, v in overrides.items() if k not in seen]
    with open(stack.conf, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("action", choices=["up", "down"])
    ap.add_argument("--state", required=True)
    ap.add_argument("--frontend", default="lighttpd", choices=["lighttpd", "apache"])
    ap.add_argument("--port-base", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()
    s = labstack.Stack(a.state, port_base=a.port_base or 0, frontend=a.frontend)
    if a.action == "down":
        for name in ("apache", "apache-fcgi", "lighttpd"):
            s.stop(name)
        return 0
    os.makedirs(s.path("logs"), exist_ok=True)
    console = urllib.parse.urlsplit(os.environ["LABVM_CONSOLE_URL"])
    s.ports["console"] = console.port
    write_conf(s, dict(kv.split("=", 1) for kv in a.set))
    try:
        getattr(s, f"{a.frontend}_up")()
        s.wait_http(s.url(a.frontend) + "/api/healthz")
    except (labstack.StackError, OSError) as e:
        labstack.log(f"extra front end failed: {e}")
        for name in ("apache", "apache-fcgi", "lighttpd"):
            s.stop(name)
        return 1
    print(s.url(a.frontend), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
