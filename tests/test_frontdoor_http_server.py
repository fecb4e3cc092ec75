"""The front door's own HTTP/1.1 server (`frontdoor.http_server`), on 127.0.0.1 with raw
sockets and a handler that says what it was given: framing (pipelining, HTTP/1.0, chunked and
compressed bodies, HEAD), the refusals of bad framing (each with its status, then the
connection's end), a client that leaves, a handler that fails, a client that reads slowly,
and what the guard reads (`waiting()`)."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import sys
import threading
import time
import zlib

import pytest

from readability_triton.frontdoor.http_server import Answer, HTTPConnection, Request, error

LIMIT = 1 << 16


class _Server:
    """The server in a loop of its own thread; `seen` holds each request handled."""

    def __init__(self, delay: float = 0.0, answer_bytes: int = 0, body_timeout: float = 1.0):
        self.seen: list[Request] = []
        self.gone: list[bool] = []  # what `Request.gone()` said as the handler began (path /gone)
        self.cancelled = 0
        self.connections: list[HTTPConnection] = []
        self.delay, self.answer_bytes = delay, answer_bytes
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def handle(request: Request):
            self.seen.append(request)
            if request.path == "/gone":
                self.gone.append(request.gone())
            if request.path == "/fail":
                raise RuntimeError("a handler's bug")
            try:
                await asyncio.sleep(self.delay)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
            body = json.dumps(
                {"method": request.method, "path": request.path, "target": request.target, "body": len(request.body)}
            ).encode()
            if self.answer_bytes:
                body = b"x" * self.answer_bytes
            return Answer(200, [("Content-Type", "application/json")], body)

        def connection() -> HTTPConnection:
            made = HTTPConnection(handle, LIMIT, body_timeout, 0.5)
            self.connections.append(made)
            return made

        async def start() -> None:
            self.server = await self.loop.create_server(connection, "127.0.0.1", 0)
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()

        self.thread = threading.Thread(target=lambda: (self.loop.run_until_complete(start()), self.loop.run_forever()))
        self.thread.start()
        ready.wait(5)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def server():
    made = _Server()
    yield made
    made.close()


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    return sock


def _read_answer(sock: socket.socket, buffer: bytearray, head_only: bool = False) -> tuple[int, dict, bytes]:
    """One answer from `sock` (what is left over stays in `buffer`)."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before an answer: {bytes(buffer)[:80]!r}")
        buffer += chunk
    end = buffer.index(b"\r\n\r\n")
    lines = bytes(buffer[:end]).decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = 0 if head_only else int(headers.get("content-length", 0))
    while len(buffer) < end + 4 + length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed inside an answer")
        buffer += chunk
    body = bytes(buffer[end + 4 : end + 4 + length])
    del buffer[: end + 4 + length]
    return int(lines[0].split()[1]), headers, body


def _closed(sock: socket.socket, within: float = 3.0) -> bool:
    sock.settimeout(within)
    try:
        while True:
            if sock.recv(65536) == b"":
                return True
    except (socket.timeout, TimeoutError):
        return False
    except OSError:
        return True


def _post(path: str, body: bytes, *headers: str, version: str = "1.1") -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    return f"POST {path} HTTP/{version}\r\nHost: x\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def test_pipelined_requests_are_answered_in_order_on_one_connection(server):
    sock = _connect(server.port)
    sock.sendall(b"".join(_post(f"/v2/{i}", b"a" * i) for i in range(1, 6)))
    buffer = bytearray()
    answers = [_read_answer(sock, buffer) for _ in range(5)]
    assert [json.loads(body)["path"] for _, _, body in answers] == [f"/v2/{i}" for i in range(1, 6)]
    assert [json.loads(body)["body"] for _, _, body in answers] == [1, 2, 3, 4, 5]
    assert all(status == 200 and "connection" not in headers for status, headers, _ in answers)


