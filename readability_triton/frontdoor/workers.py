"""`DoorWorkers`: the front door on more than one core. One door (`front.FrontDoor`) is one
asyncio loop under one GIL: in front of a trivial pipeline it passed at most about 4,100 HTTP
or 1,500 gRPC requests a second (docs/performance.md). serve with `--door-workers N` runs N
of them, each a process of its own (`python -m readability_triton.frontdoor.workers`),
listening on the same ports (SO_REUSEPORT).

- **Who meets which gate.** The kernel hands each new connection to the worker that its
  client's network maps to (`steering`), so a network's clients all meet one gate and its
  fair shares and order hold among them as with one door. Each worker keeps its share of
  what one door would: the requests inside tritonserver (`gate.MAX_INSIDE_REQUESTS` / N),
  the connections (`--max-connections` / N), and, until it has measured its own, the
  warm-up's rate / N. Its gate then measures the rate its own requests are answered at, so
  a worker whose networks are the only ones sending learns the whole pipeline's rate, and
  its stated wait holds as one door's does.
- **Control.** `DoorWorkers` answers what serve asks of a door (`start`, `seed`, `pause`,
  `resume`, `dismiss`, `leave`, `drain`, `status`, `release_upstream`, `stop`,
  `remove_uploads`) by asking every worker over a pipe, and tells serve's supervisor when
  any worker meets a dead stub (`on_dead_stub`); a hold or a repair holds them all.
- **A worker that dies** is started again (its networks' connections go to the others
  meanwhile); the workers ignore SIGINT and SIGTERM (serve's drain stops them) and stop
  when serve's end of the pipe closes.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any, Callable

from .. import contracts as C
from .. import threads
from ..errors import ServerError
from .door import FrontDrain
from .front import FrontDoor

log = logging.getLogger(__name__)

#: Seconds a worker has to start listening.
START_TIMEOUT = 60.0
#: Keys of a worker's snapshot that are the same in every worker (not summed).
_SHARED_KEYS = frozenset({"stated_wait_s", "admitted_wait_s", "byte_work"})


def cpu_quota(path: str = "/sys/fs/cgroup/cpu.max") -> int | None:
    """The CPUs this process's cgroup may use (cgroup v2 `cpu.max`, rounded up: a
    container's CPU limit), or None where none is set."""
    try:
        with open(path, encoding="ascii") as handle:
            quota, period = handle.read().split()[:2]
        return None if quota == "max" else max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        return None


