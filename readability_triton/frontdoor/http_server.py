"""The HTTP port's own HTTP/1.1 server: an asyncio protocol on `httptools` (llhttp, the parser
uvicorn uses) that frames requests and answers and leaves the rest to a handler
(`http_front`). It replaced aiohttp's low-level server, whose request and response objects,
payload streams, writer and handler task cost the door 0.07-0.30 ms of CPU per request
(`door_floor.py`).

What it does for every request, before its handler sees it:

- reads the head within HEAD_LIMIT bytes and MAX_HEADERS headers (else 431), a request
  target within LINE_LIMIT (else 414); HTTP/2.0 or 0.9 is answered 505, what is not HTTP
  400;
- refuses a body whose Content-Length is over `limit` at once (413, before a `100
  Continue`, so that a client that asked for one never sends it), and one that passes it as
  it arrives (chunked, or inflated: gzip, deflate and br are inflated piece by piece, never
  more than the limit at once, `inflate`; another Content-Encoding is answered 415), or
  whose bytes on the wire (chunk framing, trailers) pass the limit and twice HEAD_LIMIT;
- answers `Expect: 100-continue` when the request's turn comes, and any other Expect 417;
- gives the body `body_timeout` s from its turn (the end of its head, or of the answers
  pipelined before it), else 408;
- hands the whole request (`Request`: the body read, inflated and de-chunked) to
  `handle(request)`, one at a time per connection: pipelined requests are answered in order,
  and reading pauses while more than PIPELINE of them wait;
- writes each `Answer` with its Content-Length; a connection is closed after an answer when
  the client asked for it (`Connection: close`, HTTP/1.0 without keep-alive) or the door
  refused its framing (then after the answers before it). Refused, the connection is
  half-closed and read (discarding, uninflated) for `linger` s, so that its client reads the
  answer before the connection's end;
- cancels the handler when the client closes its connection (or half-closes it), as
  aiohttp's `handler_cancellation` did, until the handler holds its request (`hold()`);
- waits, before the next request's handler, until a client that does not read its answers
  has taken them (the transport's write buffer under its high-water mark), for at most
  `body_timeout` s: then the connection is cut off.

`waiting()` says whether the connection waits for a request's head (the guard's timeouts,
`connections`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from http import HTTPStatus
from typing import Awaitable, Callable

import httptools

from .http_messages import Answer, Request, error
from .inflate import ENCODINGS, INFLATE_ERRORS, Inflater

__all__ = ["Answer", "HTTPConnection", "Request", "error"]

log = logging.getLogger(__name__)

#: The longest head (request line and headers), as aiohttp's default of 8190 bytes a line
#: allowed with a few dozen headers.
HEAD_LIMIT = 1 << 16
#: The longest request target.
LINE_LIMIT = 8190
#: The most headers a request has (aiohttp's default).
MAX_HEADERS = 128
#: Whole requests read ahead of the one being answered before reading pauses.
PIPELINE = 8
_NO_BODY = frozenset({204, 304})
_REASONS = {status.value: status.phrase.encode("ascii") for status in HTTPStatus} | {499: b"Client Closed Request"}
#: An answer's body longer than this is written after its head, not copied into one buffer.
_JOIN_LIMIT = 1 << 16


class _Refusal(Exception):
    """The request's framing is refused: `answer`, then the connection closes."""

    def __init__(self, answer: Answer):
        self.answer = answer


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


