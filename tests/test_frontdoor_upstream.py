"""`frontdoor.upstream`: the HTTP door's keep-alive connections to tritonserver, against a
stand-in server on loopback that answers as told: by length, chunked, to the connection's
end, `Connection: close`, nothing at all, or not at all (no listener)."""

from __future__ import annotations

import asyncio

import pytest

from readability_triton.frontdoor.upstream import Refused, Upstream, _head
from readability_triton.server.processes import free_port


class StandIn:
    """An HTTP/1.1 server that records each request and answers with the next of `answers`
    (raw bytes; None: close the connection without answering; (bytes, "close"): answer,
    then close it)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.requests: list[bytes] = []
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                self.requests.append(head + await reader.readexactly(length))
                answer = self.answers.pop(0)
                if answer is None:
                    break
                closing = isinstance(answer, tuple)
                answer = answer[0] if closing else answer
                writer.write(answer)
                await writer.drain()
                if (
                    closing
                    or b"Connection: close" in answer
                    or b"Content-Length" not in answer
                    and b"chunked" not in answer
                ):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


def _run(answers, calls):
    """Serve `answers` and run `calls(upstream)`; (its result, the stand-in)."""

    async def main():
        stand_in = StandIn(answers)
        port = free_port()
        server = await asyncio.start_server(stand_in.handle, "127.0.0.1", port)
        upstream = Upstream(f"127.0.0.1:{port}")
        try:
            return await calls(upstream), stand_in
        finally:
            await upstream.close()
            server.close()
            await server.wait_closed()

    return asyncio.run(main())


OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"a": true}'


def test_answers_by_length_reuse_one_connection_and_pass_the_request_as_sent():
    async def calls(upstream):
        first = await upstream.send("POST", "/v2/models/m/infer?x=1", [("Inference-Header-Content-Length", "5")], b"{}")
        second = await upstream.send("GET", "/v2/health/ready", [], b"")
        return first, second

    (first, second), stand_in = _run([OK, OK], calls)
    assert first.status == 200 and first.body == b'{"a": true}'
    assert ("Content-Type", "application/json") in first.headers
    assert second.body == b'{"a": true}'
    assert stand_in.connections == 1
    post, get = stand_in.requests
    assert post.startswith(b"POST /v2/models/m/infer?x=1 HTTP/1.1\r\n")
    assert b"Inference-Header-Content-Length: 5\r\n" in post and b"Content-Length: 2\r\n" in post
    assert post.endswith(b"\r\n\r\n{}")
    assert get.startswith(b"GET /v2/health/ready HTTP/1.1\r\n") and b"Content-Length" not in get


def test_chunked_and_close_delimited_answers_are_read_whole():
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;x=y\r\n world\r\n0\r\n\r\n"
    to_the_end = b"HTTP/1.1 500 Internal Server Error\r\n\r\nbroken"

    async def calls(upstream):
        return [await upstream.send("GET", "/a", [], b""), await upstream.send("GET", "/b", [], b"")]

    (one, two), stand_in = _run([chunked, to_the_end], calls)
    assert one.body == b"hello world" and two.status == 500 and two.body == b"broken"
    assert stand_in.connections == 1  # chunked kept it; the close-delimited one ended it


def test_connection_close_is_honoured_and_no_keep_alive_makes_one_per_request():
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"

    async def calls(upstream):
        await upstream.send("GET", "/a", [], b"")
        await upstream.send("GET", "/b", [], b"")
        upstream.keep_alive = False
        await upstream.send("GET", "/c", [], b"")
        return await upstream.send("GET", "/d", [], b"")

    reply, stand_in = _run([closing, OK, OK, OK], calls)
    assert reply.status == 200 and stand_in.connections == 3  # /a alone, /b and /c, /d alone


def test_a_connection_closed_while_idle_is_not_reused():
    async def calls(upstream):
        await upstream.send("GET", "/a", [], b"")  # answered, then the stand-in closes the connection
        await asyncio.sleep(0.05)
        return await upstream.send("GET", "/b", [], b"")

    reply, stand_in = _run([(OK, "close"), OK], calls)
    assert reply.status == 200 and stand_in.connections == 2


def test_a_request_whose_connection_closes_unanswered_is_an_error_and_never_sent_twice():
    """tritonserver may have read it (a stub killed mid-request): not sent again, and not
    `Refused`, which would let the door send it again as never computed."""

    async def calls(upstream):
        await upstream.send("GET", "/a", [], b"")
        with pytest.raises(OSError, match="without an answer") as caught:
            await upstream.send("POST", "/b", [], b"{}")  # the stand-in closes /b's connection unanswered
        assert not isinstance(caught.value, Refused)
        return await upstream.send("GET", "/c", [], b"")

    reply, stand_in = _run([OK, None, OK], calls)
    assert reply.status == 200 and [r.split(b" ")[1] for r in stand_in.requests] == [b"/a", b"/b", b"/c"]


def test_interim_answers_are_read_past_and_every_answer_reaches_its_own_request():
    continued = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst"
    second = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond"

    async def calls(upstream):
        return [await upstream.send("POST", "/a", [], b"x"), await upstream.send("POST", "/b", [], b"y")]

    (one, two), stand_in = _run([continued, second], calls)
    assert (one.status, one.body, two.body) == (200, b"first", b"second")
    assert stand_in.connections == 1


def test_no_answer_on_a_new_connection_is_an_error_and_no_listener_is_refused():
    async def unanswered(upstream):
        with pytest.raises(OSError, match="without an answer") as caught:
            await upstream.send("GET", "/a", [], b"")
        return caught.value

    err, _ = _run([None], unanswered)
    assert not isinstance(err, Refused)

    async def nobody():
        with pytest.raises(Refused):
            await Upstream(f"127.0.0.1:{free_port()}").send("GET", "/", [], b"")

    asyncio.run(nobody())


def test_header_values_that_would_split_the_request_are_left_out_and_others_pass_as_sent():
    head = _head("GET", "/", "h:1", [("X-Ok", "1"), ("X-Bad", "a\r\nX-Injected: 1")], b"")
    assert b"X-Ok: 1" in head and b"X-Injected" not in head
    sent = b"caf\xc3\xa9 \xff"  # UTF-8, then a byte that is not: aiohttp hands them over decoded so
    head = _head("GET", "/", "h:1", [("X-Name", sent.decode("utf-8", "surrogateescape"))], b"")
    assert b"X-Name: " + sent + b"\r\n" in head
