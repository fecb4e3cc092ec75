"""`evaluate`, the in-process pipeline (`pipeline`), `metrics` and `scoring`:
predictions of an artifact set equal the models' own (Treelite GTIL, torch.jit,
postprocess arithmetic), RMSEs are right, and the refusals say what is wrong. The served
path is checked in test_server.py."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil

import numpy as np
import pytest
from harness import check_png, write_csv

from readability_triton import contracts as C
from readability_triton import folds, metrics, scoring
from readability_triton.cli import main
from readability_triton.errors import EvaluationError
from readability_triton.features import Vocabulary, featurize
from readability_triton.layout import load_manifest, write_manifest
from readability_triton.pipeline import Pipeline
from readability_triton.tokenizer import WordPieceTokenizer

torch = pytest.importorskip("torch")
treelite = pytest.importorskip("treelite")

TEXTS = [
    "A short and easy text.",
    "Another, somewhat longer, sentence follows it; then a third one.",
    "x",
    "Ünïcödé — “quotes”, 漢字とかな, emoji 😀.",
    "word " * 200,
    "Don't panic... she said!",
]
TARGETS = [0.5, -1.25, 0.0, -2.0, 1.0, -0.5]


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def own_predictions(directory, texts):
    """The artifacts' predictions computed directly with the libraries, one text at a time."""
    tokenizer = WordPieceTokenizer.from_directory(directory, load_manifest(directory).max_length)
    module = torch.jit.load(os.path.join(directory, "model.pt"), map_location="cpu").eval()
    forest = treelite.Model.deserialize(os.path.join(directory, "checkpoint.tl"))
    vocabulary = Vocabulary.load(os.path.join(directory, "vocabulary.json"))
    bert, trees = [], []
    for text in texts:
        ids, mask = tokenizer.encode([text])
        with torch.inference_mode():
            bert.append(float(module(torch.from_numpy(ids), torch.from_numpy(mask))[0, 0]))
        trees.append(float(treelite.gtil.predict(forest, featurize([text], vocabulary)).reshape(-1)[0]))
    return np.array(bert, np.float32), np.array(trees, np.float32)


def test_artifact_predictions_equal_the_models_own(tiny_artifacts):
    got = Pipeline.from_folder(tiny_artifacts)(TEXTS, batch_size=4)
    bert, forest = own_predictions(tiny_artifacts, TEXTS)
    assert set(got) == set(C.OUTPUTS)
    np.testing.assert_allclose(got[C.BERT_SCORE], bert, rtol=0, atol=1e-5)  # batch of 4 vs 1: float noise only
    np.testing.assert_array_equal(got[C.FOREST_SCORE], forest)
    w_bert, w_forest = load_manifest(tiny_artifacts).blend_weights  # build-demo fitted them
    assert w_bert + w_forest == pytest.approx(1.0) and min(w_bert, w_forest) >= 0.0
    want = (w_bert * got[C.BERT_SCORE].astype(np.float64) + w_forest * got[C.FOREST_SCORE]).astype(np.float32)
    np.testing.assert_array_equal(got[C.SCORE], want)
    weighted = Pipeline.from_folder(tiny_artifacts, bert_weight=3, forest_weight=1)(TEXTS)
    np.testing.assert_allclose(
        weighted[C.SCORE], 0.75 * weighted[C.BERT_SCORE] + 0.25 * weighted[C.FOREST_SCORE], atol=1e-6
    )


def test_texts_the_server_refuses_are_refused_in_process_too(tiny_artifacts):
    pipeline = Pipeline.from_folder(tiny_artifacts)
    for bad, message in (
        ("", "text 1 holds no words"),
        ("  ...  ", "text 1 holds no words"),
        (b"\xff", "text 1 is not valid UTF-8"),
        ("w" * 100_001, "text 1 has 100001 bytes"),
    ):
        with pytest.raises(ValueError, match=message):
            pipeline(["A fine text.", bad])
    assert set(pipeline(["A fine text.", ""], validate=False)) == set(C.OUTPUTS)


