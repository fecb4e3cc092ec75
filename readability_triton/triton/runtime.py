"""What the Python-backend models share: one `PythonModel` per adapter, which reads the
model's config, parameters, device and artifacts in `initialize`, and one `execute` that
batches, isolates and responds.

The adapters in `backends/<model>/model.py` stay thin: they build a `PythonModel` and a
runner in `initialize`, and hand the whole list of requests of an `execute` call to
`PythonModel.execute(requests, runner)`, which

- reads every request's input, validates it *per request* (a bad request gets its own
  INVALID_ARG error and never fails the others),
- concatenates the good ones into one batch for one vectorized pass of the runner (if
  that pass raises, it retries request by request, so only the culprit fails),
- splits the results back into one response per request, as NumPy arrays on a CPU
  instance or through DLPack (no host copy) on a GPU instance.

`pb_utils` (the `triton_python_backend_utils` module, real or the test stub) is passed
in, so this module imports nothing Triton-specific and is testable on its own.
"""
from __future__ import annotations

import json
import os
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from .. import contracts, threads
from ..device import Device
from ..texts import first_invalid_utf8
from .admission import Admission

#: A folder: every Python model writes where its inputs arrived to `<folder>/<model>.json`
#: after each execute (the GPU kit and the tests set it; unset in production).
ARRIVALS_ENV = "READABILITY_TRITON_ARRIVALS_DIR"

if TYPE_CHECKING:
    from ..artifacts.manifest import Manifest

# --------------------------------------------------------------------------- device


def instance_device(args: dict) -> Device:
    """The device of a model instance, from the `args` Triton passes to `initialize`."""
    kind = str(args.get("model_instance_kind", "CPU")).upper()
    device_id = int(args.get("model_instance_device_id", 0) or 0)
    return Device("gpu" if kind == "GPU" else "cpu", device_id)


def version_dir(args: dict) -> str:
    """The model's version folder, where its artifacts are."""
    return os.path.join(args["model_repository"], str(args["model_version"]))


def checked_artifacts(args: dict, names) -> tuple[str, Manifest | None]:
    """The model's version folder, after checking that each of `names` is in it and, where
    the folder holds a `manifest.json` (as `assemble` writes), has the manifest's checksum.
    Returns the folder and the manifest (None without one)."""
    from ..artifacts import manifest

    folder = version_dir(args)
    for name in names:
        if not os.path.isfile(os.path.join(folder, name)):
            raise FileNotFoundError(f"{args.get('model_name', 'model')}: no {name} in {folder}; assemble the "
                                    "repository with `readability-triton assemble`")
    if not os.path.isfile(os.path.join(folder, manifest.MANIFEST)):
        return folder, None
    found = manifest.load_manifest(folder)
    manifest.verify_files(folder, found, names)
    return folder, found


# ----------------------------------------------------------------------- parameters


def model_config(args: dict) -> dict:
    config = args["model_config"]
    return json.loads(config) if isinstance(config, str) else config


def parameters(config: dict) -> dict[str, str]:
    """The `parameters` of a model config as plain strings."""
    out = {}
    for key, value in (config.get("parameters") or {}).items():
        out[key] = value.get("string_value", "") if isinstance(value, dict) else str(value)
    return out


def _parameter(params: dict[str, str], name: str, parse, what: str):
    """`parse` of parameter `name`, None when unset; ValueError naming it otherwise."""
    raw = params.get(name, "")
    if raw == "":
        return None
    try:
        return parse(raw)
    except ValueError:
        raise ValueError(f"parameter {name} must be {what}, got {raw!r}") from None


def int_parameter(params: dict[str, str], name: str, default: int, minimum: int = 1) -> int:
    value = _parameter(params, name, int, "an integer")
    if value is None:
        return default
    if value < minimum:
        raise ValueError(f"parameter {name} must be at least {minimum}, got {value}")
    return value


def float_parameter(params: dict[str, str], name: str, default: float) -> float:
    value = _parameter(params, name, float, "a number")
    if value is None:
        return default
    if not np.isfinite(value):
        raise ValueError(f"parameter {name} must be finite, got {params[name]!r}")
    return value


# ------------------------------------------------------------------------- requests


