"""The HTTP door's connections to tritonserver: HTTP/1.1 keep-alive over asyncio streams, a
request written as one buffer, the answer read by its length. aiohttp's client did the same
at about a quarter of the door's loop under load (its request and response objects, header
multidicts, payload registry, timers); this passes bytes.

- `Upstream.send(method, target, headers, body)` -> `Reply(status, headers, body)`; a
  connection that could not be made raises `Refused` (the request never reached
  tritonserver: the door may send it again), any other failure `OSError`.
- An idle connection is reused for at most `IDLE` s (tritonserver may close one it has kept
  longer); one that tritonserver answered with `Connection: close`, or whose answer had no
  length, is closed. A request is never sent twice: a connection that closes without an
  answer is an error, since tritonserver may have read the request.
- Interim answers (`100 Continue`) are read past; the client's `Expect` is not passed on.
- `keep_alive=False`: a connection per request (serve's stop, once drained: tritonserver
  waits for open HTTP connections before it exits); `close()` closes the idle ones, and
  those in use close once their answer is read.
"""

from __future__ import annotations

import asyncio
import time
from typing import NamedTuple

#: Seconds an idle connection is kept for reuse.
IDLE = 15.0
#: Seconds a connection has to be made.
CONNECT_TIMEOUT = 10.0
#: The longest head (status line and headers) read from tritonserver.
HEAD_LIMIT = 1 << 16


class Refused(OSError):
    """No connection to tritonserver could be made: the request never reached it."""


class Reply(NamedTuple):
    status: int
    headers: list[tuple[str, str]]
    body: bytes


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.idle_since = 0.0

    def close(self) -> None:
        self.writer.close()


def _head(method: str, target: str, host: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers if "\r" not in value and "\n" not in value]
    if body or method not in ("GET", "HEAD", "DELETE", "OPTIONS"):
        lines.append(f"Content-Length: {len(body)}")
    # the bytes the client sent (`http_messages` decodes them as UTF-8, surrogates for the rest)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")


def _parse_head(head: bytes) -> tuple[int, list[tuple[str, str]]]:
    lines = head.decode("latin-1").split("\r\n")
    status_line = lines[0].split(" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith("HTTP/1.") or not status_line[1].isdigit():
        raise OSError(f"tritonserver answered something other than HTTP/1.1: {lines[0][:80]!r}")
    headers = []
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
    return int(status_line[1]), headers


async def _chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers, then the end
                pass
            return bytes(body)
        body += await reader.readexactly(size)
        await reader.readexactly(2)


class Upstream:
    """Connections to tritonserver's HTTP endpoint at `address` (host:port): see the module doc."""

    def __init__(self, address: str, keep_alive: bool = True):
        self.address = address
        self.host, _, port = address.rpartition(":")
        self.port = int(port)
        self.keep_alive = keep_alive
        self.closed = False
        self._idle: list[_Connection] = []

    async def _connect(self) -> _Connection:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, limit=HEAD_LIMIT), CONNECT_TIMEOUT
            )
        except (OSError, asyncio.TimeoutError) as err:
            raise Refused(f"cannot connect to tritonserver at {self.address}: {err}") from None
        return _Connection(reader, writer)

    def _reusable(self) -> _Connection | None:
        """An idle connection still open (tritonserver has not closed it, as far as the loop
        has seen), or None."""
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            fresh = now - connection.idle_since < IDLE
            if fresh and not connection.reader.at_eof() and not connection.writer.transport.is_closing():
                return connection
            connection.close()
        return None

    async def send(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> Reply:
        """The answer to one request. Never sent twice: a connection that closes without an
        answer is an error (OSError), as tritonserver may have read the request."""
        request = _head(method, target, self.address, headers, body) + body
        connection = self._reusable() or await self._connect()
        kept = False
        try:
            connection.writer.write(request)
            try:
                head = await connection.reader.readuntil(b"\r\n\r\n")
                status, reply_headers = _parse_head(head[:-4])
                while 100 <= status < 200 and status != 101:  # interim answers (100 Continue): the final one follows
                    head = await connection.reader.readuntil(b"\r\n\r\n")
                    status, reply_headers = _parse_head(head[:-4])
            except asyncio.IncompleteReadError as err:
                if not err.partial:
                    raise OSError("tritonserver closed the connection without an answer") from None
                raise
            fields = {name.lower(): value.lower() for name, value in reply_headers}
            if status == 101:
                raise OSError("tritonserver switched protocols: the door passes HTTP/1.1 only")
            if method == "HEAD" or status in (204, 304):
                data, delimited = b"", True
            elif "chunked" in fields.get("transfer-encoding", ""):
                data, delimited = await _chunked(connection.reader), True
            elif "content-length" in fields:
                data, delimited = await connection.reader.readexactly(int(fields["content-length"])), True
            else:  # its end is the connection's
                data, delimited = await connection.reader.read(), False
            # nothing may be left unread on a connection kept: the next answer would be off by one
            clean = not getattr(connection.reader, "_buffer", b"")
            kept = delimited and clean and self.keep_alive and not self.closed and fields.get("connection") != "close"
            return Reply(status, reply_headers, data)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as err:
            raise OSError(f"tritonserver's answer broke off or is malformed ({type(err).__name__})") from None
        finally:
            if kept:
                connection.idle_since = time.monotonic()
                self._idle.append(connection)
            else:
                connection.close()

    async def close(self) -> None:
        """Close the idle connections; those in use close once their answer is read."""
        self.closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
            try:
                await connection.writer.wait_closed()
            except OSError:
                pass
