#!/usr/bin/python3
"""TCP relays between the host's network namespace and a pod's, in the
style of `kubectl port-forward` (tests/stack --backend pod).

    nsrelay.py --netns /proc/PID/ns/net [--forward PORT]... [--reverse PORT]...
               [--ready FILE]

--forward P  listens on the host's 127.0.0.1:P and connects to 127.0.0.1:P
             inside the pod (the browser and the tests reach the front end
             and labvm-console that run in the pod)
--reverse P  listens on 127.0.0.1:P inside the pod and connects to the
             host's 127.0.0.1:P (the pod reaches PostgreSQL and the API
             server, which listen on the host's loopback)

Both ends are loopback: nothing is routed anywhere. A socket stays in the
network namespace it was created in, so one process serves both sides: the
pod's listening sockets are made after setns(2) into the pod's namespace,
and a forwarded connection's thread enters it before it makes its socket.
When the other side refuses, the accepted connection is closed at once.
The module's setns()/in_netns() are also what tests/stack uses to check a
port inside the pod."""
import argparse
import ctypes
import os
import socket
import sys
import threading

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def setns(fd):
    """Move the calling thread (only it) into the network namespace of fd."""
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"setns: {os.strerror(e)}")


def in_netns(path, fn, *args):
    """fn(*args) run by a thread of its own inside the network namespace at
    path (the caller's threads stay where they are); its result or exception."""
    out = {}

    def run():
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                setns(fd)
            finally:
                os.close(fd)
            out["r"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            out["e"] = e
    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join()
    if "e" in out:
        raise out["e"]
    return out.get("r")


def _pump(src, dst, done):
    try:
        while True:
            b = src.recv(65536)
            if not b:
                break
            dst.sendall(b)
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
    finally:
        with done["lock"]:
            done["n"] += 1
            last = done["n"] == 2
        if last:
            src.close()
            dst.close()


def _relay(client, port, target_fd):
    try:
        if target_fd is not None:
            setns(target_fd)       # this thread only: its socket is the pod's
        up = socket.create_connection(("127.0.0.1", port), timeout=10)
        up.settimeout(None)
    except OSError:
        client.close()
        return
    for s in (client, up):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    done = {"n": 0, "lock": threading.Lock()}
    threading.Thread(target=_pump, args=(up, client, done), daemon=True).start()
    _pump(client, up, done)


def _serve(lsock, port, target_fd):
    while True:
        try:
            c, _ = lsock.accept()
        except OSError:
            continue
        threading.Thread(target=_relay, args=(c, port, target_fd), daemon=True).start()


def _listener(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(128)
    return s


def main(argv=None):
    ap = argparse.ArgumentParser(prog="nsrelay")
    ap.add_argument("--netns", required=True, help="the pod's /proc/PID/ns/net")
    ap.add_argument("--forward", type=int, action="append", default=[])
    ap.add_argument("--reverse", type=int, action="append", default=[])
    ap.add_argument("--ready", default=None, help="a file written once every port listens")
    a = ap.parse_args(argv)
    host = os.open("/proc/self/ns/net", os.O_RDONLY)
    pod = os.open(a.netns, os.O_RDONLY)
    if os.fstat(host).st_ino == os.fstat(pod).st_ino:
        sys.exit(f"nsrelay: {a.netns} is this process's own network namespace")
    serving = []
    for p in a.forward:                 # host listens, pod connects
        serving.append((_listener(p), p, pod))
    setns(pod)
    try:
        for p in a.reverse:             # pod listens, host connects
            serving.append((_listener(p), p, host))
    finally:
        setns(host)
    for ls, p, fd in serving:
        # a reverse connection's thread starts in the host's namespace (it is
        # made by an accept thread that never left it): no setns needed there
        threading.Thread(target=_serve, args=(ls, p, pod if fd == pod else None),
                         daemon=True).start()
    print(f"nsrelay: forward {a.forward} reverse {a.reverse} ({a.netns})", flush=True)
    if a.ready:
        with open(a.ready, "w") as f:
            f.write(f"{os.getpid()}\n")
    threading.Event().wait()


if __name__ == "__main__":
    main()
