"""`build-demo` (`training.demo`, `corpus`, `training.ridge_head`): a complete
artifact set offline (tiny BERT, small generated corpus: seconds), its manifest, the
cache, the refusals."""

from __future__ import annotations

import os

import numpy as np
import pytest
from harness import write_csv

from readability_triton import contracts
from readability_triton import corpus as D
from readability_triton.cli import main
from readability_triton.layout import (
    MODEL_FILES,
    OPTIONAL_FILES,
    check_artifacts,
    load_manifest,
)
from readability_triton.pipeline import Pipeline
from readability_triton.training.ridge_head import select_head

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.slow  # trains and exports models (make check leaves it out)

MAX_LENGTH = 64
SMALL = ["--bert", "tiny", "--corpus-size", "80", "--folds", "2", "--max-length", str(MAX_LENGTH)]
#: Where ONNX is not under test: the TorchScript export only (no dynamo ONNX export, ~4 s each).
TORCHSCRIPT = [*SMALL, "--bert-format", "torchscript"]


@pytest.fixture(scope="module")
def demo_set(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "artifacts"
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["build-demo", "--out", str(out), *SMALL]) == 0
    return out, buffer.getvalue()


def test_build_demo_writes_a_complete_checked_set(demo_set):
    out, printed = demo_set
    expected = {name for names in MODEL_FILES.values() for name in names} | {"model.onnx", "model.pt"}
    expected |= {name for names in OPTIONAL_FILES.values() for name in names} | {"manifest.json"}
    assert set(os.listdir(out)) == expected
    manifest = check_artifacts(str(out), max_length=MAX_LENGTH)  # what `assemble` checks
    assert manifest.n_features == contracts.N_FEATURES and manifest.max_length == MAX_LENGTH
    assert set(manifest.files) == expected - {"manifest.json"}
    assert {"torch", "transformers", "treelite", "scikit-learn"} <= set(manifest.versions)
    info = manifest.info
    assert info["data"]["generated"] is True and info["data"]["calibrated"] is False
    assert info["bert"]["kind"] == "tiny" and info["bert"]["pooling"] in ("pooler", "cls", "mean", "layers_mean")
    assert info["bert"]["export_max_abs_diff"] <= 1e-4 and info["bert"]["head_check_max_abs_diff"] <= 1e-3
    assert set(info["bert"]["cv_rmse_by_pooling"]) == {"pooler", "cls", "mean", "layers_mean"}
    assert set(info["bert"]["exports"]) == {"onnx", "torchscript"}  # both formats, each verified
    assert all(e["max_abs_diff"] <= 1e-4 for e in info["bert"]["exports"].values())
    assert info["forest"]["cv_rmse"] < info["forest"]["mean_rmse"]
    # SCORE's weights, fitted on the two branches' out-of-fold predictions (same folds)
    blend = info["blend"]
    assert manifest.blend_weights == (blend["bert_weight"], blend["forest_weight"])
    assert blend["bert_weight"] + blend["forest_weight"] == pytest.approx(1.0)
    assert min(blend["bert_weight"], blend["forest_weight"]) >= 0.0
    assert blend["rmse"]["bert"] == pytest.approx(info["bert"]["cv_rmse"])
    assert blend["rmse"]["forest"] == pytest.approx(info["forest"]["cv_rmse"])
    rmse = blend["rmse"]
    assert rmse["score"] <= min(rmse["bert"], rmse["forest"], rmse["score_at_0.5"]) + 1e-6  # float32 blend
    assert blend["n_texts"] == 80 and "out-of-fold" in blend["fitted_on"]
    # the intervals, calibrated on the same out-of-fold predictions (80 texts: one length band)
    interval = info["interval"]
    assert interval["n"] == 80 and interval["source"] == blend["fitted_on"] and len(interval["scores"]) == 1
    assert interval["weights"] == pytest.approx([blend["bert_weight"], blend["forest_weight"]])
    assert "illustrative" in printed and "not CommonLit-calibrated" in printed


def test_demo_artifacts_score_texts_like_serving(demo_set):
    """What the served models compute (the in-process pipeline runs the same runners)."""
    out, _ = demo_set
    unseen, targets = D.generate_corpus(40, seed=99)
    texts = [unseen[int(np.argmax(targets))], unseen[int(np.argmin(targets))]]  # easiest, hardest
    got = Pipeline.from_folder(str(out))(texts)
    assert set(got) == set(contracts.OUTPUTS)
    low, score, high = got[contracts.SCORE_LOW], got[contracts.SCORE], got[contracts.SCORE_HIGH]
    assert (low < score).all() and (score < high).all()  # calibrated: not the whole scale
    for scores in got.values():
        assert scores.dtype == np.float32 and scores.shape == (2,) and np.isfinite(scores).all()
    forest, bert = got[contracts.FOREST_SCORE], got[contracts.BERT_SCORE]
    assert forest[0] > forest[1] and bert[0] > bert[1]  # both rank the easy text easier


