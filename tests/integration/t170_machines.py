#!/usr/bin/python3
# timeout: 300
"""Sessions of several machines (lessons with "machines"): each machine its
own VM, Secret, agent token, golden decision and readiness; one session
network (a NetworkAttachmentDefinition) per session; N seats all or nothing
under a burst; a machine failing fails the whole session and deletes all;
grading and console tickets per machine; the reaper reclaims whole
multi-machine sessions; --check validates machine names and capacity."""
import asyncio
import base64
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import urllib.request

import websockets

from labconsole import Console, PrivateBridge
from labtest import PREFIX, Api, Db, Kube, env, lighttpd_fcgi_pids, reset_world, users, wait_until, reaper_argv
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
ENV = env("LABVM_ENVIRONMENT")
CAPACITY = 8
NADS = "network-attachment-definitions"
MACHINES = ["cp", "worker1", "worker2"]


def parallel(calls):
    out = [None] * len(calls)
    gate = threading.Barrier(len(calls))

    def run(i, fn):
        gate.wait()
        out[i] = fn()
    ths = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(calls)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    return out


def objs(kind, sid):
    return kube.list(kind, f"{PREFIX}/session-id={sid}")


def nothing_left(sid):
    return not any(objs(k, sid) for k in ("virtualmachines", "secrets", NADS))


lab = {}


@t.test(name="a 3-machine session: 201 with every machine, then ready when all are")
def three_ready():
    api = Api("student301")
    r = api.start("test-multi")
    t.eq(r.status, 201, "started", r.json)
    s = r.json
    t.eq([v["machine"] for v in s["vms"]], MACHINES, "the machines in the lesson's order")
    t.ok(all(v["stage"] in ("submitted", "scheduling", "booting") for v in s["vms"]),
         "each machine has its own stage", [v["stage"] for v in s["vms"]])
    s = api.wait_state(s["id"], "ready", 60)
    t.eq(s["state"], "ready", "the session is ready", s.get("error"))
    t.ok(all(v["stage"] == "ready" and v["running_at"] and v["ready_at"] for v in s["vms"]),
         "every machine ready, with its own times", s["vms"])
    t.ok(s["ready_at"] >= max(v["ready_at"] for v in s["vms"]),
         "the session is ready when its last machine is")
    t.ok(s["running_at"] >= max(v["running_at"] for v in s["vms"]),
         "running when every machine runs")
    lab.update(api=api, s=s)


