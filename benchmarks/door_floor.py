"""What one proxy hop in Python costs on this host, and what the HTTP front door adds to it:
the floor under `bench_door.py`'s figures.

A stand-in for tritonserver (an asyncio protocol that answers every KServe v2 request with
a fixed one-score answer, `--delay` ms after it arrived: the pipeline's time, without its
CPU) is reached five ways, each its own process, in rotating rounds:

- `direct`: the stand-in itself;
- `protocol`: a bare proxy on asyncio protocols (the request's head parsed by hand, passed
  on over one kept connection, the answer passed back): about the least a Python hop does;
- `aiohttp`: a bare proxy on aiohttp's low-level server (the door's server before it had
  its own, `frontdoor.http_server`) and the door's upstream connections
  (`frontdoor.upstream`), the body parsed as JSON: a common Python server's hop;
- `door`: the HTTP front door itself (`front.FrontDoor`: its HTTP server, the connection
  guard, the weigher, the gate, the fair queue), with a gRPC port it does not use;
- `nginx`: one nginx process passing requests on over kept connections
  (`native_proxy.py`): what a native hop costs; left out, with a line saying so, where nginx
  is not installed;
- `baseline` (with `--baseline-code DIR`): the same door by the package in DIR (a checkout
  of an earlier commit, `git worktree add`).

Closed loops of `--clients` raw-socket clients (threads of one process, one 0.9 kB text
per request in JSON, keep-alive) per way and round. Per (clients, way): requests/s, p50,
the p50 added to direct's, and the proxy process's CPU (user and system, read from just
before its clients start to just after they stop) per request, each the median over the
rounds; with a baseline, the door's CPU, requests/s and p50 against the baseline's as the
medians (and ranges) of their per-round ratios. The proxies and the door run this checkout's
package, the baseline DIR's (PYTHONPATH); the package each imports is printed and recorded.
Rounds rotate the order of the ways: a multiple of their number (4, and one more each for
nginx and a baseline) gives each the same share of every position.

    python benchmarks/door_floor.py --rounds 5 --duration 3 --delay 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable

ANSWER = json.dumps(
    {
        "model_name": "readability",
        "model_version": "1",
        "outputs": [{"name": "SCORE", "datatype": "FP32", "shape": [1, 1], "data": [-0.72]}],
    }
).encode()
TEXT = "When the young people returned to the ballroom, it presented a decidedly changed appearance. " * 10
BODY = json.dumps(
    {
        "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": [TEXT]}],
        "outputs": [{"name": "SCORE"}],
    }
).encode()
REQUEST = (
    b"POST /v2/models/readability/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY
)


def _length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


class _Messages(asyncio.Protocol):
    """An HTTP/1.1 connection that calls `message(head, body)` for each whole message."""

    transport: asyncio.Transport

    def __init__(self) -> None:
        self.buffer = b""

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            size = _length(self.buffer[:end])
            if len(self.buffer) < end + 4 + size:
                return
            head, body = self.buffer[:end], self.buffer[end + 4 : end + 4 + size]
            self.buffer = self.buffer[end + 4 + size :]
            self.message(head, body)

    def message(self, head: bytes, body: bytes) -> None:
        raise NotImplementedError


def stand_in(port: int, delay: float) -> None:
    """tritonserver's stand-in: the fixed answer, `delay` s after each request."""
    reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(ANSWER) + ANSWER

    class Answering(_Messages):
        def message(self, head: bytes, body: bytes) -> None:
            asyncio.get_running_loop().call_later(delay, self.transport.write, reply)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Answering, "127.0.0.1", port)
        await server.serve_forever()

    asyncio.run(main())


def protocol_proxy(port: int, upstream: int) -> None:
    """A bare proxy on asyncio protocols: one kept upstream connection per request in flight."""
    idle: list[Upstream] = []

    class Upstream(_Messages):
        def __init__(self) -> None:
            super().__init__()
            self.waiter: asyncio.Future | None = None

        def message(self, head: bytes, body: bytes) -> None:
            assert self.waiter is not None
            self.waiter.set_result((head, body))

    class Front(_Messages):
        def message(self, head: bytes, body: bytes) -> None:
            asyncio.get_running_loop().create_task(self.answer(head, body))

        async def answer(self, head: bytes, body: bytes) -> None:
            loop = asyncio.get_running_loop()
            if idle:
                connection = idle.pop()
            else:
                _, connection = await loop.create_connection(Upstream, "127.0.0.1", upstream)
            connection.waiter = loop.create_future()
            connection.transport.write(head + b"\r\n\r\n" + body)
            reply_head, reply_body = await connection.waiter
            idle.append(connection)
            self.transport.write(reply_head + b"\r\n\r\n" + reply_body)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Front, "127.0.0.1", port)
        await server.serve_forever()

    asyncio.run(main())


