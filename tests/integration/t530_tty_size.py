#!/usr/bin/python3
# timeout: 600
"""The browser terminal's size reaches a VM's serial console: POST
/api/sessions/{id}/tty-size goes to the guest agent, which sets the window
size of the guest's console tty (/dev/ttyS0), so the shell on the console
sees it (`stty size`). Only the owner, only a ready session, only sane sizes.
"""
import asyncio
import os
import re

from labconsole import Console
from labtest import Api, Db, Kube, env, reset_world
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
FRONT = os.environ.get("LABVM_LIGHTTPD_URL") or env("LABVM_URL")
USER, OTHER = "student185", "student186"
S = {}
loop = asyncio.new_event_loop()


def run(coro):
    return loop.run_until_complete(coro)


def size_path(sid):
    return f"/api/sessions/{sid}/tty-size"


async def stty_size(c, marker):
    """Run `stty size` on the console; the 'rows cols' it printed."""
    await c.send(f"echo {marker}-$(stty size | tr ' ' x)-end\r".encode())
    pat = re.compile(rf"{marker}-(\d+)x(\d+)-end".encode())
    ok = await c.until(lambda k: pat.search(bytes(k.out)), 60)
    m = pat.search(bytes(c.out)) if ok else None
    return (int(m.group(1)), int(m.group(2))) if m else None


@t.test(name="before ready: 409 not_ready; another user's session: 404")
def refused_early():
    api = Api(USER)
    api.end_current()
    r = api.start("linux-basics")
    t.eq(r.status, 201, "start", r)
    sid = r.json["id"]
    S["api"], S["sid"] = api, sid
    early = api.request("POST", size_path(sid), {"cols": 100, "rows": 30})
    if early.status == 200:   # the lab was ready at once (possible on a fast machine)
        t.ok(api.get(sid).json["state"] == "ready", "answered 200 only when ready", early)
    else:
        t.eq((early.status, early.json.get("error")), (409, "not_ready"), "409 before ready", early)
    s = api.wait_state(sid, ("ready", "failed"), 180)
    t.eq(s["state"], "ready", "the lab is ready", s.get("error"))
    r = Api(OTHER).request("POST", size_path(sid), {"cols": 100, "rows": 30})
    t.eq((r.status, r.json.get("error")), (404, "not_found"), "another user: 404", r)


@t.test(name="bad sizes are refused with 400 and name the rule")
def bad_sizes():
    api, sid = S["api"], S["sid"]
    for bad in ({"cols": 0, "rows": 30}, {"cols": 80, "rows": 1001}, {"cols": "80", "rows": 24},
                {"cols": 80.5, "rows": 24}, {"rows": 24}, {"cols": True, "rows": 24}):
        r = api.request("POST", size_path(sid), bad)
        t.eq((r.status, r.json.get("error")), (400, "bad_request"), f"refused: {bad}", r)
        t.ok("1..1000" in (r.json.get("message") or ""), "the message names the range", r.json)


@t.test(name="the size reaches the shell on the VM's serial console")
def size_reaches_the_console():
    api, sid = S["api"], S["sid"]
    r = api.ticket(sid)
    t.eq(r.status, 200, "console ticket", r)

    async def go():
        c = await Console.open(FRONT, r.json["url"], USER)
        t.ok(await c.opened(60), "console open", c.ctl)
        first = await stty_size(c, "a")
        t.ok(first is not None, "stty size answered", bytes(c.out[-300:]))
        for cols, rows in ((123, 45), (43, 29)):
            rr = api.request("POST", size_path(sid), {"cols": cols, "rows": rows})
            t.eq(rr.status, 200, f"POST tty-size {cols}x{rows}", rr)
            t.eq((rr.json.get("cols"), rr.json.get("rows")), (cols, rows), "the answer echoes it")
            got = await stty_size(c, f"s{cols}")
            t.eq(got, (rows, cols), f"the console's shell sees {rows} rows x {cols} cols")
        await c.ws.close()

    run(go())


@t.test(name="after End: the route answers 404 or 409, never 200")
def after_end():
    api, sid = S["api"], S["sid"]
    t.ok(api.end(sid).status in (200, 204), "end")
    r = api.request("POST", size_path(sid), {"cols": 100, "rows": 30})
    t.ok(r.status in (404, 409), "refused after the end", r)


t.done()
