"""The front door: the HTTP and gRPC ports clients reach, in front of a tritonserver that
listens on 127.0.0.1 only.

Every inference request passes the `Gate` (admission by work, fair order, a stated wait);
everything else (health, metadata, statistics, the restricted APIs, which tritonserver
still guards with the admin key) is passed on as it is. Three things hold whatever the
clients do:

- tritonserver never sees a cancellation: a request sent on is awaited to its end, even
  when its client has left (the answer is then dropped), and no call to it has a deadline;
- a request whose client leaves while it waits here is never sent on;
- a body or message over `max_request_bytes` is refused as the client's error (HTTP 413,
  gRPC RESOURCE_EXHAUSTED) before it is read whole, and never reaches tritonserver.

`Door` is what the two protocols (`http_front`, `grpc_front`) call, in the loop that
`front.FrontDoor` runs in a thread of `serve`; from serve's thread, `pause`/`resume` hold
the queue during a repair and `drain` refuses new requests and lets the accepted ones
finish. When an answer says a python-backend stub died (an internal error naming an
instance of a model this repository serves: `triton_messages.classify`), the door holds its
queue at once, tells the supervisor (`on_dead_stub`), and sends the requests that met the
dead stub once more after the repair: a killed stub costs latency, not answers. The answer
is a suspicion, not a verdict: the supervisor repairs only on its own evidence (the stubs'
processes, a canary), and where it finds nothing it ends the hold at once (`dismiss`); for
`SUSPICION_COOLDOWN` s after that, such an answer tells the supervisor but holds nothing, so
that no client can stop the service by making tritonserver say those words. A request refused before
anything computed it (the pipeline's own load shedding, `stub.admission`, there for clients
that reach tritonserver directly; or a connection tritonserver's port refused while it
restarts) is sent again after a short pause, within the stated wait: behind the front door
the honest client sees an answer or the front's own "busy".
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any, Awaitable, Callable, TypedDict

from .. import contracts as C
from .. import triton_messages as M
from .clients import V4_PREFIX, V6_PREFIX, group_of
from .connections import DEFAULT_MAX_CONNECTIONS, PER_GROUP_SHARE, Guard
from .gate import MAX_INSIDE_REQUESTS, RECHECK, UNIT, Gate, Refusal, Ticket
from .uploads import Uploads
from .wire import DEFAULT_MAX_REQUEST_BYTES, Weigher

log = logging.getLogger(__name__)

#: A request that has waited this many times the stated wait is refused ("busy") rather
#: than kept: only a repair that holds the queue can make one wait that long.
EXPIRE_FACTOR = 2.0
#: The longest the front door holds its queue on its own after a dead-stub answer, waiting
#: for the supervisor's repair to release it.
HOLD_LIMIT = 120.0
#: After the supervisor found nothing to repair behind a dead-stub answer, such answers hold
#: nothing for this long (seconds): they only ask the supervisor to look again.
SUSPICION_COOLDOWN = 30.0
#: The longest client name kept (a --client-header value).
MAX_CLIENT_NAME = 64
#: The first pause before a request refused uncomputed is sent again (seconds), doubled at
#: each try up to RESEND_PAUSE_LIMIT.
RESEND_PAUSE = 0.05
RESEND_PAUSE_LIMIT = 0.5


class ClientLeft(Exception):
    """`Door.run`: the client had left before its request was sent on (never computed)."""


class FrontDrain(TypedDict):
    """What `Door.drain` saw: whether every accepted request was answered in time."""

    drained: bool
    waiting: float  # texts of work still waiting
    inside: float  # texts of work still inside tritonserver
    seconds: float


class Door:
    """The front door without its ports (`front.FrontDoor` opens them): see the module doc.
    `upstream_http`/`upstream_grpc`: tritonserver's own endpoints (host:port on
    127.0.0.1); `client_header`: a header (HTTP) or metadata key (gRPC)
    whose first value names the client instead of its address (only behind a proxy that
    sets it and that clients cannot bypass); `served`: the models of the repository (a
    dead-stub answer counts only when it names one of them); `network_prefix`: the IPv4 and
    IPv6 prefix lengths of a client group (`clients`); `max_connections`: the HTTP port's
    connections at most (`connections.Guard`; the gRPC port's too, by grpc's own cap);
    `max_text_bytes`: the steps' limit on a text; `allow_model_uploads`: pass on model loads
    with file: content; `workers`: how many doors share the ports (`workers`): this one then
    listens beside the others (SO_REUSEPORT), steers each client network to one of them
    (`steering`, unless a client header names the clients), and keeps its share of the
    connections and of the requests inside tritonserver."""

    def __init__(
        self,
        upstream_http: str,
        upstream_grpc: str,
        address: str = "127.0.0.1",
        http_port: int = 8000,
        grpc_port: int = 8001,
        max_wait: float = 10.0,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        client_header: str | None = None,
        on_dead_stub: Callable[[], None] | None = None,
        served: frozenset[str] = frozenset(),
        network_prefix: tuple[int, int] = (V4_PREFIX, V6_PREFIX),
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        allow_model_uploads: bool = False,
        max_text_bytes: int = C.DEFAULT_MAX_TEXT_BYTES,
        workers: int = 1,
    ):
        self.upstream_http, self.upstream_grpc = upstream_http, upstream_grpc
        self.address, self.http_port, self.grpc_port = address, http_port, grpc_port
        self.max_request_bytes = max_request_bytes
        self.client_header = client_header.lower() if client_header else None
        #: Told (from the loop's thread) when an answer says a stub died: the supervisor then
        #: repairs at once. With it set, the front holds its queue until `resume()` (at most
        #: HOLD_LIMIT s) and sends each request that met the dead stub once more.
        self.on_dead_stub = on_dead_stub
        self.served = served
        self.network_prefix = network_prefix
        #: model loads with file: content (python files tritonserver then runs) are refused unless set
        self.allow_model_uploads = allow_model_uploads
        self.uploads = Uploads()  # the folders tritonserver made for the uploads passed on
        # behind a proxy every connection comes from it: no cap per network there
        self.workers = max(1, workers)
        #: whether a client network's connections all reach one worker (`steering`)
        self.steered = self.workers > 1 and not client_header
        if self.workers > 1:
            max_connections = max(16, max_connections // self.workers)
        per_group = max_connections if client_header else max(1, max_connections // PER_GROUP_SHARE)
        self.guard = Guard(self.group_of, max_connections, per_group)
        self.weigher = Weigher(max_text_bytes=max_text_bytes)  # (`serve` sets what its warm-up measured)
        self.gate = Gate(max_wait=max_wait, max_inside_requests=max(2, MAX_INSIDE_REQUESTS // self.workers))
        self._trust_after = -math.inf  # dead-stub answers hold nothing before this (loop time)
        self.holds = 0  # holds of the queue for a suspected dead stub
        self.dismissed = 0  # of which the supervisor found nothing to repair
        self._running: asyncio.Event | None = None  # set while not paused (made in the loop)
        self._held_at: float | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task] = set()
        self._check: asyncio.TimerHandle | None = None  # the next look at the waiting work (`_pump`)
        #: Why this server is leaving ('' while it is not): set by `leave()` when serve is
        #: told to stop. Requests are still taken (the grace that lets load balancers see it
        #: go), but server readiness answers false on both ports from then on.
        self.leaving = ""

    # -- the loop (started by `front.FrontDoor`) ------------------------------------------
    def _call(self, function: Callable[[], Any], timeout: float = 10.0) -> Any:
        """Run `function` in the loop's thread and return its result."""
        if self.loop is None or not self.loop.is_running():
            return function()

        async def call():
            return function()

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout)

    # -- what the protocols call -------------------------------------------------------
    async def admit(self, client: str, work: float, patience: float | None = None) -> Ticket | Refusal:
        """A ticket once the request may be sent on, or why not. Cancelled (the client
        left) while it waits: the request leaves the queue uncomputed. `patience`: the
        seconds left before the client gives up (a gRPC deadline), where known; `work`:
        its texts weighed by length (`wire`)."""
        outcome = self.gate.offer(client, work, math.inf if patience is None else patience, self.group_of(client))
        if isinstance(outcome, Refusal):
            return outcome
        ticket = outcome
        assert self.loop is not None
        waiter = self.loop.create_future()
        ticket.waiter = waiter
        self._pump()
        if ticket.state == "queued":
            try:
                await asyncio.wait_for(asyncio.shield(waiter), EXPIRE_FACTOR * self.gate.max_wait)
            except asyncio.TimeoutError:
                if ticket.refusal is not None:
                    return ticket.refusal  # refused by the gate in the same turn
                self.gate.drop(ticket, expired=True)
                return Refusal(
                    f"{M.BUSY} the request waited {EXPIRE_FACTOR * self.gate.max_wait:g} s without being "
                    "sent on (the server is being repaired or is much slower than measured); retry",
                    1.0,
                )
            except asyncio.CancelledError:
                if ticket.state == "queued":
                    self.gate.drop(ticket)
                else:
                    self.gate.release(ticket)
                self._pump()
                raise
        if ticket.refusal is not None:
            return ticket.refusal  # refused after acceptance: too late for its deadline, or the pipeline slowed
        return ticket

    async def run(
        self,
        ticket: Ticket,
        forward: Callable[[], Awaitable[Any]],
        ok: Callable[[Any], bool] = lambda answer: True,
        dead_stub: Callable[[Any], bool] = lambda answer: False,
        uncomputed: Callable[[Any], bool] = lambda answer: False,
        client_gone: Callable[[], bool] = lambda: False,
        inline: bool = False,
    ) -> Any:
        """`forward()` sent on for `ticket`, awaited to its end even if the client leaves
        (the caller is then cancelled and the answer dropped). Just before the send, a
        client that has left already (the caller was cancelled, or `client_gone()` says so:
        an HTTP client that sent its request and closed at once, as the kernel knows before
        the loop reads the close, `http_messages.peer_closed`; a gRPC call past its deadline)
        gets `ClientLeft` instead of an answer nobody reads. `forward` must not touch the
        client's connection (it may be gone): it returns the answer, `ok(answer)` says
        whether it is a success (the gate's rate counts successes only),
        `dead_stub(answer)` whether it met a stub that had died (sent once more after the
        repair, where a supervisor repairs: `on_dead_stub`) and `uncomputed(answer)`
        whether it was refused before anything computed it (the pipeline's entrance shed
        it, or tritonserver's port refused the connection during a restart): sent again
        after a pause, while its client is there and within the stated wait from its
        arrival, so that the front door, not the pipeline, answers "busy". `inline`: run in
        the caller's task, which is then never cancelled (the HTTP port holds its request once
        it is admitted, `http_server.Request.hold`), with no task and shield of its own (about
        12 µs a request); its client's leaving is seen by `client_gone()` alone."""
        gone: list[bool] = []
        until = min(ticket.deadline, ticket.arrived + self.gate.max_wait)

        def left() -> bool:
            try:
                return bool(gone) or client_gone()
            except Exception:  # noqa: BLE001 - a check that fails proves nothing: send it on
                return False

        def has_gone() -> bool:
            """The client left while its request was sent on (inline: as `client_gone` says)."""
            return bool(gone) or (inline and left())

        async def send():
            if left():
                self.gate.release(ticket)  # never sent: it counts as dropped before compute
                self._pump()
                raise ClientLeft("the client left before its request was sent on")
            answer = None
            repaired = False
            pause = RESEND_PAUSE
            try:
                answer = await forward()
                while True:
                    if self.on_dead_stub is not None and dead_stub(answer) and not repaired:
                        repaired = True  # sent once more after the repair, as any request that met it
                        self._hold_for_repair()
                        await self._until_running()
                    elif uncomputed(answer) and not has_gone() and self.gate.now() + pause < until:
                        self.gate.stats.resent += 1
                        await asyncio.sleep(pause)
                        pause = min(2 * pause, RESEND_PAUSE_LIMIT)
                        await self._until_running()  # not while a repair holds the queue
                        if has_gone():
                            return answer  # the client left during the pause: not sent again
                    else:
                        return answer
                    self.gate.resend(ticket)
                    answer = await forward()
            finally:
                self.gate.done(ticket, ok=answer is not None and ok(answer), client_gone=has_gone())
                self._pump()

        if inline:
            return await send()
        task = asyncio.ensure_future(send())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            gone.append(True)
            raise

    def _hold_for_repair(self) -> None:
        """A dead stub answered: send nothing more until the supervisor's repair is done (or
        it dismisses the suspicion); within SUSPICION_COOLDOWN of a dismissal, only tell it."""
        assert self.loop is not None and self._running is not None
        if self.loop.time() < self._trust_after:
            assert self.on_dead_stub is not None
            self.on_dead_stub()
            return
        if self._held_at is None:
            self.holds += 1
            log.warning("front door: a request met a dead python-backend stub; holding the queue for the repair")
            self._held_at = self.loop.time()
            self.gate.pause()
            self._running.clear()
            self.loop.call_later(HOLD_LIMIT, self._release_hold)
            assert self.on_dead_stub is not None
            self.on_dead_stub()

    def _release_hold(self) -> None:
        if self._held_at is not None and self.loop is not None and self.loop.time() - self._held_at >= HOLD_LIMIT:
            log.warning(f"front door: no repair released the queue within {HOLD_LIMIT:g} s; sending again")
            self._resume()

    async def _until_running(self) -> None:
        assert self._running is not None
        await self._running.wait()

    def _dismiss(self) -> None:
        """The supervisor found nothing to repair: end the hold, and hold for no such answer
        for SUSPICION_COOLDOWN s."""
        assert self.loop is not None
        self._trust_after = self.loop.time() + SUSPICION_COOLDOWN
        if self._held_at is not None:
            self.dismissed += 1
            log.warning(
                "front door: the supervisor found no dead stub behind the answer that held the queue; sending again "
                f"(such answers hold nothing for the next {SUSPICION_COOLDOWN:g} s)"
            )
            self._resume()

    def _pause(self) -> None:
        self.gate.pause()
        if self._running is not None:
            self._running.clear()

    def _resume(self) -> None:
        self._held_at = None
        self.gate.resume()
        if self._running is not None:
            self._running.set()
        self._pump()

    def _pump(self) -> None:
        while True:
            ticket = self.gate.next()
            if ticket is None:
                break
            self._wake(ticket)
        while self.gate.late:
            self._wake(self.gate.late.pop())
        if self.gate.queued and self._check is None and self.loop is not None and self.loop.is_running():
            # work waits: look again soon even if no answer comes back (`Gate.recheck`)
            self._check = self.loop.call_later(RECHECK, self._look)

    def _look(self) -> None:
        self._check = None
        self._pump()

    @staticmethod
    def _wake(ticket: Ticket) -> None:
        waiter = ticket.waiter
        if isinstance(waiter, asyncio.Future) and not waiter.done():
            waiter.set_result(None)

    def group_of(self, client: str) -> str:
        """A client's group: its network (`clients.group_of`)."""
        return group_of(client, *self.network_prefix)

    def client_of(self, address: str | None, header: str | None) -> str:
        """A client's name: the header's first value where the operator trusts one (at most
        MAX_CLIENT_NAME characters: names are kept), else its address."""
        if self.client_header and header:
            return header.split(",")[0].strip()[:MAX_CLIENT_NAME] or (address or "?")
        return address or "?"

    @property
    def max_text_bytes(self) -> int:
        return self.weigher.max_text_bytes

    # -- control from serve's thread --------------------------------------------------
    def seed(self, rate: float, byte_work: float | None = None) -> None:
        """Start from what serve's warm-up measured (before `start`): the pipeline's rate
        (texts/s), of which this door takes its share, and the work of a text's byte."""
        self.gate.seed(rate / self.workers)
        if byte_work is not None:
            self.weigher.byte_work = byte_work

    def remove_uploads(self) -> list[str]:
        """Remove the folders of uploaded models tritonserver left (`uploads`); those removed."""
        return self.uploads.remove()

    def pause(self) -> None:
        """Hold accepted work here (a repair of tritonserver is under way)."""
        self._call(self._pause)

    def resume(self) -> None:
        self._call(self._resume)

    def dismiss(self) -> None:
        """The supervisor looked behind a dead-stub answer and found nothing to repair."""
        self._call(self._dismiss)

    def snapshot(self) -> dict[str, Any]:
        """The gate's snapshot and the door's own counts (in the loop's thread)."""
        connections = self.guard.snapshot()
        return {
            **self.gate.snapshot(),
            "holds": self.holds,
            "holds_dismissed": self.dismissed,
            "byte_work": self.weigher.byte_work,
            **{f"http_connections_{key}": value for key, value in connections.items()},
        }

    def status(self) -> dict[str, Any]:
        try:
            return self._call(self.snapshot, timeout=2.0)
        except Exception:  # noqa: BLE001 - a status is never worth an exception
            return {}

    def leave(self, reason: str = "shutting down") -> None:
        """Answer server readiness (KServe v2 `/v2/health/ready`, gRPC `ServerReady`) with
        'not ready' from now on, still taking requests: what clients and load balancers that
        ask the serving ports see during serve's drain grace."""
        self.leaving = reason

    def drain(self, timeout: float, reason: str = "shutting down") -> FrontDrain:
        """Refuse new requests from now on and wait (at most `timeout` s) until every
        accepted one is answered. {"drained": bool, "waiting": n, "inside": n, "seconds": s}."""
        self.leaving = self.leaving or reason
        loop = self.loop
        if loop is None or not loop.is_running():
            return {"drained": True, "waiting": 0, "inside": 0, "seconds": 0.0}

        async def drain():
            self.gate.close(f"{reason}: this server takes no new requests; retry on another replica or in a moment")
            self._resume()
            started = loop.time()
            while (self.gate.queued or self.gate.inside) and loop.time() - started < timeout:
                await asyncio.sleep(0.05)
            return {
                "drained": not (self.gate.queued or self.gate.inside),
                "waiting": self.gate.queued / UNIT,
                "inside": self.gate.inside / UNIT,
                "seconds": round(loop.time() - started, 2),
            }

        return asyncio.run_coroutine_threadsafe(drain(), loop).result(timeout + 10)
