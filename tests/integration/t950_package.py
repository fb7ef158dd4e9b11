#!/usr/bin/python3
"""The Debian package, end to end on this machine: dpkg-buildpackage builds
the labvm binary package from a copy of the source; lintian finds nothing
beyond the explained overrides; the package installs (system user, a random
ticket key, labvm.conf a conffile that a reinstall leaves alone); its
migrations run against the test PostgreSQL (a database of its own); the
installed binaries with the installed configuration (the lighttpd snippet
and the Apache site, with only ports and log paths rewritten) serve a
start -> ready -> console -> grade -> end on the simulator; dpkg --purge
leaves nothing behind but the system user (Debian policy).

It changes the machine (/usr/lib/labvm, /etc/labvm, user labvm), under a
lock, and is skipped when labvm is already installed (someone's own copy).
timeout: 600
"""
import asyncio
import fcntl
import grp
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
import urllib.parse

import websockets

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from labclient import Api, Kube, wait_until  # noqa: E402
from tap import T  # noqa: E402

t = T()
ENV = os.environ
SRC = ENV.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STATE = os.path.join(ENV["LABVM_STATE"], "pkg")
BASE = urllib.parse.urlsplit(ENV.get("LABVM_LIGHTTPD_URL") or ENV["LABVM_URL"]).port - 80
PORTS = dict(lighttpd=BASE + 181, apache=BASE + 191, console=BASE + 683)
PGPORT = urllib.parse.urlsplit(ENV["LABVM_DATABASE"]).port
PGRUN = os.path.join(ENV["LABVM_STATE"], "pg", "run")
PKG_DB = "labvm_pkg"
PKG_DSN = ENV["LABVM_DATABASE"].replace("/labvm?", f"/{PKG_DB}?")
ENVIRONMENT = "pkgtest"
LESSON = "linux-basics"
PROTO = "labvm-console.v1"
PASSWORD = "pkg-test-pw"
USERS = {"lighttpd": "pkgstudent1", "apache": "pkgstudent2"}
procs = {}
facts = {}


def sh(*argv, check=True, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


def doctor(*args):
    """The installed labvm-doctor as the system user, with the installed labvm.conf."""
    return sh("setpriv", "--reuid=labvm", "--regid=labvm", "--init-groups",
              "/usr/lib/labvm/labvm-doctor", "--no-canary", *args, check=False,
              env=dict(ENV, LABVM_CONF="/etc/labvm/labvm.conf"))


def installed():
    r = sh("dpkg-query", "-W", "-f=${Status}", "labvm", check=False)
    return r.returncode == 0 and r.stdout.endswith(" installed")


def spawn(name, argv, env=None):
    out = open(os.path.join(STATE, f"{name}.log"), "ab")
    e = dict(ENV)
    e.update(env or {})
    procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=e, start_new_session=True)
    out.close()


def stop_all():
    for name, p in list(procs.items()):
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)
    procs.clear()


def psql_admin(sql):
    return sh("runuser", "-u", "postgres", "--", "psql", "-X", "-q", "-h", PGRUN, "-p", str(PGPORT),
              "-U", "postgres", "-v", "ON_ERROR_STOP=1", "-Atc", sql)


def http_status(url):
    import urllib.request
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


# ------------------------------------------------------------------- skip?
skip = None
for tool in ("dpkg-buildpackage", "dh", "lintian", "spawn-fcgi", "setpriv"):
    if not shutil.which(tool):
        skip = f"{tool} is not installed (tests/deps installs it)"
if not skip and installed():
    skip = "a labvm package is already installed on this machine: not touching it"
lock = open("/run/lock/labvm-package-test.lock", "w")
if not skip:
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        skip = "another package test is running on this machine"

user_existed = True
try:
    pwd.getpwnam("labvm")
except KeyError:
    user_existed = False


