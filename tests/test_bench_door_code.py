"""Unit: what `benchmarks/bench_door.py` reads of the processes it measures: a process's own
CPU time, and the ports of serve's tritonserver from its command line; and (slow, no
tritonserver) `benchmarks/door_floor.py` run briefly."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from harness import load_benchmark


def test_cpu_seconds_is_the_process_own_time_and_grows_with_its_work():
    bench = load_benchmark("bench_door")
    before = bench.cpu_seconds(os.getpid())
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    assert bench.cpu_seconds(os.getpid()) - before >= 0.15


def test_server_ports_are_read_from_tritonservers_command_line():
    bench = load_benchmark("bench_door")
    args = ["--model-repository", "/r", "--http-port", "18123", "--grpc-address", "127.0.0.1", "--grpc-port", "18124"]
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", *args])
    try:
        deadline = time.monotonic() + 10
        while b"18124" not in open(f"/proc/{child.pid}/cmdline", "rb").read():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert bench.server_ports(child.pid) == {"http": 18123, "grpc": 18124}
    finally:
        child.kill()
        child.wait()


@pytest.mark.slow
def test_the_floor_benchmark_measures_every_way_and_each_answer_is_a_success(tmp_path):
    """benchmarks/door_floor.py, briefly: the stand-in, the two bare proxies and the door
    (and the door again as the 'baseline' of this same checkout) each answer every request
    with a 200 (the benchmark fails on any other), and a proxy's CPU is counted."""
    import json

    out = tmp_path / "floor.json"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        [sys.executable, os.path.join(root, "benchmarks", "door_floor.py"), "--rounds", "1", "--duration", "0.5"]
        + ["--clients", "1,2", "--delay", "1", "--baseline-code", root, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(out.read_text())
    rows = {(row["clients"], row["way"]): row for row in measured["rows"]}
    ways = ("direct", "protocol", "aiohttp", "door", "baseline")
    assert set(rows) == {(n, way) for n in (1, 2) for way in ways}
    assert all(row["requests_per_s"] > 20 for row in rows.values()), rows
    assert all(rows[(n, way)]["cpu_ms"] > 0 for n in (1, 2) for way in ways[1:]), rows
    assert "| 2 | door |" in done.stdout
    # the proxies and the door run this checkout's package; the baseline the one it was given
    assert all(rows[(1, way)]["package"].startswith(os.path.join(root, "readability_triton")) for way in ways[1:])
    assert [row["clients"] for row in measured["against_baseline"]] == [1, 2]
