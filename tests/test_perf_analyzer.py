"""Integration: Triton's perf_analyzer (2.51, from the tritonclient 2.51.0 wheel; `make` puts
it at .venv/bin/perf_analyzer, scripts/perf_analyzer.sh) against the served ensemble, with the
input file `perf-input` writes, over gRPC and HTTP; and `bench --engine both`, which runs it
beside bench's own closed loop in one run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from readability_triton.measure import perf

pytestmark = pytest.mark.integration
TEXTS = [f"Text number {i} is here. It has {'a few ' * (i % 5)}words and reads easily." for i in range(24)]


def _binary() -> str:
    path = shutil.which("perf_analyzer") or os.path.join(os.path.dirname(sys.executable), "perf_analyzer")
    if not os.path.isfile(path):
        pytest.skip("no perf_analyzer (scripts/perf_analyzer.sh installs it into the venv; `make` runs it)")
    return path


@pytest.fixture(scope="module")
def server(portable_server):
    return portable_server


@pytest.fixture(scope="module")
def input_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("perf-input") / "input.json"
    data = tmp_path_factory.mktemp("perf-data") / "texts.csv"
    data.write_text("excerpt\n" + "\n".join(f'"{t}"' for t in TEXTS) + "\n")
    done = subprocess.run(
        [sys.executable, "-m", "readability_triton.cli", "perf-input", "--data", str(data), "--out", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(path.read_text())["data"][0]["TEXT"]["shape"] == [1]
    return str(path)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_perf_analyzer_measures_the_ensemble_without_errors(server, input_data, protocol):
    url = server.grpc_url if protocol == "grpc" else server.http_url
    result = perf.perf_analyzer(url, protocol, input_data, clients=2, duration=2.0, binary=_binary())
    assert result["texts_per_s"] > 0 and result["requests"] > 0, result
    assert result["errors"] == 0 and result["p99_ms"] >= result["p50_ms"] > 0, result


def test_bench_runs_perf_analyzer_beside_its_own_loop(server, tiny_artifacts, tmp_path):
    _binary()
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "readability_triton.cli",
            "bench",
            "--url",
            server.grpc_url,
            "--protocol",
            "grpc",
            "--concurrency",
            "1",
            "--duration",
            "2",
            "--warmup",
            "0.5",
            "--engine",
            "both",
            "--artifacts",
            tiny_artifacts,
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["perf_analyzer"]["texts_per_s"] > 0 and row["texts_per_s"] > 0
    assert row["perf_analyzer_vs_in_process"] == pytest.approx(
        row["perf_analyzer"]["texts_per_s"] / row["in_process_texts_per_s"]
    )
    assert "perf_analyzer, the same rows right after" in done.stdout
