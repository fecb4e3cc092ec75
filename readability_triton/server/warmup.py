"""`serve`'s warm-up: before the front door opens, the pipeline answers a few requests, and
the rate at which it computed the last of them is the front door's starting rate.

Why both:
- A cold pipeline's first answers are slow (the tiny set's first two: 0.5-0.8 s each,
  against 30 ms after): each step's one-time set-up, BERT's first shapes. Without a
  warm-up, the first clients pay it.
- Until the front door's gate has seen the pipeline full, its rate is a guess (10 texts/s):
  on a pipeline that computes 290, it refused jobs of 53 texts, and the honest clients
  beside them, as busy for the first seconds of a flood.

The texts are generated (`artifacts.corpus.generate_corpus`), all different, so that a
response cache cannot answer them; they go straight to tritonserver, not through the front
door. A warm-up that fails is logged and `serve` goes on (the supervisor judges health).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from .. import contracts as C
from ..artifacts.corpus import generate_corpus
from ..client.readability import ReadabilityClient
from ..errors import ReadabilityError
from ..frontdoor.wire import work_of

log = logging.getLogger(__name__)

#: Texts per request in the measured rounds, requests at once, and rounds.
TEXTS_PER_REQUEST = 16
CONCURRENCY = 2
ROUNDS = 2


@dataclass(frozen=True)
class WarmUp:
    """What the warm-up saw: its texts, how long it took, and the rate (texts weighed by
    length, `wire.work_of`, per second) of its measured rounds."""

    texts: int
    seconds: float
    rate: float

    def describe(self) -> str:
        return (
            f"warmed up with {self.texts} texts in {self.seconds:.1f} s; the pipeline computed "
            f"{self.rate:.1f} texts/s with {CONCURRENCY} requests of {TEXTS_PER_REQUEST} texts at once "
            "(the front door's starting rate)"
        )


def _work(texts: list[str]) -> float:
    return sum(work_of(len(t.encode("utf-8"))) for t in texts)


def warm_up(url: str, protocol: str = "grpc", timeout: float = 120.0) -> WarmUp:
    """Warm the ensemble at `url` (tritonserver's own endpoint) and measure its rate; raises
    `ReadabilityError` when the pipeline does not answer."""
    needed = 1 + TEXTS_PER_REQUEST + CONCURRENCY * ROUNDS * TEXTS_PER_REQUEST
    texts = generate_corpus(needed)[0]
    cold, rest = texts[: 1 + TEXTS_PER_REQUEST], texts[1 + TEXTS_PER_REQUEST :]
    started = time.perf_counter()
    # one text, then a whole request's worth: the first calls of every step and shape
    with ReadabilityClient(url, protocol, timeout=timeout, retries=0) as client:
        client.infer_batch(cold[:1], C.OUTPUTS)
        client.infer_batch(cold[1:], C.OUTPUTS)
    shares = [rest[i::CONCURRENCY] for i in range(CONCURRENCY)]
    errors: list[BaseException] = []

    def send(share: list[str]) -> None:
        try:
            with ReadabilityClient(url, protocol, timeout=timeout, retries=0) as client:
                for start in range(0, len(share), TEXTS_PER_REQUEST):
                    client.infer_batch(share[start : start + TEXTS_PER_REQUEST], C.OUTPUTS)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    measured = time.perf_counter()
    threads = [threading.Thread(target=send, args=(share,), daemon=True) for share in shares]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    finished = time.perf_counter()
    if errors:
        raise errors[0] if isinstance(errors[0], ReadabilityError) else ReadabilityError(str(errors[0]))
    return WarmUp(len(texts), finished - started, _work(rest) / max(finished - measured, 1e-6))
