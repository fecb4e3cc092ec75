"""The front door's HTTP port (aiohttp): KServe v2 over HTTP/1.1, passed on to tritonserver's
HTTP endpoint. Inference requests (`POST /v2/models/<model>[/versions/<v>]/infer`) pass the
gate; every other path is passed on at once, but for `/v2/health/ready`, which answers 400
(not ready) once serve is stopping (`Door.leave`). A body over the limit is answered 413 from
its Content-Length, or as soon as the bytes read (inflated, for a compressed body) pass it.
A client that closes its connection cancels its handler: while it waits in the gate, or
when its close was already read as its request is sent on (a client that sends and closes at
once), its request leaves uncomputed; once sent on, it still runs to its end in
tritonserver.
"""

from __future__ import annotations

import json
import re
from typing import Awaitable, Callable

from aiohttp import ClientConnectorError, ClientError, ClientSession, ClientTimeout, TCPConnector, web

from .door import ClientLeft, Door
from .gate import Refusal
from .wire import DEAD_STUB_SIGN, NO_CONNECTION_SIGNS, http_work, is_no_connection, is_shed

INFER_PATH = re.compile(r"^/v2/models/[^/]+(/versions/[^/]+)?/infer$")
READY_PATH = "/v2/health/ready"
#: Headers of one hop, never passed on (RFC 9110 7.6.1), plus what the hop recomputes.
_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
#: A request's body is passed on inflated (aiohttp inflates it while it counts its size).
_REQUEST_HOP = _HOP | {"content-encoding"}
#: Seconds a refused upload may go on being read (and discarded) so that its client sees
#: the answer before the connection closes.
LINGER = 2.0


#: The listen queue, which is also how many connections asyncio accepts each time the port
#: is ready (`BaseSelectorEventLoop._accept_connection`); the next turn of the loop sets
#: each one up (a transport, a request handler) beside every other socket's work. Under a
#: flood of send-and-close connections (4 loops from one address, the image limited to 0.4
#: CPUs, 60 s) a queue of 1,024 made the turns so long that 2 honest keep-alive clients got
#: 4 answers, p50 31.6 s; with 128, 2,551 answers, p99 296 ms (64: 3,130, p99 189 ms).
#: Connections beyond it wait in the kernel (a client's SYN is retried), where a flood
#: should wait.
ACCEPT_BACKLOG = 128


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status, text=json.dumps({"error": message}), content_type="application/json", headers=headers
    )


def _passed_on(headers, hop=_HOP) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in hop}


async def open_http(door: Door) -> Callable[[], Awaitable[None]]:
    """Listen on the door's HTTP port; returns the coroutine function that closes it."""
    limit = door.max_request_bytes
    session = ClientSession(
        f"http://{door.upstream_http}",
        auto_decompress=False,
        skip_auto_headers=("Accept-Encoding", "User-Agent"),
        connector=TCPConnector(limit=0, force_close=False),
        timeout=ClientTimeout(total=None, sock_connect=10),
    )

    def too_large(size: int | None) -> web.Response:
        got = f"{size} bytes" if size is not None else f"more than {limit} bytes"
        return _error(
            413,
            f"the request body has {got}, over the limit of {limit} bytes; send fewer or shorter texts per request",
            {"Connection": "close"},
        )

    async def forward(request: web.Request, body: bytes) -> web.Response:
        async with session.request(
            request.method,
            request.rel_url,
            headers=_passed_on(request.headers, _REQUEST_HOP),
            data=body if body else None,
            allow_redirects=False,
        ) as reply:
            data = await reply.read()
            return web.Response(status=reply.status, body=data, headers=_passed_on(reply.headers))

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.content_length is not None and request.content_length > limit:
            return too_large(request.content_length)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return too_large(None)
        if door.leaving and request.path == READY_PATH:  # KServe v2: 4xx is "not ready"
            return _error(400, f"{door.leaving}: this server is not ready; use another replica")
        if request.method != "POST" or not INFER_PATH.match(request.path):
            try:
                return await forward(request, body)
            except (OSError, ClientError) as err:
                return _error(503, f"the server is not answering ({type(err).__name__}); retry in a moment")
        header_length = request.headers.get("Inference-Header-Content-Length")
        _, work = http_work(body, int(header_length) if header_length and header_length.isdigit() else None)
        client = door.client_of(request.remote, request.headers.get(door.client_header) if door.client_header else None)
        outcome = await door.admit(client, work)
        if isinstance(outcome, Refusal):
            return _error(503, outcome.reason, {"Retry-After": str(max(1, round(outcome.retry_after)))})

        async def forward_infer() -> web.Response:
            try:
                return await forward(request, body)
            except ClientConnectorError as err:  # never reached tritonserver: may be sent again
                return _error(503, f"{NO_CONNECTION_SIGNS[1]} ({type(err).__name__}); retry in a moment")

        try:
            return await door.run(
                outcome,
                forward_infer,
                ok=lambda reply: reply.status == 200,
                dead_stub=lambda reply: reply.status >= 500 and DEAD_STUB_SIGN.encode() in reply.body,
                uncomputed=lambda reply: reply.status >= 400 and (is_shed(reply.body) or is_no_connection(reply.body)),
                client_gone=lambda: request.transport is None or request.transport.is_closing(),
            )
        except ClientLeft:
            return _error(499, "the client closed its connection before its request was sent on")
        except (OSError, ClientError) as err:
            return _error(503, f"the server is not answering ({type(err).__name__}); retry in a moment")

    app = web.Application(client_max_size=limit)
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, lingering_time=LINGER)
    await runner.setup()
    site = web.TCPSite(runner, door.address, door.http_port, backlog=ACCEPT_BACKLOG, reuse_address=True)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        await session.close()
        raise

    async def close() -> None:
        await runner.cleanup()
        await session.close()

    return close
