"""Admission by work and fair dispatch: what the front door lets into tritonserver, and when.

Work is counted in texts weighed by their length (`wire.Weigher.work_of`: a text that fills
BERT's 256 tokens counts 1, a shorter one in proportion, a longer one more for what featurize
and the formulas still read past BERT's window), not in requests: a request of 64 long texts
is 64 times the work of a request of one. "Texts" below means such work. The gate keeps
these promises:

- **A stated wait.** A request is accepted only while the work ahead of it in the fair order
  (below: what is inside, and the queued requests that start before it), at the rate the
  pipeline has lately finished texts, fits within `AIM` of `max_wait` seconds; else it is
  refused at once ("busy: ...", retry after a moment). One that finds nothing waiting here
  and room inside goes straight in; one with nothing queued ahead of it waits only for
  what is inside, and the whole wait counts. The headroom is for the rate, which lags a
  pipeline that slows down when its machine's CPUs are taken by other work: a flood of
  score jobs, each a Python process starting, on 2 shared cores, was answered at p99 3.2 s
  against a stated 2 s while admission filled the whole wait. So a client that sends one
  text at a time is not refused as busy because another filled the queue: its text would
  not wait for that queue. The rate is measured, not configured (`rate.Meter`): texts
  computed per second while the pipeline was full, believed at once when it slows down;
  answers paced by the clients may raise it, never lower it.
- **The wait is checked again as the rate falls** (`recheck`). Admission's headroom covers
  a pipeline up to 1/`AIM` slower than measured; where it slows down more after a request
  was accepted (score jobs' processes starting on the same 2 cores halved the rate within
  a second, and waits promised as 1.5 s took 3.5-3.7 s), a request still waiting here that
  the rate now cannot answer within the stated wait (counting only what is left of the
  work inside) is refused at once ("busy: ... slowed ...", kind `slowed`), uncomputed:
  answered within the stated wait or refused within it. What is inside tritonserver runs
  to its end.
- **Fair shares and fair order** (`fairness`): once the pipeline is full, each network of
  addresses, and each client within it, may hold at most its share of the work the wait
  allows; accepted requests are sent on in start-time fair order, one virtual timeline per
  network, so that a client that sends one text at a time is not stuck behind another's
  backlog, and 50 addresses of one network get one network's turns, not 50 networks'.
- **Abandoned work gives up its place.** A request whose client leaves (a closed
  connection, a cancelled or expired gRPC call) while it waits here is dropped before any
  step computes it. Once sent on, a request runs to its end inside tritonserver and its
  answer is dropped: tritonserver never sees a cancellation (Triton 2.51's gRPC frontend
  crashes when a cancellation races an answer, server#7368).

Only a bounded amount of work is inside tritonserver at once (`inside` seconds of it at the
measured rate; a second request beside the first so that its steps overlap, but only beside
one under `ALONE` of the stated wait of work; and at most `max_inside_requests`, below the
entrance's own shedding bound of 64 requests waiting in the pipeline, `stub.admission`):
the rest waits here, where it can still be dropped and reordered. The class is synchronous
and takes a clock: the asyncio front (`door`) calls it from one thread.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import math
import time
from typing import Any, Callable

from .. import triton_messages as M
from .fairness import Ledger
from .rate import UNIT, WARMUP_ANSWERS, Meter
from .tickets import Refusal, Stats, Ticket, percentiles

#: The share of the stated wait that admission fills at the measured rate (`Gate`): the rest
#: is headroom for a pipeline slower than lately measured. Where more arrives than fits, the
#: pipeline stays as full either way: only the refusals come sooner.
AIM = 0.75
#: `Gate.recheck` looks once the rate fell by `RECHECK_FALL` below the highest since its last
#: look (at a steady rate a wait so far grows as the work ahead shrinks), at most every `RECHECK` s.
RECHECK = 0.05
RECHECK_FALL = 0.05
#: A second request goes inside only while the one there is less than this share of the
#: stated wait of work: two requests of 64 full texts on MiniLM slowed to 15 texts/s were
#: 8.4 s inside, past the 7.5 s admitted, and every newcomer was refused behind them.
ALONE = 0.25
#: Requests inside tritonserver at most (`Gate`), below the entrance's shedding bound of 64;
#: the door workers share it (`Door`'s `workers`).
MAX_INSIDE_REQUESTS = 48


class Gate:
    """See the module doc. `rate` is the starting guess (texts per second) until the
    pipeline has been measured."""

    def __init__(
        self,
        max_wait: float = 10.0,
        inside: float = 0.2,
        max_inside_requests: int = MAX_INSIDE_REQUESTS,
        rate: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        warmup: int = WARMUP_ANSWERS,
        aim: float = AIM,
    ):
        if max_wait <= 0:
            raise ValueError("max_wait must be positive")
        if not 0 < aim <= 1:
            raise ValueError("aim must be in (0, 1]")
        self.max_wait, self.inside_seconds, self.aim = max_wait, inside, aim
        self.max_inside_requests = max_inside_requests
        self._clock = clock
        self.meter = Meter(rate, inside, max_inside_requests, clock, warmup, ALONE * max_wait)
        self.ledger = Ledger()  # each client's and network's work, and the fair timeline
        self._heap: list[Ticket] = []
        self._serial = itertools.count()
        self._sent: dict[Ticket, None] = {}  # the tickets inside
        self.queued = 0  # work waiting here (thousandths of a text)
        self.inside = 0  # work inside tritonserver
        self.inside_requests = 0
        self.paused = False
        self.closed = ""  # why new requests are refused ('' while open)
        self.late: list[Ticket] = []  # refused by next() after acceptance (late, slowed); the front tells their clients
        self._checked = -math.inf  # when recheck() last looked
        self._basis = 0.0  # the highest rate (units) since then
        self._resumed_at = -math.inf  # the end of the last hold (`resume`)
        self.rechecks = 0  # how many times it looked
        self.stats = Stats()
        self._service: collections.deque[float] = collections.deque(maxlen=64)  # seconds, sent to answered
        self._answer: collections.deque[float] = collections.deque(maxlen=4096)  # seconds, accepted to answered

    def now(self) -> float:
        """The gate's clock (tickets' `arrived` and `deadline` are on it)."""
        return self._clock()

    # -- the rate -------------------------------------------------------------------
    def rate(self) -> float:
        """The pipeline's rate now (texts per second, `rate.Meter`)."""
        return self.meter.units() / UNIT

    def seed(self, rate: float) -> None:
        """Start from a `rate` measured before the gate opened (`serve`'s warm-up)."""
        self.meter.seed(rate)

    def quickest(self) -> float:
        """The shortest time a request lately spent inside tritonserver (0 before any): a
        client that gives up sooner than this cannot be answered."""
        return min(self._service, default=0.0)

    def admitted_wait(self) -> float:
        """The seconds of work at the measured rate that admission lets wait: `aim` of the
        stated wait."""
        return self.aim * self.max_wait

    def capacity(self) -> float:
        """The texts admission lets wait at the current rate."""
        return self.admitted_wait() * self.rate()

    def _capacity_units(self) -> float:
        return self.admitted_wait() * self.meter.units()

    # -- admission ------------------------------------------------------------------
    def offer(self, client: str, work: float, patience: float = math.inf, group: str | None = None) -> Ticket | Refusal:
        """Accept (a Ticket, queued) or refuse a request of `work` (texts weighed by length)
        from `client` of `group` (its network; default: itself), who gives up after
        `patience` seconds."""
        texts = max(1, round(work * UNIT))
        if self.closed:
            self.stats.refused["closed"] += 1
            return Refusal(self.closed, 1.0, "closed")
        if patience < self.quickest():
            self.stats.refused["deadline"] += 1
            return Refusal(
                f"the request's deadline ({patience * 1e3:.0f} ms) is shorter than any answer lately "
                f"({self.quickest() * 1e3:.0f} ms): it was not computed",
                0.0,
                "deadline",
            )
        now = self._clock()
        group = group or client
        state = self.ledger.client(client, group)
        total = self.queued + self.inside
        capacity = self._capacity_units()
        rate = self.meter.last()
        mine = self.ledger.group(group)
        groups = self.ledger.others(group) + 1
        group_share = capacity / groups
        members = mine.clients + (0 if state.work else 1)  # its group's clients with work, itself included
        share = group_share / members
        start, finish = self.ledger.place(group, texts)  # its place in the fair order
        if total == 0 or total + texts <= capacity or (self.queued == 0 and self.room()):
            pass  # room for anyone (or nothing waits here and it goes straight in)
        elif (ahead := self._ahead((start, finish))) + texts > capacity and (
            ahead > self.inside or ahead + texts > self.max_wait * self.meter.units()
        ):  # (with nothing queued ahead, it waits only for the work inside: the whole wait counts)
            return self._refuse(
                "busy",
                f"{M.BUSY} {ahead / UNIT:.0f} texts are waiting or in the pipeline ahead of this request, "
                f"about {ahead / rate:.1f} s of work at {rate / UNIT:.1f} texts/s; the stated wait is "
                f"{self.max_wait:g} s, of which {self.admitted_wait():g} s is admitted",
                (ahead + texts - capacity) / rate,
            )
        elif members > 1 and mine.work + texts > group_share:  # (alone in its network, the client's own rule)
            return self._refuse(
                "share",
                f"{M.BUSY} the clients of this network ({group}) already have {mine.work / UNIT:.0f} texts waiting "
                f"or in the pipeline, its share while {groups} networks wait is {group_share / UNIT:.0f}",
                (mine.work + texts - group_share) / rate,
            )
        elif state.work and state.work + texts > share:
            return self._refuse(
                "share",
                f"{M.BUSY} this client already has {state.work / UNIT:.0f} texts waiting or in the pipeline, its "
                + (
                    f"share while {groups} clients wait"
                    if members == 1
                    else f"share while {groups} networks and {members} clients of its own network wait"
                )
                + f" is {share / UNIT:.0f}",
                (state.work + texts - share) / rate,
            )
        ticket = Ticket(client, texts, now, start, next(self._serial), deadline=now + patience, finish=finish)
        self.ledger.accept(client, state, group, texts, finish)
        self.queued += texts
        heapq.heappush(self._heap, ticket)
        self.stats.accepted += 1
        return ticket

    def _ahead(self, place: tuple[float, float]) -> int:
        """The work a new ticket at `place` (start, finish) would wait for: what is inside,
        and the queued tickets before it in the fair order (the heap's tickets in order, from
        its root, leaving each subtree whose root comes later: all of it does)."""
        ahead, todo = self.inside, [0] if self._heap else []
        while todo:
            i = todo.pop()
            ticket = self._heap[i]
            if (ticket.start, ticket.finish) > place:
                continue
            if ticket.state == "queued":
                ahead += ticket.work
            todo.extend(child for child in (2 * i + 1, 2 * i + 2) if child < len(self._heap))
        return ahead

    def _refuse(self, kind: str, reason: str, wait: float) -> Refusal:
        self.stats.refused[kind] += 1
        retry = min(max(wait, 0.2), self.max_wait)
        return Refusal(f"{reason}; retry in {math.ceil(retry)} s", retry, kind)

    # -- dispatch -------------------------------------------------------------------
    def room(self) -> bool:
        """Whether tritonserver may take another request now."""
        if self.paused:
            return False
        if self.inside_requests >= self.max_inside_requests:
            return False
        units = self.meter.units()
        if self.inside_requests < 2:  # a second so that the steps overlap, but not behind seconds of work
            return self.inside_requests == 0 or self.inside < ALONE * self.max_wait * units
        return self.inside < self.inside_seconds * units

    def recheck(self) -> int:
        """Refuse, in state 'slowed' (to `late`), each waiting ticket whose wait so far plus
        the work ahead of it in the fair order (what is left of the work inside, and the tickets
        kept before it) and its own passes `max_wait` at the rate now. Kept: the first where
        there is room (it goes now, also one larger than the wait allows), and those a repair
        held (accepted before the last `resume`: the door's expiry bounds them). Only once the
        rate fell `RECHECK_FALL` below the highest since the last look, at most every
        `RECHECK` s, never paused. How many."""
        if not self.queued or self.paused:
            self._basis = 0.0  # a hold's answerless seconds lower the rate: start again after it
            return 0
        now, rate = self._clock(), self.meter.units()
        self._basis = max(self._basis, rate)
        if now - self._checked < RECHECK or rate >= (1 - RECHECK_FALL) * self._basis or rate <= 0:
            return 0
        self._checked, self._basis = now, rate
        self.rechecks += 1
        # inside: what is left of it since the oldest was sent (counted whole, requests behind 4.6 s
        # of long texts were refused as slowed when the rate dipped, that work mostly done)
        oldest = min((t.sent_at for t in self._sent), default=now)
        ahead, refused, room = max(0, int(self.inside - (now - oldest) * rate)), 0, self.room()
        waiting = sorted((t for t in self._heap if t.state == "queued"), key=Ticket.order)
        for n, ticket in enumerate(waiting):
            waited = now - ticket.arrived
            late = waited + (ahead + ticket.work) / rate > self.max_wait
            if not late or (n == 0 and room) or ticket.arrived < self._resumed_at:
                ahead += ticket.work
                continue
            self.drop(ticket, counted=False)
            ticket.state = "slowed"
            ticket.refusal = self._refuse(
                "slowed",
                f"{M.BUSY} the pipeline slowed to {rate / UNIT:.1f} texts/s after this request was accepted: "
                f"with {ahead / UNIT:.0f} texts ahead of it, it could no longer be answered within the stated "
                f"wait of {self.max_wait:g} s (it waited {waited:.1f} s here and was not computed)",
                (ahead + ticket.work) / rate - self.admitted_wait(),  # until its work would be admitted again
            )
            self.late.append(ticket)
            refused += 1
        return refused

    def next(self) -> Ticket | None:
        """The next ticket to send on (marked sent), or None: nothing waits, or no room.
        The waiting tickets are checked against the stated wait first (`recheck`)."""
        self.recheck()
        while self._heap and self.room():
            ticket = heapq.heappop(self._heap)
            if ticket.state != "queued":
                continue  # dropped while it waited
            now = self._clock()
            if ticket.deadline - now < self.quickest():
                self.drop(ticket)  # its client gives up before any answer could come: never sent
                ticket.state = "late"
                ticket.refusal = Refusal(
                    "the request's deadline passed before it could be answered: it was not computed", 0.0, "deadline"
                )
                self.late.append(ticket)
                continue
            self.ledger.sent(ticket)
            self.queued -= ticket.work
            self.inside += ticket.work
            self.inside_requests += 1
            self._sent[ticket] = None
            ticket.state, ticket.sent_at = "sent", now
            self.meter.changed(self.inside, self.inside_requests, now)
            ticket.full_at_send = self.meter.sent(now)
            return ticket
        return None

    def done(self, ticket: Ticket, ok: bool = True, client_gone: bool = False) -> None:
        """The ticket's request came back from tritonserver: answered (`ok`), or an error
        (which does not count towards the rate: a refusal is fast and proves nothing)."""
        if ticket.state != "sent":
            return
        now = self._clock()
        ticket.state = "done"
        self.ledger.leave(ticket, inside=-ticket.work)
        self.inside -= ticket.work
        self.inside_requests -= 1
        self._sent.pop(ticket, None)
        if ok:
            self._service.append(now - ticket.sent_at)
            self._answer.append(now - ticket.arrived)
        self.meter.answered(
            ticket.work, ticket.sent_at, ticket.full_at_send, ok, self.inside, self.inside_requests, now
        )
        self.stats.answered += 1
        if client_gone:
            self.stats.abandoned_inside += 1

    def resend(self, ticket: Ticket) -> None:
        """A ticket inside is sent once more (after a repair, or a refusal by the pipeline's
        entrance): its service time counts from now, so that pauses and refused tries do
        not make the pipeline look slower than it is."""
        if ticket.state == "sent":
            ticket.sent_at = self._clock()
            ticket.full_at_send = self.meter.full_seconds(ticket.sent_at)

    def release(self, ticket: Ticket) -> None:
        """A ticket marked sent whose client left before it was forwarded: it leaves the
        pipeline's count uncomputed, as a dropped one."""
        if ticket.state != "sent":
            return
        ticket.state = "dropped"
        self.ledger.leave(ticket, inside=-ticket.work)
        self.inside -= ticket.work
        self.inside_requests -= 1
        self._sent.pop(ticket, None)
        self.meter.changed(self.inside, self.inside_requests, self._clock())
        self.stats.dropped += 1

    def drop(self, ticket: Ticket, expired: bool = False, counted: bool = True) -> None:
        """The client gave up on a ticket that still waits here (or it waited too long):
        it leaves the queue and is never computed (`counted`: as dropped or expired; a
        refusal counts itself)."""
        if ticket.state != "queued":
            return
        ticket.state = "dropped"
        self.ledger.leave(ticket, queued=-ticket.work)
        self.queued -= ticket.work
        if expired:
            self.stats.expired += 1
        elif counted:
            self.stats.dropped += 1
        if not self.queued:
            self._heap.clear()  # only dropped tickets were left in it

    # -- lifecycle ------------------------------------------------------------------
    def pause(self) -> None:
        """Send nothing on (a repair): accepted work waits here."""
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        self._resumed_at = self._clock()

    def close(self, reason: str) -> None:
        """Refuse every new request from now on with `reason` (shutting down)."""
        self.closed = reason

    def waiting(self) -> list[Ticket]:
        return [t for t in self._heap if t.state == "queued"]

    def answer_times(self) -> dict[str, float]:
        """Percentiles of the time from acceptance to answer of the last 4096 answered
        requests (seconds): what the stated wait promises."""
        return percentiles(self._answer)

    def snapshot(self) -> dict[str, Any]:
        """What the health endpoint shows."""
        clients, networks = self.ledger.with_work()
        return {
            "answer_seconds": self.answer_times(),
            "rate_texts_per_s": round(self.rate(), 2),
            "stated_wait_s": self.max_wait,
            "admitted_wait_s": self.admitted_wait(),
            "texts_waiting": self.queued / UNIT,
            "texts_inside": self.inside / UNIT,
            "requests_inside": self.inside_requests,
            "clients_with_work": clients,
            "networks_with_work": networks,
            "paused": self.paused,
            "accepted": self.stats.accepted,
            "refused": dict(self.stats.refused),
            "dropped_before_compute": self.stats.dropped,
            "abandoned_after_send": self.stats.abandoned_inside,
            "expired": self.stats.expired,
            "answered": self.stats.answered,
            "resent": self.stats.resent,
        }
