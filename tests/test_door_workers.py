"""The front door on more than one core (`frontdoor.workers`, `frontdoor.steering`): the
kernel steers each client network to one worker, the workers' snapshots add up, and a real
`serve --door-workers 2` answers over both protocols from many networks, keeps a bad
request its own, outlives a killed worker and drains on SIGTERM."""

from __future__ import annotations

import http.client
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from served import assemble_portable

from readability_triton import contracts as C
from readability_triton.frontdoor import steering
from readability_triton.frontdoor.workers import cpu_quota, default_workers, merge_snapshots
from readability_triton.measure.honest import infer_body
from readability_triton.measure.launch import PORTS, launch_serve, serve_command
from readability_triton.measure.load import process_tree
from readability_triton.server.processes import free_port, free_ports


def _listeners(count: int, port: int) -> list[socket.socket]:
    listeners = []
    for _ in range(count):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(64)
        listeners.append(sock)
    return listeners


def _which(listeners: list[socket.socket], port: int, source: str) -> int:
    """The index of the listener a connection from `source` reaches."""
    with socket.socket() as client:
        client.bind((source, 0))
        client.connect(("127.0.0.1", port))
        ready, _, _ = select.select(listeners, [], [], 5)
        assert ready, f"no listener took the connection from {source}"
        accepted, _ = ready[0].accept()
        accepted.close()
        return listeners.index(ready[0])


@pytest.mark.parametrize("workers", [2, 3])
def test_each_network_reaches_one_worker_and_the_networks_spread(workers):
    port = free_port()
    listeners = _listeners(workers, port)
    try:
        steering.attach(listeners[0], workers, 24, 64)
        reached = {
            net: {_which(listeners, port, f"127.0.{net}.{host}") for host in (1, 2, 3, 4)} for net in range(1, 25)
        }
        assert all(len(found) == 1 for found in reached.values()), reached
        assert set().union(*reached.values()) == set(range(workers)), reached
    finally:
        for sock in listeners:
            sock.close()


def test_the_network_is_the_clients_prefix():
    port = free_port()
    listeners = _listeners(2, port)
    try:
        steering.attach(listeners[0], 2, 16, 64)
        for net in range(1, 9):
            assert len({_which(listeners, port, f"127.{net}.{third}.1") for third in (1, 7, 200)}) == 1
    finally:
        for sock in listeners:
            sock.close()


def test_a_processs_listeners_are_found_by_port():
    with socket.socket() as listener, socket.socket() as other:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        other.bind(("127.0.0.1", 0))  # bound, not listening
        found = steering.listening_sockets(listener.getsockname()[1])
        try:
            assert [sock.getsockname() for sock in found] == [listener.getsockname()]
        finally:
            for sock in found:
                sock.close()
        assert steering.listening_sockets(other.getsockname()[1]) == []


def test_snapshots_add_up():
    one = {
        "accepted": 3,
        "texts_waiting": 1.5,
        "paused": False,
        "refused": {"busy": 2},
        "answer_seconds": {"p50": 0.01, "p99": 0.2},
        "stated_wait_s": 10.0,
    }
    two = {
        "accepted": 4,
        "texts_waiting": 0.5,
        "paused": True,
        "refused": {"busy": 1, "deadline": 5},
        "answer_seconds": {"p50": 0.02, "p99": 0.1},
        "stated_wait_s": 10.0,
    }
    merged = merge_snapshots([one, two])
    assert merged == {
        "accepted": 7,
        "texts_waiting": 2.0,
        "paused": True,
        "refused": {"busy": 3, "deadline": 5},
        "answer_seconds": {"p50": 0.02, "p99": 0.2},
        "stated_wait_s": 10.0,
        "workers": 2,
    }
    assert one["refused"] == {"busy": 2}  # the inputs are left as they were


def test_workers_by_machine(tmp_path):
    assert [default_workers(n) for n in (1, 2, 4, 16, 64)] == [1, 1, 1, 4, 8]
    limit = tmp_path / "cpu.max"
    limit.write_text("250000 100000\n")  # a container limited to 2.5 CPUs
    assert cpu_quota(str(limit)) == 3
    limit.write_text("max 100000\n")
    assert cpu_quota(str(limit)) is None
    assert cpu_quota(str(tmp_path / "none")) is None


# -- a real serve with two door workers ------------------------------------------------------


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _door_workers(serve_pid: int) -> list[int]:
    pids = []
    for pid in process_tree(serve_pid)[1:]:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if b"readability_triton.frontdoor.workers" in handle.read():
                    pids.append(pid)
        except OSError:
            continue
    return sorted(pids)


