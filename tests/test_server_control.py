"""The server launcher, the health check and the client's retries, without a server (the
real server runs them in test_faults.py)."""

from __future__ import annotations

import pytest
from tritonclient.utils import InferenceServerException

from readability_triton import triton_messages as M
from readability_triton.client.readability import is_busy, is_transient
from readability_triton.repository.options import AssemblyOptions
from readability_triton.server import admin as A
from readability_triton.server import installation as I
from readability_triton.server import tritonserver as S


def test_this_environment_has_a_numpy_the_stub_can_read():
    """The served environment's NumPy must be one the wheel's 2.51 stub reads (< 2)."""
    assert I.stub_numpy_problem() is None, I.stub_numpy_problem()


def test_the_server_refuses_to_start_with_numpy_2(monkeypatch, tmp_path):
    from importlib import metadata

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "2.1.3" if name == "numpy" else real(name))
    problem = I.stub_numpy_problem()
    assert "NumPy 2.1.3" in problem and "numpy<2" in problem and "2.51" in problem
    (tmp_path / "repo").mkdir()
    with pytest.raises(S.ServerError, match="NumPy 2.1.3"):
        S.TritonServer(str(tmp_path / "repo")).start()


def test_serve_refuses_with_numpy_2_and_says_why(monkeypatch, tmp_path, capsys):
    from importlib import metadata

    from readability_triton.cli import main

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "2.0.0" if name == "numpy" else real(name))
    from readability_triton.repository.assemble import write_configs

    write_configs(str(tmp_path / "repo"), AssemblyOptions("portable"))  # configs, no artifacts: it stops before loading
    assert main(["serve", "--repository", str(tmp_path / "repo")]) == 2
    assert "NumPy 2.0.0 is installed" in capsys.readouterr().err


def test_command_uses_explicit_model_control_and_its_own_shm_prefix(tmp_path):
    a, b = S.TritonServer(str(tmp_path)), S.TritonServer(str(tmp_path))
    command = a.command()
    assert command[command.index("--model-control-mode") + 1] == "explicit"
    assert command[command.index("--load-model") + 1] == "*"
    assert f"python,shm-region-prefix-name={a.shm_prefix}" in command
    assert a.shm_prefix != b.shm_prefix and a.shm_prefix.startswith("readability-triton-")
    assert command[command.index("--http-address") + 1] == "127.0.0.1"


def test_dead_stub_models_are_read_from_the_error():
    message = "in ensemble 'readability', Stub process 'featurize_0_0' is not healthy."
    assert M.dead_stub_models(message) == ["featurize"]
    assert M.dead_stub_models("Stub process 'bert_portable_x_1_3' is not healthy.") == ["bert_portable_x"]
    assert M.dead_stub_models("text 0 of the request is not valid UTF-8") == []


@pytest.mark.parametrize(
    "exc, transient",
    [
        (InferenceServerException("Stub process 'featurize_0_0' is not healthy.", status="500"), True),
        (
            InferenceServerException(
                "Request for unknown model: 'readability' has no available versions", status="StatusCode.NOT_FOUND"
            ),
            True,
        ),
        (InferenceServerException("failed to connect to all addresses", status="StatusCode.UNAVAILABLE"), True),
        (ConnectionRefusedError(111, "Connection refused"), True),
        (
            InferenceServerException("text 0 of the request is not valid UTF-8", status="StatusCode.INVALID_ARGUMENT"),
            False,
        ),
        (InferenceServerException("text 0 of the request holds no words", status="400"), False),
        (ValueError("something else"), False),
    ],
)
def test_only_transient_failures_are_retried(exc, transient):
    assert is_transient(exc) is transient


@pytest.mark.parametrize(
    "message, busy",
    [
        ("in ensemble 'readability', busy: 9 requests are waiting inside the pipeline (the limit is 8)", True),
        ("in ensemble 'readability', Request timeout expired", True),
        ("[request id: <id_unknown>] Exceeds maximum queue size", True),
        ("Stub process 'featurize_0_0' is not healthy.", False),
        ("text 0 of the request is not valid UTF-8", False),
    ],
)
def test_a_full_server_is_told_apart_and_its_refusals_are_retried(message, busy):
    exc = InferenceServerException(message, status="StatusCode.UNAVAILABLE" if busy else "400")
    assert is_busy(exc) is busy
    if busy:
        assert is_transient(exc)