@t.test(name="dpkg-buildpackage -us -uc -b builds the labvm package", skip=skip)
def build():
    shutil.rmtree(STATE, ignore_errors=True)
    src = os.path.join(STATE, "src", "labvm")
    os.makedirs(src)
    files = sh("git", "-C", SRC, "ls-files", "-co", "--exclude-standard").stdout.split("\n")
    files = [f for f in files if f and f != ".cache" and os.path.isfile(os.path.join(SRC, f))]
    sh("tar", "-C", SRC, "-cf", os.path.join(STATE, "src.tar"), "--", *files)
    sh("tar", "-C", src, "-xf", os.path.join(STATE, "src.tar"))
    if os.path.isdir(os.path.join(SRC, "web", "node_modules")):   # saves the npm download
        shutil.copytree(os.path.join(SRC, "web", "node_modules"), os.path.join(src, "web", "node_modules"),
                        symlinks=True)
    r = sh("dpkg-buildpackage", "-us", "-uc", "-b", cwd=src, check=False)
    with open(os.path.join(STATE, "build.log"), "w") as f:
        f.write(r.stdout + r.stderr)
    t.require(r.returncode == 0, f"dpkg-buildpackage exit {r.returncode}: {r.stderr[-1500:]}")
    debs = [f for f in os.listdir(os.path.join(STATE, "src")) if re.match(r"labvm_.*\.deb$", f)]
    t.eq(len(debs), 1, "one labvm_*.deb", debs)
    facts["deb"] = os.path.join(STATE, "src", debs[0])
    facts["changes"] = [os.path.join(STATE, "src", f) for f in os.listdir(os.path.join(STATE, "src"))
                        if f.endswith(".changes")][0]
    size = os.path.getsize(facts["deb"])
    inst = sh("dpkg-deb", "-f", facts["deb"], "Installed-Size").stdout.strip()
    t.diag(f"package: {debs[0]} {size / 1024:.0f} KiB, installed {inst} KiB")
    listing = sh("dpkg-deb", "-c", facts["deb"]).stdout
    for path in ("./usr/lib/labvm/labvm.fcgi", "./usr/lib/labvm/labvm-console",
                 "./usr/lib/labvm/labvm-reaper", "./usr/lib/labvm/labvm-doctor",
                 "./usr/share/labvm/web/index.html",
                 "./usr/share/labvm/web/vendor/xterm.js", "./usr/share/labvm/web/vendor/manifest.json",
                 "./usr/share/labvm/web/operator.html",
                 "./usr/share/labvm/web/operator.js", "./usr/share/labvm/sql/migrate",
                 "./etc/labvm/labvm.conf", "./etc/cron.d/labvm",
                 "./etc/lighttpd/conf-available/50-labvm.conf", "./etc/apache2/sites-available/labvm.conf",
                 "./lib/systemd/system/labvm-fcgi.service", "./lib/systemd/system/labvm-console.service"):
        t.ok(path in listing, f"the package has {path}")
    # every file of the page (the student page is several scripts), and the guide's renderer
    page = sorted(f for f in os.listdir(os.path.join(SRC, "web")) if re.search(r"\.(html|js|css)$", f))
    missing = [f for f in page if f"./usr/share/labvm/web/{f} " not in listing.replace("\n", " \n")]
    t.ok(page and not missing, f"the package has the page's {len(page)} files", missing)
    t.ok("./usr/share/labvm/web/vendor/markdown-it.umd.min.js" in listing, "the package has markdown-it (the guide)")
    t.ok("./etc/labvm/ticket.key" not in listing, "no ticket key in the package (postinst makes one)")


@t.test(name="lintian: no error or warning beyond the explained overrides", skip=skip)
def lint():
    t.require("deb" in facts, "the package was built")
    r = sh("lintian", "--pedantic", "-I", facts["changes"], check=False)
    tags = [ln for ln in r.stdout.splitlines() if re.match(r"^[EWIP]: ", ln)]
    t.diag(f"lintian: {len(tags)} tags" + "".join("\n" + x for x in tags))
    t.eq([x for x in tags if x.startswith(("E:", "W:"))], [], "no errors, no warnings")
    t.eq(r.returncode, 0, "lintian exit status", r.stderr[-500:])


