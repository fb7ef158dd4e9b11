"""Start and stop labvm's whole stack for tests, benchmarks and the demo.

One state folder holds everything of one stack: the throwaway PostgreSQL,
the simulator's state, rendered configs, logs, PID files and `env` (shell
syntax, the contract in DESIGN.md "The demo contract"). Components:

    postgres   throwaway cluster (initdb), role and database labvm, migrations
    kubesim    tests/kubesim/kubesim on HTTPS, seeded with namespace labs and
               the golden PVC
    lighttpd   serves web/, runs labvm.fcgi (bin-path), proxies /console/
    apache     serves web/, mod_proxy_fcgi to labvm.fcgi under spawn-fcgi,
               mod_proxy_wstunnel for /console/
    console    labvm-console (the bridge)
    reaper     labvm-reaper every minute (demo only; cron does it in production)

Ports: the demo uses the contract's fixed ports (simulator 6443, front end
8080); tests use --port-base B: PostgreSQL B+432, simulator B+443, lighttpd
B+80, Apache B+90, bridge B+682.

The cluster is fenced as an operator leaves it: every stack (the check's,
the demo, benchmarks', chaos, every backend and guest mode) has the
simulator apply conf/k8s/networkpolicy.yaml from the start (as `kubectl
apply -f conf/k8s/` would, with rbac.yaml and labvm-backend.yaml).
`fenced=False` (tests/stack --unfenced) leaves it out, for a suite that
must say why it needs an open pod network.

Backend (--backend pod, LABVM_BACKEND=pod; `make demo BACKEND=pod`): the
simulator runs the Pod of conf/k8s/labvm-backend.yaml as a network namespace
of its own on the pod network (kubesim --backend-netns; an address of the pod
CIDR, the Deployment's labels); labvm-console, the front end(s) and
labvm.fcgi are started inside that namespace (nsenter --net), so they reach
the guests as that Pod only. tests/lib/nsrelay.py relays, as `kubectl
port-forward` does, the host's 127.0.0.1 ports of the front ends and the
bridge into the pod, and the pod's 127.0.0.1 ports of PostgreSQL and the API
server out to the host: labvm.conf is the same in both modes. Without it
(the check's default) labvm's processes run in the host's namespaces and
reach the pod network through the host's route, with the backend Pod's
labels on the node address (.254).

Reaper (both modes): the simulator runs a Pod of the shipped CronJob
labvm-reaper (its jobTemplate's labels) as a network namespace of its own
(STATE/kubesim/reaper-pod.json); labvm-reaper runs inside it (the demo's
loop here, the suites' runs through labtest.reaper_argv()), reaching
PostgreSQL and the API server through a relay of its own (reaper-relay) and
the guests as that Pod: as the CronJob's pods do on a real cluster.

Guests: `process` (the simulator's default) or `qemu` (real VMs; the guest
image is built first, logs/guest-image.log, about 80 s the first time and
nothing when current, so the simulator itself starts at once).
"""
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PGBIN = "/usr/lib/postgresql/15/bin"
PASSWORD = "labvm"    # the students' (HTTP Basic); the database's is random per state folder
USERS = 200          # the demo's students: student1..student200
TEST_USERS = 440     # test stacks have more, so suites can each reserve their own (t191_idle, t797: 400-439)


class StackError(Exception):
    pass


def log(msg):
    print(f"stack: {msg}", file=sys.stderr, flush=True)


def ports_for(base, demo=False):
    if demo:
        return dict(pg=55432, kube=6443, lighttpd=8080, apache=8080, console=7682)
    b = int(base)
    return dict(pg=b + 432, kube=b + 443, lighttpd=b + 80, apache=b + 90, console=b + 682)


