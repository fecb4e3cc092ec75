"""Each model's `config.pbtxt` for a profile, rendered from the tensor contracts
(`contracts`) and the placement of the profile (`profiles`).

`model_repository/` in the source tree holds the canonical (`gpu`) configs, written by
`python -m readability_triton.triton.configs model_repository`; a test keeps the two
identical.
"""
from __future__ import annotations

import os

from .. import contracts as C
from .. import threads
from ..errors import AssemblyError
from . import releases
from .profiles import (
    BERT_PLATFORMS,
    CACHED_STEPS,
    DEFAULT_BERT_FORMAT,
    DEFAULT_MAX_PENDING_REQUESTS,
    DEFAULT_MAX_QUEUE_SECONDS,
    DEFAULT_TENSORRT_CACHE,
    QUEUE_TIMEOUT_S,
    placement,
    queue_delay_us,
)


def _tensor(spec: C.TensorSpec) -> str:
    dims = ", ".join(str(d) for d in spec.dims)
    optional = "\n    optional: true" if spec.optional else ""
    return f'  {{\n    name: "{spec.name}"\n    data_type: {spec.data_type}\n    dims: [ {dims} ]{optional}\n  }}'


def _tensors(key: str, specs) -> str:
    return f"{key} [\n" + ",\n".join(_tensor(s) for s in specs) + "\n]\n"


def _parameters(params: dict[str, str]) -> str:
    return "".join(f'parameters {{\n  key: "{k}"\n  value: {{ string_value: "{v}" }}\n}}\n'
                   for k, v in params.items())


def ensemble_scheduling(wiring=C.SERIAL_STEPS) -> str:
    """The `ensemble_scheduling` block of the ensemble's config for `wiring` (steps as in
    `contracts.PARALLEL_STEPS`)."""
    steps = []
    for model, inputs, outputs in wiring:
        maps = "".join(f'      input_map {{ key: "{k}" value: "{v}" }}\n' for k, v in inputs.items())
        maps += "".join(f'      output_map {{ key: "{k}" value: "{v}" }}\n' for k, v in outputs.items())
        steps.append(f'    {{\n      model_name: "{model}"\n      model_version: -1\n{maps}    }}')
    return "ensemble_scheduling {\n  step [\n" + ",\n".join(steps) + "\n  ]\n}\n"


_HEADERS = {
    C.ENSEMBLE: "The readability ensemble: TEXT -> validate -> {wiring} -> postprocess -> SCORE, BERT_SCORE, "
                "FOREST_SCORE.",
    C.VALIDATE: "The ensemble's first step: refuses what no later step may refuse (invalid UTF-8, a text "
                "over MAX_TEXT_BYTES, a text without words); passes TEXT on as VALID_TEXT.",
    C.PREPROCESS: "BERT WordPiece tokenization: TEXT -> INPUT_IDS, ATTENTION_MASK (CuPy/cuDF on a GPU "
                  "instance, the tokenizers library on a CPU one).",
    C.FEATURIZE: "The 207 readability features of ../shared/spec/features.md (CuPy on a GPU instance, "
                 "NumPy on a CPU one).",
    C.POSTPROCESS: "SCORE = weighted mean of the branch scores (BERT_WEIGHT, FOREST_WEIGHT); also emits "
                   "BERT_SCORE and FOREST_SCORE, so every ensemble output is a leaf.",
    C.BERT: "The fine-tuned BERT regressor ({format}).",
    C.FOREST: "The random forest on the readability features (Treelite checkpoint, 1/checkpoint.tl).",
}


_BERT_FILES = {"onnx": "ONNX, 1/model.onnx", "torchscript": "TorchScript, 1/model.pt"}