def aiohttp_proxy(port: int, upstream: int) -> None:
    """A bare proxy on aiohttp's low-level server and the door's upstream connections."""
    from aiohttp import web

    from readability_triton.frontdoor.upstream import Upstream

    async def main() -> None:
        connections = Upstream(f"127.0.0.1:{upstream}")

        async def handle(request: web.BaseRequest) -> web.Response:
            body = await request.read()
            json.loads(body)
            headers = [(k, v) for k, v in request.headers.items() if k.lower() not in ("host", "content-length")]
            reply = await connections.send(request.method, str(request.rel_url), headers, body)
            passed = [(k, v) for k, v in reply.headers if k.lower() != "content-length"]
            return web.Response(status=reply.status, body=reply.body, headers=passed)

        low = web.Server(handle, access_log=None)
        server = await asyncio.get_running_loop().create_server(low, "127.0.0.1", port)
        await server.serve_forever()

    asyncio.run(main())


def door(port: int, upstream: int, grpc_port: int) -> None:
    """The HTTP front door, as serve runs it (a thread of its own), before the stand-in."""
    from readability_triton.frontdoor.front import FrontDoor

    FrontDoor(
        f"127.0.0.1:{upstream}",
        "127.0.0.1:9",  # its gRPC port is open, and unused
        http_port=port,
        grpc_port=grpc_port,
        served=frozenset({"readability"}),
    ).start()
    threading.Event().wait()


