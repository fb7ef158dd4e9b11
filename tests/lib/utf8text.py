"""Untrusted text as labvm keeps it (issue #26): what the tests expect of a
guest's, a Pod's or the cluster's text once labvm stored, logged or answered
it. An independent reading of the rule in fcgi-app/core/util.h (utf8_*):
valid UTF-8 (Python's strict decoder: no overlongs, no surrogates), no NUL,
every ill-formed byte U+FFFD, cut before the first character that does not
fit. And the texts the tests' lessons make: a setup's output (run here with
the same /bin/sh the process guests use), the guest agent's log tail
(fcgi-app/guest/agent.py's own function), a Pod's termination message
(`tail -c 2048`, decoded as the kubelet's JSON encoding does)."""
import importlib.util
import json
import os
import subprocess
import tempfile

SRC = os.environ.get("LABVM_SRC") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
REPL = "\ufffd".encode()


def _char_len(b, i):
    """Length of the well-formed character at b[i], 0 when there is none."""
    if b[i] == 0:
        return 0
    for k in (1, 2, 3, 4):
        try:
            if len(b[i:i + k].decode("utf-8")) == 1 and i + k <= len(b):
                return k
        except UnicodeDecodeError:
            continue
    return 0


def valid(b):
    """Valid UTF-8 without NUL bytes."""
    try:
        b.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\0" not in b


def clean_cut(b, limit):
    """b with U+FFFD for each ill-formed byte, cut to at most limit bytes on
    a character boundary: what labvm stores."""
    out, i = bytearray(), 0
    while i < len(b):
        k = _char_len(b, i)
        piece = b[i:i + k] if k else REPL
        if len(out) + len(piece) > limit:
            break
        out += piece
        i += k or 1
    return bytes(out)


def splits_at(b, at):
    """Does a cut of b at byte `at` (the old code's) split a character?"""
    return len(b) > at and (b[at] & 0xC0) == 0x80


def lesson(lesson_id):
    for d in ("tests/lessons", "conf/lessons"):
        p = os.path.join(SRC, d, f"{lesson_id}.json")
        if os.path.exists(p):
            with open(p, encoding="utf-8") as f:
                return json.load(f)
    raise KeyError(lesson_id)


def setup_output(lesson_id):
    """What the lesson's setup prints (stdout and stderr, as the guest's
    setup log has it) and its exit code, run here in a scratch directory."""
    with tempfile.TemporaryDirectory() as d:
        r = subprocess.run(["/bin/sh", "-c", lesson(lesson_id)["setup"]], cwd=d,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           env={"PATH": "/usr/bin:/bin", "HOME": d}, timeout=60)
    return r.stdout, r.returncode


def agent_log_tail(log):
    """The guest agent's /ready log_tail of a setup log holding `log`."""
    spec = importlib.util.spec_from_file_location(
        "labvm_agent", os.path.join(SRC, "fcgi-app", "guest", "agent.py"))
    agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent)
    with tempfile.NamedTemporaryFile() as f:
        f.write(log)
        f.flush()
        return agent.log_tail(f.name)


def termination_message(log):
    """A lab Pod's termination message: the manifest's `tail -c 2048` of its
    setup log, as text (the kubelet's JSON encoding replaces what is not
    UTF-8, as the simulator does)."""
    return log[-2048:].decode("utf-8", "replace")
