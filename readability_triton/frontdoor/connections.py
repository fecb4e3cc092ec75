"""Connections are a bounded resource: the HTTP port's connections counted, capped and
timed out, and a log that says each kind of trouble once a second, not once per socket.

What broke without it: 20,673 idle TCP connections (or 1,100 slowloris connections under
`ulimit -n 1024`) took serve to its file-descriptor limit; new clients, `/livez` and
`/readyz` timed out, the supervisor failed with "Too many open files: '/proc'", and asyncio
logged a traceback for every failed accept() (76 MB in 60 s). Nothing closed a connection
that never finished its headers.

`Guard` wraps the HTTP server's protocol factory (`http_server.HTTPConnection`s):

- **a cap in all and per client group** (`max_connections`, `max_per_group`: a group is an
  address's network, `clients.group_of`). A new connection over a cap makes room by closing
  an idle connection of the group that holds the most (its longest idle one); where none is
  idle it is closed at once. So a flood of idle connections costs its sender its own
  connections, not anyone else's, and the door never comes near the descriptor limit:
  `serve` sets the caps below it (`descriptor_budget`), leaving the health port, the
  supervisor and tritonserver's connections their own descriptors.
- **timeouts**: a connection waiting for a request's headers (new, or between requests) is
  closed after `header_timeout` s once it has sent part of them (slowloris) or when it is
  new and has sent nothing, and after `idle_timeout` s when it is an idle keep-alive
  connection. A request being handled is never touched (its body has a deadline of its own,
  `http_front.BODY_TIMEOUT`).

A connection is waiting for a request while its protocol says so (`waiting()`: nothing is
being read past a head, or answered).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections import defaultdict
from typing import Any, Callable

log = logging.getLogger(__name__)

#: Connections the HTTP port keeps at most (the gRPC port's own bound is grpc's: `grpc_front`).
DEFAULT_MAX_CONNECTIONS = 4096
#: One client group (a network: `clients.group_of`) keeps at most 1/PER_GROUP_SHARE of the cap.
PER_GROUP_SHARE = 8
#: Seconds a new connection, or one that has begun a request, has to finish its headers.
HEADER_TIMEOUT = 10.0
#: Seconds an idle keep-alive connection is kept.
IDLE_TIMEOUT = 60.0
#: Descriptors kept for everything but the two ports' connections: the health port, the
#: supervisor's /proc reads and probes, the connections to tritonserver, logs, the listen
#: backlogs that accept() drains at once.
RESERVED_DESCRIPTORS = 512


def descriptor_budget() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit, and return how many
    descriptors the serving ports' connections may use (the limit less RESERVED_DESCRIPTORS)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return max(64, soft - RESERVED_DESCRIPTORS)


class _Guarded(asyncio.Protocol):
    """One connection: its protocol (`http_server.HTTPConnection`), and what the guard knows of it."""

    def __init__(self, guard: "Guard", inner: Any):
        self.guard, self.inner = guard, inner
        self.group = ""
        self.admitted = False
        self.transport: asyncio.Transport | None = None
        self.wait_since = time.monotonic()  # when it began waiting for a request
        self.was_waiting = True
        self.partial = False  # bytes arrived while it waited: it is sending headers
        self.new = True  # no request yet

    def waiting(self) -> bool:
        return self.inner.waiting()

    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        address = peer[0] if isinstance(peer, tuple) and peer else "?"
        self.group = self.guard.group_of(address)
        if not self.guard.admit(self):
            transport.abort()
            return
        self.admitted = True
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self.admitted:
            return
        if self.waiting():
            self.partial = True
        self.inner.data_received(data)
        if not self.waiting():
            self.new = self.partial = self.was_waiting = False

    def eof_received(self):
        return self.inner.eof_received() if self.admitted else None

    def connection_lost(self, exc) -> None:
        self.guard.forget(self)
        if self.admitted:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class Guard:
    """See the module doc. `group_of(address)`: a client's group (its network)."""

    def __init__(
        self,
        group_of: Callable[[str], str],
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_per_group: int = DEFAULT_MAX_CONNECTIONS // PER_GROUP_SHARE,
        header_timeout: float = HEADER_TIMEOUT,
        idle_timeout: float = IDLE_TIMEOUT,
    ):
        self.group_of = group_of
        self.max_connections, self.max_per_group = max_connections, max(1, min(max_per_group, max_connections))
        self.header_timeout, self.idle_timeout = header_timeout, idle_timeout
        self.open: dict[_Guarded, None] = {}  # in the order they came (oldest first)
        self.groups: dict[str, dict[_Guarded, None]] = defaultdict(dict)
        self.counts = {"accepted": 0, "refused": 0, "evicted": 0, "timed_out": 0}
        self._sweeper: asyncio.Task | None = None

    def factory(self, make: Callable[[], Any]) -> Callable[[], asyncio.Protocol]:
        """The protocol factory for `loop.create_server`: `make()` makes a connection's own
        protocol, which says whether it waits for a request (`waiting()`)."""
        return lambda: _Guarded(self, make())

    # -- admission ----------------------------------------------------------------------
    def admit(self, connection: _Guarded) -> bool:
        members = self.groups[connection.group]
        if len(members) >= self.max_per_group and not self._evict(members):
            return self._refuse(connection)
        if len(self.open) >= self.max_connections:
            fullest = sorted(self.groups.values(), key=len, reverse=True)
            if not any(self._evict(group) for group in fullest if group):
                return self._refuse(connection)
        self.open[connection] = None
        members[connection] = None
        self.counts["accepted"] += 1
        return True

    def _refuse(self, connection: _Guarded) -> bool:
        self.counts["refused"] += 1
        if not self.groups.get(connection.group):
            self.groups.pop(connection.group, None)
        log.warning("front door: a connection from %s closed at once: every connection is busy", connection.group)
        return False

    def _evict(self, members: dict[_Guarded, None]) -> bool:
        """Close the connection of `members` that has waited longest for a request."""
        idle = [c for c in members if c.waiting()]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c.wait_since)
        self.counts["evicted"] += 1
        log.warning(
            "front door: closed an idle connection of %s to make room (the connection caps: %d in all, %d per "
            "client network)",
            oldest.group,
            self.max_connections,
            self.max_per_group,
        )
        self._close(oldest)
        return True

    def _close(self, connection: _Guarded) -> None:
        self.forget(connection)
        if connection.transport is not None:
            connection.transport.abort()

    def close_all(self) -> None:
        """Close every connection (the port is closing): at once where its client has not
        taken what it was sent (a slow reader would hold the close), else once it is sent."""
        for connection in list(self.open):
            self.forget(connection)
            transport = connection.transport
            if transport is not None:
                transport.abort() if transport.get_write_buffer_size() else transport.close()

    def forget(self, connection: _Guarded) -> None:
        if connection in self.open:
            del self.open[connection]
            members = self.groups.get(connection.group)
            if members is not None:
                members.pop(connection, None)
                if not members:
                    del self.groups[connection.group]

    # -- timeouts -----------------------------------------------------------------------
    def sweep(self, now: float | None = None) -> int:
        """Close the connections past their timeout; how many."""
        now = time.monotonic() if now is None else now
        late = []
        for connection in self.open:
            if not connection.waiting():
                connection.was_waiting = False
                continue
            if not connection.was_waiting:  # a request ended since the last look
                connection.was_waiting, connection.wait_since, connection.partial = True, now, False
            limit = self.header_timeout if connection.partial or connection.new else self.idle_timeout
            if now - connection.wait_since >= limit:
                late.append(connection)
        for connection in late:
            self.counts["timed_out"] += 1
            self._close(connection)
        if late:
            log.info("front door: closed %d connection(s) that sent no request in time", len(late))
        return len(late)

    def start(self) -> None:
        """Sweep once a second in the running loop until `stop()`."""

        async def sweeper() -> None:
            while True:
                await asyncio.sleep(1.0)
                self.sweep()

        self._sweeper = asyncio.ensure_future(sweeper())

    def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()

    def snapshot(self) -> dict[str, int]:
        return {"open": len(self.open), "groups": len(self.groups), **self.counts}


