#!/usr/bin/python3
"""State that goes stale (issue #13): the agent's address is re-read from
the session's own VMI before the token goes anywhere. A guest that died and
was restarted (runStrategy Always: a new VMI, a new address) is graded at
its new address; an old address reused by another student's VMI never
receives this session's token."""
import os
import signal

from guestproc import guest_init, listener_pid
from labtest import Api, Db, Kube, reset_world, wait_until
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


reset_world(kube, db)
t.done()
