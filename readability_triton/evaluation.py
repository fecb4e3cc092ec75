"""Accuracy on texts with known targets: of an artifact set, or of a served ensemble.

`artifact_predictions` computes what the models of an artifact set would serve, in
process and with the serving code: the features with the `vocabulary.json` of the set
(`featurize`), the forest with Treelite's GTIL on `checkpoint.tl`, the tokens with the
set's tokenizer at the manifest's `max_length`, the BERT score with `torch.jit` on
`model.pt`, and SCORE as `postprocess` computes it. Every file used is checked against
`manifest.json` first. A set from `train-forest` alone (no `model.pt`) gives the forest
branch only, and one with only `model.pt` the BERT branch only.

`served_predictions` asks a running `readability` ensemble for the same three outputs.
`summarize` turns predictions into RMSEs.
"""
from __future__ import annotations

import os
from contextlib import nullcontext

import numpy as np

from . import contracts
from .manifest import load_manifest, verify_files
from .serving import blend  # SCORE exactly as the postprocess model computes it

BRANCHES = ("bert", "forest", "score")


class EvaluationError(ValueError):
    """Nothing to evaluate, or inputs that do not fit together."""


def rmse(prediction, target) -> float:
    prediction = np.asarray(prediction, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    if prediction.shape != target.shape:
        raise EvaluationError(f"{prediction.shape[0]} predictions for {target.shape[0]} targets")
    if not len(target):
        raise EvaluationError("no targets")
    return float(np.sqrt(np.mean((prediction - target) ** 2)))


def best_bert_weight(bert, forest, target) -> float:
    """The BERT weight w in [0, 1] that minimises the RMSE of w·bert + (1−w)·forest on
    these texts (least squares, clipped): an optimistic figure, fitted on what it scores."""
    bert, forest, target = (np.asarray(a, dtype=np.float64) for a in (bert, forest, target))
    d = bert - forest
    denominator = float(d @ d)
    if denominator == 0.0:
        return 0.5
    return float(np.clip(d @ (target - forest) / denominator, 0.0, 1.0))


def _batches(n: int, batch_size: int):
    for start in range(0, n, batch_size):
        yield start, min(n, start + batch_size)


def artifact_predictions(directory: str, texts, *, batch_size: int = 32, bert_weight: float = 0.5,
                         forest_weight: float = 0.5, progress=None) -> dict[str, np.ndarray]:
    """float32 predictions of the artifact set in `directory`, per branch present
    (`bert`, `forest`, and `score` when both are, as `postprocess` computes it). `progress(total=..., desc=...)` gives
    an optional progress bar (a context manager with `update(n)`)."""
    if batch_size < 1:
        raise EvaluationError(f"batch size {batch_size}: must be at least 1")
    if not os.path.isdir(directory):
        raise EvaluationError(f"{directory}: no such artifact folder")
    manifest = load_manifest(directory)
    has = {name: os.path.isfile(os.path.join(directory, name))
           for name in ("checkpoint.tl", "vocabulary.json", "model.pt", "vocab.txt")}
    for first, second in (("checkpoint.tl", "vocabulary.json"), ("model.pt", "vocab.txt")):
        if has[first] != has[second]:
            present, absent = (first, second) if has[first] else (second, first)
            raise EvaluationError(f"{directory}: {present} without {absent}; the two belong together "
                                  "(train-forest writes checkpoint.tl and vocabulary.json, export-bert "
                                  "model.pt and the tokenizer files)")
    forest_ok, bert_ok = has["checkpoint.tl"], has["model.pt"]
    if not (forest_ok or bert_ok):
        raise EvaluationError(f"{directory}: neither a forest (checkpoint.tl + vocabulary.json, from "
                              "train-forest) nor a BERT model (model.pt + vocab.txt, from export-bert)")
    texts = list(texts)
    bar = progress if progress is not None else (lambda **kw: nullcontext(None))
    out: dict[str, np.ndarray] = {}
    if forest_ok:
        verify_files(directory, manifest, ["checkpoint.tl", "vocabulary.json"])
        from .features import Vocabulary, featurize
        from .forest import gtil_predict

        vocabulary = Vocabulary.load(os.path.join(directory, "vocabulary.json"))
        checkpoint = os.path.join(directory, "checkpoint.tl")
        import treelite

        model = treelite.Model.deserialize(checkpoint)
        if model.num_feature != contracts.N_FEATURES:
            raise EvaluationError(f"{checkpoint}: the forest takes {model.num_feature} features, "
                                  f"the featurize contract gives {contracts.N_FEATURES}")
        parts = []
        with bar(total=len(texts), desc="forest", unit="text") as b:
            for start, stop in _batches(len(texts), max(batch_size, 256)):
                parts.append(gtil_predict(model, featurize(texts[start:stop], vocabulary)))
                if b is not None:
                    b.update(stop - start)
        out["forest"] = np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)
    if bert_ok:
        names = ["model.pt", "vocab.txt"] + [n for n in ("tokenizer.json", "tokenizer_config.json",
                                                         "special_tokens_map.json")
                                             if os.path.isfile(os.path.join(directory, n))]
        verify_files(directory, manifest, names)
        import torch

        from .tokenization import WordPieceTokenizer

        tokenizer = WordPieceTokenizer.from_directory(directory, int(manifest["max_length"]))
        module = torch.jit.load(os.path.join(directory, "model.pt"), map_location="cpu").eval()
        parts = []
        with bar(total=len(texts), desc="bert", unit="text") as b, torch.inference_mode():
            for start, stop in _batches(len(texts), batch_size):
                ids, mask = tokenizer.encode(texts[start:stop])
                scores = module(torch.from_numpy(ids), torch.from_numpy(mask))
                parts.append(scores.float().numpy().reshape(-1))
                if b is not None:
                    b.update(stop - start)
        out["bert"] = np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)
    if forest_ok and bert_ok:
        out["score"] = blend(out["bert"], out["forest"], bert_weight, forest_weight)
    return out


