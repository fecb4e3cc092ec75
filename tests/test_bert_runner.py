"""BERT's sequence-length buckets (`buckets`): the set (`contracts.check_buckets`), each row's
bucket, each request's cut (preprocess), and the runners' one run per bucket, with the
scores of the padded batch in one run."""

from __future__ import annotations

import numpy as np
import pytest

from readability_triton import contracts as C
from readability_triton.bert.runner import OnnxRunner, TorchScriptRunner, check_token_ids
from readability_triton.buckets import (
    bucket_groups,
    bucket_widths,
    by_bucket,
    describe_buckets,
    fit_width,
    real_lengths,
    request_cutter,
)
from readability_triton.errors import RequestError
from readability_triton.tokenizer.runner import TokenizerRunner


def test_the_default_set_steps_by_16_to_128_then_doubles():
    assert C.default_buckets(256) == (*range(16, 129, 16), 256)
    assert C.default_buckets(512)[-3:] == (128, 256, 512)
    assert C.default_buckets(100) == (16, 32, 48, 64, 80, 96, 100)
    assert C.default_buckets(8) == (8,)
    assert C.check_buckets(None, 64) == (16, 32, 48, 64)
    assert C.check_buckets("64,32", 128) == (32, 64, 128)  # sorted; the sequence length added
    assert C.check_buckets([256], 256) == (256,)  # padded
    assert not C.variable_length((256,), 256) and C.variable_length(None, 256)


def test_the_joined_set_steps_by_8_all_the_way():
    # where bert's batcher joins every bucket a row costs its own width: a text is padded by
    # fewer than 8 tokens
    assert C.default_buckets(256, joined=True) == tuple(range(8, 257, 8))
    assert C.default_buckets(100, joined=True)[-2:] == (96, 100)
    assert C.default_buckets(8, joined=True) == (8,)
    assert C.check_buckets(None, 64, joined=True) == (8, 16, 24, 32, 40, 48, 56, 64)
    for bad in ("", "x", "1,64", "300", [True], [2.5]):
        with pytest.raises(ValueError, match="--buckets"):
            C.check_buckets(bad, 256, "--buckets")


def test_contract_ids_are_variable_with_buckets_and_fixed_when_padded():
    assert C.contracts(256)[C.PREPROCESS].output(C.INPUT_IDS).dims == (-1,)
    assert C.contracts(256)[C.BERT].input(C.INPUT_1).dims == (-1,)
    assert C.contracts(256, buckets=(256,))[C.BERT].input(C.INPUT_0).dims == (256,)


def test_rows_get_the_smallest_bucket_that_holds_their_real_length():
    mask = np.zeros((5, 40), dtype=np.int64)
    for row, length in enumerate([35, 3, 12, 0, 9]):
        mask[row, :length] = 1
    mask[2, 5] = 0  # a hole: the length is still where the last real token is
    assert real_lengths(mask).tolist() == [35, 3, 12, 0, 9]
    assert real_lengths(np.zeros((2, 0), dtype=np.int64)).tolist() == [0, 0]
    widths = bucket_widths(real_lengths(mask), (8, 16, 40))
    assert widths.tolist() == [40, 8, 16, 8, 16]
    assert [(w, rows.tolist()) for w, rows in bucket_groups(widths)] == [(8, [1, 3]), (16, [2, 4]), (40, [0])]
    assert bucket_widths([16, 17, 300], (16, 32)).tolist() == [16, 32, 300]  # past the last: its own
    assert fit_width(np.ones((2, 3), np.int64), 5).tolist() == [[1, 1, 1, 0, 0]] * 2
    assert fit_width(np.ones((2, 3), np.int64), 2).shape == (2, 2)


def test_each_request_is_cut_to_the_bucket_of_its_longest_text():
    mask = np.zeros((4, 64), dtype=np.int64)
    for row, length in enumerate([5, 20, 64, 3]):
        mask[row, :length] = 1
    ids = mask * 7
    other = np.arange(4, dtype=np.float32).reshape(4, 1)
    take = request_cutter((16, 32, 64))({C.INPUT_IDS: ids, C.ATTENTION_MASK: mask, "OTHER": other})
    first, second, third = take(slice(0, 2)), take(slice(2, 3)), take(slice(3, 4))
    assert first[C.INPUT_IDS].shape == (2, 32) and first[C.ATTENTION_MASK].tolist() == mask[:2, :32].tolist()
    assert second[C.ATTENTION_MASK].shape == (1, 64) and third[C.INPUT_IDS].shape == (1, 16)
    assert first["OTHER"].tolist() == [[0.0], [1.0]]  # other outputs: the rows as they are


