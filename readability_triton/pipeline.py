"""What the served ensemble computes, in process: `Pipeline.from_folder(artifacts)(texts)`.

The same runners the Python models run (`TokenizerRunner` + the ONNX or TorchScript
runner for the BERT branch, `FeaturizeRunner` (features, word counts, formulas) +
`GTILRunner` for the forest branch), the first step's checks first, and
`postprocess`'s blend and interval. Every file used is checked against
`manifest.json`. A set from `train-forest` alone (no BERT model) gives the forest branch
only, and one with only the BERT model and its tokenizer the BERT branch only; half a
branch is refused. `evaluate --artifacts`, `bench` (the in-process row) and the tests'
expectations all use it. It answers the ensemble's output names (`contracts.OUTPUTS`), as
the served ensemble does.
"""

from __future__ import annotations

import os
from contextlib import nullcontext

import numpy as np

from . import contracts
from .bert.runner import bert_runner
from .errors import EvaluationError
from .features.runner import FeaturizeRunner
from .forest.runner import GTILRunner
from .intervals import for_blend
from .layout import (
    BERT_FORMATS,
    FOREST_FILES,
    TOKENIZER_FILES,
    VOCAB_TXT,
    bert_formats,
    choose_bert_format,
    load_manifest,
    present,
    verify_files,
)
from .scoring import Blender, blend_weights, weight_pair
from .texts import as_utf8
from .tokenizer.runner import TokenizerRunner
from .validation import checked_texts


