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

The server binds to 127.0.0.1 only and is stopped by PID. It runs with explicit model
control (every model loaded at start), so that the models can be unloaded and reloaded
while it runs:

- `stop()` drains before it signals: it unloads the ensemble (new requests are refused
  with NOT_FOUND, the ones in flight finish), then the other models, and only then sends
  SIGTERM. Triton 2.51 sent SIGTERM under load leaves ensemble requests whose next step it
  refuses in flight forever and then hangs or crashes on exit; with nothing loaded it
  stops cleanly. After the process exits, the python backend's `/dev/shm` segments of
  this server (named with a prefix of its own) are removed if any are left.
- `reload(model)`: unload and load one model again, which starts new stub processes (the
  2.51 python backend never replaces a stub that died).
"""
from __future__ import annotations

import itertools
import json
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
from typing import Any

from ..errors import ServerError

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
        return (f"NumPy {version} is installed, but the python-backend stub of the tritonserver in the "
                f"nvidia-pytriton wheel (Triton {WHEEL_TRITON}, pybind11 2.10) reads text tensors with NumPy 1.x "
                "only (with NumPy 2 every text request crashes the stub): pip install 'numpy<2', or "
                "install with the constraints in constraints/cpu.txt")
    return None


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


_instances = itertools.count()


@dataclass
class TritonServer:
    """One tritonserver process on 127.0.0.1; a context manager that stops it by PID."""

    repository: str
    http_port: int = 0
    grpc_port: int = 0
    metrics_port: int = 0
    backend_dir: str = ""  # default: a folder under ~/.cache/readability-triton
    log_file: str | None = None  # None: forward the server's log to our stderr
    extra_args: list[str] = field(default_factory=list)
    exit_timeout: int = 10  # seconds tritonserver waits for in-flight work after SIGTERM
    drain_timeout: float = 30.0  # seconds stop() waits for in-flight requests before SIGTERM
    process: subprocess.Popen | None = None  # set by start()
    shm_prefix: str = ""  # prefix of the python backend's /dev/shm segments (unique per server)
    last_stop: dict[str, Any] = field(default_factory=dict)  # what the last stop() did

    def __post_init__(self):
        self.http_port = self.http_port or free_port()
        self.grpc_port = self.grpc_port or free_port()
        self.metrics_port = self.metrics_port or free_port()
        if not self.backend_dir:
            self.backend_dir = os.path.join(os.path.expanduser("~"), ".cache", "readability-triton",
                                            f"backends-py{sys.version_info.major}{sys.version_info.minor}")
        self.shm_prefix = self.shm_prefix or f"readability-triton-{os.getpid()}-{next(_instances)}-"

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
            "--model-control-mode", "explicit", "--load-model", "*",
            "--backend-config", f"python,shm-region-prefix-name={self.shm_prefix}",
            "--exit-timeout-secs", str(self.exit_timeout),
            *self.extra_args,
        ]

    def start(self, timeout: float = 180.0) -> "TritonServer":
        if not os.path.isdir(self.repository):
            raise ServerError(f"{self.repository}: no such model repository")
        problem = stub_numpy_problem()
        if problem:
            raise ServerError(problem)
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

    @property
    def running(self) -> subprocess.Popen:
        """The server's process (ServerError before `start`)."""
        if self.process is None:
            raise ServerError("the server has not been started")
        return self.process

    @property
    def pid(self) -> int:
        return self.running.pid

    def _forward_log(self) -> None:
        stream = self.running.stdout
        assert stream is not None  # started with stdout=PIPE
        for line in iter(stream.readline, b""):
            sys.stderr.write(line.decode("utf-8", "replace"))
        stream.close()

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.http_url}/v2/health/ready", timeout=2) as reply:
                return reply.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.running.poll() is not None:
                hint = f" (its log: {self.log_file})" if self.log_file else ""
                raise ServerError(f"tritonserver exited with status {self.running.returncode} before it was "
                                  f"ready{hint}; a model failed to load or a port is taken")
            if self.ready():
                return
            time.sleep(0.25)
        self.stop(drain=False)
        raise ServerError(f"tritonserver was not ready after {timeout:.0f} s")

    # -- model control (the repository extension) ---------------------------------

    def _post(self, path: str, body: dict | None = None, timeout: float = 60.0) -> bytes:
        data = json.dumps(body or {}).encode()
        request = urllib.request.Request(f"http://{self.http_url}{path}", data=data, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
                return reply.read()
        except urllib.error.HTTPError as err:
            raise ServerError(f"{path}: HTTP {err.code}: {err.read().decode('utf-8', 'replace')}") from None
        except (urllib.error.URLError, OSError) as err:
            raise ServerError(f"{path}: {err}") from None

    def model_states(self) -> dict[str, str]:
        """{model: state} from the repository index (READY, UNLOADING, UNAVAILABLE, ...)."""
        return {m["name"]: m.get("state", "") for m in json.loads(self._post("/v2/repository/index") or b"[]")}

    def unload(self, model: str) -> None:
        self._post(f"/v2/repository/models/{model}/unload")

    def load(self, model: str) -> None:
        self._post(f"/v2/repository/models/{model}/load", timeout=300)

    def reload(self, model: str, settle: float = 1.5) -> None:
        """Unload `model` and load it again (new stub processes). The unload of an instance
        whose stub died may never finish on Triton 2.51; the load does not wait for it
        longer than `settle` seconds."""
        self.unload(model)
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline and self.model_states().get(model) == "UNLOADING":
            time.sleep(0.1)
        self.load(model)

    def _wait_unloaded(self, models, deadline: float) -> list[str]:
        """Wait until none of `models` is READY or UNLOADING; the ones still there."""
        pending = list(models)
        while pending and time.monotonic() < deadline and self.running.poll() is None:
            try:
                states = self.model_states()
            except ServerError:
                break
            pending = [m for m in pending if states.get(m) in ("READY", "UNLOADING")]
            if pending:
                time.sleep(0.1)
        return pending

    def drain(self, timeout: float | None = None, ensembles=("readability",), models_timeout: float = 5.0) -> dict:
        """Stop taking work and let the requests in flight finish: unload the ensembles
        (new requests are refused with NOT_FOUND), wait for them to unload (their requests
        in flight are answered; at most `timeout` s), then unload the other models (at
        most `models_timeout` s more: with the ensembles gone they have little in flight,
        and an instance whose stub died never finishes unloading on Triton 2.51)."""
        timeout = self.drain_timeout if timeout is None else timeout
        started = time.monotonic()
        deadline = started + timeout
        report: dict[str, Any] = {"drained": False}
        try:
            states = self.model_states()
        except ServerError as err:
            report["error"] = str(err)
            return report
        loaded = [m for m, state in states.items() if state == "READY"]
        first = [m for m in loaded if m in ensembles]
        try:
            for model in first:
                self.unload(model)
            stuck = self._wait_unloaded(first, deadline)
            for model in loaded:
                if model not in first:
                    self.unload(model)
            stuck += self._wait_unloaded([m for m in loaded if m not in first], time.monotonic() + models_timeout)
        except ServerError as err:
            report["error"] = str(err)
            return report
        report.update(drained=not stuck, still_loaded=stuck, seconds=round(time.monotonic() - started, 2))
        return report

    def leftover_shm(self) -> list[str]:
        """This server's python-backend segments still in /dev/shm."""
        try:
            return sorted(n for n in os.listdir("/dev/shm") if n.startswith(self.shm_prefix))
        except OSError:
            return []

    def stop(self, timeout: float | None = None, drain: bool = True) -> int | None:
        """Drain (see `drain`), SIGTERM the server (by PID), SIGKILL it if it has not exited
        `timeout` s later (default: its exit timeout + 10 s), end straggling stubs and
        remove this server's /dev/shm segments. Returns the exit status; `last_stop`
        says what happened."""
        process = self.process
        if process is None or process.poll() is not None:
            return None if process is None else process.returncode
        report: dict[str, Any] = self.drain() if drain and self.ready() else {"drained": False}
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout if timeout is not None else self.exit_timeout + 10)
            report["killed"] = False
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
            report["killed"] = True
        finally:
            # The python backend's stub processes are in the server's session: end stragglers.
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        left = self.leftover_shm()
        for name in left:
            try:
                os.remove(os.path.join("/dev/shm", name))
            except OSError:
                pass
        report.update(exit_status=code, exit_seconds=round(time.monotonic() - started, 2), removed_shm=left)
        self.last_stop = report
        return code

    def __enter__(self) -> "TritonServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

