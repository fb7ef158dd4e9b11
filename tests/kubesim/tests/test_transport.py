#!/usr/bin/python3
"""kubesim: how clients reach it (timeout: 120): listening on [::1] with a
certificate for ::1 and kubernetes.default.svc; ALPN h2,http/1.1 offered as
kube-apiserver offers it (secure_serving.go), a client that picks h2 refused
with GOAWAY HTTP_1_1_REQUIRED and counted; the backend's token projected as
the kubelet does (..data swapped atomically, token -> ..data/token), rotated
through /_sim/tokens/rotate, the old token refused (401) once its time is up."""
import os
import socket
import ssl
import subprocess
import time

from simlib import SECRETS, Sim
from tap import T

t = T()
sim = Sim("--host", "::1", "--alpn", "h2,http/1.1", guest="none")
A = sim.admin


def handshake(alpn):
    """(selected ALPN, server certificate) of a TLS handshake to the simulator."""
    ctx = ssl.create_default_context(cafile=sim.ca)
    ctx.set_alpn_protocols(alpn)
    with socket.create_connection(("::1", sim.port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="::1") as s:
            return s.selected_alpn_protocol(), s.getpeercert()


@t.test
def listens_on_ipv6_loopback_with_its_names():
    t.eq(sim.url, f"https://[::1]:{sim.port}", "the ready URL brackets the address")
    t.eq(A.get("/version").status, 200, "answers on [::1] (the certificate's IP SAN ::1 "
         "verified by Python's ssl)")
    _, cert = handshake(["http/1.1"])
    sans = {v for _, v in cert.get("subjectAltName", ())}
    t.ok({"::1", "0:0:0:0:0:0:0:1"} & sans or any(v.startswith("0:0:") for v in sans),
         "IP SAN ::1", sans)
    t.ok("kubernetes.default.svc" in sans, "DNS SAN kubernetes.default.svc", sans)
    r = A.get("/api")
    t.eq(r.json["serverAddressByClientCIDRs"][0]["serverAddress"], f"[::1]:{sim.port}",
         "/api names the address in brackets")


@t.test
def alpn_offers_h2_and_refuses_it():
    t.eq(handshake(["h2", "http/1.1"])[0], "h2", "h2 offered: a client preferring it gets it")
    t.eq(handshake(["http/1.1"])[0], "http/1.1", "http/1.1 for a client that offers only it")
    r = subprocess.run(["curl", "-sS", "--http2", "--cacert", sim.ca, "-o", "/dev/null",
                        "-w", "%{http_version}", "-H", f"Authorization: Bearer {sim.admin_token}",
                        f"https://[::1]:{sim.port}/version"], capture_output=True, text=True,
                       timeout=20)
    t.ok(r.returncode != 0, "curl --http2: no answer (GOAWAY HTTP_1_1_REQUIRED)",
         (r.returncode, r.stdout, r.stderr))
    r = subprocess.run(["curl", "-sS", "--http1.1", "--cacert", sim.ca, "-o", "/dev/null",
                        "-w", "%{http_version}", "-H", f"Authorization: Bearer {sim.admin_token}",
                        f"https://[::1]:{sim.port}/version"], capture_output=True, text=True,
                       timeout=20)
    t.eq((r.returncode, r.stdout), (0, "1.1"), "curl --http1.1 works", r.stderr)
    st = A.get("/_sim/stats").json["alpn"]
    t.ok(st.get("h2", {}).get("refused", 0) >= 1, "the h2 client is counted", st)
    t.ok(sum(st.get("http/1.1", {}).values()) >= 1, "http/1.1 requests counted by kind", st)


def layout():
    d = os.path.join(sim.dir, "serviceaccount")
    return (os.readlink(os.path.join(d, "..data")), os.readlink(os.path.join(d, "token")),
            os.stat(os.path.join(d, "token")).st_ino, sorted(os.listdir(d)))


@t.test
def token_projected_and_rotated():
    d = os.path.join(sim.dir, "serviceaccount")
    data, tok_link, ino, names = layout()
    t.ok(data.startswith("..") and data != "..data", "..data -> a hidden timestamped dir", data)
    t.eq(tok_link, "..data/token", "token -> ..data/token")
    t.eq([n for n in names if not n.startswith("..")], ["ca.crt", "namespace", "token"],
         "token, ca.crt, namespace")
    t.eq(os.readlink(os.path.join(sim.dir, "backend-token")), "serviceaccount/token",
         "backend-token follows the projection")
    old = open(os.path.join(d, "token")).read().strip()
    t.eq(old, sim.backend_token, "the backend's token")
    t.eq(sim.client(old).get(SECRETS).status, 200, "it works")
    r = A.post("/_sim/tokens/rotate", {"old_valid_s": 2})
    t.eq(r.status, 200, "rotate", r.json)
    data2, _, ino2, names2 = layout()
    new = open(os.path.join(d, "token")).read().strip()
    t.ok(new != old, "a new token")
    t.ok(data2 != data and ino2 != ino, "..data swapped: a new directory, a new inode")
    t.ok(data not in names2, "the previous timestamped directory is gone", names2)
    t.eq(open(os.path.join(sim.dir, "backend-token")).read().strip(), new,
         "backend-token reads the new one")
    t.eq(sim.client(new).get(SECRETS).status, 200, "the new token works")
    t.eq(sim.client(old).get(SECRETS).status, 200, "the old one still, within old_valid_s")
    deadline = time.monotonic() + 10
    while sim.client(old).get(SECRETS).status != 401 and time.monotonic() < deadline:
        time.sleep(0.2)
    r = sim.client(old).get(SECRETS)
    t.eq((r.status, (r.json or {}).get("reason")), (401, "Unauthorized"),
         "the old token is refused after its time")
    t.eq(sim.client(new).get(SECRETS).status, 200, "the new one goes on")
    t.eq(A.get("/_sim/stats").json["token_rotations"], 1, "counted")


sim.stop()
t.done()
