"""The clients production has, beside honest ones: each attack runs for a while next to
honest clients and reports what the honest clients saw (success rate, p99 latency), what
the attack got, and what the server did (crashes, restarts, memory).

An attack talks to a `Target`: the ports of a running `serve` (its front door, its health
port) and, where the server runs on this machine, its process (for memory and signals).
`benchmarks/abuse.py` starts `serve` and runs them all; the tests and the image's tests run
short ones.

- `deadlines`: gRPC clients whose deadlines (1, 5, 20, 50 ms) pass while the request is in
  flight (Triton 2.51 crashes on such cancellations, server#7368, when it sees them);
- `disconnects`: HTTP clients that send a request and close the connection at once, from
  their own address;
- `flood`: `score --batch-size 64` jobs, many at once (work, not requests);
- `huge`: 300 MB gRPC messages and HTTP bodies;
- `kill_stub`: kill -9 of a python-backend stub under load (local servers only);
- `sigterm`: SIGTERM to serve under load: every request in flight must be answered.
"""

from __future__ import annotations

import csv
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .. import contracts as C
from .load import Outcome, percentiles, process_name, process_tree, rss_by_process
from .readability import text_input, triton_client

HONEST_TEXTS = (
    "The cat sat on the mat. It was a warm day, and the children played in the garden until dusk.",
    "Notwithstanding the aforementioned stipulations, the lessee shall indemnify the lessor against all claims.",
    "Rivers carry water from the mountains to the sea. Along the way they shape valleys and feed forests.",
)


@dataclass
class Target:
    """A running serve: its front door (host:port), its health port, the admin key, and
    its process where it runs here (None for a container)."""

    http: str
    grpc: str
    health: str
    key: str = ""
    process: subprocess.Popen | None = None

    def status(self, timeout: float = 5.0) -> dict:
        """serve's /healthz (its JSON also when not ready); {} when it does not answer."""
        try:
            with urllib.request.urlopen(f"http://{self.health}/healthz", timeout=timeout) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as err:
            try:
                return json.loads(err.read())
            except ValueError:
                return {}
        except (OSError, ValueError):
            return {}

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.health}/readyz", timeout=5) as reply:
                return reply.status == 200
        except OSError:
            return False

    def wait_ready(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready():
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"serve exited with status {self.process.returncode} before it was ready")
            if time.monotonic() > deadline:
                raise RuntimeError(f"serve was not ready after {timeout:.0f} s")
            time.sleep(0.5)

    def server_memory_mb(self) -> float | None:
        """tritonserver's resident memory (MiB), where it runs here."""
        pid = self.status().get("pid")
        if self.process is None or not pid:
            return None
        return rss_by_process(int(pid)).get("tritonserver", 0) / 1024


@dataclass
class Report:
    """What one attack showed."""

    attack: str
    seconds: float
    honest: dict = field(default_factory=dict)  # requests, ok, success, p50_ms, p99_ms, errors
    attack_counts: dict = field(default_factory=dict)
    crashes: int = 0  # tritonserver processes that died (a new pid, or serve's restart count)
    restarts: int = 0
    memory_mb: dict = field(default_factory=dict)  # tritonserver's: start, peak, end
    front: dict = field(default_factory=dict)  # the front door's counts afterwards
    notes: list[str] = field(default_factory=list)


# -- honest clients ------------------------------------------------------------------------


def grpc_honest(target: Target, texts: Sequence[str] = HONEST_TEXTS[:1]):
    """A work function (`beside_honest`): tritonclient gRPC, one request of `texts`, no retry."""
    local = threading.local()

    def work(client: int, i: int) -> Outcome:
        if not hasattr(local, "client"):
            local.module, local.client = triton_client(target.grpc, "grpc")
        started = time.perf_counter()
        try:
            local.client.infer(C.ENSEMBLE, [text_input(local.module, list(texts))],
                               outputs=[local.module.InferRequestedOutput(C.SCORE)], client_timeout=120)
            return Outcome(started, time.perf_counter() - started, "good", True, texts=len(texts))
        except Exception as exc:  # noqa: BLE001 - an honest failure, counted
            return Outcome(started, time.perf_counter() - started, "good", False, _first_line(exc), texts=len(texts))

    return work


def _infer_body(texts: Sequence[str]) -> bytes:
    return json.dumps({"inputs": [{"name": C.TEXT, "shape": [len(texts), 1], "datatype": "BYTES",
                                   "data": list(texts)}], "outputs": [{"name": C.SCORE}]}).encode()


