"""`readability-triton bench`: closed-loop load on the served ensemble, where the time goes
inside it, and the same artifacts in process, in one run.

For every (texts per request, concurrency) row: `concurrency` clients send requests of
`texts_per_request` real excerpts back to back for `duration` seconds; the row reports
texts/s, request latency p50/p95/p99 and errors, and, from Triton's statistics extension
(the difference over the row), for every composing model: requests, inferences (texts),
executions, the average batch size, and the queue and compute (input, infer, output) time per request and
per execution (see `breakdown`). The in-process pipeline (`pipeline.Pipeline`: the same runners on
the same artifacts, with the served BERT file and thread plan, one thread of calls,
`texts_per_request` texts per call) runs on the same texts right before and right after each
row (the mean of the two), which gives the served/in-process ratio.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import contracts as C
from ..client.readability import ThreadClients, text_input, triton_client
from ..progress import no_progress
from .load import Outcome, closed_loop, percentiles
from .perf import PerfAnalyzerRow, perf_analyzer

#: The models whose statistics the breakdown shows, in the order of the graph.
#: (`validate` comes first in the parallel wiring only; a model the server lacks is left out.)
STEPS = (C.VALIDATE, C.FEATURIZE, C.FOREST, C.PREPROCESS, C.BERT, C.POSTPROCESS)
_DURATIONS = ("queue", "compute_input", "compute_infer", "compute_output")


@dataclass
class Row:
    texts_per_request: int
    concurrency: int
    seconds: float
    requests: int
    errors: int
    texts_per_s: float
    latency_ms: dict[str, float]
    models: dict[str, dict] = field(default_factory=dict)  # the per-model breakdown
    in_process_texts_per_s: float | None = None
    #: perf_analyzer's measurement of the same row, right after bench's (`--engine both`)
    perf_analyzer: PerfAnalyzerRow | None = None

    @property
    def served_vs_in_process(self) -> float | None:
        if not self.in_process_texts_per_s:
            return None
        return self.texts_per_s / self.in_process_texts_per_s

    @property
    def perf_analyzer_vs_in_process(self) -> float | None:
        """perf_analyzer's texts/s over the same in-process rate: the served/in-process ratio
        with a C++ client, which takes less CPU per request than tritonclient's Python one
        (on a shared host, the client's CPU is taken from the server's)."""
        if not self.in_process_texts_per_s or not self.perf_analyzer:
            return None
        return self.perf_analyzer["texts_per_s"] / self.in_process_texts_per_s

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["served_vs_in_process"] = self.served_vs_in_process
        out["perf_analyzer_vs_in_process"] = self.perf_analyzer_vs_in_process
        return out


def model_statistics(url: str, protocol: str) -> dict[str, dict]:
    """{model: its statistics} from Triton's statistics extension (every loaded model)."""
    _, client = triton_client(url, protocol)
    try:
        if protocol == "http":
            stats = client.get_inference_statistics()
        else:
            stats = client.get_inference_statistics(as_json=True)
    finally:
        client.close()
    return {entry["name"]: entry for entry in stats.get("model_stats", [])}


def _counts(stats: dict[str, dict]) -> dict:
    return {name: (entry.get("inference_count"), entry.get("execution_count")) for name, entry in stats.items()}


def settled_statistics(
    url: str, protocol: str, interval: float = 0.05, timeout: float = 2.0, read=model_statistics
) -> dict[str, dict]:
    """`model_statistics` once the counts stop moving: two reads `interval` s apart that
    agree (or the last read after `timeout` s). A client holds its last answers before
    Triton has counted them: python_backend reports an execute's statistics when the
    execute has returned, after its responses were sent, so a snapshot taken the moment
    the last reply arrives can miss the last executions."""
    deadline = time.monotonic() + timeout
    stats = read(url, protocol)
    while True:
        time.sleep(interval)
        again = read(url, protocol)
        if _counts(again) == _counts(stats) or time.monotonic() > deadline:
            return again
        stats = again


def _ns(stats: dict, key: str) -> tuple[int, int]:
    value = stats.get("inference_stats", {}).get(key, {})
    return int(value.get("count", 0)), int(value.get("ns", 0))


def _batch_ns(stats: dict, key: str) -> tuple[int, int]:
    """(executions, ns) of compute phase `key`, summed over the batch sizes of
    `batch_stats` (there, a count is one execution and ns its duration)."""
    count = ns = 0
    for entry in stats.get("batch_stats", []) or []:
        value = entry.get(key, {})
        count, ns = count + int(value.get("count", 0)), ns + int(value.get("ns", 0))
    return count, ns


