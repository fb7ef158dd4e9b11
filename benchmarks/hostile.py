#!/usr/bin/python3
"""benchmarks/hostile.py: the hostile students of `make chaos` (issue #26).

    benchmarks/hostile.py --spec SPEC.json --duration S --out COUNTS.json

Run by benchmarks/chaos.py in a process of its own (its threads do not share
an interpreter lock with the class whose latencies chaos.py measures), for
one hostile window. SPEC names the front ends and the hostile students'
sessions, which chaos.py prepared (their agents already replaced, as a
student who is root in the guest does):

  silent     a ready session whose agent accepts and never answers:
             tty-size and grade storms on it, streams on it with a huge
             Last-Event-ID
  garbage    a ready session whose agent answers garbage (tests/lib/agentrec.py
             --mode garbage: bytes that are not UTF-8, no JSON, a broken
             status line, oversize, trickled, ...): tty-size and grade storms
  hoarder    a session that stays `starting` (test-long-setup): event streams
             opened far beyond stream_max_per_user, over both front ends,
             most with a huge Last-Event-ID, kept open and opened again
  setupfail  starts, one after the other, lessons whose setup fails with
             multi-byte text straddling the 1023-byte cut (test-setup-utf8)
             and an agent answering bytes that are not UTF-8
             (test-setup-badbytes); each must end `failed`, its error valid
             UTF-8
  headers    the silent student again, with crafted headers against /api/
             and /console/: Forwarded with an unclosed quote naming another
             student, X-Forwarded-For, Authorization replays (a second
             header, another student's name, a ticket as a Bearer token),
             oversize headers; on /console/ with a ticket of another
             student's (leaked: this script asks for it as that student)

Rates: --tty-rate and --grade-rate requests/s in all (spread over both front
ends and both storm sessions, 8 threads each). Every answer is counted by
actor and status (+ error code); a "breach" is an answer that let the
hostile student see, end or open another student's session: there must be
none. Written to --out as JSON.
"""
import argparse
import asyncio
import base64
import http.client
import json
import os
import random
import sys
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "lib"))
sys.path.insert(0, HERE)

import websockets  # noqa: E402

from benchstats import pct  # noqa: E402

HUGE_ID = "999999999999999999"    # 18 digits: the most labvm takes as an event id
TOO_LONG_ID = "9" * 40            # more: 400


ACTORS = ("tty", "grade", "streams", "setupfail", "headers")


def basic(user, password):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.by = {}
        self.breaches = []
        self.extra = {}
        self.lat = {}

    def add(self, actor, answer, dt=None):
        with self.lock:
            d = self.by.setdefault(actor, {})
            d[answer] = d.get(answer, 0) + 1
            if dt is not None:
                self.lat.setdefault(actor, []).append(dt)

    def breach(self, what):
        with self.lock:
            self.breaches.append(what)

    def bump(self, k, n=1):
        with self.lock:
            self.extra[k] = self.extra.get(k, 0) + n

    def sample(self, k, v):
        with self.lock:
            self.extra.setdefault(k, []).append(round(v))

    def peak(self, k, v):
        with self.lock:
            self.extra[k] = max(self.extra.get(k, 0), v)


class Bucket:
    """A shared pace: take() returns when the next request of `rate` per second is due."""

    def __init__(self, rate):
        self.step = 1.0 / rate if rate > 0 else 0
        self.t = time.monotonic()
        self.lock = threading.Lock()

    def take(self, stop):
        with self.lock:
            now = time.monotonic()
            self.t = max(self.t + self.step, now - 0.5)   # no burst after a stall
            due = self.t
        if due > now:
            stop.wait(due - now)


class Raw:
    """One keep-alive connection; headers as a list (duplicates allowed); the
    body as bytes (to check it is UTF-8)."""

    def __init__(self, base, timeout=60):
        u = urllib.parse.urlsplit(base)
        self.host, self.port = u.hostname, u.port or 80
        self.timeout = timeout
        self.c = None

    def request(self, method, path, headers, body=None):
        for attempt in range(2):
            if self.c is None:
                self.c = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.c.putrequest(method, path, skip_accept_encoding=True)
                for k, v in headers:
                    self.c.putheader(k, v)
                if body is not None:
                    self.c.putheader("Content-Type", "application/json")
                    self.c.putheader("Content-Length", str(len(body)))
                self.c.endheaders(body)
                r = self.c.getresponse()
                data = r.read()
                if (r.getheader("Connection") or "").lower() == "close":
                    self.close()
                return r.status, dict((k.lower(), v) for k, v in r.getheaders()), data
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    http.client.CannotSendRequest, http.client.BadStatusLine):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self):
        if self.c is not None:
            self.c.close()
            self.c = None


