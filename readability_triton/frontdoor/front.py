"""`FrontDoor`: the `Door` with its two ports open, in an asyncio loop of its own (a thread
of `serve`)."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import threading
from typing import Any, Awaitable, Callable

from ..errors import ServerError
from .connections import quiet_logs
from .door import Door
from .grpc_front import open_grpc
from .http_front import open_http

log = logging.getLogger(__name__)

#: glibc's mallopt parameter M_MMAP_THRESHOLD, and the value the front door sets.
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 1 << 20


def large_buffers_to_the_system() -> bool:
    """Have glibc map every allocation of MMAP_THRESHOLD bytes or more on its own, so that it
    goes back to the system when freed: glibc's threshold otherwise rises after the first
    large free (up to 32 MiB), and the front door's thread arena then keeps what large
    request bodies held (compression bombs left serve 144-224 MB larger; with the fixed
    threshold, 1-3 MB). Whether it could (not on another C library)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    except (OSError, AttributeError):
        return False


class FrontDoor(Door):
    """`start()` listens on the HTTP and gRPC ports; `stop()` closes them and ends the loop
    (after `drain()`, nothing is in flight)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._thread: threading.Thread | None = None
        self._closers: list[Callable[[], Awaitable[None]]] = []
        self._releasers: list[Callable[[], Awaitable[None]]] = []

    # -- the loop -----------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> "FrontDoor":
        """Listen on both ports (ServerError when one cannot be bound)."""
        started: dict[str, Any] = {}
        ready = threading.Event()

        quiet_logs()  # a line per kind of trouble per second, not a traceback per socket
        large_buffers_to_the_system()

        def main() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self.loop = loop
            try:
                loop.run_until_complete(self._open())
            except Exception as exc:  # noqa: BLE001 - handed to the caller of start()
                started["error"] = exc
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._close())
            loop.close()

        self._thread = threading.Thread(target=main, daemon=True, name="front-door")
        self._thread.start()
        if not ready.wait(timeout):
            raise ServerError("the front door did not start listening in time")
        if "error" in started:
            raise ServerError(
                f"the front door cannot listen on {self.address} (http {self.http_port}, grpc "
                f"{self.grpc_port}): {started['error']}"
            )
        return self

    async def _open(self) -> None:
        self._running = asyncio.Event()
        self._running.set()
        self._closers.append(await open_http(self, self._releasers))
        self._closers.append(await open_grpc(self, self._releasers))

    async def _close(self) -> None:
        for close in reversed(self._closers):
            try:
                await close()
            except Exception as exc:  # noqa: BLE001 - closing the rest matters more
                log.warning(f"front door: closing: {type(exc).__name__}: {exc}")
        self._closers.clear()

    def release_upstream(self, timeout: float = 10.0) -> None:
        """Close the idle keep-alive connections to tritonserver, and forward what still comes
        (health, metadata) on a connection each, so that tritonserver's stop does not wait
        for them (its HTTP endpoint counts open connections down for its whole exit timeout:
        an idle serve took 14 s to stop, with them closed 4 s). The ports stay open."""
        loop = self.loop
        if loop is None or not loop.is_running():
            return

        async def release() -> None:
            for close in self._releasers:
                await close()

        try:
            asyncio.run_coroutine_threadsafe(release(), loop).result(timeout)
        except Exception as exc:  # noqa: BLE001 - the stop goes on; it only waits longer
            log.warning(f"front door: closing the connections to tritonserver: {type(exc).__name__}: {exc}")

    def stop(self) -> None:
        """Close both ports and end the loop (after `drain`, nothing is in flight)."""
        loop, thread = self.loop, self._thread
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=30)
        self.loop = None
