"""Model repositories: `assemble` copies an artifact set into one for a profile (configs
rendered by `configs`, the Python models linked from `backends/`, the canary recorded);
then what a served repository holds (its BERT format, the backends it needs) and the
in-process pipeline that computes what it serves.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from importlib import resources

import numpy as np

from .. import contracts as C
from .. import layout as M
from .. import threads
from ..bert.ragged import check_raggable, raggedize
from ..bert.runner import bert_runner
from ..buckets import describe_buckets
from ..errors import AssemblyError
from ..features.extract import count_words
from ..features.formulas import Formulas
from ..features.runner import FeaturizeRunner
from ..forest.arrays import FOREST_ARRAYS, export_forest_arrays
from ..forest.runner import GTILRunner
from ..intervals import IntervalParameters, check_level, for_blend
from ..pipeline import Pipeline
from ..scoring import Blender, weight_pair
from ..tokenizer.runner import TokenizerRunner
from . import releases
from .canary import CANARY, Canary
from .configs import (
    bucket_set,
    edit_config,
    home,
    packed_bert,
    present_models,
    ragged_bert,
    read_config,
    render_config,
    repository_models,
)
from .options import AssemblyOptions
from .profiles import (
    DEFAULT_BERT_FORMAT,
    PROFILE,
    PROFILES,
    VERSION,
    backend_file,
    check_fused,
)
from .warmup import write_warmup

log = logging.getLogger(__name__)


def backends_root() -> str:
    """The folder holding `backends/<model>/model.py`: the source tree's, beside this package
    (a checkout, installed editable or on PYTHONPATH: a checkout of another commit on
    PYTHONPATH writes its own adapters, not the installed ones), else the installed
    package's (setup.cfg's package_dir)."""
    beside = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "backends")
    if os.path.isfile(os.path.join(beside, "featurize", "model.py")):
        return beside
    try:
        return str(resources.files("readability_triton._backends"))
    except ModuleNotFoundError:
        return beside


def write_configs(out: str, options: AssemblyOptions) -> None:
    """Configs, version folders and the Python models' `model.py` as `options` shape them: the
    models of the wiring of its Triton release (with `fused`, of the fused repository)."""
    for model in repository_models(options.triton_version, options.fused):
        model_dir = os.path.join(out, model)
        os.makedirs(os.path.join(model_dir, VERSION), exist_ok=True)
        with open(os.path.join(model_dir, "config.pbtxt"), "w", encoding="utf-8") as handle:
            handle.write(render_config(model, options))
        write_warmup(model_dir, read_config(os.path.join(model_dir, "config.pbtxt")))
        source = backend_file(model, options.profile, options.fused)
        if source is not None:
            shutil.copyfile(
                os.path.join(backends_root(), source, "model.py"), os.path.join(model_dir, VERSION, "model.py")
            )


def pick_bert_format(artifacts: str, profile: str, wanted: str | None = None) -> str:
    """`wanted`, or for a set that holds both formats the better one for `profile` (see
    `DEFAULT_BERT_FORMAT`), else the one it holds."""
    if wanted is None:
        found = M.bert_formats(artifacts)
        if len(found) == 2:
            return "torchscript" if PROFILE[profile].torch else DEFAULT_BERT_FORMAT
    return M.choose_bert_format(artifacts, wanted)


def assemble(artifacts: str, out: str, options: AssemblyOptions, force: bool = False) -> M.Manifest:
    """Build a complete model repository from an artifact set, as `options` shape it (the
    profile; the BERT model in `bert_format`, see `pick_bert_format`; SCORE's weights as
    given, both or none, by default the set's fitted weights (`train-blend`, `build-demo`),
    else 0.5 each; the configs Triton release `triton_version` reads; SCORE_LOW/SCORE_HIGH at
    `interval_level` from the set's calibration where it was calibrated for these weights
    (`intervals`); `fused` (the portable profiles): BERT inside preprocess and the forest
    inside featurize, two Python models fewer; `buckets`: the sequence lengths preprocess
    cuts each request's ids to, `contracts.check_buckets`). `force` replaces a folder that
    is not empty."""
    profile = options.profile
    if profile not in PROFILES:
        raise AssemblyError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
    check_fused(profile, options.fused, options.response_cache)
    try:
        releases.release(options.triton_version)
    except releases.ReleaseError as err:
        raise AssemblyError(str(err)) from None
    weight_pair(options.bert_weight, options.forest_weight, AssemblyError)  # both or neither, >= 0, positive sum
    try:
        manifest = M.check_artifacts(artifacts)
        bert_format = pick_bert_format(artifacts, profile, options.bert_format)
    except M.ManifestError as err:
        raise AssemblyError(str(err)) from None
    bert_weight, forest_weight = options.bert_weight, options.forest_weight
    if bert_weight is None or forest_weight is None:
        bert_weight, forest_weight = manifest.blend_weights or (0.5, 0.5)
    weight_pair(bert_weight, forest_weight, AssemblyError)  # the set's own weights too, before anything is written
    try:
        level = check_level(options.interval_level)
        interval = for_blend(manifest.info.get("interval"), (bert_weight, forest_weight), level)
    except ValueError as err:
        raise AssemblyError(f"--interval: {err}") from None
    options = dataclasses.replace(
        options,
        bert_format=bert_format,
        bert_weight=bert_weight,
        forest_weight=forest_weight,
        max_length=manifest.max_length,
        n_features=manifest.n_features,
        interval=interval,
    )
    C.check_buckets(options.buckets, manifest.max_length, "--buckets", AssemblyError)  # refused as --buckets
    options = dataclasses.replace(options, buckets=bucket_set(options))  # the default depends on how bert batches
    render_config(C.BERT, dataclasses.replace(options, fused=False))  # refuse early: BERT's format, TensorRT, buckets
    ragged, packed = ragged_bert(options), packed_bert(options)
    if ragged:  # before anything is written: onnx is here, and model.onnx can take that form
        check_raggable(os.path.join(artifacts, M.MODEL_ONNX))
    if os.path.exists(out):
        if not force and os.listdir(out):
            raise AssemblyError(f"{out} exists and is not empty; pass --force to replace it")
        shutil.rmtree(out)
    os.makedirs(out)
    write_configs(out, options)
    fused = options.fused
    done: dict = {}  # what raggedize did
    for model, names in {**M.MODEL_FILES, C.BERT: (M.BERT_FORMATS[bert_format],)}.items():
        target = os.path.join(out, C.FUSED_INTO.get(model, model) if fused else model, VERSION)
        for name in list(names) + M.present(artifacts, M.OPTIONAL_FILES.get(model, ())) + [M.MANIFEST]:
            if ragged and model == C.BERT and name == M.MODEL_ONNX:  # the graph that takes every bucket in one batch
                done = raggedize(os.path.join(artifacts, name), os.path.join(target, name), pack=packed)
                if packed and not done.get("packed"):
                    why = done["unpacked_why"]
                    log.warning("bert's ragged graph runs every row padded to the batch's widest: %s", why)
                continue
            shutil.copyfile(os.path.join(artifacts, name), os.path.join(target, name))
    if ragged:  # the version folder's manifest holds the file it has, and what it was made from
        record_ragged(os.path.join(out, C.BERT, VERSION), manifest, done)
    if PROFILE[profile].portable and PROFILE[profile].models == "KIND_GPU":
        # the forest as arrays, for the CuPy tree walk (no Treelite needed there)
        folder = os.path.join(out, home(out, C.FOREST), VERSION)
        export_forest_arrays(os.path.join(folder, M.CHECKPOINT), os.path.join(folder, FOREST_ARRAYS))
    record_canary(out, canary_tolerance(profile, options.tensorrt), manifest, options.weights, interval)
    return manifest


def record_ragged(folder: str, manifest: M.Manifest, done: dict) -> None:
    """Rewrite the manifest copied into bert's version folder for the ragged model.onnx
    there (`bert.ragged`): its checksum, and under `info.ragged` the exported file's and
    whether it runs packed (`raggedize`'s `done`: `packed`, or why not)."""
    files = {**manifest.files, M.MODEL_ONNX: M.sha256(os.path.join(folder, M.MODEL_ONNX))}
    ragged = {"from_sha256": manifest.files.get(M.MODEL_ONNX), "by": "bert.ragged", "packed": bool(done.get("packed"))}
    for key in ("unpacked_why", "largest_difference"):  # why not packed; how far from the plain form
        if key in done:
            ragged[key] = done[key]
    info = {**manifest.info, "ragged": ragged}
    record = dataclasses.replace(manifest, files=files, info=info)
    with open(os.path.join(folder, M.MANIFEST), "w", encoding="utf-8") as handle:
        json.dump(record.to_dict(), handle, indent=2, sort_keys=True)
        handle.write("\n")


def canary_tolerance(profile: str, tensorrt: bool = False) -> float:
    """How far a served canary answer may be from the one computed here (float32 on the CPU)
    and still be right: the same models on another runtime or device agree to ~1e-5
    (ONNX Runtime vs TorchScript: 2.3e-7; CUDA kernels sum in another order); TensorRT runs
    BERT in FP16, about 1e-2 on this scale. A config override that changes the answer
    (e.g. the blend weights) moves it by far more."""
    return 0.05 if tensorrt else 1e-3


#: Where the artifact set's manifest holds the canary's branch scores (`info.canary`): each
#: output's name, and the key a set built before the outputs had one vocabulary used.
RECORDED_CANARY = ((C.BERT_SCORE, "bert"), (C.FOREST_SCORE, "forest"))


def record_canary(repo: str, tolerance: float, manifest: M.Manifest, weights, interval=None) -> Canary | None:
    """Score the canary text with the repository's own models, in process (the runners the
    Python models run, Treelite's GTIL for the forest), and record the answers for `serve`'s
    health check (`triton.health.Canary`). Where this Python lacks a model's runtime (the
    image of a native profile has neither ONNX Runtime nor torch), take the branch scores the
    artifact set recorded when it was built (`info.canary`); without those, record nothing
    (the health check then sees only that SCORE is finite)."""
    try:
        result = repository_pipeline(repo)([CANARY])
    except ImportError as missing:
        recorded = manifest.info.get("canary") or {}
        # a set built before the outputs had one vocabulary recorded "bert" and "forest"
        scores = [recorded.get(name, recorded.get(old)) for name, old in RECORDED_CANARY]
        if recorded.get("text") != CANARY or None in scores:
            log.warning(
                "no canary recorded for %s: this Python cannot run the models (%s) and the artifact set "
                "recorded no canary scores; serve's health check will only see that SCORE is finite",
                repo,
                missing,
            )
            return None
        bert, forest = (np.array([float(score)], np.float32) for score in scores if score is not None)
        blended = Blender(weights[0], weights[1], interval=interval)(
            bert, forest, count_words([CANARY]).astype(np.float32)
        )
        # the blender answers as postprocess does, in SCORE_OUTPUTS' order
        result = dict(zip(C.SCORE_OUTPUTS, blended, strict=True))
        formulas = Formulas.load()([CANARY])  # NumPy only: every Python has what it needs
        result.update({name: formulas[:, i] for i, name in enumerate(C.FORMULAS)})
    expected = {name: float(result[name][0]) for name in C.OUTPUTS}
    canary = Canary(CANARY, expected, tolerance)
    canary.save(repo)
    return canary


def cpu_dry_run(repo: str, only=None) -> None:
    """Turn a GPU repository's instances to KIND_CPU in place: the same models, files and
    code paths, NumPy for CuPy, so that a machine without a GPU can serve it (the GPU kit's
    `--cpu-dry-run`, and the tests of the portable-gpu profile). `only`: those models alone
    (the GPU kit's `hybrid` split: the Python steps on the CPU)."""

    def to_cpu(config) -> None:
        for group in config.instance_group:
            group.kind = group.KIND_CPU

    for model in present_models(repo):
        if only is None or model in only:
            edit_config(os.path.join(repo, model, "config.pbtxt"), to_cpu)


def served_bert(repo: str) -> str:
    """What serves BERT in an assembled repository, in one line: the backend, the file and
    the thread plan."""
    bert = home(repo, C.BERT)
    config = read_config(os.path.join(repo, bert, "config.pbtxt"))
    folder = os.path.join(repo, bert, VERSION)
    model = M.MODEL_ONNX if os.path.isfile(os.path.join(folder, M.MODEL_ONNX)) else M.MODEL_PT
    padding = describe_buckets(repository_buckets(repo))
    if config.backend == "python":
        value = config.parameters[C.THREADS].string_value if C.THREADS in config.parameters else "1"
        count = sum(group.count or 1 for group in config.instance_group) or 1
        inside = f" (inside {bert})" if bert != C.BERT else ""
        return f"{model} in a Python model{inside}, {threads.resolve(int(value), count)} thread(s), {padding}"
    ragged = ""
    if config.batch_input:
        ragged = ", ragged (the batcher joins every bucket; " + (
            "the token-wise layers on the real tokens only, attention padded to the widest)"
            if packed_graph(repo)
            else "a batch padded to its widest)"
        )
    return f"{model} on Triton's {config.platform} backend (its default threads), {padding}{ragged}"


def packed_graph(repo: str) -> bool:
    """Whether an assembled repository's bert is the packed ragged graph (`record_ragged`)."""
    try:
        manifest = M.load_manifest(os.path.join(repo, home(repo, C.BERT), VERSION))
    except M.ManifestError:
        return False
    return bool(manifest.info.get("ragged", {}).get("packed"))


def repository_buckets(repo: str) -> tuple[int, ...]:
    """The sequence-length buckets of an assembled repository: preprocess's BUCKETS (absent:
    its MAX_LENGTH alone, padded)."""
    params = read_config(os.path.join(repo, C.PREPROCESS, "config.pbtxt")).parameters
    length = int(params[C.MAX_LENGTH].string_value) if C.MAX_LENGTH in params else C.DEFAULT_MAX_LENGTH
    raw = params[C.BUCKETS].string_value if C.BUCKETS in params else ""
    return C.buckets_parameter(raw, length, f"{repo}: preprocess's BUCKETS", AssemblyError)


def repository_pipeline(repo: str):
    """The in-process `Pipeline` of an assembled repository (separate or fused): the runners
    on the artifacts in its version folders, and SCORE's weights from postprocess's config.
    On the CPU."""
    if not os.path.isfile(os.path.join(repo, C.ENSEMBLE, "config.pbtxt")):
        raise AssemblyError(f"{repo}: not a readability repository (no {C.ENSEMBLE}/config.pbtxt)")
    served_by = {model: home(repo, model) for model in (C.BERT, C.FOREST)}

    def folder(model):
        return os.path.join(repo, served_by.get(model, model), VERSION)

    def planned(model):  # the thread plan the served model runs under (0 for a native backend's: its own)
        if not threads.enabled():
            return 0
        config = read_config(os.path.join(repo, served_by.get(model, model), "config.pbtxt"))
        value = config.parameters[C.THREADS].string_value if C.THREADS in config.parameters else ""
        count = sum(group.count or 1 for group in config.instance_group) or 1
        return threads.resolve(int(value), count) if value else 0

    post = read_config(os.path.join(repo, C.POSTPROCESS, "config.pbtxt"))
    params = {key: value.string_value for key, value in post.parameters.items()}
    weights = (float(params[C.BERT_WEIGHT]), float(params[C.FOREST_WEIGHT]))
    tokenizer_manifest = M.load_manifest(folder(C.PREPROCESS))
    bert_format = "onnx" if os.path.isfile(os.path.join(folder(C.BERT), M.MODEL_ONNX)) else "torchscript"
    # rows by the repository's buckets: what preprocess's cut hands a native backend, and how a Python bert runs
    buckets = repository_buckets(repo)
    bert = bert_runner(folder(C.BERT), bert_format=bert_format, threads=planned(C.BERT), buckets=buckets)
    if len(buckets) > 1 and not getattr(bert, "dynamic", True):
        raise AssemblyError(
            f"{folder(C.BERT)}: model.onnx takes one fixed sequence length, so its ids cannot be cut to "
            f"buckets: re-export it with `readability-triton export-bert` (dynamic length), or assemble with "
            f"--buckets {buckets[-1]} (every text padded)"
        )
    return Pipeline(
        tokenizer=TokenizerRunner.from_folder(
            folder(C.PREPROCESS), tokenizer_manifest.max_length, manifest=tokenizer_manifest
        ),
        bert=bert,
        features=FeaturizeRunner.from_folder(folder(C.FEATURIZE)),
        forest=GTILRunner.from_folder(folder(C.FOREST), threads=planned(C.FOREST)),
        weights=weights,
        interval=IntervalParameters.from_parameters(params),
    )
