"""Where a Python model's execute time goes (`stub.phases`): the clock's phases add up to the
execute, its file is replaced whole and read back as deltas, and a `PythonModel` times its
executes only where the server's environment names a folder."""

from __future__ import annotations

import json

import numpy as np
import pytest
import triton_python_backend_utils as pb_utils
from harness import array_request, initialize_args, make_model_dir

from readability_triton.stub import phases as P
from readability_triton.stub import runtime


class Clock:
    """A clock that moves only when told."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_phases_add_up_to_the_execute_and_are_written(tmp_path):
    clock = Clock()
    phases = P.Phases(str(tmp_path), "step", every=0.0, clock=clock)

    def runner(x):
        clock.now += 0.004  # the runner's 4 ms
        return x * 2

    def body(mark):
        clock.now += 0.001
        mark("gate")
        clock.now += 0.002
        mark("read")
        timed = phases.runner(runner)
        out = timed(3)
        clock.now += 0.003  # answering
        return out

    assert phases.measure(2, body) == 6
    written = json.loads((tmp_path / "step.phases.json").read_text())
    assert written["executes"] == 1 and written["requests"] == 2
    ms = written["ms"]
    assert ms == pytest.approx({"execute": 10.0, "gate": 1.0, "read": 2.0, "run": 4.0, "answer": 3.0, "write": 0.0})
    assert not list(tmp_path.glob("*.tmp")), "the file is replaced whole"


def test_a_runner_called_again_request_by_request_adds_every_call_to_run(tmp_path):
    """run_batch's retry after a refused batched pass calls the runner once more per
    request: every call counts as `run`, and `answer` is only what is left."""
    clock = Clock()
    phases = P.Phases(str(tmp_path), "step", every=0.0, clock=clock)

    def runner(ms):
        clock.now += ms / 1e3
        return ms

    def body(mark):
        mark("read")
        timed = phases.runner(runner)
        for ms in (4, 1, 2):  # the batch, then each of two requests
            timed(ms)
            clock.now += 0.0005  # splitting, answering
        return "done"

    assert phases.measure(2, body) == "done"
    ms = phases.snapshot()["ms"]
    assert ms["run"] == pytest.approx(7.0) and ms["answer"] == pytest.approx(1.5)
    assert ms["execute"] == pytest.approx(8.5)


def test_a_runner_that_raises_is_still_timed_and_the_execute_counted(tmp_path):
    clock = Clock()
    phases = P.Phases(str(tmp_path), "step", every=0.0, clock=clock)

    def broken():
        clock.now += 0.005
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        phases.measure(1, lambda mark: phases.runner(broken)())
    snap = phases.snapshot()
    assert snap["executes"] == 1 and snap["ms"]["run"] == pytest.approx(5.0) and snap["ms"]["answer"] == 0.0


def test_the_file_is_written_at_most_every_interval(tmp_path):
    clock = Clock()
    phases = P.Phases(str(tmp_path), "step", every=0.2, clock=clock)
    path = tmp_path / "step.phases.json"
    phases.measure(1, lambda mark: None)
    assert json.loads(path.read_text())["executes"] == 1
    clock.now += 0.1
    phases.measure(1, lambda mark: None)
    assert json.loads(path.read_text())["executes"] == 1, "within the interval: not written again"
    clock.now += 0.15
    phases.measure(1, lambda mark: None)
    assert json.loads(path.read_text())["executes"] == 3


def test_phase_rows_are_the_deltas_per_execute(tmp_path):
    (tmp_path / "junk.phases.json").write_text("{half a fi")
    (tmp_path / "foreign.phases.json").write_text('{"something": "else"}')
    clock = Clock()
    a = P.Phases(str(tmp_path), "a", every=0.0, clock=clock)
    idle = P.Phases(str(tmp_path), "idle", every=0.0, clock=clock)
    idle.write()

    def two_ms(mark):
        clock.now += 0.002
        mark("read")

    a.measure(1, two_ms)
    before = P.read_phases(str(tmp_path))
    assert set(before) == {"a", "idle"}, "a half-written or a foreign file is skipped"
    a.measure(3, two_ms)
    a.measure(1, two_ms)
    rows = P.phase_rows(before, P.read_phases(str(tmp_path)))
    assert set(rows) == {"a"}, "a model without an execute in between is left out"
    assert rows["a"]["execute"] == pytest.approx(2.0) and rows["a"]["read"] == pytest.approx(2.0)
    assert rows["a"]["requests_per_execute"] == 2.0
    assert P.read_phases(str(tmp_path / "absent")) == {}


def test_the_instances_of_a_model_write_apart_and_are_added_up(tmp_path):
    clock = Clock()
    first = P.Phases(str(tmp_path), "bert", "bert_0_0", every=0.0, clock=clock)
    second = P.Phases(str(tmp_path), "bert", "bert_0_1", every=0.0, clock=clock)

    def one_ms(mark):
        clock.now += 0.001

    first.measure(1, one_ms)
    second.measure(2, one_ms)
    second.measure(1, one_ms)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bert_0_0.phases.json", "bert_0_1.phases.json"]
    total = P.read_phases(str(tmp_path))["bert"]
    assert total["executes"] == 3 and total["requests"] == 4
    assert total["ms"]["execute"] == pytest.approx(3.0) and total["ms"]["answer"] == pytest.approx(3.0)


def _postprocess(tmp_path):
    return initialize_args(make_model_dir(str(tmp_path), "postprocess", profile="cpu"))


def _blend(bert, forest, words):
    return bert + forest, bert, forest, bert - words, bert + words


def _request():
    ones = np.ones((2, 1), np.float32)
    return array_request(BERT_OUTPUT=ones, FOREST_OUTPUT=ones, WORDS=ones)


def test_a_python_model_times_its_executes_only_where_asked(tmp_path, monkeypatch):
    monkeypatch.delenv(P.PHASES_ENV, raising=False)
    plain = runtime.PythonModel(pb_utils, _postprocess(tmp_path / "plain"))
    assert plain.phases is None

    folder = tmp_path / "phases"
    folder.mkdir()
    monkeypatch.setenv(P.PHASES_ENV, str(folder))
    timed = runtime.PythonModel(pb_utils, _postprocess(tmp_path / "timed"))
    timed.phases.every = 0.0
    calls = []

    def runner(*arrays):
        calls.append(len(arrays))
        return _blend(*arrays)

    timed_out = timed.execute([_request(), _request()], runner)
    plain_out = plain.execute([_request(), _request()], _blend)
    assert calls == [3], "one pass for both requests, timed or not"

    def values(response):
        return [t.as_numpy().tolist() for t in response.output_tensors()]

    assert [values(r) for r in timed_out] == [values(r) for r in plain_out]
    found = P.read_phases(str(folder))["postprocess"]
    assert found["executes"] == 1 and found["requests"] == 2
    assert all(found["ms"][name] >= 0.0 for name in ("execute", *P.PHASES, "write"))
    assert found["ms"]["run"] > 0.0 and found["ms"]["read"] > 0.0 and found["ms"]["answer"] > 0.0
