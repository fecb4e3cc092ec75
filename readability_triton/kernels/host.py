"""The kernels compiled as C++ for the CPU: their logic, tested on every machine without a
GPU (tests/test_kernels.py compares them with the NumPy path bit for bit).

`build()` compiles every `.cu` file of `source.SOURCES` with `host_prelude.h` (blockIdx and
threadIdx are plain variables, atomics plain read-modify-writes) and a launcher per kernel
that runs its blocks and threads one after another, into one shared library (g++, or `$CXX`;
`-ffp-contract=off`, the CPU's counterpart of NVRTC's `--fmad=false`). The library is kept
under a folder keyed by the sources' hash. `HostRawModule` has the `get_function` of CuPy's
RawModule over it; the stand-in array module (`standin.py`) hands it out as `RawModule`.
Sequential threads can reorder nothing that matters: the kernels' results never depend on
the order of their threads (integer atomics, and tables whose layout may differ but whose
answers may not).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile

import numpy as np

from . import source

PRELUDE = source.path("host_prelude.h")
_CTYPES = {
    "i32": ctypes.c_int32,
    "u32": ctypes.c_uint32,
    "i64": ctypes.c_int64,
    "u64": ctypes.c_uint64,
    "u8": ctypes.c_uint8,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
}


class HostBuildError(RuntimeError):
    pass


def compiler() -> str | None:
    """The C++ compiler the CPU build uses ($CXX, else g++ or c++ on PATH), or None."""
    wanted = os.environ.get("CXX")
    if wanted:
        return shutil.which(wanted)
    return shutil.which("g++") or shutil.which("c++")


def _launcher(name: str) -> str:
    lines = [f'#include "{PRELUDE}"', f'#include "{source.path(name)}"']
    for kernel, params in source.signatures(name).items():
        decl = ", ".join(["unsigned grid", "unsigned block"] + [_cdecl(p) for p in params])
        call = ", ".join(p.name for p in params)
        lines += [
            f'extern "C" void launch_{kernel}({decl}) {{',
            "  gridDim.x = grid; blockDim.x = block;",
            "  for (unsigned b = 0; b < grid; ++b) { blockIdx.x = b;",
            f"    for (unsigned t = 0; t < block; ++t) {{ threadIdx.x = t; {kernel}({call}); }} }}",
            "}",
        ]
    return "\n".join(lines) + "\n"


def _cdecl(p: source.Param) -> str:
    return f"{p.ctype}{'*' if p.pointer else ''} {p.name}"


def _digest() -> str:
    h = hashlib.sha256()
    for name in (*source.SOURCES, os.path.basename(PRELUDE)):
        with open(source.path(name), "rb") as handle:
            h.update(name.encode() + b"\0" + handle.read() + b"\0")
    return h.hexdigest()[:16]


class HostLibrary:
    """The CPU build of every kernel file: `library.call(kernel, grid, block, args)`."""

    def __init__(self, so_path: str):
        self.path = so_path
        self.lib = ctypes.CDLL(so_path)
        self.params = {k: p for name in source.SOURCES for k, p in source.signatures(name).items()}
        for kernel, params in self.params.items():
            fn = getattr(self.lib, f"launch_{kernel}")
            fn.argtypes = [ctypes.c_uint, ctypes.c_uint] + [
                ctypes.c_void_p if p.pointer else _CTYPES[p.ctype] for p in params
            ]
            fn.restype = None

    def call(self, kernel: str, grid: int, block: int, args) -> None:
        converted = []
        for p, arg in zip(self.params[kernel], args):
            if p.pointer:
                array = np.asarray(arg)
                if not array.flags.c_contiguous:
                    raise ValueError(f"{kernel}: {p.name} must be C-contiguous")
                converted.append(array.ctypes.data)
            else:
                converted.append(arg.item() if isinstance(arg, np.generic) else arg)
        getattr(self.lib, f"launch_{kernel}")(grid, block, *converted)


def build(folder: str | None = None) -> HostLibrary:
    """Compile (or reuse) the CPU build; HostBuildError, with the compiler's message, on failure."""
    cxx = compiler()
    if cxx is None:
        raise HostBuildError("no C++ compiler (g++): install build-essential, or set CXX")
    folder = folder or os.path.join(tempfile.gettempdir(), f"readability-triton-kernels-{os.getuid()}")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    so_path = os.path.join(folder, f"kernels-{_digest()}.so")
    if not os.path.isfile(so_path):
        with tempfile.TemporaryDirectory(dir=folder) as work:
            units = []  # one translation unit per kernel file, as NVRTC compiles them
            for name in source.SOURCES:
                units.append(os.path.join(work, f"{name}.cpp"))
                with open(units[-1], "w", encoding="utf-8") as out:
                    out.write(_launcher(name))
            built = os.path.join(work, "kernels.so")
            flags = ["-O2", "-std=c++17", "-shared", "-fPIC", "-ffp-contract=off", "-fno-fast-math", "-Wall"]
            result = subprocess.run([cxx, *flags, "-o", built, *units], capture_output=True, text=True)
            if result.returncode:
                raise HostBuildError(f"{cxx} could not build the kernels:\n{result.stderr[-4000:]}")
            os.replace(built, so_path)
    return HostLibrary(so_path)


class HostFunction:
    def __init__(self, library: HostLibrary, kernel: str, on_launch=None):
        self.library, self.kernel, self.on_launch = library, kernel, on_launch

    def __call__(self, grid, block, args):
        if self.on_launch is not None:
            self.on_launch(self.kernel)
        self.library.call(self.kernel, int(grid[0]), int(block[0]), args)


class HostRawModule:
    """CuPy's RawModule over the CPU build: `code` must be one of the kernel files."""

    def __init__(self, library: HostLibrary, code: str, options=(), on_launch=None):
        names = [name for name in source.SOURCES if source.read(name) == code]
        if not names:
            raise ValueError("the CPU build has only the kernel files of readability_triton/kernels")
        if tuple(options) != source.OPTIONS:
            raise ValueError(f"the kernels are compiled with {source.OPTIONS}, not {tuple(options)}")
        self.library, self.kernels, self.on_launch = library, set(source.signatures(names[0])), on_launch

    def get_function(self, kernel: str) -> HostFunction:
        if kernel not in self.kernels:
            raise AttributeError(kernel)
        return HostFunction(self.library, kernel, self.on_launch)
