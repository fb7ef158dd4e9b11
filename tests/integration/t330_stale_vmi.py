#!/usr/bin/python3
"""State that goes stale (issue #13, #26): the agent's address is re-read
from the session's own VMI before the token goes anywhere. A guest that died
and was restarted (runStrategy Always: a new VMI, a new address) is graded
at its new address; an old address reused by another student's VMI never
receives this session's token: not from a grade, not from tty-size, not
from the status GET's readiness probe (the VMI read again on every look, not
trusted from the row until a call fails), not from the event stream's
driver once the VMI check has failed (a recorder in place of the other
student's agent keeps what reaches it)."""
import os
import signal
import time

from agentrec import records, replace_agent, token_hash
from guestproc import guest_init, listener_pid
from labtest import Api, Db, Kube, reset_world, vm_of, wait_until
from sse import Stream, events_path
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)


def row(sid):
    return db.one("SELECT ip, vmi_uid FROM session_vms WHERE session_id = %s", sid)


def ready_lab(user):
    api = Api(user)
    s = api.start("test-hold").json
    # generous limits: a loaded machine (CI) may take long; nothing here is timed
    seen = []

    def setting_up():
        j = api.get(s["id"]).json
        if not seen or seen[-1][:2] != (j.get("state"), j.get("stage")):
            seen.append((j.get("state"), j.get("stage"), j.get("error")))
        return j["stage"] == "setting_up"
    try:
        wait_until(setting_up, 180, 0.2, "setting_up")
    except TimeoutError:
        raise TimeoutError(f"{user}'s lab never reached setting_up: stages seen {seen}, "
                           f"VMIs {[(v['metadata']['name'], v.get('status', {}).get('phase'), v.get('status', {}).get('interfaces')) for v in kube.list('virtualmachineinstances')]}") from None
    kube.guest_exec(s["vms"][0]["name"], "touch /root/go")
    api.wait_state(s["id"], "ready", 120)
    return api, s


def vmi(s):
    return kube.get("virtualmachineinstances", s["vms"][0]["name"]).json


def crash_guest(s):
    """The guest dies (as if the student powered it off); KubeVirt makes a new
    VMI for the VM (runStrategy Always). Returns the new VMI once Running."""
    old = vmi(s)
    ip = old["status"]["interfaces"][0]["ipAddress"]
    pid = wait_until(lambda: listener_pid(ip), 20, 0.1, "the agent listening")
    os.kill(guest_init(pid), signal.SIGKILL)

    def new_running():
        v = kube.request("GET", f"/apis/kubevirt.io/v1/namespaces/labs/virtualmachineinstances/"
                         f"{s['vms'][0]['name']}")
        j = v.json if v.status == 200 else None
        if j and j["metadata"]["uid"] != old["metadata"]["uid"] and \
                j.get("status", {}).get("phase") == "Running" and \
                j["status"].get("interfaces", [{}])[0].get("ipAddress"):
            return j
        return None
    new = wait_until(new_running, 60, 0.2, "a new VMI Running")
    nip = new["status"]["interfaces"][0]["ipAddress"]
    wait_until(lambda: listener_pid(nip), 30, 0.1, "the new guest's agent listening")
    return old, new


@t.test(name="the guest restarted (new VMI, new address): grading reaches the new VMI and the "
             "row records its address and uid")
def restarted():
    api, s = ready_lab("student331")
    g = api.grade(s["id"])
    t.eq(g.status, 200, "graded before", g)
    old, new = crash_guest(s)
    nip = new["status"]["interfaces"][0]["ipAddress"]
    t.ok(nip != old["status"]["interfaces"][0]["ipAddress"], "the new VMI has a new address")
    g = api.grade(s["id"])
    t.eq(g.status, 200, "graded after the restart", g)
    t.eq(row(s["id"]), (nip, new["metadata"]["uid"]), "the row has the new address and uid")
    api.end(s["id"])


@t.test(name="an old address reused by another student's VMI: this session's token goes to "
             "its own new VMI, never to the other student's")
def reused():
    api, s = ready_lab("student332")
    old, new = crash_guest(s)
    old_ip = old["status"]["interfaces"][0]["ipAddress"]
    # the freed address goes to the next guest: another student's
    r = kube.request("POST", "/_sim/ipam", {"next": old_ip})
    t.eq(r.status, 200, "the simulator will reuse the address", r)
    other, so = ready_lab("student333")
    oip = vmi(so)["status"]["interfaces"][0]["ipAddress"]
    t.eq(oip, old_ip, "the other student's VMI has the old address")
    g = api.grade(s["id"])
    t.eq(g.status, 200, "student332 graded on its own VMI", g)
    t.eq(row(s["id"])[0], new["status"]["interfaces"][0]["ipAddress"],
         "the row has student332's new address, not the reused one")
    api.end(s["id"])
    other.end(so["id"])


def token(sid):
    return db.one("SELECT agent_token FROM session_vms WHERE session_id = %s", sid)[0]


