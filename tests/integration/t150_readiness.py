#!/usr/bin/python3
"""Ready means ready: two-stage readiness (VMI Running, then the guest
agent's ready flag), honest failures at the deadlines, and grading through
the agent."""
import http.client
import os
import json
import re
import threading
import time

import utf8text
from labtest import Api, Db, Kube, cordon, env, reset_world, vm_of, wait_until
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
ORDER = ["submitted", "scheduling", "booting", "setting_up", "ready"]


def agent(sid, path, token=True, method="GET", body=None):
    ip, tok = db.one("SELECT ip, agent_token FROM session_vms WHERE session_id = %s", sid)
    c = http.client.HTTPConnection(ip, 8899, timeout=5)
    h = {"Authorization": f"Bearer {tok}"} if token is True else (
        {"Authorization": f"Bearer {token}"} if token else {})
    c.request(method, path, body=json.dumps(body) if body else None, headers=h)
    r = c.getresponse()
    out = r.status, json.loads(r.read() or b"null")
    c.close()
    return out


@t.test(name="starting -> ready through every stage in order; submitted_at < running_at <= ready_at")
def to_ready():
    # the simulator slowed down (x20) and a setup that takes seconds, so each
    # stage lasts long enough for the poll to see it however loaded the machine
    before = kube.request("GET", "/_sim/profile").json
    t.require(kube.request("POST", "/_sim/profile", {"profile": before["profile"],
                                                     "time_scale": 20}).status == 200,
              "slowing the simulator")
    api = Api("student201")
    s = None
    stop = threading.Event()
    pollers_running_at = set()
    polls = [0]
    errors = []

    def poll_other():
        try:
            other = Api("student201")
            while not stop.is_set():
                r = other.get(s["id"])
                if r.status != 200:
                    raise AssertionError(f"concurrent GET: {r}")
                if r.json["running_at"]:
                    pollers_running_at.add(r.json["running_at"])
                polls[0] += 1
                time.sleep(0.05)
        except Exception as e:  # noqa: BLE001 - reported by the test, not lost
            errors.append(repr(e))
    ths = []
    try:
        r = api.start("test-slow-setup")
        t.require(r.status == 201, f"start: {r}")
        s = r.json
        seen = [s["stage"]]
        ths = [threading.Thread(target=poll_other) for _ in range(3)]
        for th in ths:
            th.start()

        def step():
            cur = api.get(s["id"]).json
            if cur["stage"] != seen[-1]:
                seen.append(cur["stage"])
            return cur if cur["state"] != "starting" else None
        final = wait_until(step, 180, 0.05, "leaving starting")
    finally:
        stop.set()
        for th in ths:
            th.join()
        kube.request("POST", "/_sim/profile", {"profile": before["profile"],
                                               "time_scale": before["time_scale"]})
    t.eq(final["state"], "ready", "ready", final.get("error"))
    t.eq(seen, ORDER, "every stage seen, in order, each once")
    t.ok(final["submitted_at"] < final["running_at"] <= final["ready_at"],
         "submitted_at < running_at <= ready_at", final)
    t.eq(errors, [], "the concurrent pollers had no error")
    t.ok(polls[0] > 0 and pollers_running_at, "the concurrent pollers saw running_at",
         (polls[0], pollers_running_at))
    t.eq(pollers_running_at, {final["running_at"]},
         "every concurrent poller saw the same running_at (recorded once)")
    t.eq(db.one("SELECT stage, state FROM sessions WHERE id = %s", s["id"]), ("ready", "ready"),
         "the row agrees")
    api.end(s["id"])


@t.test(name="the agent: 403 without or with a wrong token; /ready 503 while setup runs, 200 after")
def agent_ready():
    api = Api("student202")
    s = api.start("test-slow-setup").json
    wait_until(lambda: api.get(s["id"]).json["running_at"], 30, 0.05, "VMI Running")
    wait_until(lambda: db.one("SELECT ip FROM session_vms WHERE session_id = %s", s["id"])[0],
               10, what="the VMI address recorded")

    def answered():
        try:
            return agent(s["id"], "/ready")
        except OSError:
            return None
    st, body = wait_until(answered, 20, 0.05, "the agent listening")
    t.eq(agent(s["id"], "/ready", token=None)[0], 403, "no token: 403")
    t.eq(agent(s["id"], "/ready", token="wrong-token")[0], 403, "wrong token: 403")
    t.eq(st, 503, "not ready while setup sleeps")
    t.ok(body.get("state") in ("booting", "setup_running"), "says what it is doing", body)
    cur = api.get(s["id"]).json
    t.eq((cur["state"], cur["stage"]), ("starting", "setting_up"), "the API waits for the guest")
    final = api.wait_state(s["id"], ("ready", "failed"), 30)
    t.eq(final["state"], "ready", "ready after setup", final.get("error"))
    st, body = agent(s["id"], "/ready")
    t.eq((st, body.get("ready")), (200, True), "/ready 200 now")
    g = api.grade(s["id"]).json
    t.eq(g["steps"][0]["passed"], True, "setup had finished before the student got in")
    api.end(s["id"])


