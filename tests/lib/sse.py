"""A small text/event-stream client for tests and benchmarks, as a browser's
EventSource reads a stream: events are `id:` / `data:` / `event:` fields up
to a blank line, `:` lines are comments (keepalives). Each event and comment
carries the monotonic time its last byte arrived."""
import base64
import http.client
import json
import os
import socket
import time
import urllib.parse


class Event:
    def __init__(self, id, data, event, t):
        self.id, self.data, self.event, self.t = id, data, event, t

    @property
    def json(self):
        return json.loads(self.data)

    def __repr__(self):
        return f"Event(id={self.id!r}, {self.data[:60]!r})"


class Stream:
    """GET path with Accept: text/event-stream (and Last-Event-ID); .status,
    .headers, then next() -> Event, ("comment", text, t), or None at the end."""

    def __init__(self, path, user="student1", base=None, last_id=None, password=None,
                 timeout=30, headers=None):
        base = base or os.environ["LABVM_URL"]
        u = urllib.parse.urlsplit(base)
        self.conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
        pw = password if password is not None else os.environ.get("LABVM_PASSWORD", "labvm")
        h = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if user:
            h["Authorization"] = "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()
        if last_id is not None:
            h["Last-Event-ID"] = str(last_id)
        h.update(headers or {})
        self.conn.request("GET", u.path.rstrip("/") + path, headers=h)
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.headers = {k.lower(): v for k, v in self.resp.getheaders()}
        self.body = None
        if self.status != 200:
            self.body = self.resp.read().decode("utf-8", "replace")
        self.retry = None
        self.comments = []

    def settimeout(self, s):
        if self.conn.sock:
            self.conn.sock.settimeout(s)

    def next(self):
        """The next event (comments are kept in .comments), or None when the
        stream ended. socket.timeout propagates."""
        fields = {}
        while True:
            line = self.resp.readline()
            if not line:
                return None
            t = time.monotonic()
            line = line.decode("utf-8").rstrip("\r\n")
            if line == "":
                if "data" in fields:
                    return Event(fields.get("id"), fields["data"], fields.get("event"), t)
                fields = {}
                continue
            if line.startswith(":"):
                self.comments.append((line[1:].strip(), t))
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data":
                fields["data"] = fields["data"] + "\n" + value if "data" in fields else value
            elif name == "retry":
                self.retry = int(value)
            else:
                fields[name] = value

    def all(self):
        out = []
        while True:
            e = self.next()
            if e is None:
                return out
            out.append(e)

    def close(self):
        try:
            self.conn.sock and self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.conn.close()


def events_path(sid):
    return f"/api/sessions/{sid}/events"
