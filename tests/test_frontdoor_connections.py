"""The front door's bounds that need no tritonserver: connections capped in all and per
client network, idle and half-sent connections timed out, a log that says each kind of
trouble once a second, and client groups (networks) that one sender's many addresses do
not multiply. Each against the door's own HTTP server (`http_server`) on 127.0.0.1 where sockets matter."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest

from readability_triton.frontdoor import clients
from readability_triton.frontdoor.connections import Guard, Quiet, descriptor_budget
from readability_triton.frontdoor.gate import Gate, Refusal, Ticket
from readability_triton.frontdoor.http_server import Answer, HTTPConnection


class _Listener:
    def __init__(self, server: asyncio.Server, guard: Guard):
        self.server, self.guard = server, guard

    async def cleanup(self) -> None:
        self.guard.stop()
        self.server.close()
        self.guard.close_all()
        await self.server.wait_closed()


async def _server(guard: Guard):
    async def hello(request):
        query = request.target.partition("?")[2]
        await asyncio.sleep(float(query.removeprefix("sleep=") or "0"))
        return Answer(200, [("Content-Type", "text/plain")], b"ok")

    listener = await asyncio.get_running_loop().create_server(
        guard.factory(lambda: HTTPConnection(hello, 1 << 20, 30.0, 2.0)), "127.0.0.1", 0
    )
    guard.start()
    return _Listener(listener, guard), listener, listener.sockets[0].getsockname()[1]


async def _get(port: int, source: str = "127.0.0.1", path: str = "/") -> bytes:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    data = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return data


async def _idle(port: int, source: str) -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return sock


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed `sock` (what it sent is read and dropped)."""
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_idle_connections_make_room_for_new_clients_and_cost_their_own_network():
    async def main():
        guard = Guard(lambda a: clients.group_of(a), max_connections=40, max_per_group=30)
        runner, listener, port = await _server(guard)
        try:
            flood = [await _idle(port, "127.0.0.5") for _ in range(60)]  # over its network's cap
            await asyncio.sleep(0.2)
            assert guard.snapshot()["open"] <= 30 and guard.counts["evicted"] >= 30
            assert sum(_closed(s) for s in flood) >= 30  # the oldest closed
            others = [await _idle(port, f"127.0.{n}.9") for n in range(1, 12)]  # 30 + 11 > 40 in all
            await asyncio.sleep(0.2)
            assert guard.snapshot()["open"] <= 40
            assert b"200 OK" in await _get(port, "127.1.0.3")  # a new client is answered
            assert b"200 OK" in await _get(port, "127.0.0.5")  # the flood's own network too
            for sock in flood + others:
                sock.close()
        finally:
            guard.stop()
            listener.close()
            await runner.cleanup()

    asyncio.run(main())


async def _closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until `sock` is closed by the server (reading what it sends), or None."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - started
        except BlockingIOError:
            pass
        except OSError:
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    return None


def test_half_sent_and_silent_connections_time_out_but_a_slow_handler_is_never_cut():
    async def main():
        guard = Guard(lambda a: a, header_timeout=1.0, idle_timeout=3.0)
        runner, listener, port = await _server(guard)
        try:
            silent = await _idle(port, "127.0.0.2")
            slowloris = await _idle(port, "127.0.0.3")
            slowloris.send(b"GET / HTTP/1.1\r\nHost: x\r\n")
            keep = await _idle(port, "127.0.0.4")
            keep.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # one request, then idle keep-alive
            slow = asyncio.ensure_future(_get(port, "127.0.0.6", "/?sleep=4.5"))
            started = time.monotonic()
            closed: dict[str, float | None] = {"silent": None, "slowloris": None, "keep": None}
            while time.monotonic() - started < 6.0 and None in closed.values():
                if closed["slowloris"] is None and time.monotonic() - started < 2.5:
                    slowloris.send(b"X-Drip: 1\r\n")  # a header line every 0.1 s, never the end
                for name, sock in (("silent", silent), ("slowloris", slowloris), ("keep", keep)):
                    if closed[name] is None and await _closed_within(sock, 0.01) is not None:
                        closed[name] = time.monotonic() - started
                await asyncio.sleep(0.1)
            assert 1.0 <= closed["silent"] <= 2.6 and 1.0 <= closed["slowloris"] <= 2.6, closed  # header timeout
            assert 3.0 <= closed["keep"] <= 5.5, closed  # idle keep-alive timeout, not the header one
            assert b"200 OK" in await slow  # 4.5 s inside its handler: never touched
            assert guard.counts["timed_out"] == 3
        finally:
            guard.stop()
            listener.close()
            await runner.cleanup()

    asyncio.run(main())


