"""KubeVirt's subresources (subresources.kubevirt.io): virtualmachines/
{start,stop,restart} and the VMI's serial console (a WebSocket relayed to
the guest's console socket by streams.py; a new connection kicks the
previous one)."""
import time

import errors
import rbac
import util
from resources import BY_PLURAL

from .streams import CONSOLE_PROTO, WsSession, upgrade_websocket


class KubevirtSubresources:
    def kubevirt_sub(self, method, route, q, user):
        sim = self.sim
        res, ns, name, sub = route["res"], route["ns"], route["name"], route["sub"]
        a = {"verb": route["verb"], "group": "subresources.kubevirt.io", "resource": res.plural,
             "subresource": sub, "namespace": ns, "name": name}
        if not user.admin and not sim.authz.allowed(user, a):
            raise errors.ApiError(403, f'{res.plural}.subresources.kubevirt.io "{name}" is '
                                  f"forbidden: {rbac.forbidden_message(user, a)}", "Forbidden",
                                  {"name": name, "group": "subresources.kubevirt.io",
                                   "kind": res.plural})
        if res.plural == "virtualmachineinstances" and sub == "console":
            return self.console(ns, name)
        if res.plural == "virtualmachines" and sub in ("start", "stop", "restart") and method == "PUT":
            return self.vm_action(ns, name, sub)
        raise errors.ApiError(404, "the server could not find the requested resource",
                              "NotFound", {})

    def vm_action(self, ns, name, action):
        sim = self.sim
        res = BY_PLURAL["virtualmachines"]
        with sim.store.lock:
            vm = sim.store.get("virtualmachines", ns, name)
            if vm is None:
                raise errors.not_found(res, name)
            n = util.deep(vm)
            spec = n["spec"]
            spec.pop("running", None)
            if action == "start":
                spec["runStrategy"] = "Always"
            elif action == "stop":
                spec["runStrategy"] = "Halted"
            else:
                vmi = sim.store.get("virtualmachineinstances", ns, name)
                if vmi is not None:
                    sim.api.sys_delete("virtualmachineinstances", vmi)
            n["metadata"]["generation"] = n["metadata"].get("generation", 1) + 1
            sim.api.sys_update("virtualmachines", n)
        return self.send_text(202, "")

    def console(self, ns, name):
        sim = self.sim
        res = BY_PLURAL["virtualmachineinstances"]
        with sim.store.lock:
            vmi = sim.store.get("virtualmachineinstances", ns, name)
            if vmi is None:
                raise errors.not_found(res, name)
            uid = vmi["metadata"]["uid"]
            phase = util.dig(vmi, "status", "phase")
            if util.dig(vmi, "spec", "domain", "devices", "autoattachSerialConsole") is False:
                raise errors.ApiError(400, "No serial consoles are present.", "BadRequest")
            if phase == "Failed":
                raise errors.ApiError(409, "VMI is in failed status", "Conflict")
            if phase != "Running":
                raise errors.ApiError(400, "VMI is not running", "BadRequest")
        up = (self.headers.get("Upgrade") or "").lower()
        key = self.headers.get("Sec-WebSocket-Key")
        if up != "websocket" or not key:
            raise errors.ApiError(400, "websocket: the client is not using the websocket "
                                  "protocol: 'upgrade' token not found in 'Connection' header",
                                  "BadRequest")
        guest = None
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            g = sim.controllers.guests.get(uid)
            if g is not None and sim.controllers.guest_state.get(uid) == "running":
                guest = g
                break
            if sim.controllers.guest_state.get(uid) in ("failed", "stopped", "stopping",
                                                       "succeeded"):
                break
            time.sleep(0.02)
        if guest is None:
            raise errors.ApiError(400, "VMI is not running", "BadRequest")
        try:
            gsock = guest.console()
        except Exception as e:  # noqa: BLE001
            raise errors.ApiError(500, f"Internal error occurred: console: {e}",
                                  "InternalError") from None
        protos = [p.strip() for p in (self.headers.get("Sec-WebSocket-Protocol") or "").split(",")]
        upgrade_websocket(self, key, CONSOLE_PROTO if CONSOLE_PROTO in protos else None)
        sess = WsSession(self, gsock)
        with sim.console_lock:
            old = sim.consoles.get((ns, name))
            sim.consoles[(ns, name)] = sess
        if old is not None:
            old.kick()
        try:
            sess.run()
        finally:
            with sim.console_lock:
                if sim.consoles.get((ns, name)) is sess:
                    del sim.consoles[(ns, name)]

