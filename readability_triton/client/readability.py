"""Score texts through the `readability` ensemble of a running Triton server.

One request per chunk of texts (up to the ensemble's max_batch_size), over HTTP or gRPC
(tritonclient). The client asks for the outputs the caller wants (all three by default);
each result carries them (None for an output not asked for) and the round-trip time of
the request that carried it.
"""

from __future__ import annotations

import concurrent.futures
import random
import threading
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .. import contracts as C
from .. import triton_messages as M
from ..errors import ClientError
from ..progress import no_progress
from ..texts import to_rows


@dataclass
class Score:
    """One text's answers: every output asked for (None for one not asked for), and the
    round trip of the request that carried it."""

    text: str | bytes
    values: dict[str, float | None]  # by ensemble output name
    latency_ms: float
    #: Why the server refused this text (`score(skip_bad=True)`); None when it was scored.
    error: str | None = None


def parse_outputs(value) -> tuple[str, ...]:
    """The ensemble outputs named in `value` (a comma-separated string or a sequence),
    in the ensemble's order; ValueError for an unknown or empty selection."""
    names = [n.strip() for n in (value.split(",") if isinstance(value, str) else value) if n.strip()]
    unknown = [n for n in names if n not in C.OUTPUTS]
    if unknown or not names:
        raise ValueError(f"outputs {', '.join(unknown) or '(none)'}: choose one or more of {', '.join(C.OUTPUTS)}")
    return tuple(n for n in C.OUTPUTS if n in names)


def _reading(exc: BaseException) -> M.Reading:
    """What a failed request's error says (`triton_messages.classify`): tritonclient's
    status ("503", "StatusCode.UNAVAILABLE") and its words."""
    status = getattr(exc, "status", None)
    return M.classify(status() if callable(status) else None, str(exc))


def is_busy(exc: BaseException) -> bool:
    """Whether a failed request was refused because the server is full (retry later)."""
    return _reading(exc).busy


def is_transient(exc: BaseException) -> bool:
    """Whether a failed request may succeed when sent again a little later (never a
    refusal of the request itself, INVALID_ARG)."""
    reading = _reading(exc)
    if reading.kind is M.Kind.CLIENT_FAULT:
        return False
    return isinstance(exc, (ConnectionError, OSError)) or reading.transient


class TextRefused(ClientError):
    """The server refused one text: its input is at fault (empty, too long, not UTF-8).
    `index`: its place among the texts of the call; `reason`: why."""

    def __init__(self, index: int, reason: str):
        super().__init__(f"text {index + 1} (counted from 1): it {reason}")
        self.index = index
        self.reason = reason


def refused_text(exc: BaseException) -> tuple[int, str] | None:
    """(the text's place in its request, why) where `exc` is the refusal of one text of a
    request, else None."""
    refused = M.refused_text(str(exc))
    if refused is None or is_transient(exc.__cause__ or exc):
        return None
    return refused


def _module(protocol: str):
    if protocol == "http":
        import tritonclient.http as module
    elif protocol == "grpc":
        import tritonclient.grpc as module
    else:
        raise ValueError(f"protocol must be 'http' or 'grpc', got {protocol!r}")
    return module


def triton_client(url: str, protocol: str = "http", timeout: float = 120.0):
    """(tritonclient.http or tritonclient.grpc, an `InferenceServerClient` of `url`): where
    every client of this package is made (over HTTP, `timeout` bounds the connection and
    each answer; a gRPC call takes its own `client_timeout`)."""
    module = _module(protocol)
    if protocol == "http":
        return module, module.InferenceServerClient(url, connection_timeout=timeout, network_timeout=timeout)
    return module, module.InferenceServerClient(url)


def text_input(module, texts: Sequence[str | bytes], name: str = C.TEXT):
    """`texts` (str, or bytes sent as they are, valid UTF-8 or not) as the `[n, 1]` BYTES
    input `name` of a request."""
    rows = to_rows([t.encode("utf-8") if isinstance(t, str) else t for t in texts])
    tensor = module.InferInput(name, list(rows.shape), C.WIRE_DTYPES["TYPE_STRING"])
    tensor.set_data_from_numpy(rows)
    return tensor