#: The ensemble output that carries each branch's prediction.
SERVED = {"score": contracts.SCORE, "bert": contracts.BERT_SCORE, "forest": contracts.FOREST_SCORE}


def served_predictions(url: str, texts, *, protocol: str = "http", batch_size: int = 32,
                       progress=None, outputs=contracts.OUTPUTS) -> dict[str, np.ndarray]:
    """The ensemble's `outputs` (by default SCORE, BERT_SCORE and FOREST_SCORE) for
    `texts` from the server at `url`, keyed "score", "bert", "forest"."""
    from .client import ReadabilityClient

    texts = list(texts)
    with ReadabilityClient(url, protocol, batch_size=batch_size) as client:
        if not client.ready():
            raise EvaluationError(f"no ready '{contracts.ENSEMBLE}' model at {url} ({protocol})")
        bar = progress(total=len(texts), desc="scoring", unit="text") if progress else nullcontext(None)
        with bar as b:
            scores = client.score(texts, progress=b, outputs=outputs)
    return {branch: np.array([getattr(s, branch) for s in scores], np.float32)
            for branch, output in SERVED.items() if output in outputs}


def summarize(targets, predictions: dict[str, np.ndarray]) -> dict:
    """RMSE of each branch present, the RMSE of the best constant (the targets' own mean)
    and, when both branches are there, the best blend weight on these texts."""
    targets = np.asarray(targets, dtype=np.float64)
    report = {"texts": int(len(targets)),
              "rmse": {name: rmse(predictions[name], targets) for name in BRANCHES if name in predictions},
              "rmse_of_the_mean": rmse(np.full(len(targets), targets.mean() if len(targets) else 0.0), targets)}
    if "bert" in predictions and "forest" in predictions:
        w = best_bert_weight(predictions["bert"], predictions["forest"], targets)
        report["best_bert_weight"] = w
        report["rmse_at_best_weight"] = rmse(blend(predictions["bert"], predictions["forest"], w, 1 - w), targets)
    return report
