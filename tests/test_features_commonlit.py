"""On the shared CommonLit excerpts (skipped where ../shared is absent): the vocabulary
and every feature of every excerpt equal the plain reference, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from readability_triton.contracts import N_FEATURES
from readability_triton.features import build_vocabulary, featurize
from readability_triton.features import reference as ref
from readability_triton.features import words as kernels
from readability_triton.features.extract import _featurize


@pytest.fixture(scope="module")
def fitted(commonlit):
    return build_vocabulary(commonlit.texts)


def test_vocabulary_equals_the_spec(commonlit, fitted):
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    top, bottom = ref.vocabulary(commonlit.texts, 100)
    assert fitted.top == top and fitted.bottom == bottom
    assert fitted.stopwords == sorted(ENGLISH_STOP_WORDS)
    assert fitted.top[:5] == ["the", "and", "of", "to", "a"]


def test_every_excerpt_equals_the_reference(commonlit, fitted):
    texts = commonlit.texts
    got = featurize(texts, fitted)
    want = ref.featurize(texts, fitted.top, fitted.bottom, fitted.stopwords)
    assert got.shape == (len(texts), N_FEATURES) and got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    # As UTF-8 bytes (the serving path), through the CuPy primitives on NumPy, one text at
    # a time, and with forced hash collisions: the same bits.
    sample = texts[::7]
    expected = want[::7]
    np.testing.assert_array_equal(featurize([t.encode("utf-8") for t in sample], fitted), expected)
    np.testing.assert_array_equal(_featurize(sample, fitted, ops=kernels.GenericOps(np)), expected)
    np.testing.assert_array_equal(np.concatenate([featurize([t], fitted) for t in sample[:50]]), expected[:50])
    weak = kernels.Weakening(key_mask=0xFFF0000000000000, tail_mask=0)
    np.testing.assert_array_equal(_featurize(sample, fitted, weak=weak), expected)