@dataclass
class Batch:
    """The inputs of all good requests of one `execute` call, concatenated."""

    n_requests: int
    counts: list[int] = field(default_factory=list)  # rows per request (0 for failed ones)
    errors: dict[int, tuple[str, str]] = field(default_factory=dict)  # index -> (message, code)
    items: list | dict = field(default_factory=list)  # the rows: texts, or {input name: array}

    def fail(self, index: int, message: str, code: str = "INVALID_ARG") -> None:
        self.errors[index] = (message, code)
        self.counts[index] = 0

    def rows(self, start: int, stop: int):
        """Rows `start:stop` of the good requests' concatenated inputs."""
        if isinstance(self.items, dict):
            return {name: array[start:stop] for name, array in self.items.items()}
        return self.items[start:stop]


#: Why a text without words is refused (the validate step's own check).
NO_WORDS = ("holds no words (it is empty, or only spaces, punctuation or control characters): "
            "there is nothing to score")


def read_text_requests(pb_utils, requests, name: str = contracts.TEXT,
                       max_text_bytes: int = contracts.DEFAULT_MAX_TEXT_BYTES,
                       require_words: bool = False) -> Batch:
    """Collect the `TEXT` rows of every request; bad requests are set aside with a reason.

    A request fails alone when its input is missing, is not a [batch, 1] BYTES tensor,
    holds a text over `max_text_bytes` bytes, holds a text that is not valid UTF-8, or
    (with `require_words`) holds a text without a word. The word check runs once over the
    texts of all requests.
    """
    batch = Batch(len(requests), counts=[0] * len(requests))
    accepted: list[tuple[int, list[bytes]]] = []
    for index, request in enumerate(requests):
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        if tensor is None:
            batch.fail(index, f"missing input {name}")
            continue
        array = tensor.as_numpy()  # BYTES tensors always live on the CPU
        if array.dtype != np.object_ or array.ndim != 2 or array.shape[1] != 1:
            batch.fail(index, f"input {name} must be a [batch, 1] BYTES tensor, got "
                              f"dtype {array.dtype} and shape {list(array.shape)}")
            continue
        rows = [row if isinstance(row, bytes) else str(row).encode("utf-8") for row in array[:, 0]]
        sizes = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        if sizes.size and int(sizes.max()) > max_text_bytes:
            at = int(np.argmax(sizes > max_text_bytes))
            batch.fail(index, f"text {at} of the request has {int(sizes[at])} bytes, over the "
                              f"limit of {max_text_bytes} (parameter MAX_TEXT_BYTES)")
            continue
        bad = first_invalid_utf8(rows)
        if bad is not None:
            batch.fail(index, f"text {bad} of the request is not valid UTF-8")
            continue
        accepted.append((index, rows))
    if require_words and accepted:
        from ..features import count_words

        words = count_words([row for _, rows in accepted for row in rows])
        start = 0
        for index, rows in accepted:
            empty = np.flatnonzero(words[start:start + len(rows)] == 0)
            start += len(rows)
            if empty.size:
                batch.fail(index, f"text {int(empty[0])} of the request {NO_WORDS}")
    texts: list[bytes] = []
    for index, rows in accepted:
        if index not in batch.errors:
            batch.counts[index] = len(rows)
            texts.extend(rows)
    batch.items = texts
    return batch


def input_array(tensor, xp):
    """A numeric input tensor as an `xp` array, without `as_numpy()` on a GPU tensor."""
    if tensor.is_cpu():
        array = tensor.as_numpy()
        return array if xp is np else xp.asarray(array)
    if xp is np:  # a GPU tensor reached a CPU instance: copy it down through CuPy
        import cupy

        return cupy.asnumpy(cupy.from_dlpack(tensor))
    return xp.from_dlpack(tensor)


def _host(array) -> np.ndarray:
    return array.get() if hasattr(array, "get") else np.asarray(array)


