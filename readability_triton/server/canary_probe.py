"""One canary inference and what it shows (`check`, `Probe`): the supervisor's probe of a
served ensemble (`health.Supervisor`), the `health` command's and `bench`'s check."""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field

from .. import contracts as C
from ..client.readability import ReadabilityClient
from ..errors import ClientError
from ..repository.canary import CANARY, Canary
from ..triton_messages import canary_kind, dead_stub_models

_probes = itertools.count(int(time.time()))


@dataclass
class Probe:
    """One canary inference and what it shows: "ok", "wrong", "dead" (a stub),
    "missing" (a model), "busy" (slow or shed: not evidence) or "down" (no answer); the
    error's kind as `triton_messages.canary_kind` reads it."""

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
        return Probe(canary_kind(message), message, time.perf_counter() - started, dead_stubs=dead_stub_models(message))
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
