"""Each model's `config.pbtxt` for a profile, rendered from the tensor contracts
(`contracts`) and the placement of the profile (`profiles`).

Each config is built as Triton's own `ModelConfig` message (tritonclient's copy of the
proto: a field that does not exist or a bad enum value cannot be written) and printed in
protobuf's text format, which leaves out fields at their default: a
`max_queue_delay_microseconds` of 0 (the CPU instances) is set but not shown. Changes to a
written config are field edits (`edit_config`).

`model_repository/` in the source tree holds the canonical (`gpu`) configs, written by
`python -m readability_triton.repository.configs model_repository`; a test keeps the two
identical.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import sys
from typing import Any

from .. import contracts as C
from ..errors import AssemblyError
from . import releases
from .options import AssemblyOptions
from .profiles import (
    BERT_PLATFORMS,
    CACHED_STEPS,
    DEFAULT_TENSORRT_CACHE,
    check_fused,
    dynamic_batching,
    placement,
)
from .warmup import WARMUP_FOLDER, warmup_lengths, warmup_samples, write_warmup

#: The canonical `model_repository/`'s options: the gpu profile, every other choice at its default.
CANONICAL = AssemblyOptions("gpu")


@functools.lru_cache(maxsize=None)
def model_config_module():
    """Triton's generated ModelConfig module, tritonclient's copy. Where `tritonclient.grpc`
    does not import, whatever the error (its `__init__` raises RuntimeError without
    rapidjson), the generated file is loaded on its own: it needs only protobuf."""
    try:
        from tritonclient.grpc import model_config_pb2

        return model_config_pb2
    except Exception as exc:  # noqa: BLE001 - RuntimeError, VersionError, ...: try the file alone
        package = importlib.util.find_spec("tritonclient")
        if package is None or not package.submodule_search_locations:
            raise AssemblyError(
                f"configs are built as Triton's ModelConfig proto, which comes with tritonclient ({exc}): "
                "pip install 'readability-triton[client]'"
            ) from None
        first = exc
    path = os.path.join(list(package.submodule_search_locations)[0], "grpc", "model_config_pb2.py")
    already = sys.modules.get("tritonclient.grpc.model_config_pb2")  # imported before tritonclient.grpc failed
    if already is not None:
        return already
    try:
        spec = importlib.util.spec_from_file_location("_triton_model_config_pb2", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"no module at {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:  # noqa: BLE001 - e.g. protobuf's VersionError: name both failures
        raise AssemblyError(
            f"configs are built as Triton's ModelConfig proto: importing tritonclient.grpc failed "
            f"({type(first).__name__}: {first}) and so did loading {path} alone ({type(exc).__name__}: {exc}); "
            "install a tritonclient and the protobuf it was generated with: pip install 'readability-triton[client]'"
        ) from None
    return module


def _proto():
    """Triton's ModelConfig proto (`model_config_module`) and protobuf's text and JSON formats."""
    try:
        from google.protobuf import json_format, text_format
    except ImportError as exc:
        raise AssemblyError(
            f"configs are built as Triton's ModelConfig proto, which needs protobuf ({exc}): "
            "pip install 'readability-triton[client]'"
        ) from None
    return model_config_module(), json_format, text_format


def _tensor(spec: C.TensorSpec) -> dict:
    return {
        "name": spec.name,
        "data_type": spec.data_type,
        "dims": list(spec.dims),
        **({"optional": True} if spec.optional else {}),
    }


def ensemble_scheduling(wiring=C.SERIAL_STEPS) -> dict[str, Any]:
    """The ensemble's `ensemble_scheduling` (as ModelConfig's JSON form) for `wiring` (steps
    as in `contracts.PARALLEL_STEPS`)."""
    return {
        "step": [
            {"model_name": model, "model_version": -1, "input_map": dict(inputs), "output_map": dict(outputs)}
            for model, inputs, outputs in wiring
        ]
    }


_HEADERS = {
    C.ENSEMBLE: "The readability ensemble: TEXT -> {wiring} -> postprocess -> SCORE, BERT_SCORE, FOREST_SCORE, "
    "the interval and the formulas.",
    C.VALIDATE: "The ensemble's first step: refuses what no later step may refuse (invalid UTF-8, a text "
    "over MAX_TEXT_BYTES, a text without words); passes TEXT on as VALID_TEXT.",
    C.PREPROCESS: "BERT WordPiece tokenization: TEXT -> INPUT_IDS, ATTENTION_MASK (CuPy/cuDF on a GPU "
    "instance, the tokenizers library on a CPU one).",
    C.FEATURIZE: "The 207 readability features of docs/features.md (CuPy on a GPU instance, NumPy on a CPU one)"
    "{first}.",
    C.POSTPROCESS: "SCORE = weighted mean of the branch scores (BERT_WEIGHT, FOREST_WEIGHT); also emits "
    "BERT_SCORE and FOREST_SCORE, so every ensemble output is a leaf.",
    C.BERT: "The fine-tuned BERT regressor ({format}).",
    C.FOREST: "The random forest on the readability features (Treelite checkpoint, 1/checkpoint.tl).",
}
#: The fused repository's preprocess and featurize (`contracts.FUSED_INTO`).
_FUSED_HEADERS = {
    C.PREPROCESS: "BERT WordPiece tokenization and then, in the same model, the fine-tuned BERT regressor "
    "({format}): TEXT -> BERT_OUTPUT (fused: no separate bert model).",
    C.FEATURIZE: "The 207 readability features of docs/features.md and then, in the same model, the random "
    "forest on them (Treelite checkpoint, 1/checkpoint.tl): TEXT -> FOREST_OUTPUT, WORDS and the formulas "
    "(fused: no separate forest model){first}.",
}


_BERT_FILES = {"onnx": "ONNX, 1/model.onnx", "torchscript": "TorchScript, 1/model.pt"}


def tensorrt_optimization(buckets, max_batch: int, cache: str = DEFAULT_TENSORRT_CACHE) -> dict[str, Any]:
    """The onnxruntime backend's TensorRT accelerator (ModelConfig's `optimization`, JSON
    form): FP16, an engine cache (the engine is built on the first request of each shape
    profile, then reused: the warm-up runs each bucket), and one optimization profile per
    bucket (ONNX Runtime's TensorRT provider takes several profiles as each input named once
    per profile), for batches of 1 to `max_batch` texts of that many tokens."""

    def shapes(batch: int) -> str:
        return ",".join(f"{name}:{batch}x{length}" for length in buckets for name in (C.INPUT_0, C.INPUT_1))

    params = {
        "precision_mode": "FP16",
        "max_workspace_size_bytes": str(1 << 30),
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": cache,
        "trt_profile_min_shapes": shapes(1),
        "trt_profile_opt_shapes": shapes(max(1, max_batch // 4)),
        "trt_profile_max_shapes": shapes(max_batch),
    }
    return {"execution_accelerators": {"gpu_execution_accelerator": [{"name": "tensorrt", "parameters": params}]}}


def ragged_bert(options: AssemblyOptions) -> bool:
    """Whether bert takes its ids ragged (`bert.ragged`): the dynamic batcher then joins
    requests of every bucket, and the graph pads a batch to its widest. `options.ragged`
    None: where the onnxruntime backend serves model.onnx on the CPU, the ids vary in length
    and there is no TensorRT; True: also on a GPU (not yet run on one); False: never. An
    AssemblyError where True cannot be (another backend, TensorRT, or one bucket)."""
    where = placement(C.BERT, options.profile, options.chosen_bert_format)
    # default buckets: the joined set, which ragged batching would serve
    buckets = C.check_buckets(options.buckets, options.max_length, "buckets", AssemblyError, joined=True)
    possible = (
        where.backend == "onnxruntime_onnx" and not options.tensorrt and C.variable_length(buckets, options.max_length)
    )
    if options.ragged is None:
        return possible and where.kind == "KIND_CPU"
    if options.ragged and not possible:
        raise AssemblyError(
            "--ragged needs bert on the onnxruntime backend (a native profile with --bert-format onnx), no "
            f"--tensorrt, and more than one bucket; not {options.profile} with {options.chosen_bert_format}"
            f"{' and TensorRT' if options.tensorrt else ''}, buckets {options.buckets or 'default'}"
        )
    return bool(options.ragged)


def packed_bert(options: AssemblyOptions) -> bool:
    """Whether the ragged graph runs BERT's token-wise layers on the batch's real tokens only
    (`bert.packed`: the rows of a batch no longer padded to each other there). `options.packed`
    None: where the ragged graph serves on the CPU (on a GPU the packed graph's token count,
    a NonZero, would wait for the device each run, and it has not run on one); True: also on
    a GPU; False: never. An AssemblyError where True has no ragged graph to pack."""
    ragged = ragged_bert(options)
    if options.packed is None:
        return ragged and placement(C.BERT, options.profile, options.chosen_bert_format).kind == "KIND_CPU"
    if options.packed and not ragged:
        raise AssemblyError("--packed needs bert's ragged graph (see --ragged): the packed form is a form of it")
    return bool(options.packed)


def fine_buckets(options: AssemblyOptions) -> bool:
    """Whether the default buckets are fine (`contracts.default_buckets` joined): where
    bert's batcher joins requests of every bucket and one row costs its tokens, i.e. the
    ragged graph (`ragged_bert`: on the CPU by default, on a GPU with `--ragged`) or a
    Python bert on the CPU (which runs what it is handed by bucket, one run per bucket
    present). On a GPU a Python bert batches better with few."""
    where = placement(C.BERT, options.profile, options.chosen_bert_format)
    return ragged_bert(options) or (where.backend == "python" and where.kind == "KIND_CPU")


def bucket_set(options: AssemblyOptions) -> tuple[int, ...]:
    """The repository's sequence-length buckets: `options.buckets`, or the default for how
    bert batches (`fine_buckets`)."""
    return C.check_buckets(options.buckets, options.max_length, "buckets", AssemblyError, fine_buckets(options))


def ragged_batching(config: dict) -> None:
    """bert's config (ModelConfig's JSON form) taking its ids ragged: both inputs
    `allow_ragged_batch`, and each row's widths handed to the graph as batch inputs
    (BATCH_ITEM_SHAPE of input__0 and of input__1, int32 [rows, 1]: `contracts.ROW_WIDTHS`,
    `contracts.MASK_WIDTHS`; the mask's own, so that a request whose mask and ids differ
    in width spoils only its own rows)."""
    for tensor in config["input"]:
        tensor["allow_ragged_batch"] = True
    config["batch_input"] = [
        {"kind": "BATCH_ITEM_SHAPE", "target_name": [target], "data_type": "TYPE_INT32", "source_input": [source]}
        for target, source in ((C.ROW_WIDTHS, C.INPUT_0), (C.MASK_WIDTHS, C.INPUT_1))
    ]


def model_config(model: str, options: AssemblyOptions = CANONICAL):
    """The `ModelConfig` message of `model` as `options` shape it (`AssemblyOptions`: the
    profile, the Triton release, the BERT format; with `tensorrt`, the onnxruntime backend
    builds a TensorRT FP16 engine for BERT; `fused`: of the fused repository,
    `contracts.FUSED_INTO`; `buckets`: BERT's sequence-length buckets,
    `contracts.check_buckets`), built the way Triton reads it: a message of its own proto, so
    that a field that does not exist, or a bad enum value, cannot be written."""
    model_config_pb2, json_format, _ = _proto()
    profile, fused, tensorrt = options.profile, options.fused, options.tensorrt
    bert_format, max_length = options.chosen_bert_format, options.max_length
    target = releases.release(options.triton_version)
    check_fused(profile, fused, options.response_cache)
    if fused and model in C.FUSED_INTO:
        raise AssemblyError(f"the fused repository has no {model} model: it runs inside {C.FUSED_INTO[model]}")
    if model != C.ENSEMBLE and model not in C.step_models(target.parallel_ensemble, fused):
        raise AssemblyError(
            f"Triton {target.version} runs the serial wiring, which has no {model} model "
            "(featurize checks the text first: contracts.SERIAL_STEPS)"
        )
    buckets = bucket_set(options)
    contract = C.contracts(max_length, options.n_features, fused, buckets)[model]
    where = placement(model, profile, bert_format)
    if tensorrt and not (model != C.BERT or (where.backend == "onnxruntime_onnx" and where.kind == "KIND_GPU")):
        raise AssemblyError(
            f"--tensorrt needs the ONNX model on a GPU (the gpu or hybrid profile with "
            f"--bert-format onnx), not {profile} with {bert_format}"
        )
    config: dict = {"name": model}
    if where.backend == "ensemble":
        config["platform"] = "ensemble"
    elif where.backend in BERT_PLATFORMS.values():
        config["platform"] = where.backend
    else:
        config["backend"] = where.backend
    config.update(
        max_batch_size=C.max_batch_size(model, fused),
        input=[_tensor(s) for s in contract.inputs],
        output=[_tensor(s) for s in contract.outputs],
    )
    if where.backend == "ensemble":
        config["ensemble_scheduling"] = ensemble_scheduling(C.ensemble_steps(target.parallel_ensemble, fused))
        return json_format.ParseDict(config, model_config_pb2.ModelConfig())
    if where.backend == "fil":
        config.update(fil_io(contract))
    else:
        # a fused model waits as long as the longest wait of the models it runs (on a GPU: BERT's)
        config["dynamic_batching"] = max(
            (dynamic_batching(m, where.kind) for m in C.runs(model, fused)),
            key=lambda batching: batching["max_queue_delay_microseconds"],
        )
    if model == C.BERT and ragged_bert(options):
        ragged_batching(config)
    elif model == C.BERT and where.backend == "python" and C.variable_length(buckets, max_length):
        # a Python bert takes requests of any width (zero-padded together, then run by bucket)
        for tensor in config["input"]:
            tensor["allow_ragged_batch"] = True
    config["instance_group"] = [{"kind": where.kind, "count": 1}]
    config["model_warmup"] = warmup_samples(
        config,
        # ONNX Runtime on the CPU builds nothing per length (TorchScript's executor, and a
        # GPU's kernels, may)
        warmup_lengths(
            buckets,
            shared=model == C.BERT and fine_buckets(options) and bert_format == "onnx" and where.kind == "KIND_CPU",
        ),
    )
    if model == C.BERT and tensorrt:
        config["optimization"] = tensorrt_optimization(buckets, C.MAX_BATCH_SIZE[C.BERT], options.tensorrt_cache)
    if model in CACHED_STEPS and options.response_cache:
        config["response_cache"] = {"enable": True}
    params: dict[str, str] = {}
    if model in (C.VALIDATE, C.PREPROCESS, C.FEATURIZE):  # one limit: the first step refuses first
        params[C.MAX_TEXT_BYTES] = str(options.max_text_bytes)
    if model == C.entrance(target.parallel_ensemble):  # checks the text and sheds load (rule 3)
        if model == C.FEATURIZE:
            params[C.REQUIRE_WORDS] = "true"
        params[C.MAX_PENDING_REQUESTS] = str(options.max_pending_requests)
        params[C.MAX_QUEUE_SECONDS] = repr(float(options.max_queue_seconds))
    if model == C.PREPROCESS or (model == C.BERT and where.backend == "python"):
        params[C.MAX_LENGTH] = str(max_length)
        params[C.BUCKETS] = ",".join(map(str, buckets))
    if where.backend == "python":  # the thread plan (readability_triton.threads)
        # BERT's instance (bert, or a fused preprocess) takes the cores; every other one thread
        params[C.THREADS] = "0" if C.BERT in C.runs(model, fused) else "1"
    if model == C.POSTPROCESS:
        bert_weight, forest_weight = options.weights
        params[C.BERT_WEIGHT] = repr(bert_weight)
        params[C.FOREST_WEIGHT] = repr(forest_weight)
        if options.interval is not None:  # else postprocess answers the uncalibrated range
            params.update(options.interval.to_parameters())
    if where.backend == "python" and where.kind == "KIND_GPU" and model in (C.POSTPROCESS, C.BERT, C.FOREST):
        # Let the outputs of the previous GPU steps arrive on the GPU (read via DLPack).
        params["FORCE_CPU_ONLY_INPUT_TENSORS"] = "no"
    if where.backend == "fil":  # a Treelite regressor; the key's name depends on the release
        params.update(target.fil_parameters())
    if where.backend == "pytorch_libtorch":
        params["INFERENCE_MODE"] = "true"
    config["parameters"] = {key: {"string_value": value} for key, value in params.items()}
    return json_format.ParseDict(config, model_config_pb2.ModelConfig())


def header(model: str, options: AssemblyOptions = CANONICAL) -> str:
    """The comment lines a rendered config starts with: what the model is, and for what."""
    profile, fused = options.profile, options.fused
    target = releases.release(options.triton_version)
    wiring = (
        "validate -> (BERT branch || feature/forest branch)"
        if target.parallel_ensemble
        else "feature/forest branch (featurize checks the text first) -> BERT branch (one after the other "
        "before Triton 26.02: core#466)"
    )
    first = (
        "; the ensemble's first step: also refuses a text without words, and sheds load"
        if C.entrance(target.parallel_ensemble) == C.FEATURIZE
        else ""
    )
    if fused and model == C.ENSEMBLE:
        wiring = wiring.replace("feature/forest branch", "featurize with the forest inside").replace(
            "BERT branch", "preprocess with BERT inside"
        )
    what = (_FUSED_HEADERS if fused and model in _FUSED_HEADERS else _HEADERS)[model].format(
        format=_BERT_FILES[options.chosen_bert_format], wiring=wiring, first=first
    )
    return (
        f"# {what}\n# Profile: {profile}{' (fused)' if fused else ''}, for Triton {target.version}. Generated by "
        "readability_triton.repository.configs.\n"
    )


def fil_io(contract: C.ModelContract) -> dict[str, Any]:
    """The forest's tensors on Triton's FIL backend, non-batching.

    FIL answers a regressor's `[N, 1]` as `[N]` (rapids-triton squeezes every dimension of
    size 1 from the configured output shape), which no batching step takes as its `[-1, 1]`
    input. An output `reshape { shape: [] }` would turn it back into `[N, 1]`, but makes
    tritonserver 2.51 crash while FIL loads the model (rapids-triton reads the first element
    of the empty shape). So FIL runs non-batching: its tensors carry the batch dimension
    themselves (`[-1, F]` in, `[-1, 1]` out), the output's `reshape { shape: [-1] }` says
    that FIL writes `[N]` and Triton reports it as `[N, 1]`, and the ensemble hands the
    tensor of a non-batching step to the batching steps after it as it is (core's
    ensemble scheduler, ReshapeTensorDims). The contract's shapes, with the batch
    dimension made explicit."""
    return {
        "max_batch_size": 0,
        "input": [{**_tensor(s), "dims": [-1, *s.dims]} for s in contract.inputs],
        "output": [{**_tensor(s), "dims": [-1, *s.dims], "reshape": {"shape": [-1]}} for s in contract.outputs],
    }


def render_config(model: str, options: AssemblyOptions = CANONICAL) -> str:
    """The `config.pbtxt` text of `model` as `options` shape it: `header` + `model_config`
    in protobuf's text format."""
    _, _, text_format = _proto()
    return header(model, options) + text_format.MessageToString(model_config(model, options))