@t.test(name="per machine: its VM, Secret (user and network data), token, label; one NAD first")
def per_machine():
    s = lab["s"]
    vms = objs("virtualmachines", s["id"])
    secrets = objs("secrets", s["id"])
    nads = objs(NADS, s["id"])
    t.eq(sorted(v["metadata"]["labels"][f"{PREFIX}/machine"] for v in vms), MACHINES,
         "one VM per machine, with the machine label")
    t.eq(sorted(x["metadata"]["labels"].get(f"{PREFIX}/machine") for x in secrets), MACHINES,
         "one Secret per machine")
    t.eq(len(nads), 1, "one NetworkAttachmentDefinition for the session")
    nad = nads[0]
    conf = json.loads(nad["spec"]["config"])
    t.eq(conf["type"], "bridge", "a bridge CNI config")
    other = [n for n in kube.list(NADS, f"{PREFIX}/lab-session=true")
             if json.loads(n["spec"]["config"])["bridge"] == conf["bridge"]]
    t.eq(len(other), 1, "its bridge is the session's own")
    t.ok(nad["metadata"]["creationTimestamp"] <= min(v["metadata"]["creationTimestamp"]
                                                      for v in vms), "created before the VMs")
    tokens = set()
    for sec in secrets:
        ud = base64.b64decode(sec["data"]["userdata"]).decode()
        nd = json.loads(base64.b64decode(sec["data"]["networkdata"]))
        m = sec["metadata"]["labels"][f"{PREFIX}/machine"]
        tokens.add(re.search(r'"path":\s*"/etc/labvm/agent-token",\s*"content":\s*"([0-9a-f]+)"',
                             ud).group(1))
        addr = [a for e in nd["ethernets"].values() for a in e.get("addresses", [])]
        want = next(v["network"]["address"] for v in s["vms"] if v["machine"] == m)
        t.eq(addr, [want], f"{m}: network data holds its session address")
        t.ok(all(f" {n}\\n" in ud for n in MACHINES), f"{m}: /etc/hosts names every machine")
        t.eq(sec["metadata"]["ownerReferences"][0]["name"],
             next(v["metadata"]["name"] for v in vms
                  if v["metadata"]["labels"][f"{PREFIX}/machine"] == m), f"{m}: owned by its VM")
    t.eq(len(tokens), 3, "three different agent tokens")
    for v in vms:
        spec = v["spec"]["template"]["spec"]
        t.eq([n.get("multus", {}).get("networkName") for n in spec["networks"]],
             [None, nad["metadata"]["name"]], f"{v['metadata']['name']}: second network is the NAD")
        # session_network = same-node: the bridge is node-local, the machines share a node
        t.eq(spec.get("affinity"), {"podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {f"{PREFIX}/session-id": s["id"]}},
                "topologyKey": "kubernetes.io/hostname"}]}},
             f"{v['metadata']['name']}: a required pod affinity on the session id")
    nodes = {(kube.get("virtualmachineinstances", v["metadata"]["name"]).json.get("status")
              or {}).get("nodeName") for v in vms}
    t.eq(len(nodes), 1, "the three VMIs run on one node", nodes)
    cp = next(v for v in s["vms"] if v["machine"] == "cp")
    out = kube.guest_exec(cp["name"], "hostname; cat /etc/hosts")
    t.ok(out["stdout"].startswith("cp\n") and all(
        re.search(rf"^{re.escape(v['network']['address'].split('/')[0])} {v['machine']}$",
                  out["stdout"], re.M) for v in s["vms"]),
         "in cp: hostname cp, every machine by name in /etc/hosts", out)


@t.test(name="grading per machine: steps name their machine, the grade lists each machine")
def grading():
    api, s = lab["api"], lab["s"]
    g = api.grade(s["id"])
    t.eq(g.status, 200, "graded", g.json)
    t.eq([(x["machine"], x["passed"]) for x in g.json["steps"]],
         [("cp", True), ("cp", True), ("worker2", False), ("cp", True), ("worker1", True)],
         "each step ran on its machine")
    t.eq(g.json["machines"], [{"machine": "cp", "passed": 3, "total": 3},
                              {"machine": "worker1", "passed": 1, "total": 1},
                              {"machine": "worker2", "passed": 0, "total": 1}], "per machine")
    w2 = next(v for v in s["vms"] if v["machine"] == "worker2")
    kube.guest_exec(w2["name"], "echo 42 > /root/answer")
    g = api.grade(s["id"])
    t.eq(g.json["machines"][2], {"machine": "worker2", "passed": 1, "total": 1},
         "the fix on worker2 shows on worker2")
    t.eq(g.json["passed"], 5, "all pass")


async def console_hostname(url):
    pw = env("LABVM_PASSWORD", "labvm")
    auth = "Basic " + base64.b64encode(f"student301:{pw}".encode()).decode()
    ws = await websockets.connect(env("LABVM_URL").replace("http://", "ws://") + url,
                                  subprotocols=["labvm-console.v1"],
                                  extra_headers={"Authorization": auth}, open_timeout=10,
                                  ping_interval=None, close_timeout=2)
    out = b""
    await ws.send(b"\rprintf 'me=%s\\n' \"$(hostname)\"\r")
    try:
        while b"me=" not in out or not re.search(rb"me=([a-z0-9-]+)\r?\n", out):
            m = await asyncio.wait_for(ws.recv(), 10)
            if isinstance(m, bytes):
                out += m
    finally:
        await ws.close()
    return re.search(rb"me=([a-z0-9-]+)\r?\n", out).group(1).decode()


