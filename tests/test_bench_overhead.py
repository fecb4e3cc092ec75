"""Integration: the BLS orchestrators `benchmarks/bench_overhead.py --bls` measures against
the ensemble. A benchmark of an orchestrator that computed something else would mean
nothing, so: both are wired from the ensemble's own steps, answer what the ensemble
answers, output for output, and refuse what its first step refuses."""

from __future__ import annotations

import os
import time

import pytest
from harness import load_benchmark
from served import assemble_portable, start_server

from readability_triton import contracts as C
from readability_triton.client.readability import text_input, triton_client
from readability_triton.corpus import default_texts
from readability_triton.repository.configs import read_config
from readability_triton.stub.phases import PHASES, PHASES_ENV, phase_rows

pytestmark = pytest.mark.integration
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def bls_server(tiny_artifacts, tmp_path_factory):
    root = tmp_path_factory.mktemp("bls")
    repo = assemble_portable(tiny_artifacts, str(root / "repository"))
    bench = load_benchmark("bench_overhead")
    bls = bench.write_bls(repo, str(root / "bls"))
    phases = root / "phases"
    phases.mkdir()
    with bench.environment(PHASES_ENV, str(phases)):  # as --steps serves the ensemble
        server = start_server(bls, str(root / "server.log"), str(root / "backends"))
    yield bls, server, str(phases)
    assert server.stop() == 0


def test_the_orchestrators_are_wired_from_the_ensembles_steps(bls_server):
    bls, _, _ = bls_server
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
    _, server, _ = bls_server
    load_benchmark("bench_overhead").same_answers(
        server.grpc_url, [C.ENSEMBLE, "bls", "bls_dag"], default_texts()[0][:8]
    )


def test_the_orchestrators_refuse_a_wordless_text_as_the_first_step_does(bls_server):
    _, server, _ = bls_server
    module, client = triton_client(server.grpc_url, "grpc")
    messages = []
    for model in (C.ENSEMBLE, "bls", "bls_dag"):
        with pytest.raises(module.InferenceServerException) as refused:
            client.infer(model, [text_input(module, [" ... "])])
        messages.append(str(refused.value))
    assert all("holds no words" in m for m in messages), messages


def test_each_step_times_its_execute_in_its_stub(bls_server):
    """--steps' second table: every step of the ensemble adds up where its execute time goes
    (the admission gate, reading, the runner, answering), in the real stub, and writes it
    before it answers, so that one more request flushes it."""
    _, server, folder = bls_server
    bench = load_benchmark("bench_overhead")
    texts = default_texts()[0][:6]
    before = bench.phase_snapshot(folder, server.grpc_url, C.ENSEMBLE, texts[0])
    module, client = triton_client(server.grpc_url, "grpc")
    for text in texts:
        client.infer(C.ENSEMBLE, [text_input(module, [text])])
    rows = phase_rows(before, bench.phase_snapshot(folder, server.grpc_url, C.ENSEMBLE, texts[0]))
    assert set(C.step_models(parallel=False)) <= set(rows), rows
    for step in C.step_models(parallel=False):
        row = rows[step]
        assert row["requests_per_execute"] >= 1.0
        assert all(row[name] > 0.0 for name in (*PHASES, "execute")), (step, row)
        assert row["write"] >= 0.0
        assert row["run"] < row["execute"], (step, row)
    assert rows[C.FEATURIZE]["run"] > rows[C.POSTPROCESS]["run"], "the features cost more than a weighted mean"
    slower = {step: {key: 3 * value for key, value in row.items()} for step, row in rows.items()}
    medians = bench.median_phases([rows, slower, slower])
    assert medians[C.BERT]["execute"] == pytest.approx(3 * rows[C.BERT]["execute"])


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
                "compute_infer_ms_per_execution": 2 * infer,  # two requests in each execution
            },
            C.BERT: {"requests": 0, "executions": 0},  # not reached in these rounds: left out
        }

    rows = load_benchmark("bench_overhead").step_rows([round_(1.0, 1.0, 10), round_(3.0, 2.0, 5), round_(2.0, 9.0, 4)])
    assert list(rows) == [C.FOREST]
    assert rows[C.FOREST]["queue_ms"] == pytest.approx(2.0)
    assert rows[C.FOREST]["compute_ms"] == pytest.approx(2.3)  # the median of 1.3, 2.3, 9.3
    assert rows[C.FOREST]["requests_per_execution"] == pytest.approx(2.0)
    assert rows[C.FOREST]["compute_ms_per_execution"] == pytest.approx(4.0)  # the median of 2, 4, 18


def test_runner_times_times_each_step_of_the_serial_wiring(tiny_artifacts):
    from readability_triton.pipeline import Pipeline

    times = load_benchmark("bench_overhead").runner_times(
        Pipeline.from_folder(tiny_artifacts), default_texts()[0][:4], 0.3
    )
    assert list(times) == list(C.step_models(parallel=False))
    assert all(0 < ms < 1000 for ms in times.values()), times


def test_runner_times_of_the_fused_repository_charge_bert_and_the_forest_to_their_homes():
    """The fused repository's steps: bert's time in preprocess's, the forest's in featurize's."""
    import numpy as np

    bench = load_benchmark("bench_overhead")

    class Pipeline:
        def features(self, rows):
            time.sleep(0.002)
            return np.zeros((len(rows), 3), np.float32), np.ones((len(rows), 1), np.float32)

        def forest(self, features):
            time.sleep(0.004)
            return np.zeros((len(features), 1), np.float32)

        def tokenizer(self, rows):
            return np.zeros((len(rows), 4), np.int64), np.ones((len(rows), 4), np.int64)

        def bert(self, ids, mask):
            time.sleep(0.006)
            return np.zeros((len(ids), 1), np.float32)

        def blender(self, *args):
            return args

    times = bench.runner_times(Pipeline(), ["a text. It reads."], 0.2, fused=True)
    assert list(times) == list(C.step_models(parallel=False, fused=True))
    assert times[C.FEATURIZE] >= 6.0 and times[C.PREPROCESS] >= 6.0 and times[C.POSTPROCESS] < 2.0, times


def test_a_server_started_in_environment_hands_it_to_every_stub(bls_server):
    """What --baseline-code rests on: a variable set by `environment` while a server starts
    reaches each of its python-backend stubs (the fixture sets the phases folder so), and
    check_baseline_code refuses a server whose stubs do not import from the given code."""
    bls, server, phases = bls_server
    bench = load_benchmark("bench_overhead")
    stubs = bench.stub_environment(server.pid, PHASES_ENV)
    models = [m for m in os.listdir(bls) if read_config(os.path.join(bls, m, "config.pbtxt")).backend == "python"]
    assert len(stubs) == len(models) >= 7  # five steps and the two orchestrators
    assert set(stubs.values()) == {phases}
    with pytest.raises(RuntimeError, match="do not import from"):
        bench.check_baseline_code(server.pid, ROOT)
