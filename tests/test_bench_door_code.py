"""Unit: what `benchmarks/bench_door.py` reads of the processes it measures: a process's own
CPU time, and the ports of serve's tritonserver from its command line."""

from __future__ import annotations

import os
import subprocess
import sys
import time

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
