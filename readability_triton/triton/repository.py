"""The model repository: `config.pbtxt` of every model for every profile, and assembly.

Profiles (same models, same tensor names; `../shared/design.md`):

| profile  | python steps       | bert                                   | forest                        |
|----------|--------------------|----------------------------------------|-------------------------------|
| gpu      | KIND_GPU (CuPy)    | onnxruntime or pytorch_libtorch, GPU   | fil, KIND_GPU                 |
| hybrid   | KIND_CPU (NumPy)   | onnxruntime or pytorch_libtorch, GPU   | fil, KIND_GPU                 |
| cpu      | KIND_CPU           | onnxruntime or pytorch_libtorch, CPU   | fil, KIND_CPU                 |
| portable | KIND_CPU           | python: ONNX Runtime or torch.jit      | python: Treelite on checkpoint.tl |
| portable-gpu | KIND_GPU (CuPy) | python: torch on the GPU (DLPack)      | python: CuPy tree walk (forest_arrays.npz) |

`portable-gpu` is the GPU pipeline for a server with only the python backend (e.g. the
`tritonserver` in the nvidia-pytriton wheel): every step but `validate` on the GPU, the
tensors between steps passed through DLPack.

`validate` (the first step) runs on the CPU in every profile. The BERT model is ONNX
(`model.onnx`, the onnxruntime backend; optionally TensorRT FP16 on a GPU) or
TorchScript (`model.pt`, the pytorch_libtorch backend): `bert_format`.

`model_repository/` in the source tree holds the canonical (`gpu`) configs; it is
rendered by `render_config` and a test keeps the two identical.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from importlib import resources

from .. import contracts as C
from .. import threads
from ..artifacts import manifest as M
from ..errors import AssemblyError
from ..scoring import blend_weights
from . import releases
from .health import CANARY, Canary

PROFILES = ("gpu", "hybrid", "cpu", "portable", "portable-gpu")
#: Profiles whose bert and forest are Python models.
PORTABLE_PROFILES = ("portable", "portable-gpu")
#: The backend (platform) that serves each BERT format natively.
BERT_PLATFORMS = {"onnx": "onnxruntime_onnx", "torchscript": "pytorch_libtorch"}
#: The canonical (model_repository/) format, and the one `assemble` picks when an artifact
#: set holds both: ONNX survives the PyTorch/libtorch version skew (24.10's libtorch is 2.5),
#: reaches TensorRT, and on the CPU ONNX Runtime runs it 1.55-1.76x faster than TorchScript
#: (benchmarks/bench_bert_formats.py), so `portable` needs no torch. `portable-gpu` runs
#: TorchScript: torch on CUDA, fed and read through DLPack.
DEFAULT_BERT_FORMAT = "onnx"
#: The TensorRT execution accelerator's parameters that the onnxruntime backend reads
#: (triton-inference-server/onnxruntime_backend, r24.10, src/onnxruntime.cc), of which
#: `tensorrt_block` writes some.
TENSORRT_KEYS = ("precision_mode", "max_workspace_size_bytes", "trt_max_partition_iterations", "trt_min_subgraph_size",
                 "int8_calibration_table_name", "int8_use_native_calibration_table", "trt_dla_enable", "trt_dla_core",
                 "trt_engine_cache_enable", "trt_engine_cache_path", "trt_engine_cache_prefix", "trt_dump_subgraphs",
                 "trt_force_sequential_engine_build", "trt_context_memory_sharing_enable",
                 "trt_layer_norm_fp32_fallback", "trt_timing_cache_enable", "trt_timing_cache_path",
                 "trt_force_timing_cache", "trt_detailed_build_log", "trt_build_heuristics_enable",
                 "trt_sparsity_enable", "trt_builder_optimization_level", "trt_auxiliary_streams",
                 "trt_tactic_sources", "trt_extra_plugin_lib_paths", "trt_profile_min_shapes",
                 "trt_profile_max_shapes", "trt_profile_opt_shapes", "trt_cuda_graph_enable")
DEFAULT_TENSORRT_CACHE = "/tmp/readability-triton-trt"
#: Version folder of every model.
VERSION = "1"
#: Dynamic-batching queue delay (microseconds) of each step on a GPU instance, where larger
#: batches pay: how long a step waits for more requests before it runs what it has.
QUEUE_DELAY_US = {C.VALIDATE: 500, C.PREPROCESS: 1000, C.FEATURIZE: 1000, C.BERT: 2000, C.FOREST: 500,
                  C.POSTPROCESS: 500}


def queue_delay_us(model: str, kind: str | None) -> int:
    """A step's queue delay: `QUEUE_DELAY_US` on a GPU instance; 0 on a CPU one, where BERT
    computes a batch of 8 no faster per text than one text alone (benchmarks/
    bench_bert_formats.py: 15.1 vs 15.5 texts/s on 2 cores) and waiting is pure latency (at
    one client it added 5.5 ms per request over the six steps); the dynamic batcher still
    batches whatever queued while the step was busy."""
    return QUEUE_DELAY_US[model] if kind == "KIND_GPU" else 0


#: How long a request may wait in each step's queue (seconds) before Triton refuses it with
#: UNAVAILABLE "Request timeout expired" (an asynchronous REJECT; clients retry with
#: backoff; a request may ask for less with the `timeout` parameter): the last bound, for
#: when the entrance's load shedding (below) is off or slow to see a burst. bert computes
#: 25-75 ms per text on 2 CPU cores (MiniLM), 1.6-4.8 s per request of 64 texts; every other
#: step under 10 ms per request. No step has a `max_queue_size`: Triton 2.51 refuses that
#: synchronously, and combined with gRPC cancellations it left ensemble requests in flight
#: for good (triton.admission).
QUEUE_TIMEOUT_S = {C.VALIDATE: 30.0, C.FEATURIZE: 30.0, C.FOREST: 30.0, C.PREPROCESS: 30.0, C.BERT: 60.0,
                   C.POSTPROCESS: 30.0}
#: The steps whose answers Triton's response cache keeps with `assemble --response-cache`
#: (`serve --cache-size`): bert, where the time goes. A request of texts seen before skips
#: it. Not the ensemble itself: Triton keys a cached answer by the inputs alone, not by the
#: outputs asked for, so an ensemble hit returns the outputs the first request asked for
#: (SCORE alone, or all three) whatever the next one asks (tests/test_cache.py shows it);
#: bert's requests always ask for its one output. Errors are never cached.
CACHED_STEPS = (C.BERT,)
#: validate refuses new requests (UNAVAILABLE "busy ...") while requests have lately waited
#: this long in a later step's queue: a wait clients notice, well inside the queue timeouts;
#: 8 clients sending 64 texts at a time reach it on 2 cores, 16 sending 1 text do not.
DEFAULT_MAX_QUEUE_SECONDS = 10.0
#: ... or while this many requests wait there, whatever they carry.
DEFAULT_MAX_PENDING_REQUESTS = 64
#: Python backend file of each Python model, per profile (folder under backends/).
PYTHON_BACKENDS = {C.VALIDATE: "validate", C.PREPROCESS: "preprocess", C.FEATURIZE: "featurize",
                   C.POSTPROCESS: "postprocess"}
PORTABLE_BACKENDS = {C.BERT: "bert_portable", C.FOREST: "forest_portable"}


@dataclass(frozen=True)
class Placement:
    """How one model of one profile runs."""

    backend: str  # "python", "onnxruntime_onnx", "pytorch_libtorch", "fil" or "ensemble"
    kind: str | None  # "KIND_GPU", "KIND_CPU", None for the ensemble


def placement(model: str, profile: str, bert_format: str = DEFAULT_BERT_FORMAT) -> Placement:
    if profile not in PROFILES:
        raise AssemblyError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    if model == C.ENSEMBLE:
        return Placement("ensemble", None)
    gpu_python = profile in ("gpu", "portable-gpu")
    gpu_models = profile in ("gpu", "hybrid", "portable-gpu")
    if model == C.VALIDATE:  # BYTES in, BYTES out: CPU work in every profile
        return Placement("python", "KIND_CPU")
    if model in C.PYTHON_MODELS:
        return Placement("python", "KIND_GPU" if gpu_python else "KIND_CPU")
    if profile in PORTABLE_PROFILES:
        return Placement("python", "KIND_GPU" if gpu_models else "KIND_CPU")
    if bert_format not in BERT_PLATFORMS:
        raise AssemblyError(f"BERT format {bert_format!r}: choose one of {', '.join(BERT_PLATFORMS)}")
    native = {C.BERT: BERT_PLATFORMS[bert_format], C.FOREST: "fil"}[model]
    return Placement(native, "KIND_GPU" if gpu_models else "KIND_CPU")


def backend_file(model: str, profile: str) -> str | None:
    """Folder under `backends/` whose `model.py` serves `model` in `profile`, if Python."""
    if placement(model, profile).backend != "python":
        return None
    return PYTHON_BACKENDS.get(model) or PORTABLE_BACKENDS[model]


# ---------------------------------------------------------------------- rendering


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
             "readability_triton.repository.\n",
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


# ---------------------------------------------------------------------- assembly


def backends_root() -> str:
    """The folder holding `backends/<model>/model.py` (source tree or installed package)."""
    try:
        return str(resources.files("readability_triton._backends"))  # installed (setup.cfg's package_dir)
    except ModuleNotFoundError:
        # A source checkout on PYTHONPATH, not installed: backends/ beside the package.
        return os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "backends")


def write_configs(out: str, profile: str, **render_kw) -> None:
    """Configs, version folders and the Python models' `model.py` for `profile`."""
    for model in C.ALL_MODELS:
        model_dir = os.path.join(out, model)
        os.makedirs(os.path.join(model_dir, VERSION), exist_ok=True)
        with open(os.path.join(model_dir, "config.pbtxt"), "w", encoding="utf-8") as handle:
            handle.write(render_config(model, profile, **render_kw))
        source = backend_file(model, profile)
        if source is not None:
            shutil.copyfile(os.path.join(backends_root(), source, "model.py"),
                            os.path.join(model_dir, VERSION, "model.py"))


