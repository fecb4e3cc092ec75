"""CuPy parity (marked `gpu`: skipped, with the reason, where there is no CUDA GPU): the
CUDA kernels (features/cuda_path.py) give the NumPy path's bits, features, WORDS and formulas,
also with a weakened hash; the result stays on the device and only the text goes there,
in one copy. (tests/test_kernels.py checks the same kernels' CPU build on every machine.)"""

from __future__ import annotations

import numpy as np
import pytest
from test_features_properties import NASTY, VOCABULARY, WORDS

from readability_triton.features import (
    Vocabulary,
    build_vocabulary,
    charclass,
    cuda_path,
    featurize,
)
from readability_triton.features.extract import served_outputs
from readability_triton.features.formulas import Formulas

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cupy():
    import cupy

    return cupy


def nasty_texts(count=300, seed=0):
    rng = np.random.default_rng(seed)
    pool = NASTY + WORDS + ["'", " ", ". ", "\u2026", "x" * 40, "é" * 9]
    return ["".join(rng.choice(pool, size=rng.integers(0, 60))) for _ in range(count)] + ["", "a" * 100_000]


def test_cupy_equals_numpy_on_nasty_text(cupy):
    texts = nasty_texts()
    want = featurize(texts, VOCABULARY)
    got = featurize(texts, VOCABULARY, xp=cupy)
    assert isinstance(got, cupy.ndarray) and got.dtype == cupy.float32 and got.shape == want.shape
    np.testing.assert_array_equal(cupy.asnumpy(got).view(np.uint32), want.view(np.uint32))
    for mask in (0, 0xF, 0xFFFF_0000_0000_0000):  # words collide: compared byte for byte
        got = cuda_path.outputs([t.encode() for t in texts[:80]], VOCABULARY, None, cupy, mask)[0]
        np.testing.assert_array_equal(cupy.asnumpy(got).view(np.uint32), want[:80].view(np.uint32))


def test_served_outputs_equal_numpy(cupy, commonlit):
    formulas = Formulas.load()
    v = build_vocabulary(commonlit.texts)
    for batch, vocabulary in ((commonlit.texts, v), (nasty_texts(), VOCABULARY)):
        want = served_outputs(batch, vocabulary, formulas)
        got = served_outputs(batch, vocabulary, formulas, xp=cupy)
        assert len(got) == len(want) == 9
        for g, w in zip(got, want):
            assert isinstance(g, cupy.ndarray) and g.flags.c_contiguous and g.shape == w.shape
            np.testing.assert_array_equal(cupy.asnumpy(g).view(np.uint32), w.view(np.uint32))


def test_cupy_equals_numpy_on_commonlit(cupy, commonlit):
    v = build_vocabulary(commonlit.texts)
    want = featurize(commonlit.texts, v)
    got = featurize([t.encode("utf-8") for t in commonlit.texts], v, xp=cupy)
    np.testing.assert_array_equal(cupy.asnumpy(got).view(np.uint32), want.view(np.uint32))


def test_only_the_text_goes_to_the_device(cupy, monkeypatch):
    v = Vocabulary(["the", "a"], ["cat", "mat"], ["the"])
    texts = ["The cat sat on the mat.", "A cat!"] * 10
    featurize(texts, v, xp=cupy)  # tables are copied once, on first use
    copies = []
    real = cupy.asarray

    def recording(obj, *args, **kwargs):
        if isinstance(obj, (np.ndarray, bytes)):  # host data (CuPy arrays pass through)
            copies.append(np.asarray(obj))
        return real(obj, *args, **kwargs)

    monkeypatch.setattr(cupy, "asarray", recording)
    out = featurize(texts, v, xp=cupy)
    assert isinstance(out, cupy.ndarray)
    assert len(copies) == 1 and copies[0].dtype == np.uint8  # the UTF-8 text buffer and its offsets
    header = 12 * (len(texts) + 1)
    assert copies[0].size == header + (-header % 8) + sum(len(t.encode()) + 1 for t in texts) + 1 + charclass.PAD


def test_other_gpu_keeps_its_own_tables(cupy):
    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("one GPU")
    v = Vocabulary(["the"], ["cat"], [])
    with cupy.cuda.Device(1):
        out = featurize(["the cat"], v, xp=cupy)
        assert out.device.id == 1
