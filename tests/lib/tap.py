"""A tiny TAP producer for labvm's Python tests.

Every test file prints `ok N - name` / `not ok N - name` lines and a plan;
tests/run counts them. Usage:

    from tap import T
    t = T()

    @t.test
    def start_returns_201():
        r = api.post(...)
        t.eq(r.status, 201, "status")

    t.done()

A test function fails when one of its checks fails or when it raises; a check
records every mismatch (not only the first) in the diagnostics.
"""
import os
import sys
import time
import traceback


class Failed(Exception):
    pass


class T:
    def __init__(self, name=None):
        self.n = 0
        self.failed = 0
        self.skipped = 0
        self.name = name or os.path.basename(sys.argv[0])
        self._errs = None
        only = os.environ.get("TAP_ONLY")
        self.only = only.split(",") if only else None

    # -- checks, usable inside a test function -------------------------
    def ok(self, cond, what="", diag=None):
        if not cond:
            msg = what or "condition is false"
            if diag is not None:
                msg += f": {diag}"
            self._fail(msg)
        return bool(cond)

    def eq(self, got, want, what="", diag=None):
        if got != want:
            extra = f" ({diag})" if diag is not None else ""
            self._fail(f"{what}: got {got!r}, want {want!r}{extra}")
            return False
        return True

    def fail(self, what):
        self._fail(what)

    def require(self, cond, what=""):
        """Like ok(), but stops the test function at once when false."""
        if not cond:
            self._fail(what or "requirement failed")
            raise Failed(what)

    def _fail(self, msg):
        if self._errs is None:  # a check outside a test: report at once
            self._result(False, msg, [])
        else:
            self._errs.append(msg)

    # -- tests -----------------------------------------------------------
    def test(self, fn=None, *, name=None, skip=None):
        def run(f):
            tname = name or f.__name__
            why = skip
            if self.only and not any(o in tname for o in self.only):
                why = why or "not selected by TAP_ONLY"   # counted, never silent
            if why:
                self.n += 1
                self.skipped += 1
                print(f"ok {self.n} - {tname} # SKIP {why}", flush=True)
                return f
            self._errs = []
            t0 = time.monotonic()
            try:
                f()
            except Failed:
                pass
            except Exception:  # noqa: BLE001 - any exception fails the test
                self._errs.append("exception:\n" + traceback.format_exc())
            errs, self._errs = self._errs, None
            self._result(not errs, tname, errs, time.monotonic() - t0)
            return f
        return run(fn) if fn else run

    def _result(self, passed, tname, errs, secs=None):
        self.n += 1
        if not passed:
            self.failed += 1
        took = f" ({secs:.1f}s)" if secs is not None and secs >= 1 else ""
        print(f"{'ok' if passed else 'not ok'} {self.n} - {tname}{took}", flush=True)
        for e in errs:
            for line in str(e).rstrip().splitlines():
                print(f"#   {line}", flush=True)

    def diag(self, msg):
        for line in str(msg).splitlines():
            print(f"# {line}", flush=True)

    def done(self):
        print(f"1..{self.n}", flush=True)
        sys.exit(1 if self.failed else 0)