def pick_bert_format(artifacts: str, profile: str, wanted: str | None = None) -> str:
    """`wanted`, or for a set that holds both formats the better one for `profile` (see
    `DEFAULT_BERT_FORMAT`), else the one it holds."""
    if wanted is None:
        found = M.bert_formats(artifacts)
        if len(found) == 2:
            return "torchscript" if profile == "portable-gpu" else DEFAULT_BERT_FORMAT
    return M.choose_bert_format(artifacts, wanted)


def assemble(artifacts: str, out: str, profile: str, bert_weight: float | None = None,
             forest_weight: float | None = None, max_text_bytes: int = C.DEFAULT_MAX_TEXT_BYTES,
             force: bool = False, bert_format: str | None = None, tensorrt: bool = False,
             tensorrt_cache: str = DEFAULT_TENSORRT_CACHE, triton_version: str = releases.TESTED,
             response_cache: bool = False) -> M.Manifest:
    """Build a complete model repository for `profile` from an artifact set (its BERT model
    in `bert_format`, see `pick_bert_format`; SCORE's weights as given, both or none, by
    default the set's fitted weights (`train-blend`, `build-demo`), else 0.5 each), in the
    configs Triton release `triton_version` reads."""
    if profile not in PROFILES:
        raise AssemblyError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    try:
        releases.release(triton_version)
    except releases.ReleaseError as err:
        raise AssemblyError(str(err)) from None
    if (bert_weight is None) != (forest_weight is None):
        raise AssemblyError("give both --bert-weight and --forest-weight, or neither (the set's fitted weights)")
    try:
        manifest = M.check_artifacts(artifacts)
        bert_format = pick_bert_format(artifacts, profile, bert_format)
    except M.ManifestError as err:
        raise AssemblyError(str(err)) from None
    if bert_weight is None:
        bert_weight, forest_weight = manifest.blend_weights or (0.5, 0.5)
    try:
        blend_weights(bert_weight, forest_weight)  # type: ignore[arg-type]  # the check postprocess makes at load
    except ValueError as err:
        raise AssemblyError(str(err)) from None
    render_config(C.BERT, profile, manifest.max_length, bert_format=bert_format, tensorrt=tensorrt)  # refuse early
    if os.path.exists(out):
        if not force and os.listdir(out):
            raise AssemblyError(f"{out} exists and is not empty; pass --force to replace it")
        shutil.rmtree(out)
    os.makedirs(out)
    write_configs(out, profile, max_length=manifest.max_length, n_features=manifest.n_features,
                  bert_weight=bert_weight, forest_weight=forest_weight, max_text_bytes=max_text_bytes,
                  bert_format=bert_format, tensorrt=tensorrt, tensorrt_cache=tensorrt_cache,
                  triton_version=triton_version, response_cache=response_cache)
    for model, names in {**M.MODEL_FILES, C.BERT: (M.BERT_FORMATS[bert_format],)}.items():
        target = os.path.join(out, model, VERSION)
        for name in list(names) + M.present(artifacts, M.OPTIONAL_FILES.get(model, ())) + [M.MANIFEST]:
            shutil.copyfile(os.path.join(artifacts, name), os.path.join(target, name))
    if profile == "portable-gpu":  # the forest as arrays, for the CuPy tree walk (no Treelite needed there)
        from ..forest.arrays import FOREST_ARRAYS, export_forest_arrays

        folder = os.path.join(out, C.FOREST, VERSION)
        export_forest_arrays(os.path.join(folder, M.CHECKPOINT), os.path.join(folder, FOREST_ARRAYS))
    record_canary(out, canary_tolerance(profile, tensorrt), manifest, (bert_weight, forest_weight))
    return manifest