def clients(port: int, count: int, seconds: float, out: str) -> None:
    """`count` closed loops on kept connections for `seconds`; their latencies to `out`.
    Says "ready" (stdout) once started, begins when told "go" (stdin), and says "done" once
    the loops have ended: the proxy's CPU is read between, not over the interpreter's start."""
    latencies: list[float] = []
    failed: list[str] = []
    print("ready", flush=True)
    sys.stdin.readline()
    stop = time.monotonic() + seconds

    def loop() -> None:
        connection = socket.create_connection(("127.0.0.1", port))
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while time.monotonic() < stop:
            started = time.perf_counter()
            connection.sendall(REQUEST)
            data = b""
            while True:
                chunk = connection.recv(65536)
                if not chunk:
                    failed.append("closed")
                    return
                data += chunk
                end = data.find(b"\r\n\r\n")
                if end >= 0 and len(data) >= end + 4 + _length(data[:end]):
                    break
            if not data.startswith(b"HTTP/1.1 200"):
                failed.append(data[:40].decode("latin-1"))
                return
            latencies.append(time.perf_counter() - started)
        connection.close()

    threads = [threading.Thread(target=loop) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print("done", flush=True)
    with open(out, "w", encoding="utf-8") as handle:
        json.dump({"latencies": latencies, "failed": failed}, handle)


#: The proxies, each `role(port, upstream, ...)` in a process of its own.
ROLES: dict[str, Callable[..., None]] = {"protocol": protocol_proxy, "aiohttp": aiohttp_proxy, "door": door}


def _wait_for(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:g} s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per way and round")
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--delay", type=float, default=5.0, help="the stand-in's answer time, ms")
    parser.add_argument(
        "--baseline-code", metavar="DIR", help="also the door of the package in DIR (holds readability_triton/)"
    )
    parser.add_argument("--json")
    parser.add_argument("role", nargs="*", help=argparse.SUPPRESS)  # a process of the benchmark
    args = parser.parse_args(argv)
    if args.role:  # one of the benchmark's processes
        name, *values = args.role
        if name == "stand-in":
            stand_in(int(values[0]), float(values[1]) / 1e3)
        else:
            ROLES[name](*(int(v) for v in values))
        return 0
    # here, not at the top: the proxies' processes import only what their role needs
    from bench_door import cpu_seconds
    from native_proxy import MISSING, nginx_binary, start

    from readability_triton.server.tritonserver import free_ports

    ports = free_ports(8)
    upstream, ways = ports[0], {"direct": ports[0], "protocol": ports[1], "aiohttp": ports[2], "door": ports[3]}
    if nginx_binary():
        ways["nginx"] = ports[7]
    else:
        print(MISSING, file=sys.stderr)
    me = os.path.abspath(__file__)
    here = os.path.dirname(os.path.dirname(me))  # this checkout: what the proxies and the door run

    def env_of(code: str) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [code, os.environ.get("PYTHONPATH")]))}

    codes = {"protocol": here, "aiohttp": here, "door": here}
    if args.baseline_code:
        ways["baseline"] = ports[5]
        codes["baseline"] = os.path.abspath(args.baseline_code)
    # which package each process imports (recorded: a wrong one would measure the wrong code)
    packages = {
        name: subprocess.run(
            [sys.executable, "-c", "import readability_triton as p; print(p.__file__)"],
            env=env_of(code),
            cwd=tempfile.gettempdir(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for name, code in codes.items()
    }
    processes = {"stand-in": subprocess.Popen([sys.executable, me, "stand-in", str(upstream), str(args.delay)])}
    grpc_ports = {"door": ports[4], "baseline": ports[6]}  # the doors' own, unused
    for name, code in codes.items():
        role, extra = ("door", [str(grpc_ports[name])]) if name in grpc_ports else (name, [])
        processes[name] = subprocess.Popen(
            [sys.executable, me, role, str(ways[name]), str(upstream), *extra], env=env_of(code)
        )
    nginx_folder = None
    counts = [int(n) for n in args.clients.split(",")]
    samples: dict[tuple[int, str], list[dict]] = {}
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import door_floor; "
        "door_floor.clients(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])"
    )
    try:
        if "nginx" in ways:
            nginx_folder = tempfile.mkdtemp(prefix="door-floor-nginx-")
            processes["nginx"] = start(nginx_folder, ways["nginx"], f"127.0.0.1:{upstream}")
        for port in ways.values():
            _wait_for(port)
        with tempfile.TemporaryDirectory(prefix="door-floor-") as tmp:
            out = os.path.join(tmp, "latencies.json")
            names = list(ways)
            for r in range(args.rounds):
                for count in counts:
                    for name in names[r % len(names) :] + names[: r % len(names)]:
                        pid = processes[name].pid if name != "direct" else None
                        loops = subprocess.Popen(
                            [sys.executable, "-c", code, os.path.dirname(me), str(ways[name]), str(count)]
                            + [str(args.duration), out],
                            stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE,
                            text=True,
                        )
                        assert loops.stdin is not None and loops.stdout is not None
                        if loops.stdout.readline().strip() != "ready":
                            raise RuntimeError(f"the clients for {name} did not start (exit {loops.wait()})")
                        before = cpu_seconds(pid) if pid else 0.0
                        loops.stdin.write("go\n")
                        loops.stdin.flush()
                        said = loops.stdout.readline().strip()
                        after = cpu_seconds(pid) if pid else 0.0
                        if said != "done" or loops.wait(60) != 0:
                            raise RuntimeError(f"the clients for {name} failed (exit {loops.wait()})")
                        with open(out, encoding="utf-8") as handle:
                            got = json.load(handle)
                        if got["failed"]:
                            raise RuntimeError(f"{name}, {count} clients: {got['failed'][:3]}")
                        n = len(got["latencies"])
                        sample = {
                            "requests_per_s": n / args.duration,
                            "p50_ms": 1e3 * statistics.median(got["latencies"]),
                            "cpu_ms": 1e3 * (after - before) / n if pid else 0.0,
                        }
                        samples.setdefault((count, name), []).append(sample)
                        print(
                            f"round {r + 1}: {count:2d} client(s) {name:>8}: "
                            f"{sample['requests_per_s']:7.0f} requests/s, p50 {sample['p50_ms']:6.3f} ms, "
                            f"CPU {sample['cpu_ms']:.3f} ms/request",
                            file=sys.stderr,
                        )
    finally:
        for process in processes.values():
            process.kill()
            process.wait()
        if nginx_folder:
            shutil.rmtree(nginx_folder, ignore_errors=True)
    rows = []
    print(
        f"\none proxy hop against the door ({args.rounds} rounds of {args.duration:g} s, answers after "
        f"{args.delay:g} ms; medians)\n"
    )
    for name, package in packages.items():
        print(f"- {name}: {package}")
    print("\n| clients | way | requests/s | p50 ms | p50 added ms | proxy CPU ms/request |")
    print("|---|---|---|---|---|---|")
    for count in counts:
        direct_p50 = statistics.median(s["p50_ms"] for s in samples[(count, "direct")])
        for name in ways:
            got = samples[(count, name)]
            row = {
                "clients": count,
                "way": name,
                "package": packages.get(name, ""),
                "requests_per_s": statistics.median(s["requests_per_s"] for s in got),
                "p50_ms": statistics.median(s["p50_ms"] for s in got),
                "cpu_ms": statistics.median(s["cpu_ms"] for s in got),
            }
            row["p50_added_ms"] = row["p50_ms"] - direct_p50
            rows.append(row)
            cpu = f"{row['cpu_ms']:.3f}" if name != "direct" else "-"
            print(
                f"| {count} | {name} | {row['requests_per_s']:.0f} | {row['p50_ms']:.2f} | "
                f"{row['p50_added_ms']:+.2f} | {cpu} |"
            )
    against = []
    if args.baseline_code:
        print(
            "\nthe door against the baseline's, in the same rounds (medians of the per-round ratios, and their range)\n"
        )
        print("| clients | CPU per request | requests/s | p50 |")
        print("|---|---|---|---|")
        for count in counts:
            pairs = list(zip(samples[(count, "door")], samples[(count, "baseline")]))
            ratios = {
                key: [d[key] / b[key] for d, b in pairs if b[key] > 0] for key in ("cpu_ms", "requests_per_s", "p50_ms")
            }
            against.append({"clients": count, **{key: sorted(values) for key, values in ratios.items()}})
            print(
                f"| {count} | "
                + " | ".join(
                    f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"
                    for v in (ratios["cpu_ms"], ratios["requests_per_s"], ratios["p50_ms"])
                )
                + " |"
            )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"rows": rows, "against_baseline": against}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
