"""Every runner meets `runners.Runner` the same way: `FILES` from `layout`, a `from_folder`
classmethod, `describe` and `__call__` (checked on the classes, and on instances built from
a real artifact set)."""

from __future__ import annotations

import inspect

import pytest

from readability_triton import layout
from readability_triton.bert.runner import OnnxRunner, TorchScriptRunner
from readability_triton.features.runner import FeatureRunner
from readability_triton.forest.arrays import ArrayForestRunner
from readability_triton.forest.runner import GTILRunner
from readability_triton.runners import Runner
from readability_triton.tokenizer.runner import TokenizerRunner

RUNNERS = (TokenizerRunner, FeatureRunner, GTILRunner, ArrayForestRunner, TorchScriptRunner, OnnxRunner)
FILE_NAMES = {value for name, value in vars(layout).items() if name.isupper() and isinstance(value, str)}


@pytest.mark.parametrize("runner", RUNNERS, ids=lambda r: r.__name__)
def test_every_runner_declares_its_files_and_the_same_methods(runner):
    assert isinstance(runner.FILES, tuple) and runner.FILES and set(runner.FILES) <= FILE_NAMES
    assert isinstance(inspect.getattr_static(runner, "from_folder"), classmethod)
    assert callable(runner.describe) and callable(runner.__call__)


def test_runners_built_from_a_set_are_runners(tiny_artifacts):
    built = [
        TokenizerRunner.from_folder(tiny_artifacts, 64),
        FeatureRunner.from_folder(tiny_artifacts),
        GTILRunner.from_folder(tiny_artifacts),
        OnnxRunner.from_folder(tiny_artifacts),
        TorchScriptRunner.from_folder(tiny_artifacts),
    ]
    for runner in built:
        assert isinstance(runner, Runner) and runner.describe()
