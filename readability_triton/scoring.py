"""SCORE from the two branch scores: the blend weights and the weighted mean.

`postprocess` (served), the in-process pipeline behind `evaluate --artifacts`, and
`assemble`'s check of the weights all compute it here.
"""

from __future__ import annotations

import numpy as np

from .intervals import UNCALIBRATED, uncalibrated_bounds


def weight_pair(
    bert_weight: float | None, forest_weight: float | None, error: type[Exception] = ValueError
) -> tuple[float, float] | None:
    """The SCORE weights a user gave (normalised, see `blend_weights`), or None for neither;
    `error` when only one is given."""
    if (bert_weight is None) != (forest_weight is None):
        raise error("give both --bert-weight and --forest-weight, or neither (the set's fitted weights)")
    if bert_weight is None or forest_weight is None:
        return None
    try:
        return blend_weights(bert_weight, forest_weight)
    except ValueError as err:
        raise error(str(err)) from None


def blend_weights(bert_weight: float, forest_weight: float) -> tuple[float, float]:
    """The SCORE weights normalised to sum 1; ValueError unless both are non-negative
    with a positive sum."""
    bert_weight, forest_weight = float(bert_weight), float(forest_weight)
    if not (bert_weight >= 0 and forest_weight >= 0 and bert_weight + forest_weight > 0):
        raise ValueError(
            f"the BERT weight ({bert_weight}) and the forest weight ({forest_weight}) must be "
            "non-negative with a positive sum"
        )
    total = bert_weight + forest_weight
    return bert_weight / total, forest_weight / total


def blend(bert, forest, bert_weight: float = 0.5, forest_weight: float = 0.5, xp=np):
    """SCORE: the weighted mean of the two branch scores (float64 sum, float32 result)."""
    b, f = blend_weights(bert_weight, forest_weight)
    return (b * xp.asarray(bert).astype(xp.float64) + f * xp.asarray(forest).astype(xp.float64)).astype(xp.float32)


def best_bert_weight(bert, forest, target) -> float:
    """The BERT weight w in [0, 1] that minimises the RMSE of w·bert + (1−w)·forest on
    these texts (least squares, clipped)."""
    bert, forest, target = (np.asarray(a, dtype=np.float64) for a in (bert, forest, target))
    d = bert - forest
    denominator = float(d @ d)
    if denominator == 0.0:
        return 0.5
    return float(np.clip(d @ (target - forest) / denominator, 0.0, 1.0))


class Blender:
    """The postprocess step as a runner: (bert, forest, words) -> (SCORE, BERT_SCORE,
    FOREST_SCORE, SCORE_LOW, SCORE_HIGH); the interval from `interval`
    (`intervals.IntervalParameters`), or the uncalibrated range without one."""

    def __init__(self, bert_weight: float = 0.5, forest_weight: float = 0.5, xp=np, interval=None):
        blend_weights(bert_weight, forest_weight)  # refuse bad weights when built
        self.weights = (float(bert_weight), float(forest_weight))
        self.xp = xp
        self.interval = interval

    def describe(self) -> str:
        where = (
            f"a {self.interval.level:g} interval in {len(self.interval.q)} length bands"
            if self.interval is not None
            else f"no calibrated interval: SCORE_LOW/SCORE_HIGH are the whole range {list(UNCALIBRATED)}"
        )
        return f"SCORE = {self.weights[0]:g} BERT + {self.weights[1]:g} forest; {where}"

    def __call__(self, bert, forest, words):
        xp = self.xp
        score = blend(bert, forest, *self.weights, xp=xp)
        if self.interval is None:
            low, high = uncalibrated_bounds(score, xp)
        else:
            low, high = self.interval.bounds(score, bert, forest, words, xp)
        return score, bert.astype(xp.float32), forest.astype(xp.float32), low, high
