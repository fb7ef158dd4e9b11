#!/usr/bin/python3
"""kubesim: the VMI console subresource (WebSocket plain.kubevirt.io to a
serial getty in the guest) (timeout: 120)."""
import asyncio
import ssl
import time

import websockets

from simlib import (SECRETS, VMS, Sim, cloud_config, console_url, secret, vm, wait_for,
                    wait_running)
from tap import T

t = T()
sim = Sim()
A, B = sim.admin, sim.backend
CTX = ssl.create_default_context(cafile=sim.ca)


def connect(name, token=None, protos=("plain.kubevirt.io",)):
    return websockets.connect(console_url(sim, name), ssl=CTX, subprotocols=list(protos),
                              extra_headers={"Authorization": "Bearer " + (token or
                                                                           sim.backend_token)},
                              open_timeout=5, max_size=None)


async def read_until(ws, needle, timeout=5):
    buf = b""
    deadline = time.monotonic() + timeout
    while needle not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            m = await asyncio.wait_for(ws.recv(), left)
        except asyncio.TimeoutError:
            break
        if isinstance(m, str):
            raise AssertionError(f"text frame from the console: {m!r}")
        buf += m
    return buf


def run(coro):
    return asyncio.run(coro)


B.post(SECRETS, secret("c-1", cloud_config(["touch /root/flag"])))
B.post(VMS, vm("c-1", "c-1"))
B.post(SECRETS, secret("c-2", cloud_config(["touch /root/flag"], autologin=False)))
B.post(VMS, vm("c-2", "c-2"))


@t.test
def before_running_is_400():
    B.post(VMS, vm("c-wait", "c-missing-secret"))
    time.sleep(0.3)
    r = B.get("/apis/subresources.kubevirt.io/v1/namespaces/labs/virtualmachineinstances/c-wait/"
              "console", headers={"Upgrade": "websocket", "Connection": "Upgrade",
                                  "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                                  "Sec-WebSocket-Version": "13"})
    t.eq(r.status, 400, "400")
    t.eq((r.json or {}).get("message"), "VMI is not running", "message")
    r = B.get("/apis/subresources.kubevirt.io/v1/namespaces/labs/virtualmachineinstances/none/"
              "console")
    t.eq(r.status, 404, "unknown VMI")
    A.delete(VMS + "/c-wait")


@t.test
def console_runs_echo_in_a_root_shell():
    wait_running(sim, "c-1")
    wait_for(lambda: sim.exec("c-1", "test -e /root/flag")["exit_code"] == 0, 10)

    async def go():
        async with connect("c-1") as ws:
            t.eq(ws.subprotocol, "plain.kubevirt.io", "subprotocol")
            await ws.send(b"\r")
            prompt = await read_until(ws, b"root@c-1:~# ")
            t.ok(b"root@c-1:~# " in prompt, "root prompt (autologin)", prompt[-200:])
            await ws.send("echo text-frames-are-ignored\r")
            await ws.send(b"echo hello-$((6*7)) $TERM $HOME\r")
            out = await read_until(ws, b"hello-42 xterm-256color /root")
            t.ok(b"hello-42 xterm-256color /root" in out, "echo runs in the guest", out[-300:])
            t.ok(b"text-frames-are-ignored" not in out, "text frames ignored")
            await ws.send(b"tty; hostname\r")
            out = await read_until(ws, b"c-1\r\n")
            t.ok(b"/dev/pts/" in out, "a real pty", out[-200:])
            # bytes in, bytes out, echo by the tty
            await ws.send(b"stty -echo; echo secret-$((1+1)); stty echo\r")
            out = await read_until(ws, b"secret-2")
            t.ok(b"secret-2" in out, "raw bytes")
    run(go())


@t.test
def new_console_kicks_the_previous_one():
    async def go():
        async with connect("c-1") as first:
            await first.send(b"\r")
            await read_until(first, b"# ")
            async with connect("c-1") as second:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + 5
                try:
                    # whatever output was in flight may still arrive; then the close
                    while True:
                        await asyncio.wait_for(first.recv(), max(0.05, deadline - loop.time()))
                except websockets.ConnectionClosed:
                    kicked = True
                except asyncio.TimeoutError:
                    kicked = False
                t.ok(kicked, "the first connection is closed")
                await second.send(b"echo still-$((2+3))\r")
                out = await read_until(second, b"still-5")
                t.ok(b"still-5" in out, "the second one works")
                await second.send(b"export KEEP=me\r")
                await read_until(second, b"# ")
        async with connect("c-1") as third:
            await third.send(b"echo $KEEP\r")
            out = await read_until(third, b"me\r\n")
            t.ok(b"me\r\n" in out, "the same serial session persists across connections")
    run(go())


@t.test
def login_prompt_without_autologin():
    wait_running(sim, "c-2")
    wait_for(lambda: sim.exec("c-2", "test -e /root/flag")["exit_code"] == 0, 10)

    async def go():
        async with connect("c-2") as ws:
            await ws.send(b"\r")
            out = await read_until(ws, b"login: ")
            t.ok(b"c-2 login: " in out, "login prompt", out[-200:])
            await ws.send(b"root\r")
            await read_until(ws, b"Password: ")
            await ws.send(b"\r")
            out = await read_until(ws, b"Login incorrect", 6)
            t.ok(b"Login incorrect" in out, "root has no password")
    run(go())


@t.test
def console_rbac():
    other = sim.token(sa="labs/intruder")

    async def go():
        try:
            async with connect("c-1", token=other):
                return None
        except websockets.InvalidStatusCode as e:
            return e.status_code
    t.eq(run(go()), 403, "an unauthorized service account gets 403")


@t.test
def deleting_the_vm_closes_the_console():
    async def go():
        async with connect("c-2") as ws:
            await ws.send(b"\r")
            await read_until(ws, b"login: ")
            B.delete(VMS + "/c-2")
            try:
                while True:
                    await asyncio.wait_for(ws.recv(), 5)
            except websockets.ConnectionClosed:
                return True
            except asyncio.TimeoutError:
                return False
    t.ok(run(go()), "the console closes when the guest is gone")


sim.stop()
t.done()
