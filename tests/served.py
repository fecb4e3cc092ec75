"""Helpers for the integration tests: a served repository, three kinds of client, and
requests sent side by side.

The three clients are the ones users have: tritonclient over HTTP, tritonclient over gRPC,
and KServe v2 JSON sent by `curl` (a client no one here wrote).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from readability_triton import contracts as C
from readability_triton.client.readability import triton_client
from readability_triton.repository import assemble as repository
from readability_triton.repository import configs
from readability_triton.repository.options import AssemblyOptions
from readability_triton.server.tritonserver import TritonServer
from readability_triton.texts import to_rows

CLIENTS = ("http", "grpc", "curl")


def assemble_portable(artifacts: str, out: str, batch_window_us: int | None = None, **assemble_kw) -> str:
    """The `portable` repository of `artifacts`; with `batch_window_us`, every Python step
    waits that long for more requests (so that requests sent together share execute()
    calls, which the production windows of about 1 ms cannot promise)."""
    repository.assemble(artifacts, out, AssemblyOptions("portable", **assemble_kw))
    if batch_window_us is not None:

        def widen(config) -> None:
            config.dynamic_batching.max_queue_delay_microseconds = batch_window_us

        for model in configs.present_models(out):
            if model != C.ENSEMBLE:
                configs.edit_config(os.path.join(out, model, "config.pbtxt"), widen)
    return out


def portable_in_process(artifacts: str, folder: str, texts) -> dict[str, np.ndarray]:
    """What the `portable` repository of `artifacts` answers for `texts`, computed in
    process by the runners its Python models run, keyed by the ensemble's output names."""
    repo = os.path.join(folder, "repository")
    repository.assemble(artifacts, repo, AssemblyOptions("portable"))
    return repository.repository_pipeline(repo)(texts)


def system_tool(name: str, debian_path: str, package: str) -> str:
    """The path of a system program the test needs, or a skip that says how to get it."""
    import shutil

    import pytest

    path = shutil.which(name) or (debian_path if os.path.exists(debian_path) else None)
    if path is None:
        pytest.skip(f"{name} is not installed (apt-get install {package}; .ci/run installs it)")
    return path


def served_weights(repo: str) -> tuple[float, float]:
    """SCORE's weights as the assembled repository's postprocess config holds them."""
    post = configs.read_config(os.path.join(repo, C.POSTPROCESS, "config.pbtxt"))
    return (float(post.parameters[C.BERT_WEIGHT].string_value), float(post.parameters[C.FOREST_WEIGHT].string_value))


def start_server(repo: str, log_file: str, backend_dir: str | None = None, timeout: float = 240, **kw) -> TritonServer:
    """The tests' one way to start a tritonserver on `repo` (keyword arguments go to
    `TritonServer`): ready, or the end of its log printed before the error."""
    if backend_dir is not None:
        kw["backend_dir"] = backend_dir
    server = TritonServer(repo, log_file=log_file, **kw)
    try:
        server.start(timeout=timeout)
    except Exception:
        print(server.log_tail(80))
        raise
    return server


def text_rows(texts) -> np.ndarray:
    """`texts` (str encoded, bytes as they are) as the [n, 1] array of a BYTES input."""
    return to_rows([t.encode("utf-8") if isinstance(t, str) else t for t in texts])


class Failure(Exception):
    """A request the server refused: `status` (HTTP code or gRPC status name) and the message."""

    def __init__(self, status, message: str):
        super().__init__(f"{status}: {message}")
        self.status, self.message = status, message