def read_array_requests(pb_utils, requests, names: Sequence[str], xp,
                        dims: dict[str, tuple[int, ...]], finite: bool = False,
                        arrivals: dict[str, dict[str, int]] | None = None) -> Batch:
    """Collect numeric inputs of every request and concatenate each along the batch axis
    (`Batch.items` maps each name to the joined array). A request fails alone when an
    input is missing, has the wrong shape, its inputs' batch sizes differ or (with
    `finite`) it holds NaN or infinity; the finiteness check is one pass over the batch.
    `arrivals[name]["cpu" or "gpu"]` counts where each input tensor arrived (`is_cpu()`)."""
    batch = Batch(len(requests), counts=[0] * len(requests))
    parts: dict[str, list] = {name: [] for name in names}
    order: list[int] = []
    for index, request in enumerate(requests):
        arrays = {}
        for name in names:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is None:
                batch.fail(index, f"missing input {name}")
                break
            if arrivals is not None and name in arrivals:
                arrivals[name]["cpu" if tensor.is_cpu() else "gpu"] += 1
            array = input_array(tensor, xp)
            if tuple(array.shape[1:]) != tuple(dims[name]) or array.ndim != 1 + len(dims[name]):
                batch.fail(index, f"input {name} must have shape [batch, "
                                  f"{', '.join(map(str, dims[name]))}], got {list(array.shape)}")
                break
            arrays[name] = array
        else:
            counts = {int(a.shape[0]) for a in arrays.values()}
            if len(counts) != 1:
                batch.fail(index, f"inputs {', '.join(names)} have different batch sizes")
                continue
            batch.counts[index] = counts.pop()
            order.append(index)
            for name in names:
                parts[name].append(arrays[name])
    joined: dict[str, Any] = {name: (xp.concatenate(parts[name]) if parts[name] else None) for name in names}
    if finite and order:
        rows = sum(batch.counts[i] for i in order)
        ok = xp.ones(rows, dtype=bool)
        for name in names:
            ok &= xp.isfinite(joined[name].reshape(rows, -1)).all(axis=1)
        ok = _host(ok)  # one small copy per execute, also on a GPU instance
        if not ok.all():
            start, keep = 0, np.ones(rows, dtype=bool)
            for index in order:
                stop = start + batch.counts[index]
                bad = np.flatnonzero(~ok[start:stop])
                if bad.size:
                    keep[start:stop] = False
                    batch.fail(index, f"row {int(bad[0])} of the request holds NaN or infinity in "
                                      f"{' or '.join(names)}; the scores must be finite")
                start = stop
            index_array = xp.asarray(np.flatnonzero(keep))
            joined = {name: array[index_array] for name, array in joined.items()}
    batch.items = joined
    return batch


#: DLPack device types whose memory the host can read: kDLCPU, kDLCUDAHost (pinned).
_HOST_DEVICES = (1, 3)


def output_tensor(pb_utils, name: str, array):
    """A `pb_utils.Tensor`: host arrays by value, device arrays through DLPack."""
    device = getattr(array, "__dlpack_device__", None)
    if device is None or int(device()[0]) in _HOST_DEVICES:
        return pb_utils.Tensor(name, np.ascontiguousarray(array))
    # The python backend takes C-contiguous DLPack tensors only, and checks every
    # dimension but the first: a strided row slice would pass the check and be read wrong.
    flags = getattr(array, "flags", None)
    if flags is not None and not flags.c_contiguous:
        array = array.copy(order="C")
    # CuPy arrays carry __dlpack__/__dlpack_device__; passing the object (not a raw
    # capsule) lets the backend synchronise on the producer's stream.
    return pb_utils.Tensor.from_dlpack(name, array)


def _error_response(pb_utils, error: tuple[str, str]):
    message, code = error
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, getattr(pb_utils.TritonError, code)))


def responses(pb_utils, batch: Batch, outputs: dict[str, Any]) -> list:
    """One response per request: its slice of every output, or its own error."""
    out = []
    start = 0
    for index in range(batch.n_requests):
        if index in batch.errors:
            out.append(_error_response(pb_utils, batch.errors[index]))
            continue
        stop = start + batch.counts[index]
        tensors = [output_tensor(pb_utils, name, array[start:stop]) for name, array in outputs.items()]
        out.append(pb_utils.InferenceResponse(output_tensors=tensors))
        start = stop
    return out


