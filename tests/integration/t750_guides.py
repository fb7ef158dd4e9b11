#!/usr/bin/python3
"""Lesson guides (issue #30): GET /api/lessons/{id}/guide?lang=en|ja through
both front ends (the guide as the file holds it, the English one when there
is no Japanese one, 404 unknown_lesson / no_guide, ETag and If-None-Match ->
304, readable while PostgreSQL is down: served from memory), the lessons
list's `guide`, the guides' folders served at /guides/ (sandboxed), what
labvm refuses when it loads a guide (path out of lessons_dir, too large, not
UTF-8, missing), and `labvm.fcgi --check` naming every broken reference of a
guide with its file, line and what is expected.
timeout: 240
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import labstack  # noqa: E402
from fcgiclient import LabFcgi  # noqa: E402
from labtest import Api, env, frontends, pg_ctl  # noqa: E402
from tap import T  # noqa: E402

t = T()
SRC = env("LABVM_SRC")
FCGI = os.path.join(env("LABVM_BIN"), "labvm.fcgi")
STATE = env("LABVM_STATE")
SHIPPED = sorted(f[:-5] for f in os.listdir(os.path.join(SRC, "conf", "lessons")) if f.endswith(".json"))
TMP = tempfile.mkdtemp(prefix="labvm-t750-")
BIG = os.path.join(SRC, "tests", "lessons", "guides", "make-big-guide.py")
USERS = {"lighttpd": "student81", "apache": "student82"}


def guide_file(lesson, lang):
    d = json.load(open(os.path.join(SRC, "conf", "lessons", lesson + ".json")))
    p = d["guide"] if lang == "en" else d["i18n"]["ja"]["guide"]
    with open(os.path.join(SRC, "conf", "lessons", p), encoding="utf-8") as f:
        return f.read()


def get(api, lesson, lang=None, headers=None):
    q = f"?lang={lang}" if lang else ""
    return api.request("GET", f"/api/lessons/{lesson}/guide{q}", headers=headers)


for fe, base in frontends():
    api = Api(USERS[fe], base=base)

    @t.test(name=f"{fe}: every shipped lesson's guide, English and Japanese, as its file holds it")
    def shipped(api=api):
        for lid in SHIPPED:
            for lang in ("en", "ja"):
                r = get(api, lid, lang)
                t.eq(r.status, 200, f"{lid} {lang}: status", r)
                if r.status != 200:
                    continue
                t.eq((r.json["lesson"], r.json["lang"]), (lid, lang), f"{lid} {lang}: lesson, lang")
                t.eq(r.json["markdown"], guide_file(lid, lang), f"{lid} {lang}: the file's text")
                t.eq(r.json["folder"], f"/guides/{lid}/", f"{lid} {lang}: its folder's URL")
                t.eq(r.header("Cache-Control"), "private, no-cache", f"{lid} {lang}: revalidated")
                t.ok((r.header("ETag") or "").startswith('"'), f"{lid} {lang}: an ETag", r.headers)
        ls = {x["id"]: x for x in api.lessons().json["lessons"]}
        t.eq({lid: ls[lid].get("guide") for lid in SHIPPED}, {lid: True for lid in SHIPPED},
             "the lessons list says each shipped lesson has a guide")
        t.eq(ls["test-short"].get("guide"), False, "and that test-short has none")

    @t.test(name=f"{fe}: the English guide when there is no Japanese one (lang says which); "
                 "404 unknown_lesson, 404 no_guide, 405 for POST")
    def fallback(api=api):
        en = get(api, "test-guide", "en")
        t.require(en.status == 200, f"test-guide en: {en}")
        for lang in ("ja", "fr", None, "ja&lang=xx"):
            r = get(api, "test-guide", lang)
            t.eq((r.status, r.json and r.json["lang"]), (200, "en"), f"lang={lang}: English")
            t.eq(r.json and r.json["markdown"], en.json["markdown"], f"lang={lang}: the same text")
        ja = get(api, "test-multi", "ja")
        t.eq((ja.status, ja.json and ja.json["lang"]), (200, "ja"), "test-multi has a Japanese one")
        t.ok(ja.header("ETag") != get(api, "test-multi", "en").header("ETag"), "another ETag")
        r = get(api, "no-such-lesson", "en")
        t.eq((r.status, r.json and r.json["error"]), (404, "unknown_lesson"), "unknown lesson", r)
        r = get(api, "test-short", "en")
        t.eq((r.status, r.json and r.json["error"]), (404, "no_guide"), "a lesson without a guide", r)
        r = api.request("POST", "/api/lessons/linux-basics/guide", body={})
        t.eq(r.status, 405, "POST", r)
        r = api.request("GET", "/api/lessons/linux-basics/guide", auth=False)
        t.eq(r.status, 401, "no login: the front end's 401")

    @t.test(name=f"{fe}: If-None-Match with the ETag -> 304 without a body (as a browser "
                 "revalidates, compressed); another guide's ETag -> 200")
    def etag(api=api):
        for enc in (None, "br", "gzip"):
            h = {"Accept-Encoding": enc} if enc else {}
            r = get(api, "linux-basics", "ja", headers=h)
            tag = r.header("ETag")
            t.require(r.status == 200 and tag, f"{enc}: first answer {r.status} {tag}")
            r2 = get(api, "linux-basics", "ja", headers=dict(h, **{"If-None-Match": tag}))
            t.eq((r2.status, r2.body), (304, ""), f"{enc}: revalidated with {tag}")
            r3 = get(api, "linux-basics", "ja", headers=dict(h, **{"If-None-Match": "W/" + tag}))
            t.eq(r3.status, 304, f"{enc}: a weak comparison")
            other = get(api, "linux-basics", "en").header("ETag")
            r4 = get(api, "linux-basics", "ja", headers=dict(h, **{"If-None-Match": other}))
            t.eq(r4.status, 200, f"{enc}: the English guide's ETag does not match the Japanese one")
            r5 = get(api, "linux-basics", "ja", headers=dict(h, **{"If-None-Match": f'"x", {tag}'}))
            t.eq(r5.status, 304, f"{enc}: one of a list")

    @t.test(name=f"{fe}: /guides/ serves a guide's folder (images), sandboxed, behind the login; "
                 "nothing outside it")
    def folder(api=api):
        r = api.request("GET", "/guides/test-guide/diagram.svg")
        t.eq(r.status, 200, "diagram.svg")
        t.ok((r.header("Content-Type") or "").startswith("image/svg+xml"), "an SVG", r.headers)
        csp = [v for k, v in r.headers if k.lower() == "content-security-policy"]
        t.eq(len(csp), 1, "one Content-Security-Policy", csp)
        t.ok(csp and "sandbox" in csp[0] and "default-src 'none'" in csp[0] and "script-src" not in csp[0],
             "sandboxed, nothing may load or run", csp)
        t.eq(r.header("X-Content-Type-Options"), "nosniff", "nosniff")
        t.eq(api.request("GET", "/guides/test-guide/diagram.svg", auth=False).status, 401, "login needed")
        u = urllib.parse.urlsplit(base)
        for path in ("/guides/../linux-basics.json", "/guides/%2e%2e/linux-basics.json",
                     "/guides/test-guide/../../linux-basics.json", "/guides/.hidden"):
            out = subprocess.run(["curl", "-s", "--path-as-is", "-u", f"{USERS[fe]}:labvm", "-o", "/dev/null",
                                  "-w", "%{http_code}", f"http://{u.hostname}:{u.port}{path}"],
                                 capture_output=True, text=True, timeout=20).stdout
            t.ok(out not in ("200", ""), f"{path}: not served ({out})")


@t.test(name="served from memory: PostgreSQL stopped (and then its connections broken), the guide "
             "still answers 200 and 304 through both front ends, with no database time")
def no_database():
    apis = [(fe, Api(USERS[fe], base=base)) for fe, base in frontends()]
    tags = {fe: get(a, "kubeadm-cluster", "ja").header("ETag") for fe, a in apis}
    r = pg_ctl("stop", "-m", "fast")
    t.require(r.returncode == 0, f"pg stop: {r.stderr}")
    try:
        for fe, a in apis:
            for i in range(6):   # every labvm.fcgi process and thread is likely asked
                g = get(a, "kubeadm-cluster", "ja")
                t.eq(g.status, 200, f"{fe}: 200 with the database down ({i})", g)
                t.ok("db;dur=0.00" in (g.header("Server-Timing") or ""), f"{fe}: no database time",
                     g.header("Server-Timing"))
            g = get(a, "kubeadm-cluster", "ja", headers={"If-None-Match": tags[fe]})
            t.eq(g.status, 304, f"{fe}: 304 with the database down")
        s = apis[0][1].request("GET", "/api/sessions/current")
        t.eq(s.status, 503, "while a route that needs the database says so", s)
    finally:
        port = int(urllib.parse.urlsplit(env("LABVM_DATABASE")).port)
        labstack.Stack(STATE, port_base=port - 432).pg_up()
    # the workers' connections died with the stop: the guide needs none of them
    for fe, a in apis:
        for i in range(6):
            g = get(a, "kubeadm-cluster", "en")
            t.eq(g.status, 200, f"{fe}: 200 after the restart, connections broken ({i})")


# ----------------------------------------------------------- loading guides
def lessons_dir(name, lesson, files):
    """A lessons_dir with one lesson (JSON) and files {relative path: bytes}."""
    d = os.path.join(TMP, name)
    os.makedirs(d)
    with open(os.path.join(d, lesson["id"] + ".json"), "w") as f:
        json.dump(lesson, f)
    for p, data in files.items():
        full = os.path.join(d, p)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)
    return d


def lesson(lid, **extra):
    d = {"id": lid, "title": lid, "runtime": "pod", "image": "docker.io/library/debian:12",
         "grader": [{"name": "passes", "command": "true"}]}
    d.update(extra)
    return d


def conf_with(lessons):
    out = os.path.join(TMP, f"{os.path.basename(lessons)}.conf")
    with open(env("LABVM_CONF")) as f:
        text = "".join(ln for ln in f if not ln.startswith("lessons_dir"))
    with open(out, "w") as f:
        f.write(text + f"lessons_dir = {lessons}\n")
    return out


def check_config(lessons):
    r = subprocess.run([FCGI, "--check"], env=dict(os.environ, LABVM_CONF=conf_with(lessons)),
                       capture_output=True, text=True, timeout=30)
    return r.returncode, r.stdout + r.stderr


LOAD_CASES = [
    # (name, lesson fields, files, what the refusal says)
    ("missing", dict(guide="guides/x/guide.md"), {}, ['"guide": "guides/x/guide.md": No such file']),
    ("absolute", dict(guide="/etc/passwd"), {}, ['"guide": "/etc/passwd" must be a file relative to lessons_dir']),
    ("dotdot", dict(guide="guides/../../etc/passwd"), {}, ['must stay inside lessons_dir']),
    ("ja-dotdot", dict(guide="g.md", i18n={"ja": {"guide": "../g.md"}}), {"g.md": b"# g\n"},
     ['i18n.ja.guide: "../g.md" must stay inside lessons_dir']),
    ("ja-only", dict(i18n={"ja": {"guide": "g.md"}}), {"g.md": b"# g\n"}, ['i18n.ja.guide needs "guide" too']),
    ("not-utf8", dict(guide="g.md"), {"g.md": b"# ok\nline 2\nbad \xff here\n"},
     ['"guide": "g.md", line 3: not valid UTF-8']),
    ("overlong", dict(guide="g.md"), {"g.md": b"# \xc0\xaf\n"}, ["line 1: not valid UTF-8"]),
    ("nul", dict(guide="g.md"), {"g.md": b"# a\n\x00\n"}, ["line 2: a NUL byte"]),
    ("too-large", dict(guide="g.md"), {"g.md": b"x" * (4 * 1024 * 1024 + 1)}, ["is larger than 4194304 bytes"]),
    ("a-folder", dict(guide="guides"), {"guides/x": b"x"}, ['"guides" is not a regular file']),
]


@t.test(name="labvm refuses to load a guide out of lessons_dir, missing, too large, not UTF-8 or "
             "with a NUL byte, naming the lesson file, the field and the line")
def load_refusals():
    for name, fields, files, wants in LOAD_CASES:
        d = lessons_dir(name, lesson(f"l-{name}", **fields), files)
        rc, out = check_config(d)
        t.ok(rc != 0, f"{name}: refused", out)
        t.ok(f"{d}/l-{name}.json" in out, f"{name}: names the lesson file", out)
        for w in wants:
            t.ok(w in out, f"{name}: {w}", out)
    # a symbolic link out of lessons_dir
    d = lessons_dir("symlink", lesson("l-symlink", guide="guides/s/guide.md"), {"outside.md": b"# out\n"})
    inner = os.path.join(TMP, "symlink-inner")
    shutil.move(d, inner)
    os.makedirs(os.path.join(d, "guides", "s"))
    shutil.move(os.path.join(inner, "l-symlink.json"), d)
    os.symlink(os.path.join(inner, "outside.md"), os.path.join(d, "guides", "s", "guide.md"))
    rc, out = check_config(d)
    t.ok(rc != 0 and "is a symbolic link out of lessons_dir" in out, "a symbolic link out", out)
    # exactly 4 MiB of valid UTF-8 (Japanese, 3 bytes a character) loads
    ja = ("あ" * 1398101).encode() + b"x"
    t.require(len(ja) == 4 * 1024 * 1024, "4 MiB")
    d = lessons_dir("max", lesson("l-max", guide="g.md"), {"g.md": ja})
    rc, out = check_config(d)
    t.eq(rc, 0, "a guide of exactly 4 MiB loads", out)


@t.test(name="a 2 MB guide (make-big-guide.py) answered whole by a labvm.fcgi of its own, "
             "and 401 without a user")
def big_guide():
    text = subprocess.run(["/usr/bin/python3", BIG, "--steps", "passes"], capture_output=True, text=True,
                          check=True).stdout
    t.require(len(text.encode()) >= 2_000_000, f"the generator wrote {len(text)} bytes")
    d = lessons_dir("big", lesson("l-big", guide="guides/l-big/guide.md"),
                    {"guides/l-big/guide.md": text.encode()})
    with LabFcgi({"lessons_dir": d}) as f:
        r = f.request("GET", "/api/lessons/l-big/guide?lang=ja", "student83")
        t.eq(r.status, 200, "200")
        t.eq(r.json and len(r.json["markdown"]), len(text), "the whole guide")
        t.eq(r.json and r.json["folder"], "/guides/l-big/", "its folder")
        r = f.request("GET", "/api/lessons/l-big/guide", None)
        t.eq((r.status, r.json and r.json["error"]), (401, "unauthenticated"), "no REMOTE_USER: 401")
        r = f.request("GET", "/api/lessons", "student83")
        t.eq([x.get("guide") for x in r.json["lessons"]], [True], "the list says so")


# --------------------------------------------------------------- --check
GUIDE_OK = """# A guide