def infer(
    server: TritonServer, protocol: str, model: str, inputs: dict[str, tuple[str, np.ndarray]], outputs=None
) -> dict[str, np.ndarray]:
    """One inference request with `inputs` ({name: (datatype, array)}); `outputs` is the
    list of output names to ask for (None: ask for none, i.e. get all). Raises `Failure`
    when the server refuses the request."""
    from tritonclient.utils import InferenceServerException

    if protocol == "curl":
        return curl_infer(server, model, {n: (d, a.shape, a) for n, (d, a) in inputs.items()}, outputs)
    module, client = triton_client(server.http_url if protocol == "http" else server.grpc_url, protocol)
    try:
        tensors = []
        for name, (datatype, array) in inputs.items():
            tensor = module.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        requested = None if outputs is None else [module.InferRequestedOutput(n) for n in outputs]
        try:
            result = client.infer(model, tensors, outputs=requested)
        except InferenceServerException as err:
            raise Failure(err.status(), err.message()) from None
        names = (
            outputs
            if outputs is not None
            else [o["name"] if isinstance(o, dict) else o.name for o in _response_outputs(result, protocol)]
        )
        return {name: result.as_numpy(name) for name in names}
    finally:
        client.close()


def _response_outputs(result, protocol: str):
    if protocol == "http":
        return result.get_response()["outputs"]
    return result.get_response().outputs


def _json_data(array: np.ndarray) -> list:
    flat = array.reshape(-1)
    if array.dtype == np.object_:
        return [v.decode("utf-8") if isinstance(v, bytes) else v for v in flat.tolist()]
    return flat.tolist()


def curl_infer(server: TritonServer, model: str, inputs: dict, outputs=None, body: bytes | None = None):
    """A KServe v2 JSON request sent with curl: `inputs` is {name: (datatype, shape, data)}
    (data a NumPy array, or a list sent as is); `body` replaces the whole request body."""
    if body is None:
        request = {
            "inputs": [
                {
                    "name": name,
                    "datatype": datatype,
                    "shape": list(shape),
                    "data": data if isinstance(data, list) else _json_data(data),
                }
                for name, (datatype, shape, data) in inputs.items()
            ]
        }
        if outputs is not None:
            request["outputs"] = [{"name": name} for name in outputs]
        body = json.dumps(request).encode("utf-8")
    reply = subprocess.run(
        [
            "curl",
            "-sS",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            "@-",
            "-w",
            "\n%{http_code}",
            f"http://{server.http_url}/v2/models/{model}/infer",
        ],
        input=body,
        capture_output=True,
        timeout=120,
        check=True,
    )
    text, _, code = reply.stdout.decode("utf-8").rpartition("\n")
    payload = json.loads(text)
    if code != "200":
        raise Failure(int(code), payload.get("error", text))
    out = {}
    for tensor in payload["outputs"]:
        dtype = np.float32 if tensor["datatype"] == "FP32" else None
        out[tensor["name"]] = np.asarray(tensor["data"], dtype=dtype).reshape(tensor["shape"])
    return out


def score_texts(server: TritonServer, protocol: str, texts, outputs=None) -> dict[str, np.ndarray]:
    """The ensemble's outputs for `texts` in one request."""
    return infer(server, protocol, C.ENSEMBLE, {C.TEXT: ("BYTES", text_rows(texts))}, outputs)


def side_by_side(calls, workers: int | None = None) -> list:
    """Run the zero-argument `calls` at the same time (one thread each, released together);
    each result is the call's return value or the exception it raised."""
    barrier = threading.Barrier(len(calls))

    def run(call):
        barrier.wait()
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - reported to the test
            return exc

    with ThreadPoolExecutor(max_workers=workers or len(calls)) as pool:
        return list(pool.map(run, calls))


def settled(read, done, timeout: float = 10.0, interval: float = 0.05):
    """Read Triton's counters (`read()`) until `done(reading)` holds, then once more a
    moment later, and return that last reading for the caller's asserts to judge (or the
    last one read when `timeout` s pass first). A client can hold its answer before the
    counters move: python_backend reports an execute's statistics when the execute has
    returned (its PbMetricReporter reports in its destructor), after the responses were
    sent. The second read lets a count that overshoots show itself."""
    deadline = time.monotonic() + timeout
    reading = read()
    while not done(reading) and time.monotonic() < deadline:
        time.sleep(interval)
        reading = read()
    if done(reading):
        time.sleep(4 * interval)
        reading = read()
    return reading