def test_build_demo_is_cached_and_rebuilds_on_change(demo_set, tmp_path, capsys):
    out, _ = demo_set
    before = {name: os.stat(out / name).st_mtime_ns for name in os.listdir(out)}
    assert main(["build-demo", "--out", str(out), *SMALL]) == 0
    assert "up to date" in capsys.readouterr().out
    assert {name: os.stat(out / name).st_mtime_ns for name in os.listdir(out)} == before

    # a tampered file is not "up to date": the set is rebuilt
    copy = tmp_path / "copy"
    assert main(["build-demo", "--out", str(copy), *TORCHSCRIPT]) == 0
    capsys.readouterr()
    with open(copy / "vocabulary.json", "a", encoding="utf-8") as handle:
        handle.write(" ")
    assert main(["build-demo", "--out", str(copy), *TORCHSCRIPT]) == 0
    assert "built in" in capsys.readouterr().out
    check_artifacts(str(copy), max_length=MAX_LENGTH)
    # another option: rebuilt
    assert main(["build-demo", "--out", str(copy), *TORCHSCRIPT, "--seed", "1"]) == 0
    assert "built in" in capsys.readouterr().out
    assert load_manifest(str(copy)).info["bert"]["kind"] == "tiny"
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".")]  # no temporary folders left


def test_build_demo_with_data(tmp_path, capsys):
    texts, targets = D.generate_corpus(60, seed=9)
    path = write_csv(tmp_path / "train.csv", [(i, t, y) for i, (t, y) in enumerate(zip(texts, targets))])
    out = tmp_path / "set"
    assert main(["build-demo", "--out", str(out), "--data", path, *TORCHSCRIPT]) == 0
    printed = capsys.readouterr().out
    assert "illustrative" not in printed
    data = load_manifest(str(out)).info["data"]
    assert data["generated"] is False and data["calibrated"] is True and data["n_texts"] == 60
    assert len(data["sha256"]) == 64


@pytest.mark.parametrize(
    "rows, header, message",
    [
        ([], None, "the file is empty"),
        ([(1, "A text.", 0.5)], ("id", "body", "target"), "no column 'excerpt'"),
        ([(1, "A text.", "n/a")], ("id", "excerpt", "target"), "is not a number"),
    ],
)
def test_build_demo_refuses_bad_csv(tmp_path, capsys, rows, header, message):
    path = write_csv(tmp_path / "bad.csv", rows, header)
    assert main(["build-demo", "--out", str(tmp_path / "set"), "--data", path, *SMALL]) == 2
    err = capsys.readouterr().err
    assert "build-demo: error:" in err and message in err
    assert not (tmp_path / "set").exists()


def test_build_demo_refuses_to_replace_a_foreign_folder(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["build-demo", "--out", str(tmp_path), *SMALL]) == 2
    assert "not empty and holds no manifest.json" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_generated_corpus_is_deterministic_and_graded():
    texts, targets = D.generate_corpus(200, seed=0)
    assert (texts, targets) == D.generate_corpus(200, seed=0)
    assert texts != D.generate_corpus(200, seed=1)[0]
    y = np.asarray(targets)
    assert y.std() > 1.0 and -5 < y.min() < -2.5 and 0.8 < y.max() < 2
    words_per_sentence = np.array([len(t.split()) / max(1, sum(t.count(c) for c in ".!?")) for t in texts])
    assert np.corrcoef(words_per_sentence, y)[0, 1] < -0.8  # longer sentences: harder
    assert [D.corpus_target(t) for t in texts[:5]] == targets[:5]


def test_head_selection_reports_every_pooling():
    rng = np.random.default_rng(0)
    y = rng.normal(size=60)
    pooled = {
        "good": np.c_[y + 0.01 * rng.normal(size=60), rng.normal(size=(60, 3))],
        "noise": rng.normal(size=(60, 4)),
    }
    head = select_head(pooled, y, folds=3)
    assert head["pooling"] == "good" and head["cv_rmse"] < 0.1 < head["cv_rmse_by_pooling"]["noise"]
    assert head["coef"].shape == (4,)
