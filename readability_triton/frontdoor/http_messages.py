"""What the HTTP port's server (`http_server`) hands its handler and takes back: a request
read whole (`Request`) and an answer (`Answer`, `error` for KServe v2's error object)."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from typing import NamedTuple, Protocol
from urllib.parse import unquote


class Connection(Protocol):
    """What a request reads of its connection (`http_server.HTTPConnection`)."""

    remote: str | None
    transport: asyncio.Transport | None
    held: bool


class Request:
    """One request, its body whole. `headers`: (name, value) pairs as sent (UTF-8, with
    surrogates for other bytes); `path`: the target's path, percent-decoded; `target`: the
    target as sent (origin form)."""

    __slots__ = (
        "method",
        "target",
        "path",
        "version",
        "headers",
        "remote",
        "body",
        "keep_alive",
        "_fields",
        "_connection",
    )

    def __init__(self, connection: Connection, method: str, target: str, version: str, headers, keep_alive: bool):
        self._connection = connection
        self.method, self.target, self.version, self.headers = method, target, version, headers
        self.path = unquote(target.split("?", 1)[0], errors="surrogateescape")
        self.remote = connection.remote
        self.keep_alive = keep_alive
        self.body = b""
        self._fields: dict[str, str] = {}
        for name, value in reversed(headers):  # the first of a name's values
            self._fields[name.lower()] = value

    def header(self, name: str) -> str | None:
        """The first value of header `name` (any case), or None."""
        return self._fields.get(name.lower())

    def gone(self) -> bool:
        """Whether the client has closed its connection: as the loop has seen, or as the
        kernel has (`peer_closed`: a close that came with the request is known before the
        loop reads it)."""
        transport = self._connection.transport
        return transport is None or transport.is_closing() or peer_closed(transport)

    def hold(self) -> None:
        """From now on the client's leaving does not cancel the handler (which asks `gone()`
        where it matters): what it does next must run to its end."""
        self._connection.held = True


#: Linux's TCP states (include/net/tcp_states.h): the connection is open both ways. An
#: accepted connection whose request is being handled is ESTABLISHED, CLOSE_WAIT once its
#: client has sent FIN, or CLOSE once it was reset. (Other systems number the states their
#: own way: there the check is not made.)
_ESTABLISHED = 1
_TCP_INFO = getattr(socket, "TCP_INFO", None) if sys.platform.startswith("linux") else None


def peer_closed(transport: asyncio.BaseTransport) -> bool:
    """Whether the kernel has seen the peer of a TCP connection close or reset it (its state,
    the first byte of TCP_INFO, is no longer ESTABLISHED): one getsockopt, no turn of the
    loop. False where that cannot be read (not Linux, not TCP, no socket)."""
    sock = transport.get_extra_info("socket")
    if sock is None or _TCP_INFO is None:
        return False
    try:
        return sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, 1)[0] != _ESTABLISHED
    except OSError:  # not TCP
        return False


class Answer(NamedTuple):
    status: int
    headers: list[tuple[str, str]]
    body: bytes


def error(status: int, message: str, headers: dict[str, str] | None = None) -> Answer:
    """An answer whose body is the KServe v2 error object."""
    pairs = [("Content-Type", "application/json"), *(headers or {}).items()]
    return Answer(status, pairs, json.dumps({"error": message}).encode())