def breakdown(before: dict[str, dict], after: dict[str, dict], models=STEPS) -> dict[str, dict]:
    """Per model, over the interval between two `model_statistics` snapshots: requests
    (successful ones), inferences (texts: Triton counts each batch row), executions, the
    average batch size in texts (inferences per execution: what dynamic batching
    achieved); per request, the time it waited in the queue and the time it spent in each
    compute phase (inference_stats: a request in a batch is charged the batch's time, so
    this is the step's share of a request's latency); per execution, the time one
    execution took in each phase (batch_stats)."""
    out = {}
    for model in models:
        if model not in after:
            continue
        a, b = after[model], before.get(model, {})
        inferences = int(a.get("inference_count", 0)) - int(b.get("inference_count", 0))
        executions = int(a.get("execution_count", 0)) - int(b.get("execution_count", 0))
        requests = _ns(a, "success")[0] - _ns(b, "success")[0]
        hits = _ns(a, "cache_hit")[0] - _ns(b, "cache_hit")[0]
        misses = _ns(a, "cache_miss")[0] - _ns(b, "cache_miss")[0]
        row: dict = {
            "requests": requests,
            "inferences": inferences,
            "executions": executions,
            "failed": _ns(a, "fail")[0] - _ns(b, "fail")[0],
            "average_batch": inferences / executions if executions else None,
            "cache_hits": hits,
            "cache_hit_rate": hits / (hits + misses) if hits + misses else None,
        }
        for key in _DURATIONS:
            (ca, na), (cb, nb) = _ns(a, key), _ns(b, key)
            count, ns = ca - cb, na - nb
            row[f"{key}_ms_per_request"] = ns / count / 1e6 if count else None
            if key != "queue":
                (ea, ta), (eb, tb) = _batch_ns(a, key), _batch_ns(b, key)
                row[f"{key}_ms_per_execution"] = (ta - tb) / (ea - eb) / 1e6 if ea - eb else None
        out[model] = row
    return out


def compute_ms(row: dict, per: str = "request") -> float:
    """A `breakdown` row's compute in ms, per request (a request in a batch is charged the
    batch's time) or per `execution`: input + infer + output (a phase Triton did not report
    counts 0)."""
    return sum(row.get(f"{key}_ms_per_{per}") or 0.0 for key in _DURATIONS[1:])


def _work(url: str, protocol: str, texts, per_request: int):
    clients = ThreadClients(url, protocol)

    def work(client: int, i: int) -> Outcome:
        module, triton = clients.get()
        start = (client * 7919 + i * per_request) % len(texts)
        tensor = text_input(module, [texts[(start + k) % len(texts)] for k in range(per_request)])
        begin = time.perf_counter()
        try:
            triton.infer(C.ENSEMBLE, [tensor], outputs=[module.InferRequestedOutput(C.SCORE)])
        except Exception as exc:  # noqa: BLE001 - counted as an error of the row
            return Outcome(begin, time.perf_counter() - begin, "good", False, str(exc).splitlines()[0][:200])
        return Outcome(begin, time.perf_counter() - begin, "good", True)

    return work, clients.close


def in_process_rate(pipeline, texts, per_request: int, seconds: float) -> float:
    """Texts per second of `pipeline` on `texts`, `per_request` texts per call, one thread."""
    pipeline(texts[:per_request])  # warm-up
    done, begin, at = 0, time.perf_counter(), 0
    while time.perf_counter() - begin < seconds:
        chunk = [texts[(at + k) % len(texts)] for k in range(per_request)]
        pipeline(chunk, batch_size=per_request)
        done, at = done + per_request, at + per_request
    return done / (time.perf_counter() - begin)


