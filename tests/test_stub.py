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
    assert [
        int(c)
        for c in (
            pb_utils.TritonError.UNKNOWN,
            pb_utils.TritonError.INTERNAL,
            pb_utils.TritonError.NOT_FOUND,
            pb_utils.TritonError.INVALID_ARG,
            pb_utils.TritonError.UNAVAILABLE,
            pb_utils.TritonError.UNSUPPORTED,
            pb_utils.TritonError.ALREADY_EXISTS,
            pb_utils.TritonError.CANCELLED,
        )
    ] == list(range(8))
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


class _Producer:
    """A DLPack producer claiming device `device_type` (host memory underneath): it records
    the `stream=` it is asked with and marks its capsule with the claimed device."""

    def __init__(self, array, device_type):
        self.array, self.device_type, self.streams = array, device_type, []

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        capsule = (
            np.ascontiguousarray(self.array).__dlpack__()
            if self.array.flags.c_contiguous
            else torch.from_numpy(self.array).__dlpack__()
        )  # torch exports the strides of a non-contiguous view
        if self.device_type == 2:
            pb_utils._mark_cuda(capsule)
        elif self.device_type == 3:
            info = pb_utils._dltensor(capsule)
            info["struct"].device.device_type = 3  # pinned host memory
        return capsule


def test_from_dlpack_asks_a_cuda_producer_with_a_stream_and_a_host_one_without():
    """python_backend's FromDLPack: `__dlpack__(stream=<proxy stream>)` then a synchronise
    for kDLCUDA, `__dlpack__(stream=None)` for host memory."""
    cuda = _Producer(np.arange(4, dtype=np.float32).reshape(2, 2), 2)
    tensor = pb_utils.Tensor.from_dlpack("G", cuda)
    assert not tensor.is_cpu() and isinstance(cuda.streams[0], int)
    host = _Producer(np.arange(4, dtype=np.float32), 1)
    assert pb_utils.Tensor.from_dlpack("C", host).is_cpu() and host.streams == [None]


def test_pinned_host_memory_is_cpu_memory():
    pinned = _Producer(np.arange(6, dtype=np.int64).reshape(3, 2), 3)
    tensor = pb_utils.Tensor.from_dlpack("P", pinned)
    assert tensor.is_cpu() and pinned.streams == [None]
    assert tensor.as_numpy().tolist() == [[0, 1], [2, 3], [4, 5]]


def test_from_dlpack_refuses_what_the_real_one_refuses():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(pb_utils.TritonModelException, match="not contiguous"):
        pb_utils.Tensor.from_dlpack("X", torch.from_numpy(base)[:, ::2])
    with pytest.raises(pb_utils.TritonModelException, match="not contiguous"):
        pb_utils.Tensor.from_dlpack("X", torch.from_numpy(base).t())
    # The real check skips size-1 dimensions and never looks at the first one: a strided
    # column passes it and is then read as if contiguous (the stub reproduces that, which
    # is why triton.responses.output_tensor makes device arrays contiguous first).
    column = pb_utils.Tensor.from_dlpack("X", torch.from_numpy(base)[:, :1])
    assert column.shape() == [3, 1] and column.as_numpy().ravel().tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(pb_utils.TritonModelException, match="empty string"):
        pb_utils.Tensor.from_dlpack("", torch.zeros(1))
    with pytest.raises(pb_utils.TritonModelException, match="__dlpack_device__"):
        pb_utils.Tensor.from_dlpack("X", [1, 2, 3])
    with pytest.raises(pb_utils.TritonModelException, match="DLDevice type 4 is not support"):
        pb_utils.Tensor.from_dlpack("X", _Producer(base, 4))
