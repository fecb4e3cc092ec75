"""A stand-in for Triton's `triton_python_backend_utils`, for unit tests outside a server.

The real module is two halves: pure-Python helpers (`get_input_tensor_by_name`,
`triton_string_to_numpy`, `serialize_byte_tensor`, ...) and the C++ classes of
`c_python_backend_utils` (`Tensor`, `TritonError`, `InferenceRequest`,
`InferenceResponse`, `Logger`). This stub runs the *real* pure-Python half, read from the
python backend shipped in the `nvidia-pytriton` wheel, and re-implements the C++ classes
with the behaviour the models depend on, as observed on Triton 2.51:

- `TritonError(message, code=INTERNAL)` is not an exception; `code()` and `message()`;
  the codes are the `TRITONSERVER_Error_Code` values (UNKNOWN 0 ... CANCELLED 7);
- `Tensor(name, ndarray)`; `Tensor.from_dlpack(name, obj)` as `PbTensor::FromDLPack`: a
  capsule or an object with `__dlpack__` and `__dlpack_device__`, `stream=` the proxy
  stream for a CUDA producer (then synchronised), `stream=None` otherwise, C-contiguous
  only, pinned host memory (kDLCUDAHost) as CPU, other devices refused; `is_cpu()`;
  `as_numpy()` raises `TritonModelException` on a GPU tensor; `to_dlpack()` / `__dlpack__`
  raise on BYTES tensors;
- `InferenceResponse(output_tensors=[], error=None)`.

A tensor that lives on a GPU can be simulated with `Tensor._on_gpu(name, array)`: it
reports `is_cpu() == False` and a CUDA DLPack device, and refuses `as_numpy()` exactly as
the real module does, so tests can show that a model never reads a GPU tensor through
the host.
"""

from __future__ import annotations

import ctypes
import enum
import importlib.util
import json
import logging
import os

import numpy as np


def _real_helpers_path() -> str:
    override = os.environ.get("READABILITY_TRITON_PB_UTILS")  # a copy of the real file
    if override:
        return override
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "the pb_utils stub needs the nvidia-pytriton wheel (it reads the real "
            "triton_python_backend_utils.py from it): pip install -e '.[test]'"
        )
    root = list(spec.submodule_search_locations)[0]
    return os.path.join(root, "tritonserver", "backends", "python", "triton_python_backend_utils.py")


# The real pure-Python half of the module, executed here.
with open(_real_helpers_path(), encoding="utf-8") as _f:
    exec(compile(_f.read(), _real_helpers_path(), "exec"), globals())


class TritonModelException(Exception):
    """What the real module raises from misuse of a tensor (e.g. `as_numpy()` on a GPU)."""


class _ErrorCode(enum.IntEnum):
    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7


class TritonError:
    UNKNOWN = _ErrorCode.UNKNOWN
    INTERNAL = _ErrorCode.INTERNAL
    NOT_FOUND = _ErrorCode.NOT_FOUND
    INVALID_ARG = _ErrorCode.INVALID_ARG
    UNAVAILABLE = _ErrorCode.UNAVAILABLE
    UNSUPPORTED = _ErrorCode.UNSUPPORTED
    ALREADY_EXISTS = _ErrorCode.ALREADY_EXISTS
    CANCELLED = _ErrorCode.CANCELLED

    def __init__(self, message: str, code: _ErrorCode = _ErrorCode.INTERNAL):
        if not isinstance(message, str):
            raise TypeError("TritonError(message: str, code)")
        self._message = message
        self._code = _ErrorCode(code)

    def message(self) -> str:
        return self._message

    def code(self) -> _ErrorCode:
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, {self._code.name})"


_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST = 1, 2, 3


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_rename = ctypes.pythonapi.PyCapsule_SetName
_capsule_rename.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _dltensor(capsule) -> dict:
    """The DLTensor of an unused "dltensor" capsule (its first member: DLManagedTensor)."""
    pointer = _capsule_pointer(capsule, b"dltensor")
    tensor = _DLTensor.from_address(pointer)
    shape = [tensor.shape[i] for i in range(tensor.ndim)]
    strides = [tensor.strides[i] for i in range(tensor.ndim)] if tensor.strides else None
    return {
        "data": (tensor.data or 0) + tensor.byte_offset,
        "device": (tensor.device.device_type, tensor.device.device_id),
        "shape": shape,
        "strides": strides,
        "dtype": (tensor.dtype.code, tensor.dtype.bits),
        "struct": tensor,
    }


