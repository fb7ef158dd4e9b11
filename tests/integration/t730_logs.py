#!/usr/bin/python3
"""Logs: one line per event, JSON lines on request (log_format = json), the
session id as a field wherever the event names a session, and never a
secret: after a whole lab (start, a refused double start, ready, console
tickets, a console session, grade, end) no log of the stack or of this
suite's extra front end holds the ticket key, a console ticket, an agent
token, the cluster tokens, the database conninfo or a Basic credential.
The extra front end (tests/e2e/frontend.py) runs labvm.fcgi with
log_format = json on the stack's database and cluster.
timeout: 300
"""
import asyncio
import base64
import glob
import json
import os
import re
import subprocess
import sys
import urllib.parse

import websockets

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from labclient import Api, Db  # noqa: E402
from tap import T  # noqa: E402

t = T()
ENV = os.environ
SRC = ENV.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STACK_BASE = urllib.parse.urlsplit(ENV.get("LABVM_LIGHTTPD_URL") or ENV["LABVM_URL"]).port - 80
STATE = os.path.join(ENV["LABVM_STATE"], "logs-json")
USER = "student341"
PASSWORD = ENV.get("LABVM_PASSWORD", "labvm")
LESSON = "linux-basics"
facts = {"tickets": [], "agent_tokens": []}


def frontend(action):
    argv = ["/usr/bin/python3", os.path.join(SRC, "tests", "e2e", "frontend.py"), action, "--state", STATE]
    if action == "up":
        argv += ["--frontend", "lighttpd", "--port-base", str(STACK_BASE + 650), "--set", "log_format=json"]
    r = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=60)
    if action == "up" and r.returncode != 0:
        raise RuntimeError(f"extra front end: {r.stderr[-500:]}")
    return r.stdout.strip().split("\n")[-1]


def conf_value(key):
    m = re.search(rf"^{key} = (.*)$", open(ENV["LABVM_CONF"]).read(), re.M)
    return m.group(1).strip() if m else None


async def console(base, url):
    cred = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    ws = await websockets.connect(base.replace("http://", "ws://") + url, subprotocols=["labvm-console.v1"],
                                  extra_headers={"Authorization": f"Basic {cred}"}, open_timeout=10,
                                  ping_interval=None, close_timeout=2)
    out = bytearray()
    try:
        await ws.send(b"echo hello > /root/hello.txt; echo log-$((6*7))\r")
        for _ in range(200):
            m = await asyncio.wait_for(ws.recv(), 10)
            if isinstance(m, bytes):
                out += m
            if b"log-42" in out:
                break
    finally:
        await ws.close()
    return bytes(out)


base = None
try:
    frontend("down")
    base = frontend("up")
except Exception as e:  # noqa: BLE001
    facts["setup"] = str(e)


@t.test(name="a whole lab on a labvm.fcgi with log_format = json")
def lab():
    t.require(base, f"extra front end: {facts.get('setup')}")
    api = Api(USER, base=base)
    api.end_current()
    r = api.start(LESSON)
    t.require(r.status == 201, f"start: {r}")
    sid = facts["sid"] = r.json["id"]
    t.eq(api.start(LESSON).status, 409, "a double start is refused")
    s = api.wait_state(sid, ("ready", "failed"), 60)
    t.require(s["state"] == "ready", f"ready: {s}")
    for _ in range(2):
        r = api.ticket(sid)
        t.eq(r.status, 200, "console ticket")
        facts["tickets"] += [r.json["ticket"], urllib.parse.quote(r.json["ticket"], safe="")]
    # the console through the stack's front end (the bridge is the stack's)
    out = asyncio.run(console(ENV.get("LABVM_LIGHTTPD_URL") or ENV["LABVM_URL"], r.json["url"]))
    t.ok(b"log-42" in out, "the console works", out[-200:])
    t.eq(api.grade(sid).status, 200, "grade")
    facts["agent_tokens"] = [row[0] for row in Db().query(
        "SELECT agent_token FROM session_vms WHERE session_id = %s", sid)]
    t.eq(api.end(sid).status, 200, "end")


@t.test(name="JSON lines: every labvm.fcgi line is one JSON object; session_id wherever a session is named")
def json_lines():
    t.require("sid" in facts, "the lab ran")
    sid = facts["sid"]
    frontend("down")   # "stopped" is logged, and the log is complete
    lines = [ln for ln in open(os.path.join(STATE, "logs", "lighttpd.log"), errors="replace").read().split("\n") if ln]
    t.require(lines, "labvm.fcgi logged something")
    objs, bad = [], []
    for ln in lines:
        try:
            o = json.loads(ln)
            t.ok(isinstance(o, dict), "an object")
            objs.append(o)
        except ValueError:
            bad.append(ln)
    t.eq(bad, [], "no line that is not JSON")
    t.ok(all({"ts", "level", "prog", "pid", "msg"} <= set(o) for o in objs), "ts, level, prog, pid, msg on each")
    t.ok(all(o["prog"] == "labvm.fcgi" for o in objs), "prog labvm.fcgi")
    naming = [o for o in objs if sid in o["msg"]]
    t.ok(len(naming) >= 4, "several events name the session (submitted, polls, ticket, grade, end)", len(naming))
    t.eq([o for o in naming if o.get("session_id") != sid], [], "each carries session_id")
    t.ok(any("submitted" in o["msg"] for o in naming), "the start's event names the session")
    t.ok(any(re.search(r"grade", o["msg"]) for o in naming), "the grade's request line names the session")


@t.test(name="no secret in any log (stack and extra front end)")
def no_secrets():
    t.require("sid" in facts, "the lab ran")
    secrets = {}
    key = open(conf_value("ticket_key_file")).read().strip()
    secrets["ticket key"] = key
    for i, tk in enumerate(facts["tickets"]):
        secrets[f"console ticket {i}"] = tk
        secrets[f"console ticket {i} (signature)"] = tk.rsplit(".", 1)[-1]
    for i, tok in enumerate(facts["agent_tokens"]):
        secrets[f"agent token {i}"] = tok
    for name, path in (("cluster token", conf_value("kube_token_file")),
                       ("cluster admin token", ENV.get("LABVM_KUBE_ADMIN_TOKEN_FILE"))):
        if path and os.path.exists(path):
            secrets[name] = open(path).read().strip()
    db = conf_value("database")
    secrets["database conninfo"] = db
    pw = urllib.parse.urlsplit(db).password
    if pw:
        secrets["database password in a URL"] = f":{pw}@"
    secrets["Basic credential"] = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    secrets = {k: v for k, v in secrets.items() if v and len(v) >= 6}
    files = glob.glob(os.path.join(ENV["LABVM_STATE"], "logs", "*.log")) + \
        glob.glob(os.path.join(STATE, "logs", "*.log"))
    t.ok(len(files) >= 4, "logs to look at", files)
    found = []
    for f in files:
        text = open(f, errors="replace").read()
        for name, v in secrets.items():
            if v in text:
                found.append(f"{name} in {os.path.relpath(f, ENV['LABVM_STATE'])}")
    t.eq(found, [], f"none of {len(secrets)} secrets in {len(files)} log files")


frontend("down")
if "sid" in facts:
    Api(USER, base=ENV["LABVM_URL"]).end_current()
t.done()