## Check: passes

```run
echo hello
```

![a picture](pic.png) and [a note](notes.txt), [https](https://example.org/x), [here](#a-guide)

> [!HINT]
> A hint.
"""


def check_files(*paths):
    env_ = {k: v for k, v in os.environ.items() if k != "LABVM_CONF"}
    env_["LABVM_CONF"] = "/nonexistent/labvm.conf"
    r = subprocess.run([FCGI, "--check", *paths], capture_output=True, text=True, env=env_, timeout=60)
    return r.returncode, r.stdout + r.stderr


def guide_lesson(name, md, extra_files=None, where="guides/{id}/guide.md", **fields):
    d = os.path.join(TMP, "check-" + name)
    lid = f"g-{name}"
    path = where.format(id=lid)
    files = {path: md.encode(), os.path.join(os.path.dirname(path), "pic.png"): b"\x89PNG\r\n",
             os.path.join(os.path.dirname(path), "notes.txt"): b"notes\n"}
    files.update(extra_files or {})
    le = lesson(lid, guide=path, **fields)
    os.makedirs(d)
    with open(os.path.join(d, lid + ".json"), "w") as f:
        json.dump(le, f)
    for p, data in files.items():
        full = os.path.join(d, p)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)
    return os.path.join(d, lid + ".json"), path


MULTI = dict(runtime="vm", image="quay.io/containerdisks/debian:12", memory="512Mi",
             machines=[{"name": "cp"}, {"name": "worker1"}],
             grader=[{"name": "same", "machine": "cp", "command": "true"},
                     {"name": "same", "machine": "worker1", "command": "true"},
                     {"name": "only on cp", "machine": "cp", "command": "true"}])
MULTI_OK = "## Check: cp: same\n\n## Check: worker1: same\n\n## Check: only on cp\n\n```run:worker1\nid\n```\n"

CHECK_CASES = [
    # (name, markdown, lesson fields, (line, fragment of the error))
    ("no-step", GUIDE_OK + "\n## Check: not a step\n", {}, (14, '"Check: not a step" is not a grader step of this lesson (its steps: passes)')),
    ("run-machine-single", "```run:cp\nid\n```\n", {}, (1, "```run:cp names a machine, but the lesson has none")),
    ("run-unknown", MULTI_OK + "\n```run:worker9\nid\n```\n", MULTI,
     (11, '```run:worker9: there is no machine "worker9" (the machines: cp, worker1)')),
    ("ambiguous", MULTI_OK + "\n## Check: same\n", MULTI, (11, '"Check: same" names 2 grader steps')),
    ("javascript", "[x](javascript:alert(1))\n", {}, (1, 'link "javascript:alert(1)": links are http, https or relative only (not javascript:)')),
    ("javascript-entity", "a\n\n[x](JavaScript&#58;alert(1))\n", {}, (3, "(not javascript:)")),
    ("data", "[x](data:text/html,hi)\n", {}, (1, "(not data:)")),
    ("vbscript", "[x](vbscript:msgbox)\n", {}, (1, "(not vbscript:)")),
    ("file", "[x](file:///etc/passwd)\n", {}, (1, "(not file:)")),
    ("autolink", "<javascript:alert(1)>\n", {}, (1, "(not javascript:)")),
    ("reference", "[x][r]\n\n[r]: data:text/html,x\n", {}, (3, "(not data:)")),
    ("proto-relative", "[x](//evil.example/x)\n", {}, (1, "a protocol-relative URL (//host) goes to another site")),
    ("site-absolute", "[x](/api/lessons)\n", {}, (1, "write a path relative to the guide's folder (no leading /)")),
    ("dotdot-link", "[x](../other/guide.md)\n", {}, (1, "it must stay inside the guide's folder")),
    ("image-http", "![x](https://example.org/x.png)\n", {}, (1, "images come only from the guide's own folder")),
    ("image-data", "![x](data:image/png;base64,AAAA)\n", {}, (1, "images come only from the guide's own folder")),
    ("image-dotdot", "![x](../x/pic.png)\n", {}, (1, "it must stay inside the guide's folder")),
    ("image-missing", "![x](nope.png)\n", {}, (1, 'image "nope.png": no such file in the guide\'s folder')),
    ("link-missing", "[x](nope.txt)\n", {}, (1, 'link "nope.txt": no such file in the guide\'s folder')),
    ("mailto", "<someone@example.org>\n", {}, (1, "an e-mail address becomes a mailto: link")),
    ("unclosed", "text\n\n```run\necho\n", {}, (3, "a code block that is never closed")),
]


@t.test(name="--check: a good guide (and the shipped ones) pass; each broken reference is an error "
             "naming the lesson file, the guide, the line and what is expected")
def check_guides():
    p, _ = guide_lesson("good", GUIDE_OK)
    rc, out = check_files(p)
    t.eq(rc, 0, "the good guide", out)
    t.ok(f"{p}: ok (0 errors, 0 warnings)" in out, "no warnings", out)
    p, _ = guide_lesson("multi-good", MULTI_OK, **MULTI)
    rc, out = check_files(p)
    t.ok(rc == 0 and ": error:" not in out, "a multi-machine guide naming machines' steps", out)
    for name, md, fields, (line, want) in CHECK_CASES:
        p, gp = guide_lesson(name, md, **fields)
        rc, out = check_files(p)
        t.eq(rc, 1, f"{name}: not usable", out)
        pre = f"{p}: error: guide {gp}, line {line}: "
        t.ok(any(ln.startswith(pre) and want in ln for ln in out.splitlines()), f"{name}: {pre}...{want}", out)
    # an image needs the guide in a folder of its own under guides/
    p, gp = guide_lesson("no-folder", "![x](pic.png)\n", where="{id}.md")
    rc, out = check_files(p)
    t.ok(rc == 1 and f"guide {gp}, line 1: image \"pic.png\": relative images need the guide in a folder of its own under guides/" in out,
         "an image beside a guide that has no folder of its own", out)
    # the guide file itself
    p = os.path.join(TMP, "check-missing", "g-missing.json")
    os.makedirs(os.path.dirname(p))
    json.dump(lesson("g-missing", guide="guides/g-missing/guide.md"), open(p, "w"))
    rc, out = check_files(p)
    t.ok(rc == 1 and f'{p}: error: "guide": "guides/g-missing/guide.md": No such file or directory' in out,
         "a guide that is not there", out)
    # warnings: a step without a heading, a run block without a machine
    p, _ = guide_lesson("warn", "## Check: cp: same\n\n```run\nid\n```\n", **MULTI)
    rc, out = check_files(p)
    t.eq(rc, 0, "warnings only", out)
    t.ok('grader step "only on cp" on cp has no "## Check: only on cp" heading' in out, "an unguided step", out)
    t.ok("a run block without a machine types into cp (the first machine)" in out, "run without a machine", out)
    # the test lessons' hostile guide: every trap is reported
    rc, out = check_files(os.path.join(SRC, "tests", "lessons", "test-guide.json"))
    t.ok(rc == 1 and out.count(": error: guide guides/test-guide/guide.md, line ") >= 20,
         "the hostile test guide: 20 and more errors", out[-1500:])


shutil.rmtree(TMP, ignore_errors=True)
t.done()