def _mark_cuda(capsule, device_id: int = 0):
    """Test helper: make a host capsule claim to be CUDA memory of `device_id`, as a CuPy
    producer's would (for CPU-only tests of the GPU path; the memory stays host memory)."""
    info = _dltensor(capsule)
    info["struct"].device.device_type = _KDL_CUDA
    info["struct"].device.device_id = device_id
    return capsule


_DL_NUMPY = {
    (0, 8): np.int8,
    (0, 16): np.int16,
    (0, 32): np.int32,
    (0, 64): np.int64,
    (1, 8): np.uint8,
    (1, 16): np.uint16,
    (1, 32): np.uint32,
    (1, 64): np.uint64,
    (2, 16): np.float16,
    (2, 32): np.float32,
    (2, 64): np.float64,
    (6, 8): np.bool_,
}


def _host_array(info: dict, owner) -> np.ndarray:
    """A NumPy view of host memory (CPU or pinned) described by a DLTensor; `owner` keeps it alive."""
    dtype = np.dtype(_DL_NUMPY[info["dtype"]])
    count = int(np.prod(info["shape"], dtype=np.int64))
    if count == 0:
        return np.zeros(info["shape"], dtype=dtype)
    buffer = (ctypes.c_char * (count * dtype.itemsize)).from_address(info["data"])
    array = np.frombuffer(buffer, dtype=dtype).reshape(info["shape"])
    array = array.view(type=_Owned)
    array._owner = owner
    return array


class _Owned(np.ndarray):
    """An ndarray view that keeps the DLPack producer alive."""


def _proxy_stream():
    """(stream handle, synchronize): a CUDA stream of the stub's own where CuPy and a GPU
    exist, else a stand-in handle (tests of CUDA-typed producers on the CPU)."""
    try:
        import cupy

        stream = cupy.cuda.Stream(non_blocking=True)
        return int(stream.ptr), stream.synchronize
    except Exception:  # noqa: BLE001 - no CuPy or no GPU
        return 0x5EED, lambda: None