def read_config(path: str):
    """A `config.pbtxt`, parsed strictly as Triton's ModelConfig."""
    model_config_pb2, _, text_format = _proto()
    with open(path, encoding="utf-8") as handle:
        return text_format.Parse(handle.read(), model_config_pb2.ModelConfig())


def edit_config(path: str, change) -> None:
    """Change a `config.pbtxt` in place as a message: `change(config)` edits its fields; its
    comment lines stay on top."""
    _, _, text_format = _proto()
    with open(path, encoding="utf-8") as handle:
        comments = "".join(line for line in handle if line.startswith("#"))
    config = read_config(path)
    change(config)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(comments + text_format.MessageToString(config))


def repository_models(triton_version: str = releases.TESTED, fused: bool = False) -> tuple[str, ...]:
    """The models of a repository for Triton `triton_version` (`fused`: the fused one): its
    wiring's steps and the ensemble."""
    return C.step_models(releases.release(triton_version).parallel_ensemble, fused) + (C.ENSEMBLE,)


def is_fused(repo: str) -> bool:
    """Whether an assembled repository is the fused one (`assemble --fused`): its preprocess
    answers BERT_OUTPUT."""
    path = os.path.join(repo, C.PREPROCESS, "config.pbtxt")
    return os.path.isfile(path) and any(o.name == C.BERT_OUTPUT for o in read_config(path).output)


