"""What every Python model runs on: reading requests (`stub.requests`), one pass and the
responses split back (`triton.responses`), request errors versus the server's."""

from __future__ import annotations

import numpy as np
import pytest
import triton_python_backend_utils as pb_utils
from harness import array_request, text_request

from readability_triton.device import Device
from readability_triton.errors import RequestError
from readability_triton.stub import requests as runtime_requests
from readability_triton.stub import responses, runtime


def test_read_text_requests_isolates_bad_requests():
    requests = [
        text_request(["good one", "two"]),
        text_request([b"\xff\xfe bad"]),
        text_request(["x" * 50]),
        pb_utils.InferenceRequest(inputs=[]),
        array_request(TEXT=np.zeros((1, 1), dtype=np.float32)),
        text_request(["last"]),
    ]
    batch = runtime_requests.read_text_requests(pb_utils, requests, max_text_bytes=20)
    assert batch.counts == [2, 0, 0, 0, 0, 1]
    assert batch.items == [b"good one", b"two", b"last"]
    assert set(batch.errors) == {1, 2, 3, 4}
    assert "not valid UTF-8" in batch.errors[1][0]
    assert "over the limit of 20" in batch.errors[2][0] and "MAX_TEXT_BYTES" in batch.errors[2][0]
    assert "missing input TEXT" in batch.errors[3][0]
    assert "BYTES" in batch.errors[4][0]
    assert all(code == "INVALID_ARG" for _, code in batch.errors.values())


def _lengths(rows):
    return {"LENGTH": np.array([[float(len(r))] for r in rows], dtype=np.float32)}


def test_run_batch_splits_results_and_errors_back():
    requests = [text_request(["a", "bb"]), text_request([b"\xc3"]), text_request(["ccc"])]
    calls = []

    def compute(rows):
        calls.append(len(rows))
        return _lengths(rows)

    batch = runtime_requests.read_text_requests(pb_utils, requests)
    out = responses.run_batch(pb_utils, batch, compute)
    assert calls == [3], "all good requests must be computed in one pass"
    assert out[0].output_tensors()[0].as_numpy().ravel().tolist() == [1.0, 2.0]
    assert out[1].has_error() and out[1].error().code() == pb_utils.TritonError.INVALID_ARG
    assert out[2].output_tensors()[0].as_numpy().ravel().tolist() == [3.0]


def test_run_batch_isolates_a_request_that_breaks_the_batched_pass():
    requests = [text_request(["fine"]), text_request(["boom"]), text_request(["also fine", "x"])]

    def compute(rows):
        if b"boom" in rows:
            raise RequestError("cannot handle boom")
        return _lengths(rows)

    batch = runtime_requests.read_text_requests(pb_utils, requests)
    out = responses.run_batch(pb_utils, batch, compute, logger=pb_utils.Logger)
    assert [r.has_error() for r in out] == [False, True, False]
    assert out[1].error().message() == "cannot handle boom"
    assert out[1].error().code() == pb_utils.TritonError.INVALID_ARG
    assert out[2].output_tensors()[0].as_numpy().ravel().tolist() == [9.0, 1.0]

    def crash(rows):
        if b"boom" in rows:
            raise RuntimeError("device fault")
        return _lengths(rows)

    calls = []

    def counted(rows):
        calls.append(len(rows))
        return crash(rows)

    out = responses.run_batch(pb_utils, runtime_requests.read_text_requests(pb_utils, requests), counted)
    # Not the client's fault: every request of the pass is INTERNAL, and nothing is retried.
    assert [r.error().code() for r in out] == [pb_utils.TritonError.INTERNAL] * 3
    assert calls == [4]

    def plain_value_error(rows):
        raise ValueError("a bug in the runner, not a bad request")

    out = responses.run_batch(pb_utils, runtime_requests.read_text_requests(pb_utils, requests), plain_value_error)
    assert [r.error().code() for r in out] == [pb_utils.TritonError.INTERNAL] * 3


