"""Split-conformal intervals (`intervals`): calibration, the manifest and config round trips,
and coverage on fresh texts from the same distribution in every length band."""

from __future__ import annotations

import math

import numpy as np
import pytest

from readability_triton import contracts as C
from readability_triton.intervals import (
    UNCALIBRATED,
    Calibration,
    IntervalParameters,
    calibrate,
    coverage_by_band,
    for_blend,
    uncalibrated_bounds,
)


def synthetic(n: int, seed: int):
    """Texts whose blend error grows with the branches' disagreement and shrinks with length
    (the two effects the interval is built for)."""
    rng = np.random.default_rng(seed)
    words = rng.integers(40, 260, n).astype(np.float64)
    target = rng.normal(-1.0, 1.0, n)
    d = np.abs(rng.normal(0.0, 0.5, n))
    noise = rng.normal(0.0, 1.0, n) * (0.2 + 0.8 * d) * np.sqrt(120.0 / words)
    score = target + noise
    bert, forest = score + d / 2, score - d / 2
    return target, bert, forest, words


def served_bounds(parameters: IntervalParameters, bert, forest, words, weights=(0.5, 0.5)):
    score = (weights[0] * bert + weights[1] * forest).astype(np.float32)
    return parameters.bounds(score, bert.astype(np.float32), forest.astype(np.float32), words.astype(np.float32))


def test_coverage_holds_in_every_length_band_on_fresh_texts():
    calibration = calibrate(*synthetic(2000, 1), weights=(0.5, 0.5))
    assert len(calibration.edges) == 3 and calibration.b > 0  # 4 bands; disagreement matters
    parameters = IntervalParameters.from_calibration(calibration, 0.9)
    target, bert, forest, words = synthetic(20000, 2)
    low, high = served_bounds(parameters, bert, forest, words)
    rows = coverage_by_band(target, low, high, words, calibration.edges)
    assert [row["band"] for row in rows][0] == "all" and len(rows) == 5
    for row in rows:
        assert 0.87 <= row["coverage"] <= 0.93, row
    # adaptive: the texts the models disagree on get wider intervals
    d = np.abs(bert - forest)
    width = high - low
    assert width[d > np.quantile(d, 0.9)].mean() > 2 * width[d < np.quantile(d, 0.1)].mean()


def test_the_quantile_is_the_finite_sample_rank():
    calibration = Calibration(1.0, 0.0, [], [[float(v) for v in range(1, 21)]], 10, 20, [0.5, 0.5])
    # ceil((20 + 1) * 0.9) = 19: the 19th smallest of 1..20
    assert calibration.quantiles(0.9) == [19.0]
    assert calibration.quantiles(0.5) == [11.0]
    with pytest.raises(ValueError, match="too few for a 0.99 interval"):
        calibration.quantiles(0.99)
    short = Calibration(1.0, 0.0, [], [[1.0] * 8], 10, 8, [0.5, 0.5])
    with pytest.raises(ValueError, match=r"needs at least 9\)"):
        short.quantiles(0.9)
    with pytest.raises(ValueError, match="between 0 and 1"):
        calibration.quantiles(1.0)


def test_too_few_texts_refuse_to_calibrate():
    with pytest.raises(ValueError, match="too few to calibrate"):
        calibrate(*synthetic(10, 0), weights=(0.5, 0.5))
    with pytest.raises(ValueError, match="one value per text"):
        calibrate([0.0] * 30, [0.0] * 30, [0.0] * 29, [10] * 30, weights=(0.5, 0.5))


def test_bands_follow_the_number_of_texts():
    assert len(calibrate(*synthetic(150, 0), weights=(0.5, 0.5)).edges) == 0  # one band
    assert len(calibrate(*synthetic(250, 0), weights=(0.5, 0.5)).edges) == 1
    assert len(calibrate(*synthetic(5000, 0), weights=(0.5, 0.5)).edges) == 3  # at most 4 bands


def test_tied_lengths_merge_bands_so_that_each_can_be_served():
    target, bert, forest, words = synthetic(400, 3)
    words[:120] = 40.0  # 30 % of the texts at the shortest length: the quantile edges tie
    calibration = calibrate(target, bert, forest, words, weights=(0.5, 0.5))
    assert all(len(band) >= 20 for band in calibration.scores), [len(b) for b in calibration.scores]
    assert len(calibration.scores) == len(calibration.edges) + 1 >= 2
    assert len(IntervalParameters.from_calibration(calibration, 0.9).q) == len(calibration.scores)
    words[:] = 100.0  # every text as long: one band
    assert calibrate(target, bert, forest, words, weights=(0.5, 0.5)).edges == []


def test_manifest_and_config_round_trips_are_exact():
    calibration = calibrate(*synthetic(500, 3), weights=(0.7, 0.3), source="out-of-fold")
    again = Calibration.from_dict(calibration.to_dict())
    assert again == calibration
    parameters = for_blend(calibration.to_dict(), (0.7, 0.3), level=0.8)
    assert parameters is not None and parameters.level == 0.8
    assert IntervalParameters.from_parameters(parameters.to_parameters()) == parameters
    assert for_blend(calibration.to_dict(), (7.0, 3.0)) is not None  # the same blend, unnormalised
    assert for_blend(calibration.to_dict(), (0.5, 0.5)) is None  # another blend: its errors are not these
    assert for_blend(None, (0.5, 0.5)) is None
    assert IntervalParameters.from_parameters({C.BERT_WEIGHT: "0.5"}) is None


def test_broken_parameters_say_what_to_do():
    good = IntervalParameters(0.9, 0.5, 1.0, (50.0,), (2.0, 1.0), 20.0).to_parameters()
    with pytest.raises(ValueError, match="assemble again"):
        IntervalParameters.from_parameters({**good, C.INTERVAL_SIGMA: "0.5"})
    with pytest.raises(ValueError, match="do not fit together"):
        IntervalParameters.from_parameters({**good, C.INTERVAL_EDGES: ""})
    with pytest.raises(ValueError, match="negative or non-finite"):
        IntervalParameters.from_parameters({**good, C.INTERVAL_QUANTILES: "2.0,nan"})


def test_texts_shorter_than_any_calibrated_widen_and_one_word_is_not_a_crash():
    parameters = IntervalParameters(0.9, 0.5, 0.0, (), (1.0,), 50.0)
    score = np.zeros((4, 1), np.float32)
    words = np.array([[200.0], [50.0], [12.5], [0.0]], np.float32)
    low, high = parameters.bounds(score, score, score, words)
    assert high.reshape(-1).tolist() == [0.5, 0.5, 1.0, 2.0]  # sqrt(50) / 2 = 3.5: cut at the scale's top
    assert low.reshape(-1).tolist() == [-0.5, -0.5, -1.0, -float(np.float32(math.sqrt(50.0) / 2))]
    assert low.dtype == high.dtype == np.float32


def test_uncalibrated_sets_answer_the_whole_scale():
    low, high = uncalibrated_bounds(np.zeros((3, 1), np.float32))
    assert (low == UNCALIBRATED[0]).all() and (high == UNCALIBRATED[1]).all() and low.shape == (3, 1)
