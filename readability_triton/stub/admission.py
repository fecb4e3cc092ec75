"""Load shedding at the ensemble's entrance: refuse new work while the pipeline is full.

Overload must end in a fast, clear answer ("busy, retry"), not in minutes of queueing at
the slowest step. Triton's own bound, a step's `max_queue_size`, refuses synchronously
when the request is handed to that step; on Triton 2.51 such a refusal of a composing step
combined with gRPC cancellations left ensemble requests in flight for good (measured here:
the ensemble could then never unload, and the server ended at its exit timeout with status
1), while queue *timeouts* (an asynchronous REJECT) and cancellations alone left nothing
behind. So the steps keep only timeouts, and the entrance sheds load instead: the first
step (`featurize` in the serial wiring, `validate` in the parallel one) reads how many
requests wait in the queues of the steps after it (Triton's
`nv_inference_pending_request_count` gauge, from the server's own metrics endpoint) and
refuses the requests of an execute with UNAVAILABLE while that number is at
`MAX_PENDING_REQUESTS` or more, in words `triton_messages` reads (`BUSY`, `SHED_SIGNS`:
the front door sends such a refusal again, since nothing computed it).

Two readings of Triton's own metrics, from the server's metrics endpoint, decide it:

- the requests waiting in the queues of the steps after it
  (`nv_inference_pending_request_count`): at `MAX_PENDING_REQUESTS` or more it refuses;
- how long the requests that recently left each of those queues waited (the growth of
  `nv_inference_queue_duration_us` over that of `nv_inference_request_success`, over the
  last few seconds; while a step with requests queued finishes none, the time since it
  last did): at `MAX_QUEUE_SECONDS` or more at any step it refuses.

The first bounds the backlog in requests, the second in time, whatever a request carries
(1 text or 64). A refusal by the first step is answered and released like any other error
of a request with one step in flight.

The metrics are read at most every `refresh` seconds (one local HTTP GET of ~10 KB, about
0.4 ms), only while requests arrive; in the server by a thread of the stub (`background`),
so that no request waits for the reading. Where the endpoint cannot be read (metrics off, another
port), the gate stays open and says so once in the log; `serve` tells the stubs where its
metrics are (`READABILITY_TRITON_METRICS_URL`).
"""

from __future__ import annotations

import collections
import os
import re
import threading
import time
import urllib.request
from typing import Callable, Iterable

from ..triton_messages import BUSY, SHED_PENDING, SHED_QUEUE

#: Where the python-backend stubs find the server's metrics (`serve` sets it).
METRICS_URL_ENV = "READABILITY_TRITON_METRICS_URL"
#: Triton's default metrics endpoint, used when neither the config nor the environment says.
DEFAULT_METRICS_URL = "http://127.0.0.1:8002/metrics"
#: How long the gate trusts an unreadable endpoint to stay unreadable before it tries again.
RETRY_AFTER_FAILURE = 5.0
#: Seconds after its start in which the gate does not report an unreadable endpoint: the
#: model's warm-up (`model_warmup`) runs while tritonserver loads, before its metrics
#: endpoint listens.
STARTUP_QUIET = 30.0
#: The span (seconds) over which the recent queue wait is measured.
WINDOW = 3.0

_SAMPLE = re.compile(
    r"^(nv_inference_pending_request_count|nv_inference_queue_duration_us|"
    r'nv_inference_request_success)\{model="([^"]+)",version="[^"]*"\} ([0-9.e+]+)$',
    re.MULTILINE,
)


def read_metrics(metrics_text: str) -> dict[str, dict[str, float]]:
    """{model: {"pending": n, "queue_us": total, "success": total}} from Triton's metrics text."""
    names = {
        "nv_inference_pending_request_count": "pending",
        "nv_inference_queue_duration_us": "queue_us",
        "nv_inference_request_success": "success",
    }
    out: dict[str, dict[str, float]] = {}
    for metric, model, value in _SAMPLE.findall(metrics_text):
        out.setdefault(model, {})[names[metric]] = float(value)
    return out


def pending_requests(metrics_text: str) -> dict[str, int]:
    """{model: requests waiting in its queue} from Triton's metrics text."""
    return {model: int(v["pending"]) for model, v in read_metrics(metrics_text).items() if "pending" in v}


def _fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=0.5) as reply:
        return reply.read().decode("utf-8", "replace")


