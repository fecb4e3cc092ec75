"""The server launcher, the health check and the client's retries, without a server (the
real server runs them in test_faults.py)."""
from __future__ import annotations

import pytest
from tritonclient.utils import InferenceServerException

from readability_triton.triton import health as H
from readability_triton.triton import server as S
from readability_triton.triton.client import is_transient


def test_this_environment_has_a_numpy_the_stub_can_read():
    """The served environment's NumPy must be one the wheel's 2.51 stub reads (< 2)."""
    assert S.stub_numpy_problem() is None, S.stub_numpy_problem()


def test_the_server_refuses_to_start_with_numpy_2(monkeypatch, tmp_path):
    from importlib import metadata

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "2.1.3" if name == "numpy" else real(name))
    problem = S.stub_numpy_problem()
    assert "NumPy 2.1.3" in problem and "numpy<2" in problem and "2.51" in problem
    (tmp_path / "repo").mkdir()
    with pytest.raises(S.ServerError, match="NumPy 2.1.3"):
        S.TritonServer(str(tmp_path / "repo")).start()


def test_serve_refuses_with_numpy_2_and_says_why(monkeypatch, tmp_path, capsys):
    from importlib import metadata

    from readability_triton.cli import main

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "2.0.0" if name == "numpy" else real(name))
    (tmp_path / "repo").mkdir()
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
    assert H.dead_stub_models(message) == ["featurize"]
    assert H.dead_stub_models("Stub process 'bert_portable_x_1_3' is not healthy.") == ["bert_portable_x"]
    assert H.dead_stub_models("text 0 of the request is not valid UTF-8") == []


@pytest.mark.parametrize("exc, transient", [
    (InferenceServerException("Stub process 'featurize_0_0' is not healthy.", status="500"), True),
    (InferenceServerException("Request for unknown model: 'readability' has no available versions",
                              status="StatusCode.NOT_FOUND"), True),
    (InferenceServerException("failed to connect to all addresses", status="StatusCode.UNAVAILABLE"), True),
    (ConnectionRefusedError(111, "Connection refused"), True),
    (InferenceServerException("text 0 of the request is not valid UTF-8", status="StatusCode.INVALID_ARGUMENT"),
     False),
    (InferenceServerException("text 0 of the request holds no words", status="400"), False),
    (ValueError("something else"), False),
])
def test_only_transient_failures_are_retried(exc, transient):
    assert is_transient(exc) is transient


class FakeServer:
    """Just enough of TritonServer for the supervisor's decisions."""

    def __init__(self):
        self.calls = []
        self.http_url = self.grpc_url = "127.0.0.1:1"
        self.pid = 1
        self.process = type("P", (), {"poll": lambda self: None, "pid": 1, "returncode": None})()

    def reload(self, model):
        self.calls.append(("reload", model))

    def model_states(self):
        return {"readability": "READY"}

    def load(self, model):
        self.calls.append(("load", model))

    def stop(self, **kw):
        self.calls.append(("stop",))

    def start(self, **kw):
        self.calls.append(("start",))


def test_supervisor_reloads_dead_stubs_and_restarts_when_that_fails(monkeypatch):
    server, lines = FakeServer(), []
    answers = iter([H.Health(False, "Stub process 'featurize_0_0' is not healthy.", 0.1, dead_stubs=["featurize"]),
                    H.Health(True, "SCORE 0.1 in 5 ms", 0.005, 0.1)])
    monkeypatch.setattr(H, "check", lambda *a, **k: next(answers))
    assert H.Supervisor(server, log=lines.append).check_once().ok
    assert server.calls == [("reload", "featurize")]
    assert any("service restored" in line and "featurize" in line for line in lines)

    server, lines = FakeServer(), []
    answers = iter([H.Health(False, "Stub process 'bert_0_0' is not healthy.", 0.1, dead_stubs=["bert"]),
                    H.Health(False, "still broken", 0.1), H.Health(True, "SCORE 0.2 in 5 ms", 0.005, 0.2)])
    monkeypatch.setattr(H, "check", lambda *a, **k: next(answers))
    assert H.Supervisor(server, log=lines.append).check_once().ok
    assert server.calls == [("reload", "bert"), ("stop",), ("start",)]
    assert any("restarting tritonserver" in line for line in lines)