@t.test(name="console tickets name the machine (default: the first); each its own console")
def tickets():
    api, s = lab["api"], lab["s"]
    loop = asyncio.new_event_loop()
    d = api.ticket(s["id"])
    t.eq((d.status, d.json.get("machine")), (200, "cp"), "default: the first machine")
    for m in ("worker1", "cp", "worker2"):
        d = api.ticket(s["id"], m)
        t.eq((d.status, d.json.get("machine")), (200, m), f"a ticket for {m}")
        t.eq(loop.run_until_complete(console_hostname(d.json["url"])), m,
             f"the console with {m}'s ticket is {m}'s serial console")
    d = api.ticket(s["id"], "worker9")
    t.eq((d.status, d.json.get("error")), (404, "not_found"), "an unknown machine: 404")
    d = api.request("POST", f"/api/sessions/{s['id']}/console-ticket", {"machine": 3})
    t.eq(d.status, 400, "a machine that is not a name: 400")
    loop.close()


def bridge_stats(base=None):
    base = base or env("LABVM_CONSOLE_URL").replace("ws://", "http://").rstrip("/")
    with urllib.request.urlopen(base + "/console-stats", timeout=10) as r:
        return json.loads(r.read())


async def open_machines(base, api, sid, machines, user="student301"):
    """A console per machine, each waited open: {machine: Console}."""
    out = {}
    for m in machines:
        c = await Console.open(base, api.ticket(sid, m).json["url"], user)
        t.ok(await c.opened(30), f"{m}'s console opens", (c.code, c.reason))
        out[m] = c
    return out


async def say_hostname(c, tag):
    await c.send(f"printf '{tag}=%s\\n' \"$(hostname)\"\r".encode())
    ok = await c.until(lambda x: re.search(rf"{tag}=([a-z0-9-]+)\r?\n".encode(), bytes(x.out)), 30)
    m = re.search(rf"{tag}=([a-z0-9-]+)\r?\n".encode(), bytes(c.out)) if ok else None
    return m.group(1).decode() if m else None


@t.test(name="every machine's console open at once (cp's is not closed by worker1's), each "
             "answering its own hostname; tabs and replay per machine; the bridge counts "
             "(session, machine) consoles")
def consoles_at_once():
    api, s = lab["api"], lab["s"]
    front = env("LABVM_URL")
    loop = asyncio.new_event_loop()

    async def go():
        cs = await open_machines(front, api, s["id"], MACHINES)
        for m in MACHINES:      # after the last one opened, every one still answers
            t.eq(await say_hostname(cs[m], "at-once"), m, f"{m}'s console answers as {m}")
        t.eq({m: (c.code, c.reason) for m, c in cs.items()}, {m: (None, None) for m in MACHINES},
             "all three still open", [c.ctl for c in cs.values()])
        st = bridge_stats()
        mine = sorted((x["vm"], x["browsers"], x["upstream"]) for x in st["session_list"]
                      if x["id"] == s["id"] and not x["closing"])
        t.eq(mine, sorted((v["name"], 1, "open") for v in s["vms"]),
             "the bridge: one console per machine of the session, each with its upstream", st)
        t.ok(st["consoles"] >= 3 and st["sessions"] <= st["consoles"],
             "consoles counted per (session, machine), sessions once", st)
        # a second tab of worker1 shares worker1's console, not cp's
        w1b = await Console.open(front, api.ticket(s["id"], "worker1").json["url"], "student301")
        t.ok(await w1b.opened(30), "a second tab of worker1 opens")
        t.ok(await w1b.until(lambda x: b"at-once=worker1" in x.out, 30)
             and b"at-once=cp" not in w1b.out and b"at-once=worker2" not in w1b.out,
             "it replays worker1's output only", bytes(w1b.out[-300:]))
        await cs["worker1"].send(b"echo shared''-w1\r")
        t.ok(await w1b.until(lambda x: b"shared-w1\r\n" in x.out, 30),
             "what the first tab types shows in the second")
        t.ok(b"shared-w1" not in cs["cp"].out and b"shared-w1" not in cs["worker2"].out,
             "and not on the other machines")
        await w1b.close()
        # a reconnect of cp gets cp's own replay back
        await cs["cp"].close()
        cp2 = await Console.open(front, api.ticket(s["id"], "cp").json["url"], "student301")
        t.ok(await cp2.opened(30), "cp reconnects")
        t.ok(await cp2.until(lambda x: b"at-once=cp" in x.out, 30)
             and b"at-once=worker" not in cp2.out, "cp's replay is cp's", bytes(cp2.out[-300:]))
        t.eq((cs["worker1"].code, cs["worker2"].code), (None, None),
             "the other machines' consoles stayed open meanwhile")
        for c in [cp2, cs["worker1"], cs["worker2"]]:
            await c.close()
    loop.run_until_complete(go())
    loop.close()