class Admission:
    """The gate: `busy()` is None while fewer than `max_pending` requests wait in the queues
    of `models` and none of them has lately made requests wait `max_queue_s` or more; else
    why the caller should refuse new work (0 turns a bound off)."""

    def __init__(
        self,
        max_pending: int,
        max_queue_s: float,
        models: Iterable[str],
        url: str | None = None,
        refresh: float = 0.05,
        fetch: Callable[[str], str] = _fetch,
        clock: Callable[[], float] = time.monotonic,
        log: Callable[[str], None] | None = None,
        background: bool = False,
    ):
        self.max_pending, self.max_queue_s = max_pending, max_queue_s
        self.models = tuple(models)
        self.url = url or os.environ.get(METRICS_URL_ENV) or DEFAULT_METRICS_URL
        self.refresh = refresh
        self._fetch, self._clock, self._log = fetch, clock, log or (lambda message: None)
        self._read_at = -float("inf")
        self._failed = False
        self._told = False  # whether the failure was logged
        self._started = clock()
        self._verdict: str | None = None
        #: per model: (time, queue_us, success, pending) samples of the last WINDOW s, and
        #: since when it has had requests queued without answering one
        self._history: dict[str, collections.deque] = {m: collections.deque() for m in self.models}
        self._moved: dict[str, float] = {}
        self._background = background
        self._asked = -float("inf")  # when busy() was last called
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()

    def _judge(self, metrics: dict[str, dict[str, float]], now: float) -> str | None:
        waiting = int(sum(metrics.get(m, {}).get("pending", 0) for m in self.models))
        if self.max_pending and waiting >= self.max_pending:
            return (
                f"{BUSY} {waiting} requests are waiting inside the pipeline (the limit is {self.max_pending}, "
                f"{SHED_PENDING}); retry in a moment"
            )
        worst, where = 0.0, ""
        for model in self.models:
            m = metrics.get(model, {})
            history = self._history[model]
            sample = (now, m.get("queue_us", 0.0), m.get("success", 0.0), m.get("pending", 0.0))
            # A step is stuck for as long as it has had requests queued and answered none:
            # counted from its last answer, or from the last reading that found its queue
            # empty (an idle step, maybe idle for hours before this burst, is not stuck).
            if not history or sample[2] != history[-1][2] or history[-1][3] == 0:
                self._moved[model] = now
            history.append(sample)
            while len(history) > 2 and now - history[1][0] >= WINDOW:
                history.popleft()
            done = sample[2] - history[0][2]
            if done > 0:
                wait = (sample[1] - history[0][1]) / done / 1e6
            elif m.get("pending", 0) > 0:
                wait = now - self._moved.get(model, now)
            else:
                wait = 0.0
            if wait > worst:
                worst, where = wait, model
        if self.max_queue_s and worst >= self.max_queue_s:
            return (
                f"{BUSY} requests wait {worst:.1f} s in the queue of {where} (the limit is {self.max_queue_s:g} s, "
                f"{SHED_QUEUE}); retry in a moment"
            )
        return None

    def busy(self) -> str | None:
        if not (self.max_pending or self.max_queue_s):
            return None
        if self._background:
            self._asked = self._clock()
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, daemon=True, name="admission")
                self._thread.start()
            self._wake.set()
            return self._verdict
        return self._read()

    def _watch(self) -> None:
        """Read the metrics every `refresh` s while requests arrive (busy() was called in the
        last 2 s); sleep otherwise."""
        while True:
            if self._clock() - self._asked > 2.0:
                self._wake.clear()
                self._wake.wait()
            self._read()
            time.sleep(self.refresh)

    def _read(self) -> str | None:
        now = self._clock()
        if now - self._read_at < (RETRY_AFTER_FAILURE if self._failed else self.refresh):
            return self._verdict
        self._read_at = now
        try:
            metrics = read_metrics(self._fetch(self.url))
        except OSError as err:
            if not self._told and now - self._started >= STARTUP_QUIET:
                self._log(
                    f"cannot read the server's metrics at {self.url} ({err}): load shedding is off "
                    f"until they can be read (set {METRICS_URL_ENV} to the metrics endpoint)"
                )
                self._told = True
            self._failed, self._verdict = True, None
            return None
        if self._told:
            self._log(f"reading the server's metrics at {self.url} again: load shedding is on")
        self._failed = self._told = False
        self._verdict = self._judge(metrics, now)
        return self._verdict