def test_by_bucket_runs_each_bucket_once_and_puts_the_scores_back_in_row_order():
    mask = np.zeros((4, 64), dtype=np.int64)
    for row, length in enumerate([40, 3, 64, 10]):
        mask[row, :length] = 1
    ids = np.arange(4)[:, None] * mask
    runs = []

    def run(i, m):
        runs.append(m.shape)
        return i[:, :1].astype(np.float32)

    scores = by_bucket(ids, mask, (16, 32, 64), run)
    assert runs == [(2, 16), (2, 64)]
    assert scores.ravel().tolist() == [0, 1, 2, 3]
    assert by_bucket(ids[:, :10], mask[:, :10], (16, 32, 64), run).shape == (4, 1)  # narrower: padded up
    assert runs[-1] == (4, 16)  # every row in 10 columns: bucket 16


def test_the_runners_refuse_rows_of_the_wrong_shape():
    ids = np.ones((1, 8), np.int64)
    with pytest.raises(RequestError, match="same shape"):
        check_token_ids(ids, np.ones((1, 4), np.int64), 100)
    with pytest.raises(RequestError, match="1 to 4 tokens"):
        check_token_ids(ids, ids, 100, (4,))
    with pytest.raises(RequestError, match="at least 1"):
        check_token_ids(ids[:, :0], ids[:, :0], 100)


TEXTS = [
    "Tom ran.",
    "The cat sat on the mat and looked at the birds in the old garden behind the house.",
    "It rained.",
    "Photosynthesis converts light energy into chemical energy that the plant stores as sugar, "
    "which the Calvin cycle then builds from carbon dioxide taken in through the leaves all day long.",
]


def test_the_onnx_runner_runs_each_bucket_apart_and_scores_what_the_padded_batch_scores(tiny_artifacts):
    pytest.importorskip("onnxruntime")
    tokenizer = TokenizerRunner.from_folder(tiny_artifacts, 64)
    ids, mask = tokenizer([t.encode() for t in TEXTS])
    bucketed = OnnxRunner.from_folder(tiny_artifacts, buckets=(8, 16, 32, 64))
    assert "rows by bucket of 8, 16, 32, 64 tokens" in bucketed.describe()
    padded = OnnxRunner.from_folder(tiny_artifacts)
    assert "rows as they come" in padded.describe()
    seen = []
    run = bucketed.session.run
    bucketed.session.run = lambda names, feed: seen.append(feed["input__1"].shape) or run(names, feed)
    got = bucketed(ids, mask)
    widths = bucket_widths(real_lengths(mask), (8, 16, 32, 64))
    assert len(set(widths.tolist())) >= 3  # the texts fall in several buckets
    assert seen == [(len(rows), width) for width, rows in bucket_groups(widths)]
    want = padded(ids, mask)
    assert np.ptp(want) > 1e-3  # the texts score apart: a row put back in the wrong place would show
    np.testing.assert_allclose(got, want, atol=1e-5)
    one = [bucketed(ids[k : k + 1], mask[k : k + 1]) for k in range(len(TEXTS))]
    np.testing.assert_allclose(np.concatenate(one), want, atol=1e-5)


def test_an_even_bucket_set_is_described_by_its_ends_and_step():
    assert describe_buckets(C.default_buckets(256, joined=True)) == "rows by bucket of 8 to 256 tokens, 8 apart"
    assert describe_buckets(C.default_buckets(256)) == (
        "rows by bucket of 16, 32, 48, 64, 80, 96, 112, 128, 256 tokens"
    )
    assert describe_buckets((256,)) == "padded to 256 tokens"


def test_the_torchscript_runner_buckets_too(tiny_artifacts):
    pytest.importorskip("torch")
    tokenizer = TokenizerRunner.from_folder(tiny_artifacts, 64)
    ids, mask = tokenizer([t.encode() for t in TEXTS])
    bucketed = TorchScriptRunner.from_folder(tiny_artifacts, buckets=(16, 32, 64))
    assert "rows by bucket" in bucketed.describe()
    np.testing.assert_allclose(bucketed(ids, mask), TorchScriptRunner.from_folder(tiny_artifacts)(ids, mask), atol=1e-5)
