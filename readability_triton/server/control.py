"""Model control of a running tritonserver (the repository, statistics and metrics
extensions), and the drain built on it: `TritonServer` is a `ModelControl`."""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from typing import TypedDict

from ..errors import ServerError
from ..stub.admission import pending_requests
from .admin import admin_headers


class DrainReport(TypedDict, total=False):
    """What `drain` did (and `stop`, which adds how the process ended: `last_stop`)."""

    drained: bool
    still_loaded: list[str]
    leaked: bool  # only requests Triton 2.51 had lost track of were left
    seconds: float
    error: str
    killed: bool  # SIGKILLed: it had not exited in time, or (endpoint_hang) an endpoint never closed
    endpoint_hang: bool  # the core had stopped, but the gRPC endpoint held the exit (tritonserver.py)
    died: bool
    exit_status: int | None
    exit_seconds: float
    orphans: list[int]
    removed_shm: list[str]


class ModelControl:
    """What a server with an HTTP endpoint, an admin key and a metrics endpoint can be
    asked and told; the subclass says where they are."""

    admin_key: str
    drain_timeout: float

    @property
    def http_url(self) -> str:
        raise NotImplementedError

    @property
    def metrics_url(self) -> str:
        raise NotImplementedError

    @property
    def running(self) -> subprocess.Popen:
        raise NotImplementedError

    def _call(self, what: str, call, timeout: float = 60.0):
        """`call(client, headers)` with tritonclient's HTTP client of this server, `headers`
        opening the restricted APIs (the admin key); its errors as ServerError."""
        try:
            import tritonclient.http as http
            from tritonclient.utils import InferenceServerException
        except ImportError as err:
            raise ServerError(
                f"{what}: model control needs tritonclient ({err}): pip install 'readability-triton[client]'"
            ) from None
        client = None
        try:
            client = http.InferenceServerClient(self.http_url, connection_timeout=timeout, network_timeout=timeout)
            return call(client, admin_headers(self.admin_key))
        except InferenceServerException as err:
            raise ServerError(f"{what}: {err.message() or err}") from None
        except Exception as err:  # noqa: BLE001 - a closed connection (http.client's), a dead server: all the same here
            raise ServerError(f"{what}: {type(err).__name__}: {err}") from None
        finally:
            if client is not None:
                client.close()

    def model_states(self) -> dict[str, str]:
        """{model: state} from the repository index (READY, UNLOADING, UNAVAILABLE, ...)."""
        index = self._call("the repository index", lambda c, h: c.get_model_repository_index(headers=h))
        return {m["name"]: m.get("state", "") for m in index or []}

    def unload(self, model: str) -> None:
        self._call(f"unloading {model}", lambda c, h: c.unload_model(model, headers=h))

    def load(self, model: str) -> None:
        self._call(f"loading {model}", lambda c, h: c.load_model(model, headers=h), timeout=300)

    def _wait_unloaded(self, models, deadline: float) -> list[str]:
        """Wait until none of `models` is READY or UNLOADING; the ones still there."""
        pending = list(models)
        while pending and self.running.poll() is None:
            try:
                states = self.model_states()
            except ServerError:
                break
            pending = [m for m in pending if states.get(m) in ("READY", "UNLOADING")]
            if not pending or time.monotonic() >= deadline:
                break
            time.sleep(0.02)  # a look costs about a millisecond; each step of a stop waits on these
        return pending

    def ensemble_steps(self, ensemble: str = "readability") -> list[str]:
        """The composing models of `ensemble`, in the order its config lists its steps
        (a topological order: each step after the steps whose outputs it reads)."""
        config = self._call(f"{ensemble}'s config", lambda c, h: c.get_model_config(ensemble), timeout=10)
        steps = [step["model_name"] for step in config.get("ensemble_scheduling", {}).get("step", [])]
        return list(dict.fromkeys(steps))

    def execution_counts(self) -> dict[str, int]:
        """{model: executions so far} from the statistics extension (it moves when an
        execute has finished)."""
        stats = self._call("the statistics", lambda c, h: c.get_inference_statistics(), timeout=10)
        return {m["name"]: int(m.get("execution_count", 0)) for m in stats.get("model_stats", [])}

    def pending_requests(self) -> dict[str, int]:
        """{model: requests waiting in its queue} from the metrics endpoint."""

        try:
            with urllib.request.urlopen(self.metrics_url, timeout=5) as reply:
                return pending_requests(reply.read().decode("utf-8", "replace"))
        except (urllib.error.URLError, OSError) as err:
            raise ServerError(f"{self.metrics_url}: {err}") from None

    def _idle(self, steps, quiet: float = 2.0, deadline: float = 0.0) -> bool:
        """Whether no step has a request queued and none has finished an execute for
        `quiet` seconds (checked until `deadline`)."""
        try:
            before = self.execution_counts()
            time.sleep(min(quiet, max(0.0, deadline - time.monotonic())))
            pending = self.pending_requests()
            return self.execution_counts() == before and not any(pending.get(m, 0) for m in steps)
        except ServerError:
            return False

    def drain(self, timeout: float | None = None, ensemble: str = "readability", abandon=()) -> DrainReport:
        """Stop taking work and let the requests in flight finish, at most `timeout` s: unload
        the ensemble (new requests are refused with NOT_FOUND "has no available versions");
        once its requests in flight are answered it unloads, and then its steps are unloaded.
        An instance whose stub died never finishes unloading on Triton 2.51.

        Triton 2.51 can also lose track of requests (a gRPC cancellation racing with the
        answer: server#8078/#8220, fixed in 25.04 and 25.06); the ensemble then never
        unloads, although nothing is left to do. When the ensemble has not unloaded and its
        steps stay idle, the steps are unloaded one by one in the ensemble's order, each
        once it has answered what it holds (a step goes only after every step that feeds it,
        so no request in flight finds its next step gone), and `leaked` says that only such
        lost requests remained. The models in `abandon` (a dead stub's) are not waited for."""
        timeout = self.drain_timeout if timeout is None else timeout
        started = time.monotonic()
        deadline = started + timeout
        report: DrainReport = {"drained": False}
        try:
            states = self.model_states()
            steps = self.ensemble_steps(ensemble) if states.get(ensemble) == "READY" else []
            others = [m for m in steps if m != ensemble] + sorted(m for m in states if m not in steps + [ensemble])
            if states.get(ensemble) == "READY":
                self.unload(ensemble)
            leftover = [ensemble] if ensemble in states else []
            while leftover and time.monotonic() < deadline:
                leftover = self._wait_unloaded(leftover, min(deadline, time.monotonic() + 1.0))
                if leftover and self._idle(others, deadline=deadline):
                    leftover = self._wait_unloaded(leftover, time.monotonic())
                    break
            stuck: list[str] = []
            loaded = [m for m in others if self.model_states().get(m) in ("READY", "UNLOADING") and m not in abandon]
            if not leftover:  # nothing in flight: unload the steps together
                for model in loaded:
                    self.unload(model)
                stuck = self._wait_unloaded(loaded, deadline)
            else:  # in the ensemble's order, each once it has answered what it holds
                for model in loaded:
                    self.unload(model)
                    stuck += self._wait_unloaded([model], deadline)
                leftover = self._wait_unloaded(leftover, time.monotonic())
        except ServerError as err:
            report["error"] = str(err)
            return report
        report.update(
            DrainReport(
                drained=not stuck,
                still_loaded=stuck + leftover,
                leaked=bool(leftover and not stuck),
                seconds=round(time.monotonic() - started, 2),
            )
        )
        return report
