"""Accuracy: RMSE, the fitted blend, and the report `evaluate` prints (its picture too).
The folds and the out-of-fold loop are `folds`'; the data's digests `data`'s."""

from __future__ import annotations

from typing import TypedDict

import numpy as np

from .contracts import BERT_SCORE, FOREST_SCORE, FORMULAS, SCORE
from .errors import EvaluationError
from .scoring import best_bert_weight, blend

#: The outputs whose RMSE a report gives, in order.
SCORED = (BERT_SCORE, FOREST_SCORE, SCORE)


def rmse(prediction, target) -> float:
    prediction = np.asarray(prediction, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    if prediction.shape != target.shape:
        raise EvaluationError(f"{prediction.shape[0]} predictions for {target.shape[0]} targets")
    if not len(target):
        raise EvaluationError("no targets")
    return float(np.sqrt(np.mean((prediction - target) ** 2)))


class BlendRecord(TypedDict, total=False):
    """The fitted blend, as `manifest.json` records it (`info.blend`)."""

    bert_weight: float
    forest_weight: float
    rmse: dict[str, float]  # bert, forest, score, score_at_0.5
    n_texts: int
    fitted_on: str  # train-blend: which predictions
    data: dict  # train-blend: where the texts came from


class AccuracyReport(TypedDict, total=False):
    """`evaluate`'s report."""

    texts: int
    rmse: dict[str, float]  # by output present (SCORED)
    rmse_of_the_mean: float
    best_bert_weight: float  # both branches present
    rmse_at_best_weight: float
    weights: dict[str, float]  # SCORE's weights, as served or as given: bert, forest
    source: str  # the artifacts or the server asked
    data: str  # the CSV
    interval: dict  # the interval's level and its coverage by length band (`intervals.coverage_by_band`)
    formulas: dict[str, float]  # each formula's Spearman correlation with the targets


def spearman(a, b) -> float:
    """Spearman's rank correlation (ties get their mean rank); NaN where either is constant."""

    def ranks(values):
        x = np.asarray(values, dtype=np.float64).reshape(-1)
        order = np.argsort(x, kind="stable")
        sorted_x = x[order]
        first = np.r_[True, sorted_x[1:] != sorted_x[:-1]]
        group = np.cumsum(first) - 1
        starts = np.flatnonzero(first)
        ends = np.r_[starts[1:], len(x)]
        out = np.empty(len(x))
        out[order] = ((starts + ends - 1) / 2.0)[group]
        return out

    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def fit_blend(bert, forest, target) -> BlendRecord:
    """The SCORE weights that minimise the squared error of the blend on these
    predictions: non-negative least squares with the weights summing to 1, which for two
    branches is the least-squares BERT weight clipped to [0, 1]. With the RMSE of each
    branch, of the fitted blend and of the 0.5/0.5 blend on the same predictions."""
    w = best_bert_weight(bert, forest, target)
    return {
        "bert_weight": w,
        "forest_weight": 1.0 - w,
        "rmse": {
            "bert": rmse(bert, target),
            "forest": rmse(forest, target),
            "score": rmse(blend(bert, forest, w, 1.0 - w), target),
            "score_at_0.5": rmse(blend(bert, forest), target),
        },
        "n_texts": int(len(np.asarray(target))),
    }


def mean_rmse(target) -> float:
    """The RMSE of the best constant: the targets' own mean."""
    target = np.asarray(target, dtype=np.float64)
    return rmse(np.full(len(target), target.mean() if len(target) else 0.0), target)


def summarize(targets, predictions: dict[str, np.ndarray]) -> AccuracyReport:
    """RMSE of each branch present, the RMSE of the best constant (the targets' own mean)
    and, when both branches are there, the best blend weight on these texts."""
    targets = np.asarray(targets, dtype=np.float64)
    report: AccuracyReport = {
        "texts": int(len(targets)),
        "rmse": {name: rmse(predictions[name], targets) for name in SCORED if name in predictions},
        "rmse_of_the_mean": mean_rmse(targets),
    }
    formulas = {name: spearman(predictions[name], targets) for name in FORMULAS if name in predictions}
    if formulas:
        report["formulas"] = formulas
    if BERT_SCORE in predictions and FOREST_SCORE in predictions:
        bert, forest = predictions[BERT_SCORE], predictions[FOREST_SCORE]
        w = best_bert_weight(bert, forest, targets)
        report["best_bert_weight"] = w
        report["rmse_at_best_weight"] = rmse(blend(bert, forest, w, 1 - w), targets)
    return report


def plot_predictions(targets, predictions: dict[str, np.ndarray], path: str, title: str = "") -> None:
    """Predicted against target, one panel per output of SCORED present, each
    with its RMSE and the diagonal; written as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y = np.asarray(targets, dtype=np.float64)
    names = [name for name in SCORED if name in predictions]
    fig, axes = plt.subplots(1, len(names), figsize=(4.6 * len(names), 4.6), squeeze=False)
    low = min(float(y.min()), *(float(np.min(predictions[n])) for n in names)) - 0.2
    high = max(float(y.max()), *(float(np.max(predictions[n])) for n in names)) + 0.2
    for ax, name in zip(axes[0], names, strict=True):
        ax.scatter(y, predictions[name], s=6, alpha=0.5)
        ax.plot([low, high], [low, high], color="grey", linewidth=1)
        ax.set_xlim(low, high)
        ax.set_ylim(low, high)
        ax.set_aspect("equal")
        ax.set_xlabel("target (higher = easier)")
        ax.set_ylabel(f"predicted {name}")
        ax.set_title(f"{name}: RMSE {rmse(predictions[name], y):.3f}")
        ax.grid(alpha=0.3)
    fig.suptitle(title or f"{len(y)} texts")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
