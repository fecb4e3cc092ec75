"""Accuracy: RMSE, out-of-fold predictions, and the report `evaluate` prints."""
from __future__ import annotations

from typing import Callable

import numpy as np

from .errors import EvaluationError
from .scoring import best_bert_weight, blend

#: The branches a report covers, in order.
BRANCHES = ("bert", "forest", "score")


def rmse(prediction, target) -> float:
    prediction = np.asarray(prediction, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    if prediction.shape != target.shape:
        raise EvaluationError(f"{prediction.shape[0]} predictions for {target.shape[0]} targets")
    if not len(target):
        raise EvaluationError("no targets")
    return float(np.sqrt(np.mean((prediction - target) ** 2)))


def mean_rmse(target) -> float:
    """The RMSE of the best constant: the targets' own mean."""
    target = np.asarray(target, dtype=np.float64)
    return rmse(np.full(len(target), target.mean() if len(target) else 0.0), target)


def fold_splits(n: int, folds: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, held-out) index arrays of a shuffled K-fold split (scikit-learn's KFold)."""
    from sklearn.model_selection import KFold

    return list(KFold(folds, shuffle=True, random_state=seed).split(np.zeros(n)))


def out_of_fold(targets, folds: int, fit_predict: Callable[[np.ndarray, np.ndarray], np.ndarray],
                seed: int = 0, progress=None, desc: str = "cross-validation") -> tuple[np.ndarray, list[float]]:
    """Out-of-fold predictions of a shuffled K-fold split, and the RMSE of each fold:
    `fit_predict(train, held)` (index arrays) fits on `train` and returns the predictions
    for `held`. The one K-fold loop of the project (forest, BERT, the demo's head)."""
    y = np.asarray(targets, dtype=np.float64)
    if not 2 <= folds <= len(y):
        raise EvaluationError(f"{folds} folds: cross-validation needs 2 to {len(y)} folds")
    oof = np.zeros(len(y), dtype=np.float64)
    per_fold = []
    splits = fold_splits(len(y), folds, seed)
    for train, held in (progress(splits, desc=desc, unit="fold") if progress else splits):
        oof[held] = np.asarray(fit_predict(train, held), dtype=np.float64).reshape(-1)
        per_fold.append(rmse(oof[held], y[held]))
    return oof, per_fold


def summarize(targets, predictions: dict[str, np.ndarray]) -> dict:
    """RMSE of each branch present, the RMSE of the best constant (the targets' own mean)
    and, when both branches are there, the best blend weight on these texts."""
    targets = np.asarray(targets, dtype=np.float64)
    report = {"texts": int(len(targets)),
              "rmse": {name: rmse(predictions[name], targets) for name in BRANCHES if name in predictions},
              "rmse_of_the_mean": mean_rmse(targets)}
    if "bert" in predictions and "forest" in predictions:
        w = best_bert_weight(predictions["bert"], predictions["forest"], targets)
        report["best_bert_weight"] = w
        report["rmse_at_best_weight"] = rmse(blend(predictions["bert"], predictions["forest"], w, 1 - w), targets)
    return report
