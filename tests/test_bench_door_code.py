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


def test_the_grpc_floors_translation_is_a_model_infer_response_tritonclient_reads():
    """benchmarks/grpc_floor.py's `grpc to http` way: a ModelInferRequest as tritonclient
    builds it becomes the KServe v2 binary request tritonserver's HTTP port takes, and that
    port's binary answer becomes a ModelInferResponse whose outputs tritonclient reads as the
    same arrays; what the floor does not translate is refused, not guessed."""
    import json

    import numpy as np
    from tritonclient.grpc import InferResult, service_pb2

    floor = load_benchmark("grpc_floor")
    text = "A short text.".encode()
    raw = len(text).to_bytes(4, "little") + text
    request = service_pb2.ModelInferRequest(model_name="readability", model_version="1", id="r-7")
    tensor = request.inputs.add(name="TEXT", datatype="BYTES", shape=[1, 1])
    request.outputs.add(name="SCORE")
    request.raw_input_contents.append(raw)
    model, version, request_id, header, tensors = floor.translate_request(request.SerializeToString())
    assert (model, version, request_id, tensors) == ("readability", "1", "r-7", raw)
    assert json.loads(header) == {
        "id": "r-7",
        "inputs": [
            {"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "parameters": {"binary_data_size": len(raw)}}
        ],
        "outputs": [{"name": "SCORE", "parameters": {"binary_data": True}}],
    }

    scores, low = np.array([[-0.25]], dtype=np.float32), np.array([[-1.5]], dtype=np.float32)
    answer = json.dumps(
        {
            "id": "r-7",
            "model_name": "readability",
            "model_version": "1",
            "outputs": [
                {"name": "SCORE", "datatype": "FP32", "shape": [1, 1], "parameters": {"binary_data_size": 4}},
                {"name": "SCORE_LOW", "datatype": "FP32", "shape": [1, 1], "parameters": {"binary_data_size": 4}},
            ],
        }
    ).encode()
    message = floor.translate_reply(answer + scores.tobytes() + low.tobytes(), len(answer), "r-7")
    response = service_pb2.ModelInferResponse.FromString(message)
    assert (response.model_name, response.model_version, response.id) == ("readability", "1", "r-7")
    result = InferResult(response)
    assert np.array_equal(result.as_numpy("SCORE"), scores) and np.array_equal(result.as_numpy("SCORE_LOW"), low)

    tensor.parameters["shared_memory_region"].string_param = "region"
    with pytest.raises(ValueError, match="input parameters"):
        floor.translate_request(request.SerializeToString())
    del tensor.parameters["shared_memory_region"]
    request.parameters["priority"].int64_param = 1
    with pytest.raises(ValueError, match="request parameters"):
        floor.translate_request(request.SerializeToString())


@pytest.mark.integration
def test_the_grpc_floor_benchmark_measures_every_way_and_they_agree(tiny_artifacts, tmp_path):
    """benchmarks/grpc_floor.py, briefly, on the tiny set: direct, the three bare proxies and
    the door each answer (the benchmark first checks that all five score a text alike), and
    each proxy's CPU is counted."""
    import json

    out = tmp_path / "grpc-floor.json"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        [sys.executable, os.path.join(root, "benchmarks", "grpc_floor.py"), "--artifacts", tiny_artifacts]
        + ["--rounds", "1", "--duration", "0.5", "--clients", "1", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    measured = json.loads(out.read_text())
    ways = ("direct", "grpc proxy", "sync proxy", "grpc to http", "door")
    assert [row["way"] for row in measured["rows"]] == list(ways)
    assert set(measured["scores"]) == set(ways) and len(set(measured["scores"].values())) == 1
    assert all(row["texts_per_s"] > 5 for row in measured["rows"]), measured["rows"]
    assert all(row["cpu_ms"] > 0 for row in measured["rows"][1:]), measured["rows"]
    assert "| 1 | grpc to http |" in done.stdout
