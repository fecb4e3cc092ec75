"""The honest side of an abuse run (`abuse`): the `Target` (a running serve's ports, its
health port and, where it runs here, its process), honest clients over gRPC and over HTTP
from an address of their own, what they saw, and `beside_honest`, which runs an attack next
to them while it watches tritonserver's pid, restarts and memory."""

from __future__ import annotations

import http.client
import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TypedDict

from .. import contracts as C
from ..client.readability import text_input, triton_client
from .load import Outcome, percentiles, rss_by_process

#: Where honest clients beside an attack come from: a network of their own (`frontdoor.clients`
#: shares first among networks; the attacks use 127.0.0.0/24).
HONEST_SOURCE = "127.1.0.3"
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

    def status(self, timeout: float = 5.0) -> dict[str, Any]:
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
    honest: HonestSummary | None = None
    attack_counts: dict = field(default_factory=dict)
    crashes: int = 0  # tritonserver processes that died (a new pid, or serve's restart count)
    restarts: int = 0
    memory_mb: dict = field(default_factory=dict)  # tritonserver's: start, peak, end
    front: dict = field(default_factory=dict)  # the front door's counts afterwards
    events: list[str] = field(default_factory=list)  # the supervisor's, during the attack
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
            local.client.infer(
                C.ENSEMBLE,
                [text_input(local.module, list(texts))],
                outputs=[local.module.InferRequestedOutput(C.SCORE)],
                client_timeout=120,
            )
            return Outcome(started, time.perf_counter() - started, "good", True, texts=len(texts))
        except Exception as exc:  # noqa: BLE001 - an honest failure, counted
            return Outcome(started, time.perf_counter() - started, "good", False, first_line(exc), texts=len(texts))

    return work


def infer_body(texts: Sequence[str]) -> bytes:
    return json.dumps(
        {
            "inputs": [{"name": C.TEXT, "shape": [len(texts), 1], "datatype": "BYTES", "data": list(texts)}],
            "outputs": [{"name": C.SCORE}],
        }
    ).encode()


def http_honest(target: Target, source: str = "127.0.0.1", texts: Sequence[str] = HONEST_TEXTS[:1]):
    """A work function (`beside_honest`): KServe v2 JSON over HTTP/1.1 from `source` (an
    address of 127.0.0.0/8), keep-alive, no retry."""
    host, port = target.http.rsplit(":", 1)
    body = infer_body(texts)
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
            return Outcome(
                started,
                time.perf_counter() - started,
                "good",
                ok,
                None if ok else f"{reply.status} {data[:200].decode('utf-8', 'replace')}",
                texts=len(texts),
            )
        except Exception as exc:  # noqa: BLE001 - counted
            if getattr(local, "conn", None) is not None:
                local.conn.close()
            local.conn = None
            return Outcome(started, time.perf_counter() - started, "good", False, first_line(exc), texts=len(texts))

    return work


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


class HonestSummary(TypedDict):
    """What the honest clients of an attack saw."""

    requests: int
    ok: int
    success: float
    p50_ms: float
    p99_ms: float
    errors: dict[str, int]  # the four commonest, by message
    cancelled: int


def honest_summary(outcomes: Sequence[Outcome]) -> HonestSummary:
    outcomes = [o for o in outcomes if o.kind == "good"]
    cancelled = sum(1 for o in outcomes if not o.ok and "CANCELLED" in (o.error or ""))
    ok = [o for o in outcomes if o.ok]
    errors: dict[str, int] = {}
    for o in outcomes:
        if not o.ok:
            key = (o.error or "?")[:120]
            errors[key] = errors.get(key, 0) + 1
    lat = percentiles([o.latency for o in ok], (50, 99))
    return {
        "requests": len(outcomes),
        "ok": len(ok),
        "success": round(len(ok) / len(outcomes), 4) if outcomes else 0.0,
        "p50_ms": round(lat["p50"], 1),
        "p99_ms": round(lat["p99"], 1),
        "errors": dict(sorted(errors.items(), key=lambda kv: -kv[1])[:4]),
        "cancelled": cancelled,
    }


# -- running an attack beside honest clients ----------------------------------------------------


class _Watch:
    """Samples tritonserver's pid and memory while an attack runs."""

    def __init__(self, target: Target):
        self.target = target
        first = target.status()
        self.pids = [first.get("pid")]
        self.restarts0 = int(first.get("restarts") or 0)
        self.started = time.time()
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
            report.memory_mb = {
                "start": round(self.memory[0]),
                "peak": round(max(self.memory)),
                "end": round(self.memory[-1]),
            }
        report.front = last.get("front") or {}
        report.events = [f"{e['kind']}: {e['message']}" for e in last.get("events") or [] if e["at"] >= self.started]
        return report


def beside_honest(
    name: str,
    target: Target,
    attack: Callable[[float, dict], None],
    honest: Callable[[int, int], Outcome],
    seconds: float = 0.0,
    honest_clients: int = 2,
) -> Report:
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


COUNTING = threading.Lock()


def run_all(function: Callable, arguments) -> None:
    """`function(argument)` for each argument, each in its own thread, until all return."""
    threads = [threading.Thread(target=function, args=(a,), daemon=True) for a in arguments]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def tally(counts: dict, key: str) -> None:
    with COUNTING:
        counts[key] = counts.get(key, 0) + 1
