"""SCORE_LOW and SCORE_HIGH: a prediction interval for every score, calibrated by
split-conformal prediction on predictions of texts the models did not train on.

How sure a score is depends on the text. Two signals say so, and both are free where
`postprocess` runs:

- the branches' disagreement `d = |bert − forest|`: the two models see a text differently
  (one reads tokens in context, the other counts words), and where they disagree the
  blend's error is larger;
- the text's length in words: the scores of short texts are less sure, and texts shorter
  than any the calibration saw are outside what it measured.

Calibration (`calibrate`, when the blend is fitted: `build-demo` on out-of-fold predictions,
`train-blend` on held-out ones) fits `sigma(d) = a + b·d` to the absolute errors of the blend
(least squares, `a` kept positive), divides each error by its `sigma` (the normalised
score), and splits the texts into up to `BANDS` length bands of equal size by word count
(one per `BAND_TEXTS` texts). Each
band keeps its normalised scores (Mondrian conformal prediction: coverage holds within
each band, not only on average). The manifest records all of it (`info.interval`).

At assembly (`--interval LEVEL`, default 0.9) each band's quantile is the
`ceil((n_b + 1) · LEVEL)`-th smallest of its `n_b` scores (split-conformal's finite-sample
rank). `postprocess` then answers `SCORE ∓ q_band · sigma(d) · s(W)`, where `s(W) =
sqrt(W_min / W)` widens the interval of a text of `W` words shorter than the shortest
calibration text (`W_min`): an extrapolation, not calibrated, and said so. Both ends stay
inside the scale's range (`UNCALIBRATED`), where every target lies. A set without
calibration answers the whole CommonLit range (`UNCALIBRATED`): no narrower claim can be
made for it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from . import contracts as C

#: The default level of the interval (the share of texts whose target it should hold).
DEFAULT_LEVEL = 0.9
#: Length bands (by word count, equal-sized on the calibration texts), at most; fewer where
#: the calibration texts are fewer than `BAND_TEXTS` per band.
BANDS = 4
BAND_TEXTS = 100
#: The fewest calibration texts: a 0.9 interval needs at least 9 in a band.
MIN_TEXTS = 20
#: The interval a set without calibration answers: the CommonLit scale's range, rounded out.
UNCALIBRATED = (-4.0, 2.0)


@dataclass
class Calibration:
    """What `calibrate` measured, as `manifest.json` records it (`info.interval`)."""

    a: float  # sigma(d) = a + b·d
    b: float
    edges: list[float]  # word counts between the bands (BANDS − 1 of them)
    scores: list[list[float]]  # each band's normalised scores, sorted
    min_words: int  # the shortest calibration text, in words
    n: int
    weights: list[float]  # the blend it was calibrated for (BERT, forest)
    source: str = ""  # which predictions: out-of-fold, held out

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Calibration":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def quantiles(self, level: float = DEFAULT_LEVEL) -> list[float]:
        """Each band's split-conformal quantile at `level` (ValueError where a band holds
        too few texts for it)."""
        check_level(level)
        out = []
        for band, scores in enumerate(self.scores):
            rank = math.ceil((len(scores) + 1) * level)
            if rank > len(scores):
                raise ValueError(
                    f"length band {band} holds {len(scores)} calibration texts: too few for a {level:g} interval "
                    f"(it needs at least {math.ceil(round(level / (1 - level), 9))})"
                )
            out.append(float(scores[rank - 1]))
        return out


def check_level(level: float) -> float:
    if not 0 < level < 1:
        raise ValueError(f"interval level {level}: must be between 0 and 1 (e.g. 0.9)")
    return float(level)


def sigma(a: float, b: float, bert, forest, xp=np):
    """The difficulty scale of each text: a + b·|bert − forest| (float64)."""
    d = xp.abs(xp.asarray(bert, dtype=xp.float64) - xp.asarray(forest, dtype=xp.float64))
    return a + b * d


def calibrate(targets, bert, forest, words, weights: tuple[float, float], source: str = "") -> Calibration:
    """Calibrate intervals for the blend `weights` from predictions (`bert`, `forest`) of
    texts the models did not train on, their `targets` and their word counts."""
    y = np.asarray(targets, dtype=np.float64).reshape(-1)
    b_pred = np.asarray(bert, dtype=np.float64).reshape(-1)
    f_pred = np.asarray(forest, dtype=np.float64).reshape(-1)
    w = np.asarray(words, dtype=np.float64).reshape(-1)
    if not (len(y) == len(b_pred) == len(f_pred) == len(w)):
        raise ValueError("targets, predictions and word counts must have one value per text")
    if len(y) < MIN_TEXTS:
        raise ValueError(f"{len(y)} texts are too few to calibrate intervals (at least {MIN_TEXTS})")
    score = weights[0] * b_pred + weights[1] * f_pred
    error = np.abs(y - score)
    d = np.abs(b_pred - f_pred)
    design = np.stack([np.ones_like(d), d], axis=1)
    (a, b), *_ = np.linalg.lstsq(design, error, rcond=None)
    floor = 0.25 * float(error.mean())  # sigma stays positive and never tiny
    a, b = max(float(a), floor), max(float(b), 0.0)
    normalised = error / (a + b * d)
    edges = length_edges(w, int(min(BANDS, max(1, len(y) // BAND_TEXTS))))
    band = np.searchsorted(np.asarray(edges), w, side="right")
    scores = [sorted(normalised[band == i].tolist()) for i in range(len(edges) + 1)]
    return Calibration(a, b, edges, scores, int(w.min()), len(y), [float(weights[0]), float(weights[1])], source)


def length_edges(words, bands: int) -> list[float]:
    """The word counts between `bands` equal-sized length bands of the calibration texts,
    merged where tied counts leave a band with fewer than MIN_TEXTS texts (each band must
    hold enough for its own quantile)."""
    w = np.asarray(words, dtype=np.float64)
    edges = sorted({float(e) for e in np.quantile(w, np.arange(1, bands) / bands)})
    while edges:
        counts = np.bincount(np.searchsorted(np.asarray(edges), w, side="right"), minlength=len(edges) + 1)
        small = int(np.argmin(counts))
        if counts[small] >= MIN_TEXTS:
            break
        # drop the edge between the smallest band and its smaller neighbour
        if small == 0:
            drop = 0
        elif small == len(edges):
            drop = len(edges) - 1
        else:
            drop = small - 1 if counts[small - 1] <= counts[small + 1] else small
        del edges[drop]
    return edges


def for_blend(info: dict | None, weights, level: float = DEFAULT_LEVEL) -> "IntervalParameters | None":
    """The interval of an artifact set's calibration (`info`, the manifest's `interval`
    section) at `level`, for the blend `weights`; None without a calibration or where the
    weights are not the ones it was calibrated for (its errors would not be this blend's)."""
    if not info:
        return None
    calibration = Calibration.from_dict(info)
    total = float(weights[0]) + float(weights[1])
    if any(abs(float(w) / total - c) > 1e-9 for w, c in zip(weights, calibration.weights)):
        return None
    return IntervalParameters.from_calibration(calibration, level)


@dataclass(frozen=True)
class IntervalParameters:
    """What `postprocess` computes an interval from (its config's parameters)."""

    level: float
    a: float
    b: float
    edges: tuple[float, ...]
    q: tuple[float, ...]  # one per band
    min_words: float

    @classmethod
    def from_calibration(cls, calibration: Calibration, level: float = DEFAULT_LEVEL) -> "IntervalParameters":
        return cls(
            level,
            calibration.a,
            calibration.b,
            tuple(calibration.edges),
            tuple(calibration.quantiles(level)),
            float(calibration.min_words),
        )

    def to_parameters(self) -> dict[str, str]:
        """postprocess's config parameters (exact: every float by its repr)."""
        return {
            C.INTERVAL_LEVEL: repr(self.level),
            C.INTERVAL_SIGMA: f"{self.a!r},{self.b!r}",
            C.INTERVAL_EDGES: ",".join(map(repr, self.edges)),
            C.INTERVAL_QUANTILES: ",".join(map(repr, self.q)),
            C.INTERVAL_MIN_WORDS: repr(self.min_words),
        }

    @classmethod
    def from_parameters(cls, params: dict[str, str]) -> "IntervalParameters | None":
        """From postprocess's config parameters; None where they hold no interval
        (ValueError where they hold a broken one)."""
        if C.INTERVAL_QUANTILES not in params:
            return None
        try:
            a, b = (float(v) for v in params[C.INTERVAL_SIGMA].split(","))
            edges = tuple(float(v) for v in params[C.INTERVAL_EDGES].split(",") if v)
            q = tuple(float(v) for v in params[C.INTERVAL_QUANTILES].split(","))
            found = cls(
                check_level(float(params[C.INTERVAL_LEVEL])), a, b, edges, q, float(params[C.INTERVAL_MIN_WORDS])
            )
        except (KeyError, ValueError) as err:
            raise ValueError(f"the interval parameters are incomplete or not numbers ({err}): assemble again") from None
        if len(q) != len(edges) + 1:
            raise ValueError(f"the interval parameters do not fit together: {len(q)} quantiles for {len(edges)} edges")
        if not all(math.isfinite(v) and v >= 0 for v in (a, b, *q)):
            raise ValueError("the interval parameters hold a negative or non-finite value: assemble again")
        return found

    def bounds(self, score, bert, forest, words, xp=np):
        """(SCORE_LOW, SCORE_HIGH), float32, for float32 columns of scores and word counts."""
        scale = sigma(self.a, self.b, bert, forest, xp)
        w = xp.maximum(xp.asarray(words, dtype=xp.float64), 1.0)
        band = xp.searchsorted(xp.asarray(self.edges, dtype=xp.float64), w, side="right")
        half = xp.asarray(self.q, dtype=xp.float64)[band] * scale * xp.sqrt(xp.maximum(self.min_words / w, 1.0))
        centre = xp.asarray(score, dtype=xp.float64)
        low = xp.maximum(centre - half, UNCALIBRATED[0])  # no wider than the scale itself
        high = xp.minimum(centre + half, UNCALIBRATED[1])
        return low.astype(xp.float32), high.astype(xp.float32)


def uncalibrated_bounds(score, xp=np):
    """The interval of a set without calibration: the whole scale, for every text."""
    low = xp.full(score.shape, UNCALIBRATED[0], dtype=xp.float32)
    return low, xp.full(score.shape, UNCALIBRATED[1], dtype=xp.float32)


def coverage_by_band(targets, low, high, words, edges) -> list[dict]:
    """Coverage and mean width of intervals on texts with targets, overall and by length
    band (`edges`): what `evaluate` and the interval benchmark report."""
    y, lo, hi, w = (np.asarray(v, dtype=np.float64).reshape(-1) for v in (targets, low, high, words))
    band = np.searchsorted(np.asarray(edges, dtype=np.float64), w, side="right")
    bounds = [-math.inf, *edges, math.inf]
    rows = []
    for i in [-1, *range(len(edges) + 1)]:
        mask = np.ones_like(y, dtype=bool) if i < 0 else band == i
        if not mask.any():
            continue
        inside = (y[mask] >= lo[mask]) & (y[mask] <= hi[mask])
        rows.append(
            {
                "band": "all" if i < 0 else _band_words(bounds[i], bounds[i + 1]),
                "texts": int(mask.sum()),
                "coverage": float(inside.mean()),
                "mean_width": float((hi[mask] - lo[mask]).mean()),
            }
        )
    return rows


def _band_words(low: float, high: float) -> str:
    if math.isinf(low):
        return f"under {high:g} words"
    if math.isinf(high):
        return f"{low:g} words or more"
    return f"{low:g} to {high:g} words"
