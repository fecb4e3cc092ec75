"""The pipeline's rate, as the front door's gate measures it: texts (weighed by length) it
computes per second, from its answers.

Over the last `WINDOW` seconds, from the `WARMUP_ANSWERS`-th answer on (a cold pipeline's
first answers are slow: 0.5-0.8 s each for the tiny set, against 30 ms after):

- texts computed per second of time the pipeline was **full** (it held what the gate aims
  to keep in it: `inside` seconds of work at the rate and 2 requests, or the most requests
  allowed). Each answer's texts count in the share of its time inside that the pipeline was
  full. A few answers may raise the estimate; only `MIN_ANSWERS` may lower it;
- the same over the last `RECENT` seconds, where it is slower (on `MIN_ANSWERS` answers):
  a pipeline that slows down is believed at once, so that accepted requests keep the
  stated wait;
- where the pipeline was never full in the window: texts answered per second of time it
  had any work. Those answers are paced by the clients, not by the pipeline: they may raise
  the estimate (the pipeline is at least that fast) but never lower it. Two clients sending
  one text at a time on a loaded machine measured 6-16 texts/s where jobs of 53 texts came
  back in under 1.2 s, and honest clients were refused as busy, while this rate alone was
  kept.

Work is in thousandths of a text (`UNIT`), as the gate keeps it.
"""

from __future__ import annotations

import collections
from typing import Callable, NamedTuple

#: Seconds over which the rate is measured, and the recent seconds whose slower rate lowers
#: it at once (a pipeline that slows down, e.g. when its machine's CPUs are taken by other
#: work, would otherwise be trusted at its old speed for most of a window, and accepted
#: requests wait longer than stated: a flood of score jobs on 2 shared cores measured
#: 574-704 texts/s early in a 20 s window while 400 came out, and waits of 5-7 s were
#: promised as 4 s).
WINDOW = 20.0
RECENT = 3.0
#: Seconds (full, or with work) the window must hold before its rate is trusted over the
#: previous one, and answers with the pipeline full before it may lower it.
MIN_BUSY = 0.5
MIN_ANSWERS = 8
#: The first answers after the start: a cold pipeline's are not measured.
WARMUP_ANSWERS = 8
#: Work is kept in thousandths of a text, as integers: counts that go up and down stay exact.
UNIT = 1000


class Stopwatch:
    """Seconds spent in a state, as it goes on and off."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.total = 0.0

    @property
    def running(self) -> bool:
        return self.since is not None

    def run(self, on: bool, now: float) -> None:
        if on and self.since is None:
            self.since = now
        elif not on and self.since is not None:
            self.total += now - self.since
            self.since = None

    def until(self, now: float) -> float:
        return self.total + (now - self.since if self.since is not None else 0.0)


class Sample(NamedTuple):
    """The counters at one moment (the window is the difference of two)."""

    at: float
    full: float  # seconds the pipeline was full
    full_done: int  # texts computed while it was full
    full_answers: int  # answers with the pipeline full for part of their stay
    work: float  # seconds it had any work
    done: int  # texts answered


class Window:
    """The samples of the last `seconds` (and the one just before them)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.samples: collections.deque[Sample] = collections.deque()

    def clear(self) -> None:
        self.samples.clear()

    def since(self, now: float) -> Sample | None:
        """The window's first sample (None while it holds none)."""
        while len(self.samples) > 1 and now - self.samples[1].at >= self.seconds:
            self.samples.popleft()
        return self.samples[0] if self.samples else None


def _full_rate(first: Sample | None, last: Sample) -> tuple[float | None, int]:
    """Texts per full second between two samples, and the answers it rests on (None while
    they hold too little full time)."""
    if first is None:
        return None, 0
    full, done = last.full - first.full, last.full_done - first.full_done
    if full >= MIN_BUSY and done > 0:
        return done / full, last.full_answers - first.full_answers
    return None, 0


