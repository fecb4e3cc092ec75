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
  has finished no execute (the statistics' `execution_count`) for `stall_timeout` seconds.

A canary that times out or is refused as busy is none of these: under load it waits
behind real work, and that proves the server is busy, not dead. On evidence the supervisor
restarts tritonserver from the repository (which also undoes any override), after
draining it: the ensemble stops taking requests and the ones in flight finish first.
Then it checks the canary again and says so. Triton 2.51 cannot replace a dead stub in
place without leaving its instance behind for good, so a restart (about 2 s for the demo
repository) is the one repair.

`Supervisor.status()` is what the health endpoints of `serve` answer (`probes.py`):

- live: serve is supervising and the server is running or being restarted by it. It is
  false only when serve cannot get a working server up at all. Load never makes it false.
- ready: the server runs, no repair is under way, no stub is dead, and the last canary
  that came back was right. Busy is ready.
"""

from __future__ import annotations

import itertools
import logging
import math
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .. import contracts as C
from ..client.readability import ReadabilityClient
from ..errors import ClientError
from ..repository.canary import CANARY, Canary
from .processes import alive, instance_model, python_stubs, reap_zombies

log = logging.getLogger(__name__)

_DEAD_STUB = re.compile(r"Stub process '(.+?)_\d+_\d+' is not healthy")
_probes = itertools.count(int(time.time()))
#: Answers that mean "busy, not broken": a queue timeout, the first step's load shedding, a
#: deadline that passed while the canary waited behind real work.
_BUSY = ("timeout expired", "busy:", "deadline exceeded", "timed out", "timeout")
#: Seconds between the starts of one repair while tritonserver aborts (status -6) as it
#: starts again: Triton 2.51 now and then does after a stub was killed, before it writes a
#: line of its log, for several seconds in a row (a CI run: 4 aborts, healed after 18.2 s
#: over three repairs, 20 honest requests failed between them); the queue stays held.
ABORT_PAUSES = (0.5, 1.0, 2.0, 4.0)
#: Answers that mean a model of the repository is not served.
_MISSING = ("has no available versions", "is not found", "unknown model", "is not ready")


@dataclass
class Probe:
    """One canary inference and what it shows: "ok", "wrong", "dead" (a stub),
    "missing" (a model), "busy" (slow or shed: not evidence) or "down" (no answer)."""

    kind: str
    message: str
    seconds: float
    outputs: dict[str, float] = field(default_factory=dict)
    dead_stubs: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.kind == "ok"

    @property
    def evidence(self) -> bool:
        """Whether this answer proves the service broken (not merely busy or unreachable)."""
        return self.kind in ("wrong", "dead", "missing")


# The name `check` returned before; the `health` command and `bench` use it.
Health = Probe


def dead_stub_models(message: str) -> list[str]:
    """The models a Triton error message reports with an unhealthy stub."""
    return sorted(set(_DEAD_STUB.findall(message or "")))


def classify(message: str) -> str:
    """The kind of a failed canary's error message (see `Probe`)."""
    text = message.lower()
    if dead_stub_models(message):
        return "dead"
    if any(sign in text for sign in _BUSY):
        return "busy"
    if any(sign in text for sign in _MISSING):
        return "missing"
    return "down"


def check(
    url: str, protocol: str = "http", timeout: float = 10.0, canary: Canary | None = None, model: str = C.ENSEMBLE
) -> Probe:
    """One canary inference through `model` at `url`: "ok" when the outputs are finite and,
    given a `canary`, equal to its expected answers."""

    text = canary.text if canary else CANARY
    names = tuple(canary.expected) if canary else (C.SCORE,)
    # A second text of its own with every probe: no response cache can answer the request
    # from an earlier one (Triton's is keyed by the inputs), so the models compute it.
    texts = [text, f"A probe of the health check, number {next(_probes)}, with a few plain words."]
    started = time.perf_counter()
    try:
        with ReadabilityClient(url, protocol, model=model, timeout=timeout, retries=0) as client:
            got, _ = client.infer_batch(texts, names)
    except ClientError as err:
        message = str(err)
        return Probe(classify(message), message, time.perf_counter() - started, dead_stubs=dead_stub_models(message))
    seconds = time.perf_counter() - started
    outputs = {name: float(values[0]) for name, values in got.items()}
    problem = (
        canary.judge(outputs)
        if canary
        else next((f"the canary's {n} is {v}" for n, v in outputs.items() if not math.isfinite(v)), None)
    )
    if problem:
        return Probe("wrong", problem, seconds, outputs)
    shown = ", ".join(f"{n} {v:.4f}" for n, v in outputs.items())
    return Probe("ok", f"{shown} in {seconds * 1e3:.0f} ms" + (" (as recorded)" if canary else ""), seconds, outputs)


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
        self._set("serving", "")

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
        reap_zombies(keep=(process.pid,) if process is not None else ())
        if process is not None and process.poll() is not None:
            return self.repair(f"tritonserver (pid {process.pid}) exited with status {process.returncode}", drain=False)
        dead = self.dead_stubs()
        if dead:
            return self.repair(
                f"the python-backend stub of {', '.join(dead)} is gone (Triton does not restart it; "
                "every request to it fails)",
                abandon=[instance_model(i) for i in dead],
            )
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
    def repair(self, reason: str, drain: bool = True, abandon=()) -> str | None:
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
            self.server.stop(drain=drain, drain_timeout=self.drain_timeout, timeout=5, abandon=abandon)
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
        """Check now, not at the next round (serve's front door saw a dead stub's answer)."""
        self._wake.set()

    def run(self) -> None:
        """Check until `stop()`; returns then."""
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.check_once()
            except Exception as exc:  # noqa: BLE001 - keep supervising; say what happened
                self._event("error", f"supervisor: {type(exc).__name__}: {exc}")

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self._set("stopping")
