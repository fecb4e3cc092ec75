"""`readability-triton serve`, as a library: a supervised tritonserver on 127.0.0.1 behind
the front door, with its probes, from start to a drained stop.

What runs: tritonserver's HTTP and gRPC endpoints on free ports of 127.0.0.1, with the
restricted APIs closed by the admin key (handed over through `keyshim`, never on a command
line); the front door (`frontdoor.front.FrontDoor`) on the published HTTP and gRPC ports, the
only way in for clients; tritonserver's metrics on the published metrics port; the
supervisor (`health.Supervisor`), which holds the front door's queue while it repairs the
server; and the probes (`probes`) on the health port. Before the ports open, the pipeline
answers 81 generated texts (`warmup`): the first clients do not pay a cold start, and the
front door starts from a measured rate.

On SIGTERM or Ctrl-C: readiness turns false (the probes, and server readiness on the
serving ports) while requests are still taken for the drain grace (load balancers take a
moment to stop sending here; a second signal ends it); then the front door refuses new
requests and lets every accepted one finish (at most the drain timeout), then tritonserver,
with nothing in flight, is unloaded and stopped, and what it left behind is removed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

from .. import contracts as C
from ..errors import ReadabilityError, ServerError
from ..frontdoor.clients import V4_PREFIX, V6_PREFIX
from ..frontdoor.connections import DEFAULT_MAX_CONNECTIONS, descriptor_budget
from ..frontdoor.door import FrontDrain
from ..frontdoor.front import FrontDoor
from ..frontdoor.wire import DEFAULT_MAX_REQUEST_BYTES
from ..frontdoor.workers import DoorWorkers, default_workers
from ..repository.canary import Canary
from ..repository.configs import max_text_bytes, present_models
from .admin import ADMIN_HEADER, ADMIN_KEY_ENV
from .backends import check_servable, writable_forest_view
from .health import Supervisor
from .probes import health_endpoint
from .processes import become_subreaper
from .tritonserver import TritonServer
from .warmup import warm_up

log = logging.getLogger(__name__)


@dataclass
class ServeOptions:
    repository: str
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    address: str = "127.0.0.1"
    tritonserver: str = ""  # an installed tritonserver's home ('' : $READABILITY_TRITON_HOME or the wheel's)
    log_file: str | None = None
    timeout: float = 300.0  # seconds to wait for readiness
    health_interval: float = 5.0  # 0: no supervision
    health_port: int | None = None
    stall_timeout: float = 120.0
    freeze_timeout: float = 20.0  # seconds tritonserver's /v2/health/live may stay silent (0: never repair for it)
    cache_size: int = 0
    drain_timeout: float = 30.0
    drain_grace: float = 2.0  # seconds from SIGTERM during which requests are still taken, not ready
    max_wait: float = 10.0  # the stated wait of an accepted request (the front door's bound)
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    client_header: str | None = None
    warm_up: bool = True  # send the pipeline generated texts before the ports open (`warmup`)
    network_prefix: tuple[int, int] = (V4_PREFIX, V6_PREFIX)  # a client group's network (`frontdoor.clients`)
    max_connections: int | None = None  # the HTTP port's (None: DEFAULT_MAX_CONNECTIONS, within the descriptors)
    allow_model_uploads: bool = False  # model loads with file: content (code the server runs)
    door_workers: int = 0  # front door processes on the same ports (0: `workers.default_workers()`)


def check_repository(repository: str) -> None:
    """A repository serve can serve: a folder with the ensemble's config (ServerError that
    says what to do otherwise, rather than a server that never becomes healthy)."""
    if not os.path.isdir(repository):
        raise ServerError(f"{repository}: no such model repository")
    if not os.path.isfile(os.path.join(repository, C.ENSEMBLE, "config.pbtxt")):
        found = sorted(n for n in os.listdir(repository) if not n.startswith("."))
        raise ServerError(
            f"{repository} holds no '{C.ENSEMBLE}' ensemble ({C.ENSEMBLE}/config.pbtxt"
            + (f"; it holds {', '.join(found[:8])}" if found else "; it is empty")
            + "): assemble one with `readability-triton assemble --profile portable --artifacts SET --out "
            f"{repository}`, or mount an assembled repository there"
        )


def servable_repository(server: TritonServer, repository: str, stack: contextlib.ExitStack) -> None:
    """Check that `server` has every backend `repository` needs (ServerError that says how
    to get one that is missing) and point it at the repository, or at a view of it that
    `stack` removes when FIL needs a writable copy of the forest (`writable_forest_view`)."""
    try:
        check_servable(server, repository)
    except ValueError as err:
        raise ServerError(str(err)) from None
    view = writable_forest_view(repository, tempfile.mkdtemp(prefix="readability-triton-view-"))
    if view is not None:
        server.repository = view
        stack.callback(shutil.rmtree, view, True)


@contextlib.contextmanager
def local_server(repository: str, log_file: str, cache_size: int = 0) -> Iterator[TritonServer]:
    """A tritonserver on `repository` for a command's own use (`demo`, `bench --repository`):
    on free ports of 127.0.0.1, checked for the backends it needs, started, and stopped on
    the way out (its `last_stop` says how)."""
    server = TritonServer(repository, log_file=log_file, cache_size=cache_size)
    with contextlib.ExitStack() as stack:
        servable_repository(server, repository, stack)
        log.info(
            f"starting tritonserver on 127.0.0.1 (http {server.http_port}, grpc {server.grpc_port}); log: {log_file}"
        )
        server.start(timeout=300)
        try:
            yield server
        finally:
            server.stop()


class Service:
    """One `serve`: `run()` blocks until SIGTERM/SIGINT (or, without supervision, until the
    server exits) and returns serve's exit status; every message goes to this module's
    logger (the CLI prints them)."""

    def __init__(self, options: ServeOptions):
        self.options = options
        self.server: TritonServer | None = None
        self.door: FrontDoor | DoorWorkers | None = None
        self.supervisor: Supervisor | None = None
        self.stopping: list[int] = []  # the signals received
        self.signalled = 0.0  # time.monotonic() of the first

    def status(self, front: bool = True) -> dict[str, Any]:
        """The supervisor's status, with `front` the front door's snapshot under "front";
        not ready while stopping. The snapshot is taken in the front door's loop, which a
        flood of connections keeps busy: /livez and /readyz answer without it."""
        assert self.supervisor is not None
        now = self.supervisor.status()
        if front:
            now["front"] = self.door.status() if self.door is not None else {}
        if self.stopping:
            now.update(ready=False, phase="stopping")
        return now

    def run(self) -> int:
        o = self.options
        check_repository(o.repository)
        become_subreaper()  # adopt what a dying tritonserver leaves (its stubs) to end and reap it
        server = self.server = TritonServer(
            o.repository,
            metrics_port=o.metrics_port,
            log_file=o.log_file,
            drain_timeout=o.drain_timeout,
            address="127.0.0.1",
            metrics_address=o.address,
            home=o.tritonserver,
            cache_size=o.cache_size,
        )
        stack = contextlib.ExitStack()
        servable_repository(server, o.repository, stack)
        canary = Canary.load(o.repository)
        supervisor = self.supervisor = Supervisor(
            server,
            interval=o.health_interval or 1.0,
            canary=canary,
            stall_timeout=o.stall_timeout,
            freeze_timeout=o.freeze_timeout,
        )
        options: dict[str, Any] = dict(
            address=o.address,
            http_port=o.http_port,
            grpc_port=o.grpc_port,
            max_wait=o.max_wait,
            max_request_bytes=o.max_request_bytes,
            client_header=o.client_header,
            on_dead_stub=supervisor.poke if o.health_interval > 0 else None,
            served=frozenset(present_models(o.repository)),
            max_text_bytes=max_text_bytes(o.repository),
            network_prefix=o.network_prefix,
            max_connections=self._connection_cap(),
            allow_model_uploads=o.allow_model_uploads,
        )
        workers = o.door_workers or default_workers()
        door = self.door = (
            FrontDoor(server.http_url, server.grpc_url, **options)
            if workers == 1
            else DoorWorkers(server.http_url, server.grpc_url, workers=workers, **options)
        )
        supervisor.hold, supervisor.release, supervisor.dismiss = door.pause, door.resume, door.dismiss
        if isinstance(door, DoorWorkers):
            supervisor.own_children = door.pids
        previous = {
            sig: signal.signal(sig, lambda signum, _frame: self._signal(signum))
            for sig in (signal.SIGINT, signal.SIGTERM)
        }
        watcher = threading.Thread(target=supervisor.run, daemon=True, name="supervisor")
        probes = None
        drained: FrontDrain | None = None
        door_open = False
        try:
            if o.health_port:
                probes = health_endpoint(o.health_port, self.status, o.address)
            server.start(timeout=o.timeout)
            if o.warm_up:
                self._warm_up(server, door)
            door.start()
            door_open = True
            supervisor.started()  # ready: only now that the front door's ports are open
            self._announce(canary is None, probes is not None)
            if o.health_interval > 0:
                watcher.start()
                supervisor.watch_liveness()
            while not self.stopping:
                if o.health_interval <= 0 and server.running.poll() is not None:
                    break
                time.sleep(0.2)
        finally:
            if self.stopping and door_open:
                self._grace()
            supervisor.stop()
            if self.stopping:
                log.info(
                    f"stopping: refusing new requests and letting the accepted ones finish (at most "
                    f"{o.drain_timeout:g} s), then stopping tritonserver"
                )
                drained = door.drain(o.drain_timeout)
            if watcher.is_alive():
                watcher.join(timeout=60)  # a repair in progress finishes first
            if drained is None or drained.get("drained"):  # nothing the door admitted is in flight
                door.release_upstream()  # its keep-alive connections would hold tritonserver's exit 10 s
            code = server.stop()
            door.stop()
            left = door.remove_uploads()
            if left:
                log.info(f"removed {len(left)} folder(s) of uploaded models tritonserver left: {', '.join(left)}")
            if probes is not None:
                probes.shutdown()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            stack.close()
        return self._report(code, drained)

    def _connection_cap(self) -> int:
        """The HTTP port's connection cap: as asked (or DEFAULT_MAX_CONNECTIONS), within half
        the descriptors serve may use (the other half is the gRPC port's)."""
        budget = descriptor_budget()
        wanted = self.options.max_connections or DEFAULT_MAX_CONNECTIONS
        cap = max(16, min(wanted, budget // 2))
        if cap < wanted:
            log.info(f"the HTTP port keeps at most {cap} connections (the descriptor limit allows {budget} in all)")
        return cap

    def _signal(self, signum: int) -> None:
        if not self.stopping:
            self.signalled = time.monotonic()
            if self.door is not None:  # (made before the handlers are set)
                self.door.leave()  # not ready on the serving ports too, from now on
        self.stopping.append(signum)

    def _grace(self) -> None:
        """Not ready from the first signal on, but still taking requests until
        `drain_grace` s after it (or a second signal): a request a client sent as the signal
        came, or a load balancer sent before it saw the readiness change, is answered, not
        refused. (`_signal` has told the door to answer 'not ready'.)"""
        grace = self.options.drain_grace
        if grace <= 0:
            return
        log.info(
            f"stopping: not ready from now on, still taking requests for {grace:g} s (--drain-grace) while "
            "load balancers stop sending here; a second signal ends the grace at once"
        )
        while time.monotonic() < self.signalled + grace and len(self.stopping) < 2:
            time.sleep(0.05)

    def _warm_up(self, server: TritonServer, door: FrontDoor | DoorWorkers) -> None:
        """Warm the pipeline and start the gate from its measured rate; a failure is logged
        (the supervisor judges health) and the gate starts from its guess."""
        try:
            warm = warm_up(server.grpc_url, "grpc", max_text_bytes=door.max_text_bytes)
        except ReadabilityError as err:
            log.warning(f"the warm-up failed ({err}): the first clients pay a cold pipeline's start")
            return
        door.seed(warm.rate, warm.byte_work)
        log.info(warm.describe())

    def _announce(self, no_canary: bool, probes: bool) -> None:
        o, server = self.options, self.server
        assert server is not None
        log.info(
            f"serving {o.repository} on {o.address}: http {o.http_port}, grpc {o.grpc_port} (the front door: "
            f"an accepted request is answered within about {o.max_wait:g} s, bodies up to "
            f"{o.max_request_bytes} bytes), metrics {o.metrics_port}; tritonserver (pid {server.pid}) on "
            f"127.0.0.1 only; Ctrl-C stops it"
        )
        log.info(
            f"the model-repository, logging, trace and shared-memory APIs need the header '{ADMIN_HEADER}' with "
            f"the key in ${ADMIN_KEY_ENV}"
            + (
                ""
                if os.environ.get(ADMIN_KEY_ENV) or os.environ.get(ADMIN_KEY_ENV + "_FILE")
                else " (none set: a key was generated for this run)"
            )
        )
        if isinstance(self.door, DoorWorkers):
            how = "by client network" if self.options.client_header is None else "by connection (behind a proxy)"
            log.info(
                f"the front door runs in {self.door.count} worker processes on the same ports (pids "
                f"{', '.join(map(str, self.door.pids()))}), spread {how}"
            )
        if no_canary:
            log.info(
                "the repository holds no recorded canary (assemble it again with this version): the health "
                "check can only see that SCORE is finite, not that it is right"
            )
        if probes:
            log.info(f"GET /livez, /readyz, /healthz and /metrics on port {o.health_port}")

    def _report(self, code: int | None, drained: FrontDrain | None) -> int:
        server = self.server
        assert server is not None
        report = server.last_stop
        if report.get("removed_shm"):
            log.info(f"removed {len(report['removed_shm'])} /dev/shm segment(s) the server left behind")
        if report.get("orphans"):
            log.info(f"ended {len(report['orphans'])} process(es) the server left behind")
        if not self.stopping:
            raise ServerError(f"tritonserver exited on its own with status {code}")
        if drained and not drained.get("drained"):
            log.info(
                f"the drain timeout passed with {drained.get('waiting')} texts waiting and "
                f"{drained.get('inside')} inside tritonserver"
            )
        if report.get("leaked"):
            log.info(
                "every step finished its requests, but the ensemble still held requests tritonserver 2.51 lost "
                "track of: it was ended at once instead of after its exit timeout"
            )
        if report.get("endpoint_hang"):
            log.info(
                f"tritonserver had stopped its core (every model unloaded, nothing in flight) but its gRPC "
                f"endpoint did not close within {server.endpoint_grace:g} s (tritonserver 2.51 waits without a "
                "deadline for a call it never finished): it was ended with SIGKILL"
            )
        ok = bool(report.get("drained")) and (drained is None or drained["drained"])
        detail = (
            ""
            if report.get("drained")
            else " (not drained: "
            + (
                report.get("error")
                or f"still loaded after the drain timeout: {', '.join(report.get('still_loaded', []))}"
            )
            + ")"
        )
        log.info(f"tritonserver stopped (status {code}){detail}")
        return 0 if ok else 1