def _quiet_logger(name: str, every: float) -> tuple[logging.Logger, Quiet, list[str]]:
    """A logger behind a `Quiet` filter, and the messages that pass it."""
    logger = logging.getLogger(name)
    quiet = Quiet(every=every)
    logger.addFilter(quiet)
    passed: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            passed.append(record.getMessage())

    logger.addHandler(Keep())
    logger.propagate = False
    return logger, quiet, passed


def test_a_flood_of_one_kind_of_log_record_is_one_line_a_second():
    logger, quiet, records = _quiet_logger("test.quiet", 1.0)
    try:
        for n in range(5000):
            try:
                raise OSError(24, "Too many open files")
            except OSError:
                logger.exception(f"socket.accept() out of system resource\nsocket: <{n}>")
        logger.warning("another kind")
        assert len(records) == 2
        time.sleep(1.05)
        logger.exception("socket.accept() out of system resource\nsocket: <last>", exc_info=(OSError, OSError(), None))
        assert len(records) == 3 and "4999 more like it" in records[-1]
    finally:
        logger.removeFilter(quiet)


def test_descriptor_budget_leaves_room_for_everything_else():
    import resource

    budget = descriptor_budget()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft == hard or hard == resource.RLIM_INFINITY
    assert 64 <= budget <= soft - 512 or budget == 64


# -- client groups ---------------------------------------------------------------------------


def test_a_client_group_is_its_network():
    assert clients.group_of("127.0.0.10") == clients.group_of("127.0.0.59") == "127.0.0.0/24"
    assert clients.group_of("127.1.0.3") == "127.1.0.0/24"
    assert clients.group_of("2001:db8::1") == clients.group_of("2001:db8::ffff:1") == "2001:db8::/64"
    assert clients.group_of("::ffff:10.1.2.3") == "10.1.2.0/24"  # an IPv4 client on a dual-stack socket
    assert clients.group_of("fe80::1%eth0") == "fe80::/64"
    assert clients.group_of("tenant-a") == "tenant-a"  # a --client-header value that is not an address
    assert clients.group_of("127.0.0.10", 32, 128) == "127.0.0.10/32"
    assert clients.parse_prefixes("24,64") == (24, 64)
    for bad in ("24", "33,64", "a,b", "24,129"):
        with pytest.raises(ValueError):
            clients.parse_prefixes(bad)


