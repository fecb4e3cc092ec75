"""What a gRPC front door in Python costs at least (bare grpcio proxies), beside the door itself
and a native proxy.

One `serve` of a repository (the `portable` tiny set by default, whose models are almost
free, so that what is measured is the plumbing); closed loops of 1, 4 and 16 tritonclient
gRPC clients, one text per request (`bench_door.measure`), each sent six ways in rotating
rounds, to the same tritonserver at the same moment of the run:

- `direct`: serve's own tritonserver's gRPC port;
- `grpc proxy`: a bare grpc.aio proxy, a process of its own: every method passed on as bytes
  over one kept channel (a generic handler, no gate, no weighing): the door's gRPC transport
  with nothing of the door around it;
- `sync proxy`: the same on grpcio's synchronous server (a pool of 32 threads) and channel:
  whether grpc.aio's loop is what costs;
- `grpc to http`: a bare grpc.aio server that sends ModelInfer on to tritonserver's HTTP
  port over the door's own `Upstream` (KServe v2 with binary tensors) and encodes the answer
  as a ModelInferResponse: the floor of a gRPC door whose upstream half is HTTP. It
  translates only what this benchmark sends (inputs in `raw_input_contents`, no parameters,
  no shared memory) and refuses anything else (UNIMPLEMENTED): a measurement, not a door;
- `door`: serve's published gRPC port, through the front door;
- `nginx`: one nginx process relaying gRPC over HTTP/2 on kept connections
  (`native_proxy.py`): what a native relay costs; left out, with a line saying so, where
  nginx is not installed.

Per clients and way: texts/s and p50 (medians of the rounds), the way's texts/s over
direct's (median of the per-round ratios) and the CPU per request of the way's own process
(the proxy's, or serve's for the door: `bench_door.cpu_seconds`). Before the rounds, one
text is scored every way and the scores must agree.

    python benchmarks/grpc_floor.py --rounds 3 --duration 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from readability_triton.frontdoor.protobuf import fields, varint

INFER = "/inference.GRPCInferenceService/ModelInfer"
#: tritonserver's HTTP statuses as gRPC codes' names (src/http_server.cc `HttpCodeFromError`
#: read backwards: 400 also covers UNKNOWN, ALREADY_EXISTS and CANCELLED)
_CODES = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 501: "UNIMPLEMENTED", 503: "UNAVAILABLE"}


# -- protobuf, as much as ModelInfer needs -------------------------------------------------
def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _shape(value, kind: int) -> list[int]:
    """A packed (or single) repeated int64."""
    if kind == 0:
        return [value]
    dims, pos = [], 0
    while pos < len(value):
        dim, pos = varint(value, pos)
        dims.append(dim)
    return dims


def translate_request(message: bytes) -> tuple[str, str, str, bytes, bytes]:
    """(model, version, id, JSON header, binary tensors) of a ModelInferRequest for tritonserver's
    HTTP port; ValueError for what this floor does not translate."""
    model = version = request_id = ""
    inputs, outputs, raws = [], [], []
    for number, _, value in fields(memoryview(message)):
        if number == 1:
            model = bytes(value).decode()
        elif number == 2:
            version = bytes(value).decode()
        elif number == 3:
            request_id = bytes(value).decode()
        elif number == 5:
            tensor: dict = {"shape": []}
            for n, k, v in fields(value):
                if n == 1:
                    tensor["name"] = bytes(v).decode()
                elif n == 2:
                    tensor["datatype"] = bytes(v).decode()
                elif n == 3:
                    tensor["shape"] += _shape(v, k)
                else:
                    raise ValueError("input parameters or contents")
            inputs.append(tensor)
        elif number == 6:
            names = [bytes(v).decode() for n, _, v in fields(value) if n == 1]
            if len(names) != sum(1 for _ in fields(value)):
                raise ValueError("output parameters")
            outputs.append({"name": names[0], "parameters": {"binary_data": True}})
        elif number == 7:
            raws.append(bytes(value))
        else:
            raise ValueError("request parameters")
    if len(raws) != len(inputs):
        raise ValueError("inputs without raw contents")
    for tensor, raw in zip(inputs, raws):
        tensor["parameters"] = {"binary_data_size": len(raw)}
    header: dict = {"id": request_id} if request_id else {}
    header["inputs"] = inputs
    if outputs:
        header["outputs"] = outputs
    else:
        header["parameters"] = {"binary_data_output": True}
    return model, version, request_id, json.dumps(header).encode(), b"".join(raws)


def translate_reply(body: bytes, header_length: int, request_id: str) -> bytes:
    """The ModelInferResponse of tritonserver's HTTP answer (binary outputs)."""
    header = json.loads(body[:header_length])
    message = _field(1, header["model_name"].encode()) + _field(2, header["model_version"].encode())
    if request_id:
        message += _field(3, request_id.encode())
    raws, pos = [], header_length
    for output in header["outputs"]:
        shape = b"".join(_varint(d) for d in output["shape"])
        message += _field(
            5, _field(1, output["name"].encode()) + _field(2, output["datatype"].encode()) + _field(3, shape)
        )
        size = output.get("parameters", {}).get("binary_data_size", 0)
        raws.append(body[pos : pos + size])
        pos += size
    return message + b"".join(_field(6, raw) for raw in raws)


