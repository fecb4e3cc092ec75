"""K-fold cross-validation: the folds' bounds, the splits, and the one out-of-fold loop of
the project (the forest, BERT and the demo's head all run it)."""

from __future__ import annotations

from typing import Callable

import numpy as np

from .errors import EvaluationError
from .metrics import rmse


def check_folds(
    folds: int, n: int | None, *, optional: bool = True, what: str = "--folds", error: type[Exception] = EvaluationError
) -> int:
    """`folds` for a K-fold cross-validation over `n` texts (None: not known yet): 2 to `n`,
    or, where the cross-validation is `optional`, 0 or 1 to leave it out (returned as 0);
    else `error`."""
    if optional and folds in (0, 1):
        return 0
    if folds < 2 or (n is not None and folds > n):
        span = f"2 to {n}" if n is not None else "2 or more"
        raise error(f"{what} {folds}: cross-validation needs {span} folds" + (" (0 leaves it out)" if optional else ""))
    return folds


def fold_splits(n: int, folds: int, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, held-out) index arrays of a shuffled K-fold split (scikit-learn's KFold)."""
    from sklearn.model_selection import KFold

    return list(KFold(folds, shuffle=True, random_state=seed).split(np.zeros(n)))


def out_of_fold(
    targets,
    folds: int,
    fit_predict: Callable[[np.ndarray, np.ndarray], np.ndarray],
    seed: int = 0,
    progress=None,
    desc: str = "cross-validation",
) -> tuple[np.ndarray, list[float]]:
    """Out-of-fold predictions of a shuffled K-fold split, and the RMSE of each fold:
    `fit_predict(train, held)` (index arrays) fits on `train` and returns the predictions
    for `held`. The one K-fold loop of the project (forest, BERT, the demo's head)."""
    y = np.asarray(targets, dtype=np.float64)
    check_folds(folds, len(y), optional=False, what="folds")
    oof = np.zeros(len(y), dtype=np.float64)
    per_fold = []
    splits = fold_splits(len(y), folds, seed)
    for train, held in progress(splits, desc=desc, unit="fold") if progress else splits:
        oof[held] = np.asarray(fit_predict(train, held), dtype=np.float64).reshape(-1)
        per_fold.append(rmse(oof[held], y[held]))
    return oof, per_fold
