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


def _nginx() -> bool:
    """Whether nginx is here (CI installs it): the floors then measure it too, and must."""
    return load_benchmark("native_proxy").nginx_binary() is not None


@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
def test_nginx_takes_the_floors_configuration_and_serves_each_protocol(tmp_path, grpc):
    """benchmarks/native_proxy.py: nginx takes the configuration it writes (`nginx -t`) and,
    as one process on a port of its own, passes an HTTP/1.1 request on to what listens behind
    it, or (gRPC) speaks HTTP/2 in cleartext with prior knowledge. That it relays gRPC to
    tritonserver is checked by the grpc_floor run below, where every way must score alike."""
    import socket
    import threading

    native = load_benchmark("native_proxy")
    if native.nginx_binary() is None:
        pytest.skip("nginx is not installed (apt-get install nginx; .ci/run installs it)")
    from readability_triton.server.tritonserver import free_ports

    def read(connection: socket.socket, enough) -> bytes:
        data = b""
        while not enough(data):
            chunk = connection.recv(65536)
            if not chunk:
                break
            data += chunk
        return data

    seen: list[bytes] = []

    def answer() -> None:  # one connection: read what the relay sends, answer an HTTP/1.1 200
        connection, _ = backend.accept()
        with connection:
            connection.settimeout(10)
            seen.append(read(connection, lambda data: data.endswith(b"\r\n\r\n{}")))
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    backend = socket.create_server(("127.0.0.1", 0))
    backend.settimeout(10)
    process = None
    try:
        port = free_ports(1)[0]
        upstream = f"127.0.0.1:{backend.getsockname()[1]}"
        listen = f"listen 127.0.0.1:{port}{' http2' if grpc else ''};"
        assert listen in native.config(str(tmp_path), port, upstream, grpc)
        process = native.start(str(tmp_path / "nginx"), port, upstream, grpc=grpc)
        deadline = time.monotonic() + 10
        while True:
            try:
                client = socket.create_connection(("127.0.0.1", port), timeout=10)
                break
            except OSError:
                assert time.monotonic() < deadline and process.poll() is None, "nginx did not listen"
                time.sleep(0.05)
        if grpc:
            # an HTTP/2 connection's preface is all nginx needs to answer with its SETTINGS frame
            with client:
                client.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
                frame = read(client, lambda data: len(data) >= 9)
            assert len(frame) >= 9 and frame[3] == 4, frame  # type 4: SETTINGS
        else:
            thread = threading.Thread(target=answer, daemon=True)
            thread.start()
            with client:
                client.sendall(b"POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
                reply = read(client, lambda data: data.endswith(b"\r\n\r\nok"))
            thread.join(10)
            assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"ok"), reply
            assert seen and seen[0].startswith(b"POST /v2/models/m/infer HTTP/1.1\r\n"), seen
    finally:
        if process is not None:
            process.kill()
            process.wait()
        backend.close()


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
    """benchmarks/door_floor.py, briefly: the stand-in, the two bare proxies, the door (and
    the door again as the 'baseline' of this same checkout) and, where it is installed, nginx
    each answer every request with a 200 (the benchmark fails on any other), and a proxy's
    CPU is counted."""
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
    ways = ("direct", "protocol", "aiohttp", "door", "baseline") + (("nginx",) if _nginx() else ())
    assert set(rows) == {(n, way) for n in (1, 2) for way in ways}
    assert all(row["requests_per_s"] > 20 for row in rows.values()), rows
    assert all(rows[(n, way)]["cpu_ms"] > 0 for n in (1, 2) for way in ways[1:]), rows
    assert "| 2 | door |" in done.stdout
    # the proxies and the door run this checkout's package; the baseline the one it was given
    assert all(
        rows[(1, way)]["package"].startswith(os.path.join(root, "readability_triton"))
        for way in ("protocol", "aiohttp", "door", "baseline")
    )
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
    """benchmarks/grpc_floor.py, briefly, on the tiny set: direct, the three bare proxies, the
    door and, where it is installed, nginx each answer (the benchmark first checks that every
    way scores a text alike), and each proxy's CPU is counted."""
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
    ways = ("direct", "grpc proxy", "sync proxy", "grpc to http", "door") + (("nginx",) if _nginx() else ())
    assert [row["way"] for row in measured["rows"]] == list(ways)
    assert set(measured["scores"]) == set(ways) and len(set(measured["scores"].values())) == 1
    assert all(row["texts_per_s"] > 5 for row in measured["rows"]), measured["rows"]
    # nginx's share of half a second can be under the 10 ms that /proc counts in
    assert all(row["cpu_ms"] > 0 for row in measured["rows"][1:] if row["way"] != "nginx"), measured["rows"]
    assert all(row["cpu_ms"] >= 0 for row in measured["rows"][1:]), measured["rows"]
    assert "| 1 | grpc to http |" in done.stdout