def test_run_batch_refuses_the_requests_whose_rows_the_pass_flags():
    """`refuse` reads what the one pass computed (the first step's word counts): a request
    with a flagged row gets INVALID_ARG naming its first one, the others their rows; also
    on the request-by-request retry after a RequestError."""
    requests = [text_request(["a", "bb"]), text_request(["ccc", "", "dd", ""]), text_request(["e"])]
    calls = []

    def compute(rows):
        calls.append(len(rows))
        if b"boom" in rows:
            raise RequestError("cannot handle boom")
        return _lengths(rows)

    def empty(outputs):
        return outputs["LENGTH"][:, 0] == 0

    why = "text {row} of the request is empty"
    out = responses.run_batch(
        pb_utils, runtime_requests.read_text_requests(pb_utils, requests), compute, refuse=empty, why=why
    )
    assert calls == [7]
    assert out[1].error().message() == "text 1 of the request is empty"
    assert out[1].error().code() == pb_utils.TritonError.INVALID_ARG
    assert out[0].output_tensors()[0].as_numpy().ravel().tolist() == [1.0, 2.0]
    assert out[2].output_tensors()[0].as_numpy().ravel().tolist() == [1.0]
    calls.clear()
    requests.insert(1, text_request(["boom"]))
    out = responses.run_batch(
        pb_utils,
        runtime_requests.read_text_requests(pb_utils, requests),
        compute,
        logger=pb_utils.Logger,
        refuse=empty,
        why=why,
    )
    assert calls == [8, 2, 1, 4, 1]  # the pass, then one by one
    assert [r.has_error() for r in out] == [False, True, True, False]
    assert (
        out[1].error().message() == "cannot handle boom"
        and out[2].error().message() == "text 1 of the request is empty"
    )


def test_read_array_requests_checks_shapes_and_concatenates():
    dims = {"A": (2,), "B": (2,)}
    requests = [
        array_request(A=np.ones((2, 2), np.float32), B=np.zeros((2, 2), np.float32)),
        array_request(A=np.ones((1, 3), np.float32), B=np.zeros((1, 3), np.float32)),
        array_request(A=np.ones((1, 2), np.float32), B=np.zeros((2, 2), np.float32)),
        array_request(A=np.full((1, 2), 5, np.float32), B=np.full((1, 2), 6, np.float32)),
    ]
    arrivals = {"A": {"cpu": 0, "gpu": 0}, "B": {"cpu": 0, "gpu": 0}}
    batch = runtime_requests.read_array_requests(pb_utils, requests, ("A", "B"), np, dims, arrivals=arrivals)
    arrays = batch.items
    assert batch.counts == [2, 0, 0, 1]
    assert arrivals == {"A": {"cpu": 4, "gpu": 0}, "B": {"cpu": 3, "gpu": 0}}  # B of request 1 never read
    assert "shape [batch, 2]" in batch.errors[1][0]
    assert "different batch sizes" in batch.errors[2][0]
    assert arrays["A"].shape == (3, 2) and arrays["B"][2].tolist() == [6, 6]


def test_read_array_requests_takes_any_width_of_a_variable_dimension_and_pads_to_the_widest():
    """BERT's ids ([-1]): requests of different widths (the batcher joins only equal shapes,
    but a model without it may get several) are joined zero-padded to the widest."""
    dims = {"A": (-1,)}
    requests = [
        array_request(A=np.ones((1, 3), np.int64)),
        array_request(A=np.full((2, 5), 2, np.int64)),
        array_request(A=np.ones((1, 2, 2), np.int64)),  # a dimension too many
        array_request(A=np.ones((1, 3), np.int64)),
    ]
    batch = runtime_requests.read_array_requests(pb_utils, requests, ("A",), np, dims)
    assert batch.counts == [1, 2, 0, 1] and "shape [batch, -1]" in batch.errors[2][0]
    assert batch.items["A"].tolist() == [[1, 1, 1, 0, 0], [2] * 5, [2] * 5, [1, 1, 1, 0, 0]]
    same = runtime_requests.read_array_requests(pb_utils, [requests[0], requests[3]], ("A",), np, dims)
    assert same.items["A"].shape == (2, 3)
    # a request run alone (run_batch's one-by-one pass) is cut back to its own width
    assert batch.rows(0, 1, 0)["A"].tolist() == [[1, 1, 1]] and batch.rows(1, 3, 1)["A"].shape == (2, 5)
    assert same.rows(0, 1, 0)["A"].shape == (1, 3) and not same.shapes