def canary_tolerance(profile: str, tensorrt: bool = False) -> float:
    """How far a served canary answer may be from the one computed here (float32 on the CPU)
    and still be right: the same models on another runtime or device agree to ~1e-5
    (ONNX Runtime vs TorchScript: 2.3e-7; CUDA kernels sum in another order); TensorRT runs
    BERT in FP16, about 1e-2 on this scale. A config override that changes the answer
    (e.g. the blend weights) moves it by far more."""
    return 0.05 if tensorrt else 1e-3


def record_canary(repo: str, tolerance: float, manifest: M.Manifest, weights) -> Canary | None:
    """Score the canary text with the repository's own models, in process (the runners the
    Python models run, Treelite's GTIL for the forest), and record the answers for `serve`'s
    health check (`triton.health.Canary`). Where this Python lacks a model's runtime (the
    image of a native profile has neither ONNX Runtime nor torch), take the branch scores the
    artifact set recorded when it was built (`info.canary`); without those, record nothing
    (the health check then sees only that SCORE is finite)."""
    try:
        result = repository_pipeline(repo)([CANARY])
        bert, forest, score = float(result["bert"][0]), float(result["forest"][0]), float(result["score"][0])
    except ImportError:
        recorded = manifest.info.get("canary") or {}
        if recorded.get("text") != CANARY:
            return None
        bert, forest = float(recorded["bert"]), float(recorded["forest"])
        w_bert, w_forest = blend_weights(*weights)
        score = w_bert * bert + w_forest * forest
    canary = Canary(CANARY, {C.SCORE: score, C.BERT_SCORE: bert, C.FOREST_SCORE: forest}, tolerance)
    canary.save(repo)
    return canary


