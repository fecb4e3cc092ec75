"""`train-forest` and `readability_triton.forest`: features, forest, Treelite round trip,
cross-validation, refusals; and the held-out RMSE on the shared CommonLit excerpts."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from harness import write_csv

from readability_triton import contracts
from readability_triton.cli import main
from readability_triton.corpus import generate_corpus
from readability_triton.features import Vocabulary, build_vocabulary, featurize
from readability_triton.forest.checkpoint import treelite_module
from readability_triton.layout import load_manifest
from readability_triton.training import forest as F

SMALL = {"n_estimators": 12, "max_depth": 8}


@pytest.fixture(scope="module")
def corpus():
    return generate_corpus(120, seed=3)


@pytest.fixture(scope="module")
def corpus_csv(tmp_path_factory, corpus):
    texts, targets = corpus
    path = tmp_path_factory.mktemp("data") / "train.csv"
    return write_csv(path, [(i, t, y) for i, (t, y) in enumerate(zip(texts, targets))])


def test_train_forest_cli_writes_checkpoint_vocabulary_and_manifest(tmp_path, corpus_csv, corpus, capsys):
    out = tmp_path / "artifacts"
    code = main(
        [
            "train-forest",
            "--data",
            corpus_csv,
            "--out",
            str(out),
            "--n-estimators",
            "12",
            "--max-depth",
            "8",
            "--folds",
            "2",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "2-fold CV RMSE" in printed
    assert {"checkpoint.tl", "vocabulary.json", "manifest.json"} <= set(os.listdir(out))
    manifest = load_manifest(str(out))
    assert manifest.n_features == contracts.N_FEATURES
    assert set(manifest.files) == {"checkpoint.tl", "vocabulary.json"}
    record = manifest.info["forest"]
    assert record["n_estimators"] == 12 and record["max_depth"] == 8 and record["folds"] == 2
    assert record["cv_rmse"] < record["mean_rmse"]  # the generated targets are learnable

    # the checkpoint, fed the features computed with the vocabulary it wrote, scores texts
    import treelite

    vocabulary = Vocabulary.load(str(out / "vocabulary.json"))
    assert vocabulary == build_vocabulary(corpus[0])
    model = treelite.Model.deserialize(str(out / "checkpoint.tl"))
    assert model.num_feature == contracts.N_FEATURES and model.num_tree == 12
    X = featurize(corpus[0], vocabulary)
    scores = F.gtil_predict(model, X)
    assert scores.shape == (len(corpus[0]),) and np.all(np.isfinite(scores))


def test_checkpoint_round_trip_equals_fitted_forest(tmp_path, corpus):
    texts, targets = corpus
    fitted = F.fit(texts[:90], targets[:90], seed=1, **SMALL)
    info = F.write_checkpoint(fitted, str(tmp_path / "checkpoint.tl"))
    assert info["num_feature"] == contracts.N_FEATURES and info["round_trip_max_abs_diff"] <= 1e-6
    # unseen texts: Treelite (GTIL) on the checkpoint == the fitted scikit-learn forest
    X_new = F.features_of(texts[90:], fitted.vocabulary)
    np.testing.assert_allclose(
        F.gtil_predict(str(tmp_path / "checkpoint.tl"), X_new), fitted.model.predict(X_new), rtol=0, atol=1e-9
    )


def test_thresholds_are_float32_exact_and_predictions_unchanged(corpus):
    """FIL compares in float32: after export every threshold is a float32 value, and the
    forest predicts exactly what it did before the thresholds were rounded."""
    texts, targets = corpus
    vocabulary = build_vocabulary(texts)
    X = F.features_of(texts, vocabulary)
    model = F.make_forest("sklearn", seed=0, max_features=0.33, min_samples_leaf=1, **SMALL)
    model.fit(X, targets)
    rng = np.random.default_rng(0)
    probe = np.concatenate([X, X * rng.uniform(0.9, 1.1, X.shape).astype(np.float32)]).astype(np.float32)
    before = np.stack([e.apply(probe) for e in model.estimators_])
    F.float32_exact_thresholds(model)
    after = np.stack([e.apply(probe) for e in model.estimators_])
    assert np.array_equal(before, after)
    for estimator in model.estimators_:
        tree = estimator.tree_
        split = tree.threshold[tree.children_left >= 0]
        assert np.array_equal(split.astype(np.float32).astype(np.float64), split)


def test_cross_validation_refits_the_vocabulary_inside_each_fold(monkeypatch, corpus):
    texts, targets = corpus
    seen = []
    real = F.build_vocabulary

    def spy(fold_texts, n=contracts.VOCABULARY_SIZE, stopwords=None):
        seen.append(list(fold_texts))
        return real(fold_texts, n=n, stopwords=stopwords)

    monkeypatch.setattr(F, "build_vocabulary", spy)
    result = F.cross_validate(texts, targets, 3, seed=0, **SMALL)
    assert len(seen) == 3 and len(result["fold_rmse"]) == 3
    assert sorted(len(fold) for fold in seen) == [80, 80, 80]
    # every text is held out exactly once, i.e. missing from exactly one fold's vocabulary texts
    missing = [sum(text not in fold for fold in seen) for text in texts]
    assert missing == [1] * len(texts)


def test_both_backends_get_the_same_hyper_parameters():
    """What each library's constructor is given differs only by its own options; the
    scikit-learn forest really has them (cuML is not installed here: its arguments are
    checked, not a cuML model)."""
    sklearn_kwargs = F.forest_kwargs("sklearn", seed=7, **F.DEFAULTS)
    cuml_kwargs = F.forest_kwargs("cuml", seed=7, **F.DEFAULTS)
    shared = {k: v for k, v in sklearn_kwargs.items() if k not in F.BACKEND_OPTIONS["sklearn"]}
    assert shared == {k: v for k, v in cuml_kwargs.items() if k not in F.BACKEND_OPTIONS["cuml"]}
    assert shared["bootstrap"] is True and shared["random_state"] == 7
    params = F.make_forest("sklearn", seed=7, **F.DEFAULTS).get_params()
    assert {k: params[k] for k in sklearn_kwargs} == sklearn_kwargs
    assert F.choose_backend("sklearn") == "sklearn"
    if not F._cuml_available():
        with pytest.raises(F.ForestError, match="cuML"):
            F.choose_backend("cuml")


def test_the_default_forest_is_100_trees_of_depth_16_at_most(tmp_path, corpus):
    texts, targets = corpus
    record = F.train_forest(texts, targets, str(tmp_path), folds=0, backend="sklearn")
    model = treelite_module().Model.deserialize(str(tmp_path / "checkpoint.tl"))
    assert model.num_tree == record["checkpoint"]["num_tree"] == 100
    fitted = F.fit(texts, targets, backend="sklearn")
    assert len(fitted.model.estimators_) == 100
    assert max(e.tree_.max_depth for e in fitted.model.estimators_) <= 16


def test_refuses_treelite_5(monkeypatch):
    import treelite

    monkeypatch.setattr(treelite, "__version__", "5.0.0")
    with pytest.raises(F.ForestError, match=r"Treelite 4\.x"):
        treelite_module()


# ----------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "rows, header, message",
    [
        ([], None, "the file is empty"),
        ([], ("id", "excerpt", "target"), "no data rows"),
        ([(1, "A text.", 0.5)], ("id", "text", "target"), "no column 'excerpt'"),
        ([(1, "A text.", 0.5)], ("id", "excerpt", "score"), "no column 'target'"),
        ([(1, "A text.", "easy")], ("id", "excerpt", "target"), "line 2: target 'easy'"),
    ],
)
def test_train_forest_refuses_bad_csv(tmp_path, capsys, rows, header, message):
    path = write_csv(tmp_path / "bad.csv", rows, header)
    code = main(["train-forest", "--data", path, "--out", str(tmp_path / "out")])
    assert code == 2
    err = capsys.readouterr().err
    assert "train-forest: error:" in err and message in err and "Traceback" not in err
    assert not (tmp_path / "out" / "checkpoint.tl").exists()


def test_train_forest_refuses_too_few_words(tmp_path, capsys):
    path = write_csv(tmp_path / "tiny.csv", [(i, f"Word {i} here.", i / 10) for i in range(20)])
    code = main(["train-forest", "--data", path, "--out", str(tmp_path / "out")])
    assert code == 2
    err = capsys.readouterr().err
    assert "distinct words" in err and "at least 200" in err


def test_train_forest_refuses_missing_file_and_bad_options(tmp_path, capsys, corpus_csv):
    assert main(["train-forest", "--data", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["train-forest", "--data", corpus_csv, "--out", str(tmp_path / "o"), "--max-features", "1.5"]) == 2
    assert "--max-features 1.5" in capsys.readouterr().err


# ------------------------------------------------------------- CommonLit


def test_commonlit_held_out_rmse(tmp_path, commonlit):
    """train-forest on 80 % of the shared CommonLit excerpts (default hyper-parameters),
    then the checkpoint + the vocabulary it wrote, scored on the other 20 %.

    Measured: 0.823 on this split; 5-fold CV over all excerpts 0.82 +- 0.005. The issue's
    bound of 0.80 is NOT reached by a random forest on these 207 features (its "about
    0.78" did not reproduce; see the report); this test guards the level we reach."""
    import treelite

    texts, targets = commonlit.texts, np.asarray(commonlit.targets)
    order = np.random.RandomState(0).permutation(len(texts))
    held, train = order[: len(texts) // 5], order[len(texts) // 5 :]
    path = write_csv(tmp_path / "train.csv", [(i, texts[i], targets[i]) for i in train])
    out = tmp_path / "forest"
    assert main(["train-forest", "--data", path, "--out", str(out), "--folds", "0"]) == 0
    vocabulary = Vocabulary.load(str(out / "vocabulary.json"))
    X = featurize([texts[i] for i in held], vocabulary)
    assert X.shape == (len(held), 207)
    model = treelite.Model.deserialize(str(out / "checkpoint.tl"))
    assert model.num_feature == 207
    rmse = F.rmse(F.gtil_predict(model, X), targets[held])
    mean_rmse = F.rmse(np.full(len(held), targets[train].mean()), targets[held])
    print(f"CommonLit held-out RMSE {rmse:.4f} (mean predictor {mean_rmse:.4f})")
    assert mean_rmse > 0.95
    assert rmse <= 0.85
    info = json.loads((out / "manifest.json").read_text())["info"]["forest"]
    assert info["n_estimators"] == 100 and info["max_depth"] == 16
