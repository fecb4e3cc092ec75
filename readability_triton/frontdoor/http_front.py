"""The front door's HTTP port: KServe v2 over HTTP/1.1 (`http_server`, the door's own
protocol), passed on to tritonserver's HTTP endpoint. Only tritonserver 2.51's own routes
(`ROUTES`, as its binary spells them) are known here: every request that creates an inference
(`POST /v2/models/<model>[/versions/<v>]/` `infer`, `generate` and `generate_stream`) passes
the gate, for a model this repository serves; the other routes are passed on at once, but for
`/v2/health/ready`, which answers 400 (not ready) once serve is stopping (`Door.leave`); any
other path is answered 404 here, so that a route a later Triton adds is not an inference that
skips the gate. `generate_stream` is answered whole (the models are not decoupled: one
event). The framing (the body's limit, `Expect`, the body's deadline, compressed and chunked
bodies) is `http_server`'s. A client that closes its connection cancels its handler: while
it waits in the gate, or when its close was already read as its request is sent on (a client
that sends and closes at once), its request leaves uncomputed; once sent on, it still runs to
its end in tritonserver.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Awaitable, Callable

from .. import triton_messages as M
from .door import ClientLeft, Door
from .gate import Refusal
from .http_server import Answer, HTTPConnection, Request, error
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
#: A request's body is passed on inflated (`http_server` inflates it while it counts its
#: size), and whole (the door has read it: tritonserver's `100 Continue` would only come in
#: between).
_REQUEST_HOP = _HOP | {"content-encoding", "expect"}
#: Seconds a refused upload may go on being read (and discarded) so that its client sees
#: the answer before the connection closes.
LINGER = 2.0
#: Seconds a request's body has to arrive once its turn comes (the end of its headers, or of
#: the answers pipelined before it), and a client has to take an answer (a slow upload or
#: reader holds a connection: `connections` bounds the rest of a connection's life).
BODY_TIMEOUT = 30.0
#: A body longer than this is weighed (its JSON parsed) in a thread, not in the loop's turn.
OFFLOAD_BYTES = 1 << 20


#: The listen queue, which is also how many connections asyncio accepts each time the port
#: is ready (`BaseSelectorEventLoop._accept_connection`); the next turn of the loop sets
#: each one up (a transport, a protocol) beside every other socket's work. Under a
#: flood of send-and-close connections (4 loops from one address, the image limited to 0.4
#: CPUs, 60 s) a queue of 1,024 made the turns so long that 2 honest keep-alive clients got
#: 4 answers, p50 31.6 s; with 128, 2,551 answers, p99 296 ms (64: 3,130, p99 189 ms).
#: Connections beyond it wait in the kernel (a client's SYN is retried), where a flood
#: should wait.
ACCEPT_BACKLOG = 128


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

    async def forward(request: Request, body: bytes) -> Answer:
        upstream = upstreams[0]
        using[id(upstream)] = using.get(id(upstream), 0) + 1
        try:
            reply = await upstream.send(request.method, request.target, _passed_on(request.headers, _REQUEST_HOP), body)
            return Answer(reply.status, _passed_on(reply.headers), reply.body)
        finally:
            using[id(upstream)] -= 1

    async def handle(request: Request) -> Answer:
        body = request.body
        if door.leaving and request.path == READY_PATH:  # KServe v2: 4xx is "not ready"
            return error(400, f"{door.leaving}: this server is not ready; use another replica")
        model = _MODEL.fullmatch(request.path)
        inference = model is not None and model.group(3) in INFERENCE_ACTIONS and request.method == "POST"
        if not inference:
            if model is None and not any(route.fullmatch(request.path) for route in _OTHERS):
                return error(404, "Not Found")  # as tritonserver answers a path it does not serve
            problem = None
            if request.method == "POST":  # a large body is parsed in a thread, as an inference's is
                problem = await asyncio.to_thread(_not_json, body) if len(body) > OFFLOAD_BYTES else _not_json(body)
            if problem:  # tritonserver 2.51 answers 500 "failed to parse the request JSON buffer"
                return error(400, problem)
            upload = _LOAD.fullmatch(request.path) is not None and http_uploads(body)
            if upload and not door.allow_model_uploads:
                return error(403, UPLOAD_REFUSAL)
            try:
                if upload:
                    return await door.uploads.watch(lambda: forward(request, body))
                return await forward(request, body)
            except OSError as err:
                return error(503, f"the server is not answering ({type(err).__name__}); retry in a moment")
        assert model is not None
        if door.served and model.group(1) not in door.served:
            return error(404, M.not_served(model.group(1)))
        try:
            header_length = request.header("Inference-Header-Content-Length")
            weigh = (
                (lambda: door.weigher.http(body, header_length))
                if model.group(3) == "infer"
                else (lambda: door.weigher.generate(body))
            )
            # a large body is read in a thread: its JSON would hold every client's turn
            weighed = await asyncio.to_thread(weigh) if len(body) > OFFLOAD_BYTES else weigh()
        except BadRequest as err:
            return error(400, str(err))
        client = door.client_of(request.remote, request.header(door.client_header) if door.client_header else None)
        outcome = await door.admit(client, weighed.work)
        if isinstance(outcome, Refusal):
            return error(503, outcome.reason, {"Retry-After": str(max(1, round(outcome.retry_after)))})

        async def forward_infer() -> Answer:
            try:
                return await forward(request, body)
            except Refused as err:  # never reached tritonserver: may be sent again
                return error(503, f"{M.REFUSED_CONNECTION} ({type(err).__name__}); retry in a moment")

        def failed(reply: Answer) -> M.Reading | None:
            """What a failed answer means (`triton_messages.classify`); None for an answer."""
            if reply.status == 200:
                return None
            return M.classify(reply.status, reply.body, door.served)

        request.hold()  # sent on from here (or not, if its client has left): never cancelled
        try:
            return await door.run(
                outcome,
                forward_infer,
                ok=lambda reply: reply.status == 200,
                dead_stub=lambda reply: (f := failed(reply)) is not None and f.kind is M.Kind.DEAD_STUB,
                uncomputed=lambda reply: (f := failed(reply)) is not None and f.uncomputed,
                client_gone=request.gone,
                inline=True,
            )
        except ClientLeft:
            return error(499, "the client closed its connection before its request was sent on")
        except OSError as err:
            return error(503, f"the server is not answering ({type(err).__name__}); retry in a moment")

    def connection() -> HTTPConnection:
        return HTTPConnection(handle, limit, BODY_TIMEOUT, LINGER)

    listener: asyncio.Server | None = None
    try:
        listener = await asyncio.get_running_loop().create_server(
            door.guard.factory(connection),
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
        if listener is not None:
            listener.close()
        await upstreams[0].close()
        raise
    serving = listener
    door.guard.start()

    async def close() -> None:
        door.guard.stop()
        serving.close()
        door.guard.close_all()
        await serving.wait_closed()
        await upstreams[0].close()

    return close