class ThreadClients:
    """One client per thread (tritonclient's clients are not shared between threads), all
    closed by `close()` (a thread that asks again after that gets a new one): what the load
    generators' workers use. `make`: what each thread gets instead of tritonclient's
    (module, client), e.g. a `ReadabilityClient` (it must have `close()`)."""

    def __init__(self, url: str, protocol: str, make=None):
        self.url, self.protocol, self._make = url, protocol, make
        self._local = threading.local()
        self._opened: list = []
        self._lock = threading.Lock()
        self._round = 0  # bumped by close(): clients of an earlier round are closed

    def get(self):
        """(module, client) of the calling thread, or what `make` made for it."""
        if getattr(self._local, "round", None) != self._round:
            if self._make is None:
                made = triton_client(self.url, self.protocol)
                closable = made[1]
            else:
                made = closable = self._make()
            with self._lock:
                self._opened.append(closable)
            self._local.made, self._local.round = made, self._round
        return self._local.made

    def close(self) -> None:
        with self._lock:
            for client in self._opened:
                try:
                    client.close()
                except Exception:  # noqa: BLE001 - a dead server's connection
                    pass
            self._opened.clear()
            self._round += 1


class ReadabilityClient:
    """A small client of the ensemble: `score(texts)` -> list of `Score`."""

    def __init__(
        self,
        url: str,
        protocol: str = "http",
        model: str = C.ENSEMBLE,
        batch_size: int = C.MAX_BATCH_SIZE[C.ENSEMBLE],
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.5,
        busy_patience: float = 300.0,
    ):
        self.module = _module(protocol)
        self.protocol = protocol
        self.model = model
        self.batch_size = batch_size
        self.timeout = timeout
        self.retries = retries  # attempts after the first, for transient failures only
        self.backoff = backoff  # seconds before the first retry; doubled each time
        #: A request refused because the server is full is sent again, with backoff (at most
        #: 5 s between tries, jittered), until this many seconds have passed; 0: never.
        self.busy_patience = busy_patience if retries else 0.0
        try:
            _, self.client = triton_client(url, protocol, timeout)
        except Exception as exc:
            raise ClientError(f"cannot create a {protocol} client for {url}: {exc}") from exc
        self.url = url

    def close(self) -> None:
        """Close the connection (an open HTTP keep-alive connection delays a server's shutdown)."""
        try:
            self.client.close()
        except Exception:  # noqa: BLE001 - closing twice or a dead server is fine
            pass

    def __enter__(self) -> "ReadabilityClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def ready(self) -> bool:
        try:
            return bool(self.client.is_server_ready() and self.client.is_model_ready(self.model))
        except Exception:  # noqa: BLE001 - not reachable means not ready
            return False

    def infer_batch(self, texts: Sequence[str | bytes], outputs=C.OUTPUTS) -> tuple[dict[str, np.ndarray], float]:
        """One request with `texts`, asking for `outputs` (ensemble output names); returns
        those outputs and the round-trip time in ms."""
        names = parse_outputs(outputs)
        request = text_input(self.module, texts)
        requested = [self.module.InferRequestedOutput(name) for name in names]
        attempt = busy_tries = 0
        first = time.monotonic()
        while True:
            start = time.perf_counter()
            try:
                if self.protocol == "grpc":
                    result = self.client.infer(self.model, [request], outputs=requested, client_timeout=self.timeout)
                else:
                    result = self.client.infer(self.model, [request], outputs=requested)
                break
            except Exception as exc:
                if is_busy(exc) and time.monotonic() - first < self.busy_patience:
                    time.sleep(min(5.0, self.backoff * 2**busy_tries) * random.uniform(0.5, 1.0))
                    busy_tries += 1
                    continue
                if attempt >= self.retries or not is_transient(exc) or is_busy(exc):
                    raise ClientError(f"{self.model} at {self.url}: {exc}") from exc
                time.sleep(self.backoff * 2**attempt)
                attempt += 1
        elapsed = (time.perf_counter() - start) * 1e3
        got = {}
        for name in names:
            array = result.as_numpy(name)
            if array is None:
                raise ClientError(f"{self.model} at {self.url}: the response has no output {name}")
            got[name] = array.reshape(-1)
        return got, elapsed

    def score(
        self,
        texts: Sequence[str | bytes],
        progress=no_progress,
        outputs=C.OUTPUTS,
        concurrency: int = 1,
        skip_bad: bool = False,
    ) -> list[Score]:
        """Scores of `texts`, in their order, one request per `batch_size` texts with up to
        `concurrency` of them in flight (each on its own connection), asking for `outputs`
        (`progress`: see `readability_triton.progress`). The first request that fails ends
        the call with its error (`TextRefused`, with the text's place in `texts`, where
        the server refused one text); the ones not sent yet are not sent. `skip_bad`: a
        refused text gets its `error` and no values, and the rest of its request is sent
        again without it (a request per refused text)."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        names = parse_outputs(outputs)
        starts = range(0, len(texts), self.batch_size)
        chunks = [(start, list(texts[start : start + self.batch_size])) for start in starts]

        def scored(client: "ReadabilityClient", start: int, chunk: list) -> list[Score]:
            pending = list(range(len(chunk)))
            results: list[Score | None] = [None] * len(chunk)
            while pending:
                try:
                    out, elapsed = client.infer_batch([chunk[i] for i in pending], names)
                except ClientError as exc:
                    refused = refused_text(exc)
                    if refused is None or refused[0] >= len(pending):
                        raise
                    at = pending.pop(refused[0])
                    if not skip_bad:
                        raise TextRefused(start + at, refused[1]) from exc
                    results[at] = Score(chunk[at], dict.fromkeys(C.OUTPUTS), 0.0, refused[1])
                    continue
                columns = {name: (out[name].tolist() if name in out else [None] * len(pending)) for name in C.OUTPUTS}
                for k, i in enumerate(pending):
                    results[i] = Score(chunk[i], {name: columns[name][k] for name in C.OUTPUTS}, elapsed)
                pending = []
            return [score for score in results if score is not None]

        with (progress or no_progress)(total=len(texts), desc="scoring", unit="text") as bar:
            if concurrency == 1 or len(chunks) <= 1:
                results: list[Score] = []
                for start, chunk in chunks:
                    results += scored(self, start, chunk)
                    bar.update(len(chunk))
                return results
            return self._score_at_once(chunks, scored, concurrency, bar)

    def _score_at_once(self, chunks, scored, concurrency: int, bar) -> list[Score]:
        clients = ThreadClients(
            self.url,
            self.protocol,
            make=lambda: ReadabilityClient(
                self.url,
                self.protocol,
                self.model,
                self.batch_size,
                self.timeout,
                self.retries,
                self.backoff,
                self.busy_patience,
            ),
        )

        def run(start: int, chunk: list) -> list[Score]:
            return scored(clients.get(), start, chunk)

        pool = concurrent.futures.ThreadPoolExecutor(min(concurrency, len(chunks)), thread_name_prefix="score")
        try:
            futures = [pool.submit(run, start, chunk) for start, chunk in chunks]
            for future in concurrent.futures.as_completed(futures):
                bar.update(len(future.result()))  # the first error ends the call
            return [score for future in futures for score in future.result()]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            clients.close()


def served_parameters(url: str, protocol: str = "http") -> dict[str, str]:
    """The postprocess model's config parameters at `url` (its weights, its interval), or {}
    where the server does not say."""
    try:
        with ReadabilityClient(url, protocol, retries=0) as client:
            if protocol == "http":
                config = client.client.get_model_config(C.POSTPROCESS)
            else:
                config = client.client.get_model_config(C.POSTPROCESS, as_json=True)["config"]
    except Exception:  # noqa: BLE001 - no such model, an older server: the report just lacks them
        return {}
    params = config.get("parameters", {})
    return {key: value.get("string_value", "") for key, value in params.items() if isinstance(value, dict)}


def served_weights(url: str, protocol: str = "http") -> tuple[float, float] | None:
    """SCORE's (BERT, forest) weights in the postprocess model's config at `url`, or None
    where the server does not say."""
    params = served_parameters(url, protocol)
    try:
        bert = float(params[C.BERT_WEIGHT])
        forest = float(params[C.FOREST_WEIGHT])
    except (KeyError, TypeError, ValueError):
        return None
    total = bert + forest
    return (bert / total, forest / total) if total > 0 else None


def served_predictions(
    url: str, texts, *, protocol: str = "http", batch_size: int = 32, progress=no_progress, outputs=C.OUTPUTS
) -> dict[str, np.ndarray]:
    """The ensemble's `outputs` (by default all) for `texts` from the server at `url`,
    by output name, as the in-process `Pipeline` answers them."""
    texts = list(texts)
    with ReadabilityClient(url, protocol, batch_size=batch_size) as client:
        if not client.ready():
            raise ClientError(f"no ready '{C.ENSEMBLE}' model at {url} ({protocol})")
        scores = client.score(texts, progress=progress, outputs=outputs)
    return {name: np.array([s.values[name] for s in scores], np.float32) for name in C.OUTPUTS if name in outputs}