def _post(http_url: str, source: str, body: bytes) -> tuple[int, dict]:
    host, port = http_url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60, source_address=(source, 0))
    try:
        conn.request("POST", f"/v2/models/{C.ENSEMBLE}/infer", body, {"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read() or b"{}")
    finally:
        conn.close()


@pytest.fixture(scope="module")
def repo(tiny_artifacts, tmp_path_factory):
    return assemble_portable(tiny_artifacts, str(tmp_path_factory.mktemp("workers") / "repository"))


@pytest.mark.integration
def test_two_door_workers_serve_every_network_and_outlive_one_killed(repo, tmp_path):
    import tritonclient.grpc as grpcclient

    text = "The cat sat on the mat. It was a warm day."
    with launch_serve(repo, tmp_path, args=["--door-workers", "2", "--health-interval", "1"]) as target:
        workers = _door_workers(target.pid)
        assert len(workers) == 2, workers
        sources = [f"127.0.{net}.1" for net in range(1, 13)]
        first = {}
        for source in sources:
            status, answer = _post(target.http, source, infer_body([text]))
            assert status == 200, answer
            first[source] = answer["outputs"][0]["data"][0]
        assert len(set(first.values())) == 1  # one pipeline behind both workers

        # a bad request beside good ones: its own INVALID_ARG, the others answered
        status, answer = _post(target.http, "127.0.3.1", b'{"inputs": [{"name": "NOPE"}]}')
        assert status == 400, answer
        client = grpcclient.InferenceServerClient(target.grpc)
        rows = np.array([[text.encode()]], dtype=object)
        inputs = [grpcclient.InferInput(C.TEXT, [1, 1], "BYTES")]
        inputs[0].set_data_from_numpy(rows)
        scored = client.infer(C.ENSEMBLE, inputs).as_numpy(C.SCORE)
        assert abs(float(scored.ravel()[0]) - first[sources[0]]) < 1e-5

        front = target.status()["front"]
        assert front["workers"] == 2 and front["accepted"] >= len(sources) + 1, front

        # a worker killed: its networks reach the other, and it is started again
        os.kill(workers[0], signal.SIGKILL)
        for source in sources:
            status, answer = _post(target.http, source, infer_body([text]))
            assert status == 200, (source, answer)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and target.status()["front"].get("worker_restarts") != 1:
            time.sleep(0.2)  # counted once the new worker listens
        again = _door_workers(target.pid)
        assert len(again) == 2 and workers[0] not in again, again
        assert target.status()["front"]["worker_restarts"] == 1
        for source in sources:
            assert _post(target.http, source, infer_body([text]))[0] == 200
        assert client.infer(C.ENSEMBLE, inputs).as_numpy(C.SCORE) is not None
        client.close()

        target.process.send_signal(signal.SIGTERM)
        assert target.process.wait(120) == 0
        assert not [pid for pid in again if os.path.exists(f"/proc/{pid}") and _state(pid) != "Z"]
    with open(os.path.join(tmp_path, "serve.log"), encoding="utf-8") as handle:
        said = handle.read()
    assert "door worker 0" in said and "starting it again" in said


@pytest.mark.integration
def test_the_capacity_benchmark_measures_every_way(tmp_path):
    """benchmarks/door_capacity.py, briefly: both worker counts over HTTP, one over gRPC,
    and direct, every request answered; the CPU of the door, tritonserver and the clients
    counted, and no way passing more than the machine's CPUs allow at that cost."""
    out = tmp_path / "capacity.json"
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(
        [sys.executable, os.path.join(root, "benchmarks", "door_capacity.py"), "--rounds", "1", "--duration", "1"]
        + ["--connections", "8", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {(row["protocol"], row["way"]): row for row in json.loads(out.read_text())["rows"]}
    assert set(rows) == {
        ("http", "door x1"),
        ("http", "door x2"),
        ("http", "direct"),
        ("grpc", "door x1"),
        ("grpc", "direct"),
    }
    assert all(row["requests_per_s"] > 50 and row["failed"] == 0 for row in rows.values()), rows
    assert "| http | door x2 |" in done.stdout
    assert all(row["server_cpu_ms"] > 0 and row["clients_cpu_ms"] > 0 for row in rows.values()), rows
    assert all(row["door_cpu_ms"] > 0 for (_, way), row in rows.items() if way != "direct"), rows
    # the bound is a bound: CPU counted in whole ticks, and others on the machine only take from the rate
    assert all(row["requests_per_s"] <= 1.15 * row["at_most"] for row in rows.values()), rows
    assert "door x1: the door, tritonserver and the clients spend" in done.stdout


@pytest.mark.integration
def test_a_port_taken_by_another_process_stops_serve_with_the_reason(repo, tmp_path):
    """A worker that cannot listen (another process holds the HTTP port without
    SO_REUSEPORT): serve says which port and exits, leaving no worker behind."""

    def workers_alive() -> set[str]:
        found = subprocess.run(["pgrep", "-f", "readability_triton.frontdoor.workers"], capture_output=True, text=True)
        return {pid for pid in found.stdout.split() if _state(int(pid)) not in ("Z", "gone")}

    before = workers_alive()
    ports = dict(zip(PORTS, free_ports(len(PORTS))))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports["http"]))
        taken.listen()
        done = subprocess.run(
            serve_command(repo, ports, str(tmp_path / "tritonserver.log"), ["--door-workers", "2", "--no-warm-up"]),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode != 0
    assert "door worker" in done.stderr and str(ports["http"]) in done.stderr, done.stderr[-2000:]
    assert workers_alive() <= before


def test_a_negative_worker_count_is_refused_before_anything_starts(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "readability_triton.cli", "serve", "--repository", str(tmp_path)]
        + ["--door-workers", "-1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0 and "--door-workers -1" in done.stderr, done.stderr
