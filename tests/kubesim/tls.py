"""A CA generated at start (written to the state dir as ca.crt) and the serving
certificate it signs, SAN 127.0.0.1, ::1, localhost, and the --host address.
Uses the openssl command line (EC P-256: fast to generate, accepted by Go,
libcurl and Python)."""
import ipaddress
import os
import subprocess
import tempfile


def _run(args):
    r = subprocess.run(["openssl"] + args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])}: {r.stderr.strip()}")


def make_certs(state_dir, host="127.0.0.1"):
    """Returns (ca_crt, server_crt, server_key) paths."""
    d = os.path.join(state_dir, "pki")
    os.makedirs(d, exist_ok=True)
    ca_key, ca_crt = os.path.join(d, "ca.key"), os.path.join(d, "ca.crt")
    key, csr, crt = (os.path.join(d, n) for n in ("server.key", "server.csr", "server.crt"))
    _run(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
          "-keyout", ca_key, "-out", ca_crt, "-days", "3650", "-subj", "/CN=kubesim-ca",
          "-addext", "basicConstraints=critical,CA:TRUE",
          "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"])
    sans = ["DNS:localhost", "DNS:kubernetes", "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc", "IP:127.0.0.1", "IP:::1"]
    try:
        ipaddress.ip_address(host)
        if f"IP:{host}" not in sans:
            sans.append(f"IP:{host}")
    except ValueError:
        if f"DNS:{host}" not in sans:
            sans.append(f"DNS:{host}")
    _run(["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
          "-keyout", key, "-out", csr, "-subj", "/CN=kube-apiserver"])
    with tempfile.NamedTemporaryFile("w", suffix=".ext", delete=False) as ext:
        ext.write("basicConstraints=CA:FALSE\n"
                  "keyUsage=critical,digitalSignature,keyEncipherment\n"
                  "extendedKeyUsage=serverAuth\n"
                  f"subjectAltName={','.join(sans)}\n")
    try:
        _run(["x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial",
              "-out", crt, "-days", "825", "-extfile", ext.name])
    finally:
        os.unlink(ext.name)
    os.chmod(key, 0o600)
    os.chmod(ca_key, 0o600)
    return ca_crt, crt, key