def one_line(exc: BaseException) -> str:
    """What an exception says, in one line: its message, or, for a multi-line message such
    as a TorchScript traceback, the last line (where the interpreter puts the error)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    text = lines[-1] if lines else type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def run_batch(pb_utils, batch: Batch, compute: Callable[[Any], dict[str, Any]], logger=None) -> list:
    """Run `compute` once on the rows of all good requests and split the result back.

    If the batched pass raises, retry request by request, so that only the requests that
    cause the error fail: INVALID_ARG for a ValueError (its message), INTERNAL otherwise
    (one line; the traceback goes to the server log).
    """
    if len(batch.errors) == batch.n_requests:
        return responses(pb_utils, batch, {})
    try:
        return responses(pb_utils, batch, compute(batch.items))
    except Exception as exc:  # noqa: BLE001 - isolate the culprit below
        if logger is not None:
            logger.log_warn(f"batched pass over {batch.n_requests} requests failed ({one_line(exc)}); "
                            "retrying request by request")
    out = []
    start = 0
    for index in range(batch.n_requests):
        if index in batch.errors:
            out.append(_error_response(pb_utils, batch.errors[index]))
            continue
        stop = start + batch.counts[index]
        rows, start = batch.rows(start, stop), stop
        try:
            result = compute(rows)
        except ValueError as exc:
            out.append(_error_response(pb_utils, (one_line(exc), "INVALID_ARG")))
            continue
        except Exception as exc:  # noqa: BLE001
            if logger is not None:
                logger.log_error(f"request {index} of the batch failed:\n{traceback.format_exc()}")
            out.append(_error_response(pb_utils, (f"internal error: {type(exc).__name__}: {one_line(exc)} "
                                                   "(the server log has the traceback)", "INTERNAL")))
            continue
        out.append(pb_utils.InferenceResponse(output_tensors=[
            output_tensor(pb_utils, name, array) for name, array in result.items()]))
    return out


# ------------------------------------------------------------------------- the model


class PythonModel:
    """One Python model instance, as an adapter holds it (see the module doc).

    The model's inputs come from its config: a BYTES input is read as texts (checked for
    UTF-8 and `MAX_TEXT_BYTES`, and with `require_words` for a word), numeric inputs as
    arrays of the config's dims (with `finite`, NaN and infinity are refused). The runner
    takes the texts, or the arrays in config order, and returns one array per output (a
    tuple for several), in config order."""

    def __init__(self, pb_utils, args: dict, require_words: bool = False, finite: bool = False):
        self.pb_utils = pb_utils
        self.args = args
        self.config = model_config(args)
        self.params = parameters(self.config)
        self.name = args.get("model_name") or self.config.get("name", "model")
        self.device: Device = instance_device(args)
        self.folder = version_dir(args)
        self.require_words, self.finite = require_words, finite
        # The ordering input (contracts.AFTER) only sequences the ensemble's steps: not read.
        self.inputs = [(spec["name"], spec["data_type"], tuple(int(d) for d in spec.get("dims", [])))
                       for spec in self.config.get("input", []) if spec["name"] != contracts.AFTER]
        self.output_names = [spec["name"] for spec in self.config.get("output", [])]
        self.text_input = len(self.inputs) == 1 and self.inputs[0][1] == "TYPE_STRING"
        self.max_text_bytes = self.int_parameter("MAX_TEXT_BYTES", contracts.DEFAULT_MAX_TEXT_BYTES)
        instances = sum(int(group.get("count", 1)) for group in self.config.get("instance_group", [])) or 1
        #: The thread plan (readability_triton.threads): this instance's threads for its
        #: runtimes, applied before a runner starts them.
        self.threads = 0  # without a plan: every runtime's own default
        if threads.enabled():
            self.threads = threads.resolve(self.int_parameter(threads.THREADS, 1, minimum=0), instances)
            threads.apply(self.threads)
        self.xp = self.device.array_module()
        #: Where each numeric input arrived, counted per request: {name: {"cpu": n, "gpu": m}}
        #: (`is_cpu()`), so that a test can show no step's output went through the host.
        self.arrivals: dict[str, dict[str, int]] = {name: {"cpu": 0, "gpu": 0} for name, kind, _ in self.inputs
                                                    if kind != "TYPE_STRING"}
        self._arrivals_file = (os.path.join(os.environ[ARRIVALS_ENV], f"{self.name}.json")
                               if os.environ.get(ARRIVALS_ENV) else None)
        #: The entrance's load shedding (parameter MAX_PENDING_REQUESTS; see triton.admission).
        pending = self.int_parameter(contracts.MAX_PENDING_REQUESTS, 0, minimum=0)
        queue_s = self.float_parameter(contracts.MAX_QUEUE_SECONDS, 0.0)
        self.admission = Admission(pending, queue_s, [m for m in contracts.STEP_MODELS if m != self.name],
                                   url=self.params.get(contracts.METRICS_URL) or None,
                                   log=lambda message: self.log(message, warn=True), refresh=0.1,
                                   background=True) if pending or queue_s else None

    # -- initialize-time helpers ---------------------------------------------------
    def int_parameter(self, name: str, default: int, minimum: int = 1) -> int:
        return int_parameter(self.params, name, default, minimum)

    def float_parameter(self, name: str, default: float) -> float:
        return float_parameter(self.params, name, default)

    def artifacts(self, names, optional=()) -> str:
        """The version folder, after checking `names` (and the `optional` files present)
        against the manifest there; see `checked_artifacts`."""
        present = [n for n in optional if os.path.isfile(os.path.join(self.folder, n))]
        folder, _ = checked_artifacts(self.args, list(names) + present)
        return folder

    def expect_dims(self, dims: dict[str, tuple[int, ...]], why: str) -> None:
        """ValueError unless each named input or output of the config has the given dims
        (`why` says where they come from)."""
        declared = {name: d for name, _, d in self.inputs}
        for spec in self.config.get("output", []):
            declared[spec["name"]] = tuple(int(d) for d in spec.get("dims", []))
        for name, want in dims.items():
            if name not in declared:
                raise ValueError(f"{self.name}: the config has no tensor {name}")
            if declared[name] != tuple(want):
                raise ValueError(f"{self.name}: {name} has dims {list(declared[name])} but {why} gives "
                                 f"{list(want)}: fix config.pbtxt or re-render it with `readability-triton assemble`")

    def expect_inputs(self, names) -> None:
        """ValueError unless the config's inputs are `names`, in this order (the order the
        runner takes them in)."""
        got = [name for name, _, _ in self.inputs]
        if got != list(names):
            raise ValueError(f"{self.name}: the config's inputs are {got}, the runner takes {list(names)}")

    def build(self, factory, *args, **kwargs):
        """`factory(*args, **kwargs)` (a runner's `from_folder`), its errors prefixed with
        the model's name."""
        try:
            return factory(*args, **kwargs)
        except (ValueError, OSError) as err:
            raise ValueError(f"{self.name}: {err}") from None

    def log(self, message: str, warn: bool = False) -> None:
        logger = self.pb_utils.Logger
        (logger.log_warn if warn else logger.log_info)(f"{self.name}: {message}")

    # -- execute ------------------------------------------------------------------
    def _outputs(self, result) -> dict[str, Any]:
        arrays = result if isinstance(result, tuple) else (result,)
        if len(arrays) != len(self.output_names):
            raise RuntimeError(f"{self.name}: the runner returned {len(arrays)} arrays for the outputs "
                               f"{', '.join(self.output_names)}")
        return dict(zip(self.output_names, arrays))

    def _report_arrivals(self, first: bool) -> None:
        if first:
            where = ", ".join(f"{n} on the {'CPU' if c['cpu'] else 'GPU'}" for n, c in self.arrivals.items())
            self.log(f"first inputs arrived: {where} (instance on {self.device})")
        if self._arrivals_file:
            with open(self._arrivals_file, "w", encoding="utf-8") as handle:
                json.dump({"model": self.name, "device": str(self.device), "inputs": self.arrivals}, handle)

    def execute(self, requests, runner) -> list:
        """One response per request: `runner` once over the good requests' rows (or, while
        the pipeline is full, UNAVAILABLE for every request: see `triton.admission`)."""
        pb = self.pb_utils
        busy = self.admission.busy() if self.admission is not None else None
        if busy is not None:
            return [_error_response(pb, (busy, "UNAVAILABLE")) for _ in requests]
        if self.text_input:
            batch = read_text_requests(pb, requests, self.inputs[0][0], self.max_text_bytes, self.require_words)
            return run_batch(pb, batch, lambda texts: self._outputs(runner(texts)), logger=pb.Logger)
        names = [name for name, _, _ in self.inputs]
        first = not any(sum(c.values()) for c in self.arrivals.values())
        batch = read_array_requests(pb, requests, names, self.xp, {name: dims for name, _, dims in self.inputs},
                                    finite=self.finite, arrivals=self.arrivals)
        self._report_arrivals(first)
        return run_batch(pb, batch, lambda arrays: self._outputs(runner(*[arrays[n] for n in names])),
                         logger=pb.Logger)
