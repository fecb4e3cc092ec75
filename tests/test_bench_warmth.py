"""benchmarks/bench_warmth.py: each runner timed per text four ways (hot, after an idle
pause, after a cache sweep, both), on the tiny set's portable repository, in one run."""

from __future__ import annotations

import math

import numpy as np
import pytest
from harness import load_benchmark

from readability_triton.repository import assemble as repository
from readability_triton.repository.options import AssemblyOptions


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_warmth")


def test_every_runner_is_timed_every_way(bench, tiny_artifacts, tmp_path):
    repo = str(tmp_path / "repository")
    repository.assemble(tiny_artifacts, repo, AssemblyOptions("portable"))
    pipeline = repository.repository_pipeline(repo)
    texts = ["The cat sat on the mat. It was happy.", "A longer sentence follows here, and then it ends."] * 3
    seen = []
    result = bench.measure(pipeline, texts, rounds=2, pause_ms=0.2, sweep_mib=1, progress=seen.append)
    assert sorted(result) == sorted(bench.WAYS) and len(seen) == 2 * len(bench.WAYS)
    for way, cell in result.items():
        assert sorted(cell) == sorted((*bench.RUNNERS, "total")), way
        assert all(math.isfinite(v) and v > 0 for v in cell.values()), (way, cell)
        assert cell["total"] >= max(cell[name] for name in bench.RUNNERS)
    rows = bench.table(result).splitlines()
    assert len(rows) == 2 + len(bench.WAYS) and rows[2].startswith("| hot |") and rows[2].endswith("| 1.00 |")


def test_the_idle_pause_is_taken_before_each_text(bench, monkeypatch):
    """`idle` and `both` sleep the pause once per text, `hot` and `swept` never."""
    slept = []
    monkeypatch.setattr(bench.time, "sleep", slept.append)

    class Runner:
        def __call__(self, *args):
            return args[0], args[0]

    class Pipeline:
        features = tokenizer = Runner()
        forest = blender = staticmethod(lambda *a: a[0])

        @staticmethod
        def bert(ids, mask):
            return ids

    for way, sleeps in (("hot", 0), ("swept", 0), ("idle", 3), ("both", 3)):
        slept.clear()
        bench.time_texts(Pipeline(), ["a", "b", "c"], way, 0.004, np.zeros(4096, np.uint8))
        assert slept == [0.004] * sleeps, way


def test_bad_options_are_refused(bench, capsys):
    for argv in ([], ["--artifacts", "x", "--texts", "0"], ["--artifacts", "x", "--pause-ms", "-1"]):
        with pytest.raises(SystemExit) as err:
            bench.main(argv)
        assert err.value.code == 2
    assert "give --artifacts or --repository" in capsys.readouterr().err