@t.test(name="console_max_per_session counts per machine: one tab on each machine at once, a "
             "second tab on one of them 4429, the others untouched")
def max_per_machine():
    api, s = lab["api"], lab["s"]
    br = PrivateBridge("t170-max", console_max_per_session=1)
    loop = asyncio.new_event_loop()

    async def go():
        cs = await open_machines(br.base, api, s["id"], MACHINES)
        extra = await Console.open(br.base, api.ticket(s["id"], "worker2").json["url"], "student301")
        await extra.closed(60)
        t.eq(extra.code, 4429, "a second tab on worker2 is refused", (extra.code, extra.reason))
        for m in MACHINES:
            t.eq(await say_hostname(cs[m], "max1"), m, f"{m}'s one tab still works")
        for c in cs.values():
            await c.close()
    try:
        loop.run_until_complete(go())
    finally:
        loop.close()
        br.close()


@t.test(name="ending the session deletes every VM, every Secret, then the NAD")
def end_all():
    api, s = lab["api"], lab["s"]
    loop = asyncio.new_event_loop()
    cs = loop.run_until_complete(open_machines(env("LABVM_URL"), api, s["id"], MACHINES))
    t.eq(api.end(s["id"]).status, 200, "ended")

    async def closed():
        return {m: await c.closed(60) for m, c in cs.items()}
    got = loop.run_until_complete(closed())
    loop.close()
    t.eq(got, {m: (4410, "session ended") for m in MACHINES},
         "every machine's console closes with 4410 at the end")
    wait_until(lambda: nothing_left(s["id"]), 20, what="everything of the session gone")
    t.ok(True, "no VM, Secret or NAD left")


@t.test(name="6 of 8 seats taken: a 3-machine start is refused whole, saying it needs 3")
def refused_whole():
    reset_world(kube, db)
    apis = [Api(u) for u in users(310, 6)]
    rs = [a.start("test-short") for a in apis]
    t.eq([r.status for r in rs], [201] * 6, "6 single-machine sessions")
    multi = Api("student320")
    r = multi.start("test-multi")
    t.eq((r.status, r.json.get("error")), (503, "capacity_full"), "refused", r.json)
    t.eq((r.json.get("seats"), r.json.get("in_use"), r.json.get("capacity")), (3, 6, CAPACITY),
         "the answer says it needs 3 seats, 6 of 8 in use")
    t.ok(r.header("Retry-After"), "Retry-After")
    t.eq(len(kube.lab_vms()), 6, "no machine of it was created")
    t.eq(kube.list(NADS, f"{PREFIX}/lab-session=true"), [], "no session network either")
    t.eq(db.one("SELECT count(*) FROM sessions WHERE user_name = 'student320' "
                "AND state IN ('starting', 'ready')"), (0,), "no session row")
    apis[0].end(rs[0].json["id"])
    wait_until(lambda: len(kube.lab_vms()) == 5, 20, what="one seat freed")
    r = multi.start("test-multi")
    t.eq(r.status, 201, "with 5 of 8 in use it is admitted", r.json)
    t.eq(len(kube.lab_vms()), CAPACITY, "8 of 8")
    multi.end(r.json["id"])
    for a, x in zip(apis[1:], rs[1:]):
        a.end(x.json["id"])