def cpu_dry_run(repo: str) -> None:
    """Turn a GPU repository's instances to KIND_CPU in place: the same models, files and
    code paths, NumPy for CuPy, so that a machine without a GPU can serve it (the GPU kit's
    `--cpu-dry-run`, and the tests of the portable-gpu profile)."""
    for model in C.ALL_MODELS:
        path = os.path.join(repo, model, "config.pbtxt")
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text.replace("kind: KIND_GPU", "kind: KIND_CPU"))


def read_config(path: str):
    """A `config.pbtxt`, parsed strictly with Triton's own ModelConfig proto (tritonclient's)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    with open(path, encoding="utf-8") as handle:
        return text_format.Parse(handle.read(), model_config_pb2.ModelConfig())


def served_bert(repo: str) -> str:
    """What serves BERT in an assembled repository, in one line: the backend, the file and
    the thread plan."""
    config = read_config(os.path.join(repo, C.BERT, "config.pbtxt"))
    folder = os.path.join(repo, C.BERT, VERSION)
    model = M.MODEL_ONNX if os.path.isfile(os.path.join(folder, M.MODEL_ONNX)) else M.MODEL_PT
    if config.backend == "python":
        value = config.parameters[threads.THREADS].string_value if threads.THREADS in config.parameters else "1"
        count = sum(group.count or 1 for group in config.instance_group) or 1
        return f"{model} in a Python model, {threads.resolve(int(value), count)} thread(s)"
    return f"{model} on Triton's {config.platform} backend (its default threads)"


def repository_pipeline(repo: str):
    """The in-process `Pipeline` of an assembled repository: the runners on the artifacts
    in its version folders, and SCORE's weights from postprocess's config. On the CPU."""
    from ..artifacts.pipeline import Pipeline
    from ..bert.runner import bert_runner
    from ..features.runner import FeatureRunner
    from ..forest.runner import GTILRunner
    from ..tokenizer.runner import TokenizerRunner

    def folder(model):
        return os.path.join(repo, model, VERSION)

    if not os.path.isfile(os.path.join(repo, C.ENSEMBLE, "config.pbtxt")):
        raise AssemblyError(f"{repo}: not a readability repository (no {C.ENSEMBLE}/config.pbtxt)")
    def planned(model):  # the thread plan the served model runs under (0 for a native backend's: its own)
        if not threads.enabled():
            return 0
        config = read_config(os.path.join(repo, model, "config.pbtxt"))
        value = config.parameters[threads.THREADS].string_value if threads.THREADS in config.parameters else ""
        count = sum(group.count or 1 for group in config.instance_group) or 1
        return threads.resolve(int(value), count) if value else 0

    post = read_config(os.path.join(repo, C.POSTPROCESS, "config.pbtxt"))
    weights = (float(post.parameters["BERT_WEIGHT"].string_value), float(post.parameters["FOREST_WEIGHT"].string_value))
    max_length = M.load_manifest(folder(C.PREPROCESS)).max_length
    bert_format = "onnx" if os.path.isfile(os.path.join(folder(C.BERT), M.MODEL_ONNX)) else "torchscript"
    return Pipeline(tokenizer=TokenizerRunner.from_folder(folder(C.PREPROCESS), max_length),
                    bert=bert_runner(folder(C.BERT), bert_format=bert_format, threads=planned(C.BERT)),
                    features=FeatureRunner.from_folder(folder(C.FEATURIZE)),
                    forest=GTILRunner.from_folder(folder(C.FOREST), threads=planned(C.FOREST)), weights=weights)


def backends_needed(repo: str) -> dict[str, str]:
    """{model: the backend its config names} of an assembled repository (a platform such as
    onnxruntime_onnx counts as the backend that serves it)."""
    platforms = {"onnxruntime_onnx": "onnxruntime", "pytorch_libtorch": "pytorch", "ensemble": ""}
    out = {}
    for model in C.ALL_MODELS:
        config = read_config(os.path.join(repo, model, "config.pbtxt"))
        out[model] = config.backend or platforms.get(config.platform, config.platform)
    return out


def python_forest_view(repo: str, out: str) -> str:
    """A view of `repo` whose forest runs as the Python model of the portable profile
    (Treelite's GTIL on `checkpoint.tl`, the checkpoint FIL would read), for a server without
    the FIL backend: `out` links every other model of `repo` and holds the forest's config
    and model.py. Returns `out`."""
    os.makedirs(out, exist_ok=True)
    for model in C.ALL_MODELS:
        target = os.path.join(out, model)
        if os.path.lexists(target):
            shutil.rmtree(target) if os.path.isdir(target) and not os.path.islink(target) else os.remove(target)
        if model != C.FOREST:
            os.symlink(os.path.abspath(os.path.join(repo, model)), target)
    fil = read_config(os.path.join(repo, C.FOREST, "config.pbtxt"))
    n_features = int(fil.input[0].dims[0])
    folder = os.path.join(out, C.FOREST, VERSION)
    os.makedirs(folder)
    with open(os.path.join(out, C.FOREST, "config.pbtxt"), "w", encoding="utf-8") as handle:
        handle.write(render_config(C.FOREST, "portable", n_features=n_features))
    shutil.copyfile(os.path.join(backends_root(), PORTABLE_BACKENDS[C.FOREST], "model.py"),
                    os.path.join(folder, "model.py"))
    source = os.path.join(repo, C.FOREST, VERSION)
    for name in os.listdir(source):
        os.symlink(os.path.abspath(os.path.join(source, name)), os.path.join(folder, name))
    return out


def servable(server, repo: str, say=lambda message: None) -> str:
    """The repository to hand `server` (a `TritonServer`): `repo`, or a view of it whose
    forest runs as a Python model when the server has no FIL backend (RAPIDS' FIL is not
    built here), in a temporary folder the caller removes; `say` gets one line on what runs
    where. A backend that is missing otherwise is a ValueError that says how to get it."""
    import tempfile

    from .server import available_backends, prepare_backends

    if not os.path.isfile(os.path.join(repo, C.ENSEMBLE, "config.pbtxt")):
        return repo
    if not server.home:
        prepare_backends(server.backend_dir, server.native)
    have = available_backends(server.backend_dir)
    needed = backends_needed(repo)
    missing = {model: backend for model, backend in needed.items() if backend and backend not in have}
    if missing.get(C.FOREST) == "fil":
        missing.pop(C.FOREST)
        repo = python_forest_view(repo, tempfile.mkdtemp(prefix="readability-triton-view-"))
        say("this tritonserver has no FIL backend: the forest runs as a Python model (Treelite's GTIL on the same "
            "checkpoint.tl), as in the portable profile")
        needed = backends_needed(repo)
    if missing:
        raise ValueError(f"this tritonserver has no backend for {', '.join(f'{m} ({b})' for m, b in missing.items())} "
                         f"(in {server.backend_dir}): build Triton's own with `make native-backends`, serve an NGC "
                         "image's tritonserver with --tritonserver, or assemble --profile portable")
    say("backends: " + ", ".join(f"{m} on {b}" for m, b in needed.items() if b))
    return repo


def write_canonical(root: str) -> None:
    """Rewrite the configs of the source tree's `model_repository/` (the `gpu` profile)."""
    for model in C.ALL_MODELS:
        with open(os.path.join(root, model, "config.pbtxt"), "w", encoding="utf-8") as handle:
            handle.write(render_config(model, "gpu"))


if __name__ == "__main__":  # python -m readability_triton.repository model_repository
    import sys

    write_canonical(sys.argv[1] if len(sys.argv) > 1 else "model_repository")
