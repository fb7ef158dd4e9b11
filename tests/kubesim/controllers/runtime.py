"""The node's guest runtime: what runs behind a launcher pod (today a VMI's
guest, through the driver interface documented at the top of guests.py: a
process guest, a QEMU guest or none). Guests are started and stopped by
worker threads, never under the store lock; each guest's state is one of
"starting", "running", "stopping", "stopped", "failed" or "succeeded" (it
powered itself off). A health thread (check) notices guests that died on
their own. Reused by the controllers that run guests (kubevirt/handler.py;
later the kubelet, for pods)."""
import queue
import threading
import time
import traceback

ENDED = ("stopped", "failed", "succeeded")


class GuestWorkers:
    """N worker threads; the operations of one guest always go to the same worker, in order."""

    def __init__(self, n=4, log=print):
        self.qs = [queue.Queue() for _ in range(n)]
        self.log = log
        for i, q in enumerate(self.qs):
            threading.Thread(target=self._loop, args=(q,), name=f"guest-worker-{i}",
                             daemon=True).start()

    def _loop(self, q):
        while True:
            fn = q.get()
            try:
                fn()
            except Exception:  # noqa: BLE001
                self.log("guest worker: " + traceback.format_exc())

    def submit(self, key, fn):
        self.qs[hash(key) % len(self.qs)].put(fn)



class GuestRuntime:
    def __init__(self, sim, ipam, wake):
        self.sim = sim
        self.store = sim.store
        self.ipam = ipam
        self.wake = wake           # threading.Event: the controllers' next pass
        self.guests = {}           # uid -> guest driver
        self.state = {}            # uid -> "starting" | "running" | "stopping" | "stopped" |
        #                            "failed" | "succeeded" (the guest powered itself off)
        self.errors = {}           # uid -> why its guest did not start or died
        self.agent_info = {}       # uid -> guest OS info once the QEMU guest agent answered
        self.real = getattr(sim.guest_class, "kind", "") == "qemu"
        self.workers = GuestWorkers(4, sim.log)

    def start(self, uid, cls, kw, label):
        """Start cls(**kw) for uid on a worker (the caller holds the store lock):
        running once its start() returns, failed if it raises."""
        self.state[uid] = "starting"

        def go():
            g = None
            try:
                g = cls(**kw)
                self.guests[uid] = g
                g.start()
                stop = False
                with self.store.lock:
                    if self.state.get(uid) == "starting":
                        self.state[uid] = "running"
                    elif self.state.get(uid) in ("stopping", "stopped"):
                        stop = True
                if stop:
                    g.stop()
            except Exception as e:  # noqa: BLE001
                self.sim.log(f"guest {label} failed to start: {e}")
                with self.store.lock:
                    self.state[uid] = "failed"
                    self.errors[uid] = str(e)
                if g is not None and getattr(g, "kind", "") == "qemu":
                    g.stop(timeout=0)   # overlay, seed, sockets
            self.wake.set()
        self.workers.submit(uid, go)

    def stop(self, uid):
        """Stop uid's guest on its worker (the caller holds the store lock)."""
        gs = self.state.get(uid)
        if gs in (None,) + ENDED:
            if gs is None:
                self.ipam.release(uid)
            return
        self.state[uid] = "stopping"

        def go():
            g = self.guests.get(uid)
            try:
                if g is not None:
                    g.stop()
            finally:
                with self.store.lock:
                    self.state[uid] = "stopped"
                    self.guests.pop(uid, None)
                    self.ipam.release(uid)
                self.wake.set()
        self.workers.submit(uid, go)

    def check(self):
        """Mark guests that died on their own (called periodically, off the store lock).
        A real guest that powered itself off (QEMU exit 0) succeeded, anything
        else failed; its overlay goes at once (an ephemeral disk dies with QEMU)."""
        for uid, g in list(self.guests.items()):
            if self.state.get(uid) == "running" and not g.alive():
                real = getattr(g, "kind", "") == "qemu"
                state = "failed"
                if real:
                    code = g.exit_code()
                    state = "succeeded" if code == 0 and not g.error else "failed"
                    why = g.error or f"qemu exited with {code}"
                with self.store.lock:
                    if self.state.get(uid) != "running":
                        continue
                    self.state[uid] = state
                    self.ipam.release(uid)
                    if real:
                        self.errors[uid] = why
                if real:
                    self.sim.log(f"guest {g.name}: {why} ({state})")
                    self.workers.submit(uid, g.stop)
                self.wake.set()

    def forget(self, live):
        """Drop what is known of ended guests whose owner is gone (uid not in live)."""
        for uid in [u for u in self.state if u not in live and self.state[u] in ENDED]:
            self.state.pop(uid, None)
            self.guests.pop(uid, None)
            self.errors.pop(uid, None)
            self.agent_info.pop(uid, None)

    def stop_all(self):
        """Stop every guest at once and wait a little (the simulator is exiting)."""
        gs = list(self.guests.values())
        threads = []
        for g in gs:
            # a real guest gets 3 s to power off, then QEMU is killed: all done
            # well within the 8 s a stack gives the simulator after SIGTERM
            fn = (lambda g=g: g.stop(timeout=3)) if getattr(g, "kind", "") == "qemu" else g.stop
            t = threading.Thread(target=fn, daemon=True)
            t.start()
            threads.append(t)
        deadline = time.monotonic() + (6 if self.real else 4)
        for t in threads:
            t.join(max(0.01, deadline - time.monotonic()))
