"""The front door's HTTP port (aiohttp): KServe v2 over HTTP/1.1, passed on to tritonserver's
HTTP endpoint. Only tritonserver 2.51's own routes (`ROUTES`, as its binary spells them) are
known here: every request that creates an inference (`POST /v2/models/<model>[/versions/<v>]/`
`infer`, `generate` and `generate_stream`) passes the gate, for a model this repository
serves; the other routes are passed on at once, but for `/v2/health/ready`, which answers
400 (not ready) once serve is stopping (`Door.leave`); any other path is answered 404 here,
so that a route a later Triton adds is not an inference that skips the gate.
`generate_stream` is answered whole (the models are not decoupled: one event). A body over
the limit is answered 413 from its Content-Length (before a `100 Continue`, so that a client
that asked for one never sends it), or as soon as the bytes read (inflated, for a compressed
body) pass it. A client that closes its connection cancels its handler: while it waits in the gate, or
when its close was already read as its request is sent on (a client that sends and closes at
once), its request leaves uncomputed; once sent on, it still runs to its end in
tritonserver.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Awaitable, Callable

from aiohttp import HttpVersion11, web

from .. import triton_messages as M
from .door import ClientLeft, Door
from .gate import Refusal
from .steering import attach
from .uploads import REFUSAL as UPLOAD_REFUSAL
from .uploads import http_uploads
from .upstream import Refused, Upstream
from .wire import BadRequest

#: tritonserver 2.51's HTTP routes (src/http_server.cc, RE2::FullMatch on the path), as its
#: binary holds them (tests/test_front_door.py reads them from it).
MODEL_ROUTE = (
    r"/v2/models/([^/]+)(?:/versions/([0-9]+))?(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?"
)
ROUTES = (
    MODEL_ROUTE,
    r"/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))",
    r"/v2/systemsharedmemory(?:/region/([^/]+))?/(status|register|unregister)",
    r"/v2/cudasharedmemory(?:/region/([^/]+))?/(status|register|unregister)",
    r"/v2(?:/health/(live|ready))?",
    r"/v2/trace/setting",
    r"/v2/models/stats",
    r"/v2/logging",
)
_MODEL = re.compile(MODEL_ROUTE)
_OTHERS = tuple(re.compile(route) for route in ROUTES[1:])
_LOAD = re.compile(r"/v2/repository(?:/[^/]+)?/models/[^/]+/load")
#: The actions of MODEL_ROUTE that create an inference request (POST).
INFERENCE_ACTIONS = ("infer", "generate", "generate_stream")
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
#: A request's body is passed on inflated (aiohttp inflates it while it counts its size), and
#: whole (the door has read it: tritonserver's `100 Continue` would only come in between).
_REQUEST_HOP = _HOP | {"content-encoding", "expect"}
#: Seconds a refused upload may go on being read (and discarded) so that its client sees
#: the answer before the connection closes.
LINGER = 2.0
#: Seconds a request's body has to arrive once its headers have (a slow upload holds a
#: connection and a handler: `connections` bounds the rest of a connection's life).
BODY_TIMEOUT = 30.0
#: A body longer than this is weighed (its JSON parsed) in a thread, not in the loop's turn.
OFFLOAD_BYTES = 1 << 20


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


async def read_body(request: web.BaseRequest, limit: int) -> bytes:
    """The request's body (inflated), refused (HTTPRequestEntityTooLarge) as soon as it
    passes `limit` bytes. Read in aiohttp's own 64 KiB pieces: its `request.read()` asks for
    pieces of the whole limit, and a compression bomb then held 80-130 MB of 16-32 MiB
    buffers at once, which glibc kept in the front door's thread arena after they were freed
    (3 bombs of 1 GiB left serve up to 224 MB larger)."""
    body = bytearray()
    while True:
        chunk = await request.content.readany()
        if not chunk:
            return bytes(body)
        if len(body) + len(chunk) > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=len(body) + len(chunk))
        body += chunk


async def continue_(request: web.BaseRequest) -> None:
    """Tell a client that sent `Expect: 100-continue` to send its body: aiohttp's low-level
    server leaves it to the handler, and without it such a client (curl past its threshold,
    .NET and Java clients) waits its own timeout (curl: 1 s) before sending. Called once the
    body's declared length is within the limit: a body over it is refused at once and never
    sent."""
    await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    request.writer.output_size = 0  # the answer's own bytes are counted from here
    await request.writer.drain()


def _not_json(body: bytes) -> str | None:
    """Why a non-empty body of an API that takes JSON (the repository, logging, trace and
    shared-memory APIs) is not JSON, or None."""
    if not body.strip():
        return None
    try:
        json.loads(bytes(body).decode("utf-8", "surrogateescape"))
    except (ValueError, RecursionError) as err:
        return f"the request body is not valid JSON ({str(err)[:80]})"
    return None


def _passed_on(headers, hop=_HOP) -> list[tuple[str, str]]:
    """The headers of a request or an answer that go on to the next hop."""
    return [(k, v) for k, v in headers if k.lower() not in hop]


#: How long `release` lets a call still on the old connections finish before it closes them.
RELEASE_GRACE = 5.0


async def open_http(
    door: Door, releasers: list[Callable[[], Awaitable[None]]] | None = None
) -> Callable[[], Awaitable[None]]:
    """Listen on the door's HTTP port; returns the coroutine function that closes it.
    Appends to `releasers` the one that closes the keep-alive connections to tritonserver
    and sends what is still forwarded on a connection each (serve's stop, after the
    drain: tritonserver 2.51 waits up to its exit timeout for open HTTP connections, the
    door's idle ones too, before it exits)."""
    limit = door.max_request_bytes
    upstreams = [Upstream(door.upstream_http)]
    using: dict[int, int] = {}  # id(upstream): calls it carries now

    async def release() -> None:
        old, upstreams[0] = upstreams[0], Upstream(door.upstream_http, keep_alive=False)
        deadline = asyncio.get_running_loop().time() + RELEASE_GRACE
        while using.get(id(old)) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)  # a call still on it (a load, statistics) finishes first
        await old.close()

    if releasers is not None:
        releasers.append(release)

    def too_large(size: int | None) -> web.Response:
        got = f"{size} bytes" if size is not None else f"more than {limit} bytes"
        return _error(
            413,
            f"the request body has {got}, over the limit of {limit} bytes; send fewer or shorter texts per request",
            {"Connection": "close"},
        )

    async def forward(request: web.BaseRequest, body: bytes) -> web.Response:
        upstream = upstreams[0]
        using[id(upstream)] = using.get(id(upstream), 0) + 1
        try:
            reply = await upstream.send(
                request.method, str(request.rel_url), _passed_on(request.headers.items(), _REQUEST_HOP), body
            )
            return web.Response(status=reply.status, body=reply.body, headers=_passed_on(reply.headers))
        finally:
            using[id(upstream)] -= 1

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        if request.content_length is not None and request.content_length > limit:
            return too_large(request.content_length)
        # the body's deadline cancels this handler (no task of its own, as asyncio.wait_for
        # would make: a body already here is read in this turn, before a close that came
        # with it is seen)
        late: list[bool] = []
        this = asyncio.current_task()
        assert this is not None

        def expire() -> None:
            late.append(True)
            this.cancel()

        expect = request.headers.get("Expect") if request.version == HttpVersion11 else None  # HTTP/1.0: ignored
        if expect and expect.lower() != "100-continue":
            return _error(417, f"the Expect header {expect[:40]!r} is not one this server meets; send 100-continue")
        timer = asyncio.get_running_loop().call_later(BODY_TIMEOUT, expire)
        try:
            if expect:
                await continue_(request)  # the client waits for it before it sends the body
            body = await read_body(request, limit)
        except web.HTTPRequestEntityTooLarge:
            return too_large(None)
        except asyncio.CancelledError:
            if not late:
                raise  # the client left
            message = f"the request body did not arrive within {BODY_TIMEOUT:g} s; send it at once"
            return _error(408, message, {"Connection": "close"})
        finally:
            timer.cancel()
        if door.leaving and request.path == READY_PATH:  # KServe v2: 4xx is "not ready"
            return _error(400, f"{door.leaving}: this server is not ready; use another replica")
        model = _MODEL.fullmatch(request.path)
        inference = model is not None and model.group(3) in INFERENCE_ACTIONS and request.method == "POST"
        if not inference:
            if model is None and not any(route.fullmatch(request.path) for route in _OTHERS):
                return _error(404, "Not Found")  # as tritonserver answers a path it does not serve
            problem = None
            if request.method == "POST":  # a large body is parsed in a thread, as an inference's is
                problem = await asyncio.to_thread(_not_json, body) if len(body) > OFFLOAD_BYTES else _not_json(body)
            if problem:  # tritonserver 2.51 answers 500 "failed to parse the request JSON buffer"
                return _error(400, problem)
            upload = _LOAD.fullmatch(request.path) is not None and http_uploads(body)
            if upload and not door.allow_model_uploads:
                return _error(403, UPLOAD_REFUSAL)
            try:
                if upload:
                    return await door.uploads.watch(lambda: forward(request, body))
                return await forward(request, body)
            except OSError as err:
                return _error(503, f"the server is not answering ({type(err).__name__}); retry in a moment")
        assert model is not None
        if door.served and model.group(1) not in door.served:
            return _error(404, M.not_served(model.group(1)))
        try:
            header_length = request.headers.get("Inference-Header-Content-Length")
            weigh = (
                (lambda: door.weigher.http(body, header_length))
                if model.group(3) == "infer"
                else (lambda: door.weigher.generate(body))
            )
            # a large body is read in a thread: its JSON would hold every client's turn
            weighed = await asyncio.to_thread(weigh) if len(body) > OFFLOAD_BYTES else weigh()
        except BadRequest as err:
            return _error(400, str(err))
        client = door.client_of(request.remote, request.headers.get(door.client_header) if door.client_header else None)
        outcome = await door.admit(client, weighed.work)
        if isinstance(outcome, Refusal):
            return _error(503, outcome.reason, {"Retry-After": str(max(1, round(outcome.retry_after)))})

        async def forward_infer() -> web.Response:
            try:
                return await forward(request, body)
            except Refused as err:  # never reached tritonserver: may be sent again
                return _error(503, f"{M.REFUSED_CONNECTION} ({type(err).__name__}); retry in a moment")

        def failed(reply: web.Response) -> M.Reading | None:
            """What a failed answer means (`triton_messages.classify`); None for an answer."""
            if reply.status == 200:
                return None
            body = reply.body  # the bytes `forward` read (never a streamed payload)
            return M.classify(reply.status, body if isinstance(body, (bytes, bytearray)) else None, door.served)

        try:
            return await door.run(
                outcome,
                forward_infer,
                ok=lambda reply: reply.status == 200,
                dead_stub=lambda reply: (f := failed(reply)) is not None and f.kind is M.Kind.DEAD_STUB,
                uncomputed=lambda reply: (f := failed(reply)) is not None and f.uncomputed,
                client_gone=lambda: request.transport is None or request.transport.is_closing(),
            )
        except ClientLeft:
            return _error(499, "the client closed its connection before its request was sent on")
        except OSError as err:
            return _error(503, f"the server is not answering ({type(err).__name__}); retry in a moment")

    # aiohttp's low-level server: `handle` takes every path, reads the body itself (to its
    # own limit) and answers `Expect` itself (`continue_`), so an Application's router,
    # middleware chain and request subclass would only add to each request's cost (about
    # 0.03-0.05 ms of the door's CPU at one client)
    runner = web.ServerRunner(
        web.Server(
            handle,
            handler_cancellation=True,
            access_log=None,
            lingering_time=LINGER,
            keepalive_timeout=door.guard.idle_timeout + 5,  # the guard's sweep closes them first
        )
    )
    await runner.setup()
    assert runner.server is not None
    try:
        listener = await asyncio.get_running_loop().create_server(
            door.guard.factory(runner.server),
            door.address,
            door.http_port,
            backlog=ACCEPT_BACKLOG,
            reuse_address=True,
            reuse_port=door.workers > 1,  # beside the other door workers
        )
        if door.steered:
            for sock in listener.sockets:
                attach(sock, door.workers, *door.network_prefix)
    except BaseException:
        await runner.cleanup()
        await upstreams[0].close()
        raise
    door.guard.start()

    async def close() -> None:
        door.guard.stop()
        listener.close()
        await runner.cleanup()
        await listener.wait_closed()
        await upstreams[0].close()

    return close