def home(repo: str, model: str) -> str:
    """The model of an assembled repository that serves `model`: the one it runs inside in
    the fused repository (bert in preprocess, the forest in featurize), else itself."""
    return C.FUSED_INTO.get(model, model) if is_fused(repo) else model


def present_models(repo: str) -> list[str]:
    """The models of an assembled repository (the serial wiring has no `validate`)."""
    return [m for m in C.ALL_MODELS if os.path.isfile(os.path.join(repo, m, "config.pbtxt"))]


def max_text_bytes(repo: str) -> int:
    """The longest text (bytes) the steps of an assembled repository accept: their
    MAX_TEXT_BYTES (the smallest, where they differ)."""
    found = []
    for model in present_models(repo):
        parameters = read_config(os.path.join(repo, model, "config.pbtxt")).parameters
        if C.MAX_TEXT_BYTES in parameters:
            found.append(int(parameters[C.MAX_TEXT_BYTES].string_value))
    return min(found, default=C.DEFAULT_MAX_TEXT_BYTES)


def write_canonical(root: str) -> None:
    """Rewrite the configs of the source tree's `model_repository/` (the `gpu` profile),
    with their warm-up inputs."""
    for model in repository_models():
        with open(os.path.join(root, model, "config.pbtxt"), "w", encoding="utf-8") as handle:
            handle.write(render_config(model, CANONICAL))
        shutil.rmtree(os.path.join(root, model, WARMUP_FOLDER), ignore_errors=True)  # no stale inputs
        write_warmup(os.path.join(root, model), model_config(model, CANONICAL))


if __name__ == "__main__":  # python -m readability_triton.repository.configs model_repository
    import sys

    write_canonical(sys.argv[1] if len(sys.argv) > 1 else "model_repository")