def answer(status, data):
    """("STATUS error_code", JSON) of an answer; "STATUS NOT-UTF-8" when its body
    is not UTF-8 (labvm's answers always are: chaos.py counts these as defects)."""
    try:
        text = data.decode("utf-8") if data else ""
    except UnicodeDecodeError:
        return f"{status} NOT-UTF-8", None
    try:
        j = json.loads(text) if text else None
    except ValueError:
        j = None
    err = j.get("error") if isinstance(j, dict) else None
    return f"{status} {err}" if err else str(status), j


class Hostile:
    def __init__(self, spec, duration):
        self.spec = spec
        self.bases = spec["bases"]
        self.pw = spec.get("password", "labvm")
        self.stop = threading.Event()
        self.duration = duration
        self.n = Counts()
        self.leaked = None              # (victim user, victim sid, ticket url)
        self.leak_lock = threading.Lock()

    def fe_name(self, i):
        names = self.spec.get("frontends") or []
        return names[i] if i < len(names) else self.bases[i]

    def auth(self, user):
        return ("Authorization", basic(user, self.pw))

    # ------------------------------------------------------------- storms
    def storm(self, actor, who, kind, bucket, i):
        base = self.bases[i % len(self.bases)]
        raw = Raw(base, timeout=120)
        rnd = random.Random(f"{actor}{i}")
        sid = who["sid"]
        n = 0
        while not self.stop.is_set():
            bucket.take(self.stop)
            if self.stop.is_set():
                break
            n += 1
            if kind == "tty":
                path = f"/api/sessions/{sid}/tty-size"
                body = json.dumps({"cols": rnd.randint(20, 300), "rows": rnd.randint(5, 100)})
            else:
                path = f"/api/sessions/{sid}/grade"
                body = "{}"
            t0 = time.monotonic()
            try:
                st, _, data = raw.request("POST", path, [self.auth(who["user"]),
                                                         ("Accept", "application/json")],
                                          body.encode())
                a, j = answer(st, data)
                if kind == "grade" and st == 200 and isinstance(j, dict):
                    steps = j.get("steps") or []
                    if steps and all(s.get("passed") for s in steps):
                        # a student who is root makes any step pass
                        self.n.bump(f"{actor}_all_passed")
                    # the grade was kept (the session shows it), whatever bytes it had
                    gst, _, gdata = raw.request("GET", f"/api/sessions/{sid}",
                                                [self.auth(who["user"])])
                    ga, gj = answer(gst, gdata)
                    kept = isinstance(gj, dict) and gj.get("last_grade")
                    self.n.add(f"{actor} (session after a 200)",
                               ga + ("" if gst != 200 or kept else " without last_grade"))
                self.n.add(actor, a, time.monotonic() - t0)
            except Exception as e:  # noqa: BLE001
                self.n.add(actor, type(e).__name__, time.monotonic() - t0)
                raw.close()
        raw.close()

    # ------------------------------------------------------------ streams
    def streams(self, actor, who, i, open_now):
        base = self.bases[i % len(self.bases)]
        u = urllib.parse.urlsplit(base)
        rnd = random.Random(f"{actor}{i}")
        while not self.stop.is_set():
            lei = rnd.choice([HUGE_ID, HUGE_ID, HUGE_ID, "", TOO_LONG_ID])
            c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
            opened = False
            try:
                h = {"Accept": "text/event-stream", "Authorization": basic(who["user"], self.pw)}
                if lei:
                    h["Last-Event-ID"] = lei
                c.request("GET", f"/api/sessions/{who['sid']}/events", headers=h)
                r = c.getresponse()
                if r.status != 200 or "event-stream" not in (r.getheader("Content-Type") or ""):
                    a, _ = answer(r.status, r.read())
                    self.n.add(actor, a)
                    c.close()
                    self.stop.wait(0.2)   # a hostile client does not honour Retry-After
                    continue
                self.n.add(actor, "200 stream")
                opened = True
                with self.leak_lock:
                    open_now[0] += 1
                    open_now.append(time.monotonic())
                    mine = open_now[-1]
                    self.n.peak(f"{actor}_open_at_once", open_now[0])
                # keepalive comments come every stream_keepalive_s (2 s in the stack):
                # a read that waits 20 s means the server stopped sending them
                c.sock.settimeout(20.0)
                while not self.stop.is_set():
                    try:
                        line = r.readline()    # the answer's framing: a length, chunks
                    except TimeoutError:
                        self.n.bump(f"{actor}_silent_20s")
                        break
                    except (OSError, http.client.HTTPException, ValueError) as e:
                        self.n.bump(f"{actor}_read_error_{type(e).__name__}")
                        break
                    if not line:
                        self.n.bump(f"{actor}_ended_by_server")
                        break
            except Exception as e:  # noqa: BLE001
                self.n.add(actor, type(e).__name__)
            finally:
                if opened:
                    with self.leak_lock:
                        open_now[0] -= 1
                        open_now.remove(mine)
                c.close()
            self.stop.wait(0.5)

    # ------------------------------------------------------- setup fails
    def setupfail(self, who):
        actor = "setupfail"
        lessons = ["test-setup-utf8", "test-setup-badbytes"]
        k = 0
        hdr = [self.auth(who["user"]), ("Accept", "application/json")]
        while not self.stop.is_set():
            lesson = lessons[k % 2]
            raw = Raw(self.bases[k % len(self.bases)], timeout=120)
            k += 1
            try:
                st, _, data = raw.request("POST", "/api/sessions", hdr,
                                          json.dumps({"lesson": lesson}).encode())
            except Exception as e:  # noqa: BLE001
                self.n.add(actor, type(e).__name__)
                self.stop.wait(0.5)
                continue
            a, j = answer(st, data)
            self.n.add(actor, "start " + a)
            if st == 409 and isinstance(j, dict) and j.get("session"):
                try:
                    raw.request("DELETE", f"/api/sessions/{j['session']['id']}", hdr)
                except Exception:  # noqa: BLE001
                    pass
                continue
            if st != 201:
                self.stop.wait(1.0)
                continue
            sid, t0, state = j["id"], time.monotonic(), "starting"
            body = b""
            while not self.stop.is_set() and time.monotonic() - t0 < 120:
                try:
                    gst, _, body = raw.request("GET", f"/api/sessions/{sid}", hdr)
                except Exception:  # noqa: BLE001
                    self.stop.wait(0.3)
                    continue
                if gst == 200:
                    state = json.loads(body.decode("utf-8", "replace")).get("state")
                    if state != "starting":
                        break
                self.stop.wait(0.3)
            if state == "starting":
                # the window ended first, or it never failed: the end of the run checks
                self.n.add(actor, f"{lesson} still starting")
                if not self.stop.is_set():
                    self.n.breach(f"setupfail: {lesson} session {sid} starting after 120 s")
            else:
                try:
                    s = json.loads(body.decode("utf-8"))    # strict: valid UTF-8
                    err = s.get("error") or ""
                    self.n.add(actor, f"{lesson} {state}")
                    if state == "failed" and "\u25cf" in err:
                        self.n.bump("setupfail_multibyte_kept")
                except UnicodeDecodeError:
                    self.n.add(actor, f"{lesson} {state} NOT UTF-8")
                    self.n.breach(f"setupfail: {lesson} session {sid}: answer not UTF-8")
                self.n.sample(f"setupfail {lesson} ms", (time.monotonic() - t0) * 1000)
            try:
                raw.request("DELETE", f"/api/sessions/{sid}", hdr)
            except Exception:  # noqa: BLE001
                pass
            raw.close()

    # ------------------------------------------------------------ headers
    def leaker(self):
        """Another student's ticket, leaked (asked for here as that student):
        a class student's ready session when there is one, else the garbage
        student's."""
        victims = list(self.spec.get("victims") or [])
        fallback = self.spec["garbage"]
        rnd = random.Random(7)
        while not self.stop.is_set():
            cand = rnd.sample(victims, min(3, len(victims))) + [fallback["user"]]
            for v in cand:
                raw = Raw(self.bases[0], timeout=30)
                try:
                    h = [self.auth(v), ("Accept", "application/json")]
                    st, _, data = raw.request("GET", "/api/sessions/current", h)
                    if st != 200:
                        continue
                    s = json.loads(data)
                    if s.get("state") != "ready":
                        continue
                    st, _, data = raw.request("POST", f"/api/sessions/{s['id']}/console-ticket",
                                              h, b"{}")
                    if st == 200:
                        with self.leak_lock:
                            self.leaked = (v, s["id"], json.loads(data)["url"])
                        self.n.bump("tickets_leaked_from_class" if v != fallback["user"]
                                    else "tickets_leaked_from_garbage")
                        break
                except Exception:  # noqa: BLE001
                    pass
                finally:
                    raw.close()
            self.stop.wait(2.0)

    def crafted(self, who, i, bucket):
        actor = "headers"
        me, mine = who["user"], who["sid"]
        raws = [Raw(b, timeout=30) for b in self.bases]
        k = i
        while not self.stop.is_set():
            bucket.take(self.stop)
            with self.leak_lock:
                leak = self.leaked
            if not leak:
                self.stop.wait(0.2)
                continue
            victim, vsid, turl = leak
            k += 1
            fwd = [("Forwarded", f'for=x;remote_user={victim};a="'),
                   ("X-Forwarded-For", f"6.6.6.6, {victim}"),
                   ("X-Remote-User", victim), ("Remote-User", victim)]
            ticket = urllib.parse.parse_qs(urllib.parse.urlsplit(turl).query).get(
                "ticket", [""])[0]
            me_h = [self.auth(me)]
            cases = [
                # (what, method, path, headers, body, rule): "other" and "deny": any 2xx
                # is a breach; "mine": a 2xx must be the student's own session
                ("GET other's session", "GET", f"/api/sessions/{vsid}", me_h + fwd, None,
                 "other"),
                ("GET current", "GET", "/api/sessions/current", me_h + fwd, None, "mine"),
                ("DELETE other's session", "DELETE", f"/api/sessions/{vsid}", me_h + fwd, None,
                 "other"),
                ("ticket for other's session", "POST", f"/api/sessions/{vsid}/console-ticket",
                 me_h + fwd, b"{}", "other"),
                ("grade other's session", "POST", f"/api/sessions/{vsid}/grade", me_h + fwd,
                 b"{}", "other"),
                ("tty-size other's session", "POST", f"/api/sessions/{vsid}/tty-size",
                 me_h + fwd, b'{"cols": 1, "rows": 1}', "other"),
                ("two Authorization headers", "GET", "/api/sessions/current",
                 me_h + [("Authorization", basic(victim, "not-the-password"))], None, "mine"),
                ("other's name, wrong password", "GET", "/api/sessions/current",
                 [("Authorization", basic(victim, "not-the-password"))] + fwd, None, "deny"),
                ("ticket as Bearer", "GET", "/api/sessions/current",
                 [("Authorization", f"Bearer {ticket}")] + fwd, None, "deny"),
                ("no Authorization, Forwarded only", "GET", "/api/sessions/current", fwd, None,
                 "deny"),
                ("oversize header 64 KiB", "GET", "/api/sessions/current",
                 me_h + [("X-Pad", "a" * 65536)] + fwd, None, "mine"),
                ("300 headers", "GET", "/api/sessions/current",
                 me_h + [(f"X-H{j}", "b" * 200) for j in range(300)], None, "mine"),
                ("oversize Forwarded 16 KiB", "GET", f"/api/sessions/{vsid}",
                 me_h + [("Forwarded", f'for=x;remote_user={victim};a="' + "x" * 16384)],
                 None, "other"),
            ]
            j_ = k % (len(cases) + 3)
            fe = (k // (len(cases) + 3)) % len(self.bases)   # each case through both in turn
            raw = raws[fe]
            if j_ >= len(cases):
                self.console(victim, vsid, turl, me, fe, k)
                continue
            name, method, path, hdr, body, rule = cases[j_]
            try:
                st, _, data = raw.request(method, path, hdr + [("Accept", "application/json")],
                                          body)
                a, j = answer(st, data)
                self.n.add(actor, f"{name} ({self.fe_name(fe)}): {a}")
                if 200 <= st < 300:
                    got = j.get("id") if isinstance(j, dict) else None
                    if rule in ("other", "deny") or got != mine:
                        self.n.breach(f"{name} via {self.bases[fe]}: {st} {data[:200]!r}")
            except Exception as e:  # noqa: BLE001
                self.n.add(actor, f"{name} ({self.fe_name(fe)}): {type(e).__name__}")
                raw.close()
        for r in raws:
            r.close()

    def console(self, victim, vsid, turl, me, fe, k):
        """The leaked ticket of victim's, from the hostile student's browser."""
        base = self.bases[fe].replace("http://", "ws://")
        variants = [
            ("leaked ticket, Forwarded unclosed quote",
             [self.auth(me), ("Forwarded", f'for=x;remote_user={victim};a="'),
              ("X-Forwarded-For", f"6.6.6.6;remote_user={victim}")]),
            ("leaked ticket, Forwarded quoted other",
             [self.auth(me), ("Forwarded", f'for=127.0.0.1;remote_user="{victim}"')]),
            ("leaked ticket, oversize Forwarded",
             [self.auth(me), ("Forwarded", f'remote_user="{victim}";a="' + "y" * 12000)]),
        ]
        name, hdr = variants[k % len(variants)]

        async def go():
            try:
                ws = await websockets.connect(base + turl, subprotocols=["labvm-console.v1"],
                                              extra_headers=hdr, open_timeout=15,
                                              close_timeout=2, max_size=None)
            except websockets.InvalidStatusCode as e:
                return f"http {e.status_code}"
            except websockets.InvalidMessage as e:
                # lighttpd's 431 is an HTTP/1.0 answer, which the client library refuses
                return f"refused: {str(e.__cause__ or e)[:50]}"
            except Exception as e:  # noqa: BLE001
                return type(e).__name__
            try:
                while True:
                    m = await asyncio.wait_for(ws.recv(), 10)
                    if isinstance(m, bytes) or '"open"' in m:
                        return "OPENED"
            except websockets.ConnectionClosed as e:
                rc = e.rcvd
                return f"close {rc.code if rc else 1006} {rc.reason if rc else ''}".strip()
            except asyncio.TimeoutError:
                return "no answer in 10 s"
            finally:
                await ws.close()
        res = asyncio.run(go())
        self.n.add("console", f"{name} ({self.fe_name(fe)}): {res}")
        if res == "OPENED":
            self.n.breach(f"console: {name}: {victim}'s ticket opened for {me} via "
                          f"{self.bases[fe]}")

    # -------------------------------------------------------------- run
    def run(self, a):
        sp = self.spec
        ths = []
        on = set(a.only.split(",")) if a.only else set(ACTORS)
        tty, grade = Bucket(a.tty_rate), Bucket(a.grade_rate)
        for who, actor in ((sp["silent"], "silent"), (sp["garbage"], "garbage")):
            if not who:
                continue
            for i in range(a.threads):
                if "tty" in on:
                    ths.append(threading.Thread(target=self.storm,
                                                args=(f"{actor} tty-size", who, "tty", tty, i)))
                if "grade" in on:
                    ths.append(threading.Thread(target=self.storm,
                                                args=(f"{actor} grade", who, "grade", grade, i)))
        open_now = [0]
        for i in range(a.streams if sp["hoarder"] and "streams" in on else 0):
            ths.append(threading.Thread(target=self.streams,
                                        args=("hoarder streams", sp["hoarder"], i, open_now)))
        silent_open = [0]
        for i in range(2 if sp["silent"] and "streams" in on else 0):
            ths.append(threading.Thread(target=self.streams,
                                        args=("silent streams", sp["silent"], i, silent_open)))
        if "setupfail" in on:
            ths.append(threading.Thread(target=self.setupfail, args=(sp["setupfail"],)))
        if "headers" in on:
            ths.append(threading.Thread(target=self.leaker))
            hb = Bucket(a.header_rate)
            for i in range(2 if sp["silent"] and sp["garbage"] else 0):
                ths.append(threading.Thread(target=self.crafted, args=(sp["silent"], i, hb)))
        t0 = time.monotonic()
        for th in ths:
            th.daemon = True
            th.start()
        self.stop.wait(self.duration)
        with self.leak_lock:
            # open for more than 3 s when the run ends (not one answered a moment ago)
            now = time.monotonic()
            for k, o in (("hoarder", open_now), ("silent", silent_open)):
                self.n.extra[f"{k} streams_open_at_end"] = sum(1 for t in o[1:] if now - t > 3)
        self.stop.set()
        for th in ths:
            th.join(30)
        took = time.monotonic() - t0
        by = self.n.by
        rates = {k: round(sum(v.values()) / took, 1) for k, v in by.items()}
        lat = {k: {"n": len(v), "p50_ms": round(pct(v, 50) * 1000, 1),
                   "p99_ms": round(pct(v, 99) * 1000, 1)} for k, v in self.n.lat.items()}
        return {"seconds": round(took, 1), "answers": by, "rates": rates, "latency": lat,
                "breaches": self.n.breaches, "extra": self.n.extra,
                "still_running": sum(1 for th in ths if th.is_alive())}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", required=True)
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tty-rate", type=float, default=40)
    ap.add_argument("--grade-rate", type=float, default=20)
    ap.add_argument("--header-rate", type=float, default=20)
    ap.add_argument("--threads", type=int, default=8, help="per storm and session")
    ap.add_argument("--streams", type=int, default=12, help="hoarder's streams at once")
    ap.add_argument("--only", help="comma-separated actors of " + ",".join(ACTORS))
    a = ap.parse_args()
    with open(a.spec) as f:
        spec = json.load(f)
    res = Hostile(spec, a.duration).run(a)
    with open(a.out + ".tmp", "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
    os.replace(a.out + ".tmp", a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