def run(
    url: str,
    protocol: str,
    texts,
    concurrency=(1, 4, 16),
    texts_per_request=(1,),
    duration: float = 10.0,
    pipeline=None,
    warmup: float = 2.0,
    progress=no_progress,
    perf_analyzer_input: str | None = None,
    perf_analyzer_binary: str = "perf_analyzer",
) -> list[Row]:
    """All rows (see the module doc); `progress` (see `readability_triton.progress`) counts the
    seconds of load measured.
    With `perf_analyzer_input` (a perf-input file of the same texts), perf_analyzer measures
    each row of one text per request right after bench does (`Row.perf_analyzer`)."""
    rows = []
    done = 0.0
    bar = (progress or no_progress)(
        total=int(len(concurrency) * len(texts_per_request) * duration), desc="bench", unit="s"
    )
    shown = 0

    def advance(seconds: float) -> None:
        nonlocal shown
        now = int(done + seconds)
        bar.update(now - shown)
        shown = now

    with bar:
        for per_request in texts_per_request:
            for clients in concurrency:
                # The in-process rate right before and right after the row, averaged: the ratio
                # compares like with like even when the machine's speed drifts between rows.
                samples = [in_process_rate(pipeline, texts, per_request, min(duration, 10.0) / 2)] if pipeline else []
                work, close = _work(url, protocol, texts, per_request)
                try:
                    if warmup:
                        closed_loop(work, clients, warmup)
                    before = settled_statistics(url, protocol)
                    outcomes = closed_loop(work, clients, duration, progress=advance)
                    after = settled_statistics(url, protocol)
                finally:
                    close()
                done += duration
                if pipeline is not None:
                    samples.append(in_process_rate(pipeline, texts, per_request, min(duration, 10.0) / 2))
                ok = [o for o in outcomes if o.ok]
                rows.append(
                    Row(
                        per_request,
                        clients,
                        duration,
                        len(outcomes),
                        len(outcomes) - len(ok),
                        len(ok) * per_request / duration,
                        percentiles([o.latency for o in ok], (50, 95, 99)),
                        breakdown(before, after),
                        statistics.fmean(samples) if samples else None,
                    )
                )
                if perf_analyzer_input and per_request == 1:
                    rows[-1].perf_analyzer = perf_analyzer(
                        url, protocol, perf_analyzer_input, clients, duration, perf_analyzer_binary
                    )
    return rows


def ratio_note(rows: list[Row], in_process: str | None = None, served: str | None = None) -> str | None:
    """Why a row's served/in-process ratio is above 1, where one is: what the two sides ran
    (`in_process`, `served`: each side's BERT in words), and what else makes a server
    compute the same texts faster than the in-process row; None where none is above 1."""
    above = [r for r in rows if (r.served_vs_in_process or 0) > 1]
    if not above:
        return None
    shown = ", ".join(f"{r.served_vs_in_process:.2f} at {r.concurrency} client(s)" for r in above)
    lines = [
        f"served/in-process above 1 ({shown}): the server computed these texts faster than this process did.",
        "The in-process row is one thread of calls, timed right before and after each row"
        + (f", on {in_process}" if in_process else "")
        + (f"; the server's bert: {served}." if served else "."),
        "A server is faster where it runs a step on another engine, file or thread plan (a native backend, with "
        "its own build and threads; with --url, the in-process row runs the artifacts' own default, which need "
        "not be what the server runs: --repository runs both sides from one repository), where its clients' "
        "requests overlap (more than one client: the steps of different requests run at once), where its "
        "response cache answers repeated texts (the breakdown's cache hits), or where the host was busier "
        "during the in-process runs (rerun to see).",
    ]
    cached = [r for r in above if any((m.get("cache_hits") or 0) > 0 for m in r.models.values())]
    if cached:
        lines.append(f"Here the response cache answered repeats in {len(cached)} of these row(s).")
    return "\n".join(lines)


