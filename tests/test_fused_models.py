"""The fused repository's Python models (`assemble --fused`), run in process with the
pb_utils stub: `featurize` with the forest inside and `preprocess` with BERT inside answer
what the separate models answer, in one runner pass per execute, and a bad request gets its
own INVALID_ARG beside good ones."""

from __future__ import annotations

import os

import numpy as np
import pytest
import triton_python_backend_utils as pb_utils
from harness import load_model, make_model_dir, output, text_request

from readability_triton import contracts as C
from readability_triton import layout as M
from readability_triton.branches import BertBranch, ForestBranch
from readability_triton.pipeline import Pipeline

GOOD = ["The cat sat on the mat. It was happy.", "Notwithstanding the stipulations, the lessee shall pay the rent."]


def fused_dir(tmp_path, artifacts, model, names):
    files = {name: os.path.join(artifacts, name) for name in (*names, M.MANIFEST)}
    return make_model_dir(str(tmp_path / "repo"), model, "portable", files=files, fused=True, max_length=64)


@pytest.fixture(scope="module")
def pipeline(tiny_artifacts):
    return Pipeline.from_folder(tiny_artifacts)


def test_fused_featurize_answers_the_forest_and_refuses_its_own_bad_requests(tiny_artifacts, tmp_path, pipeline):
    model = load_model(
        fused_dir(tmp_path, tiny_artifacts, C.FEATURIZE, (*M.MODEL_FILES[C.FEATURIZE], *M.MODEL_FILES[C.FOREST]))
    )
    assert isinstance(model.runner, ForestBranch)
    calls = []
    real = model.runner
    model.runner = lambda texts: calls.append(len(texts)) or real(texts)
    responses = model.execute(
        [text_request(GOOD[:1]), text_request(["   "]), text_request([b"bad \xff utf-8"]), text_request(GOOD[1:])]
    )
    assert calls == [3]  # one pass over the good rows (the wordless text is refused from its WORDS)
    features, words, *formulas = pipeline.features(GOOD)
    forest = pipeline.forest(features)
    for row, response in ((0, responses[0]), (1, responses[3])):
        np.testing.assert_array_equal(output(response, C.FOREST_OUTPUT), forest[row : row + 1])
        np.testing.assert_array_equal(output(response, C.WORDS), words[row : row + 1])
        for name, values in zip(C.FORMULAS, formulas):
            np.testing.assert_array_equal(output(response, name), values[row : row + 1], err_msg=name)
        assert pb_utils.get_output_tensor_by_name(response, C.FEATURES) is None
    for bad, why in ((responses[1], "no word"), (responses[2], "UTF-8")):
        assert bad.error().code() == pb_utils.TritonError.INVALID_ARG and why in bad.error().message()


def test_fused_preprocess_answers_bert_and_refuses_its_own_bad_requests(tiny_artifacts, tmp_path, pipeline):
    names = (*M.MODEL_FILES[C.PREPROCESS], M.MODEL_ONNX)
    model = load_model(
        fused_dir(
            tmp_path,
            tiny_artifacts,
            C.PREPROCESS,
            [n for n in names if os.path.isfile(os.path.join(tiny_artifacts, n))],
        )
    )
    assert isinstance(model.runner, BertBranch)
    responses = model.execute([text_request(GOOD), text_request([b"bad \xff utf-8"]), text_request(GOOD[:1])])
    want = pipeline.bert(*pipeline.tokenizer(GOOD))
    np.testing.assert_allclose(output(responses[0], C.BERT_OUTPUT), want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(output(responses[2], C.BERT_OUTPUT), want[:1], rtol=0, atol=1e-6)
    assert responses[1].error().code() == pb_utils.TritonError.INVALID_ARG


def test_a_forest_and_a_vocabulary_of_different_sets_are_refused():
    class Features:
        n_features = 207

    class Forest:
        n_features = 120

    with pytest.raises(ValueError, match="takes 120 features but vocabulary.json gives 207"):
        ForestBranch(Features(), Forest())