class HTTPConnection(asyncio.Protocol):
    """One client connection: see the module doc."""

    def __init__(
        self,
        handle: Callable[[Request], Awaitable[Answer]],
        limit: int,
        body_timeout: float,
        linger: float,
    ):
        self.handle, self.limit, self.body_timeout, self.linger = handle, limit, body_timeout, linger
        self.transport: asyncio.Transport | None = None
        self.remote: str | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._loop = asyncio.get_event_loop()
        # the request being read
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = -1  # bytes fed since its message began, until its head is read (-1: none begun)
        self._wire = 0  # bytes fed while its body (chunk framing and trailers included) is read (-1: from this read)
        self._head_size = 0  # the bytes of its headers read whole
        self._request: Request | None = None
        self._body = bytearray()
        self._inflater: Inflater | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._continue = False  # its client waits for a 100 Continue
        # the requests read and not yet answered, and the one being answered
        self._ready: deque[Request] = deque()
        self._task: asyncio.Task | None = None
        self.held = False  # its handler is not cancelled when the client leaves (`Request.hold`)
        self._refused: Answer | None = None  # the framing refused: answered after those before it
        self._lingering = False
        self._closing = False  # its last answer is written: it closes once that is sent
        self._closed = False
        self._paused_reading = False
        self._writable: asyncio.Future | None = None  # set while the client does not read its answers

    # -- what the guard reads -------------------------------------------------------------
    def waiting(self) -> bool:
        """Whether it waits for a request's head: nothing is being answered or read."""
        return (
            self._task is None
            and not self._ready
            and self._request is None
            and self._refused is None
            and not self._closing
        )

    # -- the transport's events ------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.remote = peer[0] if isinstance(peer, tuple) and peer else None

    def data_received(self, data: bytes) -> None:
        if self._lingering or self._refused is not None or self._closed:
            return  # read and discarded until the connection ends
        if self._head_bytes >= 0:
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # the request before the upgrade is answered, then the connection closes (`keep_alive`)
        except httptools.HttpParserCallbackError as err:
            cause = err.__context__
            self._refuse(cause.answer if isinstance(cause, _Refusal) else error(400, "the request is malformed"))
        except httptools.HttpParserError as err:
            self._refuse(error(400, f"the request is not valid HTTP/1.1 ({str(err)[:80]}); send HTTP/1.1 or 1.0"))
        else:
            if self._head_bytes > HEAD_LIMIT:
                self._refuse(
                    error(431, f"the request's head is over {HEAD_LIMIT} bytes; send fewer or shorter headers")
                )
            elif self._request is not None:  # a body still to come: its bytes on the wire, framing
                # and trailers included (this read whole where its head ended in it)
                self._wire = len(data) if self._wire < 0 else self._wire + len(data)
                if self._wire > self.limit + 2 * HEAD_LIMIT:
                    self._refuse(self.too_large(None))
        if self._request is not None and self._timer is None and self._task is None and not self._ready:
            self._body_turn()  # a body still to come, and its turn: its deadline
        self._next()

    def eof_received(self) -> None:
        """A half-closed connection is a client that left (its transport closes)."""
        return None

    def connection_lost(self, exc) -> None:
        self._closed = True
        self.transport = None
        self._ready.clear()
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None and not self.held:
            self._task.cancel()  # the client left: its handler is cancelled
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    # -- the parser's callbacks ------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._url, self._headers, self._head_bytes, self._head_size = b"", [], 0, 0

    def on_url(self, url: bytes) -> None:
        self._url += url
        if len(self._url) > LINE_LIMIT:
            raise _Refusal(error(414, f"the request target is over {LINE_LIMIT} bytes"))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value) + 4
        if self._request is not None:  # a trailer: counted, not kept
            if self._head_size > HEAD_LIMIT:
                raise _Refusal(error(431, f"the request's trailers are over {HEAD_LIMIT} bytes"))
            return
        self._headers.append((name, value))
        if self._head_size > HEAD_LIMIT:
            raise _Refusal(error(431, f"the request's head is over {HEAD_LIMIT} bytes; send fewer or shorter headers"))
        if len(self._headers) > MAX_HEADERS:
            raise _Refusal(error(431, f"the request has over {MAX_HEADERS} headers; send fewer"))

    def on_headers_complete(self) -> None:
        self._head_bytes, self._wire, self._head_size = -1, -1, 0
        parser = self._parser
        if parser.get_http_version() not in ("1.1", "1.0"):
            raise _Refusal(error(505, "this server speaks HTTP/1.1 and 1.0 only"))
        target = _decode(self._url)
        if not target.startswith("/"):  # absolute form (or `*`): its path and query
            try:
                url = httptools.parse_url(self._url)
            except httptools.HttpParserInvalidURLError:
                raise _Refusal(error(400, "the request target is not a URL")) from None
            target = _decode((url.path or b"/") + (b"?" + url.query if url.query else b""))
        headers = [(_decode(name), _decode(value)) for name, value in self._headers]
        request = Request(
            self,
            parser.get_method().decode("ascii"),
            target,
            parser.get_http_version(),
            headers,
            parser.should_keep_alive(),
        )
        length = request.header("Content-Length")
        if parser.should_upgrade():
            if (length and length.strip() != "0") or request.header("Transfer-Encoding"):
                raise _Refusal(error(400, "an Upgrade request with a body is not served; send it without Upgrade"))
            request.keep_alive = False  # what follows the head is another protocol's
        if length is not None and length.strip().isdigit() and int(length) > self.limit:
            raise _Refusal(self.too_large(int(length)))
        encoding = (request.header("Content-Encoding") or "identity").strip().lower()
        if encoding not in ("identity", "") and encoding not in ENCODINGS:
            raise _Refusal(
                error(
                    415,
                    f"the Content-Encoding {encoding[:40]!r} is not one this server reads; "
                    f"send {', '.join(e for e in ENCODINGS if e != 'x-gzip')} or none",
                )
            )
        self._inflater = Inflater(encoding) if encoding in ENCODINGS else None
        expect = request.header("Expect") if request.version == "1.1" else None  # HTTP/1.0: ignored
        expect = expect.strip() or None if expect is not None else None  # an empty one: none
        if expect is not None and expect.lower() != "100-continue":
            raise _Refusal(
                error(417, f"the Expect header {expect[:40]!r} is not one this server meets; send 100-continue")
            )
        self._continue = expect is not None
        self._request = request
        self._body = bytearray()
        if self._continue and self._task is None and not self._ready:  # its turn: the client may send
            self._body_turn(deadline=False)  # (the deadline starts if the body is not here by the read's end)

    def on_body(self, data: bytes) -> None:
        if self._inflater is None:
            self._take(data)
            return
        try:
            for piece in self._inflater.pieces(data):
                self._take(piece)
        except INFLATE_ERRORS as err:
            raise _Refusal(error(400, f"the request body does not inflate ({err})")) from None

    def _take(self, data: bytes) -> None:
        if len(self._body) + len(data) > self.limit:
            self._body = bytearray()
            raise _Refusal(self.too_large(None))
        self._body += data

    def on_message_complete(self) -> None:
        request, self._request = self._request, None
        assert request is not None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._inflater is not None and self._inflater.fed and not self._inflater.finished():
            raise _Refusal(error(400, "the request body's compressed stream is incomplete"))
        request.body = bytes(self._body)
        self._body = bytearray()
        self._ready.append(request)
        if len(self._ready) > PIPELINE and self.transport is not None and not self._paused_reading:
            self._paused_reading = True
            self.transport.pause_reading()

    # -- answering -------------------------------------------------------------------------
    def too_large(self, size: int | None) -> Answer:
        got = f"{size} bytes" if size is not None else f"more than {self.limit} bytes"
        return error(
            413,
            f"the request body has {got}, over the limit of {self.limit} bytes; "
            "send fewer or shorter texts per request",
        )

    def _late(self) -> None:
        self._timer = None
        self._refuse(error(408, f"the request body did not arrive within {self.body_timeout:g} s; send it at once"))
        self._next()

    def _refuse(self, answer: Answer) -> None:
        """Answer `answer` once the requests before are answered, then close."""
        if self._refused is None:
            self._refused = answer
        self._request, self._body, self._inflater = None, bytearray(), None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _body_turn(self, deadline: bool = True) -> None:
        """The request being read is next to be answered: its client is told to send its body
        (where it asked to be), and the body's deadline runs from now (not while requests
        before it are answered, or reading is paused behind them)."""
        if self._continue:
            self._continue = False
            if self.transport is not None:
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if deadline and self._timer is None:
            self._timer = self._loop.call_later(self.body_timeout, self._late)

    def _next(self) -> None:
        """Start answering the next request read, if none is being answered."""
        if self._task is not None or self._closed:
            return
        if self._ready:
            request = self._ready.popleft()
            self._task = self._loop.create_task(self._answer(request))
        elif self._refused is not None:
            self._write(self._refused, None, close=True)
        elif self._request is not None:
            self._body_turn()

    async def _answer(self, request: Request) -> None:
        """Answer `request`, then start on the next one (the connection is busy until its
        client has taken the answer)."""
        try:
            if not await self._respond(request):
                return
        finally:
            self._task, self.held = None, False
        if self._paused_reading and len(self._ready) <= PIPELINE // 2 and self.transport is not None:
            self._paused_reading = False
            self.transport.resume_reading()
        self._next()

    async def _respond(self, request: Request) -> bool:
        """Whether the connection goes on to its next request."""
        try:
            answer = await self.handle(request)
        except asyncio.CancelledError:
            return False  # the client left
        except Exception:  # a handler's bug is a 500, not a dead connection
            log.exception("front door: the HTTP handler failed")
            answer = error(500, "the front door failed to handle the request")
        close = not request.keep_alive
        self._write(answer, request, close)
        if close or self._closed:
            return False
        if self._writable is not None:  # the client is not reading its answers: wait until it does
            try:
                taken, _ = await asyncio.wait({self._writable}, timeout=self.body_timeout)
            except asyncio.CancelledError:
                return False
            if not taken and self.transport is not None:  # as long as a body may take to come
                log.info("front door: closed a connection whose client took no answer in %g s", self.body_timeout)
                self.transport.abort()
                return False
        return not self._closed

    def _write(self, answer: Answer, request: Request | None, close: bool) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        status, headers, body = answer
        lines = [b"HTTP/1.1 %d %s" % (status, _REASONS.get(status, b"Unknown"))]
        lines += [f"{name}: {value}".encode("utf-8", "surrogateescape") for name, value in headers]
        if status not in _NO_BODY and not 100 <= status < 200:
            lines.append(b"Content-Length: %d" % len(body))
        if close:
            lines.append(b"Connection: close")
        elif request is not None and request.version == "1.0":
            lines.append(b"Connection: keep-alive")
        if (request is not None and request.method == "HEAD") or status in _NO_BODY:
            body = b""
        head = b"\r\n".join(lines) + b"\r\n\r\n"
        if len(body) > _JOIN_LIMIT:
            transport.write(head)
            transport.write(body)
        else:
            transport.write(head + body)
        if close:
            self._close(lingering=request is None)

    def _close(self, lingering: bool) -> None:
        """Close after the answer. `lingering`: the request was refused, perhaps with its body
        still coming: half-close, and read (discarding) for `linger` s, so that the client is
        not reset before it reads the answer."""
        transport = self.transport
        if transport is None:
            return
        self._closing = True
        if not lingering or not transport.can_write_eof():
            transport.close()
            return
        self._lingering = True
        transport.write_eof()
        self._loop.call_later(self.linger, transport.close)
