"""`OnnxRunner`'s padding: the batch's trailing padding cut off (`trimmed`) and rows of
different lengths run apart, one run per band of tokens (`length_bands`), with the scores
of the padded batch in one run."""

from __future__ import annotations

import numpy as np
import pytest

from readability_triton.bert.runner import (
    OnnxRunner,
    length_bands,
    real_lengths,
    trimmed,
)
from readability_triton.tokenizer.runner import TokenizerRunner


def test_trimmed_keeps_every_column_up_to_the_last_real_token():
    ids = np.arange(12, dtype=np.int64).reshape(2, 6)
    mask = np.array([[1, 1, 1, 0, 0, 0], [1, 0, 1, 1, 0, 0]], dtype=np.int64)  # a hole in row 2 is kept
    cut_ids, cut_mask = trimmed(ids, mask)
    assert cut_ids.tolist() == ids[:, :4].tolist() and cut_mask.tolist() == mask[:, :4].tolist()
    full = np.ones((2, 6), dtype=np.int64)
    assert trimmed(ids, full)[0] is ids  # nothing to cut: the same arrays
    assert trimmed(ids, np.zeros((2, 6), dtype=np.int64))[0].shape == (2, 2)  # at least 2 columns
    assert trimmed(ids, np.array([[1, 0, 0, 0, 0, 0]] * 2))[0].shape == (2, 2)


def test_rows_are_grouped_by_the_band_of_their_real_length():
    mask = np.zeros((5, 40), dtype=np.int64)
    for row, length in enumerate([35, 3, 12, 0, 9]):
        mask[row, :length] = 1
    mask[2, 5] = 0  # a hole: the length is still where the last real token is
    assert real_lengths(mask).tolist() == [35, 3, 12, 0, 9]
    assert [g.tolist() for g in length_bands(real_lengths(mask), 8)] == [[1, 3], [2, 4], [0]]  # bands 0, 1 and 4
    assert [g.tolist() for g in length_bands(real_lengths(mask), 64)] == [[0, 1, 2, 3, 4]]  # one band, in order
    assert real_lengths(np.zeros((2, 0), dtype=np.int64)).tolist() == [0, 0]
    full = np.zeros((3, 256), dtype=np.int64)
    for row, length in enumerate([256, 249, 248]):
        full[row, :length] = 1
    # bands are 1-8, 9-16, ..., 249-256: a text cut off at max_length runs with 249-255, 32 bands at most
    assert [g.tolist() for g in length_bands(real_lengths(full), 8)] == [[2], [0, 1]]


TEXTS = [
    "Tom ran.",
    "The cat sat on the mat and looked at the birds in the old garden behind the house.",
    "It rained.",
    "Photosynthesis converts light energy into chemical energy that the plant stores as sugar, "
    "which the Calvin cycle then builds from carbon dioxide taken in through the leaves all day long.",
]


def test_the_runner_runs_each_band_apart_and_scores_what_the_padded_batch_scores(tiny_artifacts):
    pytest.importorskip("onnxruntime")
    tokenizer = TokenizerRunner.from_folder(tiny_artifacts, 64)
    ids, mask = tokenizer([t.encode() for t in TEXTS])
    lengths = real_lengths(mask)
    banded = OnnxRunner.from_folder(tiny_artifacts)
    assert banded.trim and banded.band == 8 and "bands of 8 tokens" in banded.describe()
    padded = OnnxRunner.from_folder(tiny_artifacts, trim=False)
    assert padded.band == 0 and "padded length" in padded.describe()
    narrow = OnnxRunner(f"{tiny_artifacts}/model.onnx", band=4)
    seen = []
    run = narrow.session.run
    narrow.session.run = lambda names, feed: seen.append(feed["input__1"].shape) or run(names, feed)
    got = narrow(ids, mask)
    groups = length_bands(lengths, 4)
    assert len(groups) >= 3  # the texts fall in several bands of 4 tokens
    assert seen == [(len(rows), int(lengths[rows].max())) for rows in groups]  # each run padded to its own longest
    want = padded(ids, mask)
    assert np.ptp(want) > 1e-3  # the texts score apart: a row put back in the wrong place would show
    np.testing.assert_allclose(got, want, atol=1e-5)
    np.testing.assert_allclose(banded(ids, mask), want, atol=1e-5)
    one = [banded(ids[k : k + 1], mask[k : k + 1]) for k in range(len(TEXTS))]
    np.testing.assert_allclose(np.concatenate(one), want, atol=1e-5)
