"""Where tritonserver comes from and what it needs to run outside a container: the binary
and python backend in the `nvidia-pytriton` wheel (Triton 2.51, no pytorch_libtorch or FIL
backend), or an installed tritonserver at $READABILITY_TRITON_HOME; Triton's own native
backends built here (`make native-backends`); the environment the server and its stubs run
in. Outside a container the wheel's server needs (checked on this project's machines):

- a backend directory `<dir>/python/` with `libtriton_python.so`,
  `triton_python_backend_utils.py` and the stub built for *this* Python
  (`python_backend_stubs/3.X/triton_python_backend_stub`);
- `LD_LIBRARY_PATH` with the wheel's `nvidia_pytriton.libs` and this Python's `LIBDIR`
  (the stub links `libpython3.X.so.1.0`; a Python built without a shared libpython
  cannot host it);
- this Python's `bin` first on `PATH`, so the stub runs the models with this
  environment's packages.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import sysconfig

from ..errors import ServerError

#: Where an installed tritonserver lives (an NGC image: /opt/tritonserver); unset: the wheel's.
TRITON_HOME_ENV = "READABILITY_TRITON_HOME"


#: The Triton release of the tritonserver in the nvidia-pytriton 0.7 wheel.
WHEEL_TRITON = "2.51.0 (24.10)"


def stub_numpy_problem() -> str | None:
    """Why this environment's NumPy cannot serve, or None.

    The wheel's python-backend stub (Triton 2.51) is built with pybind11 2.10, which reads
    BYTES tensors with NumPy 1.x only: with NumPy 2 every request with a text crashes the
    stub (`pybind11::error_already_set ... unpack_from requires a buffer`), while the
    models stay READY. Releases from 24.11 on take NumPy 2."""
    from importlib import metadata

    try:
        version = metadata.version("numpy")
    except metadata.PackageNotFoundError:
        return "NumPy is not installed in this environment (the python backend's stub needs it)"
    if int(version.split(".")[0]) >= 2:
        return (
            f"NumPy {version} is installed, but the python-backend stub of the tritonserver in the "
            f"nvidia-pytriton wheel (Triton {WHEEL_TRITON}, pybind11 2.10) reads text tensors with NumPy 1.x "
            "only (with NumPy 2 every text request crashes the stub): pip install 'numpy<2', or "
            "install with the constraints in constraints/cpu.txt"
        )
    return None


def triton_home() -> str:
    """`pytriton/tritonserver` inside the installed nvidia-pytriton wheel."""
    import importlib.util

    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise ServerError(
            "the nvidia-pytriton wheel is not installed (it carries tritonserver): "
            "pip install 'readability-triton[server]'"
        )
    home = os.path.join(list(spec.submodule_search_locations)[0], "tritonserver")
    if not os.path.isfile(os.path.join(home, "bin", "tritonserver")):
        raise ServerError(f"{home}: no bin/tritonserver in the nvidia-pytriton wheel")
    return home


def _python_libdir() -> str:
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        raise ServerError(
            f"{sys.executable} was built without a shared libpython, which the python backend's stub "
            "must load: use a Python built with --enable-shared (Debian/Ubuntu's, pyenv with "
            "PYTHON_CONFIGURE_OPTS=--enable-shared, conda)"
        )
    return sysconfig.get_config_var("LIBDIR")


#: Triton's own backends built here (`make native-backends`): backends/<name>/.
NATIVE_BACKENDS_ENV = "READABILITY_TRITON_NATIVE_BACKENDS"


def native_backends() -> str | None:
    """The folder `make native-backends` built (PyTorch and ONNX Runtime backends for the
    wheel's Triton 2.51), or None: $READABILITY_TRITON_NATIVE_BACKENDS, else
    ~/.cache/readability-triton/native-backends."""
    path = os.environ.get(NATIVE_BACKENDS_ENV) or os.path.join(
        os.path.expanduser("~"), ".cache", "readability-triton", "native-backends"
    )
    return path if os.path.isfile(os.path.join(path, ".complete")) else None


def available_backends(backend_dir: str) -> set[str]:
    """The backends a server with `--backend-directory backend_dir` can load."""
    try:
        return {name for name in os.listdir(backend_dir) if os.path.isdir(os.path.join(backend_dir, name))}
    except OSError:
        return set()


def prepare_backends(directory: str, native: str | None = None) -> str:
    """Fill `directory/python/` with the python backend for this interpreter, and link the
    native backends in `native` (`make native-backends`) beside it; returns `directory`."""
    if native:
        for name in sorted(os.listdir(os.path.join(native, "backends"))):
            _link(os.path.join(native, "backends", name), os.path.join(directory, name))
    home = triton_home()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = os.path.join(home, "python_backend_stubs", version, "triton_python_backend_stub")
    if not os.path.isfile(stub):
        available = sorted(os.listdir(os.path.join(home, "python_backend_stubs")))
        raise ServerError(
            f"the nvidia-pytriton wheel has no python backend stub for Python {version} (it has {', '.join(available)})"
        )
    target = os.path.join(directory, "python")
    os.makedirs(target, exist_ok=True)
    sources = {
        "libtriton_python.so": os.path.join(home, "backends", "python", "libtriton_python.so"),
        "triton_python_backend_utils.py": os.path.join(home, "backends", "python", "triton_python_backend_utils.py"),
        "triton_python_backend_stub": stub,
    }
    for name, source in sources.items():
        _link(source, os.path.join(target, name))
    return directory


def _link(source: str, destination: str) -> None:
    os.makedirs(os.path.dirname(destination), exist_ok=True)
    if os.path.islink(destination) or os.path.exists(destination):
        if os.path.realpath(destination) == os.path.realpath(source):
            return
        os.remove(destination)
    os.symlink(source, destination)


def server_environment(base: dict[str, str] | None = None, home: str = "") -> dict[str, str]:
    """The environment tritonserver runs in: the wheel's libraries and this Python's
    LIBDIR and `bin` first; for a tritonserver installed at `home` (an NGC image's
    /opt/tritonserver), its `lib`. (The native backends find their libraries through their
    RPATH, beside them.)"""
    env = dict(os.environ if base is None else base)
    libs = library_path(home)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(libs + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


def library_path(home: str = "") -> list[str]:
    """The folders tritonserver's libraries are found in: an installed one's `lib`, or the
    wheel's libraries and this Python's LIBDIR (the stub links libpython)."""
    if home:
        return [os.path.join(home, "lib")]
    return [os.path.normpath(os.path.join(triton_home(), "..", "..", "nvidia_pytriton.libs")), _python_libdir()]


#: What tritonserver 2.51, a GPU build, logs on a machine without a CUDA driver, where it
#: serves on the CPU all the same: server.cc's "CudaDriverHelper has not been initialized"
#: (no flag avoids it), the ensemble's "unable to create stream ... CUDA driver version is
#: insufficient" (nor this), and the pinned pool's warnings (`command` sets no pool there).
CPU_CUDA_LINES = (
    b"CudaDriverHelper has not been initialized",
    b"CUDA driver version is insufficient",
    b"no pinned memory pool",
)
#: The line that follows the first of them.
CPU_CUDA_NOTE = (
    "readability-triton: the CUDA errors tritonserver logs here are expected: this machine has no CUDA driver, "
    "and tritonserver (a GPU build) tries CUDA before it serves on the CPU; nothing is wrong\n"
)


@functools.cache
def cuda_driver() -> bool:
    """Whether this machine has a CUDA driver (libcuda.so.1 loads)."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True
