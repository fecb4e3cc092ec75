"""Closed-loop load against a served ensemble, and what to measure while it runs.

- `closed_loop(work, clients, seconds)`: `clients` threads, each sending its next request
  as soon as the previous one is answered, until `seconds` have passed; `work(client,
  i)` sends request `i` of `client` and returns an `Outcome`.
- `mixed_worker(...)`: the soak's `work`: good texts whose answers are checked against
  known scores, and one bad request (refused by the first step) per `bad_every` - 1 good ones.
- `process_tree(pid)` / `rss_by_process(pid)`: the server and its python-backend stubs,
  with their resident memory (read from /proc).
- `summarize(outcomes, ...)`: counts, failures of good requests, latency percentiles in
  time windows.

One tritonclient per thread (tritonclient's HTTP client is not thread-safe).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .. import contracts as C
from ..client.readability import ThreadClients, is_busy, text_input


@dataclass
class Outcome:
    start: float  # when the request was sent: time.perf_counter(), made relative to the
    #               load's beginning by closed_loop
    latency: float  # seconds
    kind: str  # "good" or "bad"
    ok: bool  # the server answered (False: it refused or failed)
    error: str | None = None
    wrong: bool = False  # an answer that differs from the known one
    texts: int = 1  # texts the request carried


def closed_loop(
    work: Callable[[int, int], Outcome], clients: int, seconds: float, progress: Callable[[float], None] | None = None
) -> list[Outcome]:
    """Run `clients` closed loops of `work` for `seconds`; all outcomes, in no order."""
    results: list[list[Outcome]] = [[] for _ in range(clients)]
    begin = time.perf_counter()
    deadline = begin + seconds
    failures: list[BaseException] = []

    def loop(client: int) -> None:
        i = 0
        try:
            while time.perf_counter() < deadline:
                results[client].append(work(client, i))
                i += 1
        except BaseException as exc:  # noqa: BLE001 - reported after the join
            failures.append(exc)

    threads = [threading.Thread(target=loop, args=(c,), daemon=True) for c in range(clients)]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        time.sleep(0.5)
        if progress is not None:
            progress(min(time.perf_counter() - begin, seconds))
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    outcomes = [o for per_client in results for o in per_client]
    for o in outcomes:
        o.start -= begin
    return outcomes


def mixed_worker(
    url: str,
    protocol: str,
    texts: Sequence[str],
    expected: np.ndarray,
    bad: Sequence[bytes],
    bad_every: int = 9,
    tolerance: float = 1e-4,
    model: str = C.ENSEMBLE,
    sizes: tuple[int, int] = (1, 1),
    busy_patience: float = 0.0,
):
    """A `work` function for `closed_loop`: request i of a client is bad when
    (i + client) % bad_every == bad_every - 1, else good. A request carries between
    `sizes[0]` and `sizes[1]` texts (varying from request to request); a good one sends
    consecutive texts[j:] and every SCORE must equal expected[j:] within `tolerance`; a bad
    one carries one bad payload among good texts and must be refused. A request refused as
    busy (a full server) is sent again with backoff, as clients do, for at most
    `busy_patience` seconds. Returns (work, close) where close() closes the clients."""

    clients = ThreadClients(url, protocol)
    low, high = sizes

    def work(client: int, i: int) -> Outcome:
        module, triton = clients.get()
        is_bad = bad_every > 0 and (i + client) % bad_every == bad_every - 1
        n = low + (client * 31 + i * 17) % (high - low + 1)
        j = (client * 7919 + i) % len(texts)
        rows = [(j + k) % len(texts) for k in range(n)]
        payloads = [texts[r].encode("utf-8") for r in rows]
        if is_bad:
            payloads[(client + i) % n] = bad[(client * 7919 + i) % len(bad)]
        inputs, outputs = [text_input(module, payloads)], [module.InferRequestedOutput(C.SCORE)]
        started = time.perf_counter()
        tries = 0
        while True:
            try:
                result = triton.infer(model, inputs, outputs=outputs)
                break
            except Exception as exc:  # noqa: BLE001 - refusals and transport errors alike
                if is_busy(exc) and time.perf_counter() - started < busy_patience:
                    time.sleep(min(2.0, 0.1 * 2**tries))
                    tries += 1
                    continue
                return Outcome(
                    started,
                    time.perf_counter() - started,
                    "bad" if is_bad else "good",
                    False,
                    str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__,
                    texts=n,
                )
        latency = time.perf_counter() - started
        score = result.as_numpy(C.SCORE)
        wrong = (not is_bad) and (
            score is None or score.shape != (n, 1) or not np.all(np.abs(score[:, 0] - expected[rows]) <= tolerance)
        )
        return Outcome(started, latency, "bad" if is_bad else "good", True, None, bool(wrong), texts=n)

    return work, clients.close


# ------------------------------------------------------------------ processes


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _read(f"/proc/{entry}/stat")
            if stat:
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, ()))
    return out


def process_name(pid: int) -> str:
    """ "tritonserver", or the model a python-backend stub serves (from its command line)."""
    args = _read(f"/proc/{pid}/cmdline").split("\0")
    if args and args[0].endswith("triton_python_backend_stub") and len(args) > 1:
        parts = args[1].split(os.sep)  # .../<model>/<version>/model.py
        return f"stub:{parts[-3]}" if len(parts) >= 3 else "stub"
    return os.path.basename(args[0]) if args and args[0] else f"pid {pid}"


def rss_by_process(pid: int) -> dict[str, int]:
    """Resident memory (KiB) of the server `pid` and of each of its stubs, by name."""
    out = {}
    for child in process_tree(pid):
        for line in _read(f"/proc/{child}/status").splitlines():
            if line.startswith("VmRSS:"):
                name = process_name(child)
                out[name if name not in out else f"{name}#{child}"] = int(line.split()[1])
    return out


# ------------------------------------------------------------------ reporting


def percentiles(latencies, qs=(50, 95, 99)) -> dict[str, float]:
    values = np.asarray(latencies, dtype=np.float64) * 1e3
    return {f"p{q}": float(np.percentile(values, q)) if values.size else float("nan") for q in qs}


def summarize(outcomes: Sequence[Outcome], seconds: float, window: float = 15.0) -> dict[str, Any]:
    """Counts and failures by kind, and good-request latency (ms) in the first and the last
    `window` seconds."""
    good = [o for o in outcomes if o.kind == "good"]
    bad = [o for o in outcomes if o.kind == "bad"]
    failed = [o for o in good if not o.ok]
    wrong = [o for o in good if o.ok and o.wrong]
    errors: dict[str, int] = {}
    for o in failed:
        errors[o.error or "?"] = errors.get(o.error or "?", 0) + 1
    first = [o.latency for o in good if o.ok and o.start < window]
    last = [o.latency for o in good if o.ok and o.start >= seconds - window]
    return {
        "requests": len(outcomes),
        "good": len(good),
        "bad": len(bad),
        "good_failed": len(failed),
        "good_wrong": len(wrong),
        "bad_accepted": sum(1 for o in bad if o.ok),
        "good_errors": dict(sorted(errors.items(), key=lambda kv: -kv[1])[:5]),
        "requests_per_s": len(outcomes) / seconds if seconds else float("nan"),
        "texts_scored": sum(o.texts for o in good if o.ok),
        "latency_first_ms": percentiles(first),
        "latency_last_ms": percentiles(last),
        "latency_ms": percentiles([o.latency for o in good if o.ok]),
        "per_minute": [
            {
                "minute": m,
                "texts_per_s": round(
                    sum(o.texts for o in good if o.ok and m * 60 <= o.start < (m + 1) * 60)
                    / min(60.0, seconds - m * 60),
                    2,
                ),
                "p99_ms": round(
                    percentiles([o.latency for o in good if o.ok and m * 60 <= o.start < (m + 1) * 60])["p99"], 1
                ),
            }
            for m in range(int(np.ceil(seconds / 60)))
        ],
    }