def http_honest(target: Target, source: str = "127.0.0.1", texts: Sequence[str] = HONEST_TEXTS[:1]):
    """A work function (`beside_honest`): KServe v2 JSON over HTTP/1.1 from `source` (an
    address of 127.0.0.0/8), keep-alive, no retry."""
    host, port = target.http.rsplit(":", 1)
    body = _infer_body(texts)
    local = threading.local()

    def work(client: int, i: int) -> Outcome:
        started = time.perf_counter()
        try:
            if getattr(local, "conn", None) is None:
                local.conn = http.client.HTTPConnection(host, int(port), timeout=120, source_address=(source, 0))
            local.conn.request("POST", f"/v2/models/{C.ENSEMBLE}/infer", body, {"Content-Type": "application/json"})
            reply = local.conn.getresponse()
            data = reply.read()
            ok = reply.status == 200
            return Outcome(started, time.perf_counter() - started, "good", ok,
                           None if ok else f"{reply.status} {data[:200].decode('utf-8', 'replace')}", texts=len(texts))
        except Exception as exc:  # noqa: BLE001 - counted
            if getattr(local, "conn", None) is not None:
                local.conn.close()
            local.conn = None
            return Outcome(started, time.perf_counter() - started, "good", False, _first_line(exc), texts=len(texts))

    return work


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


def honest_summary(outcomes: Sequence[Outcome]) -> dict:
    outcomes = [o for o in outcomes if o.kind == "good"]
    cancelled = sum(1 for o in outcomes if not o.ok and "CANCELLED" in (o.error or ""))
    ok = [o for o in outcomes if o.ok]
    errors: dict[str, int] = {}
    for o in outcomes:
        if not o.ok:
            key = (o.error or "?")[:120]
            errors[key] = errors.get(key, 0) + 1
    lat = percentiles([o.latency for o in ok], (50, 99))
    return {"requests": len(outcomes), "ok": len(ok), "success": round(len(ok) / len(outcomes), 4) if outcomes else 0.0,
            "p50_ms": round(lat["p50"], 1), "p99_ms": round(lat["p99"], 1),
            "errors": dict(sorted(errors.items(), key=lambda kv: -kv[1])[:4]), "cancelled": cancelled}


# -- running an attack beside honest clients ----------------------------------------------------


class _Watch:
    """Samples tritonserver's pid and memory while an attack runs."""

    def __init__(self, target: Target):
        self.target = target
        first = target.status()
        self.pids = [first.get("pid")]
        self.restarts0 = int(first.get("restarts") or 0)
        start = target.server_memory_mb()
        self.memory = [start] if start is not None else []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            now = self.target.status(timeout=2)
            if now.get("pid") and now.get("pid") != self.pids[-1]:
                self.pids.append(now.get("pid"))
            mem = self.target.server_memory_mb()
            if mem is not None:
                self.memory.append(mem)

    def finish(self, report: Report) -> Report:
        self._stop.set()
        self._thread.join()
        last = self.target.status()
        if last.get("pid") and last.get("pid") != self.pids[-1]:
            self.pids.append(last.get("pid"))
        report.restarts = int(last.get("restarts") or 0) - self.restarts0
        report.crashes = max(len(self.pids) - 1, report.restarts)
        end = self.target.server_memory_mb()
        if end is not None:
            self.memory.append(end)
        if self.memory:
            report.memory_mb = {"start": round(self.memory[0]), "peak": round(max(self.memory)),
                                "end": round(self.memory[-1])}
        report.front = last.get("front") or {}
        return report


def beside_honest(name: str, target: Target, attack: Callable[[float, dict], None],
                  honest: Callable[[int, int], Outcome], seconds: float = 0.0, honest_clients: int = 2) -> Report:
    """Run `attack(deadline, counts)` in a thread (its deadline `seconds` from now; an
    attack may also end on its own sooner) while `honest_clients` closed loops of `honest`
    run until it ends; the report."""
    watch = _Watch(target)
    counts: dict = {}
    thread = threading.Thread(target=attack, args=(time.monotonic() + seconds, counts), daemon=True)
    outcomes: list[list[Outcome]] = [[] for _ in range(honest_clients)]

    def loop(client: int) -> None:
        while thread.is_alive():
            outcomes[client].append(honest(client, len(outcomes[client])))

    started = time.perf_counter()
    thread.start()
    loops = [threading.Thread(target=loop, args=(c,), daemon=True) for c in range(honest_clients)]
    for t in loops:
        t.start()
    for t in [thread, *loops]:
        t.join()
    report = Report(name, round(time.perf_counter() - started, 1), honest_summary(sum(outcomes, [])), counts)
    return watch.finish(report)


