"""Integration: supervision that never does harm, on the real tritonserver under `serve`.

- several `score --batch-size 64` jobs at once finish, every CSV written, no restart;
- the repository API (and logging, trace, shared memory) is closed without the key, over
  HTTP and gRPC; inference, metadata, statistics and health stay open;
- a config override that changes the answers is detected and healed;
- a gRPC cancellation burst under overload, then SIGTERM: serve drains and exits 0;
- kill -9 of tritonserver under load: serve restarts it and no stub or segment of the old
  one is left.
"""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
from served import assemble_portable, start_server, text_rows

from readability_triton import contracts as C
from readability_triton.measure.launch import launch_serve
from readability_triton.repository import configs
from readability_triton.repository.canary import Canary
from readability_triton.server.processes import alive, python_stubs

pytestmark = pytest.mark.integration
KEY = "test-admin-key-1"
TEXTS = [f"Text number {i} is here. It has {'a few ' * (i % 5)}words and reads easily." for i in range(24)]


@pytest.fixture(scope="module")
def repo(tiny_artifacts, tmp_path_factory):
    return assemble_portable(tiny_artifacts, str(tmp_path_factory.mktemp("supervision") / "repository"))


@pytest.fixture(scope="module")
def fused_repo(tiny_artifacts, tmp_path_factory):
    """The same, fused (`assemble --fused`)."""
    return assemble_portable(
        tiny_artifacts, str(tmp_path_factory.mktemp("supervision-fused") / "repository"), fused=True
    )


def _serve(repo, folder, *args):
    """`readability-triton serve` in a subprocess, on ports of its own (`launch_serve`),
    with this file's admin key."""
    return launch_serve(repo, folder, args=args, key=KEY, ready_timeout=240)


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "readability_triton.cli", *args], capture_output=True, text=True, timeout=600
    )


def _score_grpc(url, texts, timeout=None):
    import tritonclient.grpc as grpc

    client = grpc.InferenceServerClient(url)
    try:
        tensor = grpc.InferInput(C.TEXT, [len(texts), 1], "BYTES")
        tensor.set_data_from_numpy(text_rows(texts))
        return client.infer(C.ENSEMBLE, [tensor], client_timeout=timeout).as_numpy(C.SCORE)
    finally:
        client.close()


def test_several_batch_scoring_jobs_at_once_finish_without_a_restart(repo, tmp_path):
    """The reproduction of the issue: 6 `score --batch-size 64` jobs at once against the
    default serve (the health check every second). Every CSV is written, with the scores the
    server gives one text at a time, and serve never restarts the busy server."""
    data = tmp_path / "in.csv"
    texts = [f"{TEXTS[i % len(TEXTS)]} Copy {i}." for i in range(320)]
    data.write_text("excerpt\n" + "\n".join(f'"{t}"' for t in texts) + "\n")
    ready = []
    with _serve(repo, tmp_path, "--health-interval", "1") as serve:
        jobs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "readability_triton.cli",
                    "score",
                    "--url",
                    serve.http,
                    "--csv",
                    str(data),
                    "--batch-size",
                    "64",
                    "--out",
                    str(tmp_path / f"out{j}.csv"),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for j in range(6)
        ]
        while any(job.poll() is None for job in jobs):
            ready.append(serve.ready())
            time.sleep(0.5)
        outputs = [job.communicate() for job in jobs]
        assert all(job.returncode == 0 for job in jobs), [err[-500:] for _, err in outputs]
        first = _score_grpc(serve.grpc, texts[:3])[:, 0]
        for j in range(6):
            with open(tmp_path / f"out{j}.csv", newline="", encoding="utf-8") as handle:
                rows = list(csv.DictReader(handle))
            assert len(rows) == len(texts)
            got = [float(row["score"]) for row in rows[:3]]
            assert np.allclose(got, first, atol=1e-5)
        assert serve.status()["restarts"] == 0 and set(ready) == {True}, (serve.status(), ready)
        code = serve.stop()
    err = serve.said()
    assert code == 0, err[-2000:]
    assert "restarting" not in err and "unhealthy" not in err, err[-2000:]