def default_workers(cpus: int | None = None) -> int:
    """Door workers for a machine of `cpus` cores (default: those this process may run on,
    within its container's CPU limit): one per four (the pipeline keeps the rest), at least
    one, at most eight."""
    if cpus is None:
        cpus = min(threads.cores(), cpu_quota() or threads.cores())
    return max(1, min(8, cpus // 4))


def merge_snapshots(snapshots: list[dict[str, Any]]) -> dict[str, Any]:
    """One snapshot for the workers' (`Door.snapshot`): counts and gauges summed, latency
    percentiles the worst worker's, `paused` if any is, and `workers` how many answered."""
    merged: dict[str, Any] = {}
    for snapshot in snapshots:
        for key, value in snapshot.items():
            if key not in merged:
                merged[key] = dict(value) if isinstance(value, dict) else value
            elif key in _SHARED_KEYS:
                continue
            elif isinstance(value, bool):
                merged[key] = merged[key] or value
            elif isinstance(value, (int, float)):
                merged[key] += value
            elif isinstance(value, dict):
                worst = key == "answer_seconds"
                for name, number in value.items():
                    now = merged[key].get(name, 0)
                    merged[key][name] = max(now, number) if worst else now + number
    merged["workers"] = len(snapshots)
    return merged


class _Worker:
    """One worker process and its end of the pipe."""

    def __init__(self, index: int, config: dict[str, Any], on_event: Callable[["_Worker", tuple], None]):
        self.index = index
        ours, theirs = socket.socketpair()
        self.process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.conn = Connection(ours.detach())
        self._send_lock = threading.Lock()
        self._ids = itertools.count()
        self._waiting: dict[int, concurrent.futures.Future] = {}
        self._on_event = on_event
        self.conn.send(config)
        self.started: concurrent.futures.Future = concurrent.futures.Future()
        self._reader = threading.Thread(target=self._read, daemon=True, name=f"door-worker-{index}")
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                break
            kind = message[0]
            if kind == "reply":
                _, ident, ok, value = message
                future = self._waiting.pop(ident, None)
                if future is not None:
                    if ok:
                        future.set_result(value)
                    else:
                        future.set_exception(ServerError(f"door worker {self.index}: {value}"))
            elif kind == "started":
                self.started.set_result(message[1])
            elif kind == "failed":
                self.started.set_exception(ServerError(message[1]))
            else:
                self._on_event(self, message)
        gone = ServerError(f"door worker {self.index} exited ({self.process.poll()})")
        if not self.started.done():
            self.started.set_exception(gone)
        for future in list(self._waiting.values()):
            if not future.done():
                future.set_exception(gone)
        self._on_event(self, ("exited",))

    def ask(self, method: str, *args: Any) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        ident = next(self._ids)
        self._waiting[ident] = future
        try:
            with self._send_lock:
                self.conn.send((ident, method, args))
        except OSError as err:
            self._waiting.pop(ident, None)
            future.set_exception(ServerError(f"door worker {self.index}: {err}"))
        return future

    def close(self, timeout: float) -> None:
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        with self._send_lock:  # no send meanwhile to a descriptor number already reused
            self.conn.close()


class DoorWorkers:
    """`workers` doors in processes of their own, on the same ports: see the module doc. The
    arguments are `door.Door`'s."""

    def __init__(
        self,
        upstream_http: str,
        upstream_grpc: str,
        *,
        workers: int,
        on_dead_stub: Callable[[], None] | None = None,
        **options: Any,
    ):
        self.count = workers
        self.on_dead_stub = on_dead_stub
        self.options = {"upstream_http": upstream_http, "upstream_grpc": upstream_grpc, **options}
        self.max_text_bytes: int = options.get("max_text_bytes", C.DEFAULT_MAX_TEXT_BYTES)
        self.leaving = ""
        self.restarts = 0  # workers started again after they exited
        self._seed: tuple[float, float | None] | None = None
        self._workers: list[_Worker] = []
        self._stopping = False
        self._paused = False
        self._left: list[str] = []
        self._lock = threading.Lock()

    # -- processes --------------------------------------------------------------------
    def _config(self, index: int) -> dict[str, Any]:
        return {
            "index": index,
            "door": {**self.options, "workers": self.count},
            "supervised": self.on_dead_stub is not None,
            "seed": self._seed,
            "leaving": self.leaving,
            "paused": self._paused,  # a worker started again during a repair holds too
        }

    def _spawn(self, index: int) -> _Worker:
        worker = _Worker(index, self._config(index), self._event)
        try:
            worker.started.result(START_TIMEOUT)
        except (ServerError, concurrent.futures.TimeoutError) as err:
            worker.process.kill()
            worker.close(5)
            raise ServerError(f"door worker {index} did not start: {err or 'timed out'}") from None
        return worker

    def _event(self, worker: _Worker, message: tuple) -> None:
        if message[0] == "dead_stub" and self.on_dead_stub is not None:
            # not in this reader: what the supervisor then asks of the workers is read here
            threading.Thread(target=self.on_dead_stub, daemon=True).start()
        elif message[0] == "exited" and worker.started.done() and not worker.started.exception():
            with self._lock:
                if self._stopping or worker not in self._workers:
                    return
                log.warning(
                    f"door worker {worker.index} (pid {worker.process.pid}) exited ({worker.process.poll()}): "
                    "starting it again; its client networks reach the other workers meanwhile"
                )
            threading.Thread(target=self._replace, args=(worker,), daemon=True).start()

    def _replace(self, worker: _Worker) -> None:
        """Start a worker in place of `worker`, which exited: tried until it starts (with a
        growing pause) or serve stops; meanwhile the others serve its networks."""
        worker.close(5)
        pause = 1.0
        while True:
            try:
                fresh = self._spawn(worker.index)
                break
            except ServerError as err:
                with self._lock:
                    if self._stopping:
                        self._workers.remove(worker)
                        return
                log.error(f"{err}: trying again in {pause:g} s; the other door workers serve on")
                time.sleep(pause)
                pause = min(2 * pause, 30.0)
        with self._lock:
            stopping = self._stopping
            if not stopping:
                self._workers[self._workers.index(worker)] = fresh
                self.restarts += 1
        if stopping:  # serve's stop came while it started: stopped here, as stop() stops the rest
            try:
                self._left.extend(fresh.ask("stop").result(40))
            except (ServerError, concurrent.futures.TimeoutError):
                pass
            fresh.close(10)
            return
        # what serve told the workers while this one started (its config was taken before)
        if self._paused:
            fresh.ask("pause")
        else:
            fresh.ask("resume")
        if self.leaving:
            fresh.ask("leave", self.leaving)

    def pids(self) -> list[int]:
        """The workers' process IDs (serve's supervisor leaves them to `DoorWorkers`)."""
        with self._lock:
            return [worker.process.pid for worker in self._workers]

    # -- what serve asks of a door ------------------------------------------------------
    def seed(self, rate: float, byte_work: float | None = None) -> None:
        self._seed = (rate, byte_work)

    def start(self, timeout: float = START_TIMEOUT) -> "DoorWorkers":
        try:
            for index in range(self.count):
                self._workers.append(self._spawn(index))
        except ServerError:
            self.stop()
            raise
        return self

    def _live(self) -> list[_Worker]:
        """The workers running now (one that exited is being started again)."""
        with self._lock:
            return [worker for worker in self._workers if worker.process.poll() is None]

    def _all(self, method: str, *args: Any, timeout: float = 10.0) -> list[Any]:
        """Each running worker's answer to `method` (those that gave none are logged)."""
        workers = self._live()
        futures = [worker.ask(method, *args) for worker in workers]
        answers = []
        for worker, future in zip(workers, futures):
            try:
                answers.append(future.result(timeout))
            except (ServerError, concurrent.futures.TimeoutError) as err:
                log.warning(f"door worker {worker.index}: {method}: {err or 'no answer in time'}")
        return answers

    def pause(self) -> None:
        self._paused = True
        self._all("pause")

    def resume(self) -> None:
        self._paused = False
        self._all("resume")

    def dismiss(self) -> None:
        self._all("dismiss")

    def leave(self, reason: str = "shutting down") -> None:
        """Not ready from now on. Called from a signal handler, which may have interrupted
        this thread inside a send: the workers are told from a thread of its own."""
        self.leaving = reason

        def tell() -> None:
            for worker in self._live():
                worker.ask("leave", reason)

        threading.Thread(target=tell, daemon=True, name="door-workers-leave").start()

    def status(self) -> dict[str, Any]:
        return {**merge_snapshots(self._all("status", timeout=2.0)), "worker_restarts": self.restarts}

    def drain(self, timeout: float, reason: str = "shutting down") -> FrontDrain:
        self.leaving = self.leaving or reason
        asked = len(self._live())
        answers = self._all("drain", timeout, reason, timeout=timeout + 10)
        return {
            "drained": len(answers) >= asked and all(a["drained"] for a in answers),
            "waiting": sum(a["waiting"] for a in answers),
            "inside": sum(a["inside"] for a in answers),
            "seconds": max((a["seconds"] for a in answers), default=0.0),
        }

    def release_upstream(self, timeout: float = 10.0) -> None:
        self._all("release_upstream", timeout=timeout + 2)

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            workers = list(self._workers)
        for left in self._all("stop", timeout=40):
            self._left.extend(left)
        for worker in workers:
            worker.close(10)
        with self._lock:
            self._workers = []  # a second stop has nothing to stop

    def remove_uploads(self) -> list[str]:
        """The folders of uploaded models the workers removed as they stopped."""
        left, self._left = self._left, []
        return left


# -- the worker's side ------------------------------------------------------------------


def _serve(fd: int) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches serve's whole group: serve stops us
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn = Connection(fd)
    config = conn.recv()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"readability-triton serve: door worker {config['index']}: %(message)s"))
    root = logging.getLogger(__package__.rpartition(".")[0])
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False
    lock = threading.Lock()

    def send(message: tuple) -> None:
        with lock:
            conn.send(message)

    door = FrontDoor(**config["door"], on_dead_stub=(lambda: send(("dead_stub",))) if config["supervised"] else None)
    if config["seed"] is not None:
        door.seed(*config["seed"])
    door.leaving = config["leaving"]
    try:
        door.start()
    except ServerError as err:
        send(("failed", str(err)))
        return 1
    if config["paused"]:
        door.pause()
    send(("started", os.getpid()))

    def stop() -> list[str]:
        door.stop()
        return door.remove_uploads()

    calls: dict[str, Callable[..., Any]] = {
        "pause": door.pause,
        "resume": door.resume,
        "dismiss": door.dismiss,
        "leave": door.leave,
        "status": door.status,
        "drain": door.drain,
        "release_upstream": door.release_upstream,
        "stop": stop,
    }

    def answer(ident: int, method: str, args: tuple) -> None:
        try:
            value, ok = calls[method](*args), True
        except Exception as exc:  # noqa: BLE001 - told to serve, which logs it
            value, ok = f"{type(exc).__name__}: {exc}", False
        try:
            send(("reply", ident, ok, value))
        except OSError:
            pass

    while True:
        try:
            ident, method, args = conn.recv()
        except (EOFError, OSError):  # serve is gone: close the ports
            door.drain(0)
            stop()
            return 0
        if method == "stop":
            answer(ident, method, args)
            return 0
        threading.Thread(target=answer, args=(ident, method, args), daemon=True).start()


if __name__ == "__main__":
    sys.exit(_serve(int(sys.argv[1])))
