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
from typing import Any

import numpy as np

from .. import contracts, layout, threads, validation
from ..device import Device
from .admission import Admission
from .phases import Phases
from .requests import read_array_requests, read_text_requests
from .responses import error_response, run_batch

#: A folder: every Python model writes where its inputs arrived to `<folder>/<model>.json`
#: after each execute (the GPU kit and the tests set it; unset in production).
ARRIVALS_ENV = "READABILITY_TRITON_ARRIVALS_DIR"

# --------------------------------------------------------------------------- device


def instance_device(args: dict) -> Device:
    """The device of a model instance, from the `args` Triton passes to `initialize`."""
    kind = str(args.get("model_instance_kind", "CPU")).upper()
    device_id = int(args.get("model_instance_device_id", 0) or 0)
    return Device("gpu" if kind == "GPU" else "cpu", device_id)


def version_dir(args: dict) -> str:
    """The model's version folder, where its artifacts are."""
    return os.path.join(args["model_repository"], str(args["model_version"]))


def checked_artifacts(args: dict, names) -> tuple[str, layout.Manifest | None]:
    """The model's version folder, after checking that each of `names` is in it and, where
    the folder holds a `manifest.json` (as `assemble` writes), has the manifest's checksum.
    Returns the folder and the manifest (None without one)."""
    folder = version_dir(args)
    for name in names:
        if not os.path.isfile(os.path.join(folder, name)):
            raise FileNotFoundError(
                f"{args.get('model_name', 'model')}: no {name} in {folder}; assemble the "
                "repository with `readability-triton assemble`"
            )
    if not os.path.isfile(os.path.join(folder, layout.MANIFEST)):
        return folder, None
    found = layout.load_manifest(folder)
    layout.verify_files(folder, found, names)
    return folder, found


# ----------------------------------------------------------------------- parameters


def model_config(args: dict) -> dict[str, Any]:
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


def bool_parameter(params: dict[str, str], name: str, default: bool = False) -> bool:
    """Parameter `name` as "true" or "false" (any case; unset: `default`)."""
    raw = params.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw not in ("true", "false"):
        raise ValueError(f"parameter {name} must be true or false, got {params[name]!r}")
    return raw == "true"


def float_parameter(params: dict[str, str], name: str, default: float) -> float:
    value = _parameter(params, name, float, "a number")
    if value is None:
        return default
    if not np.isfinite(value):
        raise ValueError(f"parameter {name} must be finite, got {params[name]!r}")
    return value


# ------------------------------------------------------------------------- the model


def _wordless(outputs: dict[str, Any]):
    """The rows whose word count (the WORDS output) is 0, on the runner's device."""
    return outputs[contracts.WORDS].reshape(-1) == 0