def tensorrt_block(max_length: int, max_batch: int, cache: str = DEFAULT_TENSORRT_CACHE) -> str:
    """The onnxruntime backend's TensorRT accelerator: FP16, an engine cache (the engine is
    built on the first request of each shape profile, then reused), and one profile for
    batches of 1 to `max_batch` texts of `max_length` tokens."""
    def shapes(batch: int) -> str:
        return ",".join(f"{name}:{batch}x{max_length}" for name in (C.INPUT_0, C.INPUT_1))

    params = {"precision_mode": "FP16", "max_workspace_size_bytes": str(1 << 30), "trt_engine_cache_enable": "1",
              "trt_engine_cache_path": cache, "trt_profile_min_shapes": shapes(1),
              "trt_profile_opt_shapes": shapes(max(1, max_batch // 4)), "trt_profile_max_shapes": shapes(max_batch)}
    body = "".join(f'        parameters {{ key: "{k}" value: "{v}" }}\n' for k, v in params.items())
    return ("optimization {\n  execution_accelerators {\n    gpu_execution_accelerator: [\n      {\n"
            f'        name: "tensorrt"\n{body}      }}\n    ]\n  }}\n}}\n')


def render_config(model: str, profile: str = "gpu", max_length: int = C.DEFAULT_MAX_LENGTH,
                  n_features: int = C.N_FEATURES, bert_weight: float = 0.5,
                  forest_weight: float = 0.5, max_text_bytes: int = C.DEFAULT_MAX_TEXT_BYTES,
                  bert_format: str = DEFAULT_BERT_FORMAT, tensorrt: bool = False,
                  tensorrt_cache: str = DEFAULT_TENSORRT_CACHE, triton_version: str = releases.TESTED,
                  max_pending_requests: int = DEFAULT_MAX_PENDING_REQUESTS,
                  max_queue_seconds: float = DEFAULT_MAX_QUEUE_SECONDS, response_cache: bool = False) -> str:
    """The `config.pbtxt` text of `model` in `profile` for Triton release `triton_version`
    (the BERT model in `bert_format`; with `tensorrt`, the onnxruntime backend builds a
    TensorRT FP16 engine for it)."""
    target = releases.release(triton_version)
    contract = C.contracts(max_length, n_features)[model]
    where = placement(model, profile, bert_format)
    if tensorrt and not (model != C.BERT or (where.backend == "onnxruntime_onnx" and where.kind == "KIND_GPU")):
        raise AssemblyError(f"--tensorrt needs the ONNX model on a GPU (the gpu or hybrid profile with "
                            f"--bert-format onnx), not {profile} with {bert_format}")
    wiring = ("(BERT branch || feature/forest branch)" if target.parallel_ensemble else
              "feature/forest branch -> BERT branch (one after the other before Triton 26.02: core#466)")
    header = _HEADERS[model].format(format=_BERT_FILES[bert_format], wiring=wiring)
    lines = [f"# {header}\n", f"# Profile: {profile}, for Triton {target.version}. Generated by "
             "readability_triton.triton.configs.\n",
             f'name: "{model}"\n']
    if where.backend == "ensemble":
        lines.append('platform: "ensemble"\n')
    elif where.backend in BERT_PLATFORMS.values():
        lines.append(f'platform: "{where.backend}"\n')
    else:
        lines.append(f'backend: "{where.backend}"\n')
    lines.append(f"max_batch_size: {C.MAX_BATCH_SIZE[model]}\n")
    lines.append(_tensors("input", contract.inputs))
    lines.append(_tensors("output", contract.outputs))
    if where.backend == "ensemble":
        lines.append(ensemble_scheduling(C.ensemble_steps(target.parallel_ensemble)))
        return "".join(lines)
    lines.append(f"dynamic_batching {{\n  max_queue_delay_microseconds: {queue_delay_us(model, where.kind)}\n"
                 "  default_queue_policy {\n    timeout_action: REJECT\n"
                 f"    default_timeout_microseconds: {int(QUEUE_TIMEOUT_S[model] * 1e6)}\n"
                 "    allow_timeout_override: true\n  }\n}\n")
    lines.append(f"instance_group [\n  {{\n    kind: {where.kind}\n    count: 1\n  }}\n]\n")
    if model == C.BERT and tensorrt:
        lines.append(tensorrt_block(max_length, C.MAX_BATCH_SIZE[C.BERT], tensorrt_cache))
    if model in CACHED_STEPS and response_cache:
        lines.append("response_cache {\n  enable: true\n}\n")
    params: dict[str, str] = {}
    if model in (C.VALIDATE, C.PREPROCESS, C.FEATURIZE):  # one limit: validate refuses first
        params[C.MAX_TEXT_BYTES] = str(max_text_bytes)
    if model == C.VALIDATE:
        params[C.MAX_PENDING_REQUESTS] = str(max_pending_requests)
        params[C.MAX_QUEUE_SECONDS] = repr(float(max_queue_seconds))
    if model == C.PREPROCESS:
        params[C.MAX_LENGTH] = str(max_length)
    if where.backend == "python":  # the thread plan (readability_triton.threads)
        params[threads.THREADS] = "0" if model == C.BERT else "1"
    if model == C.POSTPROCESS:
        params[C.BERT_WEIGHT] = repr(float(bert_weight))
        params[C.FOREST_WEIGHT] = repr(float(forest_weight))
    if where.backend == "python" and where.kind == "KIND_GPU" and model in (C.POSTPROCESS, C.BERT, C.FOREST):
        # Let the outputs of the previous GPU steps arrive on the GPU (read via DLPack).
        params["FORCE_CPU_ONLY_INPUT_TENSORS"] = "no"
    if where.backend == "fil":  # a Treelite regressor; the key's name depends on the release
        params.update(target.fil_parameters())
    if where.backend == "pytorch_libtorch":
        params["INFERENCE_MODE"] = "true"
    lines.append(_parameters(params))
    return "".join(lines)


def write_canonical(root: str) -> None:
    """Rewrite the configs of the source tree's `model_repository/` (the `gpu` profile)."""
    for model in C.ALL_MODELS:
        with open(os.path.join(root, model, "config.pbtxt"), "w", encoding="utf-8") as handle:
            handle.write(render_config(model, "gpu"))


if __name__ == "__main__":  # python -m readability_triton.triton.configs model_repository
    import sys

    write_canonical(sys.argv[1] if len(sys.argv) > 1 else "model_repository")
