"""The ensemble's outputs: one vocabulary (the contract names), and each output in every place
docs/development.md's "Adding an output" names: the contract, its heading, the step that
computes it, the canonical configs, the in-process Pipeline's keys, and the docs."""

from __future__ import annotations

import os
import re

import pytest

from readability_triton import contracts as C
from readability_triton.repository.configs import read_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(*parts: str) -> str:
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return handle.read()


def test_every_output_has_one_heading_and_the_tables_follow_it():
    assert set(C.HEADING) == set(C.OUTPUTS) and len(C.HEADING) == len(C.OUTPUTS)
    headings = list(C.HEADING.values())
    assert len(set(headings)) == len(headings)  # a table's columns tell apart
    assert all(0 < len(h) <= 8 for h in headings)  # the table's column width


@pytest.mark.parametrize("fused", [False, True])
def test_every_output_is_computed_by_one_step_and_answered_by_the_ensemble(fused):
    ensemble = C.contracts(fused=fused)[C.ENSEMBLE]
    assert [spec.name for spec in ensemble.outputs] == list(C.OUTPUTS)
    for parallel in (True, False):
        produced: dict[str, str] = {}
        for model, _, outputs in C.ensemble_steps(parallel, fused):
            for name in outputs.values():
                assert name not in produced, f"{name}: computed by {produced[name]} and {model}"
                produced[name] = model
        for name in C.OUTPUTS:
            assert name in produced, f"no step of the ensemble ({'parallel' if parallel else 'serial'}) computes {name}"


def test_the_canonical_ensemble_config_answers_every_output():
    config = read_config(os.path.join(ROOT, "model_repository", C.ENSEMBLE, "config.pbtxt"))
    assert [output.name for output in config.output] == list(C.OUTPUTS)


def test_every_output_is_documented_in_the_tensor_table_and_the_readme():
    tensors = _read("docs", "architecture.md").split("## Tensor contracts", 1)[1].split("\n## ", 1)[0]
    readme = _read("README.md")
    outputs_table = readme[readme.index("| output | what it is |") :].split("\n\n", 1)[0]
    for name in C.OUTPUTS:
        assert re.search(rf"^\|[^\n]*`{name}`", tensors, re.M), f"{name}: no row in architecture.md's tensor table"
        assert f"`{name}`" in outputs_table, f"{name}: not in the README's outputs table"


def test_the_in_process_pipeline_answers_the_contract_names(tiny_artifacts):
    from readability_triton.pipeline import Pipeline

    pipeline = Pipeline.from_folder(tiny_artifacts)
    got = pipeline(["The cat sat on the mat.", "A second text, a little longer than the first."])
    assert tuple(got) == pipeline.outputs == C.OUTPUTS
    assert all(values.shape == (2,) for values in got.values())
