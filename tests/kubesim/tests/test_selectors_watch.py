#!/usr/bin/python3
"""kubesim: label/field selector semantics and watch (timeout: 120)."""
import socket
import time
import urllib.parse

from simlib import SECRETS, Sim, secret
from tap import T

t = T()
sim = Sim("--watch-history", "100", guest="none")
A = sim.admin

OBJS = {
    "s-a": {"app": "web", "tier": "front", "env": "dev"},
    "s-b": {"app": "web", "tier": "back"},
    "s-c": {"app": "db", "env": "prod"},
    "s-d": {"env": ""},
    "s-e": {},
}
for n, labels in OBJS.items():
    s = secret(n, "x", labels=labels)
    if not labels:
        del s["metadata"]["labels"]
    A.post(SECRETS, s)


def names(sel=None, field=None):
    q = []
    if sel is not None:
        q.append("labelSelector=" + urllib.parse.quote(sel))
    if field is not None:
        q.append("fieldSelector=" + urllib.parse.quote(field))
    r = A.get(SECRETS + ("?" + "&".join(q) if q else ""))
    if r.status != 200:
        return r.status
    return sorted(i["metadata"]["name"] for i in r.json["items"])


@t.test
def label_selector_semantics():
    t.eq(names("app=web"), ["s-a", "s-b"], "=")
    t.eq(names("app==web"), ["s-a", "s-b"], "==")
    t.eq(names("app!=web"), ["s-c", "s-d", "s-e"], "!= matches objects without the key")
    t.eq(names("app in (web,db)"), ["s-a", "s-b", "s-c"], "in")
    t.eq(names("app notin (web)"), ["s-c", "s-d", "s-e"], "notin matches missing keys")
    t.eq(names("env"), ["s-a", "s-c", "s-d"], "exists")
    t.eq(names("!env"), ["s-b", "s-e"], "does not exist")
    t.eq(names("app=web,tier=front"), ["s-a"], "AND of requirements")
    t.eq(names("app=web,!env"), ["s-b"], "AND with !key")
    t.eq(names("env="), ["s-d"], "empty value")
    t.eq(names("env in (dev,prod),app"), ["s-a", "s-c"], "in plus exists")
    t.eq(names(" app = web "), ["s-a", "s-b"], "spaces allowed")
    t.eq(names(""), sorted(OBJS), "empty selector")


@t.test
def bad_selectors():
    for bad in ("app in web", "app=(x", "=x", "app notin ()", "a b"):
        t.eq(names(bad), 400, f"{bad!r} is refused")


@t.test
def field_selectors():
    t.eq(names(field="metadata.name=s-b"), ["s-b"], "metadata.name=")
    t.eq(names(field="metadata.name!=s-b"), ["s-a", "s-c", "s-d", "s-e"], "metadata.name!=")
    t.eq(names(field="metadata.name==s-b"), ["s-b"], "metadata.name==")
    t.eq(names("app=web", "metadata.name=s-a"), ["s-a"], "with a label selector")
    t.eq(names(field="metadata.namespace=labs,metadata.name=s-c"), ["s-c"], "two fields")
    t.eq(names(field="spec.foo=1"), 400, "unsupported field")
    r = A.get("/apis/kubevirt.io/v1/virtualmachines?fieldSelector=metadata.name%3Dx")
    t.eq(r.status, 200, "cluster-wide list of a custom resource with metadata.name")


@t.test
def watch_events_from_resource_version():
    rv = A.get(SECRETS).json["metadata"]["resourceVersion"]
    w = A.watch(SECRETS + f"?watch=1&resourceVersion={rv}&labelSelector=w%3D1&timeoutSeconds=5")
    t.eq(w.status, 200, "watch opens")
    t.eq(w.ctype, "application/json;stream=watch", "watch content type")
    A.post(SECRETS, secret("w-1", "x", labels={"w": "1"}))
    A.post(SECRETS, secret("w-skip", "x", labels={"w": "2"}))
    A.patch(SECRETS + "/w-1", {"metadata": {"annotations": {"a": "b"}}})
    A.patch(SECRETS + "/w-skip", {"metadata": {"labels": {"w": "1"}}})   # starts matching
    A.patch(SECRETS + "/w-1", {"metadata": {"labels": {"w": "0"}}})      # stops matching
    A.delete(SECRETS + "/w-skip")
    evs = w.events(5)
    got = [(e["type"], e["object"]["metadata"]["name"]) for e in evs]
    t.eq(got, [("ADDED", "w-1"), ("MODIFIED", "w-1"), ("ADDED", "w-skip"), ("DELETED", "w-1"),
               ("DELETED", "w-skip")], "events, filtered like the watch cache")
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in evs]
    t.ok(rvs == sorted(rvs) and len(set(rvs)) == len(rvs), "increasing resourceVersions", rvs)
    t.ok(all(r > int(rv) for r in rvs), "only events after the given resourceVersion")
    w.close()
    # replay from an older version
    w = A.watch(SECRETS + f"?watch=true&resourceVersion={rv}&labelSelector=w%3D1&timeoutSeconds=2")
    again = [(e["type"], e["object"]["metadata"]["name"]) for e in w.events(5)]
    t.eq(again, got, "the same events replayed from history")
    w.close()


