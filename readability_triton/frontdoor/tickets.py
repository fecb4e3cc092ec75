"""What the gate (`gate.Gate`) keeps of requests and clients: tickets, refusals, each
client's and each client group's work, and the counts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(eq=False)
class Ticket:
    """One accepted request: who sent it, how many texts, and where it is."""

    client: str
    work: int  # thousandths of a text (texts weighed by length, `wire.Weigher.work_of`)
    arrived: float
    start: float  # its start on the fair timeline
    serial: int
    state: str = "queued"  # queued, sent, done, dropped, late, slowed
    sent_at: float = 0.0
    full_at_send: float = 0.0  # the pipeline's full seconds so far when it was sent (`rate.Meter`)
    deadline: float = math.inf  # when its client gives up (a gRPC deadline), on the gate's clock
    waiter: object = None  # the front's handle (an asyncio future); the gate never touches it
    refusal: "Refusal | None" = None  # why it was refused after acceptance (states late, slowed)
    finish: float = 0.0  # its end on the fair timeline: among equal starts, the sooner end goes first

    def order(self) -> tuple[float, float, int]:
        return (self.start, self.finish, self.serial)

    def __lt__(self, other: "Ticket") -> bool:
        return self.order() < other.order()


@dataclass(frozen=True)
class Refusal:
    """Why a request was not accepted, and when to try again (seconds)."""

    reason: str
    retry_after: float
    kind: str = "busy"  # busy, share, closed, deadline, slowed


@dataclass
class ClientState:
    group: str = ""  # its network (`clients.group_of`)
    queued: int = 0  # work waiting here (thousandths of a text)
    inside: int = 0  # work sent on and not answered yet

    @property
    def work(self) -> int:
        return self.queued + self.inside


@dataclass
class GroupState:
    work: int = 0  # its clients' work waiting or inside
    clients: int = 0  # its clients with work
    finish: float = 0.0  # the end of its last request on the fair timeline


@dataclass
class Stats:
    accepted: int = 0
    refused: dict[str, int] = field(
        default_factory=lambda: {"busy": 0, "share": 0, "closed": 0, "deadline": 0, "slowed": 0}
    )  # slowed: accepted, then refused uncomputed when the rate fell (`Gate.recheck`)
    dropped: int = 0  # abandoned while waiting here: never computed
    abandoned_inside: int = 0  # the client left after it was sent on: computed, answer dropped
    expired: int = 0  # waited past the longest wait: refused after acceptance
    answered: int = 0
    resent: int = 0  # sends again of requests refused before anything computed them


def percentiles(seconds) -> dict[str, float]:
    """p50, p90, p99 and the max of some durations (seconds; {} for none)."""
    times = sorted(seconds)
    if not times:
        return {}

    def at(q: float) -> float:
        return round(times[min(len(times) - 1, int(q * len(times)))], 4)

    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": round(times[-1], 4)}
