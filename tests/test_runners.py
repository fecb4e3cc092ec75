"""Every runner meets `runners.Runner`: `describe` and `__call__`; the ones that read a
folder meet `runners.FolderRunner` (`FILES` from `layout`, a `from_folder` classmethod).
Checked on the classes, on instances built from a real artifact set, and on the runner
every adapter in `backends/` hands to the runtime."""

from __future__ import annotations

import dataclasses
import inspect
import os

import pytest
from harness import load_model, make_model_dir

from readability_triton import contracts as C
from readability_triton import layout
from readability_triton.bert.runner import OnnxRunner, TorchScriptRunner
from readability_triton.features.runner import FeatureRunner
from readability_triton.forest.arrays import ArrayForestRunner
from readability_triton.forest.runner import GTILRunner
from readability_triton.runners import FolderRunner, Runner
from readability_triton.tokenizer.runner import TokenizerRunner

FOLDER_RUNNERS = (TokenizerRunner, FeatureRunner, GTILRunner, ArrayForestRunner, TorchScriptRunner, OnnxRunner)
FILE_NAMES = {value for name, value in vars(layout).items() if name.isupper() and isinstance(value, str)}
#: Each adapter's model and the artifact files its version folder needs.
ADAPTERS = {
    C.VALIDATE: [],
    C.PREPROCESS: ["vocab.txt", "tokenizer.json", "manifest.json"],
    C.FEATURIZE: ["vocabulary.json", "manifest.json"],
    C.BERT: ["model.onnx"],
    C.FOREST: ["checkpoint.tl"],
    C.POSTPROCESS: [],
}


@pytest.mark.parametrize("runner", FOLDER_RUNNERS, ids=lambda r: r.__name__)
def test_every_folder_runner_declares_its_files_and_the_same_methods(runner):
    assert isinstance(runner.FILES, tuple) and runner.FILES and set(runner.FILES) <= FILE_NAMES
    assert isinstance(inspect.getattr_static(runner, "from_folder"), classmethod)
    assert callable(runner.describe) and callable(runner.__call__)


def test_runners_built_from_a_set_are_folder_runners(tiny_artifacts):
    manifest = layout.load_manifest(tiny_artifacts)
    built = [
        TokenizerRunner.from_folder(tiny_artifacts, 64, manifest=manifest),
        FeatureRunner.from_folder(tiny_artifacts, manifest=manifest),
        GTILRunner.from_folder(tiny_artifacts),
        OnnxRunner.from_folder(tiny_artifacts),
        TorchScriptRunner.from_folder(tiny_artifacts),
    ]
    for runner in built:
        assert isinstance(runner, FolderRunner) and runner.describe()


def test_a_manifest_read_once_is_checked_like_the_folders_own(tiny_artifacts):
    manifest = layout.load_manifest(tiny_artifacts)
    with pytest.raises(ValueError, match="built for max_length 64"):
        TokenizerRunner.from_folder(tiny_artifacts, 32, manifest=manifest)
    other = dataclasses.replace(manifest, n_features=manifest.n_features + 1)
    with pytest.raises(ValueError, match="features"):
        FeatureRunner.from_folder(tiny_artifacts, manifest=other)


@pytest.mark.parametrize("model", list(ADAPTERS))
def test_the_runner_every_adapter_hands_to_the_runtime_is_a_runner(model, tiny_artifacts, tmp_path):
    files = {name: os.path.join(tiny_artifacts, name) for name in ADAPTERS[model]}
    served = load_model(make_model_dir(str(tmp_path), model, profile="portable", files=files, max_length=64))
    assert isinstance(served.runner, Runner) and served.runner.describe()
