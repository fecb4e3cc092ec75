"""The `portable-gpu` profile: the GPU pipeline a plain python-backend server can host.
Here, without a GPU: its forest (the array tree walk) equals Treelite's GTIL exactly
through its NumPy twin, and the whole profile is served by the real tritonserver with its
instances turned to KIND_CPU (the GPU kit's `--cpu-dry-run`), scoring what the `portable`
profile scores and recording where every input arrived. On a GPU (marked `gpu`): the
same runners on CuPy and torch CUDA."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil

import numpy as np
import pytest

from readability_triton import contracts as C
from readability_triton.forest.arrays import ArrayForestRunner, export_forest_arrays
from readability_triton.forest.runner import GTILRunner, forest_runner
from readability_triton.layout import FOREST_ARRAYS
from readability_triton.repository import assemble as repository
from readability_triton.repository.options import AssemblyOptions
from readability_triton.stub.runtime import ARRIVALS_ENV


@pytest.fixture(scope="module")
def forest_folder(tiny_artifacts, tmp_path_factory):
    folder = tmp_path_factory.mktemp("forest")
    shutil.copyfile(os.path.join(tiny_artifacts, "checkpoint.tl"), folder / "checkpoint.tl")
    prepared = os.path.join(tiny_artifacts, FOREST_ARRAYS)  # the GPU kit's set (no Treelite there)
    if os.path.isfile(prepared) and importlib.util.find_spec("treelite") is None:
        shutil.copyfile(prepared, folder / FOREST_ARRAYS)
        return str(folder)
    meta = export_forest_arrays(str(folder / "checkpoint.tl"), str(folder / FOREST_ARRAYS))
    assert meta["n_trees"] > 1 and meta["depth"] >= 1
    return str(folder)


def _features(n_features, rows=600, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.gamma(0.6, 0.2, size=(rows, n_features)).astype(np.float32)
    x[::7] = 0.0
    return x


def test_array_forest_equals_gtil_exactly(forest_folder, tiny_artifacts):
    from readability_triton.corpus import generate_corpus
    from readability_triton.features.runner import FeatureRunner

    gtil, walk = GTILRunner.from_folder(forest_folder), forest_runner(forest_folder)
    assert isinstance(walk, ArrayForestRunner) and walk.n_features == gtil.n_features
    real = FeatureRunner.from_folder(tiny_artifacts)(generate_corpus(200)[0])
    for x in (real, _features(gtil.n_features), _features(gtil.n_features, 1)):
        got, want = walk(x), gtil(x)
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="features per text"):
        walk(np.zeros((2, 3), np.float32))


def test_commonlit_forest_equals_gtil_exactly(commonlit):
    """The shipped demo forest (100 trees, depth 16) on the CommonLit excerpts' features."""
    folder = os.path.join(os.path.dirname(os.path.dirname(__file__)), ".cache", "demo-artifacts")
    if not os.path.isfile(os.path.join(folder, "checkpoint.tl")):
        pytest.skip("no demo artifact set in .cache/demo-artifacts (make demo builds it)")
    import tempfile

    from readability_triton.features.runner import FeatureRunner

    with tempfile.TemporaryDirectory() as tmp:
        shutil.copyfile(os.path.join(folder, "checkpoint.tl"), os.path.join(tmp, "checkpoint.tl"))
        export_forest_arrays(os.path.join(tmp, "checkpoint.tl"), os.path.join(tmp, FOREST_ARRAYS))
        x = FeatureRunner.from_folder(folder)(commonlit.texts)
        np.testing.assert_array_equal(ArrayForestRunner.from_folder(tmp)(x), GTILRunner.from_folder(tmp)(x))


def test_arrays_from_another_checkpoint_are_refused(forest_folder, tmp_path):
    shutil.copyfile(os.path.join(forest_folder, FOREST_ARRAYS), tmp_path / FOREST_ARRAYS)
    (tmp_path / "checkpoint.tl").write_bytes(b"not the same checkpoint")
    with pytest.raises(ValueError, match="another checkpoint"):
        ArrayForestRunner.from_folder(str(tmp_path))
    with pytest.raises(ValueError, match="no forest_arrays.npz"):
        ArrayForestRunner.from_folder(str(tmp_path / "nowhere"))


@pytest.mark.integration
@pytest.mark.parametrize("fused", [False, True], ids=["separate", "fused"])
def test_portable_gpu_profile_serves_on_the_cpu_as_portable_does(tiny_artifacts, tmp_path, monkeypatch, fused):
    """Also fused (`assemble --fused`): torch's BERT inside preprocess, the CuPy tree walk
    inside featurize, on NumPy here."""
    from served import score_texts, start_server

    from readability_triton.pipeline import Pipeline

    repo = str(tmp_path / "repo")
    repository.assemble(tiny_artifacts, repo, AssemblyOptions("portable-gpu", fused=fused))
    repository.cpu_dry_run(repo)
    arrivals = tmp_path / "arrivals"
    arrivals.mkdir()
    monkeypatch.setenv(ARRIVALS_ENV, str(arrivals))
    server = start_server(repo, str(tmp_path / "server.log"), str(tmp_path / "backends"))
    texts = [
        "A short and easy text.",
        "Notwithstanding the aforementioned stipulations, the lessee pays.",
        "The cat sat on the mat. It was warm.",
    ]
    try:
        got = score_texts(server, "http", texts)
    finally:
        assert server.stop() == 0
    want = Pipeline.from_folder(tiny_artifacts)(texts)
    np.testing.assert_array_equal(got[C.FOREST_SCORE].ravel(), want[C.FOREST_SCORE])
    np.testing.assert_allclose(got[C.BERT_SCORE].ravel(), want[C.BERT_SCORE], rtol=0, atol=1e-5)
    log = open(tmp_path / "server.log", encoding="utf-8", errors="replace").read()
    assert "array tree walk" in log
    for model in (C.POSTPROCESS,) if fused else (C.BERT, C.FOREST, C.POSTPROCESS):
        record = json.loads((arrivals / f"{model}.json").read_text())
        assert record["device"] == "CPU"  # the dry run; on the GPU kit: "GPU 0" and only "gpu" arrivals
        assert all(c["cpu"] >= 1 and c["gpu"] == 0 for c in record["inputs"].values()), record


@pytest.mark.gpu
def test_gpu_runners_equal_the_cpu_ones(tiny_artifacts, forest_folder):
    import cupy

    from readability_triton.bert.runner import TorchScriptRunner

    twin = ArrayForestRunner.from_folder(forest_folder)  # equal to GTIL (tests above, on the CPU)
    x = _features(twin.n_features)
    on_gpu = ArrayForestRunner.from_folder(forest_folder, "gpu")(cupy.asarray(x))
    assert isinstance(on_gpu, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(on_gpu), twin(x))
    cpu, gpu = TorchScriptRunner.from_folder(tiny_artifacts), TorchScriptRunner.from_folder(tiny_artifacts, "gpu")
    ids = np.random.default_rng(0).integers(0, 50, size=(4, 16)).astype(np.int64)
    mask = np.ones_like(ids)
    scores = gpu(cupy.asarray(ids), cupy.asarray(mask))
    assert isinstance(scores, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(scores), cpu(ids, mask), atol=1e-4)
