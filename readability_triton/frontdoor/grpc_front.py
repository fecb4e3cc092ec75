"""The front door's gRPC port (grpc.aio): `inference.GRPCInferenceService`, passed on to
tritonserver's gRPC endpoint message for message, as bytes (nothing is decoded but the
work of a ModelInfer request, `wire.Weigher.grpc`, and whether a model load sends files,
`uploads`).

- `ModelInfer` passes the gate. A call whose client cancels it or whose deadline passes
  while it waits here is dropped; once sent on, the call to tritonserver (which has no
  deadline) is awaited to its end and its answer dropped, so that tritonserver never sees a
  cancellation.
- `ModelStreamInfer` is refused (UNIMPLEMENTED): the ensemble is not decoupled, and a
  stream could not be admitted or dropped message by message.
- `ServerReady` answers false once serve is stopping (`Door.leave`); otherwise it, like
  every other method of the service (health, metadata, config, statistics and the
  restricted APIs, still guarded by tritonserver with the admin key) and `grpc.health.v1`'s
  `Check`, is passed on as it is. Any other method is answered UNIMPLEMENTED here, and no
  state is kept for it: a client cannot grow the door by naming methods.
- A message over the limit is refused by gRPC itself (RESOURCE_EXHAUSTED) from its length
  prefix, before it is read whole.
- Connections are bounded by grpc itself (`connection_options`): in all, streams per
  connection (what stops an HTTP/2 rapid reset from cancelling other clients' calls), the
  handshake's time, and idle connections' lives.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

import grpc
import grpc.aio

from .. import triton_messages as M
from .door import ClientLeft, Door
from .gate import Refusal
from .steering import steer
from .uploads import REFUSAL as UPLOAD_REFUSAL
from .uploads import grpc_uploads
from .wire import BadRequest

SERVICE = "/inference.GRPCInferenceService/"
INFER = SERVICE + "ModelInfer"
STREAM = SERVICE + "ModelStreamInfer"
READY = SERVICE + "ServerReady"
LOAD = SERVICE + "RepositoryModelLoad"
#: The methods tritonserver 2.51 serves (common r24.10, grpc_service.proto; grpc_server.cc
#: registers grpc.health.v1's Check), all unary but ModelStreamInfer.
METHODS = tuple(
    SERVICE + name
    for name in (
        "ServerLive",
        "ServerReady",
        "ModelReady",
        "ServerMetadata",
        "ModelMetadata",
        "ModelInfer",
        "ModelStreamInfer",
        "ModelConfig",
        "ModelStatistics",
        "RepositoryIndex",
        "RepositoryModelLoad",
        "RepositoryModelUnload",
        "SystemSharedMemoryStatus",
        "SystemSharedMemoryRegister",
        "SystemSharedMemoryUnregister",
        "CudaSharedMemoryStatus",
        "CudaSharedMemoryRegister",
        "CudaSharedMemoryUnregister",
        "TraceSetting",
        "LogSettings",
    )
) + ("/grpc.health.v1.Health/Check",)
#: What tritonserver also serves and the door does not offer (UNIMPLEMENTED): grpc.health.v1's
#: Watch, a stream that stays open for as long as its client likes (probes use Check).
NOT_OFFERED = ("/grpc.health.v1.Health/Watch",)
#: ServerReadyResponse{ready: false}: proto3 leaves a false bool out, so it is empty.
NOT_READY = b""


#: Streams one gRPC connection may have open. With grpc's overload protection (on by default),
#: a stream its client reset still counts until it is freed, so a flood of HEADERS +
#: RST_STREAM on one connection is refused there (REFUSED_STREAM) instead of filling the
#: server-wide queue of calls not yet handed to Python: past 1,000 of those grpc refuses new
#: calls from every connection at random, and 356,000 such pairs on one connection made 16 %
#: of another client's calls fail with CANCELLED (with 100: none of 6,430, 334,009 refused).
MAX_STREAMS = 128


def connection_options(max_connections: int, handshake: float, idle: float) -> list[tuple[str, int]]:
    """The gRPC port's bounds: concurrent streams per connection (MAX_STREAMS), connections
    in all, the time a new connection has to send HTTP/2's preface and SETTINGS
    (`handshake` s), and how long one with no call open is kept (`idle` s; this also closes
    a socket that never sent anything)."""
    return [
        ("grpc.max_concurrent_streams", MAX_STREAMS),
        ("grpc.http.overload_protection", 1),
        ("grpc.max_allowed_incoming_connections", max_connections),
        ("grpc.server_handshake_timeout_ms", int(handshake * 1000)),
        ("grpc.max_connection_idle_ms", int(idle * 1000)),
    ]


def _late(context) -> bool:
    """Whether the call's deadline has passed. (A client's cancellation cancels the handler
    itself, which `Door.run` sees; grpc.aio's `context.cancelled()` does not: it reads the
    status the handler set.)"""
    remaining = context.time_remaining()
    return remaining is not None and remaining <= 0


def _peer_address(peer: str) -> str:
    """'ipv4:127.0.0.2:5000' -> '127.0.0.2'; 'ipv6:[::1]:5000' -> '::1'."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv6" and rest.startswith("["):
        return rest[1:].split("]")[0]
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    return peer


def _passed_on(metadata) -> list[tuple[str, Any]]:
    return [(m.key, m.value) for m in metadata or () if not m.key.startswith((":", "grpc-")) and m.key != "user-agent"]


#: How long `release` lets a call still on the old channel finish before it closes it.
RELEASE_GRACE = 5.0