def test_fifty_addresses_of_one_network_get_one_networks_share():
    """The Sybil attack: 50 addresses of 127.0.0.0/24 each keep 8-text requests coming;
    one honest client of 127.1.0.0/24 sends 1 text at a time. Per network, the honest
    client is never refused for its share and is sent on within a request or two."""
    now = [100.0]
    gate = Gate(max_wait=2.0, rate=100.0, clock=lambda: now[0], aim=1.0, max_inside_requests=4, warmup=0)
    honest_ok = honest_all = 0
    waits = []
    pending: dict[str, Ticket] = {}
    for _ in range(400):
        for n in range(10, 60):
            client = f"127.0.0.{n}"
            if client not in pending:
                outcome = gate.offer(client, 8.0, group=clients.group_of(client))
                if isinstance(outcome, Ticket):
                    pending[client] = outcome
        if "honest" not in pending:
            honest_all += 1
            outcome = gate.offer("127.1.0.3", 1.0, group=clients.group_of("127.1.0.3"))
            if isinstance(outcome, Ticket):
                honest_ok += 1
                pending["honest"] = outcome
            else:
                assert isinstance(outcome, Refusal)
        sent = []
        while (ticket := gate.next()) is not None:
            sent.append(ticket)
        now[0] += 0.05
        for ticket in sent:
            gate.done(ticket)
            name = "honest" if ticket.client == "127.1.0.3" else ticket.client
            if name == "honest":
                waits.append(now[0] - ticket.arrived)
            pending.pop(name, None)
    assert honest_ok / honest_all >= 0.9, (honest_ok, honest_all, gate.snapshot())
    assert sorted(waits)[len(waits) // 2] <= 0.2  # its median wait: about one turn
    # without the networks (every address its own group) the honest client is one of 51
    assert gate.snapshot()["networks_with_work"] <= 2


def test_a_body_that_does_not_arrive_in_time_is_answered_408_and_its_connection_closed(monkeypatch):
    """The front door's HTTP port itself (no tritonserver behind it: the request never gets
    that far): headers, then 10 of 100 bytes of body, then nothing."""
    from readability_triton.frontdoor import http_front
    from readability_triton.frontdoor.door import Door
    from readability_triton.server.tritonserver import free_port

    monkeypatch.setattr(http_front, "BODY_TIMEOUT", 0.5)

    async def main():
        door = Door("127.0.0.1:1", "127.0.0.1:2", http_port=free_port())
        door.loop = asyncio.get_running_loop()
        close = await http_front.open_http(door)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", door.http_port)
            writer.write(
                b"POST /v2/models/readability/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b"{" * 10
            )
            started = time.monotonic()
            reply = await asyncio.wait_for(reader.read(), 5)
            return reply, time.monotonic() - started
        finally:
            await close()

    reply, seconds = asyncio.run(main())
    assert reply.startswith(b"HTTP/1.1 408") and b"did not arrive within 0.5 s" in reply
    assert 0.4 <= seconds < 3


def test_a_network_that_changes_address_for_every_request_gets_one_networks_turns():
    """The Sybil attack with fresh addresses: every request of one /24 from an address it
    never used before (a new client each time, with no place of its own on the timeline),
    against one honest client of another network sending 1 text at a time."""
    now = [100.0]
    gate = Gate(max_wait=2.0, rate=20.0, clock=lambda: now[0], aim=1.0, max_inside_requests=2, warmup=0, inside=0.0)
    served = {"honest": 0, "attacker": 0}
    fresh = iter(range(10**6))
    honest_ticket = None
    for _ in range(1500):
        for _ in range(3):
            address = f"127.0.0.{next(fresh) % 250 + 1}:{next(fresh)}"  # a new name each time, one network
            gate.offer(address, 1.0, group="127.0.0.0/24")
        if honest_ticket is None or honest_ticket.state != "queued" and honest_ticket.state != "sent":
            outcome = gate.offer("127.1.0.3", 1.0, group="127.1.0.0/24")
            honest_ticket = outcome if isinstance(outcome, Ticket) else None
        sent = []
        while (ticket := gate.next()) is not None:
            sent.append(ticket)
        now[0] += 0.05
        for ticket in sent:
            gate.done(ticket)
            served["honest" if ticket.client == "127.1.0.3" else "attacker"] += 1
    assert served["honest"] >= 0.4 * (served["honest"] + served["attacker"]), served


def test_the_memory_of_places_on_the_timeline_is_bounded_and_cheap(monkeypatch):
    import time as clock

    from readability_triton.frontdoor import fairness as F

    monkeypatch.setattr(F, "MAX_REMEMBERED", 2048)
    gate = Gate(max_wait=1e9, rate=1e6, max_inside_requests=10**6)
    started = clock.perf_counter()
    for n in range(20_000):
        gate.drop(gate.offer(f"c{n}", 1.0))  # each leaves a place ahead of the present
    assert len(gate.ledger.finishes) <= 2048
    assert clock.perf_counter() - started < 2.0  # not a rebuild of the whole memory per request


def test_messages_that_name_a_client_are_one_kind():
    logger, quiet, seen = _quiet_logger("test.quiet.kinds", 60.0)
    try:
        for n in range(100):
            logger.warning("closed an idle connection of %s", f"10.0.{n}.0/24")
        assert len(seen) == 1
    finally:
        logger.removeFilter(quiet)
