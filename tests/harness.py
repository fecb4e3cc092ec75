"""Run a `backends/<model>/model.py` in-process, with the pb_utils stub, as Triton would.

`load_model(model_dir)` reads `model_dir/config.pbtxt` the way Triton does (strictly,
as Triton's `ModelConfig` proto, handed to `initialize` as JSON with int64 as strings),
imports `model_dir/1/model.py` under a fresh name and calls `initialize`.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import itertools
import json
import os

import numpy as np
import pytest
import triton_python_backend_utils as pb_utils
from google.protobuf import json_format, text_format

from readability_triton import contracts
from readability_triton.repository import assemble as repository
from readability_triton.repository import configs, profiles
from readability_triton.repository.options import AssemblyOptions
from readability_triton.texts import to_rows

_counter = itertools.count()


def model_config_pb2():
    """Triton's ModelConfig proto module, as the configs are built with it (from tritonclient,
    or its generated file alone where `tritonclient.grpc` cannot be imported: the GPU kit's
    machine has no rapidjson)."""
    return configs.model_config_module()


def parse_config(path: str):
    with open(path, encoding="utf-8") as handle:
        return text_format.Parse(handle.read(), model_config_pb2().ModelConfig())


def config_json(path: str) -> str:
    message = parse_config(path)
    return json.dumps(json_format.MessageToDict(message, preserving_proto_field_name=True))


def initialize_args(model_dir: str, kind: str = "CPU", device_id: int = 0, version: str = "1") -> dict:
    """The `args` Triton passes to `initialize` for the model in `model_dir`."""
    name = os.path.basename(os.path.normpath(model_dir))
    return {
        "model_config": config_json(os.path.join(model_dir, "config.pbtxt")),
        "model_instance_kind": kind,
        "model_instance_name": f"{name}_0",
        "model_instance_device_id": str(device_id),
        "model_repository": os.path.abspath(model_dir),
        "model_version": version,
        "model_name": name,
    }


def load_benchmark(name: str):
    """`benchmarks/<name>.py` imported as a module (the benchmarks are scripts, not a package)."""
    source = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_model(model_dir: str, kind: str = "CPU", device_id: int = 0, version: str = "1"):
    """Import and initialize the Python model in `model_dir` (a folder of a repository)."""
    name = os.path.basename(os.path.normpath(model_dir))
    source = os.path.join(model_dir, version, "model.py")
    spec = importlib.util.spec_from_file_location(f"_triton_model_{name}_{next(_counter)}", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    model.initialize(initialize_args(model_dir, kind, device_id, version))
    return model


def make_model_dir(
    root: str, model: str, profile: str = "portable", files: dict[str, str] | None = None, **render_kw
) -> str:
    """A one-model folder: rendered config, the backend's model.py, and artifact files copied in.
    `validate` is rendered for the wiring that has it (the parallel one, Triton 26.02+); with
    `fused=True`, the fused repository's model and adapter."""
    import shutil

    if model == contracts.VALIDATE:
        render_kw.setdefault("triton_version", "26.02")

    model_dir = os.path.join(root, model)
    os.makedirs(os.path.join(model_dir, "1"), exist_ok=True)
    with open(os.path.join(model_dir, "config.pbtxt"), "w", encoding="utf-8") as handle:
        handle.write(configs.render_config(model, AssemblyOptions(profile, **render_kw)))
    source = profiles.backend_file(model, profile, render_kw.get("fused", False))
    shutil.copyfile(
        os.path.join(repository.backends_root(), source, "model.py"), os.path.join(model_dir, "1", "model.py")
    )
    for name, path in (files or {}).items():
        shutil.copyfile(path, os.path.join(model_dir, "1", name))
    return model_dir


def text_request(texts, name: str = "TEXT"):
    """A request with a [len(texts), 1] BYTES input (str items are UTF-8 encoded)."""
    array = to_rows([t.encode("utf-8") if isinstance(t, str) else t for t in texts])
    return pb_utils.InferenceRequest(inputs=[pb_utils.Tensor(name, array)])


def array_request(**arrays):
    return pb_utils.InferenceRequest(inputs=[pb_utils.Tensor(k, np.asarray(v)) for k, v in arrays.items()])


def output(response, name: str) -> np.ndarray:
    assert not response.has_error(), response.error().message()
    tensor = pb_utils.get_output_tensor_by_name(response, name)
    assert tensor is not None, f"no output {name}"
    return tensor.as_numpy()