# -- the proxies (each a process of its own) ------------------------------------------------
def sync_proxy(port: int, upstream_grpc: str) -> None:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    channel = grpc.insecure_channel(upstream_grpc)

    class Handler(grpc.GenericRpcHandler):
        def service(self, details):
            call = channel.unary_unary(details.method)

            def passed_on(request: bytes, context) -> bytes:
                try:
                    return call(request)
                except grpc.RpcError as err:
                    context.abort(err.code(), err.details() or "")
                    raise AssertionError("abort raises") from None

            return grpc.unary_unary_rpc_method_handler(passed_on)

    server = grpc.server(ThreadPoolExecutor(32))
    server.add_generic_rpc_handlers((Handler(),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    threading.Event().wait()


def proxy(port: int, upstream_grpc: str, upstream_http: str, to_http: bool) -> None:
    import grpc
    import grpc.aio

    from readability_triton.frontdoor.upstream import Upstream

    async def main() -> None:
        channel = grpc.aio.insecure_channel(upstream_grpc)
        http = Upstream(upstream_http)

        async def to_tritonserver_http(request: bytes, context) -> bytes:
            try:
                model, version, request_id, header, tensors = translate_request(request)
            except ValueError as err:
                await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"not translated here: {err}")
                raise AssertionError("abort raises") from None
            path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
            reply = await http.send(
                "POST",
                path,
                [("Inference-Header-Content-Length", str(len(header))), ("Content-Type", "application/octet-stream")],
                header + tensors,
            )
            if reply.status != 200:
                message = json.loads(reply.body or b"{}").get("error", "")
                await context.abort(getattr(grpc.StatusCode, _CODES.get(reply.status, "INTERNAL")), message)
            length = next(int(v) for k, v in reply.headers if k.lower() == "inference-header-content-length")
            return translate_reply(reply.body, length, request_id)

        class Handler(grpc.GenericRpcHandler):
            def service(self, details):
                if to_http and details.method == INFER:
                    return grpc.unary_unary_rpc_method_handler(to_tritonserver_http)
                call = channel.unary_unary(details.method)

                async def passed_on(request: bytes, context) -> bytes:
                    try:
                        return await call(request)
                    except grpc.aio.AioRpcError as err:
                        await context.abort(err.code(), err.details() or "")
                        raise AssertionError("abort raises") from None

                return grpc.unary_unary_rpc_method_handler(passed_on)

        server = grpc.aio.server()
        server.add_generic_rpc_handlers((Handler(),))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(main())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--artifacts", default=".cache/test-artifacts/tiny", help="the set to serve (portable)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--json")
    parser.add_argument("role", nargs="*", help=argparse.SUPPRESS)  # a proxy's process
    args = parser.parse_args(argv)
    if args.role:
        port, upstream_grpc, upstream_http, kind = args.role
        if kind == "sync":
            sync_proxy(int(port), upstream_grpc)
        else:
            proxy(int(port), upstream_grpc, upstream_http, kind == "http")
        return 0
    # here, not at the top: the proxies' processes import only what their role needs
    from bench_door import measure, server_ports
    from native_proxy import MISSING, nginx_binary, start

    from readability_triton import contracts as C
    from readability_triton.client.readability import ThreadClients, text_input
    from readability_triton.corpus import default_texts
    from readability_triton.measure.launch import launch_serve
    from readability_triton.repository import assemble as repository
    from readability_triton.repository.options import AssemblyOptions
    from readability_triton.server.tritonserver import free_ports

    texts = default_texts()[0][:400]
    counts = [int(n) for n in args.clients.split(",")]
    me = os.path.abspath(__file__)
    with tempfile.TemporaryDirectory(prefix="grpc-floor-") as tmp:
        repo = os.path.join(tmp, "repository")
        repository.assemble(args.artifacts, repo, AssemblyOptions("portable"))
        with launch_serve(repo, os.path.join(tmp, "serve"), stop_timeout=120) as serve:
            server_pid = int(serve.status(timeout=10)["pid"])
            direct = server_ports(server_pid)
            upstream = (f"127.0.0.1:{direct['grpc']}", f"127.0.0.1:{direct['http']}")
            kinds = {"grpc proxy": "grpc", "sync proxy": "sync", "grpc to http": "http"}
            ports = dict(zip([*kinds, "nginx"], free_ports(len(kinds) + 1)))
            proxies = {
                way: subprocess.Popen([sys.executable, me, str(ports[way]), *upstream, kind])
                for way, kind in kinds.items()
            }
            try:
                if nginx_binary():
                    proxies["nginx"] = start(os.path.join(tmp, "nginx"), ports["nginx"], upstream[0], grpc=True)
                else:
                    print(MISSING, file=sys.stderr)
                ways = {
                    "direct": (direct["grpc"], server_pid),
                    **{way: (ports[way], proxies[way].pid) for way in kinds},
                    "door": (serve.ports["grpc"], serve.pid),
                    **({"nginx": (ports["nginx"], proxies["nginx"].pid)} if "nginx" in proxies else {}),
                }
                scores = {}
                for way, (port, _) in ways.items():  # every way answers, and the same
                    deadline = time.monotonic() + 30
                    while True:
                        pool = ThreadClients(f"127.0.0.1:{port}", "grpc")
                        try:
                            module, client = pool.get()
                            result = client.infer(C.ENSEMBLE, [text_input(module, [texts[0]])])
                            scores[way] = float(result.as_numpy(C.SCORE).reshape(-1)[0])
                            break
                        except Exception:  # a proxy still starting
                            if time.monotonic() > deadline:
                                raise
                            time.sleep(0.2)
                        finally:
                            pool.close()
                if len(set(scores.values())) != 1:
                    raise RuntimeError(f"the ways disagree on one text's score: {scores}")
                names = list(ways)
                samples: dict[tuple[int, str], list[dict]] = {}
                for r in range(args.rounds):
                    for n in counts:
                        for way in names[r % len(names) :] + names[: r % len(names)]:
                            port, pid = ways[way]
                            row = measure(f"127.0.0.1:{port}", "grpc", texts, n, args.duration, {"own": pid})
                            samples.setdefault((n, way), []).append(row)
                            print(
                                f"round {r + 1}: {n:>2} client(s) {way:>12}: {row['texts_per_s']:7.1f} texts/s, "
                                f"p50 {row['p50_ms']:5.2f} ms, {row['own_cpu_ms']:.3f} ms CPU/request",
                                file=sys.stderr,
                                flush=True,
                            )
            finally:
                for process in proxies.values():
                    process.kill()
                    process.wait()
    rows = []
    for n in counts:
        for way in ways:
            got, straight = samples[(n, way)], samples[(n, "direct")]
            rows.append(
                {
                    "clients": n,
                    "way": way,
                    "texts_per_s": statistics.median(r["texts_per_s"] for r in got),
                    "against_direct": statistics.median(
                        g["texts_per_s"] / s["texts_per_s"] for g, s in zip(got, straight)
                    ),
                    "p50_ms": statistics.median(r["p50_ms"] for r in got),
                    "cpu_ms": None if way == "direct" else statistics.median(r["own_cpu_ms"] for r in got),
                }
            )
    print(
        f"\ngRPC ways against direct ({args.rounds} rounds of {args.duration:g} s, one text per request, "
        f"{os.cpu_count()} CPUs; medians)\n"
    )
    print("| clients | way | texts/s | against direct | p50 ms | own CPU ms/request |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        cpu = "-" if row["cpu_ms"] is None else f"{row['cpu_ms']:.3f}"
        print(
            f"| {row['clients']} | {row['way']} | {row['texts_per_s']:.1f} | {row['against_direct']:.2f} | "
            f"{row['p50_ms']:.2f} | {cpu} |"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(
                {"rounds": args.rounds, "duration": args.duration, "scores": scores, "rows": rows}, handle, indent=2
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
