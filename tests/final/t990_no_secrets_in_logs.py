#!/usr/bin/python3
"""No secret in any log of the run. Runs last (after every other suite of the
check) and reads every log the run produced: the front ends' access and
error logs, labvm.fcgi (lighttpd's error log, Apache's spawn-fcgi log),
labvm-console and the private bridges of the suites, the simulator, the
extra front ends of the page tests, PostgreSQL's, and a reaper run of its
own. It searches them for the cluster tokens, every agent token the run
handed out, the ticket key, anything shaped like a console ticket, and the
database password (random per state folder, so that a leak shows)."""
import glob
import os
import re
import subprocess
import urllib.parse

from labtest import Api, Db, env, reaper_argv
from tap import T

t = T()
STATE = env("LABVM_STATE")
TICKET = re.compile(r"v1\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{16,}")


def read(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


def log_files():
    out = []
    for root, dirs, files in os.walk(STATE):
        dirs[:] = [d for d in dirs if d not in ("data", "kubesim", "node_modules")]
        for n in files:
            p = os.path.join(root, n)
            if n.endswith(".log") or os.path.basename(root) == "logs":
                out.append(p)
    return sorted(out)


def secrets():
    """{what: value} of every secret of this run."""
    out = {}
    for what, var in (("admin token", "LABVM_KUBE_ADMIN_TOKEN_FILE"),
                      ("backend token", "LABVM_KUBE_BACKEND_TOKEN_FILE")):
        out[what] = read(env(var)).strip()
    with open(env("LABVM_CONF")) as f:
        key_file = re.search(r"(?m)^ticket_key_file = (.*)$", f.read()).group(1).strip()
    out["ticket key"] = read(key_file).strip()
    out["database password"] = urllib.parse.urlsplit(env("LABVM_DATABASE")).password
    db = Db()
    for (i, tok) in enumerate(r[0] for r in db.query(
            "SELECT DISTINCT agent_token FROM session_vms WHERE length(agent_token) >= 16")):
        out[f"agent token #{i}"] = tok
    db.close()
    return out


def scan(files, secs):
    """[(file, what)] for every secret or ticket-shaped string found."""
    hits = []
    for p in files:
        text = read(p)
        for what, val in secs.items():
            if val and val in text:
                hits.append((os.path.relpath(p, STATE), what))
        for m in TICKET.finditer(text):
            hits.append((os.path.relpath(p, STATE), f"a console ticket {m.group(0)[:12]}..."))
    return hits


SECS = secrets()


@t.test(name="the secrets to look for are known and real")
def known():
    t.ok(SECS["database password"] and SECS["database password"] != "labvm",
         "the test database has a password of its own")
    t.ok(all(len(SECS[k]) >= 16 for k in ("admin token", "backend token", "ticket key")),
         "tokens and key read")
    n = len([k for k in SECS if k.startswith("agent token")])
    t.ok(n >= 5, "the agent tokens of the run's sessions", n)


@t.test(name="a reaper run's own output has no secret (with sessions to work on)")
def reaper_output():
    api = Api("student399")
    r = api.start("linux-basics")
    t.require(r.status == 201, f"a session for the reaper to see: {r}")
    try:
        p = subprocess.run(reaper_argv("--dry-run", "--grace", "0"), env=dict(os.environ, LABVM_CONF=env("LABVM_CONF")),
                           capture_output=True, text=True, timeout=300)
        t.eq(p.returncode, 0, "the reaper ran", p.stdout + p.stderr)
        path = os.path.join(STATE, "logs", "t990-reaper.log")
        with open(path, "w") as f:
            f.write(p.stdout + p.stderr)
        t.eq(scan([path], secrets()), [], "no secret in its output")
    finally:
        api.end(r.json["id"])


@t.test(name="the scan finds a planted secret (it is not vacuous)")
def control():
    path = os.path.join(STATE, "logs", "t990-control.log")
    for what, val in (("database password", SECS["database password"]),
                      ("agent token #0", SECS.get("agent token #0", "")),
                      ("ticket", "v1.AAAAAAAAAAAAAAAAAAAA.BBBBBBBBBBBBBBBBBBBB")):
        with open(path, "w") as f:
            f.write(f"GET /x?secret={val} 200\n")
        t.ok(scan([path], SECS), f"a planted {what} is found")
    os.unlink(path)


@t.test(name="no log of the run holds a token, the ticket key, a console ticket or the "
             "database password")
def no_secrets():
    files = log_files()
    names = {os.path.basename(p) for p in files}
    for want in ("lighttpd-access.log", "lighttpd-error.log", "apache-access.log",
                 "apache-error.log", "apache-fcgi.log", "console.log", "kubesim.log"):
        t.ok(want in names, f"{want} is read", sorted(names))
    t.ok(sum(os.path.getsize(p) for p in files) > 10000, "the logs are not empty")
    t.diag(f"{len(files)} log files, {len(SECS)} secrets")
    hits = scan(files, secrets())
    t.eq(hits, [], "secrets found in logs")


t.done()
