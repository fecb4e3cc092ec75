"""Is the served ensemble serving, and serving the right answers? Health that tells busy
from dead, and a supervisor that heals only on evidence.

Triton 2.51's readiness does not see a dead python-backend stub: after a stub is killed,
the model, the ensemble and the server all stay READY while every request that reaches the
model fails with "Stub process '<model>_0_0' is not healthy."; the stub is never started
again, never reaped (a zombie), and its instance never finishes unloading. A config loaded
over the repository's (the model-control API's `config` override) keeps serving until
the server restarts. And a server that is merely saturated answers a probe late.

So `serve` looks for evidence, not for slowness:

- **death**: the tritonserver process is gone, or a stub it started is (a zombie or no
  process: `processes.python_stubs`); a canary error that names a dead stub;
- **wrong answers**: an output of the canary text (the scores, the interval, the formulas) differs from the
  values `assemble` recorded (`Canary`, `<repository>/readability/1/canary.json`) by more
  than their tolerance; or a model of the repository is gone (NOT_FOUND);
- **no progress**: a step has requests queued (`nv_inference_pending_request_count`) and
  has finished no execute (the statistics' `execution_count`) for `stall_timeout` seconds;
- **a frozen server**: the tritonserver process is stopped (SIGSTOP, a tracer: `/proc` says
  so, not the server) and still is `STOPPED_GRACE` s later, or its own `/v2/health/live`, asked every
  second with a 2 s deadline by a thread of its own, has not answered for
  `freeze_timeout` seconds (that endpoint's threads never wait for inference, so load does
  not silence it). Readiness turns false at once while the process is stopped, and after
  `LIVE_GRACE` seconds of silence. A frozen server acts on no signal but SIGKILL, so its
  repair starts with one.

A canary that times out or is refused as busy is none of these: under load it waits
behind real work, and that proves the server is busy, not dead. On evidence the supervisor
restarts tritonserver from the repository (which also undoes any override), after
draining it: the ensemble stops taking requests and the ones in flight finish first.
Then it checks the canary again and says so. Triton 2.51 cannot replace a dead stub in
place without leaving its instance behind for good, so a restart (about 2 s for the demo
repository) is the one repair.

`Supervisor.status()` is what the health endpoints of `serve` answer (`probes.py`):

A dead-stub answer the front door saw is a suspicion (`poke`): the supervisor looks at once
(the processes, then a canary of its own), repairs on evidence, and otherwise ends the
front door's hold (`dismiss`) and says so.

- live: serve is supervising and the server is running or being restarted by it. It is
  false only when serve cannot get a working server up at all. Load never makes it false.
- ready: the server runs, no repair is under way, no stub is dead, and the last canary
  that came back was right. Busy is ready.
"""

from __future__ import annotations

import itertools
import logging
import signal
import threading
import time
from typing import Any, Callable

from ..repository.canary import Canary
from .canary_probe import Probe, check
from .processes import alive, instance_model, python_stubs, reap_zombies, stopped

log = logging.getLogger(__name__)

#: Seconds between the starts of one repair while tritonserver aborts (status -6) as it
#: starts again: Triton 2.51 now and then does after a stub was killed, before it writes a
#: line of its log, for several seconds in a row (a CI run: 4 aborts, healed after 18.2 s
#: over three repairs, 20 honest requests failed between them); the queue stays held.
ABORT_PAUSES = (0.5, 1.0, 2.0, 4.0)
#: Seconds the canary that checks a dead-stub answer of the front door (`confirm`) waits.
CONFIRM_TIMEOUT = 10.0
#: tritonserver's /v2/health/live: asked every LIVE_EVERY s, each time for at most
#: LIVE_TIMEOUT s; silent for LIVE_GRACE s, serve is not ready.
LIVE_EVERY = 1.0
LIVE_TIMEOUT = 2.0
LIVE_GRACE = 6.0
#: Events the supervisor keeps (`status()` shows the last 8).
MAX_EVENTS = 256
#: Seconds a stopped tritonserver is given to be continued before it is repaired.
STOPPED_GRACE = 2.0


