"""The clients production has, beside honest ones: each attack runs for a while next to
honest clients and reports what the honest clients saw (success rate, p99 latency), what
the attack got, and what the server did (crashes, restarts, memory).

An attack talks to a `Target` (`honest`): the ports of a running `serve` (its front door, its
health port) and, where the server runs on this machine, its process (for memory and signals).
`benchmarks/abuse.py` starts `serve` and runs them all; the tests and the image's tests run
short ones.

- `deadlines`: gRPC clients whose deadlines (1, 5, 20, 50 ms) pass while the request is in
  flight (Triton 2.51 crashes on such cancellations, server#7368, when it sees them);
- `disconnects`: HTTP clients that send a request and close the connection at once, from
  their own address;
- `flood`: `score --batch-size 64 --concurrency 8` jobs, many at once (work, not requests);
- `huge`: 300 MB gRPC messages and HTTP bodies;
- `kill_stub`: kill -9 of a python-backend stub under load (local servers only);
- `sigterm`: SIGTERM to serve under load: every request in flight must be answered.
"""

from __future__ import annotations

import csv
import http.client
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Sequence

from .. import contracts as C
from .. import triton_messages as M
from ..client.readability import text_input, triton_client
from .honest import (
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
from .load import Outcome, process_name, process_tree


def _status(exc: BaseException) -> str | None:
    """The gRPC code name of a failed call's status (`triton_messages.status_name`)."""
    status = getattr(exc, "status", None)
    return M.status_name(status() if callable(status) else None)


# -- the attacks ---------------------------------------------------------------------------


def deadlines(target: Target, seconds: float = 60.0, deadlines_ms=(1, 5, 20, 50)) -> Report:
    """One gRPC thread per deadline, each sending its next request as soon as the last one
    ended (answered or given up), beside 2 honest gRPC clients."""

    def attack(deadline: float, counts: dict) -> None:
        def loop(ms: int) -> None:
            module, client = triton_client(target.grpc, "grpc")
            texts = list(HONEST_TEXTS)
            while time.monotonic() < deadline:
                try:
                    client.infer(C.ENSEMBLE, [text_input(module, texts)], client_timeout=ms / 1000)
                    tally(counts, "answered")
                except Exception as exc:  # noqa: BLE001 - expected: the deadline passes
                    late = _status(exc) == "DEADLINE_EXCEEDED"
                    tally(counts, "deadline" if late else "other")
            client.close()

        run_all(loop, deadlines_ms)

    return beside_honest("deadlines", target, attack, grpc_honest(target), seconds)


def disconnects(
    target: Target, seconds: float = 60.0, loops: int = 4, source: str = "127.0.0.2", honest_source: str = HONEST_SOURCE
) -> Report:
    """`loops` threads from `source` that connect, send a whole inference request and close
    at once, beside 2 honest HTTP clients from `honest_source`."""
    host, port = target.http.rsplit(":", 1)
    body = infer_body(list(HONEST_TEXTS))
    request = (
        f"POST /v2/models/{C.ENSEMBLE}/infer HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body

    def attack(deadline: float, counts: dict) -> None:
        def loop() -> None:
            while time.monotonic() < deadline:
                try:
                    with _connect(host, int(port), source) as sock:
                        sock.sendall(request)
                    tally(counts, "sent_and_closed")
                except OSError:
                    tally(counts, "connect_failed")
                    time.sleep(0.01)

        run_all(lambda _: loop(), range(loops))

    return beside_honest("disconnects", target, attack, http_honest(target, honest_source), seconds)


def _connect(host: str, port: int, source: str) -> socket.socket:
    """A TCP connection from `source` whose local port is chosen at connect time
    (IP_BIND_ADDRESS_NO_PORT, Linux): a port picked by bind() blocks that port for every
    connect() of the host while its closed socket waits out TIME_WAIT (60 s), so 4 loops
    making about 600 connections a second in all ran the host's 28,232 ephemeral ports out,
    and every client on it, the container's own health check included, failed with
    EADDRNOTAVAIL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if hasattr(socket, "IP_BIND_ADDRESS_NO_PORT"):
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_BIND_ADDRESS_NO_PORT, 1)
        sock.settimeout(5)
        sock.bind((source, 0))
        sock.connect((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


#: Requests in flight per flood job. The flood must offer more work than the door admits
#: (three quarters of the stated wait at the measured rate): with 2, the 16 jobs kept 2,048
#: texts in flight, and where the tiny set ran at 2,160-2,260 texts/s (a CI run and a local
#: one, 2026-12-04) the door admitted them all with a 2 s stated wait and refused none. With
#: 8 (8,192 texts) the same local run refused 271 as busy; it fills up to about 5,400 texts/s.
FLOOD_CONCURRENCY = 8


def flood(
    target: Target,
    texts: Sequence[str],
    jobs: int = 16,
    batch: int = 64,
    concurrency: int = FLOOD_CONCURRENCY,
    seconds: float = 120.0,
    executable: Sequence[str] = (sys.executable, "-m", "readability_triton.cli"),
) -> Report:
    """`jobs` concurrent `score --batch-size <batch> --concurrency <concurrency>` jobs over
    gRPC (each with its own copy of `texts`, retrying "busy" as `score` does), started again
    as they finish until `seconds` have passed, beside 2 honest HTTP clients from HONEST_SOURCE."""

    def attack(deadline: float, counts: dict) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            source = os.path.join(tmp, "texts.csv")
            with open(source, "w", encoding="utf-8", newline="") as handle:
                csv.writer(handle).writerows([["excerpt"], *([t] for t in texts)])

            def job(n: int) -> None:
                while time.monotonic() < deadline:
                    command = [
                        *executable,
                        "score",
                        "--csv",
                        source,
                        "--out",
                        os.path.join(tmp, f"{n}.csv"),
                        "--batch-size",
                        str(batch),
                        "--concurrency",
                        str(concurrency),
                        "--protocol",
                        "grpc",
                        "--url",
                        target.grpc,
                    ]
                    done = subprocess.run(command, capture_output=True, text=True)
                    tally(counts, "jobs_ok" if done.returncode == 0 else "jobs_failed")
                    if done.returncode != 0:
                        counts.setdefault("job_errors", []).append(done.stderr.strip()[-300:])

            run_all(job, range(jobs))

    report = beside_honest("flood", target, attack, http_honest(target, HONEST_SOURCE), seconds)
    report.attack_counts["texts_per_job"] = len(texts)
    return report


def huge(target: Target, size: int = 300 << 20, count: int = 4) -> Report:
    """`count` gRPC messages and `count` HTTP bodies of `size` bytes, one after the other,
    beside 2 honest gRPC clients; each must be refused as the client's error."""

    def attack(deadline: float, counts: dict) -> None:
        module, client = triton_client(target.grpc, "grpc")
        big = [text_input(module, ["x" * size])]
        for _ in range(count):
            try:
                client.infer(C.ENSEMBLE, big, client_timeout=120)
                tally(counts, "grpc_accepted")
            except Exception as exc:  # noqa: BLE001 - expected
                code = _status(exc)
                tally(counts, f"grpc_{code if code in ('RESOURCE_EXHAUSTED', 'INVALID_ARGUMENT') else 'other'}")
                counts.setdefault("grpc_messages", []).append(first_line(exc))
        client.close()
        host, port = target.http.rsplit(":", 1)
        for _ in range(count):
            conn = http.client.HTTPConnection(host, int(port), timeout=120)
            conn.putrequest("POST", f"/v2/models/{C.ENSEMBLE}/infer")
            conn.putheader("Content-Length", str(size))
            conn.endheaders()
            try:
                for _ in range(size >> 20):
                    conn.send(b"x" * (1 << 20))
            except OSError:
                pass  # the server answered and closed early: read its answer
            reply = conn.getresponse()
            tally(counts, f"http_{reply.status}")
            counts.setdefault("http_messages", []).append(reply.read()[:160].decode("utf-8", "replace"))
            conn.close()

    return beside_honest("huge", target, attack, grpc_honest(target))


def kill_stub(target: Target, model: str = C.BERT, seconds: float = 30.0) -> Report:
    """kill -9 of the python-backend stub that runs `model` (in a fused repository, the model
    it runs inside: bert's is preprocess's) 3 s into `seconds` of 2 honest gRPC clients; how
    long until ready again (local servers only)."""
    if target.process is None:
        raise ValueError("kill_stub needs a serve running on this machine")

    def attack(deadline: float, counts: dict) -> None:
        time.sleep(3.0)
        pid = int(target.status()["pid"])
        names = {p: process_name(p) for p in process_tree(pid)}
        stubs = [p for p, name in names.items() if name == f"stub:{model}"]
        if not stubs and model in C.FUSED_INTO:  # the fused repository: bert runs in preprocess's stub
            stubs = [p for p, name in names.items() if name == f"stub:{C.FUSED_INTO[model]}"]
        if not stubs:
            counts["error"] = f"no stub of {model} found"
            return
        killed = time.monotonic()
        os.kill(stubs[0], signal.SIGKILL)
        time.sleep(0.2)
        while time.monotonic() < deadline and not (target.ready() and int(target.status().get("pid") or 0) != pid):
            time.sleep(0.1)
        counts["healed_after_s"] = round(time.monotonic() - killed, 1) if target.ready() else None

    return beside_honest("kill_stub", target, attack, grpc_honest(target), seconds)


def sigterm(target: Target, clients: int = 8, after: float = 5.0) -> Report:
    """SIGTERM to serve after `after` s of `clients` honest gRPC clients; every request sent
    before it must be answered, and serve must exit 0 (local servers only). Requests sent
    after it are refused (the server is stopping) and not counted as honest ones."""
    if target.process is None:
        raise ValueError("sigterm needs a serve running on this machine")
    process, honest = target.process, grpc_honest(target)
    signalled: list[float] = []

    def work(client: int, i: int) -> Outcome:
        outcome = honest(client, i)
        if signalled and outcome.start >= signalled[0]:
            outcome.kind = "after"
        return outcome

    def attack(deadline: float, counts: dict) -> None:
        time.sleep(after)
        signalled.append(time.perf_counter())
        process.send_signal(signal.SIGTERM)
        counts["exit_status"] = process.wait(timeout=120)

    report = beside_honest("sigterm", target, attack, work, honest_clients=clients)
    report.attack_counts["cancelled"] = report.honest["cancelled"] if report.honest else 0
    return report
