"""A labvm-like guest for checking real QEMU guests, and the probes that check it.

`labvm_like_userdata(token)` is a cloud-config shaped like the one labvm puts
in its Secret: labvm's own guest agent (fcgi-app/guest/agent.py; a stand-in
with the same API when that file is absent), the per-VM token, lab files, a
setup script, the serial autologin drop-in, and the ready flag written last,
only if setup succeeded. This is the recommended form (variant B below).

`labvm_current_userdata(token)` replicates the document that
fcgi-app/core/cloudinit.c builds today ("#cloud-config" + JSON; the drop-in
through write_files and a `systemctl restart --no-block` of the getty in
runcmd), to show it works with the real cloud-init too.

The pattern, and why (cloud-init 22.4 in Debian 12):
- bootcmd runs first, every boot, inside cloud-init.service, which is ordered
  Before=sysinit.target (so before systemd-user-sessions, every getty and
  every unit with default dependencies). So:
  * the autologin drop-in is written and `systemctl daemon-reload` is run
    right there (no restart): serial-getty@ttyS0 has not started yet and
    starts with autologin straight away;
  * the agent is started with `systemd-run --no-block -p
    DefaultDependencies=no`: a blocking start, or a unit with default
    dependencies (After=sysinit.target), would wait for cloud-init.service
    to finish, which waits for bootcmd: a deadlock. It waits for write_files
    to drop the agent (write_files runs after bootcmd).
- the agetty line needs `-o '-p -f -- \\\\u'`: with `-o`, agetty does not add
  `-f` by itself, and without it login asks for a password.
- runcmd runs in the final stage (scripts_user); the flag is its last step.
"""
import http.client
import json
import os
import re
import socket
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LABVM_AGENT = os.path.join(REPO, "fcgi-app", "guest", "agent.py")

# Used only when labvm's agent is not there: the same API, much less care.
STAND_IN_AGENT = r'''#!/usr/bin/python3
import hmac, http.server, json, os, subprocess
READY = '/var/lib/labvm/ready'
host, _, port = os.environ.get('LABVM_AGENT_LISTEN', '0.0.0.0:8899').rpartition(':')
class H(http.server.BaseHTTPRequestHandler):
    def reply(self, code, obj):
        body = json.dumps(obj).encode() + b'\n'
        self.send_response(code)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def authorised(self):
        try:
            token = open('/etc/labvm/agent-token', 'rb').read().strip()
        except OSError:
            token = b''
        got = self.headers.get('Authorization', '').removeprefix('Bearer ').encode()
        if token and hmac.compare_digest(got, token):
            return True
        self.reply(403, {'error': 'forbidden'})
        return False
    def do_GET(self):
        if not self.authorised():
            return
        if self.path == '/ready':
            ok = os.path.exists(READY)
            self.reply(200 if ok else 503, {'ready': ok})
        else:
            self.reply(404, {'error': 'not_found'})
    def do_POST(self):
        if not self.authorised():
            return
        if self.path != '/run':
            return self.reply(404, {'error': 'not_found'})
        req = json.loads(self.rfile.read(int(self.headers.get('Content-Length', 0))) or b'{}')
        try:
            p = subprocess.run(['/bin/sh', '-c', req['cmd']], capture_output=True,
                               timeout=req.get('timeout_s', 30))
            self.reply(200, {'exit_code': p.returncode, 'stdout': p.stdout.decode('utf-8', 'replace'),
                             'stderr': p.stderr.decode('utf-8', 'replace'), 'timed_out': False})
        except subprocess.TimeoutExpired:
            self.reply(200, {'exit_code': None, 'stdout': '', 'stderr': '', 'timed_out': True})
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer((host, int(port)), H).serve_forever()
'''


def agent_source():
    """labvm's guest agent when present, else the stand-in."""
    try:
        with open(LABVM_AGENT) as f:
            return f.read()
    except OSError:
        return STAND_IN_AGENT