_COUNTING = threading.Lock()


def _all(function: Callable, arguments) -> None:
    """`function(argument)` for each argument, each in its own thread, until all return."""
    threads = [threading.Thread(target=function, args=(a,), daemon=True) for a in arguments]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _count(counts: dict, key: str) -> None:
    with _COUNTING:
        counts[key] = counts.get(key, 0) + 1


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
                    _count(counts, "answered")
                except Exception as exc:  # noqa: BLE001 - expected: the deadline passes
                    text = str(exc)
                    _count(counts, "deadline" if "Deadline" in text or "deadline" in text else "other")
            client.close()

        _all(loop, deadlines_ms)

    return beside_honest("deadlines", target, attack, grpc_honest(target), seconds)


def disconnects(target: Target, seconds: float = 60.0, loops: int = 4, source: str = "127.0.0.2",
                honest_source: str = "127.0.0.3") -> Report:
    """`loops` threads from `source` that connect, send a whole inference request and close
    at once, beside 2 honest HTTP clients from `honest_source`."""
    host, port = target.http.rsplit(":", 1)
    body = _infer_body(list(HONEST_TEXTS))
    request = (f"POST /v2/models/{C.ENSEMBLE}/infer HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body

    def attack(deadline: float, counts: dict) -> None:
        def loop() -> None:
            while time.monotonic() < deadline:
                try:
                    with socket.create_connection((host, int(port)), timeout=5, source_address=(source, 0)) as sock:
                        sock.sendall(request)
                    _count(counts, "sent_and_closed")
                except OSError:
                    _count(counts, "connect_failed")
                    time.sleep(0.01)

        _all(lambda _: loop(), range(loops))

    return beside_honest("disconnects", target, attack, http_honest(target, honest_source), seconds)


def flood(target: Target, texts: Sequence[str], jobs: int = 16, batch: int = 64, seconds: float = 120.0,
          executable: Sequence[str] = (sys.executable, "-m", "readability_triton.cli")) -> Report:
    """`jobs` concurrent `score --batch-size <batch>` jobs over gRPC (each with its own
    copy of `texts`, retrying "busy" as `score` does), started again as they finish until
    `seconds` have passed, beside 2 honest HTTP clients from 127.0.0.3."""
    def attack(deadline: float, counts: dict) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            source = os.path.join(tmp, "texts.csv")
            with open(source, "w", encoding="utf-8", newline="") as handle:
                csv.writer(handle).writerows([["excerpt"], *([t] for t in texts)])

            def job(n: int) -> None:
                while time.monotonic() < deadline:
                    command = [*executable, "score", "--csv", source, "--out", os.path.join(tmp, f"{n}.csv"),
                               "--batch-size", str(batch), "--protocol", "grpc", "--url", target.grpc]
                    done = subprocess.run(command, capture_output=True, text=True)
                    _count(counts, "jobs_ok" if done.returncode == 0 else "jobs_failed")
                    if done.returncode != 0:
                        counts.setdefault("job_errors", []).append(done.stderr.strip()[-300:])

            _all(job, range(jobs))

    report = beside_honest("flood", target, attack, http_honest(target, "127.0.0.3"), seconds)
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
                _count(counts, "grpc_accepted")
            except Exception as exc:  # noqa: BLE001 - expected
                code = next((c for c in ("RESOURCE_EXHAUSTED", "INVALID_ARGUMENT") if c in str(exc)), "other")
                _count(counts, f"grpc_{code}")
                counts.setdefault("grpc_messages", []).append(_first_line(exc))
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
            _count(counts, f"http_{reply.status}")
            counts.setdefault("http_messages", []).append(reply.read()[:160].decode("utf-8", "replace"))
            conn.close()

    return beside_honest("huge", target, attack, grpc_honest(target))


def kill_stub(target: Target, model: str = C.BERT, seconds: float = 30.0) -> Report:
    """kill -9 of `model`'s python-backend stub 3 s into `seconds` of 2 honest gRPC
    clients; how long until ready again (local servers only)."""
    if target.process is None:
        raise ValueError("kill_stub needs a serve running on this machine")

    def attack(deadline: float, counts: dict) -> None:
        time.sleep(3.0)
        pid = int(target.status()["pid"])
        stubs = [p for p in process_tree(pid) if process_name(p) == f"stub:{model}"]
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
    report.attack_counts["cancelled"] = report.honest.pop("cancelled")
    return report