@t.test(name="install: the system user, a random ticket key (0640 root:labvm), conffiles", skip=skip)
def install():
    t.require("deb" in facts, "the package was built")
    r = sh("dpkg", "-i", facts["deb"], check=False, env=dict(ENV, DEBIAN_FRONTEND="noninteractive"))
    t.require(r.returncode == 0, f"dpkg -i: {r.stdout[-1500:]} {r.stderr[-1500:]}")
    facts["installed"] = True
    facts["files"] = sh("dpkg", "-L", "labvm").stdout.split("\n")
    u = pwd.getpwnam("labvm")
    t.ok(u.pw_uid < 1000 and u.pw_shell in ("/usr/sbin/nologin", "/bin/false"), "labvm is a system user",
         (u.pw_uid, u.pw_shell))
    t.eq(grp.getgrgid(u.pw_gid).gr_name, "labvm", "its own group")
    st = os.stat("/etc/labvm/ticket.key")
    t.eq((stat.S_IMODE(st.st_mode), st.st_uid, grp.getgrgid(st.st_gid).gr_name), (0o640, 0, "labvm"),
         "ticket.key 0640 root:labvm")
    key = open("/etc/labvm/ticket.key").read().strip()
    t.ok(re.fullmatch(r"[0-9a-f]{64}", key), "the key is 32 random bytes in hex")
    facts["key"] = key
    st = os.stat("/etc/labvm/labvm.conf")
    t.eq((stat.S_IMODE(st.st_mode), grp.getgrgid(st.st_gid).gr_name), (0o640, "labvm"),
         "labvm.conf 0640 root:labvm (it holds the database conninfo)")
    conff = sh("dpkg-query", "-W", "-f=${Conffiles}", "labvm").stdout
    for c in ("/etc/labvm/labvm.conf", "/etc/cron.d/labvm", "/etc/labvm/lessons/linux-basics.json",
              "/etc/lighttpd/conf-available/50-labvm.conf", "/etc/apache2/sites-available/labvm.conf"):
        t.ok(c in conff, f"{c} is a conffile")
    for p in ("/usr/lib/labvm/labvm.fcgi", "/usr/lib/labvm/labvm-console", "/usr/lib/labvm/labvm-reaper"):
        t.ok(os.access(p, os.X_OK), f"{p} installed")
    cron = open("/etc/cron.d/labvm").read()
    t.ok(re.search(r"^\* \* \* \* \* labvm .*/usr/lib/labvm/labvm-reaper$", cron, re.M),
         "the cron job runs the installed reaper as labvm", cron)


@t.test(name="configure: a changed labvm.conf survives a reinstall; --check passes", skip=skip)
def configure():
    t.require(facts.get("installed"), "installed")
    sd = os.path.join(ENV["LABVM_STATE"], "kubesim")
    for src, dst in ((os.path.join(sd, "backend-token"), "/etc/labvm/kube-token"),
                     (os.path.join(sd, "ca.crt"), "/etc/labvm/kube-ca.crt")):
        shutil.copy(src, dst)
        os.chown(dst, 0, grp.getgrnam("labvm").gr_gid)
        os.chmod(dst, 0o640)
    with open("/etc/labvm/htpasswd", "w") as f:
        h = sh("openssl", "passwd", "-apr1", PASSWORD).stdout.strip()
        for u in USERS.values():
            f.write(f"{u}:{h}\n")
    os.chmod("/etc/labvm/htpasswd", 0o644)
    want = {"environment": ENVIRONMENT, "namespace": ENV.get("LABVM_NAMESPACE", "labs"),
            "kube_api": ENV["LABVM_KUBE_URL"], "kube_token_file": "/etc/labvm/kube-token",
            "kube_ca_file": "/etc/labvm/kube-ca.crt", "database": PKG_DSN,
            "console_listen": f"127.0.0.1:{PORTS['console']}"}
    conf = open("/etc/labvm/labvm.conf").read()
    for k, v in want.items():
        conf, n = re.subn(rf"^{k} = .*$", f"{k} = {v}", conf, flags=re.M)
        t.require(n == 1, f"labvm.conf has one {k}")
    with open("/etc/labvm/labvm.conf", "w") as f:
        f.write(conf)
    r = sh("dpkg", "-i", facts["deb"], check=False, env=dict(ENV, DEBIAN_FRONTEND="noninteractive"))
    t.eq(r.returncode, 0, "reinstall", r.stderr[-800:])
    t.eq(open("/etc/labvm/labvm.conf").read(), conf, "the changed labvm.conf is kept")
    t.eq(open("/etc/labvm/ticket.key").read().strip(), facts["key"], "the ticket key is kept")
    r = sh("/usr/lib/labvm/labvm.fcgi", "--check", check=False, env=dict(ENV, LABVM_CONF="/etc/labvm/labvm.conf"))
    t.eq(r.returncode, 0, "labvm.fcgi --check on the installed configuration", r.stderr[-500:])
    facts["configured"] = True