def test_a_request_check_fails_a_request_alone_before_the_padding_hides_it():
    """bert's check of each request's own shapes (`PythonModel.check_requests`): a request of
    0 columns, or a mask wider than its ids, would look fine once padded to its neighbours'."""
    from readability_triton.errors import RequestError

    def check(arrays):
        if arrays["A"].shape != arrays["B"].shape or not arrays["A"].shape[1]:
            raise RequestError("A and B must have one shape, of at least one column")

    dims = {"A": (-1,), "B": (-1,)}
    requests = [
        array_request(A=np.ones((1, 3), np.int64), B=np.ones((1, 3), np.int64)),
        array_request(A=np.ones((1, 0), np.int64), B=np.ones((1, 0), np.int64)),
        array_request(A=np.ones((1, 2), np.int64), B=np.ones((1, 4), np.int64)),
        array_request(A=np.ones((1, 4), np.int64), B=np.ones((1, 4), np.int64)),
    ]
    batch = runtime_requests.read_array_requests(pb_utils, requests, ("A", "B"), np, dims, check=check)
    assert batch.counts == [1, 0, 0, 1] and set(batch.errors) == {1, 2}
    assert batch.errors[1][0] == "A and B must have one shape, of at least one column"
    assert batch.items["A"].shape == (2, 4) and batch.rows(0, 1, 0)["B"].shape == (1, 3)


def test_run_batch_takes_each_requests_rows_as_per_request_says():
    requests = [text_request(["a", "bb"]), text_request([b"\xc3"]), text_request(["ccc"])]
    seen = []

    def per_request(outputs):
        seen.append(sorted(outputs))
        return lambda rows: {name: array[rows] * 10 for name, array in outputs.items()}

    batch = runtime_requests.read_text_requests(pb_utils, requests)
    out = responses.run_batch(pb_utils, batch, _lengths, per_request=per_request)
    assert seen == [["LENGTH"]]  # once per pass
    assert out[0].output_tensors()[0].as_numpy().ravel().tolist() == [10.0, 20.0]
    assert out[1].has_error() and out[2].output_tensors()[0].as_numpy().ravel().tolist() == [30.0]


def test_read_array_requests_refuses_non_finite_rows_per_request():
    dims = {"A": (1,), "B": (1,)}
    requests = [
        array_request(A=[[1.0], [2.0]], B=[[3.0], [4.0]]),
        array_request(A=[[1.0], [np.nan]], B=[[0.0], [0.0]]),
        array_request(A=[[5.0]], B=[[np.inf]]),
        array_request(A=[[7.0]], B=[[8.0]]),
    ]
    requests = [
        pb_utils.InferenceRequest(
            inputs=[pb_utils.Tensor(t.name(), t.as_numpy().astype(np.float32)) for t in r.inputs()]
        )
        for r in requests
    ]
    batch = runtime_requests.read_array_requests(pb_utils, requests, ("A", "B"), np, dims, finite=True)
    assert batch.counts == [2, 0, 0, 1] and set(batch.errors) == {1, 2}
    assert "row 1 of the request holds NaN or infinity" in batch.errors[1][0]
    assert "row 0 of the request holds NaN or infinity" in batch.errors[2][0]
    assert batch.items["A"].ravel().tolist() == [1.0, 2.0, 7.0]
    assert batch.items["B"].ravel().tolist() == [3.0, 4.0, 8.0]
    # without the check the same rows pass
    assert runtime_requests.read_array_requests(pb_utils, requests, ("A", "B"), np, dims).counts == [2, 2, 1, 1]