@t.test(name="a failing setup ends failed with the setup's error; its VM is deleted")
def setup_fails():
    api = Api("student203")
    s = api.start("broken-setup").json
    final = api.wait_state(s["id"], ("ready", "failed"), 90)
    t.eq(final["state"], "failed", "failed, not ready")
    t.eq(final["end_reason"], "failed", "end_reason")
    t.eq(final["stage"], "setting_up", "the session's stage is where it failed")
    t.ok("setting_up" in final["error"] and "exit code 3" in final["error"],
         "the error names the stage and the exit code", final["error"])
    t.ok("lab data archive not found" in final["error"], "and carries the setup's output")
    t.eq(kube.get("secrets", vm_of(final) + "-cloudinit").status, 404, "Secret deleted")
    wait_until(lambda: kube.get("virtualmachines", vm_of(final)).status == 404, 15,
               what="VM deleted")
    t.eq(api.current().status, 404, "no open session: the student can start again")
    t.eq(api.grade(s["id"]).status, 409, "grading a failed session is 409")


@t.test(name="a setup that never finishes fails at ready_timeout_s, naming the stage")
def never_ready():
    api = Api("student204")
    s = api.start("test-never-ready").json
    final = api.wait_state(s["id"], ("ready", "failed"), 60)
    t.eq(final["state"], "failed", "failed")
    t.ok(final["error"].startswith("setting_up:") and "3 s" in final["error"],
         "names the stage and the deadline", final["error"])
    t.ok("setup_running" in final["error"] or "download that never comes" in final["error"],
         "with what the agent knew", final["error"])
    wait_until(lambda: kube.get("virtualmachines", vm_of(final)).status == 404, 15,
               what="VM deleted")


@t.test(name="a VM no node can ever hold is refused at the press: 409 never_fits, named")
def never_fits():
    api = Api("student204")
    before = len(kube.lab_vms())
    r = api.start("test-never-fits")
    t.eq((r.status, r.json.get("error")), (409, "never_fits"), "refused at once", r.json)
    msg = r.json.get("message", "")
    t.ok(re.search(r"its VM needs 102\d\.\d GiB of memory; the largest node, node-\d, has "
                   r"\d+\.\d GiB allocatable", msg), "names the need and the node", msg)
    t.eq(len(kube.lab_vms()), before, "nothing submitted")
    t.eq(api.current().status, 404, "no session")


@t.test(name="a VMI the cluster cannot place now (every node cordoned) fails at running_timeout_s")
def unschedulable():
    api = Api("student205")
    cordon(kube)
    try:
        s = api.start("test-unschedulable").json
        t.eq(api.grade(s["id"]).status, 409, "grading while starting is 409 not_ready")
        t.eq(api.ticket(s["id"]).status, 409, "no console ticket while starting")
        final = api.wait_state(s["id"], ("ready", "failed"), 40)
    finally:
        cordon(kube, False)
    t.eq(final["state"], "failed", "failed")
    t.ok(final["error"].startswith("scheduling:") and "within 3 s" in final["error"],
         "names the stage and the deadline", final["error"])
    t.ok("ErrorUnschedulable" in final["error"], "with the VM's status", final["error"])
    t.eq(final["running_at"], None, "never ran")
    wait_until(lambda: kube.get("virtualmachines", vm_of(final)).status == 404, 15,
               what="VM deleted")