@t.test(name="migrations: /usr/share/labvm/sql/migrate on a new database of the test PostgreSQL", skip=skip)
def migrate():
    t.require(facts.get("configured"), "configured")
    psql_admin(f"DROP DATABASE IF EXISTS {PKG_DB}")
    psql_admin(f"CREATE DATABASE {PKG_DB} OWNER labvm")
    r = doctor("--only", "database")
    t.ok(r.returncode == 1 and "the database was never migrated" in r.stdout,
         "before: the installed labvm-doctor says the database was never migrated", r.stdout[-600:])
    r = sh("/usr/share/labvm/sql/migrate", PKG_DSN, check=False)
    t.eq(r.returncode, 0, "migrate", r.stderr[-800:])
    applied = sorted(re.findall(r"applied (\S+)", r.stdout))
    shipped = sorted(f[:-4] for f in os.listdir("/usr/share/labvm/sql") if f.endswith(".sql"))
    t.eq(applied, shipped, "every shipped migration applied once")
    r = sh("/usr/share/labvm/sql/migrate", PKG_DSN)
    t.eq(r.stdout.strip(), "", "a second run applies nothing")
    facts["migrated"] = True


@t.test(name="the installed labvm-doctor on this install: credentials, permissions, the "
             "installed lessons, the migrated database", skip=skip)
def installed_doctor():
    t.require(facts.get("migrated"), "migrated")
    r = doctor("--only", "credentials,permissions,lessons,database")
    t.diag("the installed labvm-doctor:\n" + r.stdout)
    t.eq(r.returncode, 0, "exit 0", r.stdout[-1500:] + r.stderr[-500:])
    t.ok(re.search(r"^ok +2 permissions +all \d+ verbs", r.stdout, re.M), "every verb granted")
    t.ok(re.search(r"^ok +5 lessons +\d+ lesson files pass labvm\.fcgi --check", r.stdout, re.M),
         "the installed lessons pass --check (as user labvm: its scratch files in /tmp)")
    t.ok(re.search(r"^ok +7 database +the database is migrated", r.stdout, re.M), "migrated")


def lighttpd_up():
    snippet = open("/etc/lighttpd/conf-available/50-labvm.conf").read()
    snippet = snippet.replace('"port" => 7682', f'"port" => {PORTS["console"]}')
    snippet = snippet.replace("/run/lighttpd/labvm-fcgi.sock", os.path.join(STATE, "labvm-fcgi.sock"))
    snippet = snippet.replace("/var/cache/lighttpd/compress/labvm", os.path.join(STATE, "compress"))
    with open(os.path.join(STATE, "50-labvm.conf"), "w") as f:
        f.write(snippet)
    main = f"""server.modules = ( "mod_access", "mod_accesslog" )
server.bind = "127.0.0.1"
server.port = {PORTS['lighttpd']}
server.pid-file = "{STATE}/lighttpd.pid"
server.errorlog = "{STATE}/lighttpd-error.log"
accesslog.filename = "{STATE}/lighttpd-access.log"
mimetype.assign = ( ".html" => "text/html; charset=utf-8", ".js" => "text/javascript; charset=utf-8",
                    ".css" => "text/css; charset=utf-8", ".svg" => "image/svg+xml" )
include "{STATE}/50-labvm.conf"
"""
    conf = os.path.join(STATE, "lighttpd.conf")
    with open(conf, "w") as f:
        f.write(main)
    sh("lighttpd", "-tt", "-f", conf)
    spawn("lighttpd", ["lighttpd", "-D", "-f", conf])