@t.test(name="machines that fit a node each but never one node together: 409 never_fits, named")
def never_one_node():
    api = Api("student321")
    since = db.one("SELECT clock_timestamp()")[0]  # the user has sessions of other suites
    r = api.start("test-multi-never-fits")
    t.eq((r.status, r.json.get("error")), (409, "never_fits"), "refused at the press", r.json)
    t.ok(re.search(r"its 3 machines share one node and together need 3\d\.\d GiB of memory and "
                   r"3 VM slots; the largest node, node-\d, has 32\.0 GiB allocatable",
                   r.json.get("message", "")), "names the need and the largest node", r.json)
    t.eq(kube.list(NADS, f"{PREFIX}/lab-session=true"), [], "no session network created")
    t.eq(db.one("SELECT count(*) FROM sessions WHERE user_name = 'student321' AND created_at >= %s",
                since), (0,), "no session row")
    r = api.request("POST", "/api/sessions", {"lesson": "test-multi-never-fits", "queue": True})
    t.eq((r.status, r.json.get("error")), (409, "never_fits"), "asked to wait: no place in line",
         r.json)
    t.eq(db.one("SELECT count(*) FROM session_queue WHERE user_name = 'student321'"), (0,),
         "nothing in the line")


@t.test(name="a burst of mixed 1- and 3-machine starts never exceeds capacity")
def burst():
    reset_world(kube, db)
    us = users(330, 12)
    lessons = ["test-multi" if i % 2 == 0 else "test-short" for i in range(12)]
    apis = [Api(u) for u in us]
    seen = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            seen.append(len(kube.lab_vms()))
    th = threading.Thread(target=watch)
    th.start()
    rs = parallel([lambda a=a, le=le: a.start(le) for a, le in zip(apis, lessons)])
    stop.set()
    th.join()
    seats = {"test-multi": 3, "test-short": 1}
    admitted = [(le, r) for le, r in zip(lessons, rs) if r.status == 201]
    refused = [(le, r) for le, r in zip(lessons, rs) if r.status == 503]
    t.eq(len(admitted) + len(refused), 12, "every start admitted or refused (503)",
         [r.status for r in rs])
    used = sum(seats[le] for le, _ in admitted)
    t.ok(used <= CAPACITY, "the admitted sessions fit", used)
    t.ok(used > CAPACITY - 3, "and fill the cluster as far as a refused start needed", used)
    t.ok(max(seen + [len(kube.lab_vms())]) <= CAPACITY, "never more than 8 VMs in the cluster",
         max(seen))
    t.eq(len(kube.lab_vms()), used, "VMs in the cluster = seats of the admitted sessions")
    t.ok(all(r.json.get("error") == "capacity_full" and r.json.get("seats") == seats[le]
             for le, r in refused), "each refusal is capacity_full with its seats")
    for le, r in admitted:
        t.eq(len(objs("virtualmachines", r.json["id"])), seats[le],
             f"{le}: all its machines, never part")
    t.eq(len(kube.list(NADS, f"{PREFIX}/lab-session=true")),
         sum(1 for le, _ in admitted if le == "test-multi"), "one NAD per admitted 3-machine start")
    for a, (le, r) in zip(apis, zip(lessons, rs)):
        if r.status == 201:
            a.end(r.json["id"])