def test_the_repository_api_is_closed_to_clients_without_the_key(repo, tmp_path):
    import tritonclient.grpc as grpc
    import tritonclient.http as http
    from tritonclient.utils import InferenceServerException

    server = start_server(repo, str(tmp_path / "server.log"), str(tmp_path / "backends"), admin_key=KEY)
    try:
        base = f"http://{server.http_url}"
        for method, path in (
            ("POST", "/v2/repository/index"),
            ("POST", "/v2/repository/models/postprocess/unload"),
            ("POST", "/v2/repository/models/evil/load"),
            ("GET", "/v2/logging"),
            ("GET", "/v2/trace/setting"),
            ("GET", "/v2/systemsharedmemory/status"),
        ):
            request = urllib.request.Request(base + path, data=b"{}" if method == "POST" else None, method=method)
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 403 and "restricted" in refused.value.read().decode(), path
        client = grpc.InferenceServerClient(server.grpc_url)
        for call in (
            lambda: client.get_model_repository_index(),
            lambda: client.unload_model(C.POSTPROCESS),
            lambda: client.get_log_settings(),
            lambda: client.get_system_shared_memory_status(),
        ):
            with pytest.raises(InferenceServerException, match="restricted"):
                call()
        # with the key: allowed
        headers = {"admin-key": KEY}
        names = {
            m["name"] for m in http.InferenceServerClient(server.http_url).get_model_repository_index(headers=headers)
        }
        assert C.ENSEMBLE in names
        index = client.get_model_repository_index(headers={"triton-grpc-protocol-admin-key": KEY})
        assert C.ENSEMBLE in {m.name for m in index.models}
        # open to everyone: inference, metadata, config, statistics, health
        assert _score_grpc(server.grpc_url, TEXTS[:2]).shape == (2, 1)
        for path in (
            "/v2/health/ready",
            f"/v2/models/{C.ENSEMBLE}",
            f"/v2/models/{C.POSTPROCESS}/config",
            "/v2/models/stats",
        ):
            with urllib.request.urlopen(base + path, timeout=10) as reply:
                assert reply.status == 200, path
        assert server.model_states()[C.ENSEMBLE] == "READY"  # the server's own control uses the key
        client.close()
    finally:
        assert server.stop() == 0


