"""SCORE's fitted weights: `metrics.fit_blend`, `train-blend` (`training.blend`) on
out-of-fold predictions and on held-out texts, its refusals, and `assemble` rendering the
fitted weights by default (explicit ones override)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from harness import parse_config, save_bert_checkpoint, tiny_bert_config, write_csv

from readability_triton import contracts as C
from readability_triton import metrics, scoring
from readability_triton.cli import main
from readability_triton.corpus import generate_corpus
from readability_triton.intervals import IntervalParameters, for_blend
from readability_triton.layout import TRAINING_RECORD, load_manifest
from readability_triton.pipeline import Pipeline

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("treelite")

pytestmark = pytest.mark.slow  # trains and exports models (make check leaves it out)

MAX_LENGTH = 32


def test_fit_blend_is_the_constrained_least_squares():
    """The fitted BERT weight minimises the blend's squared error over [0, 1] (checked
    against a fine grid), the weights sum to 1, and the reported RMSEs are the RMSEs."""
    rng = np.random.default_rng(0)
    y = rng.normal(size=300)
    bert = y + rng.normal(scale=0.5, size=300)
    forest = y + rng.normal(scale=0.8, size=300) + 0.3 * (bert - y)  # correlated errors, as in practice
    record = metrics.fit_blend(bert, forest, y)
    grid = np.linspace(0.0, 1.0, 100001)
    losses = [metrics.rmse(scoring.blend(bert, forest, w, 1 - w), y) for w in grid[::100]]
    best = grid[::100][int(np.argmin(losses))]
    assert abs(record["bert_weight"] - best) <= 1e-3
    assert record["bert_weight"] + record["forest_weight"] == pytest.approx(1.0)
    assert record["rmse"]["score"] <= min(losses) + 1e-12
    assert record["rmse"]["score"] < min(record["rmse"]["bert"], record["rmse"]["forest"])
    assert record["rmse"]["bert"] == pytest.approx(metrics.rmse(bert, y))
    assert record["rmse"]["score_at_0.5"] == pytest.approx(metrics.rmse((bert + forest) / 2, y))
    assert record["n_texts"] == 300
    # non-negative: a branch that only adds error gets weight 0, not a negative one
    assert metrics.fit_blend(y + 0.1, y + 5 + rng.normal(size=300), y)["forest_weight"] == 0.0
    assert metrics.fit_blend(y + 5 + rng.normal(size=300), y + 0.1, y)["bert_weight"] == 0.0


def _csv(path, texts, targets):
    return write_csv(path, [(i, t, y) for i, (t, y) in enumerate(zip(texts, targets))])


@pytest.fixture(scope="module")
def separately_trained(tmp_path_factory):
    """A set whose branches were trained by separate commands on one CSV, both with 2
    folds and seed 0: train-bert (a tiny BERT) + export-bert, and train-forest."""
    from transformers import BertModel

    root = tmp_path_factory.mktemp("blend")
    texts, targets = generate_corpus(40, seed=5)
    data = _csv(root / "train.csv", texts, targets)
    torch.manual_seed(0)
    base = save_bert_checkpoint(root / "base", BertModel(tiny_bert_config()), MAX_LENGTH)
    tuned, out = root / "tuned", root / "set"
    assert (
        main(
            [
                "train-bert",
                "--data",
                data,
                "--base",
                base,
                "--out",
                str(tuned),
                "--epochs",
                "2",
                "--batch-size",
                "8",
                "--max-length",
                str(MAX_LENGTH),
                "--folds",
                "2",
                "--lr",
                "1e-3",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "export-bert",
                "--checkpoint",
                str(tuned),
                "--out",
                str(out / "model.onnx"),
                "--max-length",
                str(MAX_LENGTH),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "train-forest",
                "--data",
                data,
                "--out",
                str(out),
                "--n-estimators",
                "8",
                "--max-depth",
                "6",
                "--folds",
                "2",
            ]
        )
        == 0
    )
    return {"root": root, "data": data, "texts": texts, "targets": targets, "set": str(out), "tuned": tuned}


def _copy(src, dst):
    import shutil

    shutil.copytree(src, dst)
    return str(dst)


def test_train_blend_fits_on_the_recorded_out_of_fold_predictions(separately_trained, tmp_path, capsys):
    s = separately_trained
    folder = _copy(s["set"], tmp_path / "set")
    assert load_manifest(folder).blend_weights is None
    capsys.readouterr()
    assert main(["train-blend", "--artifacts", folder, "--data", s["data"]]) == 0
    printed = capsys.readouterr().out
    assert "out-of-fold predictions of the 40 training texts (2 folds, seed 0)" in printed
    blend = load_manifest(folder).info["blend"]
    # the same numbers from the two records the training commands wrote
    bert_oof = json.loads((s["tuned"] / TRAINING_RECORD).read_text())["oof"]
    forest_oof = load_manifest(folder).info["forest"]["oof"]
    want = metrics.fit_blend(np.array(bert_oof), np.array(forest_oof), np.array(s["targets"]))
    assert blend["bert_weight"] == pytest.approx(want["bert_weight"])
    assert blend["rmse"] == pytest.approx(want["rmse"])
    assert blend["rmse"]["score"] <= min(blend["rmse"]["bert"], blend["rmse"]["forest"]) + 1e-6  # float32 blend
    assert load_manifest(folder).blend_weights == pytest.approx((want["bert_weight"], want["forest_weight"]))
    # the in-process pipeline and assemble take them by default
    assert Pipeline.from_folder(folder).weights == pytest.approx(load_manifest(folder).blend_weights)
    repo = tmp_path / "repo"
    assert main(["assemble", "--profile", "portable", "--artifacts", folder, "--out", str(repo)]) == 0
    assert "fitted)" in capsys.readouterr().out
    post = parse_config(str(repo / C.POSTPROCESS / "config.pbtxt"))
    rendered = (
        float(post.parameters[C.BERT_WEIGHT].string_value),
        float(post.parameters[C.FOREST_WEIGHT].string_value),
    )
    assert rendered == pytest.approx(load_manifest(folder).blend_weights)
    # the interval, calibrated on the same predictions, at assemble's default level
    calibration = load_manifest(folder).info["interval"]
    assert calibration["n"] == 40 and calibration["source"] == blend["fitted_on"]
    assert IntervalParameters.from_parameters({k: v.string_value for k, v in post.parameters.items()}) == for_blend(
        calibration, load_manifest(folder).blend_weights, 0.9
    )
    assert (
        main(
            [
                "assemble",
                "--profile",
                "portable",
                "--artifacts",
                folder,
                "--out",
                str(repo),
                "--force",
                "--bert-weight",
                "0.2",
                "--forest-weight",
                "0.8",
            ]
        )
        == 0
    )
    assert "as given" in capsys.readouterr().out
    post = parse_config(str(repo / C.POSTPROCESS / "config.pbtxt"))
    assert float(post.parameters[C.BERT_WEIGHT].string_value) == pytest.approx(0.2)
    assert (
        main(
            [
                "assemble",
                "--profile",
                "portable",
                "--artifacts",
                folder,
                "--out",
                str(repo),
                "--force",
                "--bert-weight",
                "0.2",
            ]
        )
        == 2
    )
    assert "or neither" in capsys.readouterr().err


def test_train_blend_on_held_out_texts(separately_trained, tmp_path, capsys):
    s = separately_trained
    folder = _copy(s["set"], tmp_path / "set")
    texts, targets = generate_corpus(30, seed=77)
    assert not set(texts) & set(s["texts"])
    held = _csv(tmp_path / "held.csv", texts, targets)
    assert main(["train-blend", "--artifacts", folder, "--data", held]) == 0
    assert "predictions of 30 texts it did not train on" in capsys.readouterr().out
    predicted = Pipeline.from_folder(folder, 0.5, 0.5)(texts)
    want = metrics.fit_blend(predicted[C.BERT_SCORE], predicted[C.FOREST_SCORE], np.array(targets))
    blend = load_manifest(folder).info["blend"]
    assert blend["bert_weight"] == pytest.approx(want["bert_weight"], abs=1e-6)
    assert blend["data"]["path"].endswith("held.csv")


def test_train_blend_on_too_few_texts_for_intervals_records_the_blend_and_no_interval(
    separately_trained, tmp_path, capsys
):
    s = separately_trained
    folder = _copy(s["set"], tmp_path / "set")
    texts, targets = generate_corpus(12, seed=78)
    held = _csv(tmp_path / "held.csv", texts, targets)
    assert main(["train-blend", "--artifacts", folder, "--data", held]) == 0
    assert "12 texts are too few to calibrate intervals" in capsys.readouterr().err
    info = load_manifest(folder).info
    assert info["blend"]["data"]["path"].endswith("held.csv") and info["interval"] == {}
    assert Pipeline.from_folder(folder)(texts[:2])[C.SCORE_LOW].tolist() == [-4.0, -4.0]


def test_train_blend_refuses_to_fit_on_training_texts_in_sample(separately_trained, tmp_path, capsys):
    s = separately_trained
    folder = _copy(s["set"], tmp_path / "set")
    # a part of the training CSV: not the recorded folds, and the models saw these texts
    part = _csv(tmp_path / "part.csv", s["texts"][:20], s["targets"][:20])
    assert main(["train-blend", "--artifacts", folder, "--data", part]) == 2
    err = capsys.readouterr().err
    assert "20 of these 20 texts are texts" in err and "--folds" in err
    # the forest retrained with another seed: its folds are not BERT's
    assert (
        main(
            [
                "train-forest",
                "--data",
                s["data"],
                "--out",
                folder,
                "--n-estimators",
                "8",
                "--max-depth",
                "6",
                "--folds",
                "2",
                "--seed",
                "3",
            ]
        )
        == 0
    )
    assert main(["train-blend", "--artifacts", folder, "--data", s["data"]]) == 2
    assert "40 of these 40 texts" in capsys.readouterr().err
    assert load_manifest(folder).blend_weights is None  # nothing written on refusal
    # a set with one branch
    forest_only = tmp_path / "forest_only"
    assert (
        main(["train-forest", "--data", s["data"], "--out", str(forest_only), "--n-estimators", "4", "--folds", "0"])
        == 0
    )
    texts, targets = generate_corpus(10, seed=78)
    assert (
        main(["train-blend", "--artifacts", str(forest_only), "--data", _csv(tmp_path / "h.csv", texts, targets)]) == 2
    )
    assert "both branches" in capsys.readouterr().err