SETUP = '''#!/bin/sh
# lesson setup: lab files in place, a lab user, something that takes a moment
set -e
id student >/dev/null 2>&1 || useradd -m -s /bin/bash student
mkdir -p /home/student/lab
cp /opt/labvm/files/README /home/student/lab/README
chown -R student:student /home/student/lab
sleep 2
echo "setup done $(date -Is)" > /var/log/labvm-setup.done
'''


def _indent(text, n):
    pad = " " * n
    return "".join(pad + line if line.strip() else line for line in text.splitlines(True))


def labvm_like_userdata(token, agent=None, setup=SETUP):
    """A cloud-config like labvm's (delivered through a Secret: no size limit)."""
    agent = agent or agent_source()
    return f"""#cloud-config
bootcmd:
  - |
    mkdir -p /etc/systemd/system/serial-getty@ttyS0.service.d
    cat > /etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf <<'EOF'
    [Service]
    ExecStart=
    ExecStart=-/sbin/agetty -o '-p -f -- \\\\u' --keep-baud 115200,57600,38400,9600 --autologin root %I $TERM
    EOF
    systemctl daemon-reload
  - [systemd-run, --no-block, --unit=labvm-agent, -p, DefaultDependencies=no, -p, Restart=always,
     /bin/sh, -c, 'while [ ! -e /opt/labvm/agent.py ]; do sleep 0.02; done; exec /usr/bin/python3 /opt/labvm/agent.py']
write_files:
  - path: /etc/labvm/agent-token
    permissions: '0600'
    content: "{token}"
  - path: /opt/labvm/agent.py
    permissions: '0755'
    content: |
{_indent(agent, 6)}
  - path: /opt/labvm/setup.sh
    permissions: '0755'
    content: |
{_indent(setup, 6)}
  - path: /opt/labvm/files/README
    content: |
      Welcome to the lab.
runcmd:
  - [sh, -c, 'mkdir -p /var/lib/labvm; : > /var/lib/labvm/setup.started; /opt/labvm/setup.sh > /var/log/labvm-setup.log 2>&1; echo $? > /var/lib/labvm/setup.rc']
  - [sh, -c, '[ "$(cat /var/lib/labvm/setup.rc)" = 0 ] && touch /var/lib/labvm/ready']
""".encode()


def labvm_current_userdata(token, agent=None, setup=SETUP):
    """The document fcgi-app/core/cloudinit.c builds (same strings, same order)."""
    agent = agent or agent_source()
    state = "/var/lib/labvm"
    agent_start = (
        f"mkdir -p {state}; "
        "run='while [ ! -e /opt/labvm/agent.py ]; do sleep 0.02; done; exec python3 /opt/labvm/agent.py'; "
        "if [ -d /run/systemd/system ] && command -v systemd-run >/dev/null 2>&1; then "
        "systemd-run --no-block --unit=labvm-agent -p DefaultDependencies=no -p Restart=always "
        "/bin/sh -c \"$run\"; "
        "else nohup /bin/sh -c \"$run\" >/var/log/labvm-agent.log 2>&1 & fi")
    getty_restart = ("if [ -d /run/systemd/system ]; then systemctl daemon-reload; "
                     "systemctl restart --no-block serial-getty@ttyS0.service; fi")
    run_setup = (f"mkdir -p {state}; : > {state}/setup.started; cd /root 2>/dev/null || cd /; "
                 f"HOME=/root /opt/labvm/setup.sh >/var/log/labvm-setup.log 2>&1; echo $? > {state}/setup.rc")
    ready_flag = f'[ "$(cat {state}/setup.rc 2>/dev/null)" = 0 ] && touch {state}/ready'
    autologin = ("[Service]\nExecStart=\nExecStart=-/sbin/agetty -o '-p -f -- \\\\u' "
                 "--keep-baud 115200,57600,38400,9600 --autologin root %I $TERM\n")

    def f(path, content, mode):
        return {"path": path, "content": content, "permissions": mode, "owner": "root:root"}
    doc = {
        "bootcmd": [["sh", "-c", agent_start]],
        "write_files": [f("/opt/labvm/agent.py", agent, "0755"),
                        f("/etc/labvm/agent-token", token, "0600"),
                        f("/etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf", autologin, "0644"),
                        f("/opt/labvm/files/README", "Welcome to the lab.\n", "0644"),
                        f("/opt/labvm/setup.sh", setup, "0700")],
        "runcmd": [["sh", "-c", getty_restart], ["sh", "-c", run_setup], ["sh", "-c", ready_flag]],
    }
    return ("#cloud-config\n" + json.dumps(doc, indent=1) + "\n").encode()