def test_an_override_that_changes_the_answers_is_detected_and_healed(repo, tmp_path):
    from google.protobuf import json_format

    from readability_triton.repository.configs import read_config

    canary = Canary.load(repo)
    with _serve(repo, tmp_path, "--health-interval", "1") as serve:
        assert _cli("health", "--url", serve.http, "--repository", repo).returncode == 0
        config = read_config(os.path.join(repo, C.POSTPROCESS, "config.pbtxt"))
        config.parameters[C.BERT_WEIGHT].string_value = "0.0"
        request = urllib.request.Request(
            f"http://{serve.http}/v2/repository/models/{C.POSTPROCESS}/load",
            method="POST",
            data=json.dumps({"parameters": {"config": json_format.MessageToJson(config)}}).encode(),
            headers={"admin-key": KEY},
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            assert reply.status == 200
        deadline = time.monotonic() + 60
        while serve.status()["restarts"] < 1 or not serve.ready():
            assert time.monotonic() < deadline, serve.status()
            time.sleep(0.5)
        score = float(_score_grpc(serve.grpc, [canary.text])[0, 0])
        assert abs(score - canary.expected[C.SCORE]) <= canary.tolerance
        result = _cli("health", "--url", serve.http, "--repository", repo)
        assert result.returncode == 0 and "as recorded" in result.stdout, result
        code = serve.stop()
    err = serve.said()
    assert code == 0, err[-2000:]
    assert "wrong answer: SCORE" in err and "tritonserver restarted" in err, err[-3000:]


def _burst(url, seconds: float, deadlines, outcomes):
    """Clients sending one text per request with the given gRPC deadlines (None: none)."""
    import tritonclient.grpc as grpc

    def client_loop(deadline):
        client = grpc.InferenceServerClient(url)
        tensor = grpc.InferInput(C.TEXT, [1, 1], "BYTES")
        tensor.set_data_from_numpy(text_rows([TEXTS[0]]))
        stop = time.monotonic() + seconds
        while time.monotonic() < stop:
            try:
                client.infer(C.ENSEMBLE, [tensor], client_timeout=deadline)
                outcomes.append("ok")
            except Exception as exc:  # noqa: BLE001
                outcomes.append(str(exc).splitlines()[0][:80])
        client.close()

    threads = [threading.Thread(target=client_loop, args=(d,)) for d in deadlines]
    for thread in threads:
        thread.start()
    return threads


@pytest.mark.parametrize("which", ["repo", "fused_repo"], ids=["separate", "fused"])
def test_a_cancellation_burst_then_sigterm_drains_and_exits_0(which, request, tmp_path):
    """16 gRPC clients that give up after 20-80 ms beside 4 patient ones, 8 s; then SIGTERM
    while they still send. serve drains (every step answers what it holds), stops the
    server and exits 0; no process of the server and no /dev/shm segment is left. (Deadlines
    of a few ms crash tritonserver 2.51 itself: server#7840, fixed in 25.01; serve then
    restarts it. Where the crash falls between serve's last health round and SIGTERM, there
    is nothing to drain: the test then checks that serve says so and xfails, saying why.)
    The same on the fused repository."""
    with _serve(request.getfixturevalue(which), tmp_path) as serve:
        server_pid = serve.status()["pid"]
        stubs = list(python_stubs(server_pid))
        outcomes: list[str] = []
        threads = _burst(serve.grpc, 8.0, [0.02 + 0.004 * i for i in range(16)] + [None] * 4, outcomes)
        time.sleep(6.0)
        started = time.monotonic()
        code = serve.stop()
    err = serve.said()
    took = time.monotonic() - started
    for thread in threads:
        thread.join()
    assert took < 40, took
    assert "ok" in outcomes and any("Deadline Exceeded" in o for o in outcomes), set(outcomes)
    assert not [p for p in [server_pid] + stubs if alive(p)]
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"readability-triton-{serve.process.pid}-")]
    with open(serve.server_log, errors="replace") as log:
        crashed = "Signal (11) received" in log.read()
    if code != 0 and crashed:
        # tritonserver 2.51 itself died by SIGSEGV on a cancellation racing an answer (server#7840),
        # after serve's last health round and before or during the drain: nothing was left to
        # drain, serve must say how the server ended and exit 1. Everything above still held.
        assert code == 1 and re.search(
            r"not drained: it (had already exited on its own|died during the stop), "
            r"killed by SIGSEGV \(status -11\)",
            err,
        ), err[-3000:]
        pytest.xfail(
            "tritonserver 2.51 crashed (SIGSEGV, server#7840) too close to SIGTERM to be restarted: serve "
            "said so and left nothing behind, but this run could not exercise the drain"
        )
    assert code == 0, err[-3000:]


def test_kill_9_of_tritonserver_under_load_leaves_no_orphan(repo, tmp_path):
    with _serve(repo, tmp_path, "--health-interval", "1") as serve:
        old = serve.status()["pid"]
        stubs = list(python_stubs(old))
        assert len(stubs) == len(configs.repository_models()) - 1, stubs  # portable: a stub per model but the ensemble
        segments = [n for n in os.listdir("/dev/shm") if n.startswith(f"readability-triton-{serve.process.pid}-")]
        outcomes: list[str] = []
        threads = _burst(serve.grpc, 6.0, [None] * 4, outcomes)
        time.sleep(1.5)
        os.kill(old, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while True:
            try:
                status = serve.status()
            except OSError:
                status = {}
            if status.get("pid") not in (None, old) and status.get("ready"):
                break
            assert time.monotonic() < deadline, status
            time.sleep(0.3)
        for thread in threads:
            thread.join()
        time.sleep(2.0)  # the next supervision round reaps what the old server left
        assert not [p for p in stubs if alive(p)], "a stub of the killed server is still running"
        zombies = [p for p in stubs if os.path.exists(f"/proc/{p}")]
        assert not zombies, "a stub of the killed server was left a zombie"
        assert not set(segments) & set(os.listdir("/dev/shm")), "a segment of the killed server is left"
        assert _score_grpc(serve.grpc, TEXTS[:2]).shape == (2, 1)
        code = serve.stop()
    err = serve.said()
    assert code == 0, err[-2000:]
    assert "exited with status -9" in err and "tritonserver restarted" in err, err[-2000:]
