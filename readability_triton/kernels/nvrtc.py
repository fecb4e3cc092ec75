"""Compile the kernel files for a GPU architecture with NVRTC, on any machine: no GPU and no
CUDA toolkit needed, only the `nvidia-cuda-nvrtc` wheel (its libnvrtc, loaded with ctypes).
`make test` compiles every file for sm_90 (tests/test_kernels.py), so that a compile error
shows on the CPU machines, not in a GPU's minutes.

    python -m readability_triton.kernels.nvrtc [--arch sm_90]
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import site
import sys

from . import source


class NvrtcError(RuntimeError):
    pass


#: What CuPy's RawModule adds to the kernels' options (cupy/_core compiler: flush float32
#: subnormals to zero), so that the check compiles what CuPy compiles. The kernels' float
#: arithmetic is in double, no float32 they write is subnormal, and the forest widens its
#: float32 input from the bits (kernels/forest.cu), so no value changes.
CUPY_ADDS = ("-ftz=true",)


def find_library() -> str | None:
    """libnvrtc from the nvidia-cuda-nvrtc wheel (CUDA 13 or 12 layout), or None."""
    roots = [*site.getsitepackages(), site.getusersitepackages(), *sys.path]
    for root in dict.fromkeys(r for r in roots if r and os.path.isdir(r)):
        for pattern in ("nvidia/cu*/lib/libnvrtc.so.*", "nvidia/cuda_nvrtc/lib/libnvrtc.so.*"):
            found = sorted(p for p in glob.glob(os.path.join(root, pattern)) if "builtins" not in p)
            if found:
                return found[-1]
    return None


def _library():
    path = find_library()
    if path is None:
        raise NvrtcError("libnvrtc not found: pip install nvidia-cuda-nvrtc (the `test` extra has it)")
    return ctypes.CDLL(path)


def compile_source(code: str, name: str, arch: str = "sm_90") -> bytes:
    """The cubin of `code` for `arch`, with the kernels' options; NvrtcError with the log."""
    lib = _library()
    program = ctypes.c_void_p()
    status = lib.nvrtcCreateProgram(ctypes.byref(program), code.encode(), name.encode(), 0, None, None)
    if status:
        raise NvrtcError(f"nvrtcCreateProgram failed ({status})")
    try:
        options = [f"-arch={arch}".encode(), *(o.encode() for o in (*source.OPTIONS, *CUPY_ADDS))]
        status = lib.nvrtcCompileProgram(program, len(options), (ctypes.c_char_p * len(options))(*options))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(program, log)
        if status:
            raise NvrtcError(f"{name} does not compile for {arch}:\n{log.value.decode(errors='replace')}")
        lib.nvrtcGetCUBINSize(program, ctypes.byref(size))
        cubin = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetCUBIN(program, cubin)
        return cubin.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


def compile_check(arch: str = "sm_90") -> dict[str, int]:
    """Compile every kernel file for `arch`: file -> cubin bytes."""
    return {name: len(compile_source(source.read(name), name, arch)) for name in source.SOURCES}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", default="sm_90")
    args = parser.parse_args(argv)
    try:
        sizes = compile_check(args.arch)
    except NvrtcError as exc:
        print(exc, file=sys.stderr)
        return 1
    for name, size in sizes.items():
        print(f"{name}: {size} bytes of {args.arch} code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