class Pipeline:
    """The branches present in an artifact set, and SCORE when both are (see the module doc)."""

    def __init__(self, tokenizer=None, bert=None, features=None, forest=None, weights=(0.5, 0.5), interval=None):
        self.tokenizer, self.bert, self.features, self.forest = tokenizer, bert, features, forest
        self.blender = Blender(weights[0], weights[1], interval=interval)
        self.weights = blend_weights(*weights)  # normalised to sum 1

    @classmethod
    def from_folder(
        cls,
        folder: str,
        bert_weight: float | None = None,
        forest_weight: float | None = None,
        bert_format: str | None = None,
    ) -> "Pipeline":
        """The runners of the artifact set in `folder` (the BERT model in `bert_format`, or
        the one present: ONNX when both are); SCORE's weights are the ones given (both or
        none; default: the set's fitted weights, else 0.5 each). On the CPU."""

        if not os.path.isdir(folder):
            raise EvaluationError(f"{folder}: no such artifact folder")
        manifest = load_manifest(folder)
        found = bert_formats(folder)
        pairs = {
            "forest": FOREST_FILES,
            "bert": (BERT_FORMATS[found[0]] if found else "model.onnx or model.pt", VOCAB_TXT),
        }
        has = {
            branch: [os.path.isfile(os.path.join(folder, name)) for name in names] for branch, names in pairs.items()
        }
        for branch, flags in has.items():
            if any(flags) and not all(flags):
                first, second = pairs[branch]
                present_, absent = (first, second) if flags[0] else (second, first)
                raise EvaluationError(
                    f"{folder}: {present_} without {absent}; the two belong together "
                    "(train-forest writes checkpoint.tl and vocabulary.json, export-bert "
                    "the model and the tokenizer files)"
                )
        if not (all(has["forest"]) or all(has["bert"])):
            raise EvaluationError(
                f"{folder}: neither a forest (checkpoint.tl + vocabulary.json, from train-forest) "
                "nor a BERT model (model.onnx or model.pt + vocab.txt, from export-bert)"
            )
        runners: dict = {}
        if all(has["forest"]):
            verify_files(folder, manifest, FOREST_FILES)
            runners["features"] = FeaturizeRunner.from_folder(folder, manifest=manifest)
            runners["forest"] = GTILRunner.from_folder(folder)
            if runners["forest"].n_features != runners["features"].n_features:
                raise EvaluationError(
                    f"{folder}: the forest takes {runners['forest'].n_features} features, its "
                    f"vocabulary gives {runners['features'].n_features}"
                )
        if all(has["bert"]):
            chosen = choose_bert_format(folder, bert_format)
            verify_files(folder, manifest, [BERT_FORMATS[chosen]] + present(folder, TOKENIZER_FILES))
            runners["tokenizer"] = TokenizerRunner.from_folder(folder, manifest.max_length, manifest=manifest)
            runners["bert"] = bert_runner(
                folder, bert_format=chosen, buckets=contracts.default_buckets(manifest.max_length, joined=True)
            )
        weights = weight_pair(bert_weight, forest_weight, EvaluationError) or manifest.blend_weights or (0.5, 0.5)
        interval = for_blend(manifest.info.get("interval"), weights)
        return cls(weights=weights, interval=interval, **runners)

    @property
    def outputs(self) -> tuple[str, ...]:
        """The ensemble outputs this set computes, in the ensemble's order: BERT_SCORE with
        the BERT branch; FOREST_SCORE and the formulas (featurize computes them) with the
        forest's; SCORE and its interval with both."""
        names = {contracts.BERT_SCORE} if self.bert is not None else set()
        if self.forest is not None:
            names |= {contracts.FOREST_SCORE, *contracts.FORMULAS}
        if self.bert is not None and self.forest is not None:
            names |= {contracts.SCORE, contracts.SCORE_LOW, contracts.SCORE_HIGH}
        return tuple(name for name in contracts.OUTPUTS if name in names)

    def __call__(
        self,
        texts,
        batch_size: int = contracts.MAX_BATCH_SIZE[contracts.ENSEMBLE],
        progress=None,
        validate: bool = True,
    ) -> dict[str, np.ndarray]:
        """float32 answers by ensemble output (`outputs`: BERT_SCORE, FOREST_SCORE; SCORE,
        SCORE_LOW and SCORE_HIGH when both branches are there, the blend and its interval as
        postprocess answers them; with the forest, the seven formulas as featurize answers
        them), texts in batches of `batch_size`. With `validate`, a text the served ensemble would refuse
        is a ValueError naming it. `progress(total=..., desc=..., unit=...)` gives an
        optional progress bar (a context manager with `update(n)`)."""
        if batch_size < 1:
            raise EvaluationError(f"batch size {batch_size}: must be at least 1")
        rows = checked_texts(texts, contracts.DEFAULT_MAX_TEXT_BYTES) if validate else as_utf8(texts)
        bert, forest = contracts.BERT_SCORE, contracts.FOREST_SCORE
        parts: dict[str, list] = {
            bert: [],
            forest: [],
            contracts.WORDS: [],
            **{name: [] for name in contracts.FORMULAS},
        }
        bar = progress(total=len(rows), desc="scoring", unit="text") if progress else nullcontext(None)
        with bar as b:
            for start in range(0, len(rows), batch_size):
                chunk = rows[start : start + batch_size]
                if self.bert is not None:
                    parts[bert].append(self.bert(*self.tokenizer(chunk)).reshape(-1))
                if self.forest is not None:
                    features, words, *formulas = self.features(chunk)
                    parts[forest].append(self.forest(features).reshape(-1))
                    parts[contracts.WORDS].append(words.reshape(-1))
                    for name, column in zip(contracts.FORMULAS, formulas, strict=True):
                        parts[name].append(column.reshape(-1))
                if b is not None:
                    b.update(len(chunk))
        outputs = self.outputs
        out = {
            name: (np.concatenate(values) if values else np.zeros(0, np.float32)).astype(np.float32)
            for name, values in parts.items()
            if name in outputs
        }
        if contracts.SCORE in outputs:
            counted = parts[contracts.WORDS]
            words = (np.concatenate(counted) if counted else np.zeros(0)).astype(np.float32)
            score, _, _, low, high = self.blender(out[bert], out[forest], words)
            out.update({contracts.SCORE: score, contracts.SCORE_LOW: low, contracts.SCORE_HIGH: high})
        return {name: out[name] for name in outputs}