class Tensor:
    def __init__(self, name: str, array: np.ndarray):
        if not isinstance(array, np.ndarray):
            raise TypeError(f"Tensor({name!r}, ...) takes a numpy.ndarray, got {type(array).__name__}")
        self._name = name
        self._array = array
        self._device = (_KDL_CPU, 0)

    # -- construction -----------------------------------------------------------
    @staticmethod
    def from_dlpack(name: str, obj) -> "Tensor":
        """As python_backend's `PbTensor::FromDLPack` (pb_tensor.cc): a capsule, or an object
        with `__dlpack__` and `__dlpack_device__`; a CUDA producer is asked for its capsule
        with `stream=` the stub's proxy stream, which is then synchronised; a CPU or pinned
        (kDLCUDAHost) producer with `stream=None`; the capsule must be C-contiguous (size-1
        dimensions aside); pinned memory counts as CPU memory; other devices are refused."""
        if name == "":
            raise TritonModelException("Tensor name cannot be an empty string.")
        if type(obj).__name__ == "PyCapsule":
            return Tensor._from_capsule(name, obj, obj)
        if not (hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")):
            raise TritonModelException(
                "Provided tensor is not supported. Tensor must be a DLPack capsule or have "
                "`__dlpack__` and `__dlpack_device__` attributes"
            )
        device_type = int(obj.__dlpack_device__()[0])
        if device_type == _KDL_CUDA:
            stream, synchronize = _proxy_stream()
            capsule = obj.__dlpack__(stream=stream)
            synchronize()
            Tensor.dlpack_streams.append(stream)
            return Tensor._from_capsule(name, capsule, obj)
        if device_type not in (_KDL_CPU, _KDL_CUDA_HOST):
            raise TritonModelException(f"DLDevice type {device_type} is not support by Python backend.")
        Tensor.dlpack_streams.append(None)
        return Tensor._from_capsule(name, obj.__dlpack__(stream=None), obj)

    #: The `stream=` argument of each `__dlpack__` call `from_dlpack` made (tests read it).
    dlpack_streams: list = []

    @staticmethod
    def _from_capsule(name: str, capsule, owner) -> "Tensor":
        """`PbTensor::FromDLPackCapsule`: the contiguity check, then the memory by device."""
        info = _dltensor(capsule)
        shape, strides = info["shape"], info["strides"]
        if strides is not None:
            expected = 1
            for dim, stride in zip(reversed(shape[1:]), reversed(strides[1:])):
                if dim != 1:
                    if stride != expected:
                        raise TritonModelException(
                            "DLPack tensor is not contiguous. Only contiguous DLPack "
                            "tensors that are stored in C-Order are supported."
                        )
                    expected *= dim
        device_type, device_id = info["device"]
        tensor = Tensor.__new__(Tensor)
        tensor._name = name
        if device_type == _KDL_CUDA:
            tensor._array, tensor._device = owner, (_KDL_CUDA, device_id)
        elif device_type in (_KDL_CPU, _KDL_CUDA_HOST):
            # The capsule is kept with the view: its deleter frees the memory only after.
            tensor._array, tensor._device = _host_array(info, (capsule, owner)), (_KDL_CPU, 0)
        else:
            raise TritonModelException(f"DLDevice type {device_type} is not support by Python backend.")
        tensor._capsule = capsule
        return tensor

    @staticmethod
    def _on_gpu(name: str, array, device_id: int = 0) -> "Tensor":
        """A tensor that behaves as if it lived on GPU `device_id` (test helper)."""
        tensor = Tensor.__new__(Tensor)
        tensor._name, tensor._array, tensor._device = name, array, (_KDL_CUDA, device_id)
        return tensor

    # -- inspection -------------------------------------------------------------
    def name(self) -> str:
        return self._name

    def is_cpu(self) -> bool:
        return self._device[0] == _KDL_CPU

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def triton_dtype(self) -> int:
        return numpy_to_triton_type(self._array.dtype)  # noqa: F821 - from the real helpers

    def as_numpy(self) -> np.ndarray:
        if not self.is_cpu():
            raise TritonModelException("Tensor is stored in GPU and cannot be converted to NumPy.")
        return self._array

    def __dlpack_device__(self):
        return self._device

    def __dlpack__(self, stream=None):
        if self._array.dtype == np.object_:
            raise TritonModelException("DLPack does not have support for string tensors.")
        array = self._array
        if isinstance(array, np.ndarray) and not array.flags.writeable:
            array = array.copy()  # NumPy 1.x cannot export read-only arrays (e.g. from torch)
        return array.__dlpack__() if stream is None else array.__dlpack__(stream=stream)

    def to_dlpack(self):
        return self.__dlpack__()

    def __repr__(self) -> str:
        where = "cpu" if self.is_cpu() else f"gpu:{self._device[1]}"
        return f"Tensor({self._name!r}, shape={self.shape()}, {where})"


class InferenceRequest:
    """The parts of a request the models read (built by tests with input tensors)."""

    def __init__(
        self,
        inputs=(),
        requested_output_names=(),
        request_id: str = "",
        model_name: str = "",
        parameters: dict | None = None,
    ):
        self._inputs = list(inputs)
        self._requested = list(requested_output_names)
        self._request_id = request_id
        self._model_name = model_name
        self._parameters = json.dumps(parameters or {})

    def inputs(self):
        return list(self._inputs)

    def requested_output_names(self):
        return list(self._requested)

    def request_id(self) -> str:
        return self._request_id

    def parameters(self) -> str:
        return self._parameters

    def is_cancelled(self) -> bool:
        return False


class InferenceResponse:
    def __init__(self, output_tensors=(), error: TritonError | None = None):
        if error is not None and not isinstance(error, TritonError):
            raise TypeError("InferenceResponse(error=) takes a TritonError")
        for tensor in output_tensors:
            if not isinstance(tensor, Tensor):
                raise TypeError(f"InferenceResponse takes pb_utils.Tensor outputs, got {type(tensor).__name__}")
        self._outputs = list(output_tensors)
        self._error = error

    def output_tensors(self):
        return list(self._outputs)

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error


class Logger:
    """Collects what models log (`Logger.records`) and forwards it to `logging`."""

    records: list[tuple[str, str]] = []
    _log = logging.getLogger("triton_python_backend")

    @classmethod
    def _emit(cls, level: str, message: str) -> None:
        cls.records.append((level, str(message)))
        cls._log.log(getattr(logging, level), message)

    @classmethod
    def log_info(cls, message):
        cls._emit("INFO", message)

    @classmethod
    def log_warn(cls, message):
        cls._emit("WARNING", message)

    @classmethod
    def log_error(cls, message):
        cls._emit("ERROR", message)

    @classmethod
    def log_verbose(cls, message):
        cls._emit("DEBUG", message)
