"""The postprocess model with the pb_utils stub (the real server runs it in test_server)."""

from __future__ import annotations

import numpy as np
import pytest
import triton_python_backend_utils as pb_utils
from harness import array_request, load_model, make_model_dir, output


def requests_for(*pairs):
    return [
        array_request(
            BERT_OUTPUT=np.asarray(b, np.float32).reshape(-1, 1), FOREST_OUTPUT=np.asarray(f, np.float32).reshape(-1, 1)
        )
        for b, f in pairs
    ]


@pytest.fixture
def model(tmp_path):
    return load_model(make_model_dir(str(tmp_path), "postprocess", profile="cpu"))


def test_mean_of_the_two_scores_across_requests(model):
    out = model.execute(requests_for(([1.0, -2.0], [3.0, 0.0]), ([0.5], [-0.5])))
    assert output(out[0], "SCORE").tolist() == [[2.0], [-1.0]]
    assert output(out[1], "SCORE").tolist() == [[0.0]]
    assert output(out[0], "SCORE").dtype == np.float32


def test_the_branch_scores_are_passed_on_as_leaf_outputs(model):
    (response,) = model.execute(requests_for(([1.25, -2.0], [3.0, 0.5])))
    assert [t.name() for t in response.output_tensors()] == ["SCORE", "BERT_SCORE", "FOREST_SCORE"]
    assert output(response, "BERT_SCORE").tolist() == [[1.25], [-2.0]]
    assert output(response, "FOREST_SCORE").tolist() == [[3.0], [0.5]]
    assert output(response, "BERT_SCORE").dtype == output(response, "FOREST_SCORE").dtype == np.float32


def test_weights_from_parameters(tmp_path):
    model = load_model(make_model_dir(str(tmp_path), "postprocess", profile="cpu", bert_weight=3.0, forest_weight=1.0))
    (response,) = model.execute(requests_for(([1.0], [-1.0])))
    assert output(response, "SCORE").tolist() == [[0.5]]


def test_bad_weights_fail_the_load(tmp_path):
    with pytest.raises(ValueError, match="non-negative"):
        load_model(make_model_dir(str(tmp_path), "postprocess", profile="cpu", bert_weight=-1.0))


def test_a_malformed_request_fails_alone(model):
    bad = array_request(BERT_OUTPUT=np.zeros((2, 1), np.float32), FOREST_OUTPUT=np.zeros((3, 1), np.float32))
    missing = pb_utils.InferenceRequest(inputs=[pb_utils.Tensor("BERT_OUTPUT", np.zeros((1, 1), np.float32))])
    out = model.execute([requests_for(([1.0], [2.0]))[0], bad, missing, requests_for(([4.0], [0.0]))[0]])
    assert output(out[0], "SCORE").tolist() == [[1.5]]
    assert out[1].error().code() == pb_utils.TritonError.INVALID_ARG
    assert "different batch sizes" in out[1].error().message()
    assert "missing input FOREST_OUTPUT" in out[2].error().message()
    assert output(out[3], "SCORE").tolist() == [[2.0]]


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_a_non_finite_score_fails_its_own_request(model, value):
    out = model.execute(requests_for(([1.0], [2.0]), ([0.0, value], [1.0, 1.0]), ([4.0], [0.0]), ([1.0], [value])))
    assert output(out[0], "SCORE").tolist() == [[1.5]]
    assert output(out[2], "SCORE").tolist() == [[2.0]]
    for bad, row in ((1, 1), (3, 0)):
        assert out[bad].error().code() == pb_utils.TritonError.INVALID_ARG
        assert f"row {row} of the request holds NaN or infinity" in out[bad].error().message()


@pytest.mark.gpu
def test_gpu_instance_reads_and_writes_through_dlpack(tmp_path):
    import cupy

    model = load_model(make_model_dir(str(tmp_path), "postprocess", profile="gpu"), kind="GPU")
    bert = cupy.asarray([[1.0], [2.0]], dtype=cupy.float32)
    forest = cupy.asarray([[3.0], [0.0]], dtype=cupy.float32)
    request = pb_utils.InferenceRequest(
        inputs=[pb_utils.Tensor.from_dlpack("BERT_OUTPUT", bert), pb_utils.Tensor.from_dlpack("FOREST_OUTPUT", forest)]
    )
    assert not request.inputs()[0].is_cpu()  # as_numpy() would raise: the model must use DLPack
    (response,) = model.execute([request])
    for tensor in response.output_tensors():
        assert not tensor.is_cpu()
    score, bert_score, forest_score = (cupy.from_dlpack(t).get().tolist() for t in response.output_tensors())
    assert score == [[2.0], [1.0]] and bert_score == [[1.0], [2.0]] and forest_score == [[3.0], [0.0]]