def apache_up():
    site = open("/etc/apache2/sites-available/labvm.conf").read()
    site = re.sub(r"<VirtualHost \*:80>.*?</VirtualHost>", "", site, flags=re.S)
    site = site.replace("<VirtualHost *:443>", f"<VirtualHost 127.0.0.1:{PORTS['apache']}>")
    site = re.sub(r"^\s*SSL\w+.*$", "", site, flags=re.M)
    site = site.replace("${APACHE_LOG_DIR}", STATE)
    site = site.replace("ws://127.0.0.1:7682/", f"ws://127.0.0.1:{PORTS['console']}/")
    run = os.path.join(STATE, "apache")
    os.makedirs(run, exist_ok=True)
    with open(os.path.join(STATE, "apache-site.conf"), "w") as f:
        f.write(site)
    mods = ["mpm_event", "authz_core", "authz_user", "authn_core", "authn_file", "auth_basic", "headers",
            "mime", "dir", "proxy", "proxy_fcgi", "proxy_wstunnel", "log_config", "filter", "deflate",
            "brotli", "alias"]   # the a2enmod list of conf/apache/labvm.conf (alias: /guides/)
    main = [f'ServerRoot "{run}"', f'DefaultRuntimeDir "{run}"', f'PidFile "{run}/apache.pid"',
            f'ErrorLog "{STATE}/apache-error.log"', f"Listen 127.0.0.1:{PORTS['apache']}",
            "ServerName 127.0.0.1", "User www-data", "Group www-data", "TypesConfig /etc/mime.types"]
    for m in mods:
        so = f"/usr/lib/apache2/modules/mod_{m}.so"
        if os.path.exists(so):
            main.append(f"LoadModule {m}_module {so}")
    main.append(f'Include "{STATE}/apache-site.conf"')
    conf = os.path.join(STATE, "apache.conf")
    with open(conf, "w") as f:
        f.write("\n".join(main) + "\n")
    # labvm.fcgi as the installed unit starts it (ExecStart of labvm-fcgi.service)
    unit = open("/lib/systemd/system/labvm-fcgi.service").read()
    m = re.search(r"^ExecStart=((?:[^\n]*\\\n)*[^\n]*)$", unit, re.M)
    argv = m.group(1).replace("\\\n", " ").split()
    os.makedirs("/run/labvm", exist_ok=True)       # RuntimeDirectory=labvm
    facts["run_labvm"] = True
    spawn("labvm-fcgi", argv, env={"LABVM_CONF": "/etc/labvm/labvm.conf"})
    wait_until(lambda: os.path.exists("/run/labvm/fcgi.sock"), 10, what="/run/labvm/fcgi.sock")
    sh("apache2", "-t", "-f", conf)
    spawn("apache", ["apache2", "-f", conf, "-DFOREGROUND"])


@t.test(name="the installed binaries and configuration behind lighttpd and Apache", skip=skip)
def serve():
    t.require(facts.get("migrated"), "migrated")
    os.makedirs(STATE, exist_ok=True)
    # the console bridge as its unit runs it: user labvm
    spawn("console", ["setpriv", "--reuid=labvm", "--regid=labvm", "--init-groups",
                      "/usr/lib/labvm/labvm-console"], env={"LABVM_CONF": "/etc/labvm/labvm.conf"})
    lighttpd_up()
    apache_up()
    for fe in ("lighttpd", "apache"):
        url = f"http://127.0.0.1:{PORTS[fe]}"
        wait_until(lambda: http_status(url + "/api/healthz") is not None, 20, what=f"{fe} answers")
        t.eq(http_status(url + "/api/healthz"), 401, f"{fe}: the front end asks for a login")
        r = Api(USERS[fe], password=PASSWORD, base=url).request("GET", "/api/healthz")
        t.eq(r.status, 200, f"{fe}: /api/healthz through the installed configuration", r.body[:300])
        r = Api(USERS[fe], password=PASSWORD, base=url).request("GET", "/")
        t.ok(r.status == 200 and "app.js" in r.body, f"{fe}: the installed page", r.status)
        for path in ("/vendor/manifest.json", "/vendor/xterm.js", "/operator.html", "/text.js", "/lab.js",
                     "/guidepane.js", "/guide.js", "/guide.css", "/i18n.js"):
            r = Api(USERS[fe], password=PASSWORD, base=url).request("GET", path)
            t.eq(r.status, 200, f"{fe}: GET {path}")
    facts["serving"] = True


async def console_roundtrip(base, url, user):
    import base64
    cred = base64.b64encode(f"{user}:{PASSWORD}".encode()).decode()
    ws = await websockets.connect(base.replace("http://", "ws://") + url, subprotocols=[PROTO],
                                  extra_headers={"Authorization": f"Basic {cred}"}, open_timeout=10,
                                  ping_interval=None, close_timeout=2)
    out = bytearray()
    try:
        await ws.send(b"echo hello > /root/hello.txt; echo pkg-$((40+2))\r")
        end = time.monotonic() + 20
        while b"pkg-42" not in out and time.monotonic() < end:
            try:
                m = await asyncio.wait_for(ws.recv(), end - time.monotonic())
            except asyncio.TimeoutError:
                break
            if isinstance(m, bytes):
                out += m
    finally:
        await ws.close()
    return bytes(out)


