"""`train-blend`: SCORE's weights for an artifact set, fitted on predictions its models did
not train on.

Given the CSV the set was trained on, the weights are fitted on the out-of-fold
predictions its training commands recorded (`train-forest --folds K`, `train-bert --folds
K` carried over by `export-bert`, `build-demo`), which must come from these very texts
(the same data digest) and the same folds and seed. Given any other CSV, the texts are
taken to be held out (refused if any of them is a text either model was trained on), and
the weights are fitted on the set's own predictions of them, computed in process as
served (`Pipeline`). Non-negative least squares with the weights
summing to 1 (`metrics.fit_blend`).
"""

from __future__ import annotations

import logging

import numpy as np

from .. import contracts
from ..data import data_digest, text_fingerprints
from ..errors import EvaluationError
from ..features.extract import count_words
from ..intervals import MIN_TEXTS, calibrate
from ..layout import Manifest, load_manifest, update_manifest
from ..metrics import BlendRecord, fit_blend
from ..pipeline import Pipeline

log = logging.getLogger(__name__)


def _bert_training(manifest: Manifest) -> dict:
    """What `train-bert` recorded about the set's BERT model (export-bert carries it into
    the manifest as `info["bert"]["export_<format>"]["training"]`); {} if nothing."""
    found: dict = {}
    for value in (manifest.info.get("bert") or {}).values():
        if isinstance(value, dict) and isinstance(value.get("training"), dict):
            if "oof" in value["training"] or not found:
                found = value["training"]
    return found


def recorded_oof(manifest: Manifest, digest: str) -> tuple[np.ndarray, np.ndarray] | None:
    """The (BERT, forest) out-of-fold predictions the set recorded on the texts of
    `digest`, with the same folds and seed; None if either branch has none."""
    forest = manifest.info.get("forest") or {}
    bert_cv = _bert_training(manifest)
    if not (forest.get("oof") and bert_cv.get("oof")):
        return None
    if forest.get("data_digest") != digest or bert_cv.get("data_digest") != digest:
        return None
    settings = bert_cv.get("settings") or {}
    if (settings.get("folds"), settings.get("seed")) != (forest.get("folds"), forest.get("seed")):
        return None
    return np.asarray(bert_cv["oof"], np.float64), np.asarray(forest["oof"], np.float64)


def set_predictions(
    folder: str, texts, targets, bert_format: str | None = None, progress=None
) -> tuple[np.ndarray, np.ndarray, str]:
    """(BERT's, the forest's predictions of `texts`, on what) for the set in `folder`: its
    recorded out-of-fold predictions where `texts` are exactly its training CSV, else its
    predictions of texts it did not train on (see the module doc)."""
    manifest = load_manifest(folder)
    y = np.asarray(targets, dtype=np.float64)
    digest = data_digest(texts, y)
    oof = recorded_oof(manifest, digest)
    if oof is not None:
        return (
            oof[0],
            oof[1],
            (
                f"out-of-fold predictions of the {len(y)} training texts "
                f"({manifest.info['forest']['folds']} folds, seed {manifest.info['forest']['seed']})"
            ),
        )
    seen = set((manifest.info.get("forest") or {}).get("texts_seen") or ()) | set(
        _bert_training(manifest).get("texts_seen") or ()
    )
    overlap = sum(f in seen for f in text_fingerprints(texts))
    if overlap:
        raise EvaluationError(
            f"{overlap} of these {len(y)} texts are texts {folder}'s models were trained on, and the set has no "
            "out-of-fold predictions of both branches for exactly this CSV (train-forest --folds K and "
            "train-bert --folds K on it, same seed; build-demo fits its own weights): weights fitted on a "
            "model's predictions of its own training texts favour the branch that overfits. Pass texts the "
            "models did not see, or the exact training CSV of a set trained with --folds"
        )
    pipeline = Pipeline.from_folder(folder, bert_format=bert_format)
    if contracts.SCORE not in pipeline.outputs:
        held = [name for name in (contracts.BERT_SCORE, contracts.FOREST_SCORE) if name in pipeline.outputs]
        raise EvaluationError(f"{folder}: a blend needs both branches; it holds {', '.join(held) or 'neither'}")
    predicted = pipeline(texts, progress=progress)
    where = f"the set's predictions of {len(y)} texts it did not train on (as served, in process)"
    bert, forest = predicted[contracts.BERT_SCORE], predicted[contracts.FOREST_SCORE]
    return bert.astype(np.float64), forest.astype(np.float64), where


def fit_set_blend(folder: str, texts, targets, bert_format: str | None = None, progress=None) -> BlendRecord:
    """The blend record for the set in `folder` (see the module doc): the weights, the
    RMSEs they were fitted with, and on what."""
    bert, forest, where = set_predictions(folder, texts, targets, bert_format, progress)
    record = fit_blend(bert, forest, np.asarray(targets, dtype=np.float64))
    record["fitted_on"] = where
    return record


def train_blend(
    folder: str, texts, targets, bert_format: str | None = None, progress=None, data: dict | None = None
) -> BlendRecord:
    """`train-blend`: the blend fitted as `fit_set_blend` does, recorded as the `blend`
    section of the set's manifest.json (with `data`, where the texts came from), where
    `assemble` reads it; and the intervals calibrated on the same predictions (the
    `interval` section, `intervals.calibrate`)."""
    y = np.asarray(targets, dtype=np.float64)
    bert, forest, where = set_predictions(folder, texts, y, bert_format, progress)
    record = fit_blend(bert, forest, y)
    record["fitted_on"] = where
    if data is not None:
        record["data"] = data
    update_manifest(folder, "blend", record)
    if len(y) < MIN_TEXTS:
        # an interval calibrated for other weights would not be this blend's: none is recorded
        log.warning(
            f"{len(y)} texts are too few to calibrate intervals (at least {MIN_TEXTS}): the set answers "
            f"SCORE_LOW and SCORE_HIGH as the scale's range; run train-blend on more texts"
        )
        update_manifest(folder, "interval", {})
        return record
    calibration = calibrate(
        y, bert, forest, count_words(texts), (record["bert_weight"], record["forest_weight"]), source=where
    )
    update_manifest(folder, "interval", calibration.to_dict())
    return record