class Meter:
    """The rate (`units()`: thousandths of a text per second), told by the gate what is
    inside (`changed`), what was sent (`sent`) and answered (`answered`). `rate` is the
    starting guess (texts per second) until the pipeline has been measured."""

    def __init__(
        self,
        rate: float,
        inside_seconds: float,
        max_inside_requests: int,
        clock: Callable[[], float],
        warmup: int = WARMUP_ANSWERS,
        alone: float = float("inf"),
    ):
        self.inside_seconds, self.max_inside_requests = inside_seconds, max_inside_requests
        self.alone = alone  # seconds of work one request inside may be to fill the pipeline alone
        self.warmup = warmup
        self._clock = clock
        self._rate = rate * UNIT
        self._inside = self._requests = 0  # what is inside, as last told
        self._full_time, self._work_time = Stopwatch(), Stopwatch()
        self._full_done = self._full_answers = 0
        self._done = self._answers = 0  # every answered text, every good answer
        self._windows = (Window(WINDOW), Window(RECENT))

    def seed(self, rate: float) -> None:
        """A rate measured before the gate opened (`serve`'s warm-up): the pipeline is
        warm, so the warm-up's answers need not be skipped."""
        self._rate = rate * UNIT
        self.warmup = 0
        for window in self._windows:
            window.clear()
        self._full_time.run(self._full(), self._clock())

    def full_seconds(self, now: float) -> float:
        """Seconds the pipeline has been full so far."""
        return self._full_time.until(now)

    def _full(self) -> bool:
        if self._requests >= self.max_inside_requests:
            return True
        if self._requests >= 1 and self._inside >= self.alone * self._rate:
            return True  # one request that is seconds of work: the gate lets no second one in
        return self._requests >= 2 and self._inside >= self.inside_seconds * self._rate

    def changed(self, inside: int, requests: int, now: float) -> None:
        """The work inside changed: start or stop the clocks."""
        self._inside, self._requests = inside, requests
        self._full_time.run(self._full(), now)
        self._work_time.run(requests > 0, now)

    def _sample(self, now: float) -> Sample:
        return Sample(
            now, self._full_time.until(now), self._full_done, self._full_answers, self._work_time.until(now), self._done
        )

    def sent(self, now: float) -> float:
        """A request was sent (after `changed`): the full seconds so far, to keep with it."""
        for window in self._windows:
            if not window.samples:
                window.samples.append(self._sample(now))
        return self.full_seconds(now)

    def answered(
        self, work: int, sent_at: float, full_at_send: float, ok: bool, inside: int, requests: int, now: float
    ) -> None:
        """A request sent at `sent_at` came back, leaving `inside` work in `requests`; an
        error (`ok` false) proves nothing about the rate: a refusal is fast."""
        if ok:
            stay, full = now - sent_at, self._full_time.until(now) - full_at_send
            share = min(1.0, full / stay) if stay > 0 else float(self._full_time.running)
            self._answers += 1
            self._done += work
            if share > 0:
                self._full_done += round(work * share)
                self._full_answers += 1
        self.changed(inside, requests, now)
        sample = self._sample(now)
        for window in self._windows:
            if ok and self.warmup and self._answers == self.warmup:
                window.clear()  # the warm-up's answers are not measured: the windows start here
            window.samples.append(sample)

    def units(self) -> float:
        """The rate now (thousandths of a text per second): the window's full rate, or the
        recent seconds' where that is slower; the last trusted value while the windows hold
        too little."""
        now = self._clock()
        last = self._sample(now)
        whole, recent = (window.since(now) for window in self._windows)
        rate = self._rate
        measured, answers = _full_rate(whole, last)
        if measured is not None:
            # a few answers may raise the rate, only enough of them may lower it
            if measured > rate or answers >= MIN_ANSWERS:
                rate = measured
        elif whole is not None:
            work, done = last.work - whole.work, last.done - whole.done
            if work >= MIN_BUSY and done / work > rate:
                rate = done / work  # never full, paced by the clients, and still faster
        lately, answers = _full_rate(recent, last)
        if lately is not None and lately < rate and answers >= MIN_ANSWERS:
            rate = lately
        if rate != self._rate:
            self._rate = rate
            self._full_time.run(self._full(), now)  # what "full" means moved with the rate
        return self._rate

    def last(self) -> float:
        """The rate as last computed, without measuring again."""
        return self._rate