@t.test(name="grading: 8 steps, results change when the student fixes the lab")
def grading():
    api = Api("student206")
    s = api.start("linux-basics").json
    s = api.wait_state(s["id"], ("ready", "failed"), 60)
    t.require(s["state"] == "ready", f"ready: {s.get('error')}")
    g = api.grade(s["id"])
    t.eq(g.status, 200, "status")
    g = g.json
    t.eq(g["total"], 8, "8 steps")
    t.eq([x["passed"] for x in g["steps"]], [True, True] + [False] * 6, "before the work")
    t.ok(all(set(x) >= {"name", "passed", "output"} for x in g["steps"]), "step fields")
    with open(os.path.join(env("LABVM_SRC"), "conf", "lessons", "linux-basics.json")) as f:
        want_ja = [st["i18n"]["ja"]["name"] for st in json.load(f)["grader"]]
    t.eq([(x.get("i18n") or {}).get("ja", {}).get("name") for x in g["steps"]], want_ja,
         "each step carries the lesson's Japanese name")
    vm = vm_of(s)
    fix = ("echo hello > /root/hello.txt && chmod +x /root/lab/run.sh && "
           "chmod 600 /root/lab/secret.txt && mkdir -p /root/lab/out && /root/lab/run.sh")
    r = kube.guest_exec(vm, fix)
    t.eq(r["exit_code"], 0, "the fix ran in the guest", r)
    g2 = api.grade(s["id"]).json
    t.eq([x["passed"] for x in g2["steps"]], [True] * 7 + [False], "after most of the work")
    t.eq(g2["passed"], 7, "7 passed")
    t.ok("student" in g2["steps"][7]["output"] or g2["steps"][7]["output"] != "",
         "the failing step shows its output", g2["steps"][7])
    kube.guest_exec(vm, "useradd student || adduser --disabled-password --gecos '' student")
    g3 = api.grade(s["id"]).json
    t.eq((g3["passed"], g3["total"]), (8, 8), "all pass at the end")
    stored = api.get(s["id"]).json["last_grade"]
    t.eq((stored or {}).get("passed"), 8, "the last grade is stored with the session")
    t.ok((stored or {}).get("graded_at"), "with its time")
    kube.guest_exec(vm, "pkill -f /opt/labvm/agent.py; true")
    r = api.grade(s["id"])
    t.eq((r.status, (r.json or {}).get("error")), (502, "agent_unreachable"),
         "agent gone: 502 with a clear error")
    api.end(s["id"])


def gone(kind, name):
    r = kube.get(kind, name)
    return r.status == 404 or bool(r.json["metadata"].get("deletionTimestamp"))


def seat_free(sid):
    """None of the session's VMs is a lab VM any more (terminating ones count
    against the capacity)."""
    mine = {v[0] for v in db.query("SELECT vm_name FROM session_vms WHERE session_id = %s", sid)}
    return not mine & {v["metadata"]["name"] for v in kube.lab_vms()}


@t.test(name="a setup failing with multi-byte output (Japanese, systemctl's \u25cf, gcc's "
             "quotes) across the 1023-byte cut: failed, not stuck; the error is the message "
             "cut before the character; its VM is deleted, its seat free")
def setup_fails_utf8():
    out, rc = utf8text.setup_output("test-setup-utf8")
    full = ("setting_up: the lab setup failed with exit code %d: " % rc
            + utf8text.agent_log_tail(out)).encode()
    t.require(utf8text.splits_at(full, 1023), "the lesson's output straddles byte 1023")
    api = Api("student381")
    s = api.start("test-setup-utf8").json
    final = api.wait_state(s["id"], ("ready", "failed"), 120)  # every GET answers 200
    t.eq((final["state"], final["stage"]), ("failed", "setting_up"), "failed in setting_up")
    err = (final.get("error") or "").encode()
    t.eq(err, utf8text.clean_cut(full, 1023), "the error: the whole message cut before the "
         "character that did not fit")
    t.ok(len(err) <= 1023 and "\u30bb\u30c3\u30c8\u30a2\u30c3\u30d7\u5931\u6557" in final["error"]
         and "\u25cf" in final["error"] and "\u2018count\u2019" in final["error"],
         "the setup's own text kept", final["error"][-200:])
    t.eq(db.one("SELECT state, error FROM sessions WHERE id = %s", s["id"]),
         ("failed", final["error"]), "the row says so")
    wait_until(lambda: gone("virtualmachines", vm_of(final)), 30, what="VM deleted")
    t.ok(gone("secrets", vm_of(final) + "-cloudinit"), "Secret deleted")
    wait_until(lambda: seat_free(s["id"]), 60, what="its seat free (the VM gone, not terminating)")
    t.eq(api.current().status, 404, "no open session: the student can start again")


@t.test(name="an agent the student replaced answers bytes that are not UTF-8 (0xff, stray "
             "continuation bytes, a cut character): the session fails with U+FFFD in their "
             "place, its VM is deleted")
def agent_bad_bytes():
    api = Api("student382")
    s = api.start("test-setup-badbytes").json
    final = api.wait_state(s["id"], ("ready", "failed"), 120)
    t.eq(final["state"], "failed", "failed, not stuck", final)
    err = final.get("error") or ""
    t.ok(err.startswith("setting_up: the lab setup failed with exit code 9: bad \ufffd bytes "
                        "\ufffd\ufffd \u6587\u5b57\u5316\u3051"),
         "each ill-formed byte is U+FFFD, the rest kept", err[:120])
    t.ok(utf8text.valid(err.encode()) and len(err.encode()) <= 1023, "valid UTF-8, cut")
    wait_until(lambda: gone("virtualmachines", vm_of(final)), 30, what="VM deleted")
    wait_until(lambda: seat_free(s["id"]), 60, what="its seat free (the VM gone, not terminating)")


reset_world(kube, db)
t.done()
