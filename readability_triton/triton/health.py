"""Is the served ensemble really serving? A canary inference, and a supervisor that heals.

Triton 2.51's readiness does not see a dead python-backend stub: after a stub is killed,
the model, the ensemble and the server all stay READY (HTTP 200) while every request that
reaches the model fails with "Stub process '<model>_0_0' is not healthy.", and the stub is
never started again. So health here is an inference: `check(url)` sends a canary text
through the ensemble and reads SCORE back.

`Supervisor` runs that check every few seconds against a `TritonServer` it owns (what
`readability-triton serve` does) and heals what it finds: it reloads the models whose
stubs are dead (the model-control API starts new stubs), and restarts the whole server
when that does not bring the canary back or when the server process has died. Each step
is logged in one line.
"""
from __future__ import annotations

import math
import re
import threading
import time
from dataclasses import dataclass, field

from .. import contracts as C
from ..errors import ClientError

#: The canary text: plain English, well inside every limit.
CANARY = "The cat sat on the mat. It was a warm day, and the cat was happy."
_DEAD_STUB = re.compile(r"Stub process '(.+?)_\d+_\d+' is not healthy")


@dataclass
class Health:
    ok: bool
    message: str
    seconds: float
    score: float | None = None
    dead_stubs: list[str] = field(default_factory=list)  # models whose stub is not healthy


def dead_stub_models(message: str) -> list[str]:
    """The models a Triton error message reports with an unhealthy stub."""
    return sorted(set(_DEAD_STUB.findall(message or "")))


def check(url: str, protocol: str = "http", timeout: float = 10.0, model: str = C.ENSEMBLE) -> Health:
    """One canary inference through `model` at `url`: ok when SCORE comes back finite."""
    from .client import ReadabilityClient

    started = time.perf_counter()
    try:
        with ReadabilityClient(url, protocol, model=model, timeout=timeout, retries=0) as client:
            outputs, _ = client.infer_batch([CANARY], (C.SCORE,))
    except ClientError as err:
        message = str(err)
        return Health(False, message, time.perf_counter() - started, dead_stubs=dead_stub_models(message))
    score = float(outputs[C.SCORE][0])
    seconds = time.perf_counter() - started
    if not math.isfinite(score):
        return Health(False, f"the canary's SCORE is {score}", seconds, score)
    return Health(True, f"SCORE {score:.4f} in {seconds * 1e3:.0f} ms", seconds, score)


class Supervisor:
    """Checks a `TritonServer` every `interval` seconds and heals it (see the module doc).

    `log(message)` receives one line per event. `events` keeps (time, kind, message) of
    every failure and repair, for callers and tests."""

    def __init__(self, server, interval: float = 5.0, protocol: str = "http", timeout: float = 10.0,
                 log=None, start_timeout: float = 300.0):
        self.server = server
        self.interval = interval
        self.protocol = protocol
        self.timeout = timeout
        self.start_timeout = start_timeout
        self.log = log or (lambda message: None)
        self.events: list[tuple[float, str, str]] = []
        self._stop = threading.Event()

    def _event(self, kind: str, message: str) -> None:
        self.events.append((time.time(), kind, message))
        self.log(message)

    def url(self) -> str:
        return self.server.http_url if self.protocol == "http" else self.server.grpc_url

    def check_once(self) -> Health:
        """One check, and the repair if it fails; the health after it."""
        if self.server.process is not None and self.server.process.poll() is not None:
            self._event("died", f"tritonserver (pid {self.server.process.pid}) exited with status "
                                f"{self.server.process.returncode}: restarting it")
            return self._restart(time.perf_counter())
        health = check(self.url(), self.protocol, self.timeout)
        if health.ok:
            return health
        started = time.perf_counter()
        self._event("unhealthy", f"canary failed: {health.message}")
        if health.dead_stubs:
            try:
                for model in health.dead_stubs:
                    self._event("reload", f"reloading {model} (its python-backend stub is dead; Triton does not "
                                          "restart it)")
                    self.server.reload(model)
                if self.server.model_states().get(C.ENSEMBLE) != "READY":
                    self.server.load(C.ENSEMBLE)
            except Exception as exc:  # noqa: BLE001 - any failure here means: restart
                self._event("reload-failed", f"reload failed ({exc})")
            again = check(self.url(), self.protocol, self.timeout)
            if again.ok:
                self._event("healed", f"service restored in {time.perf_counter() - started:.1f} s by reloading "
                                      f"{', '.join(health.dead_stubs)} (canary: {again.message})")
                return again
        return self._restart(started)

    def _restart(self, started: float) -> Health:
        self._event("restart", "restarting tritonserver")
        self.server.stop(drain=False, timeout=15)
        self.server.start(timeout=self.start_timeout)
        again = check(self.url(), self.protocol, self.timeout)
        kind = "healed" if again.ok else "still-unhealthy"
        self._event(kind, f"tritonserver restarted (pid {self.server.pid}) in "
                          f"{time.perf_counter() - started:.1f} s; canary: {again.message}")
        return again

    def run(self) -> None:
        """Check until `stop()`; returns then."""
        while not self._stop.wait(self.interval):
            try:
                self.check_once()
            except Exception as exc:  # noqa: BLE001 - keep supervising; say what happened
                self._event("error", f"supervisor: {type(exc).__name__}: {exc}")

    def stop(self) -> None:
        self._stop.set()
