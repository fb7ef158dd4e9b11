#!/usr/bin/python3
# timeout: 1200
"""labvm on real QEMU guests, through its own API (issue 9).

Starts its own stack with the simulator's `--guest qemu` (tests/lib/qemustack.py;
state in .check-qemu next to $LABVM_STATE, ports from 18600, guests on
127.77.0.0/16, environment check-qemu), so it runs next to the shared
process-guest stack, and stops it at the end whatever happens.

Two students start the golden lesson at about the same time: two QEMU guests
(TCG here), each a qcow2 overlay on the read-only base image, with the
user-data of labvm's Secret as a NoCloud seed. Checks: both sessions reach
`ready` through the real cloud-init and labvm's agent (disk source golden,
stages in order, submitted_at < running_at <= ready_at); a third start does
not fit the node (Unschedulable: Insufficient devices.kubevirt.io/kvm);
labvm-console gives a root shell without a password; grading runs in the
guest (the hello step fails, then passes after writing /root/hello.txt through
the console); writes stay in their own VM, and the base image is unchanged;
a guest that powers itself off ends its QEMU (VMI Succeeded, overlay gone) and
KubeVirt's runStrategy Always boots a new one; ending a session stops QEMU and
removes its overlay.
"""
import json
import os
import subprocess
import sys
import threading
import time

SRC = os.environ.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRC, "tests", "lib"))
import qemustack  # noqa: E402
from qemustack import (IMG, READY_TIMEOUT, S, Console, api_for, guests,  # noqa: E402
                       qemu_alive, run, secs, sha256, ticket, wait_until)
from tap import T  # noqa: E402

t = T()
LESSON = "debian-golden"
USERS = ["student1", "student2"]
THIRD = "student3"
ORDER = ["submitted", "scheduling", "booting", "setting_up", "ready"]

skip = qemustack.skip_reason()