# --- probes ------------------------------------------------------------------------
def agent_get(ip, port, path, token, timeout=2.0):
    """(status, body) of GET path on the agent, or (None, error) when it does not answer."""
    try:
        c = http.client.HTTPConnection(ip, port, timeout=timeout)
        c.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, body
    except (OSError, http.client.HTTPException) as e:
        return None, str(e)


def agent_run(ip, port, token, command, timeout=30.0):
    """POST /run on the agent: (exit code, stdout + stderr)."""
    c = http.client.HTTPConnection(ip, port, timeout=timeout + 5)
    c.request("POST", "/run", body=json.dumps({"cmd": command, "timeout_s": int(timeout)}),
              headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    r = c.getresponse()
    out = json.loads(r.read())
    c.close()
    if r.status != 200:
        raise RuntimeError(f"/run answered {r.status}: {out}")
    return out.get("exit_code"), out.get("stdout", "") + out.get("stderr", "")


def wait_ready(guest, token, timeout=240.0, marks=None):
    """Poll /ready through the forwarded port every 0.1 s; record in `marks`
    (seconds since QEMU started) 'agent' (first answer) and 'ready' (first 200).
    Returns True when ready."""
    marks = {} if marks is None else marks
    t0 = guest.started_at
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not guest.alive():
            marks["died"] = guest.error or f"qemu exited with {guest.exit_code()}"
            return False
        st, _ = agent_get(guest.ip, guest.agent_port, "/ready", token, timeout=2.0)
        now = time.monotonic() - t0
        if st is not None and "agent" not in marks:
            marks["agent"] = now
        if st == 200:
            marks["ready"] = now
            return True
        time.sleep(0.1)
    return False


def wait_all_ready(guests, timeout=400.0):
    """wait_ready for several guests at once (each in a thread, so each one's
    marks are its own); every guest needs .token and .marks. Returns a list
    of booleans."""
    out = [False] * len(guests)

    def one(i, g):
        out[i] = wait_ready(g, g.token, timeout=timeout, marks=g.marks)
    ts = [threading.Thread(target=one, args=(i, g), daemon=True) for i, g in enumerate(guests)]
    for th in ts:
        th.start()
    for th in ts:
        th.join(timeout + 30)
    return out


ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\r")


class Console:
    """A tiny expect over a console() socket."""

    def __init__(self, sock):
        self.s = sock
        self.s.settimeout(0.2)
        self.buf = b""

    def read_some(self):
        try:
            d = self.s.recv(65536)
            if not d:
                raise EOFError("console closed")
            self.buf += d
        except socket.timeout:
            pass

    def expect(self, pattern, timeout=30.0):
        """Wait until `pattern` (bytes regex) shows in the output after the
        last match; returns the match."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.buf)
            if m:
                self.buf = self.buf[m.end():]
                return m
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {pattern!r} on the console; last output: {self.buf[-300:]!r}")
            self.read_some()

    def send(self, data):
        self.s.sendall(data if isinstance(data, bytes) else data.encode())

    def run(self, cmd, prompt=rb"root@[^ ]*:[^#]*# ", timeout=30.0):
        """Run cmd at a root prompt; returns (rc, output) read between markers."""
        self.send("\r")
        self.expect(prompt, timeout)
        tag = f"{int(time.monotonic() * 1000) % 100000}"
        self.send(f"{cmd}; echo __RC{tag}=$?__\r")
        m = self.expect(rb"(?s)\n(.*?)__RC" + tag.encode() + rb"=(\d+)__", timeout)
        out = ANSI.sub(b"", m.group(1)).decode("utf-8", "replace").strip()
        return int(m.group(2)), out

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass
