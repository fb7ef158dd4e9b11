#!/usr/bin/python3
"""The teacher's tools: `labvm.fcgi --check LESSON.json...` (no labvm.conf
needed) names the file, the field and what is expected for every mistake,
warns about keys labvm ignores, checks the setup and grader commands with
`sh -n` and the rendered cloud-config with cloud-init's schema; and
tools/try-lesson starts a lesson once on a throwaway stack of its own and
reports each stage and grader step (ports: the stack's base + 300).
timeout: 300
"""
import json
import os
import shutil
import subprocess
import sys
import re
import tempfile
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import T  # noqa: E402

t = T()
ENV = os.environ
SRC = ENV.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = ENV.get("LABVM_BIN") or os.path.join(SRC, "build", "bin")
FCGI = os.path.join(BIN, "labvm.fcgi")
TMP = tempfile.mkdtemp(prefix="labvm-t740-")
STACK_BASE = urllib.parse.urlsplit(ENV.get("LABVM_LIGHTTPD_URL") or ENV["LABVM_URL"]).port - 80
GOOD = json.load(open(os.path.join(SRC, "conf", "lessons", "linux-basics.json")))
# the copies below sit in a folder without the lesson's guide files
GOOD.pop("guide", None)
GOOD["i18n"]["ja"].pop("guide", None)


def lesson_file(name, text=None, **changes):
    d = dict(GOOD, id=name)
    d.update(changes)
    for k, v in list(d.items()):
        if v is None:
            del d[k]
    path = os.path.join(TMP, f"{name}.json")
    with open(path, "w", errors="surrogateescape") as f:  # a raw byte as \udcXX
        f.write(text if text is not None else json.dumps(d, indent=2))
    return path


def check(*paths):
    env = {k: v for k, v in ENV.items() if k != "LABVM_CONF"}
    env["LABVM_CONF"] = "/nonexistent/labvm.conf"   # a teacher has no labvm.conf
    r = subprocess.run([FCGI, "--check", *paths], capture_output=True, text=True, env=env)
    return r.returncode, r.stdout + r.stderr


@t.test(name="--check: the shipped lessons are usable, without a labvm.conf")
def shipped():
    files = sorted(os.path.join(SRC, "conf", "lessons", f) for f in os.listdir(os.path.join(SRC, "conf", "lessons"))
                   if f.endswith(".json"))   # not guides/, the lessons' guides
    rc, out = check(*files)
    t.eq(rc, 0, "exit status 0", out[-2000:])
    for f in files:
        t.ok(f"{f}: ok (0 errors" in out, f"{os.path.basename(f)}: ok", out[-500:])
    vm = [f for f in files if json.load(open(f)).get("runtime") == "vm"]
    if shutil.which("cloud-init"):
        # a lesson with machines renders one cloud-config per machine
        n = sum(len(json.load(open(f)).get("machines") or [None]) for f in vm)
        t.eq(out.count("valid for cloud-init's schema"), n,
             "each VM lesson's (each machine's) cloud-config passes cloud-init's schema")
    else:
        t.ok("checked with labvm's rules only" in out, "says cloud-init's schema was not available")


CASES = [
    # (file name, changes or raw text, expected fragments of the error line)
    ("no-image", dict(image=None), ['"image" is required (a string)']),
    ("bad-memory", dict(memory="lots"), ['"memory" must be a quantity like 512Mi or 2Gi']),
    ("bad-runtime", dict(runtime="container"), ['"runtime" must be "vm" or "pod"']),
    ("bad-mode", dict(files=[{"path": "/root/a", "content": "x"}, {"path": "/root/b", "content": "y", "mode": "999"}]),
     ['files[1].mode: "999" must be octal like 0644']),
    ("relative-path", dict(files=[{"path": "root/a", "content": "x"}]),
     ['files[0].path: "root/a" must be absolute']),
    ("no-command", dict(grader=[{"name": "a", "command": "true"}, {"name": "b"}]),
     ['grader[1]: "command" is required (a string)']),
    ("long-timeout", dict(grader=[{"name": "a", "command": "true", "timeout_s": 900}]),
     ['grader[0]: "timeout_s" must be an integer in 0..300']),
    ("bad-ja", dict(i18n={"ja": {"title": 5}}), ['i18n.ja: "title" must be a string']),
    ("golden-no-pvc", dict(disk="golden"), ['disk "golden" needs "golden_pvc", a PVC name']),
    ("setup-syntax", dict(setup="if true; then echo x\n"), ['setup: not a valid shell script: line 2: Syntax error']),
    ("grader-syntax", dict(grader=[{"name": "ok", "command": "true"}, {"name": "broken", "command": "echo $(("}]),
     ['grader[1].command ("broken"): not a valid shell command: line 1: Syntax error']),
    ("reserved-path", dict(files=[{"path": "/opt/labvm/agent.py", "content": "x"}]),
     ['files[0].path: "/opt/labvm/agent.py" is labvm\'s own']),
    # labvm's ready flag, token and agent however the path is spelt (issue #26)
    ("reserved-slashes", dict(files=[{"path": "//var/lib/labvm/ready", "content": ""}]),
     ['files[0].path: "//var/lib/labvm/ready" is labvm\'s own (/var/lib/labvm)']),
    ("reserved-dot", dict(files=[{"path": "/root/a", "content": ""},
                                 {"path": "/var/lib/./labvm/ready", "content": ""}]),
     ['files[1].path: "/var/lib/./labvm/ready" is labvm\'s own (/var/lib/labvm)']),
    ("reserved-dotdot", dict(files=[{"path": "/var/lib/labvm/../labvm/x", "content": ""}]),
     ['files[0].path: "/var/lib/labvm/../labvm/x" must have no ".." component']),
    ("reserved-token", dict(files=[{"path": "/etc//labvm/agent-token", "content": "x"}]),
     ['files[0].path: "/etc//labvm/agent-token" is labvm\'s own (/etc/labvm)']),
    ("reserved-pod-flag", dict(runtime="pod", disk=None, image="docker.io/library/debian:12",
                               files=[{"path": "/var/run/labvm/ready", "content": ""}]),
     ['files[0].path: "/var/run/labvm/ready" is labvm\'s own (/var/run/labvm)']),
    ("reserved-machine", dict(machines=[{"name": "cp", "files": [
        {"path": "/var/lib/labvm/./ready", "content": ""}]}]),
     ['machine "cp": files[0].path: "/var/lib/labvm/./ready" is labvm\'s own']),
    ("not-utf8", '{"id": "not-utf8", "title": "caf\udcff"}', ["not valid UTF-8 from byte offset 32"]),
    ("broken-json", '{"id": "broken-json",\n  "title": "x"\n  "runtime": "vm"}', ["line 3, column 3: not valid JSON"]),
]


@t.test(name="--check: each mistake is an error naming the file, the field and what is expected")
def mistakes():
    for name, change, wants in CASES:
        path = lesson_file(name, text=change) if isinstance(change, str) else lesson_file(name, **change)
        rc, out = check(path)
        t.eq(rc, 1, f"{name}: exit status 1", out)
        errs = [ln for ln in out.splitlines() if ln.startswith(f"{path}: error: ")]
        t.ok(errs, f"{name}: an error line starting with the file name", out)
        for w in wants:
            t.ok(any(w in ln for ln in errs), f"{name}: {w}", out)
        t.ok(f"{path}: NOT usable" in out, f"{name}: says the file is not usable", out)


@t.test(name="--check: unknown keys and a file name that is not the id are warnings")
def warnings():
    p = lesson_file("warn-me", setpu="echo typo", grader=[{"name": "a", "commnd": "x", "command": "true"}])
    os.rename(p, os.path.join(TMP, "other-name.json"))
    p = os.path.join(TMP, "other-name.json")
    rc, out = check(p)
    t.eq(rc, 0, "still usable", out)
    t.ok(f'{p}: warning: "setpu": unknown key' in out, "top-level typo", out)
    t.ok(f'{p}: warning: grader[0]."commnd": unknown key' in out, "grader typo", out)
    t.ok('"id": "warn-me", but the file is called other-name.json' in out, "file name vs id", out)
    rc, out = check(p, lesson_file("no-image2", image=None))
    t.eq(rc, 1, "several files: one bad one makes the status 1", out)


@t.test(name="--check: its scratch files are in a private directory of its own (mkdtemp, "
             "under TMPDIR), removed at the end; no predictable name in /tmp")
def scratch_private():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    IN_CREATE, IN_ISDIR, IN_NONBLOCK = 0x100, 0x40000000, 0o4000
    tmp = os.path.join(TMP, "tmpdir")
    os.makedirs(tmp)
    fd = libc.inotify_init1(IN_NONBLOCK)
    t.require(fd >= 0 and libc.inotify_add_watch(fd, tmp.encode(), IN_CREATE) >= 0, "inotify")
    env = {k: v for k, v in ENV.items() if k != "LABVM_CONF"}
    r = subprocess.run([FCGI, "--check", lesson_file("scratch-me")], capture_output=True,
                       text=True, env=dict(env, TMPDIR=tmp, LABVM_CONF="/nonexistent"))
    events = []
    try:
        data = os.read(fd, 65536)
    except BlockingIOError:
        data = b""
    os.close(fd)
    i = 0
    while i + 16 <= len(data):  # struct inotify_event: wd, mask, cookie, len, name
        mask, n = int.from_bytes(data[i + 4:i + 8], "little"), int.from_bytes(data[i + 12:i + 16], "little")
        events.append((data[i + 16:i + 16 + n].rstrip(b"\0").decode(), bool(mask & IN_ISDIR)))
        i += 16 + n
    t.eq(r.returncode, 0, "the lesson is usable", r.stdout + r.stderr)
    t.ok("not checked (no private directory" not in r.stdout and
         ("valid for cloud-init's schema" in r.stdout or not shutil.which("cloud-init")),
         "the checks that need files ran", r.stdout)
    t.eq(len(events), 1, "one thing made in TMPDIR", events)
    t.ok(events and events[0][1] and re.fullmatch(r"labvm-check-[A-Za-z0-9]{6}", events[0][0]),
         "a directory from mkdtemp (everything else inside it)", events)
    t.eq(os.listdir(tmp), [], "removed at the end")


