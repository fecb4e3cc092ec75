"""Where a computation runs: `Device("cpu")` (NumPy) or `Device("gpu", id)` (CuPy on that GPU).

Runners take a `Device` (or "cpu", "gpu", "cuda:N"); array code takes the array module
it gives (`Device.array_module()`), so one implementation serves both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Device:
    """`kind` is "cpu" or "gpu"."""

    kind: str = "cpu"
    device_id: int = 0

    @property
    def is_gpu(self) -> bool:
        return self.kind == "gpu"

    def array_module(self):
        """`numpy` on the CPU; `cupy`, bound to this GPU, on a GPU."""
        if not self.is_gpu:
            return np
        try:
            import cupy
        except ImportError as exc:  # pragma: no cover - depends on the deployment
            raise RuntimeError(
                "this model instance is KIND_GPU but CuPy is not importable in the Python "
                "backend's environment: install readability-triton[gpu] there, or use the "
                "'hybrid' or 'cpu' profile"
            ) from exc
        cupy.cuda.Device(self.device_id).use()
        return cupy

    def __str__(self) -> str:
        return f"GPU {self.device_id}" if self.is_gpu else "CPU"


CPU = Device()


def host(array) -> np.ndarray:
    """A NumPy array of `array` (a CuPy one is copied down)."""
    return array.get() if hasattr(array, "get") else np.asarray(array)


def as_device(value) -> Device:
    """A `Device` from a `Device`, None (the CPU), "cpu", "gpu", "cuda", "gpu:N" or "cuda:N"."""
    if value is None:
        return CPU
    if isinstance(value, Device):
        return value
    match = re.fullmatch(r"(cpu|gpu|cuda)(?::(\d+))?", str(value).lower())
    if not match:
        raise ValueError(f"device must be 'cpu', 'gpu', 'cuda' or 'cuda:N', got {value!r}")
    if match.group(1) == "cpu":
        return CPU
    return Device("gpu", int(match.group(2) or 0))
