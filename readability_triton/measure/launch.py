"""`readability-triton serve` in a subprocess, for the tests and the benchmarks that measure
it: `launch_serve` picks free ports on 127.0.0.1 (HTTP, gRPC, metrics and the health port),
hands serve the admin key (from the environment or from a file only its user can read),
writes its output to a log, waits until it is ready, and on the way out stops it by its PID:
SIGTERM, then, if it has not exited, SIGKILL of its process group and of every process it
had started.

    with launch_serve(repository, folder, args=["--health-interval", "1"]) as serve:
        score(serve.http, ...)
        assert serve.stop() == 0  # SIGTERM: drain, stop; its exit status
    said = serve.said()
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

from ..server.admin import ADMIN_KEY_ENV
from ..server.tritonserver import free_ports
from .honest import Target
from .load import process_tree

#: serve's ports, in the order `free_ports` picks them.
PORTS = ("http", "grpc", "metrics", "health")
HOST = "127.0.0.1"


@dataclass
class Served(Target):
    """A `serve` that `launch_serve` started: the `Target` of its front door and health port,
    its ports by name, its folder, its own log (its stdout and stderr) and tritonserver's."""

    ports: dict[str, int] = field(default_factory=dict)
    folder: str = ""
    log: str = ""  # serve's stdout and stderr
    server_log: str = ""  # tritonserver's log (serve --log-file)
    #: The processes serve had started once it was ready (tritonserver, the stubs), each with
    #: its start time: what `reap` ends if serve itself is gone and left them.
    started: list[tuple[int, str]] = field(default_factory=list)

    @property
    def running(self) -> subprocess.Popen:
        assert self.process is not None, "launch_serve always sets the process"
        return self.process

    @property
    def pid(self) -> int:
        return self.running.pid

    @property
    def returncode(self) -> int | None:
        """serve's exit status; None while it runs."""
        return self.running.poll()

    @property
    def http_url(self) -> str:
        return self.http

    @property
    def grpc_url(self) -> str:
        return self.grpc

    @property
    def metrics(self) -> str:
        return f"{HOST}:{self.ports['metrics']}"

    def said(self) -> str:
        """What serve wrote so far (its log)."""
        try:
            with open(self.log, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return ""

    def stop(self, timeout: float = 90.0) -> int:
        """SIGTERM to serve (drain, stop) and its exit status; after `timeout` s, SIGKILL of
        its process group and of every process under it (tritonserver and the stubs have
        sessions of their own). A serve that has exited already: its status."""
        process = self.running
        if process.poll() is not None:
            return process.returncode
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return self.kill()

    def kill(self) -> int:
        """SIGKILL of serve's process group (its own session: serve and what it started in
        it) and of each process under serve, by PID; its exit status."""
        process = self.running
        tree = process_tree(process.pid) if process.poll() is None else []
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        for pid in tree[1:]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return process.wait()

    def wait_ready(self, timeout: float = 300.0) -> None:
        """`Target.wait_ready`, its error with the end of serve's log."""
        try:
            super().wait_ready(timeout)
        except RuntimeError as err:
            raise RuntimeError(f"{err}; the end of its log ({self.log}):\n{self.said()[-3000:]}") from None

    def remember_children(self) -> None:
        """Note the processes serve has started (`started`)."""
        self.started = [(pid, start_time(pid)) for pid in process_tree(self.pid)[1:]]

    def reap(self) -> list[int]:
        """SIGKILL, by PID, of each process serve had started that still runs (the same
        process: its start time unchanged) once serve has exited: a serve killed, or dead,
        leaves tritonserver and the stubs in sessions of their own. The PIDs it ended."""
        if self.returncode is None:
            return []
        ended = []
        for pid, started in self.started:
            if started and start_time(pid) == started:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    ended.append(pid)
        return ended


def start_time(pid: int) -> str:
    """A process's start time (/proc/PID/stat, field 22), "" where it is gone: a PID and its
    start time name one process, even after the PID is reused."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def serve_command(repository: str, ports: Mapping[str, int], server_log: str, args: Sequence[str] = ()) -> list[str]:
    """The command line of `readability-triton serve` on `ports` (this Python, this checkout)."""
    return [
        sys.executable,
        "-m",
        "readability_triton.cli",
        "serve",
        "--repository",
        repository,
        "--address",
        HOST,
        *[f"--{name}-port={port}" for name, port in ports.items()],
        "--log-file",
        server_log,
        *args,
    ]


def _environment(folder: str, key: str, key_file: bool, env: Mapping[str, str] | None) -> dict[str, str]:
    """This process's environment with no admin key of its own, the key given (or the path
    of a file that holds it, readable by this user only), and `env` over it."""
    out = {k: v for k, v in os.environ.items() if not k.startswith(ADMIN_KEY_ENV)}
    if key_file:
        path = os.path.join(folder, "admin-key")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as handle:
            handle.write(key + "\n")  # as a Kubernetes Secret mounted as a file holds it
        out[ADMIN_KEY_ENV + "_FILE"] = path
    else:
        out[ADMIN_KEY_ENV] = key
    out.update(env or {})
    return out


@contextlib.contextmanager
def launch_serve(
    repository: str,
    folder: str | os.PathLike[str],
    *,
    args: Sequence[str] = (),
    key: str | None = None,
    key_file: bool = False,
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 300.0,
    stop_timeout: float = 90.0,
) -> Iterator[Served]:
    """`readability-triton serve` of `repository` on free ports of 127.0.0.1, ready.

    `folder` holds its log (`serve.log`: its stdout and stderr, appended), tritonserver's
    (`tritonserver.log`) and, with `key_file`, the admin key's file. `args`: serve's other
    options (e.g. `--health-interval 1`). `key`: the admin key (default a new random one),
    given in $READABILITY_TRITON_ADMIN_KEY, or with `key_file` in a file named by
    $READABILITY_TRITON_ADMIN_KEY_FILE; `env`: more environment. Not ready within
    `ready_timeout` s, or exited: RuntimeError with the end of its log. On the way out (a
    test may have stopped it, killed it or signalled it itself through `.process`), it is
    stopped as `Served.stop(stop_timeout)` does."""
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    key = key or secrets.token_urlsafe(24)
    ports = dict(zip(PORTS, free_ports(len(PORTS))))
    log = os.path.join(folder, "serve.log")
    server_log = os.path.join(folder, "tritonserver.log")
    with open(log, "ab") as output:
        process = subprocess.Popen(
            serve_command(repository, ports, server_log, args),
            env=_environment(folder, key, key_file, env),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: what `kill` ends
        )
    served = Served(
        f"{HOST}:{ports['http']}",
        f"{HOST}:{ports['grpc']}",
        f"{HOST}:{ports['health']}",
        key,
        process,
        ports=ports,
        folder=folder,
        log=log,
        server_log=server_log,
    )
    try:
        served.wait_ready(ready_timeout)
        served.remember_children()
    except BaseException:
        served.stop(min(stop_timeout, 30.0))
        raise
    try:
        yield served
    finally:
        served.stop(stop_timeout)
        served.reap()