class Quiet(logging.Filter):
    """Let each kind of record (logger, the message's first line before its arguments are
    put in, the exception's type) through at most once per `every` s; the next one that
    passes says how many were dropped. A filter on the logger drops a record before its
    traceback is formatted. Messages that name a client take it as an argument (%s), so
    that each client is not a kind of its own."""

    def __init__(self, every: float = 1.0):
        super().__init__()
        self.every = every
        self._last: dict[tuple, float] = {}
        self._dropped: dict[tuple, int] = defaultdict(int)

    def filter(self, record: logging.LogRecord) -> bool:
        first = str(record.msg).split("\n", 1)[0][:80]
        kind = (record.name, first, record.exc_info[0] if record.exc_info else None)
        now = time.monotonic()
        if now - self._last.get(kind, -1e9) < self.every:
            self._dropped[kind] += 1
            return False
        self._last[kind] = now
        dropped = self._dropped.pop(kind, 0)
        if dropped:
            record.msg = f"{record.msg} ({dropped} more like it in the last {self.every:g} s not logged)"
        if len(self._last) > 4096:  # no state without a bound
            self._last.clear()
            self._dropped.clear()
        return True


#: The loggers that speak per connection or per request under attack.
NOISY_LOGGERS = ("asyncio", "readability_triton.frontdoor.http_server", "grpc._cython.cygrpc", __name__)


def quiet_logs(every: float = 1.0) -> Quiet:
    """Install one `Quiet` filter on each of NOISY_LOGGERS (once)."""
    quiet = Quiet(every)
    for name in NOISY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, Quiet) for f in logger.filters):
            logger.addFilter(quiet)
    return quiet
