"""Integration: the BLS orchestrators `benchmarks/bench_overhead.py --bls` measures against
the ensemble. A benchmark of an orchestrator that computed something else would mean
nothing, so: both are wired from the ensemble's own steps, answer what the ensemble
answers, output for output, and refuse what its first step refuses."""

from __future__ import annotations

import importlib.util
import os

import pytest
from served import assemble_portable, start_server

from readability_triton import contracts as C
from readability_triton.artifacts.corpus import default_texts
from readability_triton.client.readability import text_input, triton_client
from readability_triton.repository.configs import read_config

pytestmark = pytest.mark.integration
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _bench():
    spec = importlib.util.spec_from_file_location(
        "bench_overhead", os.path.join(ROOT, "benchmarks", "bench_overhead.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bls_server(tiny_artifacts, tmp_path_factory):
    root = tmp_path_factory.mktemp("bls")
    repo = assemble_portable(tiny_artifacts, str(root / "repository"))
    bls = _bench().write_bls(repo, str(root / "bls"))
    server = start_server(bls, str(root / "server.log"), str(root / "backends"))
    yield bls, server
    assert server.stop() == 0


def test_the_orchestrators_are_wired_from_the_ensembles_steps(bls_server):
    bls, _ = bls_server
    source = open(os.path.join(bls, "bls_dag", "1", "model.py"), encoding="utf-8").read()
    # after the first step (featurize, which checks the text): the forest and preprocess at
    # once, BERT after preprocess, postprocess after both branches
    steps = C.step_models(parallel=False)
    waits = {
        0: [],
        steps.index(C.FOREST): [],
        steps.index(C.PREPROCESS): [],
        steps.index(C.BERT): [steps.index(C.PREPROCESS)],
        steps.index(C.POSTPROCESS): sorted([steps.index(C.FOREST), steps.index(C.BERT)]),
    }
    assert f"DAG = {dict(sorted(waits.items()))!r}" in source
    ensemble = read_config(os.path.join(bls, C.ENSEMBLE, "config.pbtxt"))
    for name in ("bls", "bls_dag"):
        config = read_config(os.path.join(bls, name, "config.pbtxt"))
        assert config.backend == "python" and not config.ensemble_scheduling.step
        assert [o.name for o in config.output] == [o.name for o in ensemble.output]
        assert [i.name for i in config.input] == [C.TEXT]


def test_the_orchestrators_answer_what_the_ensemble_answers(bls_server):
    _, server = bls_server
    _bench().same_answers(server.grpc_url, [C.ENSEMBLE, "bls", "bls_dag"], default_texts()[0][:8])


def test_the_orchestrators_refuse_a_wordless_text_as_the_first_step_does(bls_server):
    _, server = bls_server
    module, client = triton_client(server.grpc_url, "grpc")
    messages = []
    for model in (C.ENSEMBLE, "bls", "bls_dag"):
        with pytest.raises(module.InferenceServerException) as refused:
            client.infer(model, [text_input(module, [" ... "])])
        messages.append(str(refused.value))
    assert all("holds no words" in m for m in messages), messages


def test_step_rows_are_medians_of_the_rounds_with_the_compute_phases_summed():
    def round_(queue, infer, executions):
        return {
            C.FOREST: {
                "requests": 10,
                "executions": executions,
                "queue_ms_per_request": queue,
                "compute_input_ms_per_request": 0.1,
                "compute_infer_ms_per_request": infer,
                "compute_output_ms_per_request": 0.2,
            },
            C.BERT: {"requests": 0, "executions": 0},  # not reached in these rounds: left out
        }

    rows = _bench().step_rows([round_(1.0, 1.0, 10), round_(3.0, 2.0, 5), round_(2.0, 9.0, 4)])
    assert list(rows) == [C.FOREST]
    assert rows[C.FOREST]["queue_ms"] == pytest.approx(2.0)
    assert rows[C.FOREST]["compute_ms"] == pytest.approx(2.3)  # the median of 1.3, 2.3, 9.3
    assert rows[C.FOREST]["requests_per_execution"] == pytest.approx(2.0)


def test_runner_times_times_each_step_of_the_serial_wiring(tiny_artifacts):
    from readability_triton.pipeline import Pipeline

    times = _bench().runner_times(Pipeline.from_folder(tiny_artifacts), default_texts()[0][:4], 0.3)
    assert list(times) == list(C.step_models(parallel=False))
    assert all(0 < ms < 1000 for ms in times.values()), times
