"""The admin-only /_sim endpoints (faults, down/up, state, profile, stats,
guests and exec in a guest, compact, tokens); see the README's table."""
import json
import threading
import signal
import time

import errors
import guests
from controllers.pods import is_launcher
import rbac
from resources import BY_PLURAL


class AdminEndpoints:
    def sim_json(self):
        b = self.body()
        if not b.strip():
            return {}
        try:
            return json.loads(b)
        except ValueError as e:
            raise errors.bad_request(f"json parse error: {e}") from None

    def sim_endpoint(self, method, path, q):
        sim = self.sim
        parts = [p for p in path.split("/") if p][1:]
        if parts == ["faults"]:
            if method == "POST":
                body = self.sim_json()
                rules = body if isinstance(body, list) else [body]
                added = [sim.faults.add(r) for r in rules]
                return self.send_json(201, added[0] if len(added) == 1 else {"rules": added})
            if method == "DELETE":
                return self.send_json(200, {"cleared": sim.faults.clear()})
            if method == "GET":
                return self.send_json(200, {"rules": sim.faults.list(), "down": sim.faults.down})
        elif parts == ["down"] and method == "POST":
            sim.faults.down = True
            with sim.store.cond:
                sim.store.cond.notify_all()
            return self.send_json(200, {"down": True})
        elif parts == ["up"] and method == "POST":
            sim.faults.down = False
            return self.send_json(200, {"down": False})
        elif parts == ["state"] and method == "GET":
            with sim.store.lock:
                want = q.get("resource")
                out = {p: list(d.values()) for p, d in sim.store.objs.items()
                       if not want or p == want}
                rv = sim.store.current_rv()
            return self.send_json(200, {"resourceVersion": rv, "objects": out,
                                        "guests": guest_info(sim)})
        elif parts == ["profile"]:
            if method == "POST":
                body = self.sim_json()
                try:
                    sim.profile.set(body.get("profile", sim.profile.name), body.get("time_scale"))
                except ValueError as e:
                    raise errors.bad_request(str(e)) from None
            return self.send_json(200, sim.profile.describe())
        elif parts == ["stats"] and method == "GET":
            return self.send_json(200, stats(sim))
        elif parts == ["guests"] and method == "GET":
            return self.send_json(200, {"guests": guest_info(sim, rss=q.get("rss") in ("1", "true"))})
        elif parts == ["ipam"] and method == "POST":
            body = self.sim_json()
            nxt = body.get("next")
            if nxt is not None and nxt not in sim.controllers.ipam.pool:
                raise errors.bad_request("next must be an address of the pod network")
            with sim.store.lock:
                sim.controllers.ipam.give_next = nxt
            return self.send_json(200, {"next": nxt})
        elif parts == ["cdi"] and method in ("GET", "POST"):
            m = sim.cdi_net.mirror
            if m is None:
                raise errors.ApiError(404, "no registry mirror (no pod network)", "NotFound", {})
            if method == "POST":
                body = self.sim_json()
                if set(body) != {"hold"} or not isinstance(body["hold"], bool):
                    raise errors.bad_request('give {"hold": true|false}')
                m.set_hold(body["hold"])
            return self.send_json(200, sim.cdi_net.state())
        elif parts == ["compact"] and method == "POST":
            sim.store.compact()
            return self.send_json(200, {"compactedTo": sim.store.current_rv()})
        elif parts == ["tokens", "rotate"] and method == "POST":
            body = self.sim_json()
            v = body.get("old_valid_s", 0)
            if not isinstance(v, (int, float)) or not 0 <= v <= 86400:
                raise errors.bad_request("old_valid_s must be seconds (0..86400)")
            return self.send_json(200, sim.rotate_backend_token(float(v)))
        elif parts == ["tokens"] and method == "POST":
            body = self.sim_json()
            if body.get("serviceAccount"):
                ns, _, n = body["serviceAccount"].partition("/")
                user = rbac.sa_user(ns, n)
            elif body.get("user"):
                user = rbac.User(body["user"], body.get("groups") or [])
            else:
                raise errors.bad_request("give user (and groups) or serviceAccount (ns/name)")
            return self.send_json(201, {"token": sim.new_token(user), "user": user.name,
                                        "groups": user.groups})
        elif parts == ["nodes", "bridges"] and method == "GET":
            # every node's Linux bridges and their ports (the bridge CNI
            # plugin's, which its DEL never deletes: plugins#282)
            return self.send_json(200, {"nodes": sim.sessnets.bridges()})
        elif len(parts) == 4 and parts[0] == "cronjobs" and parts[3] == "ran" and method == "POST":
            return self.cronjob_ran(parts[1], parts[2], self.sim_json())
        elif len(parts) == 3 and parts[0] == "nodes" and parts[2] == "exec" and method == "POST":
            return self.node_exec(parts[1], self.sim_json())
        elif len(parts) == 4 and parts[0] == "guests" and parts[3] == "exec" and method == "POST":
            return self.guest_exec(parts[1], parts[2], self.sim_json())
        elif len(parts) == 4 and parts[0] == "guests" and parts[3] == "kill" and method == "POST":
            return self.guest_kill(parts[1], parts[2])
        raise errors.ApiError(404, f"no such simulator endpoint: {method} {path}", "NotFound", {})

    def cronjob_ran(self, ns, name, body):
        """A Job of the CronJob ns/name ran (the stack ran the reaper as it):
        the CronJob controller's status, as kubernetes pkg/controller/cronjob/
        cronjob_controllerv2.go syncCronJob writes it: lastScheduleTime the
        scheduled time of the Job it created (the minute), lastSuccessfulTime
        the Job's completionTime when it succeeded."""
        import util
        ok = body.get("succeeded")
        if set(body) - {"succeeded"} or not isinstance(ok, bool):
            raise errors.bad_request('give {"succeeded": true|false}')
        sim = self.sim
        with sim.store.lock:
            cj = sim.store.get("cronjobs", ns, name)
            if cj is None:
                raise errors.not_found(BY_PLURAL["cronjobs"], name)
            n = util.deep(cj)
            now = time.time()
            st = dict(n.get("status") or {})
            st["lastScheduleTime"] = time.strftime("%Y-%m-%dT%H:%M:00Z", time.gmtime(now))
            if ok:
                st["lastSuccessfulTime"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
            st.pop("active", None)
            n["status"] = st
            sim.api.sys_update("cronjobs", n)
        return self.send_json(200, {"status": st})

    def node_exec(self, node, body):
        """A script on a node as a hostNetwork pod there runs it (an operator's
        DaemonSet): the node's network namespace, where the bridges are."""
        sim = self.sim
        cmd = body.get("cmd")
        if not isinstance(cmd, str):
            raise errors.bad_request("cmd (a shell command string) is required")
        with sim.store.lock:
            if sim.store.get("nodes", "", node) is None:
                raise errors.not_found(BY_PLURAL["nodes"], node)
        try:
            code, out, err = sim.sessnets.node_exec(node, cmd, float(body.get("timeout_s", 30)))
        except KeyError:
            # no pod ever had a secondary network there: nothing of ours on it
            raise errors.ApiError(409, f"node {node} has no network namespace yet (no pod with "
                                  "a secondary network ran there)", "Conflict") from None
        return self.send_json(200, {"exit_code": code, "stdout": out, "stderr": err})

    def guest_kill(self, ns, name):
        """A lab pod's container dies (SIGKILL to its PID 1, as the OOM killer would)."""
        return _kill_pod_container(self, ns, name)

    def guest_exec(self, ns, name, body):
        sim = self.sim
        cmd = body.get("cmd")
        if not isinstance(cmd, str):
            raise errors.bad_request("cmd (a shell command string) is required")
        timeout = float(body.get("timeout_s", 10))
        with sim.store.lock:
            vmi = sim.store.get("virtualmachineinstances", ns, name)
            if vmi is None:
                # a lab Pod's container (the pod's own exec subresource is the real way)
                vmi = sim.store.get("pods", ns, name)
                if vmi is None or is_launcher(vmi):
                    raise errors.not_found(BY_PLURAL["virtualmachineinstances"], name)
            uid = vmi["metadata"]["uid"]
        # a process guest is started just after its VMI turns Running: give a
        # guest that is still starting a moment instead of a spurious 409
        deadline = time.monotonic() + 10
        while (sim.controllers.guest_state.get(uid) == "starting" and
               time.monotonic() < deadline):
            time.sleep(0.02)
        g = sim.controllers.guests.get(uid)
        if g is None or sim.controllers.guest_state.get(uid) != "running":
            raise errors.ApiError(409, f"the guest of {ns}/{name} is not running", "Conflict")
        try:
            code, out, err = g.exec(cmd, timeout)
        except NotImplementedError as e:
            raise errors.ApiError(501, str(e), "NotImplemented") from None
        return self.send_json(200, {"exit_code": code,
                                    "stdout": out.decode("utf-8", "replace"),
                                    "stderr": err.decode("utf-8", "replace")})


def _kill_pod_container(handler, ns, name):
    sim = handler.sim
    with sim.store.lock:
        pod = sim.store.get("pods", ns, name)
        if pod is None:
            raise errors.not_found(BY_PLURAL["pods"], name)
        uid = pod["metadata"]["uid"]
    g = sim.controllers.guests.get(uid)
    if g is None or getattr(g, "kind", "") != "pod" or not g.alive():
        raise errors.ApiError(409, f"the container of {ns}/{name} is not running", "Conflict")
    g.kill(signal.SIGKILL)
    return handler.send_json(200, {"killed": name})


def guest_info(sim, rss=False):
    out = []
    c = sim.controllers
    for uid, state in list(c.guest_state.items()):
        g = c.guests.get(uid)
        key = sim.store.by_uid.get(uid)
        d = {"uid": uid, "state": state, "ip": c.ips.get(uid),
             "vmi": f"{key[1]}/{key[2]}" if key else None,
             "workdir": getattr(g, "workdir", None), "kind": getattr(g, "kind", None)}
        if getattr(g, "kind", None) == "qemu":
            d.update(pid=g.pid, overlay=g.overlay_path, accel=g.accel,
                     memory_mib=g.memory_mib, cpus=g.cpus, error=g.error)
        if rss and g is not None:
            try:
                d["rss_bytes"] = g.rss()
            except Exception:  # noqa: BLE001
                d["rss_bytes"] = None
        out.append(d)
    return out


def self_rss():
    return guests.status_kb("self", "VmRSS") * 1024


def stats(sim):
    with sim.store.lock:
        counts = {p: len(d) for p, d in sim.store.objs.items()}
        rv = sim.store.current_rv()
    return {"rss_bytes": self_rss(), "objects": counts, "resourceVersion": rv,
            "requests": sim.requests, "threads": threading.active_count(),
            "alpn": sim.alpn_stats(), "token_rotations": sim.rotations,
            "guests": sum(1 for s in sim.controllers.guest_state.values() if s == "running"),
            "controller_passes": sim.controllers.passes,
            "uptime_s": round(time.time() - sim.started, 3), "profile": sim.profile.describe()}