@t.test(name="a lesson that writes labvm's ready flag (//var/lib/labvm/ready): labvm.fcgi "
             "--check and the server refuse the lessons, naming the lesson and the path")
def server_refuses_reserved():
    d = os.path.join(TMP, "lessons-reserved")
    os.makedirs(d)
    shutil.copy(os.path.join(SRC, "conf", "lessons", "linux-basics.json"), d)
    lesson_file("flag-early", files=[{"path": "//var/lib/labvm/ready", "content": ""}])
    shutil.move(os.path.join(TMP, "flag-early.json"), d)
    conf = os.path.join(TMP, "reserved.conf")
    with open(ENV["LABVM_CONF"]) as f:
        lines = [ln for ln in f if not ln.startswith("lessons_dir")]
    with open(conf, "w") as f:
        f.writelines(lines + [f"lessons_dir = {d}\n"])
    e = dict(ENV, LABVM_CONF=conf)
    r = subprocess.run([FCGI, "--check"], capture_output=True, text=True, env=e)
    want = f'{d}/flag-early.json: files[0].path: "//var/lib/labvm/ready" is labvm\'s own'
    t.ok(r.returncode != 0 and want in r.stderr, "--check refuses it, naming the lesson",
         r.stderr[-400:])
    r = subprocess.run([FCGI, "--listen", os.path.join(TMP, "never.sock")], capture_output=True,
                       text=True, env=e, timeout=30)
    t.ok(r.returncode != 0 and want in r.stderr, "the server does not start with it",
         r.stderr[-400:])


def try_lesson(path):
    r = subprocess.run([os.path.join(SRC, "tools", "try-lesson"), "--state", os.path.join(ENV["LABVM_STATE"], "try"),
                        "--port-base", str(STACK_BASE + 300), path], capture_output=True, text=True, timeout=240)
    return r.returncode, r.stdout + r.stderr


@t.test(name="tools/try-lesson: a good lesson, every stage and grader step reported")
def try_good():
    rc, out = try_lesson(lesson_file("try-me"))
    t.eq(rc, 0, "exit status 0 (ready)", out[-2000:])
    t.ok("stage scheduling" in out or "stage booting" in out, "the stages as they are seen", out[-1500:])
    for label in ("submitted to the cluster", "VM running", "guest ready (setup done)"):
        t.ok(re.search(re.escape(label) + r" +\d+\.\d\d s", out), f"{label}: seconds after the press", out[-1500:])
    t.ok("ready    stage ready" in out, "ready reported", out[-1500:])
    t.ok("(disk containerdisk)" in out, "the disk source", out[-1500:])
    for st in GOOD["grader"]:
        t.ok(f"  {st['name']}" in out, f"grader step reported: {st['name']}", out[-1500:])
    t.ok("  fail  hello.txt says hello" in out, "a step the student has to do fails on a fresh lab", out[-1500:])
    t.ok("== ended (200)" in out, "ended", out[-500:])


@t.test(name="tools/try-lesson: a failing setup is reported with its stage and error")
def try_broken():
    broken = json.load(open(os.path.join(SRC, "conf", "lessons", "broken-setup.json")))
    broken.pop("guide", None)   # its guide files are not copied along
    broken["i18n"]["ja"].pop("guide", None)
    p = os.path.join(TMP, "broken-try.json")
    with open(p, "w") as f:
        json.dump(dict(broken, id="broken-try"), f)
    rc, out = try_lesson(p)
    t.eq(rc, 1, "exit status 1", out[-1500:])
    t.ok("== not ready: failed at stage setting_up" in out and "exit code 3" in out,
         "the stage and the setup's error", out[-1500:])


@t.test(name="tools/try-lesson: a lesson with errors is not tried")
def try_bad():
    rc, out = try_lesson(lesson_file("try-bad", memory="lots"))
    t.eq(rc, 2, "exit status 2", out)
    t.ok("not tried" in out and "stack in" not in out, "no stack started", out)


shutil.rmtree(TMP, ignore_errors=True)
t.done()