def print_rows(rows: list[Row], out) -> None:
    print(
        f"{'texts/req':>9} {'clients':>7} {'texts/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'errors':>6} "
        f"{'in-process':>10} {'served/in-process':>17}",
        file=out,
    )
    for r in rows:
        inproc = f"{r.in_process_texts_per_s:>10.1f}" if r.in_process_texts_per_s else f"{'-':>10}"
        ratio = f"{r.served_vs_in_process:>17.2f}" if r.served_vs_in_process else f"{'-':>17}"
        print(
            f"{r.texts_per_request:>9} {r.concurrency:>7} {r.texts_per_s:>8.1f} {r.latency_ms['p50']:>8.1f} "
            f"{r.latency_ms['p95']:>8.1f} {r.latency_ms['p99']:>8.1f} {r.errors:>6} {inproc} {ratio}",
            file=out,
        )
    measured = [r for r in rows if r.perf_analyzer]
    if measured:
        print("\nperf_analyzer, the same rows right after (one text per request):", file=out)
        print(
            f"{'clients':>7} {'texts/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6} {'bench texts/s':>13} "
            f"{'perf_analyzer/bench':>19} {'perf_analyzer/in-process':>24}",
            file=out,
        )
        for r in measured:
            pa = r.perf_analyzer
            assert pa is not None  # measured: the rows perf_analyzer ran for
            versus = r.perf_analyzer_vs_in_process
            against = f"{versus:.2f}" if versus is not None else "-"
            print(
                f"{r.concurrency:>7} {pa['texts_per_s']:>8.1f} {pa['p50_ms']:>8.1f} {pa['p99_ms']:>8.1f} "
                f"{pa['errors']:>6} {r.texts_per_s:>13.1f} {pa['texts_per_s'] / r.texts_per_s:>19.2f} {against:>24}",
                file=out,
            )
    for r in rows:
        print(
            f"\nper model, {r.texts_per_request} text(s) per request, {r.concurrency} client(s): requests, texts, "
            "executions, average batch (texts); ms per request: queue | compute input / infer / output; "
            "ms per execution: infer",
            file=out,
        )
        for model, m in r.models.items():

            def ms(key, m=m):
                value = m.get(key)
                return f"{value:7.2f}" if value is not None else f"{'-':>7}"

            batch = f"{m['average_batch']:.1f}" if m["average_batch"] else "-"
            cached = (
                f"  cache hits {m['cache_hits']} ({m['cache_hit_rate']:.0%})"
                if m.get("cache_hit_rate") is not None
                else ""
            )
            print(
                f"  {model:<12} {m['requests']:>6} req {m['inferences']:>6} texts {m['executions']:>6} exec  "
                f"batch {batch:>5}  queue {ms('queue_ms_per_request')} | {ms('compute_input_ms_per_request')} "
                f"{ms('compute_infer_ms_per_request')} {ms('compute_output_ms_per_request')}  "
                f"exec {ms('compute_infer_ms_per_execution')}{cached}",
                file=out,
            )


def plot(rows: list[Row], path: str, title: str = "readability ensemble") -> None:
    """Throughput and p50/p99 latency against concurrency (one line per texts-per-request,
    the in-process rate dashed), and a stacked bar of the time per request in each model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    for per_request in sorted({r.texts_per_request for r in rows}):
        part = [r for r in rows if r.texts_per_request == per_request]
        x = [r.concurrency for r in part]
        (line,) = axes[0].plot(x, [r.texts_per_s for r in part], "o-", label=f"served, {per_request} text(s)/request")
        color = line.get_color()  # one colour per texts-per-request, in both panels
        if part[0].in_process_texts_per_s:
            axes[0].axhline(
                part[0].in_process_texts_per_s,
                linestyle="--",
                color=color,
                label=f"in process, {per_request} text(s)/call",
            )
        axes[1].plot(
            x, [r.latency_ms["p99"] for r in part], "o-", color=color, label=f"p99, {per_request} text(s)/request"
        )
        axes[1].plot(
            x, [r.latency_ms["p50"] for r in part], "s:", color=color, label=f"p50, {per_request} text(s)/request"
        )
    for ax, ylabel in ((axes[0], "texts per second"), (axes[1], "request latency (ms)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({r.concurrency for r in rows}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("concurrent clients")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_title("throughput")
    axes[1].set_title("latency")
    labels = [f"{r.texts_per_request}×{r.concurrency}" for r in rows]
    bottom = np.zeros(len(rows))
    models = [m for m in STEPS if any(m in r.models for r in rows)]
    for model in models:
        values = np.array(
            [
                (r.models.get(model, {}).get("queue_ms_per_request") or 0.0) + compute_ms(r.models.get(model, {}))
                for r in rows
            ]
        )
        axes[2].bar(labels, values, bottom=bottom, label=model)
        bottom += values
    axes[2].set_title("time per request in each model (queue + compute)")
    axes[2].text(
        0.01,
        0.99,
        "stacked over all steps; the two branches run in parallel,\nso the stack can exceed the request latency",
        transform=axes[2].transAxes,
        fontsize=7,
        va="top",
        ha="left",
        color="dimgrey",
    )
    axes[2].set_xlabel("texts per request × clients")
    axes[2].set_ylabel("ms")
    axes[2].legend(fontsize=8, loc="upper right")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def summary(rows: list[Row]) -> dict[str, Any]:
    return {
        "rows": [r.to_dict() for r in rows],
        "best_texts_per_s": max((r.texts_per_s for r in rows), default=None),
        "median_p50_ms": statistics.median(r.latency_ms["p50"] for r in rows) if rows else None,
    }