class PythonModel:
    """One Python model instance, as an adapter holds it (see the module doc).

    The model's inputs come from its config: a BYTES input is read as texts (checked for
    UTF-8 and `MAX_TEXT_BYTES`, and with `require_words` or the parameter REQUIRE_WORDS for
    a word: from the runner's WORDS output where it has one, else before the pass), numeric inputs as
    arrays of the config's dims (with `finite`, NaN and infinity are refused). The runner
    takes the texts, or the arrays in config order, and returns one array per output (a
    tuple for several), in config order."""

    def __init__(self, pb_utils, args: dict, require_words: bool = False, finite: bool = False):
        self.manifest: layout.Manifest | None = None  # set by artifacts()
        self.pb_utils = pb_utils
        self.args = args
        self.config = model_config(args)
        self.params = parameters(self.config)
        self.name = args.get("model_name") or self.config.get("name", "model")
        self.device: Device = instance_device(args)
        self.folder = version_dir(args)
        self.finite = finite
        #: a check of one request's arrays before they join the others (`check_requests`)
        self.request_check = None
        self.require_words = require_words or bool_parameter(self.params, contracts.REQUIRE_WORDS)
        # The ordering input (contracts.AFTER) only sequences the ensemble's steps: not read.
        self.inputs = [
            (spec["name"], spec["data_type"], tuple(int(d) for d in spec.get("dims", [])))
            for spec in self.config.get("input", [])
            if spec["name"] != contracts.AFTER
        ]
        self.output_names = [spec["name"] for spec in self.config.get("output", [])]
        # featurize first in the serial wiring: its own word counts decide, no second pass
        self.words_from_output = self.require_words and contracts.WORDS in self.output_names
        self.text_input = len(self.inputs) == 1 and self.inputs[0][1] == "TYPE_STRING"
        self.max_text_bytes = self.int_parameter(contracts.MAX_TEXT_BYTES, contracts.DEFAULT_MAX_TEXT_BYTES)
        instances = sum(int(group.get("count", 1)) for group in self.config.get("instance_group", [])) or 1
        #: The thread plan (readability_triton.threads): this instance's threads for its
        #: runtimes, applied before a runner starts them.
        self.threads = 0  # without a plan: every runtime's own default
        if threads.enabled():
            self.threads = threads.resolve(self.int_parameter(contracts.THREADS, 1, minimum=0), instances)
            threads.apply(self.threads)
        self.xp = self.device.array_module()
        #: Where each numeric input arrived, counted per request: {name: {"cpu": n, "gpu": m}}
        #: (`is_cpu()`), so that a test can show no step's output went through the host.
        self.arrivals: dict[str, dict[str, int]] = {
            name: {"cpu": 0, "gpu": 0} for name, kind, _ in self.inputs if kind != "TYPE_STRING"
        }
        self._arrivals_file = (
            os.path.join(os.environ[ARRIVALS_ENV], f"{self.name}.json") if os.environ.get(ARRIVALS_ENV) else None
        )
        #: Where execute's time goes, added up (`stub.phases`; only where the server's
        #: environment names a folder for it).
        self.phases = Phases.from_environment(self.name, str(args.get("model_instance_name") or ""))
        #: The entrance's load shedding (parameter MAX_PENDING_REQUESTS; see triton.admission).
        pending = self.int_parameter(contracts.MAX_PENDING_REQUESTS, 0, minimum=0)
        queue_s = self.float_parameter(contracts.MAX_QUEUE_SECONDS, 0.0)
        self.admission = (
            Admission(
                pending,
                queue_s,
                [m for m in contracts.STEP_MODELS if m != self.name],
                url=self.params.get(contracts.METRICS_URL) or None,
                log=lambda message: self.log(message, warn=True),
                refresh=0.1,
                background=True,
            )
            if pending or queue_s
            else None
        )

    # -- initialize-time helpers ---------------------------------------------------
    def int_parameter(self, name: str, default: int, minimum: int = 1) -> int:
        return int_parameter(self.params, name, default, minimum)

    def float_parameter(self, name: str, default: float) -> float:
        return float_parameter(self.params, name, default)

    def buckets(self, max_length: int) -> tuple[int, ...]:
        """Parameter BUCKETS (`contracts.check_buckets`; unset: `max_length` alone, padded)."""
        return contracts.buckets_parameter(
            self.params.get(contracts.BUCKETS, ""), max_length, f"{self.name}: parameter BUCKETS"
        )

    def artifacts(self, names, optional=()) -> str:
        """The version folder, after checking `names` (and the `optional` files present)
        against the manifest there (`checked_artifacts`); the manifest, read once, is kept
        as `manifest` for the runner's `from_folder`."""
        present = [n for n in optional if os.path.isfile(os.path.join(self.folder, n))]
        folder, self.manifest = checked_artifacts(self.args, list(names) + present)
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
                raise ValueError(
                    f"{self.name}: {name} has dims {list(declared[name])} but {why} gives "
                    f"{list(want)}: fix config.pbtxt or re-render it with `readability-triton assemble`"
                )

    def expect_inputs(self, names) -> None:
        """ValueError unless the config's inputs are `names`, in this order (the order the
        runner takes them in)."""
        got = [name for name, _, _ in self.inputs]
        if got != list(names):
            raise ValueError(f"{self.name}: the config's inputs are {got}, the runner takes {list(names)}")

    def check_requests(self, check) -> None:
        """`check(arrays)` ({input name: one request's array}) runs on each request before
        the batch joins them, raising RequestError for a request that must fail alone (what
        zero-padding requests of several widths together would hide: its own width)."""
        self.request_check = check

    def build(self, factory, *args, **kwargs):
        """`factory(*args, **kwargs)` (a runner's `from_folder`), its errors prefixed with
        the model's name."""
        try:
            return factory(*args, **kwargs)
        except (ValueError, OSError, ImportError) as err:
            raise ValueError(f"{self.name}: {err}") from None

    def log(self, message: str, warn: bool = False) -> None:
        logger = self.pb_utils.Logger
        (logger.log_warn if warn else logger.log_info)(f"{self.name}: {message}")

    # -- execute ------------------------------------------------------------------
    def _outputs(self, result) -> dict[str, Any]:
        arrays = result if isinstance(result, tuple) else (result,)
        if len(arrays) != len(self.output_names):
            raise RuntimeError(
                f"{self.name}: the runner returned {len(arrays)} arrays for the outputs {', '.join(self.output_names)}"
            )
        return dict(zip(self.output_names, arrays))

    def _report_arrivals(self, first: bool) -> None:
        if first:
            where = ", ".join(f"{n} on the {'CPU' if c['cpu'] else 'GPU'}" for n, c in self.arrivals.items())
            self.log(f"first inputs arrived: {where} (instance on {self.device})")
        if self._arrivals_file:
            with open(self._arrivals_file, "w", encoding="utf-8") as handle:
                json.dump({"model": self.name, "device": str(self.device), "inputs": self.arrivals}, handle)

    def execute(self, requests, runner, per_request=None) -> list:
        """One response per request: `runner` once over the good requests' rows (or, while
        the pipeline is full, UNAVAILABLE for every request: see `triton.admission`);
        `per_request`: how each request's rows are taken from the outputs
        (`responses.split`)."""
        if self.phases is None:
            return self._execute(requests, runner, None, per_request)
        return self.phases.measure(
            len(requests), lambda mark: self._execute(requests, self.phases.runner(runner), mark, per_request)
        )

    def _execute(self, requests, runner, mark, per_request=None) -> list:
        pb = self.pb_utils
        busy = self.admission.busy() if self.admission is not None else None
        if mark is not None:
            mark("gate")
        if busy is not None:
            return [error_response(pb, (busy, "UNAVAILABLE")) for _ in requests]
        if self.text_input:
            batch = read_text_requests(
                pb, requests, self.inputs[0][0], self.max_text_bytes, self.require_words and not self.words_from_output
            )
            if mark is not None:
                mark("read")
            return run_batch(
                pb,
                batch,
                lambda texts: self._outputs(runner(texts)),
                logger=pb.Logger,
                refuse=_wordless if self.words_from_output else None,
                why=validation.NO_WORDS_AT,
                per_request=per_request,
            )
        names = [name for name, _, _ in self.inputs]
        first = not any(sum(c.values()) for c in self.arrivals.values())
        batch = read_array_requests(
            pb,
            requests,
            names,
            self.xp,
            {name: dims for name, _, dims in self.inputs},
            finite=self.finite,
            arrivals=self.arrivals,
            check=self.request_check,
        )
        self._report_arrivals(first)
        if mark is not None:
            mark("read")
        return run_batch(
            pb,
            batch,
            lambda arrays: self._outputs(runner(*[arrays[n] for n in names])),
            logger=pb.Logger,
            per_request=per_request,
        )