def test_rmse_blend_and_best_weight_are_exact():
    target = np.array([0.0, 1.0, 2.0, 3.0])
    assert metrics.rmse([1, 1, 1, 1], target) == pytest.approx(np.sqrt((1 + 0 + 1 + 4) / 4))
    bert, forest = target + np.array([0.1, -0.1, 0.1, -0.1]), target + np.array([-0.3, 0.3, -0.3, 0.3])
    w = scoring.best_bert_weight(bert, forest, target)
    assert w == pytest.approx(0.75)  # 0.75·0.1 − 0.25·0.3 = 0: exact
    assert metrics.rmse(scoring.blend(bert, forest, w, 1 - w), target) < 1e-6
    assert scoring.best_bert_weight(target + 5, target + 6, target) == 1.0  # clipped to [0, 1]
    report = metrics.summarize(
        target, {C.BERT_SCORE: bert, C.FOREST_SCORE: forest, C.SCORE: scoring.blend(bert, forest)}
    )
    assert report["rmse"][C.BERT_SCORE] == pytest.approx(0.1) and report["rmse"][C.FOREST_SCORE] == pytest.approx(0.3)
    assert report["rmse_of_the_mean"] == pytest.approx(np.std(target))
    assert report["best_bert_weight"] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="positive sum"):
        scoring.blend(bert, forest, 0, 0)
    with pytest.raises(EvaluationError, match="3 predictions for 4 targets"):
        metrics.rmse([1, 2, 3], target)


def test_out_of_fold_predictions_and_fold_rmses():
    y = np.arange(10, dtype=np.float64)
    seen = []

    def fit_predict(train, held):
        seen.append(set(held.tolist()))
        assert not set(train.tolist()) & set(held.tolist())
        return np.full(len(held), y[train].mean())

    oof, per_fold = folds.out_of_fold(y, 5, fit_predict, seed=0)
    assert len(per_fold) == 5 and set().union(*seen) == set(range(10))
    for held in seen:  # each text predicted by the mean of the others
        for i in held:
            assert oof[i] == pytest.approx(y[[j for j in range(10) if j not in held]].mean())
    with pytest.raises(EvaluationError, match="2 to 10 folds"):
        folds.out_of_fold(y, 11, fit_predict)


def test_a_forest_only_set_gives_the_forest_branch(tiny_artifacts, tmp_path):
    out = tmp_path / "forest"
    out.mkdir()
    for name in ("checkpoint.tl", "vocabulary.json"):
        shutil.copy(os.path.join(tiny_artifacts, name), out / name)
    write_manifest(str(out), max_length=load_manifest(tiny_artifacts).max_length)
    got = Pipeline.from_folder(str(out))(TEXTS)
    assert set(got) == {C.FOREST_SCORE, *C.FORMULAS}  # featurize computes the formulas
    np.testing.assert_array_equal(got[C.FOREST_SCORE], Pipeline.from_folder(tiny_artifacts)(TEXTS)[C.FOREST_SCORE])


def test_evaluate_command_reports_and_writes(tiny_artifacts, tmp_path):
    data = write_csv(tmp_path / "held.csv", [(i, t, y) for i, (t, y) in enumerate(zip(TEXTS, TARGETS))])
    predictions = tmp_path / "predictions.csv"
    plot = tmp_path / "evaluate.png"
    code, out, err = run(
        "evaluate",
        "--artifacts",
        tiny_artifacts,
        "--data",
        data,
        "--json",
        "--out",
        str(predictions),
        "--batch-size",
        "4",
        "--plot",
        str(plot),
    )
    assert code == 0, err
    report = json.loads(out)
    got = Pipeline.from_folder(tiny_artifacts)(TEXTS)
    for name in (C.BERT_SCORE, C.FOREST_SCORE, C.SCORE):
        assert report["rmse"][name] == pytest.approx(metrics.rmse(got[name], TARGETS))
    w_bert, w_forest = load_manifest(tiny_artifacts).blend_weights
    assert report["texts"] == len(TEXTS)
    assert report["weights"] == {"bert": pytest.approx(w_bert), "forest": pytest.approx(w_forest)}
    rows = predictions.read_text(encoding="utf-8").splitlines()
    assert rows[0] == ",".join(["text", "target", *(name.lower() for name in C.OUTPUTS)])
    assert len(rows) > len(TEXTS)  # multi-line texts are quoted, so at least one line per text
    check_png(plot, min_width=3 * 450)  # three panels: BERT_SCORE, FOREST_SCORE, SCORE

    code, out, err = run("evaluate", "--artifacts", tiny_artifacts, "--data", data)
    assert code == 0, err
    assert "SCORE" in out and "best blend on these texts" in out and "the best constant" in out