@t.test(name="a machine missing its deadline fails the whole session, naming it; all deleted")
def one_fails_all():
    reset_world(kube, db)
    api = Api("student350")
    r = api.start("test-multi-stuck")
    t.eq(r.status, 201, "started")
    s = api.wait_state(r.json["id"], "failed", 30)
    t.ok(s["error"].startswith("machine worker2: scheduling: the VM was not running within 3 s"),
         "the error names the machine and the stage", s["error"])
    t.eq({v["machine"]: v["stage"] for v in s["vms"]}["worker2"], "scheduling",
         "worker2's own stage")
    wait_until(lambda: nothing_left(s["id"]), 20, what="every VM, Secret and the NAD deleted")
    t.ok(True, "every machine and the session network deleted")


@t.test(name="a machine that cannot be created: 503, everything created for the session deleted")
def create_fails():
    reset_world(kube, db)
    # the third machine's VM fails: the NAD, two VMs and three Secrets exist by then
    api = Api("student351")
    kube.fault(verb="create", resource="virtualmachines", delay_ms=1, times=2)
    kube.fault(verb="create", resource="virtualmachines", code=500, times=1)
    r = api.start("test-multi")
    kube.clear_faults()
    t.eq((r.status, r.json.get("error")), (503, "cluster_unavailable"), "503", r.json)
    wait_until(lambda: not kube.lab_vms() and not kube.list("secrets", f"{PREFIX}/lab-session=true")
               and not kube.list(NADS, f"{PREFIX}/lab-session=true"), 20,
               what="nothing left in the cluster")
    t.eq(db.one("SELECT count(*) FROM sessions WHERE user_name = 'student351' "
                "AND state IN ('starting', 'ready')"), (0,), "no session row")



