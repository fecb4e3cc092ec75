"""Each composing model's warm-up (`model_warmup` in its config; Triton refuses one on an
ensemble): while it loads, the model computes one request of one row a few times, its
inputs read from `<model>/warmup/<input name>`, so that it has run before it reports READY
and a plain tritonserver's first client does not pay for the first run (16-18 times a warm
request with the tiny test set, 3 times with MiniLM, before the configs had it).

Files, not `zero_data`: Triton reads a zero or random TYPE_STRING as empty texts, which
the steps refuse (and a refused warm-up fails the load), and asks for pinned memory for
the data it generates.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import AssemblyError

#: The folder of a model's warm-up inputs (Triton reads `<model>/warmup/<input_data_file>`).
WARMUP_FOLDER = "warmup"
#: How many times each model computes the warm-up sample while it loads.
WARMUP_COUNT = 4
#: The most sequence lengths bert is warmed up at where no length builds anything of its own
#: (`warmup_lengths`).
WARMUP_WIDTHS = 9
#: The text every step that reads text is warmed with.
WARMUP_TEXT = (
    "Warming up: the model reads this text once while it loads. It has two sentences, "
    "some longer words, and a number: 42."
)
_DTYPES = {
    "TYPE_FP32": "<f4",
    "TYPE_FP16": "<f2",
    "TYPE_INT64": "<i8",
    "TYPE_INT32": "<i4",
    "TYPE_BOOL": "?",
}


def warmup_samples(config: dict, lengths=()) -> list[dict]:
    """The `model_warmup` samples of a composing model's config (in ModelConfig's JSON form,
    inputs and max_batch_size set): one row, each required input from its own file. Where a
    batching model's input has a variable length (BERT's ids: dims [-1]), one sample per
    length of `lengths` (the buckets), so that each shape has run (and on a GPU, TensorRT
    has built each profile) before the model reports READY."""
    batching = config.get("max_batch_size", 0) > 0
    required = [tensor for tensor in config["input"] if not tensor.get("optional")]
    variable = batching and any(-1 in tensor["dims"] for tensor in required)

    def sample(name: str, length: int | None) -> dict:
        inputs = {}
        for tensor in required:
            dims = [(length if batching else 1) if d == -1 else d for d in tensor["dims"]]
            suffix = f".{length}" if variable else ""
            inputs[tensor["name"]] = {
                "data_type": tensor["data_type"],
                "dims": dims,
                "input_data_file": tensor["name"] + suffix,
            }
        return {"name": name, "batch_size": 1, "count": WARMUP_COUNT, "inputs": inputs}

    if not variable:
        return [sample("one text", None)]
    if not lengths:
        raise AssemblyError(f"{config.get('name')}: an input of variable length needs the lengths to warm up with")
    return [sample(f"one text of {length} tokens", length) for length in lengths]


def warmup_lengths(buckets, shared: bool) -> tuple[int, ...]:
    """The lengths bert is warmed up at: every bucket, unless `shared` (a row costs its width
    and no length builds anything of its own: ONNX Runtime on the CPU, in the ragged graph
    or a Python bert), then at most WARMUP_WIDTHS of them spread over the range, the
    largest included (MiniLM's 4 runs at each of 32 buckets took 2.5 s on 2 vCPUs; at 9,
    0.5 s)."""
    buckets = tuple(buckets)
    if not shared or len(buckets) <= WARMUP_WIDTHS:
        return buckets
    last = len(buckets) - 1
    return tuple(dict.fromkeys(buckets[round(k * last / (WARMUP_WIDTHS - 1))] for k in range(WARMUP_WIDTHS)))


def warmup_files(config) -> dict[str, bytes]:
    """{file name: contents} of the warm-up inputs a `ModelConfig` message names: the
    warm-up text, serialized as Triton's BYTES (a 4-byte little-endian length before each
    element), for a TYPE_STRING input; ones for a number (a token id, a mask, a feature, a
    score, a word count: every step computes on them)."""
    files: dict[str, bytes] = {}
    for sample in config.model_warmup:
        for name, tensor in sample.inputs.items():
            types = tensor.DESCRIPTOR.fields_by_name["data_type"].enum_type
            dtype = types.values_by_number[tensor.data_type].name
            count = int(np.prod(list(tensor.dims), dtype=np.int64)) if len(tensor.dims) else 1
            if dtype == "TYPE_STRING":
                text = WARMUP_TEXT.encode("utf-8")
                files[tensor.input_data_file] = (len(text).to_bytes(4, "little") + text) * count
            elif dtype in _DTYPES:
                files[tensor.input_data_file] = np.ones(count, _DTYPES[dtype]).tobytes()
            else:
                raise AssemblyError(f"{config.name}: no warm-up data for input {name} of type {dtype}")
    return files


def write_warmup(model_dir: str, config) -> None:
    """The files of the warm-up sample `config` (the model's `ModelConfig` message) names,
    in `model_dir/warmup/`."""
    files = warmup_files(config)
    folder = os.path.join(model_dir, WARMUP_FOLDER)
    if files:
        os.makedirs(folder, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(folder, name), "wb") as handle:
            handle.write(data)
