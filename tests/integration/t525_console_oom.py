#!/usr/bin/python3
# timeout: 600
"""The console bridge's 1011 "out of memory", on a live console, for real.

A private labvm-console runs under tests/unit/failalloc.c (LD_PRELOAD, built
by make as build/tests/libfailalloc.so; nothing of it is in labvm): once the
trigger file exists, the next allocation of at least N bytes made by the
bridge's own code (not lws, OpenSSL or libc) fails, and the shim removes the
file. N is just above the replay ring, so the allocation that fails is a
console queue chunk (bytequeue.c): the keystroke of an attached browser
that needs a fresh input chunk. The bridge must close that browser with
1011 "out of memory" (the closed message, then the close frame), keep every
other console open, serve the next console, and leak nothing: its counts
come back, and it exits 0 on SIGTERM with no LeakSanitizer report (under
`make check-asan` the bridge is the ASan build; the shim calls ASan's
allocator, so every allocation is still tracked).

Each step waits for its event with a generous limit; nothing is timed."""
import asyncio
import json
import os
import urllib.request

from labconsole import Console, PrivateBridge
from labtest import Db, Kube, env, ready_lab, reset_world, ticket_url, wait_until
from tap import T

t = T()
kube = Kube()
db = Db()
reset_world(kube, db)
loop = asyncio.new_event_loop()
SHIM = os.path.normpath(os.path.join(env("LABVM_BIN"), "..", "tests", "libfailalloc.so"))
TRIGGER = os.path.join(env("LABVM_STATE"), "t525-failalloc")
# more than the replay ring (RING_SIZE, 8 KiB: allocated once per session) and
# at most a queue chunk (header + LWS_PRE + BQ_CHUNK_MIN, 8 KiB): the failing
# allocation is a console's queue chunk, not the bridge's periodic re-check
MIN_BYTES = 8 * 1024 + 1
S = {}


def run(coro):
    return loop.run_until_complete(coro)


async def open_console(base, url, user):
    c = await Console.open(base, url, user)
    if not await c.opened(60):
        raise AssertionError(f"console did not open: {c.ctl} {c.code} {c.reason}")
    return c


async def echo(c, word):
    """Type a command whose output differs from its echo; True once it ran."""
    half = len(word) // 2
    await c.send(f"echo {word[:half]}''{word[half:]}\r".encode())
    return await c.until(lambda x: f"{word}\r\n".encode() in x.out, 60)


def stats(br):
    with urllib.request.urlopen(br.base + "/console-stats", timeout=30) as r:
        return json.loads(r.read())


def bridge_log(br):
    with open(br.logpath, errors="replace") as f:
        f.seek(br.log_start)
        return f.read()


def asan_env():
    """The sanitizer runtime must let the shim come first (it is harmless for
    the plain build)."""
    opts = os.environ.get("ASAN_OPTIONS", "")
    return ":".join(x for x in (opts, "verify_asan_link_order=0") if x)


def san_report(pid):
    """The sanitizer's report file of process pid, when tests/run set a log_path."""
    for part in os.environ.get("ASAN_OPTIONS", "").split(":"):
        if part.startswith("log_path="):
            p = f"{part[len('log_path='):]}.{pid}"
            if os.path.exists(p):
                with open(p, errors="replace") as f:
                    return f.read()
    return None


@t.test(name="an allocation that fails under a live console closes that console with "
             "1011 'out of memory' (closed message, then the close frame); another "
             "session's console stays open")
def oom_closes_the_console():
    t.require(os.path.exists(SHIM), f"{SHIM} is built by make (tests/unit/failalloc.c)")
    if os.path.exists(TRIGGER):
        os.unlink(TRIGGER)
    S["a"] = ready_lab("student197")
    S["b"] = ready_lab("student198")
    S["br"] = br = PrivateBridge("t525-oom", env={"LD_PRELOAD": SHIM, "LABVM_FAILALLOC": TRIGGER,
                                                  "ASAN_OPTIONS": asan_env()})
    (api_a, sa), (api_b, sb) = S["a"], S["b"]

    async def go():
        a = await open_console(br.base, ticket_url(api_a, sa["id"]), "student197")
        b = await open_console(br.base, ticket_url(api_b, sb["id"]), "student198")
        t.require(await echo(a, "before"), "console A works before the failure")
        t.require(await echo(b, "bystander"), "console B works before the failure")
        # arm: the next queue chunk the bridge allocates fails (the keystroke below)
        with open(TRIGGER + ".tmp", "w") as f:
            f.write(str(MIN_BYTES))
        os.rename(TRIGGER + ".tmp", TRIGGER)
        await a.send(b"echo after''oom\r")
        await a.closed(120)
        t.ok(not os.path.exists(TRIGGER), "the shim made one allocation fail (trigger used up)")
        t.eq((a.code, a.reason), (1011, "out of memory"), "console A: close code and reason")
        t.eq(a.closed_msg(), {"type": "closed", "code": 1011, "reason": "out of memory"},
             "console A: the closed message came first", a.ctl[-3:])
        t.ok(b"afteroom" not in a.out, "the keystrokes that could not be queued were dropped")
        t.eq(b.code, None, "console B (another session) stays open")
        t.ok(await echo(b, "stillthere"), "and still works")
        S["b_console"] = b
    run(go())
    log = bridge_log(br)
    t.ok("closed: 1011 out of memory" in log, "the bridge logged the close with its code",
         log[-2000:])
    t.eq(br.p.poll(), None, "the bridge is still running")


@t.test(name="after the failure the bridge serves the next console of the same session")
def next_console_works():
    t.require("br" in S, "needs the first test")
    br = S["br"]
    api_a, sa = S["a"]

    async def go():
        c = await open_console(br.base, ticket_url(api_a, sa["id"]), "student197")
        t.ok(await echo(c, "nextconsole"), "a new console of session A opens and works")
        st = stats(br)
        t.eq((st.get("browsers"), st.get("sessions")), (2, 2),
             "the bridge counts this console and B's, in their two sessions", st)
        await c.close()
        await S["b_console"].close()
    run(go())


@t.test(name="nothing leaks: every console is counted out, and the bridge exits 0 on "
             "SIGTERM with no LeakSanitizer report")
def nothing_leaks():
    t.require("br" in S, "needs the first test")
    br = S["br"]
    try:
        wait_until(lambda: stats(br).get("browsers") == 0, 60, what="no browser counted")
    except TimeoutError:
        pass
    st = stats(br)
    t.eq(st.get("browsers"), 0, "no browser left in the bridge's list", st)
    pid = br.p.pid
    br.close()
    S.pop("br")
    t.eq(br.p.returncode, 0, "the bridge exits 0 on SIGTERM (a leak report exits non-zero)")
    log = bridge_log(br)
    t.ok("LeakSanitizer" not in log and "AddressSanitizer" not in log,
         "no sanitizer report in its log", log[-2000:])
    t.eq(san_report(pid), None, "no sanitizer report file of the bridge's pid")


if "br" in S:
    S["br"].close()
if os.path.exists(TRIGGER):
    os.unlink(TRIGGER)
for api, s in (S.get("a", (None, None)), S.get("b", (None, None))):
    if api:
        api.end(s["id"])
reset_world(kube, db)
t.done()
