"""One tritonserver process, started, watched, drained and stopped: the binary of the
`nvidia-pytriton` wheel (Triton 2.51, the core of the 24.10 containers: python backend and
ensembles) or an installed one, with the backends and environment `installation` prepares.

The server binds to 127.0.0.1 only and is stopped by PID. It runs with explicit model
control (every model loaded at start), so that the models can be unloaded while it runs
(`control.ModelControl`):

- `stop()` drains before it signals: it unloads the ensemble (new requests are refused
  with NOT_FOUND, the ones in flight finish), then the other models, and only then sends
  SIGTERM. Triton 2.51 sent SIGTERM under load leaves ensemble requests whose next step it
  refuses in flight forever and then hangs or crashes on exit; with nothing loaded it
  stops cleanly. After the process exits, the python backend's `/dev/shm` segments of
  this server (named with a prefix of its own) are removed if any are left.
- Once the core has stopped (its log's last word: no model live, nothing in flight), only
  the endpoints are left to close. Triton 2.51 closes its gRPC endpoint last, with
  `grpc::Server::Shutdown()` and no deadline, so a call its handlers never finished holds
  the exit for good: 5 of 174 stops with 8-16 gRPC clients sending through them here
  (under gdb: `main` in `grpc::Server::ShutdownInternal`, every model unloaded).
  `stop()` gives the endpoints `endpoint_grace` s, then ends the process and says so
  (`endpoint_hang`). From 25.05 on (server PR #7969) Triton bounds that wait itself.
"""

from __future__ import annotations

import itertools
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from .. import threads
from ..errors import ServerError
from ..stub.admission import METRICS_URL_ENV
from . import keyshim
from .admin import ADMIN_KEY_ENV, admin_key_from_environment, restricted_api_args
from .control import DrainReport, ModelControl
from .installation import (
    CPU_CUDA_LINES,
    CPU_CUDA_NOTE,
    TRITON_HOME_ENV,
    cuda_driver,
    native_backends,
    prepare_backends,
    server_environment,
    stub_numpy_problem,
    triton_home,
)
from .processes import connections_closed, exit_words, free_ports, kill_process_group
from .processes import free_port as free_port  # where tests and benchmarks have long found it

#: What Triton's core logs as the last step of its stop: no model left, no request in flight
#: (server.cc, `TRITONSERVER_ServerStop`); after it only the endpoints close.
CORE_STOPPED = b"Found 0 live models and 0 in-flight non-inference requests"


#: The period of tritonserver's CPU and GPU gauges, in ms (its default: 2,000).
METRICS_INTERVAL_MS = 200

#: How long `stop` waits for the HTTP connections to tritonserver to close before SIGTERM.
CONNECTIONS_CLOSE_S = 0.5

_instances = itertools.count()


#: Characters the python backend's stub command line cannot carry in a path (python_backend
#: r24.10 starts each stub with `bash -c " exec <stub> <repository>/<model>/1/model.py ..."`
#: unquoted: a space splits the path, `(` is a syntax error; either way no stub starts and
#: the server never becomes ready, with only a bash error in its log).
_SHELL_UNSAFE = re.compile(r"[^A-Za-z0-9_./+@%:,=-]")

#: How long `stop` waits for the readiness endpoint before it drains: under saturating load
#: a healthy server can take seconds to answer; one that is not ready answers at once.
READY_BEFORE_DRAIN_S = 10.0

#: Default `TritonServer.shm_region_limit`: 64 MiB. The largest legitimate batch a Python
#: model receives is 256 texts of MAX_TEXT_BYTES (100,000): 25.6 MB, plus its outputs.
DEFAULT_SHM_REGION_LIMIT = 64 << 20


