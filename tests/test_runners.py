"""The runners the Python models, the in-process pipeline and the tests share."""
from __future__ import annotations

import numpy as np
import pytest

from readability_triton.bert.runner import TorchScriptRunner, check_token_ids
from readability_triton.features.runner import FeatureRunner
from readability_triton.forest.runner import GTILRunner
from readability_triton.tokenizer.runner import TokenizerRunner


def test_token_id_check():
    ids = np.array([[101, 5, 102, 0]], np.int64)
    mask = np.array([[1, 1, 1, 0]], np.int64)
    check_token_ids(ids, mask, 1000)
    with pytest.raises(ValueError, match="token id 1000, outside the model's vocabulary \\[0, 1000\\)"):
        check_token_ids(ids + 898, mask, 1000)
    with pytest.raises(ValueError, match="token id -6"):
        check_token_ids(ids - 6, mask, 1000)
    with pytest.raises(ValueError, match="only 0 and 1"):
        check_token_ids(ids, mask * 2, 1000)


def test_runners_from_an_artifact_set(tiny_artifacts):
    texts = ["A short text.", "Another, rather longer one; with a clause."]
    tokenizer = TokenizerRunner.from_folder(tiny_artifacts, 64)
    ids, mask = tokenizer(texts)
    assert ids.shape == mask.shape == (2, 64) and ids.dtype == np.int64
    bert = TorchScriptRunner.from_folder(tiny_artifacts)
    scores = bert(ids, mask)
    assert scores.shape == (2, 1) and scores.dtype == np.float32 and np.isfinite(scores).all()
    assert bert.vocab_size == 30522
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        bert(ids + 40000, mask)
    features = FeatureRunner.from_folder(tiny_artifacts)(texts)
    assert features.shape == (2, 207) and features.dtype == np.float32
    forest = GTILRunner.from_folder(tiny_artifacts)
    assert forest(features).shape == (2, 1) and forest.n_features == 207
    with pytest.raises(ValueError, match="takes 207 features per text"):
        forest(features[:, :5])


def test_tokenizer_runner_checks_the_manifest_max_length(tiny_artifacts):
    with pytest.raises(ValueError, match="built for max_length 64 .*not 128"):
        TokenizerRunner.from_folder(tiny_artifacts, 128)


def test_cpu_runners_refuse_a_gpu(tiny_artifacts):
    with pytest.raises(ValueError, match="runs on the CPU"):
        GTILRunner.from_folder(tiny_artifacts, "gpu")