def test_read_array_requests_of_one_request_checks_it_as_a_batch_would():
    """One request alone (the usual case below saturation) is checked as in a batch, with
    the check's one-pass answer first: a row with NaN or infinity still fails it alone."""
    dims = {"A": (1,), "B": (1,)}
    good = array_request(A=np.array([[1.0], [2.0]], np.float32), B=np.array([[3.0], [4.0]], np.float32))
    batch = runtime_requests.read_array_requests(pb_utils, [good], ("A", "B"), np, dims, finite=True)
    assert batch.counts == [2] and not batch.errors
    assert batch.items["A"].ravel().tolist() == [1.0, 2.0] and batch.items["B"].ravel().tolist() == [3.0, 4.0]
    bad = array_request(A=np.array([[1.0], [2.0]], np.float32), B=np.array([[3.0], [-np.inf]], np.float32))
    batch = runtime_requests.read_array_requests(pb_utils, [bad], ("A", "B"), np, dims, finite=True)
    assert batch.counts == [0] and "row 1 of the request holds NaN or infinity" in batch.errors[0][0]
    assert batch.items["A"].shape == (0, 1)
    missing = array_request(A=np.ones((1, 1), np.float32))
    batch = runtime_requests.read_array_requests(pb_utils, [missing], ("A", "B"), np, dims, finite=True)
    assert batch.errors[0][0] == "missing input B" and batch.items == {"A": None, "B": None}


def test_run_batch_answers_a_failing_pass_of_an_array_model_with_internal():
    dims = {"A": (1,)}
    requests = [
        array_request(A=np.array([[1.0]], np.float32)),
        array_request(A=np.array([[-1.0]], np.float32)),
        array_request(A=np.array([[2.0], [3.0]], np.float32)),
    ]

    def compute(inputs):
        if (inputs["A"] < 0).any():
            raise RuntimeError(
                "The following operation failed in the TorchScript interpreter.\n"
                'Traceback of TorchScript (most recent call last):\n  File "code", line 9\n'
                "RuntimeError: index out of range in self"
            )
        return {"B": inputs["A"] * 2}

    batch = runtime_requests.read_array_requests(pb_utils, requests, ("A",), np, dims)
    out = responses.run_batch(pb_utils, batch, compute, logger=pb_utils.Logger)
    assert [r.error().code() for r in out] == [pb_utils.TritonError.INTERNAL] * 3
    message = out[1].error().message()
    assert "\n" not in message and "index out of range in self" in message and "server log" in message
    assert any("Traceback" in text for level, text in pb_utils.Logger.records if level == "ERROR")


def test_texts_without_words_are_refused_only_when_asked():
    requests = [
        text_request(["A good text."]),
        text_request(["fine", ""]),
        text_request(["   \t\n"]),
        text_request(["!!! ... ?"]),
        text_request(["\x00\x01"]),
        text_request(["😀"]),
        text_request(["don't"]),
    ]
    batch = runtime_requests.read_text_requests(pb_utils, requests, require_words=True)
    assert set(batch.errors) == {1, 2, 3, 4}
    assert batch.errors[1][0].startswith("text 1 of the request holds no words")
    assert all(code == "INVALID_ARG" for _, code in batch.errors.values())
    assert batch.items == [b"A good text.", "😀".encode(), b"don't"]
    lax = runtime_requests.read_text_requests(pb_utils, requests)
    assert not lax.errors and len(lax.items) == 8


def test_one_line():
    assert responses.one_line(ValueError("plain")) == "plain"
    assert responses.one_line(RuntimeError("first\n\n  last line  \n")) == "last line"
    assert responses.one_line(RuntimeError("")) == "RuntimeError"
    assert len(responses.one_line(RuntimeError("x" * 1000))) == 300


def test_input_array_never_calls_as_numpy_on_a_gpu_tensor():
    tensor = pb_utils.Tensor._on_gpu("A", np.ones((1, 1), np.float32))
    with pytest.raises(pb_utils.TritonModelException):
        tensor.as_numpy()

    class DeviceModule:
        """Stands in for CuPy: takes GPU tensors through DLPack only."""

        @staticmethod
        def from_dlpack(obj):
            assert obj.__dlpack_device__()[0] == 2
            return obj._array

    assert runtime_requests.input_array(tensor, DeviceModule).tolist() == [[1.0]]


