#!/usr/bin/python3
"""The simulated CDI importer: what the kubelet runs for the image
quay.io/kubevirt/cdi-importer (its ENTRYPOINT, /usr/bin/cdi-importer), as PID 1
of the importer pod, in the pod's own network namespace (controllers/cdi.py
creates the pod; controllers/pods.py maps the image to this program).

What it does, as CDI's importer (cmd/cdi-importer, pkg/importer) does:
- serves its progress over HTTPS on :8443 (the container port named
  "metrics"), `kubevirt_cdi_import_progress_total{ownerUID="<OWNER_UID>"} N`
  (pkg/monitoring/metrics/cdi-importer/import_metrics.go), with a self-signed
  certificate (the controller does not verify it: common/util.go
  BuildHTTPClient);
- fetches IMPORTER_ENDPOINT (docker://HOST/REPO:TAG or http(s)://...) through
  the proxy in its environment (http_proxy / https_proxy: CDIConfig's
  importProxy, import-controller.go makeImportEnv), as an absolute-form
  request (a simplification: a real HTTPS proxy is CONNECT + TLS with the
  registry);
- writes what it read to /data/disk.img, then exits 0 with the termination
  message {"message": "Import Complete", ...} (common.TerminationMessage);
  on an error it exits 1 with the error as the message, and the kubelet
  restarts it (restartPolicy OnFailure).

Nothing here is given a time: the registry mirror paces the transfer."""
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import urllib.parse

METRIC = "kubevirt_cdi_import_progress_total"
TERMINATION = "/dev/termination-log"
CONNECT_TIMEOUT = 5.0


class Progress:
    def __init__(self, owner):
        self.owner = owner
        self.pct = 0.0
        self.lock = threading.Lock()

    def text(self):
        with self.lock:
            return f'{METRIC}{{ownerUID="{self.owner}"}} {self.pct:.2f}\n'


def serve_metrics(progress, ready):
    d = "/tmp/importer-cert"
    os.makedirs(d, exist_ok=True)
    key, crt = os.path.join(d, "tls.key"), os.path.join(d, "tls.crt")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", crt,
                    "-days", "1", "-subj", "/CN=cdi-importer"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(crt, key)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 8443))
    s.listen(16)
    ready.set()

    def one(c):
        try:
            c.settimeout(5)
            t = ctx.wrap_socket(c, server_side=True)
            req = b""
            while b"\r\n\r\n" not in req and len(req) < 8192:
                b = t.recv(4096)
                if not b:
                    return
                req += b
            line = req.split(b"\r\n", 1)[0].decode("latin-1")
            if line.split(" ")[1:2] == ["/metrics"]:
                body = progress.text().encode()
                t.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
                          b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
            else:
                t.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                          b"Connection: close\r\n\r\n")
            t.close()
        except (OSError, ssl.SSLError, IndexError):
            pass
        finally:
            c.close()
    while True:
        c, _ = s.accept()
        threading.Thread(target=one, args=(c,), daemon=True).start()


def target_of(endpoint):
    """(absolute URL to ask the proxy for, registry/host name, env var of the proxy)."""
    if endpoint.startswith("docker://"):
        ref = endpoint[len("docker://"):]
        host, _, rest = ref.partition("/")
        repo, _, tag = rest.rpartition(":") if ":" in rest else (rest, "", "latest")
        return f"https://{host}/v2/{repo}/manifests/{tag or 'latest'}", host, "https_proxy"
    u = urllib.parse.urlsplit(endpoint)
    return endpoint, u.hostname or "", "https_proxy" if u.scheme == "https" else "http_proxy"


def fail(msg):
    with open(TERMINATION, "w") as f:
        json.dump({"message": msg}, f)
    print(f"E importer: {msg}", flush=True)
    sys.exit(1)


def fetch(endpoint, progress):
    url, host, var = target_of(endpoint)
    proxy = os.environ.get(var) or os.environ.get(var.upper()) or ""
    what = (f'Unable to process data: Failed to read registry image: pinging container '
            f'registry {host}: Get "https://{host}/v2/"' if endpoint.startswith("docker://")
            else f'Unable to connect to http data source: Get "{url}"')
    if not proxy:
        # no cluster DNS in the simulator, and no route out: as an air-gapped node
        fail(f"{what}: dial tcp: lookup {host}: no such host")
    p = urllib.parse.urlsplit(proxy if "://" in proxy else "http://" + proxy)
    addr = (p.hostname, p.port or 3128)
    try:
        s = socket.create_connection(addr, timeout=CONNECT_TIMEOUT)
    except socket.timeout:
        fail(f"{what}: proxyconnect tcp: dial tcp {addr[0]}:{addr[1]}: i/o timeout")
    except ConnectionRefusedError:
        fail(f"{what}: proxyconnect tcp: dial tcp {addr[0]}:{addr[1]}: connect: "
             "connection refused")
    except OSError as e:
        fail(f"{what}: proxyconnect tcp: dial tcp {addr[0]}:{addr[1]}: {e.strerror}")
    s.settimeout(None)
    s.sendall(f"GET {url} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: cdi-importer\r\n"
              "Connection: close\r\n\r\n".encode())
    f = s.makefile("rb")
    status = f.readline().decode("latin-1").strip()
    headers = {}
    while True:
        h = f.readline()
        if not h or h in (b"\r\n", b"\n"):
            break
        k, _, v = h.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    code = int((status.split(" ") + ["0", "0"])[1])
    if code != 200:
        body = f.read(2048).decode("utf-8", "replace")
        m = re.search(r'"message"\s*:\s*"([^"]*)"', body)
        fail(f"{what}: {code} {m.group(1) if m else status}")
    total = int(headers.get("content-length") or 0) or 1
    got = 0
    os.makedirs("/data", exist_ok=True)
    with open("/data/disk.img", "wb") as out:
        while got < total:
            b = f.read1(min(65536, total - got))
            if not b:
                fail(f"{what}: unexpected EOF after {got} of {total} bytes")
            out.write(b)
            got += len(b)
            with progress.lock:
                progress.pct = 100.0 * got / total
    s.close()


def main():
    progress = Progress(os.environ.get("OWNER_UID", ""))
    ready = threading.Event()
    threading.Thread(target=serve_metrics, args=(progress, ready), daemon=True).start()
    ready.wait(10)
    endpoint = os.environ.get("IMPORTER_ENDPOINT", "")
    if os.environ.get("IMPORTER_SOURCE") not in ("registry", "http"):
        fail(f"unknown source {os.environ.get('IMPORTER_SOURCE')!r}")
    fetch(endpoint, progress)
    with open(TERMINATION, "w") as f:
        json.dump({"message": "Import Complete", "preallocationApplied": False}, f)
    print("I importer: Import Complete", flush=True)


if __name__ == "__main__":
    main()