class Supervisor:
    """Watches a `TritonServer` it owns and heals it on evidence (see the module doc).

    Every `interval` seconds it checks the processes and the progress of the queues, and
    starts a canary inference unless one is still waiting for its answer (at most
    `probe_timeout` s: under load the canary waits behind real work). Each event is logged
    (this module's logger) and kept in `events` as (time, kind, message)."""

    def __init__(
        self,
        server,
        interval: float = 5.0,
        canary: Canary | None = None,
        protocol: str = "grpc",
        probe_timeout: float = 60.0,
        stall_timeout: float = 120.0,
        drain_timeout: float = 10.0,
        start_timeout: float = 300.0,
        hold: Callable[[], None] | None = None,
        release: Callable[[], None] | None = None,
        dismiss: Callable[[], None] | None = None,
        freeze_timeout: float = 20.0,
    ):
        self.server = server
        self.interval = interval
        self.canary = canary
        self.protocol = protocol
        self.probe_timeout = probe_timeout
        self.stall_timeout = stall_timeout
        self.drain_timeout = drain_timeout
        self.start_timeout = start_timeout
        #: called before a repair and after it (serve's front door holds its queue meanwhile)
        self.hold, self.release = hold or (lambda: None), release or (lambda: None)
        #: called when a suspicion (`poke`) found nothing to repair (the front door's hold ends)
        self.dismiss = dismiss or self.release
        #: serve's other children, which their own owners wait for (the door workers): never reaped here
        self.own_children: Callable[[], list[int]] = lambda: []
        self.freeze_timeout = freeze_timeout
        self._suspected = False  # a poke waits for its look
        self._answered_at = time.monotonic()  # tritonserver's /v2/health/live last answered
        self._liveness: threading.Thread | None = None
        self.events: list[tuple[float, str, str]] = []
        self.restarts = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._probe_thread: threading.Thread | None = None
        self._probe_result: Probe | None = None
        self.last_probe: Probe | None = None
        self._stubs: dict[int, str] = {}
        self._progress: dict[str, tuple[int, float]] = {}  # model -> (executions, since when unchanged)
        self.phase = "starting"  # starting, serving, repairing, stopping, failed
        self.problem = ""  # why not ready, when not
        self._generation = 0  # restarts so far: a canary sent to an earlier server is not evidence
        self._next_repair = 0.0  # no repair before this time (monotonic): backoff while repairs fail
        self._backoff = max(interval, 5.0)

    # -- events and status ----------------------------------------------------------
    def _event(self, kind: str, message: str) -> None:
        self.events.append((time.time(), kind, message))
        del self.events[:-MAX_EVENTS]  # bounded: the last ones are what an operator reads
        log.warning(message) if kind in ("unhealthy", "failed", "error", "still-unhealthy") else log.info(message)

    def url(self) -> str:
        return self.server.http_url if self.protocol == "http" else self.server.grpc_url

    def status(self) -> dict[str, Any]:
        """What the health endpoints answer: live, ready, and why."""

        with self._lock:
            phase, problem, probe = self.phase, self.problem, self.last_probe
        running = self.server.process is not None and self.server.process.poll() is None
        gone = sorted(instance for pid, instance in list(self._stubs.items()) if not alive(pid))
        if gone and not problem:  # seen at once, before the next round repairs it
            problem = f"the python-backend stub of {', '.join(gone)} is gone"
        if running and phase == "serving" and not problem:
            problem = self._frozen()
        live = phase != "failed" and (running or phase in ("starting", "repairing", "stopping"))
        ready = phase == "serving" and running and not problem and (probe is None or probe.kind in ("ok", "busy"))
        return {
            "live": live,
            "ready": ready,
            "phase": phase,
            "problem": problem or None,
            "canary": None
            if probe is None
            else {"kind": probe.kind, "message": probe.message, "seconds": round(probe.seconds, 3)},
            "restarts": self.restarts,
            "pid": self.server.process.pid if self.server.process else None,
            # the last repairs and what they found, oldest first (what an operator asks first)
            "events": [
                {"at": round(at, 3), "kind": kind, "message": message[:300]} for at, kind, message in self.events[-8:]
            ],
        }

    def _set(self, phase: str | None = None, problem: str | None = None) -> None:
        with self._lock:
            if phase is not None:
                self.phase = phase
            if problem is not None:
                self.problem = problem

    # -- evidence -------------------------------------------------------------------
    def started(self) -> None:
        """Note the server's stubs and counters after a (re)start; ready from now on."""

        self._stubs = python_stubs(self.server.pid)
        self._progress = {}
        self._probe_result = None
        self._answered_at = time.monotonic()
        self._set("serving", "")

    def silent(self) -> float:
        """Seconds since tritonserver's /v2/health/live last answered (`watch_liveness`)."""
        return time.monotonic() - self._answered_at

    def _frozen(self) -> str:
        """Why the server looks frozen now ('' where it does not)."""
        pid = self.server.process.pid if self.server.process is not None else None
        if pid is not None and stopped(pid):
            return f"tritonserver (pid {pid}) is stopped (SIGSTOP or a tracer): it answers nothing"
        if self._liveness is not None and self.silent() >= LIVE_GRACE:
            return f"tritonserver has not answered /v2/health/live for {self.silent():.0f} s"
        return ""

    def watch_liveness(self) -> None:
        """Ask tritonserver's /v2/health/live every LIVE_EVERY s (LIVE_TIMEOUT s each) in a
        thread of its own until `stop()`; `silent()` says since when it has not answered."""

        def run() -> None:
            while not self._stop.is_set():
                with self._lock:
                    repairing = self.phase != "serving"
                if repairing or self.server.live(timeout=LIVE_TIMEOUT):
                    self._answered_at = time.monotonic()
                self._stop.wait(LIVE_EVERY)

        self._liveness = threading.Thread(target=run, daemon=True, name="liveness")
        self._liveness.start()

    def freeze(self) -> str:
        """Why the server is to be repaired as frozen ('' while it is not): its process
        stopped and still stopped STOPPED_GRACE s later, or silent for `freeze_timeout` s."""
        pid = self.server.process.pid if self.server.process is not None else None
        if pid is not None and stopped(pid):
            if not self._stop.wait(STOPPED_GRACE) and stopped(pid):
                return f"tritonserver (pid {pid}) is stopped (SIGSTOP or a tracer) and answers nothing"
        if self.freeze_timeout > 0 and self._liveness is not None and self.silent() >= self.freeze_timeout:
            return f"tritonserver has not answered /v2/health/live for {self.silent():.0f} s"
        return ""

    def dead_stubs(self) -> list[str]:
        """The instances whose stub process is gone or a zombie, and that no new stub serves
        (a model loaded again through the model-control API replaces its stubs)."""

        gone = {pid: instance for pid, instance in self._stubs.items() if not alive(pid)}
        if not gone:
            return []
        now = python_stubs(self.server.pid)
        replaced = set(now.values())
        for pid in gone:
            del self._stubs[pid]
        self._stubs.update({pid: instance for pid, instance in now.items() if instance in gone.values()})
        return sorted(set(gone.values()) - replaced)

    def stalled(self, now: float | None = None) -> list[str]:
        """The steps with requests queued that have finished no execute for `stall_timeout` s."""
        now = time.monotonic() if now is None else now
        try:
            counts = self.server.execution_counts()
            pending = self.server.pending_requests()
        except Exception:  # noqa: BLE001 - an endpoint that does not answer proves nothing here
            return []
        out = []
        for model, executions in counts.items():
            before = self._progress.get(model)
            if before is None or before[0] != executions or not pending.get(model):
                self._progress[model] = (executions, now)
            elif now - before[1] >= self.stall_timeout:
                out.append(model)
        return out

    def _probe_in_background(self) -> Probe | None:
        """The canary's answer if one came back since the last call (starting a new canary
        when none is waiting), else None."""
        thread = self._probe_thread
        if thread is not None and thread.is_alive():
            return None
        result, self._probe_result = self._probe_result, None
        generation = self._generation

        def run():
            probe = check(self.url(), self.protocol, self.probe_timeout, self.canary)
            if generation == self._generation:
                self._probe_result = probe

        self._probe_thread = threading.Thread(target=run, daemon=True, name="canary")
        self._probe_thread.start()
        return result

    def check_once(self) -> str | None:
        """One round of checks; the repair it made ("restart"), or None."""

        process = self.server.process
        keep = ((process.pid,) if process is not None else ()) + tuple(self.own_children())
        reap_zombies(keep=keep)
        if process is not None and process.poll() is not None:
            return self.repair(f"tritonserver (pid {process.pid}) exited with status {process.returncode}", drain=False)
        dead = self.dead_stubs()
        if dead:
            return self.repair(
                f"the python-backend stub of {', '.join(dead)} is gone (Triton does not restart it; "
                "every request to it fails)",
                abandon=[instance_model(i) for i in dead],
            )
        frozen = self.freeze()
        if frozen:
            return self.repair(frozen, drain=False, kill=True)
        if self._liveness is not None and self.silent() >= LIVE_GRACE:
            return None  # its statistics and a canary would only wait for it too
        stalled = self.stalled()
        if stalled:
            return self.repair(
                f"{', '.join(stalled)} has requests queued and finished nothing for {self.stall_timeout:g} s"
            )
        probe = self._probe_in_background()
        if probe is None:
            return None
        with self._lock:
            self.last_probe = probe
        if probe.evidence:
            return self.repair(f"canary: {probe.message}", abandon=probe.dead_stubs)
        return None

    # -- repair -----------------------------------------------------------------------
    def confirm(self) -> str | None:
        """Look behind a dead-stub answer the front door saw (`poke`), once this round's
        checks found nothing: a canary of its own; on evidence, repair; otherwise end the
        front door's hold (`dismiss`) and say so."""
        probe = check(self.url(), self.protocol, min(CONFIRM_TIMEOUT, self.probe_timeout), self.canary)
        with self._lock:
            self.last_probe = probe
        if probe.evidence:
            repaired = self.repair(f"canary: {probe.message}", abandon=probe.dead_stubs)
            if repaired is None:  # backing off after repairs that did not help: no hold meanwhile
                self.dismiss()
            return repaired
        self._event(
            "dismissed",
            "a request met what looked like a dead stub, but every stub runs and the canary answered "
            f"({probe.kind}: {probe.message[:120]}): nothing to repair; the front door sends again",
        )
        self.dismiss()
        return None

    def repair(self, reason: str, drain: bool = True, abandon=(), kill: bool = False) -> str | None:
        """Restart tritonserver from the repository: drain it first when it runs (the
        ensemble stops taking requests, the ones in flight finish, at most
        `drain_timeout` s), end it and what it left, start it again, check the canary.
        While restarts do not bring the right answers back, each waits twice as long as
        the one before (up to 5 minutes): a repository whose own files are wrong is not
        restarted in a loop (it stays not ready, and says why)."""
        if time.monotonic() < self._next_repair:
            self._set(problem=reason)
            return None
        self._set("repairing", reason)
        self._generation += 1
        started = time.perf_counter()
        self._event("unhealthy", f"unhealthy: {reason}")
        self._event("restart", "restarting tritonserver" + (" (draining it first)" if drain else ""))
        self.hold()
        try:
            stop: dict[str, Any] = {"kill": True} if kill else {}
            self.server.stop(drain=drain, drain_timeout=self.drain_timeout, timeout=5, abandon=abandon, **stop)
            self.restarts += 1
            pauses = iter(ABORT_PAUSES)
            for attempt in itertools.count(1):
                try:
                    self.server.start(timeout=self.start_timeout)
                    break
                except Exception as exc:  # noqa: BLE001 - say so; the next round tries again
                    # once more at once whatever the failure; while it aborts, again after
                    # each of ABORT_PAUSES; the queue still held
                    pause: float | None = None
                    if attempt == 1:
                        pause = 0.0
                    elif self._aborted():
                        pause = next(pauses, None)
                    if pause is not None and not self._stop.is_set():
                        after = f" in {pause:g} s" if pause else ""
                        self._event("failed", f"tritonserver did not start again ({exc}); starting it once more{after}")
                        self.server.stop(drain=False, timeout=5)
                        self._stop.wait(pause)
                        continue
                    self._set("failed", f"tritonserver did not start again: {exc}")
                    self._event("failed", f"tritonserver did not start again: {exc}")
                    self._next_repair = time.monotonic() + self._backoff
                    self._backoff = min(2 * self._backoff, 300.0)
                    return "restart"
        finally:
            self.release()
        self.started()
        again = check(self.url(), self.protocol, self.probe_timeout, self.canary)
        with self._lock:
            self.last_probe = again
        kind = "healed" if again.ok else "still-unhealthy"
        if again.ok or again.kind == "busy":
            self._backoff = max(self.interval, 5.0)
        else:
            self._set(problem=f"after a restart the canary still fails: {again.message}")
            self._next_repair = time.monotonic() + self._backoff
            self._backoff = min(2 * self._backoff, 300.0)
        self._event(
            kind,
            f"tritonserver restarted (pid {self.server.pid}) in {time.perf_counter() - started:.1f} s; "
            f"canary: {again.message}",
        )
        return "restart"

    def _aborted(self) -> bool:
        """Whether the server's last process ended by SIGABRT (status -6)."""
        process = getattr(self.server, "process", None)
        return getattr(process, "returncode", None) == -signal.SIGABRT

    def poke(self) -> None:
        """Check now, not at the next round: serve's front door saw a dead stub's answer and
        holds its queue until a repair, or until this finds nothing (`confirm`)."""
        self._suspected = True
        self._wake.set()

    def run(self) -> None:
        """Check until `stop()`; returns then."""
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            suspected, self._suspected = self._suspected, False
            try:
                if self.check_once() is None and suspected:
                    self.confirm()
            except Exception as exc:  # noqa: BLE001 - keep supervising; say what happened
                self._event("error", f"supervisor: {type(exc).__name__}: {exc}")

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._set("stopping")