@t.test
def watch_without_version_lists_first_and_times_out():
    # the client waits up to 120 s for data: the end seen below is the server's
    w = A.watch(SECRETS + "?watch=1&labelSelector=app&timeoutSeconds=1", timeout=120)
    evs = w.events(2)
    t.eq([e["type"] for e in evs], ["ADDED", "ADDED"], "initial ADDED events")
    t.eq(sorted(e["object"]["metadata"]["name"] for e in evs), ["s-a", "s-b"], "first two ADDED")
    rest = w.events(1)
    t.eq([e["object"]["metadata"]["name"] for e in rest], ["s-c"], "third ADDED")
    try:
        end = "eof" if not w.buf and w.resp.read1(65536) == b"" else "more data"
    except (socket.timeout, TimeoutError):
        end = "read timeout: the stream did not end"
    t.eq(end, "eof", "then timeoutSeconds ends the stream")
    w.close()


@t.test
def watch_bookmarks():
    rv = A.get(SECRETS).json["metadata"]["resourceVersion"]
    w = A.watch(SECRETS + f"?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&"
                "timeoutSeconds=4&labelSelector=none")
    e = w.next()
    t.ok(e is not None and e["type"] == "BOOKMARK", "a BOOKMARK arrives", e)
    if e:
        t.ok(int(e["object"]["metadata"]["resourceVersion"]) >= int(rv), "bookmark rv")
        t.eq(set(e["object"]["metadata"]), {"resourceVersion"}, "bookmark carries only rv")
    w.close()


@t.test
def too_old_resource_version_is_410():
    old = A.get(SECRETS).json["metadata"]["resourceVersion"]
    for i in range(130):  # more than --watch-history 100 events
        A.patch(SECRETS + "/s-e", {"metadata": {"annotations": {"n": str(i)}}})
    w = A.watch(SECRETS + f"?watch=1&resourceVersion={old}")
    e = w.next()
    t.eq(w.status, 200, "watch answers 200 then an ERROR event (as the watch cache does)")
    t.ok(e and e["type"] == "ERROR", "ERROR event", e)
    if e:
        t.eq(e["object"].get("code"), 410, "code 410")
        t.eq(e["object"].get("reason"), "Expired", "reason Expired")
        t.ok("too old resource version" in e["object"].get("message", ""), "message")
    w.close()
    page = A.get(SECRETS + "?limit=2")
    cont = page.json["metadata"].get("continue")
    t.ok(cont, "a continue token")
    A.patch(SECRETS + "/s-e", {"metadata": {"annotations": {"after": "the list"}}})
    r = A.post("/_sim/compact")
    t.eq(r.status, 200, "compaction")
    compacted = int(r.json["compactedTo"])
    r = A.get(SECRETS + f"?limit=2&continue={cont}")
    t.eq(r.status, 410, "an expired continue token is HTTP 410")
    t.eq((r.json or {}).get("reason"), "Expired", "410 reason Expired")
    w = A.watch(SECRETS + f"?watch=1&resourceVersion={compacted - 1}&timeoutSeconds=1")
    e = w.next()
    t.ok(e and e["type"] == "ERROR" and e["object"]["code"] == 410, "expired after compaction", e)
    w.close()
    try:
        from kubernetes import client, watch
        from kubernetes.client.rest import ApiException
        cfg = client.Configuration()
        cfg.host, cfg.ssl_ca_cert = sim.url, sim.ca
        cfg.api_key = {"authorization": "Bearer " + sim.admin_token}
        core = client.CoreV1Api(client.ApiClient(cfg))
        try:
            for _ in watch.Watch().stream(core.list_namespaced_secret, "labs",
                                          resource_version=old, timeout_seconds=2):
                pass
            t.fail("python3-kubernetes did not see the 410")
        except ApiException as ex:
            t.eq(ex.status, 410, "python3-kubernetes raises ApiException(410)")
    except ImportError:
        t.diag("python3-kubernetes not installed; skipped its part")


@t.test
def watch_single_object_and_deletion():
    A.post(SECRETS, secret("one", "x"))
    w = A.watch(SECRETS + "?watch=1&fieldSelector=metadata.name%3Done&timeoutSeconds=3")
    first = w.next()
    t.eq((first or {}).get("type"), "ADDED", "initial state")
    A.delete(SECRETS + "/one")
    e = w.next()
    t.eq((e or {}).get("type"), "DELETED", "DELETED event")
    if e:
        t.ok(int(e["object"]["metadata"]["resourceVersion"]) >
             int(first["object"]["metadata"]["resourceVersion"]), "DELETED carries a newer rv")
    w.close()


sim.stop()
t.done()