def test_the_restricted_apis_are_closed_with_one_key(tmp_path, monkeypatch):
    monkeypatch.delenv(A.ADMIN_KEY_ENV, raising=False)
    a, b = S.TritonServer(str(tmp_path)), S.TritonServer(str(tmp_path))
    assert a.admin_key != b.admin_key and len(a.admin_key) >= 24  # generated per server
    secret = a.secret_args()
    spec = f"model-repository,logging,trace,shared-memory:admin-key={a.admin_key}"
    assert secret[secret.index("--http-restricted-api") + 1] == spec
    assert secret[secret.index("--grpc-restricted-protocol") + 1] == spec
    assert not any(a.admin_key in arg for arg in a.command())  # handed over by keyshim, never on the command line
    assert A.admin_headers("k", "grpc") == {"triton-grpc-protocol-admin-key": "k"}
    monkeypatch.setenv(A.ADMIN_KEY_ENV, "from-the-environment")
    assert S.TritonServer(str(tmp_path)).admin_key == "from-the-environment"
    monkeypatch.delenv(A.ADMIN_KEY_ENV)
    (tmp_path / "key").write_text("from-a-secret-file\n")
    monkeypatch.setenv(A.ADMIN_KEY_ENV + "_FILE", str(tmp_path / "key"))
    assert S.TritonServer(str(tmp_path)).admin_key == "from-a-secret-file"
    monkeypatch.setenv(A.ADMIN_KEY_ENV + "_FILE", str(tmp_path / "missing"))
    with pytest.raises(S.ServerError, match="cannot read"):
        S.TritonServer(str(tmp_path))
    monkeypatch.setenv(A.ADMIN_KEY_ENV, "no spaces; or quotes")
    with pytest.raises(S.ServerError, match="letters, digits"):
        S.TritonServer(str(tmp_path))


def _metrics(pending: dict, queue_us: dict, success: dict) -> str:
    lines = [f'nv_inference_pending_request_count{{model="{m}",version="1"}} {v}' for m, v in pending.items()]
    lines += [f'nv_inference_queue_duration_us{{model="{m}",version="1"}} {v}' for m, v in queue_us.items()]
    lines += [f'nv_inference_request_success{{model="{m}",version="1"}} {v}' for m, v in success.items()]
    return "\n".join(lines + ['nv_inference_count{model="bert",version="1"} 99']) + "\n"


def test_the_gate_counts_the_requests_waiting_in_the_later_steps():
    from readability_triton.stub.admission import RETRY_AFTER_FAILURE, STARTUP_QUIET, Admission, pending_requests

    text = _metrics({"validate": 3, "bert": 6, "forest": 1}, {}, {})
    assert pending_requests(text) == {"validate": 3, "bert": 6, "forest": 1}
    clock, reads, logged = [0.0], [], []

    def fetch(url):
        reads.append(url)
        if url == "down":
            raise OSError("connection refused")
        return text

    gate = Admission(7, 0, ["bert", "forest"], url="http://m", fetch=fetch, clock=lambda: clock[0], refresh=0.05)
    assert "busy: 7 requests are waiting" in gate.busy()
    clock[0] += 0.01
    gate.busy()
    assert len(reads) == 1  # cached within `refresh`
    assert Admission(8, 0, ["bert", "forest"], url="http://m", fetch=fetch).busy() is None
    assert Admission(0, 0, ["bert"], url="http://m", fetch=fetch).busy() is None  # off
    clock[0] = 0.0
    off = Admission(1, 0, ["bert"], url="down", fetch=fetch, log=logged.append, clock=lambda: clock[0])
    assert off.busy() is None  # open while the metrics cannot be read
    assert logged == []  # quiet while tritonserver loads: the warm-up runs before the endpoint listens
    clock[0] = STARTUP_QUIET
    assert off.busy() is None and off.busy() is None
    assert len(logged) == 1 and "load shedding is off" in logged[0]
    off.url, clock[0] = "http://m", clock[0] + RETRY_AFTER_FAILURE
    assert "busy" in (off.busy() or "") and "again: load shedding is on" in logged[-1]


def test_the_gate_measures_how_long_requests_have_lately_waited():
    from readability_triton.stub.admission import Admission

    clock, state = [0.0], {"pending": 2, "queue_us": 0, "success": 0}
    gate = Admission(
        0,
        10.0,
        ["bert"],
        url="http://m",
        refresh=0.0,
        clock=lambda: clock[0],
        fetch=lambda url: _metrics({"bert": state["pending"]}, {"bert": state["queue_us"]}, {"bert": state["success"]}),
    )
    assert gate.busy() is None
    for _ in range(4):  # 1-text requests: 5 answered a second after waiting 0.4 s each
        clock[0] += 1.0
        state["success"] += 5
        state["queue_us"] += 5 * 400_000
        assert gate.busy() is None
    for _ in range(4):  # 64-text requests: one answered every 4 s after waiting 12 s
        clock[0] += 4.0
        state["success"] += 1
        state["queue_us"] += 12_000_000
    assert "requests wait 12.0 s in the queue of bert" in gate.busy()
    clock[0] += 11.0  # nothing answered for 11 s while requests wait: stuck that long at least
    assert "wait 11.0 s" in gate.busy()
    state["pending"] = 0
    clock[0] += 1.0
    assert gate.busy() is None  # idle