def test_http_10_closes_unless_it_asks_to_keep_alive(server):
    sock = _connect(server.port)
    sock.sendall(b"GET /a HTTP/1.0\r\n\r\n")
    status, headers, _ = _read_answer(sock, bytearray())
    assert status == 200 and headers["connection"] == "close" and _closed(sock)
    sock = _connect(server.port)
    buffer = bytearray()
    for _ in range(2):
        sock.sendall(b"GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        status, headers, _ = _read_answer(sock, buffer)
        assert status == 200 and headers["connection"] == "keep-alive"
    sock.sendall(b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    status, headers, _ = _read_answer(sock, buffer)
    assert headers["connection"] == "close" and _closed(sock)


def test_chunked_and_compressed_bodies_reach_the_handler_whole_and_inflated(server):
    text = json.dumps({"inputs": [{"data": ["a text " * 300]}]}).encode()
    raw_deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    bodies = {
        "gzip": gzip.compress(text),
        "deflate": zlib.compress(text),
        "raw deflate": raw_deflate.compress(text) + raw_deflate.flush(),
    }
    try:
        import brotli

        bodies["br"] = brotli.compress(text)
    except ImportError:
        pass
    sock = _connect(server.port)
    buffer = bytearray()
    for name, body in bodies.items():
        sock.sendall(_post("/b", body, f"Content-Encoding: {name.split()[-1]}"))
        status, _, answer = _read_answer(sock, buffer)
        assert status == 200 and json.loads(answer)["body"] == len(text), name
    chunks = [text[i : i + 1000] for i in range(0, len(text), 1000)]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"
    sock.sendall(b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    for i in range(0, len(chunked), 700):  # in pieces, as a slow client sends them
        sock.sendall(chunked[i : i + 700])
        time.sleep(0.002)
    status, _, answer = _read_answer(sock, buffer)
    assert status == 200 and json.loads(answer)["body"] == len(text)
    assert server.seen[-1].body == text


@pytest.mark.parametrize(
    "request_bytes, status, says",
    [
        (b"GARBAGE\r\n\r\n", 400, "not valid HTTP"),
        (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "request target is over"),
        (b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(200)) + b"\r\n", 431, "headers"),
        (b"GET / HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n", 431, "head is over"),
        (_post("/z", b"xx", "Content-Encoding: zstd-from-the-future"), 415, "send gzip, deflate"),
        (_post("/z", b"not gzip at all", "Content-Encoding: gzip"), 400, "does not inflate"),
        (_post("/z", gzip.compress(b"a" * 1000)[:-12], "Content-Encoding: gzip"), 400, "incomplete"),
        (_post("/z", b"{}", "Expect: something-else"), 417, "Expect header"),
        (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505, "HTTP/1.1 and 1.0 only"),
        (
            [b"POST /z HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-T: "]
            + [b"a" * 10000] * 30,
            413,
            "over the limit",
        ),
        (
            b"POST /z HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-T: "
            + b"a" * 70000
            + b"\r\n\r\n",
            431,
            "trailers are over",
        ),
        (
            b"POST /z HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n{}\n",
            400,
            "Upgrade request with a body",
        ),
        (_post("/z", b"x" * (LIMIT + 1)), 413, f"over the limit of {LIMIT} bytes"),
        (_post("/z", gzip.compress(bytes(1 << 24)), "Content-Encoding: gzip"), 413, "over the limit"),
    ],
    ids=[
        "garbage",
        "long target",
        "many headers",
        "long head",
        "unknown encoding",
        "not gzip",
        "cut gzip",
        "expect",
        "http2",
        "endless trailer",
        "long trailer",
        "upgrade with a body",
        "too large",
        "bomb",
    ],
)
def test_refused_framing_is_answered_then_the_connection_ends(server, request_bytes, status, says):
    sock = _connect(server.port)
    try:
        for piece in request_bytes if isinstance(request_bytes, list) else [request_bytes]:
            sock.sendall(piece)
            time.sleep(0.001)
    except OSError:
        pass  # refused before it was all sent
    got, headers, body = _read_answer(sock, bytearray())
    assert got == status and says in json.loads(body)["error"], body
    assert headers["connection"] == "close" and _closed(sock)  # half-closed: the answer is read
    assert not server.seen  # no handler saw it
    time.sleep(0.8)  # the linger (0.5 s) ends with the connection's close, though the client stays
    assert all(connection.transport is None for connection in server.connections)


def test_a_declared_oversized_body_is_refused_before_a_100_continue_and_a_good_one_gets_it(server):
    sock = _connect(server.port)
    sock.sendall(f"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: {LIMIT * 4}\r\nExpect: 100-continue\r\n\r\n".encode())
    status, _, _ = _read_answer(sock, bytearray())
    assert status == 413
    sock = _connect(server.port)
    sock.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
    sock.settimeout(0.5)
    assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
    sock.settimeout(5)
    sock.sendall(b"{}")
    status, _, body = _read_answer(sock, bytearray())
    assert status == 200 and json.loads(body)["body"] == 2


def test_a_pipelined_request_waits_its_turn_for_its_100_and_its_bodys_deadline():
    """Behind a request answered after 1.5 s, a request that expects 100-continue is told to
    send its body only once its turn comes, and its body's deadline (1 s) runs from then."""
    made = _Server(delay=1.5)
    try:
        sock = _connect(made.port)
        sock.sendall(
            b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST /next HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
        )
        buffer = bytearray()
        assert _read_answer(sock, buffer)[0] == 200  # the slow one, after 1.5 s
        while b"\r\n\r\n" not in buffer:
            buffer += sock.recv(100)
        assert bytes(buffer) == b"HTTP/1.1 100 Continue\r\n\r\n"
        buffer.clear()
        sock.sendall(b"{}")
        status, _, body = _read_answer(sock, buffer)
        assert status == 200 and json.loads(body)["body"] == 2
    finally:
        made.close()


def test_an_empty_body_with_a_content_encoding_is_served(server):
    sock = _connect(server.port)
    buffer = bytearray()
    sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\n\r\n")
    assert _read_answer(sock, buffer)[0] == 200
    sock.sendall(_post("/e", b"", "Content-Encoding: br"))
    status, _, body = _read_answer(sock, buffer)
    assert status == 200 and json.loads(body)["body"] == 0


def test_a_deflate_body_whose_first_piece_is_one_byte_and_an_empty_expect(server):
    body = zlib.compress(b'{"a": 1}')
    sock = _connect(server.port)
    sock.sendall(
        _post("/d", b"", "Content-Encoding: deflate", "Expect:").replace(b"Length: 0", b"Length: %d" % len(body))
    )
    time.sleep(0.05)
    sock.sendall(body[:1])
    time.sleep(0.05)
    sock.sendall(body[1:])
    status, _, answer = _read_answer(sock, bytearray())
    assert status == 200 and json.loads(answer)["body"] == 8


def test_a_client_that_takes_no_answer_is_closed_after_the_bodys_deadline():
    made = _Server(answer_bytes=32 << 20, body_timeout=1.0)
    try:
        sock = _connect(made.port)
        sock.sendall(b"GET /0 HTTP/1.1\r\nHost: x\r\n\r\nGET /1 HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(2.0)  # reads nothing
        assert len(made.seen) == 1
        received = 0
        sock.settimeout(5)
        try:
            while chunk := sock.recv(1 << 20):
                received += len(chunk)
        except ConnectionResetError:
            pass
        assert received < 32 << 20  # cut off: the first answer never came whole
    finally:
        made.close()


def test_a_body_that_does_not_come_is_answered_408(server):
    sock = _connect(server.port)
    sock.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
    started = time.monotonic()
    status, headers, body = _read_answer(sock, bytearray())
    assert status == 408 and 0.9 <= time.monotonic() - started <= 2.0
    assert _closed(sock)


def test_head_targets_and_a_failing_handler(server):
    sock = _connect(server.port)
    buffer = bytearray()
    sock.sendall(b"HEAD /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
    status, headers, body = _read_answer(sock, buffer, head_only=True)
    assert status == 200 and int(headers["content-length"]) > 0 and body == b""
    sock.sendall(b"GET http://example.test:8000/v2/m%2Fx/ready?a=%2F&b=c%20d HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _, body = _read_answer(sock, buffer)
    seen = json.loads(body)
    assert seen["path"] == "/v2/m/x/ready" and seen["target"] == "/v2/m%2Fx/ready?a=%2F&b=c%20d"
    sock.sendall(b"GET /fail HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _, body = _read_answer(sock, buffer)
    assert status == 500 and "failed" in json.loads(body)["error"]
    sock.sendall(b"GET /after HTTP/1.1\r\nHost: x\r\n\r\n")  # the connection goes on
    assert _read_answer(sock, buffer)[0] == 200


def test_a_client_that_leaves_cancels_its_handler_and_waiting_is_what_the_guard_reads():
    made = _Server(delay=0.5)
    try:
        sock = _connect(made.port)
        time.sleep(0.1)
        (connection,) = made.connections
        assert connection.waiting()  # new: waits for a head
        sock.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.1)
        assert connection.waiting()  # part of a head
        sock.sendall(b"\r\n")
        time.sleep(0.1)
        assert not connection.waiting()  # its handler runs
        _read_answer(sock, bytearray())
        assert connection.waiting()  # between requests
        sock.sendall(b"GET /y HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.1)
        sock.shutdown(socket.SHUT_WR)  # it leaves while its handler runs
        time.sleep(0.2)
        assert made.cancelled == 1
        assert _closed(sock)
    finally:
        made.close()


def test_a_client_that_reads_slowly_gets_every_answer_whole_and_in_order():
    made = _Server(answer_bytes=32 << 20)  # 32 MiB answers: far over what the sockets hold
    try:
        sock = _connect(made.port)
        sock.sendall(b"".join(b"GET /%d HTTP/1.1\r\nHost: x\r\n\r\n" % i for i in range(3)))
        time.sleep(0.5)
        assert len(made.seen) == 1  # the next request waits until its answer is taken
        buffer = bytearray()
        for _ in range(3):
            status, _, body = _read_answer(sock, buffer)
            assert status == 200 and len(body) == 32 << 20
        assert [r.path for r in made.seen] == ["/0", "/1", "/2"]
    finally:
        made.close()


def test_error_answers_are_kserve_error_objects():
    status, headers, body = error(503, "busy", {"Retry-After": "2"})
    assert status == 503 and ("Retry-After", "2") in headers and json.loads(body) == {"error": "busy"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the TCP state is read on Linux only (TCP_INFO)")
def test_a_request_whose_client_sent_it_and_closed_at_once_is_gone_before_the_loop_reads_the_close(server):
    """The handler's first step (before any turn of the loop that would read the close) sees
    a client that sent its request and closed in one burst as gone: the kernel's state of
    the connection (`http_messages.peer_closed`); a client that stays is not gone."""
    request = b"POST /gone HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    for _ in range(5):
        sock = _connect(server.port)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        sock.sendall(request)
        sock.close()
    kept = _connect(server.port)
    deadline = time.monotonic() + 5
    while len(server.gone) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    kept.sendall(request)
    assert b"200 OK" in kept.recv(65536)
    kept.close()
    assert server.gone == [True] * 5 + [False]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the TCP state is read on Linux only (TCP_INFO)")
def test_peer_closed_reads_the_kernels_state_of_the_connection():
    from readability_triton.frontdoor.http_messages import peer_closed

    class Transport:
        def __init__(self, sock):
            self.sock = sock

        def get_extra_info(self, name):
            return self.sock if name == "socket" else None

    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    try:
        assert not peer_closed(Transport(accepted))
        client.close()
        deadline = time.monotonic() + 5
        while not peer_closed(Transport(accepted)) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert peer_closed(Transport(accepted))
        assert not peer_closed(Transport(None))  # no socket: nothing known, not gone
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        assert not peer_closed(Transport(udp))  # not TCP: nothing known
        udp.close()
    finally:
        accepted.close()
        listener.close()