@dataclass
class TritonServer(ModelControl):
    """One tritonserver process on 127.0.0.1; a context manager that stops it by PID."""

    repository: str
    http_port: int = 0
    grpc_port: int = 0
    metrics_port: int = 0
    #: An installed tritonserver (`<home>/bin/tritonserver`, `<home>/backends`, `<home>/lib`:
    #: an NGC image's /opt/tritonserver); default $READABILITY_TRITON_HOME, else the one in
    #: the nvidia-pytriton wheel.
    home: str = ""
    backend_dir: str = ""  # default: <home>/backends, or (the wheel) a folder under ~/.cache/readability-triton
    #: With the wheel's tritonserver: Triton's PyTorch and ONNX Runtime backends built here
    #: (`make native-backends`), loaded beside the python backend; default `native_backends()`.
    native: str | None = None
    log_file: str | None = None  # None: forward the server's log to our stderr
    extra_args: list[str] = field(default_factory=list)
    exit_timeout: int = 10  # seconds tritonserver waits for in-flight work after SIGTERM
    drain_timeout: float = 30.0  # seconds stop() waits for in-flight requests before SIGTERM
    #: Seconds stop() lets the endpoints close once the core has stopped (module docstring);
    #: they normally close within a second of it.
    endpoint_grace: float = 5.0
    process: subprocess.Popen | None = None  # set by start()
    shm_prefix: str = ""  # prefix of the python backend's /dev/shm segments (unique per server)
    last_stop: DrainReport = field(default_factory=lambda: DrainReport())  # what the last stop() did
    #: Set by the log's reader when the core has logged `CORE_STOPPED` (one per start).
    _core_stopped: threading.Event | None = field(default=None, init=False, repr=False, compare=False)
    admin_key: str = ""  # key of the restricted APIs (default: $READABILITY_TRITON_ADMIN_KEY or random)
    #: The largest file tritonserver and its stubs may write, in bytes (0: no limit). It caps
    #: each python-backend /dev/shm region, which grows to hold a request's inputs and never
    #: shrinks (python_backend r24.10 has no setting for it): a larger request fails with
    #: "Failed to increase the shared memory pool size" instead of growing a region for good.
    shm_region_limit: int = DEFAULT_SHM_REGION_LIMIT
    #: Triton's local response cache, in bytes (0: none), for the models whose config enables it.
    cache_size: int = 0
    address: str = "127.0.0.1"  # where the HTTP and gRPC endpoints listen (serve's front door: 127.0.0.1)
    metrics_address: str = ""  # where the metrics endpoint listens (default: `address`; "0.0.0.0" in a container)

    def __post_init__(self):
        given = tuple(p for p in (self.http_port, self.grpc_port, self.metrics_port) if p)
        picked = iter(free_ports(3 - len(given), given))
        self.http_port = self.http_port or next(picked)
        self.grpc_port = self.grpc_port or next(picked)
        self.metrics_port = self.metrics_port or next(picked)
        self.home = self.home or os.environ.get(TRITON_HOME_ENV, "")
        if self.native is None and not self.home:
            self.native = native_backends()
        if not self.backend_dir and self.home:
            self.backend_dir = os.path.join(self.home, "backends")
        elif not self.backend_dir:
            self.backend_dir = os.path.join(
                os.path.expanduser("~"),
                ".cache",
                "readability-triton",
                f"backends-py{sys.version_info.major}{sys.version_info.minor}" + ("-native" if self.native else ""),
            )
        self.shm_prefix = self.shm_prefix or f"readability-triton-{os.getpid()}-{next(_instances)}-"
        self.admin_key = self.admin_key or admin_key_from_environment()
        self.metrics_address = self.metrics_address or self.address

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        host = self.metrics_address if self.metrics_address not in ("", "0.0.0.0", "::") else "127.0.0.1"
        return f"http://{host}:{self.metrics_port}/metrics"

    def command(self) -> list[str]:
        return [
            os.path.join(self.home or triton_home(), "bin", "tritonserver"),
            "--model-repository",
            os.path.abspath(self.repository),
            "--backend-directory",
            os.path.abspath(self.backend_dir),
            "--http-address",
            self.address,
            "--http-port",
            str(self.http_port),
            "--grpc-address",
            self.address,
            "--grpc-port",
            str(self.grpc_port),
            "--metrics-address",
            self.metrics_address,
            "--metrics-port",
            str(self.metrics_port),
            # GPU metrics from an installed tritonserver (an NGC image on a GPU); the wheel's
            # on these CPU machines has none to give
            "--allow-gpu-metrics",
            "true" if self.home else "false",
            # the p50/p90/p99 latency summaries the Grafana dashboard and the HPA read
            "--metrics-config=summary_latencies=true",
            # the CPU and GPU gauges' period: tritonserver's exit waits out half of one
            # (metrics.cc sleeps a half period between polls), up to 1 s with the default 2 s
            "--metrics-interval-ms",
            str(METRICS_INTERVAL_MS),
            "--disable-auto-complete-config",
            "--model-control-mode",
            "explicit",
            "--load-model",
            "*",
            "--backend-config",
            f"python,shm-region-prefix-name={self.shm_prefix}",
            "--exit-timeout-secs",
            str(self.exit_timeout),
            # without a CUDA driver a pinned pool cannot be made: do not try (nor warn)
            *([] if cuda_driver() else ["--pinned-memory-pool-byte-size", "0"]),
            *self.cache_args(),
            *self.extra_args,
        ]

    def secret_args(self) -> list[str]:
        """The flags that close the restricted APIs with the admin key: handed to
        tritonserver through `keyshim`, never on its command line."""
        return restricted_api_args(self.admin_key)

    def cache_args(self) -> list[str]:
        """The local response cache of `cache_size` bytes (the cache library in the wheel's
        caches/ or the installation's)."""
        if not self.cache_size:
            return []
        return [
            "--cache-config",
            f"local,size={self.cache_size}",
            "--cache-directory",
            os.path.join(self.home or triton_home(), "caches"),
        ]

    def check_paths(self) -> None:
        """ServerError where the repository is missing, or it or the backend folder has a
        path the python backend's stub command cannot carry."""
        if not os.path.isdir(self.repository):
            raise ServerError(f"{self.repository}: no such model repository")
        for what, path in (("model repository", self.repository), ("backend folder", self.backend_dir)):
            unsafe = sorted(set(_SHELL_UNSAFE.findall(os.path.abspath(path))))
            if unsafe:
                raise ServerError(
                    f"the {what} path {os.path.abspath(path)!r} holds {' '.join(map(repr, unsafe))}: the "
                    'python backend starts its stubs through a shell (`bash -c "exec <stub> <model.py> '
                    '..."`), where such a path breaks the command and tritonserver then waits for '
                    "ever; move or link it to a path of letters, digits and -_./+@%:,="
                )

    def start(self, timeout: float = 180.0) -> "TritonServer":
        self.check_paths()
        problem = None if self.home else stub_numpy_problem()  # an image's stub: `releases check`
        if problem:
            raise ServerError(problem)
        native = None if self.home else self.native
        if not self.home:
            prepare_backends(self.backend_dir, native)
        env = server_environment(home=self.home)
        env.pop(ADMIN_KEY_ENV, None)  # tritonserver gets the key through the shim; its stubs need none
        env, secret_fd = keyshim.launch(self.secret_args(), env)
        env[METRICS_URL_ENV] = self.metrics_url  # the first step's load shedding reads the pending requests there
        if threads.enabled():
            env.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads sleep (readability_triton.threads)
        limit = self.shm_region_limit

        def limits() -> None:  # in the child, before exec: see `shm_region_limit`
            if limit:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        # The log goes through this process (a pipe), so that the file-size limit above,
        # which holds for every file tritonserver writes, does not cut the log short.
        try:
            self.process = subprocess.Popen(
                self.command(),
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=limits,  # noqa: PLW1509 - setrlimit and a signal disposition only
                pass_fds=(secret_fd,),
            )
        finally:
            os.close(secret_fd)
        self._core_stopped = threading.Event()
        threading.Thread(target=self._forward_log, args=(self.process, self._core_stopped), daemon=True).start()
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

    def _forward_log(self, process: subprocess.Popen, core_stopped: threading.Event) -> None:
        """Copy the server's output, line by line, to `log_file` (else to our stderr), and
        set `core_stopped` when the core says it has stopped (`CORE_STOPPED`)."""
        stream = process.stdout
        assert stream is not None  # started with stdout=PIPE
        out = open(self.log_file, "ab", buffering=0) if self.log_file else None
        explain = not cuda_driver()  # its CUDA errors, once (`CPU_CUDA_LINES`)
        try:
            for line in iter(stream.readline, b""):
                if CORE_STOPPED in line:
                    core_stopped.set()
                if explain and any(sign in line for sign in CPU_CUDA_LINES):
                    line += CPU_CUDA_NOTE.encode()
                    explain = False
                if out is not None:
                    out.write(line)
                else:
                    sys.stderr.write(line.decode("utf-8", "replace"))
        finally:
            stream.close()
            if out is not None:
                out.close()

    def log_tail(self, lines: int = 40) -> str:
        """The last `lines` lines of the server's log file ('' without one)."""
        if not self.log_file or not os.path.isfile(self.log_file):
            return ""
        with open(self.log_file, encoding="utf-8", errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])

    def live(self, timeout: float = 2.0) -> bool:
        """Whether tritonserver's HTTP endpoint answers /v2/health/live within `timeout` s
        (it does under saturating load: the endpoint's threads do not wait for inference)."""
        try:
            with urllib.request.urlopen(f"http://{self.http_url}/v2/health/live", timeout=timeout) as reply:
                return reply.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def ready(self, timeout: float = 2.0) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.http_url}/v2/health/ready", timeout=timeout) as reply:
                return reply.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.running.poll() is not None:
                hint = f" (its log, {self.log_file}, ends:\n{self.log_tail(15)})" if self.log_file else ""
                raise ServerError(
                    f"tritonserver exited with status {self.running.returncode} before it was "
                    f"ready; a model failed to load or a port is taken{hint}"
                )
            if self.ready():
                return
            time.sleep(0.25)
        self.stop(drain=False)
        raise ServerError(f"tritonserver was not ready after {timeout:.0f} s")

    def leftover_shm(self) -> list[str]:
        """This server's python-backend segments still in /dev/shm."""
        try:
            return sorted(n for n in os.listdir("/dev/shm") if n.startswith(self.shm_prefix))
        except OSError:
            return []

    def stop(
        self,
        timeout: float | None = None,
        drain: bool = True,
        drain_timeout: float | None = None,
        abandon=(),
        kill: bool = False,
    ) -> int | None:
        """Drain (see `drain`; at most `drain_timeout` s, default the server's), SIGTERM the
        server (by PID), SIGKILL it if it has not exited `timeout` s later (default: its exit
        timeout + 10 s), end its whole process group (the python-backend stubs: a stub of a
        server that died is otherwise left behind, adopted by init, holding its memory and
        segment) and remove this server's /dev/shm segments. Also when the server has died on
        its own. `kill`: SIGKILL at once, with no drain (a frozen server acts on nothing else).
        Returns the exit status; `last_stop` says what happened."""
        process = self.process
        if process is None:
            return None
        report: DrainReport = {"drained": False}
        started = time.monotonic()
        if process.poll() is None:
            # Under saturating load readiness can take seconds: wait as for a busy server.
            if drain and not kill and self.ready(timeout=READY_BEFORE_DRAIN_S):
                report = self.drain(drain_timeout, abandon=abandon)
            elif drain and not kill:
                report["error"] = (
                    f"it did not answer /v2/health/ready within {READY_BEFORE_DRAIN_S:g} s, so it was "
                    "stopped without a drain"
                )
            if not report.get("drained") and process.poll() is not None:  # it died meanwhile (2.51 can: cancellations)
                report["error"] = f"it died during the stop, {exit_words(process.returncode)}"
            # Requests Triton lost (see `drain`) or a dead stub's model never unload: tritonserver would wait its
            # whole exit timeout for them, then exit 1. Drained, nothing is left to lose: end it at once.
            if not (report.get("leaked") or abandon or kill):
                connections_closed(self.http_port, CONNECTIONS_CLOSE_S)
            process.send_signal(signal.SIGKILL if report.get("leaked") or abandon or kill else signal.SIGTERM)
            code, hung = self._wait_exit(timeout if timeout is not None else self.exit_timeout + 10)
            report["killed"] = hung is not None
            if hung == "endpoints":
                report["endpoint_hang"] = True
        else:
            code = process.returncode
            report.update(
                DrainReport(killed=False, died=True, error=f"it had already exited on its own, {exit_words(code)}")
            )
        report["orphans"] = kill_process_group(process.pid)
        left = self.leftover_shm()
        for name in left:
            try:
                os.remove(os.path.join("/dev/shm", name))
            except OSError:
                pass
        report.update(
            DrainReport(exit_status=code, exit_seconds=round(time.monotonic() - started, 2), removed_shm=left)
        )
        self.last_stop = report
        return code

    def _wait_exit(self, limit: float) -> tuple[int, str | None]:
        """Wait for the signalled process to exit: its status, and None, or SIGKILL it and
        say why: "endpoints" (the core had stopped `endpoint_grace` s before, and only an
        endpoint was left to close) or "timeout" (`limit` s passed)."""
        process = self.running
        deadline = time.monotonic() + limit
        core_stopped = self._core_stopped
        since: float | None = None
        while True:
            try:
                return process.wait(0.05), None
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if since is None and core_stopped is not None and core_stopped.is_set():
                since = now
            hung = "endpoints" if since is not None and now >= since + self.endpoint_grace else None
            if hung is None and now >= deadline:
                hung = "timeout"
            if hung is not None:
                process.kill()
                return process.wait(), hung

    def __enter__(self) -> "TritonServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