def wait_tcp(host, port, timeout, proc=None, what=""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise StackError(f"{what} exited with status {proc.returncode}")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise StackError(f"{what} not listening on {host}:{port} after {timeout}s")


def port_free(port):
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


class Stack:
    def __init__(self, state, port_base=18000, demo=False, profile="fast", guest="process",
                 frontend="both", environment=None, capacity=8, time_scale=None,
                 bindir=None, reaper_every=0, extra_lessons=True, guest_net=None,
                 backend=None, kube_host="127.0.0.1", kube_args=(), fenced=True):
        self.state = os.path.abspath(state)
        self.backend = backend or os.environ.get("LABVM_BACKEND") or "host"
        if self.backend not in ("host", "pod"):
            raise StackError(f"--backend must be host or pod, not {self.backend!r}")
        self.demo = demo
        self.ports = ports_for(port_base, demo)
        self.profile = profile
        self.guest = guest
        self.frontend = frontend
        self.environment = environment or ("dev" if demo else "check")
        self.capacity = capacity
        self.time_scale = time_scale
        self.bindir = os.path.abspath(bindir or os.environ.get("LABVM_BIN")
                                      or os.path.join(SRC, "build", "bin"))
        self.reaper_every = reaper_every
        self.extra_lessons = extra_lessons
        self.guest_net = guest_net
        # where the simulator listens (an IPv6 literal: labvm's kube_api is
        # https://[ADDR]:PORT) and its extra options (e.g. --k8s-version 1.35)
        self.kube_host = kube_host
        self.kube_args = list(kube_args)
        self.fenced = fenced
        self.logs = os.path.join(self.state, "logs")
        self.pids = os.path.join(self.state, "pids")
        self.conf = os.path.join(self.state, "labvm.conf")

    @property
    def db_password(self):
        """The database role's password: random, kept in the state folder (so a
        test can search every log for it; it is never 'labvm')."""
        path = self.path("db-password")
        try:
            with open(path) as f:
                return f.read().strip()
        except FileNotFoundError:
            os.makedirs(self.state, exist_ok=True)
            pw = "dbpw" + secrets.token_hex(12)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(pw + "\n")
            return pw

    @property
    def database(self):
        return (f"postgresql://labvm:{self.db_password}@127.0.0.1:{self.ports['pg']}/labvm"
                "?connect_timeout=5")

    # ---------------------------------------------------------------- util
    def path(self, *p):
        return os.path.join(self.state, *p)

    # what runs inside the backend Pod's network namespace with --backend pod
    IN_POD = ("console", "lighttpd", "apache-fcgi", "apache")
    # what runs inside the reaper CronJob's Pod (both modes)
    IN_REAPER_POD = ("reaper",)

    def backend_pod(self):
        """--backend pod: the simulator's STATE/kubesim/backend-pod.json (pid,
        netns, ip, name, namespace), else None."""
        if self.backend != "pod":
            return None
        try:
            with open(self.path("kubesim", "backend-pod.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def reaper_pod(self):
        """The simulator's STATE/kubesim/reaper-pod.json (the CronJob's Pod:
        pid, netns, ip, name, namespace), else None."""
        try:
            with open(self.path("kubesim", "reaper-pod.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def netns(self):
        b = self.backend_pod()
        return b["netns"] if b else None

    def spawn(self, name, argv, env=None, cwd=None):
        if name in self.IN_POD and self.backend == "pod":
            ns = self.netns()
            if not ns:
                raise StackError("--backend pod: the simulator named no backend Pod")
            argv = ["nsenter", f"--net={ns}", "--"] + list(argv)
        elif name in self.IN_REAPER_POD:
            r = self.reaper_pod()
            if not r:
                raise StackError("the simulator named no reaper Pod")
            argv = ["nsenter", f"--net={r['netns']}", "--"] + list(argv)
        os.makedirs(self.logs, exist_ok=True)
        os.makedirs(self.pids, exist_ok=True)
        out = open(os.path.join(self.logs, f"{name}.log"), "ab")
        e = dict(os.environ)
        e.update(env or {})
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=e, cwd=cwd or SRC, start_new_session=True)
        out.close()
        with open(os.path.join(self.pids, name), "w") as f:
            f.write(str(p.pid))
        return p

    def running(self, name):
        try:
            with open(os.path.join(self.pids, name)) as f:
                pid = int(f.read().strip())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None

    def stop(self, name, timeout=8):
        pidfile = os.path.join(self.pids, name)
        try:
            with open(pidfile) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            return
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 3)):
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                break
            except PermissionError:
                os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                try:
                    # started by this process (a test that runs its own stack):
                    # reap it, or its zombie keeps the group "alive"
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
                try:
                    os.killpg(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
            else:
                continue
            break
        try:
            os.unlink(pidfile)
        except OSError:
            pass

    # ------------------------------------------------------------ postgres
    def pg_up(self):
        d = self.path("pg")
        data = os.path.join(d, "data")
        run = os.path.join(d, "run")
        if not os.path.exists(os.path.join(data, "PG_VERSION")):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(run)
            shutil.chown(d, "postgres", "postgres")
            shutil.chown(run, "postgres", "postgres")
            subprocess.run(["runuser", "-u", "postgres", "--", f"{PGBIN}/initdb", "-D", data,
                            "-U", "postgres", "--auth-local=trust", "--auth-host=scram-sha-256",
                            "-E", "UTF8", "--locale=C.UTF-8"],
                           check=True, stdout=subprocess.DEVNULL)
        opts = (f"-p {self.ports['pg']} -k {run} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=400")
        r = subprocess.run(["runuser", "-u", "postgres", "--", f"{PGBIN}/pg_ctl", "-D", data,
                            "-l", os.path.join(d, "server.log"), "-w", "-t", "30", "-o", opts,
                            "start"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0 and "another server might be running" not in r.stderr:
            raise StackError(f"postgres did not start: {r.stderr.strip()}")
        su = ["runuser", "-u", "postgres", "--", "psql", "-X", "-q", "-h", run, "-p",
              str(self.ports["pg"]), "-U", "postgres", "-v", "ON_ERROR_STOP=1"]
        have = subprocess.run(su + ["-Atc", "SELECT 1 FROM pg_roles WHERE rolname='labvm'"],
                              capture_output=True, text=True, check=True).stdout.strip()
        if not have:
            subprocess.run(su + ["-c", "CREATE ROLE labvm LOGIN",
                                 "-c", "CREATE DATABASE labvm OWNER labvm"], check=True)
        # (again on every start: a state folder from before had the password 'labvm')
        subprocess.run(su + ["-c", f"ALTER ROLE labvm PASSWORD '{self.db_password}'"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([os.path.join(SRC, "sql", "migrate"), self.database], check=True,
                       stdout=subprocess.DEVNULL)

    def pg_down(self):
        data = self.path("pg", "data")
        if os.path.exists(os.path.join(data, "postmaster.pid")):
            subprocess.run(["runuser", "-u", "postgres", "--", f"{PGBIN}/pg_ctl", "-D", data,
                            "-m", "fast", "-w", "stop"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)

    # ------------------------------------------------------------- kubesim
    def guest_image(self):
        """--guest qemu: build the guest image now (no-op when current), with no
        time limit of its own, so the simulator's start-up stays short."""
        build = os.path.join(SRC, "tests", "kubesim", "guest-image", "build")
        os.makedirs(self.logs, exist_ok=True)
        t0 = time.monotonic()
        with open(os.path.join(self.logs, "guest-image.log"), "ab") as out:
            r = subprocess.run([build], stdout=out, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, cwd=SRC)
        if r.returncode != 0:
            raise StackError(f"guest image build failed; see {self.logs}/guest-image.log")
        took = time.monotonic() - t0
        if took > 5:
            log(f"guest image built in {took:.0f} s")

    def kube_up(self):
        sd = self.path("kubesim")
        os.makedirs(sd, exist_ok=True)
        ready = os.path.join(sd, "ready")
        if os.path.exists(ready):
            os.unlink(ready)
        argv = [os.path.join(SRC, "tests", "kubesim", "kubesim"), "--state-dir", sd,
                "--port", str(self.ports["kube"]), "--profile", self.profile,
                "--guest", self.guest,
                "--rbac", os.path.join(SRC, "conf", "k8s", "rbac.yaml"),
                # as hardened clusters (OpenShift) do: blockOwnerDeletion needs
                # update on the owner's finalizers, so the shipped RBAC is proven
                "--admission", "OwnerReferencesPermissionEnforcement",
                "--seed", os.path.join(SRC, "tests", "kubesim", "seeds", "labs.yaml")]
        if self.kube_host != "127.0.0.1":
            argv += ["--host", self.kube_host]
        if not self.demo:
            # what kube-apiserver offers (k8s.io/apiserver secure_serving.go):
            # labvm's clients must pick http/1.1 (the simulator refuses h2 and
            # counts it); the demo keeps http/1.1 alone for kubectl's sake
            argv += ["--alpn", "h2,http/1.1"]
        if self.time_scale:
            argv += ["--time-scale", str(self.time_scale)]
        if self.guest_net:
            argv += ["--guest-net", self.guest_net]
        argv += self.kube_args
        # labvm reaches the guests as the Pod of its shipped Deployment (its
        # labels: what networkpolicy.yaml admits), the reaper as a Pod of its
        # CronJob; the cluster is fenced by networkpolicy.yaml from the start,
        # as an operator applies conf/k8s/
        k8s = os.path.join(SRC, "conf", "k8s")
        argv += ["--backend-pod", os.path.join(k8s, "labvm-backend.yaml")]
        if self.fenced:
            argv += ["--seed", os.path.join(k8s, "networkpolicy.yaml")]
        if self.backend == "pod":
            # ... in a network namespace of its own, where labvm's processes run
            argv += ["--backend-netns"]
        wait = 60
        if self.guest == "qemu":
            self.guest_image()
            wait = 600   # the simulator checks the image again (a no-op now)
        p = self.spawn("kubesim", argv)
        deadline = time.monotonic() + wait
        while not os.path.exists(ready):
            if p.poll() is not None:
                raise StackError(f"kubesim exited with status {p.returncode}; see "
                                 f"{self.logs}/kubesim.log")
            if time.monotonic() > deadline:
                raise StackError(f"kubesim not ready after {wait} s")
            time.sleep(0.05)

    # --------------------------------------------------------- labvm.conf
    def write_conf(self):
        key = self.path("ticket.key")
        if not os.path.exists(key):
            with open(key, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
            os.chmod(key, 0o600)
        lessons = self.path("lessons")
        shutil.rmtree(lessons, ignore_errors=True)
        os.makedirs(lessons)
        dirs = [os.path.join(SRC, "conf", "lessons")]
        if self.extra_lessons:
            dirs.append(os.path.join(SRC, "tests", "lessons"))
        for d in dirs:
            for n in sorted(os.listdir(d)) if os.path.isdir(d) else []:
                if n.endswith(".json"):
                    shutil.copy(os.path.join(d, n), lessons)
            # the lesson guides (lesson field "guide"), served at /guides/ too
            if os.path.isdir(os.path.join(d, "guides")):
                shutil.copytree(os.path.join(d, "guides"), os.path.join(lessons, "guides"),
                                dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.py"))
        sd = self.path("kubesim")
        conf = {
            "environment": self.environment,
            "namespace": "labs",
            "kube_api": f"https://{self.kube_hostport()}",
            # the kubelet's projection: token -> ..data/token, swapped on rotation
            "kube_token_file": os.path.join(sd, "serviceaccount", "token"),
            "kube_ca_file": os.path.join(sd, "ca.crt"),
            "database": self.database,
            "vm_capacity": str(self.capacity),
            "pod_capacity": "32" if self.demo else "6",
            "lessons_dir": lessons,
            "label_prefix": "labvm.io",
            "ticket_key_file": key,
            "fcgi_threads": "4",
            # tests see a keepalive comment within seconds
            "stream_keepalive_s": "2",
            "console_listen": f"127.0.0.1:{self.ports['console']}",
            "console_path": "/console/",
            "orphan_grace_s": "300",  # >= the longest start of kubeadm-cluster
            "operators": "operator",
            "teachers": "teacher1",
            "log_level": "info",
        }
        if self.extra_lessons:
            # issue #28: the idle test lessons (tests/lessons/test-idle*.json,
            # test-class-idle.json) end after 12 s without activity; the
            # warning comes 4 s before (--check refuses a warning as long)
            conf["idle_warning_s"] = "4"
        if not self.demo:
            # suites start and end many labs per user; t310 tests the limit
            # on a labvm.fcgi of its own (tests/lib/fcgiclient.py)
            conf["start_rate_max"] = "0"
        with open(self.conf, "w") as f:
            f.write("# generated by tests/stack; see conf/labvm.conf.example\n")
            for k, v in conf.items():
                f.write(f"{k} = {v}\n")

    def write_htpasswd(self):
        out = self.path("htpasswd")
        if getattr(self, "_htpasswd_done", False):
            return out
        self._htpasswd_done = True  # written anew by every up: users may have changed
        h = subprocess.run(["openssl", "passwd", "-apr1", "-salt", "labvmdmo", PASSWORD],
                           capture_output=True, text=True, check=True).stdout.strip()
        with open(out, "w") as f:
            for i in range(1, (USERS if self.demo else TEST_USERS) + 1):
                f.write(f"student{i}:{h}\n")
            f.write(f"teacher:{h}\n")
            # the teacher's room (issue #29): teacher1 teaches every lesson
            # (labvm.conf teachers), teacher2 linux-basics (its lesson's
            # "teachers"), teacher3 nothing
            for i in (1, 2, 3):
                f.write(f"teacher{i}:{h}\n")
            f.write(f"operator:{h}\n")
        os.chmod(out, 0o644)
        return out

    def lessons_dir(self):
        """labvm.conf's lessons_dir (a front end of tests/e2e/frontend.py
        serves the shared stack's), else this stack's."""
        try:
            with open(self.conf) as f:
                for line in f:
                    k, _, v = line.partition("=")
                    if k.strip() == "lessons_dir" and v.strip():
                        return v.strip()
        except OSError:
            pass
        return self.path("lessons")

    def render(self, template, out, extra):
        with open(template) as f:
            text = f.read()
        values = {
            "STATE": self.state, "SRC": SRC, "BIN": self.bindir, "WEB": os.path.join(SRC, "web"),
            "CONF": self.conf, "CONSOLE_PORT": str(self.ports["console"]),
            "HTPASSWD": self.write_htpasswd(), "LESSONS": self.lessons_dir(),
        }
        values.update(extra)
        for k, v in values.items():
            text = text.replace("@" + k + "@", v)
        with open(out, "w") as f:
            f.write(text)
        return out

    # ----------------------------------------------------------- services
    def console_up(self):
        exe = os.path.join(self.bindir, "labvm-console")
        if not os.path.exists(exe):
            log("labvm-console not built; the console is not started")
            return
        p = self.spawn("console", [exe], env={"LABVM_CONF": self.conf})
        self.wait_tcp(self.ports["console"], 15, p, "labvm-console")

    def lighttpd_up(self):
        os.makedirs(self.path("run"), exist_ok=True)
        conf = self.render(os.path.join(SRC, "conf", "lighttpd", "labvm.conf.in"),
                           self.path("lighttpd.conf"), {"PORT": str(self.ports["lighttpd"])})
        r = subprocess.run(["lighttpd", "-tt", "-f", conf], capture_output=True, text=True)
        if r.returncode != 0:
            raise StackError(f"lighttpd config: {r.stderr.strip()}")
        p = self.spawn("lighttpd", ["lighttpd", "-D", "-f", conf])
        self.wait_tcp(self.ports["lighttpd"], 15, p, "lighttpd")

    def apache_up(self):
        run = self.path("run", "apache")
        os.makedirs(run, exist_ok=True)
        sock = self.path("run", "labvm-fcgi-apache.sock")
        if os.path.exists(sock):
            os.unlink(sock)
        # labvm.fcgi under spawn-fcgi, in the foreground (-n) so it can be stopped by PID;
        # started again when it dies, as systemd does in production (Restart=on-failure)
        self.spawn("apache-fcgi", ["/bin/sh", "-c", 'while :; do "$@"; sleep 0.2; done', "sh",
                                   "spawn-fcgi", "-n", "-s", sock, "-M", "0666", "--",
                                   os.path.join(self.bindir, "labvm.fcgi")],
                   env={"LABVM_CONF": self.conf})
        conf = self.render(os.path.join(SRC, "conf", "apache", "labvm.conf.in"),
                           self.path("apache.conf"),
                           {"PORT": str(self.ports["apache"]), "FCGI_SOCKET": sock,
                            "RUN": run})
        r = subprocess.run(["apache2", "-t", "-f", conf], capture_output=True, text=True)
        if r.returncode != 0:
            raise StackError(f"apache config: {r.stderr.strip()}")
        p = self.spawn("apache", ["apache2", "-f", conf, "-DFOREGROUND"])
        self.wait_tcp(self.ports["apache"], 15, p, "apache")

    def wait_tcp(self, port, timeout, proc, what):
        """127.0.0.1:port listening where the service runs (inside the backend
        Pod with --backend pod: the host's port is the relay's)."""
        ns = self.netns()
        if ns:
            import nsrelay
            return nsrelay.in_netns(ns, wait_tcp, "127.0.0.1", port, timeout, proc, what)
        return wait_tcp("127.0.0.1", port, timeout, proc, what)

    def relay_up(self):
        """--backend pod: the relays between the host's loopback and the Pod's
        (tests/lib/nsrelay.py): into the Pod the front ends and the bridge,
        out of it PostgreSQL and the API server."""
        b = self.backend_pod()
        ready = self.path("run", "relay.ready")
        os.makedirs(self.path("run"), exist_ok=True)
        if os.path.exists(ready):
            os.unlink(ready)
        argv = [sys.executable, os.path.join(SRC, "tests", "lib", "nsrelay.py"),
                "--netns", b["netns"], "--ready", ready]
        for k in ("pg", "kube"):
            argv += ["--reverse", str(self.ports[k])]
        for k in sorted({self.ports[fe] for fe in self.frontends()} | {self.ports["console"]}):
            argv += ["--forward", str(k)]
        p = self.spawn("relay", argv)
        deadline = time.monotonic() + 15
        while not os.path.exists(ready):
            if p.poll() is not None:
                raise StackError(f"nsrelay exited with status {p.returncode}; see "
                                 f"{self.logs}/relay.log")
            if time.monotonic() > deadline:
                raise StackError("nsrelay not ready after 15 s")
            time.sleep(0.05)

    def reaper_relay_up(self):
        """The reaper Pod's relay: PostgreSQL and the API server (the host's
        loopback ports) on the Pod's 127.0.0.1, as for the backend Pod."""
        r = self.reaper_pod()
        if not r:
            return
        ready = self.path("run", "reaper-relay.ready")
        os.makedirs(self.path("run"), exist_ok=True)
        if os.path.exists(ready):
            os.unlink(ready)
        argv = [sys.executable, os.path.join(SRC, "tests", "lib", "nsrelay.py"),
                "--netns", r["netns"], "--ready", ready]
        for k in ("pg", "kube"):
            argv += ["--reverse", str(self.ports[k])]
        p = self.spawn("reaper-relay", argv)
        deadline = time.monotonic() + 15
        while not os.path.exists(ready):
            if p.poll() is not None:
                raise StackError(f"nsrelay (reaper) exited with status {p.returncode}; see "
                                 f"{self.logs}/reaper-relay.log")
            if time.monotonic() > deadline:
                raise StackError("nsrelay (reaper) not ready after 15 s")
            time.sleep(0.05)

    def reaper_up(self):
        exe = os.path.join(self.bindir, "labvm-reaper")
        # after each pass, the reaper CronJob's status (when the cluster has
        # one: kubesim's /_sim/cronjobs/NS/NAME/ran, what the CronJob
        # controller writes), so that labvm-doctor sees the reaper run
        sd = self.path("kubesim")
        ran = (f"curl -sS --http1.1 -o /dev/null --cacert {sd}/ca.crt -X POST "
               f"-H \"Authorization: Bearer $(cat {sd}/admin-token)\" "
               f"-d \"{{\\\"succeeded\\\": $ok}}\" "
               f"https://{self.kube_hostport()}/_sim/cronjobs/labs/labvm-reaper/ran")
        loop = (f"while :; do sleep {int(self.reaper_every)}; "
                f"if LABVM_CONF={self.conf} {exe}; then ok=true; else ok=false; fi; "
                f"{ran} || true; done")
        self.spawn("reaper", ["/bin/sh", "-c", loop])

    def wait_http(self, url, timeout=20):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code
            except OSError as e:
                last = e
                time.sleep(0.1)
        raise StackError(f"{url} did not answer: {last}")

    def frontends(self):
        if self.frontend == "both":
            return ["lighttpd", "apache"]
        return [self.frontend]

    def url(self, fe=None):
        fe = fe or self.frontends()[0]
        return f"http://127.0.0.1:{self.ports[fe]}"

    def write_env(self):
        sd = self.path("kubesim")
        env = {
            "LABVM_URL": self.url(),
            "LABVM_KUBE_URL": f"https://{self.kube_hostport()}",
            "LABVM_KUBE_ADMIN_TOKEN_FILE": os.path.join(sd, "admin-token"),
            "LABVM_KUBE_BACKEND_TOKEN_FILE": os.path.join(sd, "backend-token"),
            "LABVM_KUBE_CA": os.path.join(sd, "ca.crt"),
            "LABVM_DATABASE": self.database,
            "LABVM_NAMESPACE": "labs",
            "LABVM_ENVIRONMENT": self.environment,
            "LABVM_CONF": self.conf,
            "LABVM_BIN": self.bindir,
            "LABVM_STATE": self.state,
            "LABVM_CONSOLE_URL": f"ws://127.0.0.1:{self.ports['console']}",
            "LABVM_PASSWORD": PASSWORD,
            "LABVM_FRONTENDS": " ".join(self.frontends()),
            "LABVM_BACKEND": self.backend,
        }
        env["LABVM_FENCED"] = "1" if self.fenced else "0"
        r = self.reaper_pod()
        if r:
            env["LABVM_REAPER_POD"] = f"{r['namespace']}/{r['name']}"
            env["LABVM_REAPER_POD_IP"] = r["ip"]
            env["LABVM_REAPER_NETNS"] = r["netns"]
        b = self.backend_pod()
        if b:
            env["LABVM_BACKEND_POD"] = f"{b['namespace']}/{b['name']}"
            env["LABVM_BACKEND_POD_IP"] = b["ip"]
            env["LABVM_BACKEND_NETNS"] = b["netns"]
        for fe in self.frontends():
            env[f"LABVM_{fe.upper()}_URL"] = self.url(fe)
        with open(self.path("env"), "w") as f:
            for k, v in env.items():
                f.write(f"{k}='{v}'\n")
        return env

    def kube_hostport(self):
        h = self.kube_host
        return (f"[{h}]" if ":" in h else h) + f":{self.ports['kube']}"

    # ------------------------------------------------------------- up/down
    def up(self):
        os.makedirs(self.state, exist_ok=True)
        if self.running_any():
            raise StackError(f"a stack is already running in {self.state}; stop it first")
        busy = sorted({f"{k}={p}" for k, p in self.ports.items() if not port_free(p)})
        if busy:
            raise StackError("ports in use: " + ", ".join(busy) +
                             " (another stack running? try the matching 'down')")
        t0 = time.monotonic()
        self.pg_up()
        self.kube_up()
        self.write_conf()
        if self.backend == "pod":
            self.relay_up()
        self.reaper_relay_up()
        self.console_up()
        for fe in self.frontends():
            getattr(self, f"{fe}_up")()
            self.wait_http(self.url(fe) + "/api/healthz")
        if self.reaper_every:
            self.reaper_up()
        env = self.write_env()
        log(f"up in {time.monotonic() - t0:.1f}s: {env['LABVM_URL']} "
            f"(simulator {env['LABVM_KUBE_URL']}, profile {self.profile}, guests {self.guest})")
        log("fenced: conf/k8s/networkpolicy.yaml applied" if self.fenced else
            "UNFENCED: no NetworkPolicy applied (--unfenced)")
        if r := self.reaper_pod():
            log(f"reaper: labvm-reaper runs in Pod {r['namespace']}/{r['name']} at {r['ip']} "
                f"(nsenter --net={r['netns']})")
        if b := self.backend_pod():
            log(f"backend: labvm.fcgi, the front end and labvm-console run in Pod "
                f"{b['namespace']}/{b['name']} at {b['ip']} (nsenter --net={b['netns']}); "
                f"relays: {env['LABVM_URL']} into the Pod, PostgreSQL and the API out of it")
        return env

    def running_any(self):
        return os.path.isdir(self.pids) and any(self.running(n) for n in os.listdir(self.pids))

    def down(self):
        for name in ("reaper", "apache", "apache-fcgi", "lighttpd", "console", "relay",
                     "reaper-relay", "kubesim"):
            self.stop(name)
        self.pg_down()
        log(f"down: {self.state}")