def test_evaluate_refusals(tiny_artifacts, tmp_path):
    data = write_csv(tmp_path / "held.csv", [(0, "A text.", 0.5)])
    no_target = write_csv(tmp_path / "no_target.csv", [(0, "A text.")], header=("id", "excerpt"))
    code, _, err = run("evaluate", "--artifacts", tiny_artifacts, "--data", no_target)
    assert code == 2 and "no column 'target'" in err
    assert "choose one with --target" in err and "--column" not in err  # the option that picks the target
    code, _, err = run("evaluate", "--artifacts", tiny_artifacts, "--data", data, "--column", "text")
    assert code == 2 and "no column 'text'" in err and "choose one with --column" in err
    code, _, err = run("evaluate", "--artifacts", str(tmp_path / "missing"), "--data", data)
    assert code == 2 and "no such artifact folder" in err

    empty = tmp_path / "empty"
    empty.mkdir()
    write_manifest(str(empty), max_length=64)
    code, _, err = run("evaluate", "--artifacts", str(empty), "--data", data)
    assert code == 2 and "neither a forest" in err

    half = tmp_path / "half"
    half.mkdir()
    shutil.copy(os.path.join(tiny_artifacts, "checkpoint.tl"), half / "checkpoint.tl")
    write_manifest(str(half), max_length=64)
    code, _, err = run("evaluate", "--artifacts", str(half), "--data", data)
    assert code == 2 and "checkpoint.tl without vocabulary.json" in err

    changed = tmp_path / "changed"
    shutil.copytree(tiny_artifacts, changed)
    with open(changed / "vocabulary.json", "r+", encoding="utf-8") as handle:
        vocabulary = json.load(handle)
        vocabulary["top"][0], vocabulary["top"][1] = vocabulary["top"][1], vocabulary["top"][0]
        handle.seek(0)
        json.dump(vocabulary, handle)
        handle.truncate()
    code, _, err = run("evaluate", "--artifacts", str(changed), "--data", data)
    assert code == 2 and "checksum differs" in err

    code, _, err = run("evaluate", "--url", "127.0.0.1:9", "--data", data, "--batch-size", "65")
    assert code == 2 and "at most 64" in err
    code, _, err = run(
        "evaluate", "--artifacts", tiny_artifacts, "--data", data, "--bert-weight", "-1", "--forest-weight", "1"
    )
    assert code == 2 and "non-negative with a positive sum" in err
    code, _, err = run("evaluate", "--artifacts", tiny_artifacts, "--data", data, "--bert-weight", "0.5")
    assert code == 2 and "or neither" in err
    code, _, err = run("evaluate", "--url", "127.0.0.1:9", "--data", data, "--bert-weight", "0.9")
    assert code == 2 and "apply to --artifacts only" in err
    code, _, err = run("evaluate", "--url", "127.0.0.1:9", "--data", data)
    assert code == 2 and "127.0.0.1:9" in err


def test_the_onnx_and_torchscript_exports_give_the_same_rmse(tiny_artifacts, tmp_path):
    """The artifact set holds the same BERT model in both formats (build-demo exports both,
    each verified): their predictions agree within 1e-4, and so do the RMSEs evaluate
    reports."""
    onnx = Pipeline.from_folder(tiny_artifacts, bert_format="onnx")(TEXTS)
    torchscript = Pipeline.from_folder(tiny_artifacts, bert_format="torchscript")(TEXTS)
    np.testing.assert_allclose(onnx[C.BERT_SCORE], torchscript[C.BERT_SCORE], rtol=0, atol=1e-4)
    np.testing.assert_array_equal(onnx[C.FOREST_SCORE], torchscript[C.FOREST_SCORE])
    data = write_csv(tmp_path / "held.csv", [(i, t, y) for i, (t, y) in enumerate(zip(TEXTS, TARGETS))])
    reports = {}
    for fmt in ("onnx", "torchscript"):
        code, out, err = run("evaluate", "--artifacts", tiny_artifacts, "--data", data, "--json", "--bert-format", fmt)
        assert code == 0, err
        reports[fmt] = json.loads(out)["rmse"]
    for branch in (C.BERT_SCORE, C.SCORE):
        assert reports["onnx"][branch] == pytest.approx(reports["torchscript"][branch], abs=1e-4)