def write_csv(path, rows, header=("id", "excerpt", "target")):
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        if header:
            writer.writerow(header)
        writer.writerows(rows)
    return str(path)


def check_png(path, min_width: int):
    """A PNG that matplotlib reads back, as wide as its panels, with more than a blank page."""
    import pytest

    image = pytest.importorskip("matplotlib.image").imread(str(path))
    assert image.ndim == 3 and image.shape[1] >= min_width and image.shape[0] >= 300
    rgb = image[..., :3]
    assert float(rgb.std()) > 0.05  # axes, lines, bars and labels, not a blank page
    pixels = rgb.reshape(-1, 3)
    assert int((pixels.max(axis=1) - pixels.min(axis=1) > 0.15).sum()) >= 30  # something drawn in colour


def tiny_bert_config(**extra):
    """A 2-layer, 32-wide BERT config on the real uncased vocabulary: trains in seconds."""
    from transformers import BertConfig

    return BertConfig(
        vocab_size=30522,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        **extra,
    )


def save_bert_checkpoint(directory, model, max_length: int):
    """`model` saved as a Hugging Face checkpoint folder with the packaged tokenizer files."""
    from readability_triton.training.bert_checkpoint import write_tokenizer
    from readability_triton.training.demo import minilm_directory

    model.save_pretrained(str(directory))
    write_tokenizer(minilm_directory(), str(directory), max_length)
    return str(directory)


@functools.lru_cache(maxsize=None)
def hf_tokenizer(directory):
    from transformers import BertTokenizerFast

    return BertTokenizerFast.from_pretrained(directory)


def hf_encode(directory, texts, max_length):
    out = hf_tokenizer(directory)(
        list(texts), padding="max_length", truncation=True, max_length=max_length, return_tensors="np"
    )
    return out["input_ids"].astype(np.int64), out["attention_mask"].astype(np.int64)


@functools.lru_cache(maxsize=None)
def host_kernels():
    """The kernels' CPU build (readability_triton/kernels/host.py), built once per session."""
    from readability_triton.kernels import host

    if host.compiler() is None:
        pytest.skip("no C++ compiler for the kernels' CPU build: install build-essential (CI has it)")
    return host.build()


class CupyLikeRules:
    """NumPy behind the array-module interface, with the CuPy limits this code must
    respect: no ufunc.reduceat, `repeat` only with a scalar count, `bincount` of an empty
    array fails, and `cuda.runtime.getDevice()` exists; `RawModule` runs the kernels' CPU
    build."""

    class cuda:
        class runtime:
            @staticmethod
            def getDevice():
                return 0

        class _Stream:
            @staticmethod
            def synchronize():
                pass

        @staticmethod
        def get_current_stream():
            return CupyLikeRules.cuda._Stream()

    __name__ = "cupy_like"

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def repeat(a, repeats, axis=None):
        if isinstance(repeats, np.ndarray) and repeats.ndim > 0:
            raise ValueError("cupy.ndarray cannot be specified as `repeats` argument")
        return np.repeat(a, repeats, axis)

    @staticmethod
    def bincount(x, weights=None, minlength=None):
        int(np.max(x))  # what CuPy does (fails on an empty array)
        return np.bincount(x, weights=weights, minlength=minlength)

    class add:
        def __new__(cls, *args, **kwargs):
            return np.add(*args, **kwargs)

    @staticmethod
    def RawModule(code, options=()):
        from readability_triton.kernels.host import HostRawModule

        return HostRawModule(host_kernels(), code, options)


def output_selections(outputs=None, samples: int = 8, seed: int = 0) -> list[list[str] | None]:
    """The output selections the served tests ask for: None (all), every output alone, every
    output beside the next one, all of them, and `samples` seeded subsets of 3 or more (every
    subset of a dozen outputs would be 4,095 requests a client)."""
    import random

    from readability_triton import contracts as C

    outputs = list(outputs or C.OUTPUTS)
    chosen = [[name] for name in outputs]
    chosen += [[outputs[i], outputs[(i + 1) % len(outputs)]] for i in range(len(outputs))] if len(outputs) > 2 else []
    if len(outputs) > 3:
        rng = random.Random(seed)
        chosen += [
            sorted(rng.sample(outputs, rng.randint(3, len(outputs) - 1)), key=outputs.index) for _ in range(samples)
        ]
    chosen.append(outputs)
    unique = []
    for selection in chosen:
        if selection not in unique:
            unique.append(selection)
    return [None, *unique]
