"""The front door's capacity: requests per second when its loops are saturated, in front of a
trivial pipeline (one python-backend model, answering zeros), with 1 and with N door
workers, and the same tritonserver reached directly, in alternating rounds of one run.

Each way is a closed loop of `--connections` HTTP/1.1 keep-alive connections, one text per
request (KServe v2 JSON), spread over `--networks` client networks (sources 127.0.<n>.1,
so that the kernel steers them over the workers as it would distinct clients), sent by
`--senders` processes of raw asyncio (a cheaper client than tritonclient, whose cost would
be measured instead of the door's). All share the machine's cores with serve and
tritonserver: on 2 vCPUs the ceiling is the cores, not only the door.

Each round also counts the CPU that every part spends per request: the door (serve's
process and its workers), tritonserver (its process and its python-backend stubs) and the
clients (the senders, from their loops' start). Their sum is what the machine spends on a
request that way, and the CPUs the benchmark may use (its affinity, within a container's
CPU limit) divided by it is the most that way can pass here at those costs (`at most`);
with one door worker, the most any number of workers could reach on these cores, so long
as tritonserver's and the clients' costs per request do not fall with more workers.

    python benchmarks/door_capacity.py --workers 1,2 --rounds 3 --duration 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from queue import Empty

from bench_door import baseline_serve, cpu_seconds, server_ports

from readability_triton import contracts as C
from readability_triton import threads
from readability_triton.frontdoor.workers import cpu_quota
from readability_triton.measure.honest import infer_body
from readability_triton.measure.launch import launch_serve
from readability_triton.measure.load import process_tree

TEXT = "The cat sat on the mat."

#: The trivial pipeline: one python model under the ensemble's name, with the ensemble's
#: input and outputs, answering zeros (serve's warm-up asks for every output).
CONFIG = (
    f'name: "{C.ENSEMBLE}"\nbackend: "python"\nmax_batch_size: 64\ndynamic_batching {{ }}\n'
    f'input [ {{ name: "{C.TEXT}" data_type: TYPE_STRING dims: [ 1 ] }} ]\n'
    + "output [\n"
    + ",\n".join(f'  {{ name: "{name}" data_type: TYPE_FP32 dims: [ 1 ] }}' for name in C.OUTPUTS)
    + "\n]\ninstance_group [ { count: 1 kind: KIND_CPU } ]\n"
)
MODEL = f'''"""A trivial pipeline for measuring the front door: zeros for every output."""
import numpy as np
import triton_python_backend_utils as pb_utils

OUTPUTS = {list(C.OUTPUTS)!r}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            rows = pb_utils.get_input_tensor_by_name(request, "{C.TEXT}").as_numpy().shape[0]
            zeros = np.zeros((rows, 1), dtype=np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(name, zeros) for name in OUTPUTS]))
        return responses
'''


def write_trivial(repository: str) -> str:
    folder = os.path.join(repository, C.ENSEMBLE)
    os.makedirs(os.path.join(folder, "1"), exist_ok=True)
    with open(os.path.join(folder, "config.pbtxt"), "w", encoding="utf-8") as handle:
        handle.write(CONFIG)
    with open(os.path.join(folder, "1", "model.py"), "w", encoding="utf-8") as handle:
        handle.write(MODEL)
    return repository


def process_cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += cpu_seconds(pid)
    return total


# -- the sender ----------------------------------------------------------------------------


async def _connection(port: int, source: str, request: bytes, start: float, stop: float, tally: dict) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    loop = asyncio.get_running_loop()
    try:
        while loop.time() < stop:
            sent = loop.time()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            lower = head.lower()
            at = lower.find(b"content-length:")
            length = int(lower[at + 15 : lower.index(b"\r\n", at)]) if at >= 0 else 0
            await reader.readexactly(length)
            tally["all"].append(0.0)
            if sent >= start:
                tally["latencies" if status == 200 else "failed"].append(loop.time() - sent)
            if b"connection: close" in lower:
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    finally:
        writer.close()


def _grpc_request() -> bytes:
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=C.ENSEMBLE)
    tensor = request.inputs.add(name=C.TEXT, datatype="BYTES", shape=[1, 1])
    text = TEXT.encode()
    request.raw_input_contents.append(len(text).to_bytes(4, "little") + text)
    request.outputs.add(name=C.SCORE)
    assert tensor.name == C.TEXT
    return request.SerializeToString()


def _grpc_sender(port: int, calls: int, warm: float, seconds: float, queue) -> None:
    """`calls` closed loops of ModelInfer over grpc.aio (from 127.0.0.1: gRPC has no source
    address to bind), on a connection per 8 of them."""
    import grpc.aio

    request = _grpc_request()
    tally: dict[str, list[float]] = {"latencies": [], "failed": [], "all": []}
    begun = time.process_time()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        start = loop.time() + warm
        stop = start + seconds
        channels = [
            grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.channel_id", k)])
            for k in range(max(1, calls // 8))
        ]
        methods = [channel.unary_unary("/inference.GRPCInferenceService/ModelInfer") for channel in channels]

        async def one(k: int) -> None:
            infer = methods[k % len(methods)]
            while loop.time() < stop:
                sent = loop.time()
                try:
                    await infer(request)
                    ok = True
                except grpc.aio.AioRpcError:
                    ok = False
                tally["all"].append(0.0)
                if sent >= start:
                    tally["latencies" if ok else "failed"].append(loop.time() - sent)

        await asyncio.gather(*(one(k) for k in range(calls)))
        for channel in channels:
            await channel.close()

    asyncio.run(main())
    tally["cpu"] = [time.process_time() - begun]
    queue.put(tally)


def _sender(port: int, sources: list[str], warm: float, seconds: float, queue) -> None:
    body = infer_body([TEXT])
    request = (
        f"POST /v2/models/{C.ENSEMBLE}/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    tally: dict[str, list[float]] = {"latencies": [], "failed": [], "all": []}
    begun = time.process_time()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        start = loop.time() + warm
        stop = start + seconds
        await asyncio.gather(*(_connection(port, source, request, start, stop, tally) for source in sources))

    asyncio.run(main())
    tally["cpu"] = [time.process_time() - begun]
    queue.put(tally)


def blast(
    port: int, protocol: str, connections: int, networks: int, senders: int, seconds: float, warm: float = 1.0
) -> dict:
    """`connections` closed loops against `port` for `seconds` (after `warm`): requests/s,
    p50 ms, failures, and the CPU seconds the senders spent."""
    sources = [f"127.0.{1 + i % networks}.{1 + i // networks % 250}" for i in range(connections)]
    context = multiprocessing.get_context("spawn")  # grpc's threads do not survive a fork
    queue = context.Queue()
    processes = [
        context.Process(target=_sender, args=(port, sources[k::senders], warm, seconds, queue))
        if protocol == "http"
        else context.Process(target=_grpc_sender, args=(port, len(sources[k::senders]), warm, seconds, queue))
        for k in range(senders)
    ]
    for process in processes:
        process.start()
    tallies: list[dict] = []
    deadline = time.monotonic() + warm + seconds + 120
    while len(tallies) < len(processes):
        try:
            tallies.append(queue.get(timeout=1))
        except Empty:
            failed = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                for process in processes:
                    process.kill()
                raise RuntimeError(f"a sender failed (exit {failed}) or did not finish in time") from None
    for process in processes:
        process.join(30)
    latencies = sorted(x for t in tallies for x in t["latencies"])
    return {
        "requests_per_s": len(latencies) / seconds,
        "p50_ms": 1e3 * latencies[len(latencies) // 2] if latencies else float("nan"),
        "failed": sum(len(t["failed"]) for t in tallies),
        # every answer, the warm-up's too: what the CPU measured over the whole blast served
        "answered": sum(len(t["all"]) for t in tallies),
        "clients_cpu_s": sum(t["cpu"][0] for t in tallies),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="1,2", help="door workers of each serve measured")
    parser.add_argument("--protocols", default="http,grpc")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=32, help="closed loops (HTTP connections, gRPC calls)")
    parser.add_argument("--networks", type=int, default=8, help="HTTP client networks (gRPC: 127.0.0.1 only)")
    parser.add_argument("--senders", type=int, default=2, help="client processes")
    parser.add_argument(
        "--baseline-code",
        metavar="DIR",
        help="also serve with another checkout's package (DIR holds its readability_triton/; its default door "
        "workers): the way 'baseline'",
    )
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.workers.split(",")]
    protocols = args.protocols.split(",")
    cpus = min(threads.cores(), cpu_quota() or threads.cores())
    samples: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="door-capacity-") as tmp, contextlib.ExitStack() as stack:
        repo = write_trivial(os.path.join(tmp, "repository"))
        # (protocol, way): the port, the door's processes, and the tritonserver reached
        ways: dict[tuple[str, str], tuple[int, list[int], int]] = {}
        for n in counts:
            serve = stack.enter_context(
                launch_serve(repo, os.path.join(tmp, f"serve-{n}"), args=["--door-workers", str(n)], stop_timeout=120)
            )
            server_pid = int(serve.status(timeout=10)["pid"])
            direct = server_ports(server_pid)
            for protocol in protocols:
                # gRPC's calls all come from 127.0.0.1, one network: one worker takes them all
                if protocol == "http" or n == counts[0]:
                    # serve and its door workers: its process tree less tritonserver's
                    pids = sorted(set(process_tree(serve.pid)) - set(process_tree(server_pid)))
                    ways[(protocol, f"door x{n}")] = (int(serve.ports[protocol]), pids, server_pid)
                if (protocol, "direct") not in ways:
                    ways[(protocol, "direct")] = (direct[protocol], [], server_pid)
        if args.baseline_code:
            serve = stack.enter_context(baseline_serve(repo, os.path.join(tmp, "serve-baseline"), args.baseline_code))
            baseline_server = int(serve.status(timeout=10)["pid"])
            pids = sorted(set(process_tree(serve.pid)) - set(process_tree(baseline_server)))
            for protocol in protocols:
                ways[(protocol, "baseline")] = (int(serve.ports[protocol]), pids, baseline_server)
        names = list(ways)
        for r in range(args.rounds):
            for protocol, name in names[r % len(names) :] + names[: r % len(names)]:
                port, pids, server = ways[(protocol, name)]
                tree = process_tree(server)
                before, busy, started = process_cpu(pids), process_cpu(tree), time.monotonic()
                row = blast(port, protocol, args.connections, args.networks, args.senders, args.duration)
                answered = max(1, row["answered"])
                row["door_cpu_ms"] = (process_cpu(pids) - before) * 1e3 / answered
                row["server_cpu_ms"] = (process_cpu(tree) - busy) * 1e3 / answered
                row["clients_cpu_ms"] = row.pop("clients_cpu_s") * 1e3 / answered
                row["all_cpu_ms"] = row["door_cpu_ms"] + row["server_cpu_ms"] + row["clients_cpu_ms"]
                row["at_most"] = cpus * 1e3 / row["all_cpu_ms"] if row["all_cpu_ms"] > 0 else float("inf")
                # the share of the CPUs the way kept busy
                row["busy"] = row["requests_per_s"] * row["all_cpu_ms"] / 1e3 / cpus
                samples.setdefault((protocol, name), []).append(row)
                print(
                    f"round {r + 1}: {protocol:>4} {name:>8}: {row['requests_per_s']:7.0f} requests/s, "
                    f"p50 {row['p50_ms']:6.2f} ms, {row['failed']} failed, CPU ms/request: door "
                    f"{row['door_cpu_ms']:.3f}, tritonserver {row['server_cpu_ms']:.3f}, clients "
                    f"{row['clients_cpu_ms']:.3f}; at most {row['at_most']:.0f}/s, {time.monotonic() - started:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )
    base = f"door x{counts[0]}"
    print(
        f"\nthe front door's capacity, trivial pipeline ({args.rounds} rounds of {args.duration:g} s, "
        f"{args.connections} closed loops in {args.senders} processes, HTTP from {args.networks} networks, "
        f"{cpus} CPUs; medians, each column its own)\n"
    )
    print(
        f"| protocol | way | requests/s | against {base} | p50 ms | door CPU ms/request | tritonserver's "
        "| clients' | all | at most requests/s | CPUs busy | failed |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    table = []
    for protocol, name in names:
        rows, baseline = samples[(protocol, name)], samples[(protocol, base)]
        entry = {
            "protocol": protocol,
            "way": name,
            "requests_per_s": statistics.median(r["requests_per_s"] for r in rows),
            "ratio": statistics.median(a["requests_per_s"] / b["requests_per_s"] for a, b in zip(rows, baseline)),
            "p50_ms": statistics.median(r["p50_ms"] for r in rows),
            "failed": sum(r["failed"] for r in rows),
            **{
                key: statistics.median(r[key] for r in rows)
                for key in ("door_cpu_ms", "server_cpu_ms", "clients_cpu_ms", "all_cpu_ms", "at_most")
            },
        }
        # per round: the most the CPUs pass at its costs over what it passed (1 / the CPUs' busy share)
        ratios = sorted(r["at_most"] / r["requests_per_s"] if r["requests_per_s"] else float("inf") for r in rows)
        entry["headroom"] = statistics.median(ratios)
        entry["headroom_range"] = [ratios[0], ratios[-1]]
        entry["busy"] = statistics.median(r["busy"] for r in rows)
        table.append(entry)
        print(
            f"| {protocol} | {name} | {entry['requests_per_s']:.0f} | {entry['ratio']:.2f} | {entry['p50_ms']:.2f} | "
            + (f"{entry['door_cpu_ms']:.3f}" if name != "direct" else "-")
            + f" | {entry['server_cpu_ms']:.3f} | {entry['clients_cpu_ms']:.3f} | {entry['all_cpu_ms']:.3f} "
            f"| {entry['at_most']:.0f} | {entry['busy']:.2f} | {entry['failed']} |"
        )
    for entry in table:
        if entry["way"] == base:
            print(
                f"\n{entry['protocol']}, {base}: the door, tritonserver and the clients spend "
                f"{entry['all_cpu_ms']:.3f} ms of CPU per request together and keep {entry['busy']:.2f} of the "
                f"{cpus} CPUs busy; at its costs the CPUs pass at most {entry['headroom']:.2f} times what it passed "
                f"(median of the rounds' ratios, {entry['headroom_range'][0]:.2f}-{entry['headroom_range'][1]:.2f}). "
                "Unless more workers lower what tritonserver and the clients spend per request, that is as far as "
                "they can go on this machine."
            )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"rounds": args.rounds, "duration": args.duration, "rows": table}, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
