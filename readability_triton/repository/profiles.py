"""The profiles: where each model of the ensemble runs and on which backend, and the
queue policy of each step.

Profiles (same models, same tensor names; docs/architecture.md, "Profiles in detail"):

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

`validate` (the first step of the parallel wiring, Triton 26.02+) runs on the CPU in every
profile; the serial wiring has none (featurize checks the text first). The BERT model is ONNX
(`model.onnx`, the onnxruntime backend; optionally TensorRT FP16 on a GPU) or
TorchScript (`model.pt`, the pytorch_libtorch backend): `bert_format`.

`configs` renders each model's config.pbtxt from a profile; `repository` assembles a
model repository.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import contracts as C
from ..errors import AssemblyError


@dataclass(frozen=True)
class Profile:
    """Where the models of one profile run (see the table above)."""

    name: str
    #: preprocess, featurize and postprocess (validate is on the CPU in every profile)
    python_steps: str
    #: bert and forest
    models: str
    #: bert and forest as Python models (ONNX Runtime or torch; Treelite or the array walk),
    #: for a server with only the python backend; else Triton's own backends
    portable: bool

    @property
    def cupy(self) -> bool:
        """Python steps on the GPU: CuPy (and cuDF where it installs)."""
        return self.python_steps == "KIND_GPU"

    @property
    def torch(self) -> bool:
        """BERT run by torch in a Python model (TorchScript on the GPU, DLPack in and out)."""
        return self.portable and self.models == "KIND_GPU"


PROFILE = {
    p.name: p
    for p in (
        Profile("gpu", "KIND_GPU", "KIND_GPU", portable=False),
        Profile("hybrid", "KIND_CPU", "KIND_GPU", portable=False),
        Profile("cpu", "KIND_CPU", "KIND_CPU", portable=False),
        Profile("portable", "KIND_CPU", "KIND_CPU", portable=True),
        Profile("portable-gpu", "KIND_GPU", "KIND_GPU", portable=True),
    )
}
PROFILES = tuple(PROFILE)
#: Profiles whose bert and forest are Python models.
PORTABLE_PROFILES = tuple(name for name, p in PROFILE.items() if p.portable)
#: The backend (platform) that serves each BERT format natively.
BERT_PLATFORMS = {"onnx": "onnxruntime_onnx", "torchscript": "pytorch_libtorch"}
#: The canonical (model_repository/) format, and the one `assemble` picks when an artifact
#: set holds both: ONNX survives the PyTorch/libtorch version skew (24.10's libtorch is 2.5),
#: reaches TensorRT, and lets `portable` run without torch; on the CPU ONNX Runtime runs it at
#: 0.66-1.76x TorchScript's speed depending on the host (benchmarks/bench_bert_formats.py).
#: `portable-gpu` runs TorchScript: torch on CUDA, fed and read through DLPack.
DEFAULT_BERT_FORMAT = "onnx"
#: The TensorRT execution accelerator's parameters that the onnxruntime backend reads
#: (triton-inference-server/onnxruntime_backend, r24.10, src/onnxruntime.cc), of which
#: `configs.tensorrt_optimization` writes some.
TENSORRT_KEYS = (
    "precision_mode",
    "max_workspace_size_bytes",
    "trt_max_partition_iterations",
    "trt_min_subgraph_size",
    "int8_calibration_table_name",
    "int8_use_native_calibration_table",
    "trt_dla_enable",
    "trt_dla_core",
    "trt_engine_cache_enable",
    "trt_engine_cache_path",
    "trt_engine_cache_prefix",
    "trt_dump_subgraphs",
    "trt_force_sequential_engine_build",
    "trt_context_memory_sharing_enable",
    "trt_layer_norm_fp32_fallback",
    "trt_timing_cache_enable",
    "trt_timing_cache_path",
    "trt_force_timing_cache",
    "trt_detailed_build_log",
    "trt_build_heuristics_enable",
    "trt_sparsity_enable",
    "trt_builder_optimization_level",
    "trt_auxiliary_streams",
    "trt_tactic_sources",
    "trt_extra_plugin_lib_paths",
    "trt_profile_min_shapes",
    "trt_profile_max_shapes",
    "trt_profile_opt_shapes",
    "trt_cuda_graph_enable",
)
DEFAULT_TENSORRT_CACHE = "/tmp/readability-triton-trt"
#: Version folder of every model.
VERSION = "1"
#: Dynamic-batching queue delay (microseconds) of each step on a GPU instance, where larger
#: batches pay: how long a step waits for more requests before it runs what it has.
QUEUE_DELAY_US = {
    C.VALIDATE: 500,
    C.PREPROCESS: 1000,
    C.FEATURIZE: 1000,
    C.BERT: 2000,
    C.FOREST: 500,
    C.POSTPROCESS: 500,
}


def queue_delay_us(model: str, kind: str | None) -> int:
    """A step's queue delay: `QUEUE_DELAY_US` on a GPU instance; 0 on a CPU one, where BERT
    computes a batch of 8 no faster per text than one text alone (benchmarks/
    bench_bert_formats.py: 15.1 vs 15.5 texts/s on 2 cores) and waiting is pure latency (at
    one client it added 5.5 ms per request over the six steps); the dynamic batcher still
    batches whatever queued while the step was busy."""
    return QUEUE_DELAY_US[model] if kind == "KIND_GPU" else 0


def dynamic_batching(model: str, kind: str | None) -> dict:
    """A batching step's `dynamic_batching`: its queue delay (`queue_delay_us`) and no queue
    policy (no queue timeout, `allow_timeout_override` or `max_queue_size`).

    Any queue policy turns off the dynamic batcher's prefetching (core:
    `PriorityQueue::SupportPrefetching`). Without it the batcher hands a batch on only while
    the instance waits for one (`RateLimiter::PayloadSlotAvailable`), and a request that
    arrives after the instance has sent its answers but before it waits again wakes nobody:
    the batcher sleeps out its 500 ms default wait, unless another request arrives. Measured
    on Triton 2.51 (tests/test_queue_policy.py; docs/performance.md): a trivial model with a
    queue timeout answered 8 and 10 of 1,100-2,500 sequential requests (4 s) after ~500 ms;
    the portable tiny set stalled 1 to 9 times in 10 s at 4 and 16 clients, and served 1.02
    to 1.40 times the texts/s without one. The same gate also starves a batcher whose payloads merge (a queue
    delay, as on a GPU instance) over minutes (server#8870, core#509).

    What a queue timeout bounded is bounded elsewhere: the first step sheds load from the
    later steps' queues (`DEFAULT_MAX_QUEUE_SECONDS`, `DEFAULT_MAX_PENDING_REQUESTS`), serve's
    front door bounds the work inside, and a client's deadline cancels its request in any
    step's queue. (A `max_queue_size` is also refused synchronously by Triton 2.51, which,
    with gRPC cancellations, left ensemble requests in flight for good: `stub.admission`.)"""
    return {"max_queue_delay_microseconds": queue_delay_us(model, kind)}


#: The steps whose answers Triton's response cache keeps with `assemble --response-cache`
#: (`serve --cache-size`): bert, where the time goes. A request of texts seen before skips
#: it. Not the ensemble itself: Triton keys a cached answer by the inputs alone, not by the
#: outputs asked for, so an ensemble hit returns the outputs the first request asked for
#: (SCORE alone, or all three) whatever the next one asks (tests/test_cache.py shows it);
#: bert's requests always ask for its one output. Errors are never cached.
CACHED_STEPS = (C.BERT,)
#: The first step refuses new requests (UNAVAILABLE "busy ...") while requests have lately waited
#: this long in a later step's queue: a wait clients notice; 8 clients sending 64 texts at a
#: time reach it on 2 cores, 16 sending 1 text do not.
DEFAULT_MAX_QUEUE_SECONDS = 10.0
#: ... or while this many requests wait there, whatever they carry.
DEFAULT_MAX_PENDING_REQUESTS = 64
#: Python backend file of each Python model, per profile (folder under backends/).
PYTHON_BACKENDS = {
    C.VALIDATE: "validate",
    C.PREPROCESS: "preprocess",
    C.FEATURIZE: "featurize",
    C.POSTPROCESS: "postprocess",
}
PORTABLE_BACKENDS = {C.BERT: "bert_portable", C.FOREST: "forest_portable"}
#: ... and of the models that run another inside them, in the fused repository (`assemble --fused`).
FUSED_BACKENDS = {C.PREPROCESS: "preprocess_fused", C.FEATURIZE: "featurize_fused"}


@dataclass(frozen=True)
class Placement:
    """How one model of one profile runs."""

    backend: str  # "python", "onnxruntime_onnx", "pytorch_libtorch", "fil" or "ensemble"
    kind: str | None  # "KIND_GPU", "KIND_CPU", None for the ensemble


def placement(model: str, profile: str, bert_format: str = DEFAULT_BERT_FORMAT) -> Placement:
    """Where `model` runs in `profile` (its BERT model in `bert_format`)."""
    if profile not in PROFILE:
        raise AssemblyError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    where = PROFILE[profile]
    if model == C.ENSEMBLE:
        return Placement("ensemble", None)
    if model == C.VALIDATE:  # BYTES in, BYTES out: CPU work in every profile
        return Placement("python", "KIND_CPU")
    if model in C.PYTHON_MODELS:
        return Placement("python", where.python_steps)
    if where.portable:
        return Placement("python", where.models)
    if bert_format not in BERT_PLATFORMS:
        raise AssemblyError(f"BERT format {bert_format!r}: choose one of {', '.join(BERT_PLATFORMS)}")
    native = {C.BERT: BERT_PLATFORMS[bert_format], C.FOREST: "fil"}[model]
    return Placement(native, where.models)


def check_fused(profile: str, fused: bool, response_cache: bool = False) -> None:
    """AssemblyError unless the profile can be fused (`--fused`: its bert and forest are
    Python models, which the fused preprocess and featurize run inside them) and nothing
    asked for needs the bert model (the response cache keeps bert's answers)."""
    if fused and response_cache:
        raise AssemblyError(
            "--response-cache keeps bert's answers, and the fused repository has no bert model: assemble "
            "without --fused to cache BERT"
        )
    if fused and profile in PROFILE and not PROFILE[profile].portable:
        raise AssemblyError(
            f"--fused runs BERT and the forest inside Python models: only the portable profiles "
            f"({', '.join(PORTABLE_PROFILES)}) can be fused, not {profile}, whose bert and forest run on "
            "Triton's own backends"
        )


def backend_file(model: str, profile: str, fused: bool = False) -> str | None:
    """Folder under `backends/` whose `model.py` serves `model` in `profile` (`fused`: in the
    fused repository), if Python."""
    if placement(model, profile).backend != "python":
        return None
    if fused and model in FUSED_BACKENDS:
        return FUSED_BACKENDS[model]
    return PYTHON_BACKENDS.get(model) or PORTABLE_BACKENDS[model]
