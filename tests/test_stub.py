"""The pb_utils stub behaves like the real module where the models depend on it
(observed on Triton 2.51's python backend; the integration tests run the real one)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import triton_python_backend_utils as pb_utils


def test_pure_python_helpers_are_the_real_ones():
    import inspect

    source = inspect.getsourcefile(pb_utils.get_input_tensor_by_name)
    assert source.endswith("pytriton/tritonserver/backends/python/triton_python_backend_utils.py")
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") == np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") == np.object_


def test_triton_error_codes_and_not_an_exception():
    assert [int(c) for c in (pb_utils.TritonError.UNKNOWN, pb_utils.TritonError.INTERNAL,
                             pb_utils.TritonError.NOT_FOUND, pb_utils.TritonError.INVALID_ARG,
                             pb_utils.TritonError.UNAVAILABLE, pb_utils.TritonError.UNSUPPORTED,
                             pb_utils.TritonError.ALREADY_EXISTS, pb_utils.TritonError.CANCELLED)] == list(range(8))
    error = pb_utils.TritonError("bad")
    assert error.code() == pb_utils.TritonError.INTERNAL and error.message() == "bad"
    assert not isinstance(error, BaseException)
    response = pb_utils.InferenceResponse(error=pb_utils.TritonError("x", pb_utils.TritonError.INVALID_ARG))
    assert response.has_error() and response.error().code() == 3 and response.output_tensors() == []


def test_cpu_tensor_dlpack_round_trip():
    source = torch.arange(6, dtype=torch.float32).reshape(3, 2)
    tensor = pb_utils.Tensor.from_dlpack("X", source)
    assert tensor.is_cpu() and tensor.name() == "X" and tensor.shape() == [3, 2]
    assert tensor.as_numpy().tolist() == source.tolist()
    assert torch.from_dlpack(tensor).tolist() == source.tolist()
    assert np.from_dlpack(pb_utils.Tensor("Y", np.ones(2, np.int64))).tolist() == [1, 1]


def test_gpu_tensor_refuses_as_numpy_and_bytes_refuse_dlpack():
    gpu = pb_utils.Tensor._on_gpu("G", np.zeros((2, 1), np.float32), device_id=1)
    assert not gpu.is_cpu() and gpu.__dlpack_device__() == (2, 1)
    with pytest.raises(pb_utils.TritonModelException, match="GPU"):
        gpu.as_numpy()
    text = pb_utils.Tensor("T", np.array([[b"a"]], dtype=np.object_))
    with pytest.raises(pb_utils.TritonModelException, match="string tensors"):
        text.to_dlpack()
    with pytest.raises(TypeError):
        pb_utils.Tensor("N", [1, 2])
    with pytest.raises(TypeError):
        pb_utils.InferenceResponse(output_tensors=[np.zeros(1)])