def reap(*args, conf=None):
    e = dict(os.environ, LABVM_CONF=conf or env("LABVM_CONF"))
    r = subprocess.run(reaper_argv(*args), env=e,
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


@t.test(name="the API killed mid-creation: the reaper reclaims every machine and the NAD")
def killed_mid_creation():
    reset_world(kube, db)
    # a foreign environment's NAD must survive
    foreign = {"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
               "metadata": {"name": "foreign-net", "labels": {
                   f"{PREFIX}/lab-session": "true", f"{PREFIX}/environment": "elsewhere",
                   f"{PREFIX}/session-id": "x"}},
               "spec": {"config": "{\"cniVersion\":\"0.3.1\",\"type\":\"bridge\"}"}}
    t.eq(kube.create(NADS, foreign).status, 201, "another environment's NAD")
    api = Api("student352", timeout=20)
    kube.fault(verb="create", resource="virtualmachines", delay_ms=3000, times=1)
    before = set(lighttpd_fcgi_pids())
    t.require(before, "found lighttpd's labvm.fcgi processes")
    res = {}
    th = threading.Thread(target=lambda: res.setdefault("r", api.start("test-multi")))
    th.start()
    wait_until(lambda: kube.list("secrets", f"{PREFIX}/lab-session=true,{PREFIX}/environment={ENV}"),
               10, 0.05, "the first machine's Secret created")
    for pid in lighttpd_fcgi_pids():
        os.kill(pid, signal.SIGKILL)
    th.join(30)
    kube.clear_faults()
    r = res.get("r")
    t.ok(r is not None and r.status >= 500, "the student got an error", r)
    t.eq(db.one("SELECT count(*) FROM sessions WHERE user_name = 'student352' "
                "AND state IN ('starting', 'ready')"), (0,), "no session row (rolled back)")
    wait_until(kube.lab_vms, 10, 0.1, "the VM whose create was already sent")
    sel = f"{PREFIX}/lab-session=true,{PREFIX}/environment={ENV}"
    t.eq(len(kube.list(NADS, sel)), 1, "the session network was left behind")
    code, out = reap("--grace", "0")
    t.eq(code, 0, "reaper ran", out)
    t.ok(re.search(r"\borphan_networks=1\b", out), "it counts the orphan NAD", out)
    wait_until(lambda: not kube.list("virtualmachines", sel) and not kube.list("secrets", sel)
               and not kube.list(NADS, sel), 15, what="every leftover reclaimed")
    t.eq([n["metadata"]["name"] for n in kube.list(NADS, f"{PREFIX}/lab-session=true")],
         ["foreign-net"], "another environment's NAD untouched")
    kube.delete(NADS, "foreign-net")
    wait_until(lambda: set(lighttpd_fcgi_pids()) - before, 15, what="lighttpd restarted labvm.fcgi")


@t.test(name="the reaper reclaims an expired multi-machine session whole")
def reaper_expired():
    reset_world(kube, db)
    api = Api("student353")
    r = api.start("test-multi")
    t.eq(r.status, 201, "started")
    sid = r.json["id"]
    # minutes count from ready: a ready session expires (a starting one has its deadlines)
    api.wait_state(sid, "ready", 90)
    db.query("UPDATE sessions SET expires_at = now() - interval '1 second' WHERE id = %s", sid)
    code, out = reap()
    t.eq(code, 0, "reaper ran", out)
    wait_until(lambda: nothing_left(sid), 20, what="every VM, Secret and the NAD deleted")
    t.eq(db.one("SELECT state, end_reason FROM sessions WHERE id = %s", sid), ("ended", "expired"),
         "ended, expired")


@t.test(name="--check: machine names are DNS-1123 labels, unique; machines > vm_capacity refused")
def check():
    d = tempfile.mkdtemp()
    fcgi = os.path.join(env("LABVM_BIN"), "labvm.fcgi")
    conf_text = open(env("LABVM_CONF")).read()
    conf = os.path.join(d, "labvm.conf")
    base = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                       "lessons", "test-multi.json")))

    def run(machines, capacity=8, **extra):
        les = os.path.join(d, "lessons")
        shutil.rmtree(les, ignore_errors=True)
        os.makedirs(les)
        lesson = dict(base)
        lesson.pop("grader")
        lesson.pop("guide", None)   # its guide files are not in this folder
        lesson.pop("i18n", None)
        lesson.update(machines=machines, **extra)
        json.dump(lesson, open(os.path.join(les, "x.json"), "w"))
        text = re.sub(r"(?m)^lessons_dir = .*$", f"lessons_dir = {les}", conf_text)
        text = re.sub(r"(?m)^vm_capacity = .*$", f"vm_capacity = {capacity}", text)
        open(conf, "w").write(text)
        p = subprocess.run([fcgi, "--check"], env=dict(os.environ, LABVM_CONF=conf),
                           capture_output=True, text=True, timeout=30)
        return p.returncode, p.stdout + p.stderr

    rc, out = run([{"name": "cp"}, {"name": "worker1"}])
    t.eq(rc, 0, "two good machines pass", out)
    for bad, why in (([{"name": "CP"}], "DNS-1123 label"),
                     ([{"name": "cp_1"}], "DNS-1123 label"),
                     ([{"name": "-cp"}], "DNS-1123 label"),
                     ([{"name": "a" * 21}], "DNS-1123 label"),
                     ([{"name": "cp"}, {"name": "cp"}], "used twice"),
                     ([{"name": "cp", "colour": "red"}], "unknown key"),
                     ([{"name": "cp", "memory": "lots"}], "memory"),
                     ([], "non-empty array")):
        rc, out = run(bad)
        t.ok(rc != 0 and why in out, f"refused: {why}", out.strip()[-200:])
    rc, out = run([{"name": f"m{i}"} for i in range(3)], capacity=2)
    t.ok(rc != 0 and "3 machines but vm_capacity is 2" in out, "3 machines, capacity 2: refused",
         out)
    rc, out = run([{"name": "cp"}], grader=[{"name": "x", "command": "true",
                                             "machine": "nope"}])
    t.ok(rc != 0 and "no machine \"nope\"" in out, "a grader step naming no machine: refused", out)
    shutil.rmtree(d)


t.done()
