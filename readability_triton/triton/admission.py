"""Load shedding at the ensemble's entrance: refuse new work while the pipeline is full.

Overload must end in a fast, clear answer ("busy, retry"), not in minutes of queueing at
the slowest step. Triton's own bound, a step's `max_queue_size`, refuses synchronously
when the request is handed to that step; on Triton 2.51 such a refusal of a composing step
combined with gRPC cancellations left ensemble requests in flight for good (measured here:
the ensemble could then never unload, and the server ended at its exit timeout with status
1), while queue *timeouts* (an asynchronous REJECT) and cancellations alone left nothing
behind. So the steps keep only timeouts, and the entrance sheds load instead: the first
step, `validate`, reads how many requests wait in the queues of the steps after it
(Triton's `nv_inference_pending_request_count` gauge, from the server's own metrics
endpoint) and refuses the requests of an execute with UNAVAILABLE while that number is at
`MAX_PENDING_REQUESTS` or more. A refusal by the first step is answered and released like
any other error of a request with one step in flight.

The metrics are read at most every `refresh` seconds (one local HTTP GET of ~10 KB, about
0.4 ms), only while requests arrive. Where the endpoint cannot be read (metrics off, another
port), the gate stays open and says so once in the log; `serve` tells the stubs where its
metrics are (`READABILITY_TRITON_METRICS_URL`).
"""
from __future__ import annotations

import os
import re
import time
import urllib.request
from typing import Callable, Iterable

#: Where the python-backend stubs find the server's metrics (`serve` sets it).
METRICS_URL_ENV = "READABILITY_TRITON_METRICS_URL"
#: Triton's default metrics endpoint, used when neither the config nor the environment says.
DEFAULT_METRICS_URL = "http://127.0.0.1:8002/metrics"
#: How long the gate trusts an unreadable endpoint to stay unreadable before it tries again.
RETRY_AFTER_FAILURE = 5.0

_PENDING = re.compile(r'^nv_inference_pending_request_count\{model="([^"]+)",version="[^"]*"\} ([0-9.e+]+)$',
                      re.MULTILINE)


def pending_requests(metrics_text: str) -> dict[str, int]:
    """{model: requests waiting in its queue} from Triton's metrics text."""
    return {model: int(float(value)) for model, value in _PENDING.findall(metrics_text)}


def _fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=0.5) as reply:  # noqa: S310 - a local, configured URL
        return reply.read().decode("utf-8", "replace")


class Admission:
    """The gate: `busy()` is None while fewer than `limit` requests wait in the queues of
    `models`, else why the caller should refuse new work."""

    def __init__(self, limit: int, models: Iterable[str], url: str | None = None, refresh: float = 0.05,
                 fetch: Callable[[str], str] = _fetch, clock: Callable[[], float] = time.monotonic,
                 log: Callable[[str], None] | None = None):
        self.limit = limit
        self.models = tuple(models)
        self.url = url or os.environ.get(METRICS_URL_ENV) or DEFAULT_METRICS_URL
        self.refresh = refresh
        self._fetch, self._clock, self._log = fetch, clock, log or (lambda message: None)
        self._read_at = -float("inf")
        self._pending: int | None = None
        self._failed = False

    def pending(self) -> int | None:
        """Requests waiting in the watched queues (read at most every `refresh` s), or None
        when the metrics cannot be read."""
        now = self._clock()
        if now - self._read_at < (RETRY_AFTER_FAILURE if self._failed else self.refresh):
            return self._pending
        self._read_at = now
        try:
            counts = pending_requests(self._fetch(self.url))
        except OSError as err:
            if not self._failed:
                self._log(f"cannot read the server's metrics at {self.url} ({err}): load shedding is off "
                          f"until they can be read (set {METRICS_URL_ENV} to the metrics endpoint)")
            self._failed, self._pending = True, None
            return None
        if self._failed:
            self._log(f"reading the server's metrics at {self.url} again: load shedding is on")
        self._failed = False
        self._pending = sum(counts.get(model, 0) for model in self.models)
        return self._pending

    def busy(self) -> str | None:
        if self.limit <= 0:
            return None
        waiting = self.pending()
        if waiting is None or waiting < self.limit:
            return None
        return (f"busy: {waiting} requests are waiting inside the pipeline (the limit is {self.limit}, parameter "
                "MAX_PENDING_REQUESTS); retry in a moment")
