"""Triton's own load generator, perf_analyzer, as `bench --engine both` runs it beside the
project's: its input file (the same texts) and one measurement, in `bench`'s units."""

from __future__ import annotations

import csv
import os
import subprocess
import tempfile
from typing import TypedDict

from .. import contracts as C


class PerfAnalyzerRow(TypedDict):
    """One perf_analyzer measurement, in `bench`'s units."""

    texts_per_s: float
    p50_ms: float
    p99_ms: float
    requests: int
    errors: int
    command: str


def perf_input(texts) -> dict[str, list]:
    """perf_analyzer's --input-data document: one entry per text, the ensemble's TEXT as a
    BYTES tensor of shape [1] (its documented layout)."""
    return {"data": [{C.TEXT: {"content": [text], "shape": [1]}} for text in texts]}


#: What perf_analyzer prints when no three windows agree (it then advises longer windows).
UNSTABLE = "Failed to obtain stable measurement"


def perf_analyzer(
    url: str, protocol: str, input_data: str, clients: int, duration: float, binary: str = "perf_analyzer"
) -> PerfAnalyzerRow:
    """One measurement by Triton's perf_analyzer: `clients` concurrent requests of one text
    each (taken in turn from the `input_data` file) for windows of `duration` s, until three
    agree within 25 % on throughput and average latency (at most 10 windows; its default
    10 % is rarely met on 2 shared cores, and judging by p99 (`--percentile`) never was); where
    even that fails, once more with windows twice as long, as perf_analyzer itself advises.
    {"texts_per_s", "p50_ms", "p99_ms", "requests", "errors"} (from its CSV report)."""

    with tempfile.TemporaryDirectory(prefix="perf-analyzer-") as tmp:
        report = f"{tmp}/report.csv"
        for window in (duration, duration * 2):  # unstable windows: once more, twice as long (its own advice)
            command = [
                binary,
                "-m",
                C.ENSEMBLE,
                "-u",
                url,
                "-i",
                protocol,
                "--input-data",
                input_data,
                "--concurrency-range",
                f"{clients}:{clients}",
                "--measurement-interval",
                str(int(window * 1000)),
                "--stability-percentage",
                "25",
                "--max-trials",
                "10",
                "-f",
                report,
            ]
            done = subprocess.run(command, capture_output=True, text=True, timeout=window * 22 + 120)
            if done.returncode == 0 or UNSTABLE not in done.stdout + done.stderr:
                break
        if done.returncode != 0 or not os.path.isfile(report):
            tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
            raise RuntimeError(f"perf_analyzer exited with status {done.returncode}: {' | '.join(tail)}")
        with open(report, encoding="utf-8") as handle:
            (row,) = list(csv.DictReader(handle))
    requests = _count(done.stdout, "Request count")
    return {
        "texts_per_s": float(row["Inferences/Second"]),
        "p50_ms": float(row["p50 latency"]) / 1e3,
        "p99_ms": float(row["p99 latency"]) / 1e3,
        "requests": requests,
        "errors": _count(done.stdout, "Failed") if "Failed" in done.stdout else 0,
        "command": " ".join(command),
    }


def _count(text: str, label: str) -> int:
    import re

    found = re.findall(rf"{label}: (\d+)", text)
    return int(found[-1]) if found else 0
