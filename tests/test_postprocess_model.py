"""The postprocess model with the pb_utils stub (the real server runs it in test_server)."""

from __future__ import annotations

import numpy as np
import pytest
import triton_python_backend_utils as pb_utils
from harness import array_request, load_model, make_model_dir, output

from readability_triton.intervals import IntervalParameters


def requests_for(*pairs, words=100.0):
    return [
        array_request(
            BERT_OUTPUT=np.asarray(b, np.float32).reshape(-1, 1),
            FOREST_OUTPUT=np.asarray(f, np.float32).reshape(-1, 1),
            WORDS=np.full((len(b), 1), words, np.float32),
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
    assert [t.name() for t in response.output_tensors()] == [
        "SCORE",
        "BERT_SCORE",
        "FOREST_SCORE",
        "SCORE_LOW",
        "SCORE_HIGH",
    ]
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
    bad = array_request(
        BERT_OUTPUT=np.zeros((2, 1), np.float32),
        FOREST_OUTPUT=np.zeros((3, 1), np.float32),
        WORDS=np.zeros((2, 1), np.float32),
    )
    missing = pb_utils.InferenceRequest(
        inputs=[
            pb_utils.Tensor("BERT_OUTPUT", np.zeros((1, 1), np.float32)),
            pb_utils.Tensor("WORDS", np.ones((1, 1), np.float32)),
        ]
    )
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
    words = cupy.asarray([[40.0], [90.0]], dtype=cupy.float32)
    request = pb_utils.InferenceRequest(
        inputs=[
            pb_utils.Tensor.from_dlpack("BERT_OUTPUT", bert),
            pb_utils.Tensor.from_dlpack("FOREST_OUTPUT", forest),
            pb_utils.Tensor.from_dlpack("WORDS", words),
        ]
    )
    assert not request.inputs()[0].is_cpu()  # as_numpy() would raise: the model must use DLPack
    (response,) = model.execute([request])
    for tensor in response.output_tensors():
        assert not tensor.is_cpu()
    score, bert_score, forest_score, low, high = (cupy.from_dlpack(t).get().tolist() for t in response.output_tensors())
    assert score == [[2.0], [1.0]] and bert_score == [[1.0], [2.0]] and forest_score == [[3.0], [0.0]]
    assert low == [[-4.0], [-4.0]] and high == [[2.0], [2.0]]


@pytest.mark.gpu
def test_gpu_interval_equals_the_cpu_interval_bit_for_bit(tmp_path):
    import cupy

    interval = IntervalParameters(
        0.9, a=0.31, b=0.77, edges=(120.0, 160.0, 190.0), q=(1.9, 1.7, 1.6, 1.5), min_words=60.0
    )
    rng = np.random.default_rng(0)
    bert = rng.normal(-1, 1, (64, 1)).astype(np.float32)
    forest = (bert + rng.normal(0, 0.4, (64, 1))).astype(np.float32)
    words = rng.integers(1, 260, (64, 1)).astype(np.float32)
    got = {}
    for profile, kind in (("cpu", "CPU"), ("gpu", "GPU")):
        folder = make_model_dir(str(tmp_path / profile), "postprocess", profile=profile, interval=interval)
        model = load_model(folder, kind=kind)
        if kind == "GPU":
            request = pb_utils.InferenceRequest(
                inputs=[
                    pb_utils.Tensor.from_dlpack(k, cupy.asarray(v))
                    for k, v in (("BERT_OUTPUT", bert), ("FOREST_OUTPUT", forest), ("WORDS", words))
                ]
            )
            (response,) = model.execute([request])
            got[kind] = [cupy.from_dlpack(t).get() for t in response.output_tensors()]
        else:
            (response,) = model.execute([array_request(BERT_OUTPUT=bert, FOREST_OUTPUT=forest, WORDS=words)])
            got[kind] = [t.as_numpy() for t in response.output_tensors()]
    for cpu, gpu in zip(got["CPU"], got["GPU"]):
        assert cpu.tobytes() == gpu.tobytes()


def test_without_calibration_the_interval_is_the_whole_scale(model):
    (response,) = model.execute(requests_for(([1.0, -3.0], [0.0, -2.0])))
    assert output(response, "SCORE_LOW").tolist() == [[-4.0], [-4.0]]
    assert output(response, "SCORE_HIGH").tolist() == [[2.0], [2.0]]


def test_a_calibrated_interval_from_parameters(tmp_path):
    interval = IntervalParameters(0.9, a=0.5, b=1.0, edges=(50.0,), q=(2.0, 1.0), min_words=20.0)
    model = load_model(make_model_dir(str(tmp_path), "postprocess", profile="cpu", interval=interval))
    # a long text (band 1, q=1), a medium one (band 0, q=2), one shorter than any calibration text
    (long, medium, short) = model.execute([requests_for(([1.0], [0.0]), words=w)[0] for w in (80.0, 30.0, 5.0)])
    # half-width: q * (a + b|bert - forest|) * sqrt(max(min_words / words, 1))
    for response, half in ((long, 1.5), (medium, 3.0), (short, 3.0 * 2.0)):
        assert output(response, "SCORE").tolist() == [[0.5]]
        # inside the scale's range, -4 ... 2
        assert output(response, "SCORE_LOW").tolist() == [[max(0.5 - half, -4.0)]]
        assert output(response, "SCORE_HIGH").tolist() == [[min(0.5 + half, 2.0)]]


def test_broken_interval_parameters_fail_the_load(tmp_path):
    interval = IntervalParameters(0.9, a=0.5, b=1.0, edges=(50.0, 90.0), q=(2.0, 1.0), min_words=20.0)
    with pytest.raises(ValueError, match="do not fit together"):
        load_model(make_model_dir(str(tmp_path), "postprocess", profile="cpu", interval=interval))