def _upstream_channel(door: Door) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(
        door.upstream_grpc,
        options=[
            ("grpc.max_send_message_length", door.max_request_bytes),
            ("grpc.max_receive_message_length", -1),
            # tritonserver restarts on the same port: reconnect within a second, not after
            # gRPC's default backoff (up to 120 s), during which every call fails at once
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
        ],
    )


async def open_grpc(
    door: Door, releasers: list[Callable[[], Awaitable[None]]] | None = None
) -> Callable[[], Awaitable[None]]:
    """Listen on the door's gRPC port; returns the coroutine function that closes it.
    Appends to `releasers` the one that closes the connection to tritonserver (a new one
    opens if anything is still forwarded): serve's stop, after the drain."""
    limit = door.max_request_bytes
    channel = _upstream_channel(door)
    calls = {method: channel.unary_unary(method) for method in METHODS if method != STREAM}

    async def release() -> None:
        nonlocal channel, calls
        old, channel = channel, _upstream_channel(door)
        calls = {method: channel.unary_unary(method) for method in METHODS if method != STREAM}
        await old.close(grace=RELEASE_GRACE)  # a call still on it (a load, statistics) finishes first

    if releasers is not None:
        releasers.append(release)

    def upstream(method: str):
        return calls[method]

    async def forward(method: str, request: bytes, metadata) -> bytes | grpc.aio.AioRpcError:
        """tritonserver's answer, or its error (returned: the client may be gone by now)."""
        try:
            return await upstream(method)(request, metadata=metadata)
        except grpc.aio.AioRpcError as err:
            return err

    async def answer(reply: bytes | grpc.aio.AioRpcError, context) -> bytes:
        if isinstance(reply, grpc.aio.AioRpcError):
            await context.abort(reply.code(), reply.details() or "")
        return reply

    async def infer(request: bytes, context) -> bytes:
        header = None
        if door.client_header:
            header = next((m.value for m in context.invocation_metadata() or () if m.key == door.client_header), None)
        client = door.client_of(_peer_address(context.peer()), header if isinstance(header, str) else None)
        try:
            weighed = door.weigher.grpc(request)
        except BadRequest as err:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
            raise AssertionError("abort raises") from None  # pragma: no cover
        if door.served and weighed.model not in door.served:
            await context.abort(grpc.StatusCode.NOT_FOUND, M.not_served(weighed.model))
        outcome = await door.admit(client, weighed.work, context.time_remaining())
        if isinstance(outcome, Refusal):
            code = grpc.StatusCode.DEADLINE_EXCEEDED if outcome.kind == "deadline" else grpc.StatusCode.UNAVAILABLE
            await context.abort(code, outcome.reason)
            raise AssertionError("abort raises")  # pragma: no cover
        metadata = _passed_on(context.invocation_metadata())

        def failed(reply: bytes | grpc.aio.AioRpcError) -> M.Reading | None:
            """What a failed answer means (`triton_messages.classify`); None for an answer."""
            if isinstance(reply, grpc.aio.AioRpcError):
                return M.classify(reply.code(), reply.details(), door.served)
            return None

        try:
            reply = await door.run(
                outcome,
                lambda: forward(INFER, request, metadata),
                ok=lambda r: not isinstance(r, grpc.aio.AioRpcError),
                dead_stub=lambda r: (f := failed(r)) is not None and f.kind is M.Kind.DEAD_STUB,
                uncomputed=lambda r: (f := failed(r)) is not None and f.uncomputed,
                client_gone=lambda: _late(context),
            )
        except ClientLeft:
            await context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                "the request's deadline passed before it could be sent on: it was not computed",
            )
            raise AssertionError("abort raises") from None  # pragma: no cover
        return await answer(reply, context)

    async def refuse_stream(requests, context):
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            "ModelStreamInfer is not offered here (the models are not decoupled): use ModelInfer",
        )
        yield b""  # pragma: no cover - abort raises

    class Handler(grpc.GenericRpcHandler):
        def service(self, details):
            method = details.method
            if method == INFER:
                return grpc.unary_unary_rpc_method_handler(infer)
            if method == STREAM:
                return grpc.stream_stream_rpc_method_handler(refuse_stream)
            if method not in calls or method in NOT_OFFERED:
                return None  # grpc answers UNIMPLEMENTED

            async def passthrough(request: bytes, context) -> bytes:
                if method == READY and door.leaving:  # serve is stopping: not ready, whatever tritonserver says
                    return NOT_READY
                metadata = _passed_on(context.invocation_metadata())
                if method == LOAD and grpc_uploads(request):
                    if not door.allow_model_uploads:
                        await context.abort(grpc.StatusCode.PERMISSION_DENIED, UPLOAD_REFUSAL)
                    return await answer(await door.uploads.watch(lambda: forward(method, request, metadata)), context)
                return await answer(await forward(method, request, metadata), context)

            return grpc.unary_unary_rpc_method_handler(passthrough)

    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", int(door.workers > 1)),  # beside the other door workers
            *connection_options(door.guard.max_connections, door.guard.header_timeout, door.guard.idle_timeout),
        ]
    )
    server.add_generic_rpc_handlers((Handler(),))
    try:
        bound = server.add_insecure_port(f"{door.address}:{door.grpc_port}")
    except RuntimeError as err:
        await channel.close()
        raise OSError(f"gRPC port {door.grpc_port}: {err}") from None
    if not bound:
        await channel.close()
        raise OSError(f"gRPC port {door.grpc_port} cannot be bound")
    await server.start()
    if door.steered and not steer(door.grpc_port, door.workers, *door.network_prefix):
        await server.stop(None)
        await channel.close()
        raise OSError(f"gRPC port {door.grpc_port}: no listening socket found to steer client networks by")

    async def close() -> None:
        await server.stop(grace=2.0)
        await channel.close()

    return close
