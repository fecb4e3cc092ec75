"""`serve`'s warm-up: before the front door opens, the pipeline answers a few requests, and
the rate at which it computed the last of them is the front door's starting rate.

Why both:
- A cold pipeline's first answers are slow (the tiny set's first two: 0.5-0.8 s each,
  against 30 ms after): each step's one-time set-up, BERT's first shapes. Without a
  warm-up, the first clients pay it.
- Until the front door's gate has seen the pipeline full, its rate is a guess (10 texts/s):
  on a pipeline that computes 290, it refused jobs of 53 texts, and the honest clients
  beside them, as busy for the first seconds of a flood.
- What a byte past BERT's window costs (`wire.Weigher.byte_work`) differs by far between
  artifact sets (a 100 KB text costs about 3 full texts on the MiniLM set, about 150 on the
  tiny test set, whose BERT costs next to nothing): counted at a guess, four clients of
  64 x 100 KB texts were let in as 256 texts of work and took 5-8 s each, so the stated wait
  broke. So the warm-up times requests of long texts beside requests of full ones, one at
  a time, the best of `LONG_ROUNDS` each.

The texts are generated (`corpus.generate_corpus`), all different, so that a
response cache cannot answer them; they go straight to tritonserver, not through the front
door. A warm-up that fails is logged and `serve` goes on (the supervisor judges health).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from .. import contracts as C
from ..client.readability import ReadabilityClient
from ..corpus import generate_corpus
from ..errors import ReadabilityError
from ..frontdoor.wire import FULL_TEXT_BYTES, Weigher

log = logging.getLogger(__name__)

#: Texts per request in the measured rounds, requests at once, and rounds.
TEXTS_PER_REQUEST = 16
CONCURRENCY = 2
ROUNDS = 2
#: The long texts' requests: texts each, bytes a text, and rounds (the best one counts).
LONG_TEXTS = 4
LONG_BYTES = 24_000
LONG_ROUNDS = 2


@dataclass(frozen=True)
class WarmUp:
    """What the warm-up saw: its texts, how long it took, and the rate (texts weighed by
    length, `wire.work_of`, per second) of its measured rounds."""

    texts: int
    seconds: float
    rate: float
    byte_work: float | None = None  # the work of a byte past FULL_TEXT_BYTES (None: not measured)

    def describe(self) -> str:
        long = (
            f"; a 100 KB text costs {1 + (100_000 - FULL_TEXT_BYTES) * self.byte_work:.1f} full texts"
            if self.byte_work is not None
            else ""
        )
        return (
            f"warmed up with {self.texts} texts in {self.seconds:.1f} s; the pipeline computed "
            f"{self.rate:.1f} texts/s with {CONCURRENCY} requests of {TEXTS_PER_REQUEST} texts at once "
            f"(the front door's starting rate){long}"
        )


def _work(texts: list[str]) -> float:
    weigher = Weigher(byte_work=0.0)
    return sum(weigher.work_of(len(t.encode("utf-8"))) for t in texts)


def _long_texts(texts: list[str], length: int = LONG_BYTES) -> list[str]:
    """LONG_TEXTS texts of `length` bytes each (ASCII), from `texts` in turn (all different)."""
    out, at = [], 0
    for _ in range(LONG_TEXTS):
        parts: list[str] = []
        while sum(len(p) + 1 for p in parts) < length:
            parts.append(texts[at % len(texts)])
            at += 1
        out.append(" ".join(parts)[:length])
    return out


def byte_work(client: ReadabilityClient, full: list[str], long: list[str]) -> float:
    """The work of a byte past FULL_TEXT_BYTES: requests of `full` and of `long` texts,
    one at a time, the best of LONG_ROUNDS each, in units of `full`'s time per text of work."""
    best = {"full": float("inf"), "long": float("inf")}
    for _ in range(LONG_ROUNDS):
        for name, batch in (("full", full), ("long", long)):
            started = time.perf_counter()
            client.infer_batch(batch, C.OUTPUTS)
            best[name] = min(best[name], time.perf_counter() - started)
    unit = best["full"] / _work(full)  # seconds per text of work
    extra = sum(max(0, len(t.encode("utf-8")) - FULL_TEXT_BYTES) for t in long)
    return max(0.0, (best["long"] / unit - _work(long)) / extra)


def warm_up(
    url: str, protocol: str = "grpc", timeout: float = 120.0, max_text_bytes: int = C.DEFAULT_MAX_TEXT_BYTES
) -> WarmUp:
    """Warm the ensemble at `url` (tritonserver's own endpoint) and measure its rate, and
    what a byte past BERT's window costs (texts of at most `max_text_bytes`, the steps'
    limit; None where that cannot be measured); raises `ReadabilityError` when the pipeline
    does not answer."""
    needed = 1 + TEXTS_PER_REQUEST + CONCURRENCY * ROUNDS * TEXTS_PER_REQUEST
    texts = generate_corpus(needed)[0]
    cold, rest = texts[: 1 + TEXTS_PER_REQUEST], texts[1 + TEXTS_PER_REQUEST :]
    full = sorted(texts, key=len)[-TEXTS_PER_REQUEST:]  # the longest: nearest BERT's whole window
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
    rate = _work(rest) / max(finished - measured, 1e-6)
    per_byte = None
    length = min(LONG_BYTES, max_text_bytes)
    if length > 2 * FULL_TEXT_BYTES:
        try:
            with ReadabilityClient(url, protocol, timeout=timeout, retries=0) as client:
                per_byte = byte_work(client, full, _long_texts(texts, length))
        except ReadabilityError as err:
            log.warning(f"the warm-up could not time long texts ({err}): a byte past BERT's window counts a guess")
    return WarmUp(len(texts), time.perf_counter() - started, rate, per_byte)