def test_parameters():
    config = {"parameters": {"A": {"string_value": "3"}, "B": {"string_value": "x"}, "W": {"string_value": "0.25"}}}
    params = runtime.parameters(config)
    assert runtime.int_parameter(params, "A", 1) == 3
    assert runtime.int_parameter(params, "MISSING", 7) == 7
    with pytest.raises(ValueError, match="parameter B must be an integer"):
        runtime.int_parameter(params, "B", 1)
    with pytest.raises(ValueError, match="at least 5"):
        runtime.int_parameter(params, "A", 1, minimum=5)
    assert runtime.float_parameter(params, "W", 0.5) == 0.25
    flags = {"T": "True", "F": "false", "X": "yes"}
    assert runtime.bool_parameter(flags, "T") and not runtime.bool_parameter(flags, "F")
    assert runtime.bool_parameter(flags, "MISSING", True) and not runtime.bool_parameter(flags, "MISSING")
    with pytest.raises(ValueError, match="parameter X must be true or false"):
        runtime.bool_parameter(flags, "X")
    assert runtime.instance_device({"model_instance_kind": "GPU", "model_instance_device_id": "1"}) == Device("gpu", 1)
    assert runtime.instance_device({"model_instance_kind": "CPU"}).array_module() is np


class DeviceArray(np.ndarray):
    """What a CuPy array shows the runtime: a CUDA DLPack device (NumPy memory underneath,
    for the test)."""

    def __dlpack_device__(self):
        return (2, 0)  # kDLCUDA, device 0

    def __dlpack__(self, stream=None):
        assert stream is not None, "a CUDA producer is asked with the consumer's stream"
        return pb_utils._mark_cuda(self.view(np.ndarray).__dlpack__())


def test_device_outputs_leave_through_dlpack_and_host_ones_by_value():
    host = responses.output_tensor(pb_utils, "A", np.arange(3, dtype=np.float32))
    assert host.is_cpu() and host.as_numpy().tolist() == [0.0, 1.0, 2.0]
    device = responses.output_tensor(pb_utils, "B", np.arange(3, dtype=np.float32).view(DeviceArray))
    assert not device.is_cpu()
    with pytest.raises(pb_utils.TritonModelException):
        device.as_numpy()  # a GPU tensor: the host never copies it
    # a strided device array is made contiguous before it goes out (the backend needs C order)
    strided = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2].view(DeviceArray)
    out = responses.output_tensor(pb_utils, "C", strided)
    assert not out.is_cpu() and out._array.flags.c_contiguous and out._array.tolist() == strided.tolist()


def test_python_model_reads_its_config_and_checks_the_runner_against_it(tmp_path):
    from harness import initialize_args, make_model_dir

    args = initialize_args(make_model_dir(str(tmp_path), "postprocess", profile="cpu"))
    model = runtime.PythonModel(pb_utils, args, finite=True)
    assert [name for name, _, _ in model.inputs] == ["BERT_OUTPUT", "FOREST_OUTPUT", "WORDS"]
    assert model.output_names == ["SCORE", "BERT_SCORE", "FOREST_SCORE", "SCORE_LOW", "SCORE_HIGH"]
    assert not model.text_input
    model.expect_dims({"SCORE": (1,)}, "the contract")
    with pytest.raises(ValueError, match=r"postprocess: SCORE has dims \[1\] but the runner gives \[2\]"):
        model.expect_dims({"SCORE": (2,)}, "the runner")
    with pytest.raises(ValueError, match="the runner takes"):
        model.expect_inputs(["FOREST_OUTPUT", "BERT_OUTPUT", "WORDS"])
    with pytest.raises(RuntimeError, match="returned 1 arrays for the outputs"):
        model._outputs(np.zeros((1, 1)))
    out = model.execute(
        [
            array_request(
                BERT_OUTPUT=np.ones((2, 1), np.float32),
                FOREST_OUTPUT=np.zeros((2, 1), np.float32),
                WORDS=np.ones((2, 1), np.float32),
            )
        ],
        lambda bert, forest, words: (bert + forest, bert, forest, bert - words, bert + words),
    )
    assert out[0].output_tensors()[0].as_numpy().tolist() == [[1.0], [1.0]]