for fe in ("lighttpd", "apache"):
    @t.test(name=f"{fe}: start -> ready -> console -> grade -> end on the installed package", skip=skip)
    def lifecycle(fe=fe):
        t.require(facts.get("serving"), "serving")
        base = f"http://127.0.0.1:{PORTS[fe]}"
        api = Api(USERS[fe], password=PASSWORD, base=base)
        r = api.start(LESSON)
        t.require(r.status == 201, f"start: {r}")
        sid = r.json["id"]
        try:
            s = api.wait_state(sid, ("ready", "failed"), 90)
            t.require(s["state"] == "ready", f"ready: {s}")
            r = api.ticket(sid)
            t.require(r.status == 200, f"console ticket: {r}")
            out = asyncio.run(console_roundtrip(base, r.json["url"], USERS[fe]))
            t.ok(b"pkg-42" in out, "the console runs a command in the guest", out[-300:])
            r = api.grade(sid)
            t.eq(r.status, 200, "grade", r.body[:300])
            steps = (r.json or {}).get("steps") or []
            t.ok(steps and any(x.get("passed") for x in steps), "the step done in the console passes", steps)
        finally:
            r = api.end(sid)
            t.ok(r.status in (200, 204), "end", r)
        vms = Kube().list("virtualmachines", f"labvm.io/session-id={sid}")
        wait_until(lambda: not Kube().list("virtualmachines", f"labvm.io/session-id={sid}"), 30,
                   what="its VM is deleted")
        t.ok(True, f"ended; {len(vms)} VM(s) were left at the end call")


@t.test(name="dpkg --purge leaves nothing but the system user (Debian policy)", skip=skip)
def purge():
    stop_all()
    t.require(facts.get("installed"), "installed")
    # what the admin (this test) added goes first: purge does not own it
    for f in ("/etc/labvm/kube-token", "/etc/labvm/kube-ca.crt", "/etc/labvm/htpasswd"):
        if os.path.exists(f):
            os.unlink(f)
    shutil.rmtree("/run/labvm", ignore_errors=True)
    r = sh("dpkg", "--purge", "labvm", check=False)
    t.eq(r.returncode, 0, "dpkg --purge", r.stderr[-800:])
    t.ok(not installed(), "labvm is no longer installed")
    left = [p for p in facts.get("files", []) if p and os.path.lexists(p) and not os.path.isdir(p)]
    t.eq(left, [], "no file of the package is left")
    for d in ("/etc/labvm", "/usr/lib/labvm", "/usr/share/labvm", "/usr/share/doc/labvm"):
        t.ok(not os.path.exists(d), f"{d} is gone")
    t.ok(sh("dpkg-query", "-W", "labvm", check=False).returncode != 0 or
         "not-installed" in sh("dpkg-query", "-W", "-f=${Status}", "labvm", check=False).stdout,
         "dpkg forgets the package")
    try:
        pwd.getpwnam("labvm")
        t.ok(True, "the system user stays (policy: its uid may own files elsewhere)")
    except KeyError:
        t.fail("the system user should stay after purge")


def cleanup():
    stop_all()
    if installed() and facts.get("installed"):
        sh("dpkg", "--purge", "labvm", check=False)
    for f in ("/etc/labvm/kube-token", "/etc/labvm/kube-ca.crt", "/etc/labvm/htpasswd"):
        if os.path.exists(f):
            os.unlink(f)
    if facts.get("run_labvm"):
        shutil.rmtree("/run/labvm", ignore_errors=True)
    try:
        psql_admin(f"DROP DATABASE IF EXISTS {PKG_DB} WITH (FORCE)")
    except AssertionError:
        pass
    if not user_existed and facts.get("installed"):
        sh("deluser", "--system", "--quiet", "labvm", check=False)
        sh("delgroup", "--system", "--quiet", "labvm", check=False)


if not skip:
    cleanup()
t.done()