def reuse_for_other(old_ip, user):
    """Another student's lab on old_ip, its agent replaced by a recorder."""
    r = kube.request("POST", "/_sim/ipam", {"next": old_ip})
    t.eq(r.status, 200, "the simulator will reuse the address", r)
    other, so = ready_lab(user)
    t.eq(vmi(so)["status"]["interfaces"][0]["ipAddress"], old_ip,
         "the other student's VMI has the old address")
    replace_agent(kube, vm_of(so), old_ip, "answer")
    # the recorder hears what comes to the old address: the other student's own
    r = other.request("POST", f"/api/sessions/{so['id']}/tty-size", {"cols": 90, "rows": 20})
    t.eq(r.status, 200, "the other student's tty-size reaches the recorder", r)
    t.ok(any(e.get("auth") == token_hash(token(so["id"])) for e in records(kube, vm_of(so))),
         "the recorder at the old address heard the other student's token")
    return other, so


@t.test(name="tty-size after the guest restarted and its old address went to another "
             "student's VMI: the size goes to the session's own new VMI, the token never to "
             "the old address")
def tty_size_reused():
    api, s = ready_lab("student334")
    old, new = crash_guest(s)
    old_ip = old["status"]["interfaces"][0]["ipAddress"]
    other, so = reuse_for_other(old_ip, "student335")
    r = api.request("POST", f"/api/sessions/{s['id']}/tty-size", {"cols": 100, "rows": 30})
    # its own agent answers: 409 while no console is open on its new guest
    t.ok(r.status in (200, 409), "answered by the session's own new agent", r)
    mine = token_hash(token(s["id"]))
    t.eq([e["path"] for e in records(kube, vm_of(so)) if e.get("auth") == mine], [],
         "student334's token never went to the old address")
    t.eq(row(s["id"]), (new["status"]["interfaces"][0]["ipAddress"], new["metadata"]["uid"]),
         "the row has the new VMI's address and uid")
    api.end(s["id"])
    other.end(so["id"])


@t.test(name="the event stream's driver: once the VMI check fails, no /ready?wait with the "
             "token goes to the recorded address (reused by another student's VMI)")
def driver_stops_after_failed_check():
    api = Api("student336")
    api.end_current()
    s = api.start("test-hold").json
    sid, name = s["id"], s["vms"][0]["name"]
    wait_until(lambda: api.get(sid).json["stage"] == "setting_up", 180, 0.2, "setting_up")
    st = Stream(events_path(sid), "student336", timeout=120)
    t.eq(st.status, 200, "a stream watches the start (its driver holds /ready?wait)")
    st.next()
    old = vmi(s)
    old_ip = old["status"]["interfaces"][0]["ipAddress"]
    pid = wait_until(lambda: listener_pid(old_ip), 20, 0.1, "the agent listening")
    # from now on the VMI check cannot pass: reading the VMI fails
    kube.fault(verb="get", resource="virtualmachineinstances", name=name, code=500,
               message="injected")
    try:
        os.kill(guest_init(pid), signal.SIGKILL)

        def new_vmi():
            v = [v for v in kube.list("virtualmachineinstances")
                 if v["metadata"]["name"] == name]
            return v and v[0]["metadata"]["uid"] != old["metadata"]["uid"] and \
                v[0].get("status", {}).get("phase") == "Running"
        wait_until(new_vmi, 60, 0.2, "a new VMI Running")
        other, so = reuse_for_other(old_ip, "student337")
        mine = token_hash(token(sid))
        # the driver's call to the dead guest failed: it forgets the VMI and
        # reads it again (which fails); an old driver never did, and kept
        # asking the recorded address
        try:
            wait_until(lambda: db.one("SELECT vmi_uid IS NULL FROM session_vms WHERE "
                                      "session_id = %s", sid)[0], 30, 0.2,
                       "the VMI forgotten after the failed call")
        except TimeoutError:
            pass
        # a few of the driver's rounds (0.5 s apart) with the other lab there
        time.sleep(2.5)
        recs = records(kube, vm_of(so))
        t.eq([e["path"] for e in recs if e.get("auth") == mine], [],
             "student336's token never went to the old address")
    finally:
        kube.clear_faults()
        st.close()
    api.end(sid)
    other.end(so["id"])


@t.test(name="the status GET's probe of a starting session: its VMI replaced and the old "
             "address reused by another student's VMI before any call failed, the token goes "
             "to the session's own new VMI, never to the old address")
def probe_reused():
    api = Api("student338")
    api.end_current()
    s = api.start("test-hold").json
    sid = s["id"]
    # setting_up, its agent answering (not ready yet): the row has the VMI's
    # address and uid, and the probes ask that agent
    wait_until(lambda: api.get(sid).json["stage"] == "setting_up" and all(row(sid)), 180, 0.2,
               "setting_up, the agent answering")
    # from here on nobody looks at student338's session until the one GET below
    old, new = crash_guest(s)
    old_ip = old["status"]["interfaces"][0]["ipAddress"]
    other, so = reuse_for_other(old_ip, "student339")
    t.eq(row(sid)[0], old_ip, "the row still names the old address (no call failed yet)")
    r = api.get(sid)
    t.eq(r.status, 200, "the status GET answers", r)
    mine = token_hash(token(sid))
    t.eq([e["path"] for e in records(kube, vm_of(so)) if e.get("auth") == mine], [],
         "student338's token never went to the old address")
    t.eq(row(sid), (new["status"]["interfaces"][0]["ipAddress"], new["metadata"]["uid"]),
         "the row has the new VMI's address and uid")
    api.end(sid)
    other.end(so["id"])


reset_world(kube, db)
t.done()