def test_a_burst_after_a_long_idle_spell_is_not_taken_for_a_stuck_step():
    """Found on a server shared by several suites: idle for minutes, then two clients; the
    first request queued at a step that had answered nothing since the idle spell began
    made the gate say "requests wait 507 s" and refuse the second."""
    from readability_triton.stub.admission import Admission

    clock, state = [0.0], {"pending": 0, "queue_us": 5_000_000, "success": 40}
    gate = Admission(
        0,
        10.0,
        ["featurize"],
        url="http://m",
        refresh=0.0,
        clock=lambda: clock[0],
        fetch=lambda url: _metrics(
            {"featurize": state["pending"]}, {"featurize": state["queue_us"]}, {"featurize": state["success"]}
        ),
    )
    assert gate.busy() is None
    clock[0] += 500.0  # the watcher slept: nothing arrived for 500 s
    state["pending"] = 1  # a burst: the first request waits at featurize, none answered yet
    assert gate.busy() is None
    clock[0] += 11.0  # ... and still none answered 11 s later, with requests queued: stuck
    assert "wait 11.0 s in the queue of featurize" in gate.busy()


@pytest.mark.parametrize("name", ["with space", "paren(s)", "quote'd", "dollar$x"])
def test_a_repository_path_the_stub_command_cannot_carry_is_refused_before_the_server_hangs(tmp_path, name):
    repo = tmp_path / name
    repo.mkdir()
    with pytest.raises(S.ServerError, match="shell"):
        S.TritonServer(str(repo)).start()


def test_model_control_failures_are_server_errors(tmp_path):
    """A server that closes the connection (as a dying tritonserver does) or nothing
    listening: model control raises ServerError, which `drain` and `stop` handle, and never
    a transport's own exception that would get out of `stop()` before the signal."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def close_every_connection():
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            connection.close()

    threading.Thread(target=close_every_connection, daemon=True).start()
    closing = S.TritonServer(str(tmp_path), http_port=listener.getsockname()[1], admin_key="k")
    try:
        for call in (
            closing.model_states,
            lambda: closing.unload("bert"),
            lambda: closing.load("bert"),
            closing.execution_counts,
            closing.ensemble_steps,
        ):
            with pytest.raises(S.ServerError):
                call()
    finally:
        listener.close()
    nobody = S.TritonServer(str(tmp_path), http_port=S.free_port(), admin_key="k")
    with pytest.raises(S.ServerError):
        nobody.model_states()


def test_a_read_only_fil_checkpoint_is_served_from_a_copy(tiny_artifacts, tmp_path, monkeypatch):
    """FIL r24.10 opens checkpoint.tl read-write: where the repository's copy is not
    writable (a read-only image or volume), serve hands tritonserver a view whose forest
    folder is a copy and whose other models are links; none where it is writable, or for a
    Python forest."""
    import os

    from readability_triton import contracts as C
    from readability_triton.repository import assemble as repository
    from readability_triton.repository import configs
    from readability_triton.server.backends import writable_forest_view

    cpu, portable = str(tmp_path / "cpu"), str(tmp_path / "portable")
    repository.assemble(tiny_artifacts, cpu, AssemblyOptions("cpu"))
    repository.assemble(tiny_artifacts, portable, AssemblyOptions("portable"))
    assert writable_forest_view(cpu, str(tmp_path / "v0")) is None  # writable: served as it is
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if mode == os.W_OK else real_access(path, mode))
    assert writable_forest_view(portable, str(tmp_path / "v1")) is None  # the Python forest reads it with GTIL
    view = writable_forest_view(cpu, str(tmp_path / "v2"))
    models = configs.present_models(cpu)
    assert view == str(tmp_path / "v2") and sorted(os.listdir(view)) == sorted(models)
    for model in models:
        assert os.path.islink(os.path.join(view, model)) == (model != C.FOREST)
    copied = os.path.join(view, C.FOREST, "1", "checkpoint.tl")
    assert (
        not os.path.islink(copied)
        and open(copied, "rb").read() == open(os.path.join(cpu, C.FOREST, "1", "checkpoint.tl"), "rb").read()
    )
