"""Run the official `tritonserver` binary shipped in the `nvidia-pytriton` wheel.

The wheel carries Triton 2.51 (the core of the 24.10 containers) with the python backend
and the ensemble scheduler, but no pytorch_libtorch or FIL backend: it serves the
`portable` profile. To run it outside a container (checked on this project's machines):

- a backend directory `<dir>/python/` with `libtriton_python.so`,
  `triton_python_backend_utils.py` and the stub built for *this* Python
  (`python_backend_stubs/3.X/triton_python_backend_stub`);
- `LD_LIBRARY_PATH` with the wheel's `nvidia_pytriton.libs` and this Python's `LIBDIR`
  (the stub links `libpython3.X.so.1.0`; a Python built without a shared libpython
  cannot host it);
- this Python's `bin` first on `PATH`, so the stub runs the models with this
  environment's packages.

The server binds to 127.0.0.1 only and is stopped by PID.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field


class ServerError(RuntimeError):
    """The server could not be found, prepared or started."""


def triton_home() -> str:
    """`pytriton/tritonserver` inside the installed nvidia-pytriton wheel."""
    import importlib.util

    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise ServerError("the nvidia-pytriton wheel is not installed (it carries tritonserver): "
                          "pip install 'readability-triton[server]'")
    home = os.path.join(list(spec.submodule_search_locations)[0], "tritonserver")
    if not os.path.isfile(os.path.join(home, "bin", "tritonserver")):
        raise ServerError(f"{home}: no bin/tritonserver in the nvidia-pytriton wheel")
    return home


def _python_libdir() -> str:
    if not sysconfig.get_config_var("Py_ENABLE_SHARED"):
        raise ServerError(
            f"{sys.executable} was built without a shared libpython, which the python backend's stub "
            "must load: use a Python built with --enable-shared (Debian/Ubuntu's, pyenv with "
            "PYTHON_CONFIGURE_OPTS=--enable-shared, conda)")
    return sysconfig.get_config_var("LIBDIR")


def prepare_backends(directory: str) -> str:
    """Fill `directory/python/` with the python backend for this interpreter; returns `directory`."""
    home = triton_home()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = os.path.join(home, "python_backend_stubs", version, "triton_python_backend_stub")
    if not os.path.isfile(stub):
        available = sorted(os.listdir(os.path.join(home, "python_backend_stubs")))
        raise ServerError(f"the nvidia-pytriton wheel has no python backend stub for Python {version} "
                          f"(it has {', '.join(available)})")
    target = os.path.join(directory, "python")
    os.makedirs(target, exist_ok=True)
    sources = {
        "libtriton_python.so": os.path.join(home, "backends", "python", "libtriton_python.so"),
        "triton_python_backend_utils.py": os.path.join(home, "backends", "python", "triton_python_backend_utils.py"),
        "triton_python_backend_stub": stub,
    }
    for name, source in sources.items():
        destination = os.path.join(target, name)
        if os.path.islink(destination) or os.path.exists(destination):
            if os.path.realpath(destination) == os.path.realpath(source):
                continue
            os.remove(destination)
        os.symlink(source, destination)
    return directory


def server_environment(base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    home = triton_home()
    libs = os.path.normpath(os.path.join(home, "..", "..", "nvidia_pytriton.libs"))
    paths = [libs, _python_libdir()] + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(paths)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class TritonServer:
    """One tritonserver process on 127.0.0.1; a context manager that stops it by PID."""

    repository: str
    http_port: int = 0
    grpc_port: int = 0
    metrics_port: int = 0
    backend_dir: str | None = None
    log_file: str | None = None  # None: forward the server's log to our stderr
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen | None = None

    def __post_init__(self):
        self.http_port = self.http_port or free_port()
        self.grpc_port = self.grpc_port or free_port()
        self.metrics_port = self.metrics_port or free_port()
        if self.backend_dir is None:
            self.backend_dir = os.path.join(os.path.expanduser("~"), ".cache", "readability-triton",
                                            f"backends-py{sys.version_info.major}{sys.version_info.minor}")

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def command(self) -> list[str]:
        return [
            os.path.join(triton_home(), "bin", "tritonserver"),
            "--model-repository", os.path.abspath(self.repository),
            "--backend-directory", os.path.abspath(self.backend_dir),
            "--http-address", "127.0.0.1", "--http-port", str(self.http_port),
            "--grpc-address", "127.0.0.1", "--grpc-port", str(self.grpc_port),
            "--metrics-address", "127.0.0.1", "--metrics-port", str(self.metrics_port),
            "--allow-gpu-metrics", "false",
            "--disable-auto-complete-config",
            "--exit-timeout-secs", "10",
            *self.extra_args,
        ]

    def start(self, timeout: float = 180.0) -> "TritonServer":
        if not os.path.isdir(self.repository):
            raise ServerError(f"{self.repository}: no such model repository")
        prepare_backends(self.backend_dir)
        out = open(self.log_file, "ab") if self.log_file else None
        self.process = subprocess.Popen(
            self.command(), env=server_environment(), stdout=out or subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        if out is not None:
            out.close()
        else:
            threading.Thread(target=self._forward_log, daemon=True).start()
        self.wait_ready(timeout)
        return self

    def _forward_log(self) -> None:
        for line in iter(self.process.stdout.readline, b""):
            sys.stderr.write(line.decode("utf-8", "replace"))
        self.process.stdout.close()

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.http_url}/v2/health/ready", timeout=2) as reply:
                return reply.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                hint = f" (its log: {self.log_file})" if self.log_file else ""
                raise ServerError(f"tritonserver exited with status {self.process.returncode} before it was "
                                  f"ready{hint}; a model failed to load or a port is taken")
            if self.ready():
                return
            time.sleep(0.25)
        self.stop()
        raise ServerError(f"tritonserver was not ready after {timeout:.0f} s")

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM the server (by PID), then SIGKILL it if it has not exited in `timeout` s."""
        process = self.process
        if process is None or process.poll() is not None:
            return None if process is None else process.returncode
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()
        finally:
            # The python backend's stub processes are in the server's session: end stragglers.
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def __enter__(self) -> "TritonServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

