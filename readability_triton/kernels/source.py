"""The CUDA C++ kernels of this folder: their sources, NVRTC options, signatures, and how
they are launched on an array module.

Every kernel is `extern "C" __global__ void name(params)` in a `.cu` file here, with one
parameter per line-free declaration of the types `u8 i32 u32 i64 u64 float` (pointers, maybe
`const`, or scalars). `signatures` reads them, so that a launch converts each scalar to its
exact C type (CuPy needs NumPy scalars of the right width) and the CPU build
(`kernels/host.py`) can call the same functions through ctypes.

`Kernels(xp, name)` compiles a file with `xp.RawModule` (CuPy: NVRTC, for the current GPU;
the CPU stand-in of `kernels/standin.py`: the C++ build) and launches its kernels with one
thread per item, `BLOCK` threads a block.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
#: The kernel files, compiled by NVRTC in the tests (`nvrtc.compile_check`) and at run time.
SOURCES = ("featurize.cu", "forest.cu", "wordpiece.cu")
#: NVRTC options: no fused multiply-add, so that float results are NumPy's bit for bit.
OPTIONS = ("--fmad=false", "-std=c++17")
#: Threads per block.
BLOCK = 256

#: C type -> NumPy scalar type of a by-value parameter.
SCALARS = {
    "i32": np.int32,
    "u32": np.uint32,
    "i64": np.int64,
    "u64": np.uint64,
    "u8": np.uint8,
    "float": np.float32,
    "double": np.float64,
}


@dataclass(frozen=True)
class Param:
    name: str
    ctype: str  # the C type without const and *
    pointer: bool

    @property
    def scalar(self):
        return SCALARS[self.ctype]


_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)', re.S)
_PARAM = re.compile(r"^(?:const\s+)?(\w+)\s*(\*?)\s*(?:__restrict__\s+)?(\w+)$")


def path(name: str) -> str:
    return os.path.join(HERE, name)


@functools.lru_cache(maxsize=None)
def read(name: str) -> str:
    with open(path(name), encoding="utf-8") as handle:
        return handle.read()


@functools.lru_cache(maxsize=None)
def signatures(name: str) -> dict[str, tuple[Param, ...]]:
    """kernel name -> its parameters, in order, as the file declares them."""
    out = {}
    for kernel, params in _KERNEL.findall(read(name)):
        parsed = []
        for text in params.split(","):
            match = _PARAM.match(" ".join(text.split()))
            if not match or match.group(1) not in SCALARS:
                raise ValueError(f"{name}: kernel {kernel}: cannot read the parameter {text.strip()!r}")
            parsed.append(Param(match.group(3), match.group(1), bool(match.group(2))))
        out[kernel] = tuple(parsed)
    return out


def blocks(items: int) -> int:
    return (items + BLOCK - 1) // BLOCK


class Kernels:
    """The kernels of one file on `xp` (CuPy, or the stand-in): `launch(name,
    items, *args)` runs `name` with at least `items` threads (nothing for 0 items)."""

    def __init__(self, xp, name: str):
        self.name = name
        self.signatures = signatures(name)
        self.module = xp.RawModule(code=read(name), options=OPTIONS)
        self.functions = {kernel: self.module.get_function(kernel) for kernel in self.signatures}

    def launch(self, kernel: str, items: int, *args) -> None:
        params = self.signatures[kernel]
        if len(args) != len(params):
            raise TypeError(f"{kernel} takes {len(params)} arguments, got {len(args)}")
        if items <= 0:
            return
        converted = tuple(arg if p.pointer else p.scalar(arg) for p, arg in zip(params, args))
        self.functions[kernel]((blocks(items),), (BLOCK,), converted)


_COMPILED: dict = {}


def compiled(xp, name: str) -> Kernels:
    """The kernel file `name` compiled for `xp`'s current device, once per device."""
    key = (id(xp), int(xp.cuda.runtime.getDevice()), name)
    if key not in _COMPILED:
        _COMPILED[key] = Kernels(xp, name)
    return _COMPILED[key]