# -------------------------------------------------------------------- tests
@t.test(skip=skip)
def stack_with_qemu_guests_starts():
    # ports from LABVM_QEMU_PORT_BASE, guests on 127.77.0.0/16; builds the guest
    # image first when it is missing or stale
    # two guest slots, so that a third start finds the node full (the
    # default under TCG is two per host CPU)
    qemustack.up(t, "-qemu", "lv-qemu-t910-", 0, "check-qemu", "127.77.0.0/16",
                 kube_args=["--max-guests", "2"])
    # the image: raw ext4 base, read-only; a second build is a no-op
    build = os.path.join(SRC, "tests", "kubesim", "guest-image", "build")
    base = os.path.realpath(os.path.join(IMG, "base.img"))
    mtime = os.stat(base).st_mtime_ns
    r = subprocess.run([build, "--check"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    t.eq(r.returncode, 0, "the guest image is current", r.stdout)
    t.eq(os.stat(base).st_mtime_ns, mtime, "checking it builds nothing")
    t.eq(oct(os.stat(base).st_mode & 0o777), "0o444", "base.img is read-only")
    S["base"] = base
    S["base_sum"] = sha256(base)
    node = S["kube"].request("GET", "/api/v1/nodes").json["items"]
    t.eq(len(node), 1, "one node: this machine")
    alloc = node[0]["status"]["allocatable"]
    t.diag(f"node allocatable: {json.dumps(alloc)}")
    S["slots"] = int(alloc["devices.kubevirt.io/kvm"])


def need_stack():
    t.require("kube" in S, "no stack")


@t.test(skip=skip)
def two_golden_sessions_become_ready_on_qemu():
    need_stack()
    sessions, seen, errors = {}, {}, []

    def one(user):
        try:
            api = api_for(user)
            api.end_current()
            r = api.start(LESSON)
            if r.status != 201:
                raise AssertionError(f"{user}: POST /api/sessions: {r}")
            s = r.json
            stages = [s["stage"]]
            deadline = time.monotonic() + READY_TIMEOUT
            while s["state"] == "starting" and time.monotonic() < deadline:
                time.sleep(0.5)
                s = api.get(s["id"]).json
                if s["stage"] != stages[-1]:
                    stages.append(s["stage"])
            sessions[user], seen[user] = s, stages
        except Exception as e:  # noqa: BLE001
            errors.append(f"{user}: {e}")
    ths = [threading.Thread(target=one, args=(u,)) for u in USERS]
    for th in ths:
        th.start()
        time.sleep(0.2)
    for th in ths:
        th.join()
    t.require(not errors, "; ".join(errors))
    for u in USERS:
        s = sessions[u]
        t.eq(s["state"], "ready", f"{u}: ready", s.get("error"))
        t.eq(s["disk"], {"source": "golden", "fallback_reason": None}, f"{u}: golden disk")
        st = seen[u]
        t.ok(all(x in ORDER for x in st) and st == sorted(st, key=ORDER.index),
             f"{u}: stages only move forward", st)
        if s["state"] == "ready":
            t.ok(s["submitted_at"] < s["running_at"] <= s["ready_at"],
                 f"{u}: submitted_at < running_at <= ready_at", s)
    t.require(all(sessions[u]["state"] == "ready" for u in USERS), "not all ready")
    S["sessions"] = {u: sessions[u] for u in USERS}
    S["vms"] = {u: sessions[u]["vms"][0]["name"] for u in USERS}
    g = guests()
    for u in USERS:
        info = g.get(S["vms"][u]) or {}
        t.eq((info.get("kind"), info.get("state")), ("qemu", "running"), f"{u}: a QEMU guest")
        t.ok(info.get("pid") and qemu_alive(info["pid"]), f"{u}: its QEMU process runs", info)
        t.ok(info.get("overlay") and os.path.exists(info["overlay"]), f"{u}: its overlay", info)
        vmi = S["kube"].get("virtualmachineinstances", S["vms"][u]).json
        conds = {c["type"]: c["status"] for c in vmi["status"].get("conditions", [])}
        t.eq(conds.get("AgentConnected"), "True", f"{u}: the QEMU guest agent connected")
        t.eq(vmi["status"].get("guestOSInfo", {}).get("id"), "debian", f"{u}: guest OS info")
        t.diag(f"{u}: created -> running {secs(sessions[u], 'created_at', 'running_at'):.1f} s, "
               f"-> ready {secs(sessions[u], 'created_at', 'ready_at'):.1f} s; QEMU "
               f"{info.get('accel')}, {info.get('cpus')} vCPU, {info.get('memory_mib')} MiB, "
               f"RSS {(info.get('rss_bytes') or 0) >> 20} MiB")
    S["guests"] = {u: g[S["vms"][u]] for u in USERS}
    # the overlay is a qcow2 on the read-only raw base (KubeVirt's ephemeral volume)
    for u in USERS:
        r = subprocess.run(["qemu-img", "info", "-U", "--output=json", S["guests"][u]["overlay"]],
                           stdout=subprocess.PIPE, text=True)
        info = json.loads(r.stdout or "{}")
        t.eq((info.get("format"), os.path.realpath(info.get("backing-filename") or ""),
              info.get("backing-filename-format")), ("qcow2", S["base"], "raw"),
             f"{u}: overlay format and backing file")



def need_sessions():
    t.require("sessions" in S, "the sessions did not get ready")


@t.test(skip=skip)
def a_third_guest_does_not_fit_the_node():
    need_sessions()
    api = api_for(THIRD)
    api.end_current()
    r = api.start(LESSON)
    t.require(r.status == 201, f"start: {r}")
    s = r.json
    vm = s["vms"][0]["name"]
    try:
        def unschedulable():
            v = S["kube"].get("virtualmachines", vm)
            return v.status == 200 and (v.json.get("status") or {}).get(
                "printableStatus") == "ErrorUnschedulable"
        t.ok(wait_until(unschedulable, 30), "VM ErrorUnschedulable (node full)",
             S["kube"].get("virtualmachines", vm).json.get("status"))
        pods = S["kube"].list("pods", f"vm.kubevirt.io/name={vm}")
        cond = [c for p in pods for c in p["status"].get("conditions", [])
                if c["type"] == "PodScheduled"]
        t.ok(cond and cond[0]["status"] == "False" and cond[0].get("reason") == "Unschedulable"
             and "Insufficient devices.kubevirt.io/kvm" in cond[0].get("message", ""),
             "launcher pod Pending: Insufficient devices.kubevirt.io/kvm", cond)
        cur = api.get(s["id"]).json
        t.eq((cur["state"], cur["stage"]), ("starting", "scheduling"), "the session waits")
        t.ok(vm not in guests(), "no QEMU for it")
    finally:
        api.end(s["id"])


@t.test(skip=skip)
def console_gives_a_root_shell_without_a_password():
    need_sessions()
    u = USERS[0]
    sid = S["sessions"][u]["id"]

    async def go():
        c = await Console.open(u, ticket(u, sid))
        c2 = None
        try:
            t.require(await c.prompt(60), f"root prompt: {bytes(c.out[-300:])!r}")
            t.ok(b"assword" not in c.out and b"login:" not in c.out,
                 "no login or password asked", bytes(c.out[-300:]))
            out = await c.run("id -u; id -un; hostname")
            t.eq((out or "").split(), ["0", "root", S["vms"][u]], "root, in its own VM")
            out = await c.run("systemctl is-active serial-getty@ttyS0.service; "
                              "cat /proc/$$/loginuid; echo; tty")
            t.eq((out or "").split(), ["active", "0", "/dev/ttyS0"],
                 "a login shell (agetty, login) on ttyS0", out)
            # a second tab shares the console (labvm-console keeps one upstream)
            c2 = await Console.open(u, ticket(u, sid))
            out = await c2.run("echo tab''2")
            t.eq(out, "tab2", "second tab runs a command")
            t.ok(await c.until(lambda x: b"tab2\r\n" in x.out, 10), "the first tab sees it")
        finally:
            for x in (c2, c):
                if x is not None:
                    await x.close()
    run(go())


@t.test(skip=skip)
def simulator_console_is_raw_serial_and_kicks():
    """The console subresource itself (what labvm-console talks to): raw bytes of
    ttyS0 in binary frames, plain.kubevirt.io; a new client kicks the old one."""
    need_sessions()
    import ssl
    import websockets
    vm = S["vms"][USERS[1]]
    url = (S["env"]["LABVM_KUBE_URL"].replace("https://", "wss://") +
           f"/apis/subresources.kubevirt.io/v1/namespaces/labs/virtualmachineinstances/{vm}/console")
    ctx = ssl.create_default_context(cafile=S["env"]["LABVM_KUBE_CA"])
    tok = open(S["env"]["LABVM_KUBE_ADMIN_TOKEN_FILE"]).read().strip()

    async def go():
        conns = []
        try:
            for _ in range(2):
                ws = await websockets.connect(url, ssl=ctx, subprotocols=["plain.kubevirt.io"],
                                              extra_headers={"Authorization": f"Bearer {tok}"},
                                              open_timeout=15, ping_interval=None)
                conns.append(Console(ws))
                if len(conns) == 1:
                    t.eq(ws.subprotocol, "plain.kubevirt.io", "subprotocol")
                    t.ok(await conns[0].prompt(60), "root prompt on ttyS0",
                         bytes(conns[0].out[-300:]))
            t.ok(await conns[0].until(lambda x: x.code is not None, 15),
                 "the first client is kicked by the second")
            t.ok(await conns[1].prompt(30), "the second has the console")
        finally:
            for c in conns:
                await c.close()
    run(go())


@t.test(skip=skip)
def grading_runs_in_the_guest():
    need_sessions()
    u = USERS[0]
    api = api_for(u)
    sid = S["sessions"][u]["id"]
    g = api.grade(sid)
    t.require(g.status == 200, f"grade: {g}")
    steps = {x["name"]: x["passed"] for x in g.json["steps"]}
    t.eq(steps, {"README present": True, "hello.txt says hello": False}, "before the work")

    async def go():
        c = await Console.open(u, ticket(u, sid))
        try:
            t.require(await c.prompt(60), "prompt")
            out = await c.run("echo hello > /root/hello.txt; sync; cat /root/hello.txt")
            t.eq(out, "hello", "hello.txt written through the console")
        finally:
            await c.close()
    run(go())
    g = api.grade(sid).json
    steps = {x["name"]: x["passed"] for x in g["steps"]}
    t.eq(steps, {"README present": True, "hello.txt says hello": True}, "after the work")
    t.eq((g["passed"], g["total"]), (2, 2), "all pass")
    other = api_for(USERS[1]).grade(S["sessions"][USERS[1]]["id"]).json
    t.eq({x["name"]: x["passed"] for x in other["steps"]}.get("hello.txt says hello"), False,
         "the other student's VM still fails that step")


@t.test(skip=skip)
def writes_stay_in_their_vm():
    need_sessions()
    k = S["kube"]
    a, b = (S["vms"][u] for u in USERS)
    r = k.guest_exec(b, "echo vm2 > /root/only-in-vm2 && sync", 60)
    t.eq(r["exit_code"], 0, "VM 2 wrote its file", r)
    r = k.guest_exec(b, "test -e /root/hello.txt", 60)
    t.eq(r["exit_code"], 1, "VM 2 does not see VM 1's /root/hello.txt", r)
    r = k.guest_exec(a, "test -e /root/only-in-vm2", 60)
    t.eq(r["exit_code"], 1, "VM 1 does not see VM 2's file", r)
    # the simulator's exec goes through the QEMU guest agent
    r = k.guest_exec(a, "echo out; echo err >&2; exit 3", 60)
    t.eq((r["exit_code"], r["stdout"], r["stderr"]), (3, "out\n", "err\n"),
         "exec: exit code, stdout, stderr")
    r = k.guest_exec(a, "sleep 5", 1)
    t.eq(r["exit_code"], 124, "exec past its timeout")
    t.eq(sha256(S["base"]), S["base_sum"], "the base image is unchanged")
    for u in USERS:
        t.ok(os.path.getsize(S["guests"][u]["overlay"]) > 1 << 20,
             f"{u}: the writes went to its overlay")


@t.test(skip=skip)
def a_guest_powering_off_ends_its_qemu():
    need_sessions()
    u = USERS[1]
    vm = S["vms"][u]
    k = S["kube"]
    old = S["guests"][u]
    old_uid = k.get("virtualmachineinstances", vm).json["metadata"]["uid"]
    k.guest_exec(vm, "systemctl --no-block poweroff", 30)
    t.ok(wait_until(lambda: not qemu_alive(old["pid"]), 90), "QEMU exits when the guest powers off")
    t.ok(wait_until(lambda: not os.path.exists(old["overlay"]), 20), "its overlay is removed")
    evs = k.request("GET", "/api/v1/namespaces/labs/events").json.get("items", [])
    reasons = [(e.get("reason"), e.get("message")) for e in evs
               if (e.get("involvedObject") or {}).get("uid") == old_uid]
    t.ok(("Stopped", "The VirtualMachineInstance was shut down.") in reasons,
         "VMI event: shut down (phase Succeeded)", reasons)

    def new_guest():
        g = guests().get(vm)
        return g if g and g["uid"] != old_uid and g.get("pid") and qemu_alive(g["pid"]) else None
    g = wait_until(new_guest, 60)
    t.ok(g, "runStrategy Always: a new VMI boots a new QEMU")
    S["rebooted"] = g


@t.test(skip=skip)
def ending_a_session_stops_qemu_and_removes_its_overlay():
    need_sessions()
    gone = {}
    infos = dict(S["guests"])
    if S.get("rebooted"):
        infos[USERS[1]] = S["rebooted"]     # ended while booting
    for u in USERS:
        r = api_for(u).end(S["sessions"][u]["id"])
        t.ok(r.status in (200, 204), f"{u}: DELETE", r)
    for u in USERS:
        info = infos[u]
        t0 = time.monotonic()
        seed = os.path.join(info["workdir"], "cloudinit.iso")
        # the simulator removes the overlay, then the seed: wait for the whole stop
        ok = wait_until(lambda: not qemu_alive(info["pid"]) and not os.path.exists(info["overlay"])
                        and not os.path.exists(seed), 60)
        gone[u] = time.monotonic() - t0
        t.ok(not qemu_alive(info["pid"]), f"{u}: QEMU stopped", info)
        t.ok(not os.path.exists(info["overlay"]), f"{u}: overlay removed", info)
        t.ok(ok and not os.path.exists(seed), f"{u}: NoCloud seed removed")
        t.ok(os.path.exists(os.path.join(info["workdir"], "qemu.log")), f"{u}: qemu.log kept")
    t.diag("stopped after " + ", ".join(f"{u} {s:.1f} s" for u, s in gone.items()))
    t.ok(wait_until(lambda: not guests(), 30), "the simulator has no guest left", guests())
    t.eq(sha256(S["base"]), S["base_sum"], "the base image is unchanged")


@t.test(skip=skip)
def the_stack_stops_and_no_qemu_is_left():
    pids = [g.get("pid") for g in S.get("guests", {}).values()]
    if S.get("rebooted"):
        pids.append(S["rebooted"].get("pid"))
    qemustack.stack_down()
    t.ok(not any(p and qemu_alive(p) for p in pids), "no QEMU left")


t.done()
