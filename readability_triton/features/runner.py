"""`FeatureRunner`: the features of a batch of texts with an artifact set's vocabulary."""

from __future__ import annotations

import os

from ..device import Device, as_device
from ..layout import MANIFEST, VOCABULARY, Manifest, load_manifest
from .extract import featurize, served_outputs
from .formulas import FORMULAS, Formulas
from .vocabulary import Vocabulary


class FeatureRunner:
    """texts -> float32 features `(len(texts), 7 + 2n)` on the runner's device."""

    FILES = (VOCABULARY,)

    def __init__(self, vocabulary: Vocabulary, device: Device | str | None = None):
        self.vocabulary = vocabulary
        self.device = as_device(device)
        self.xp = self.device.array_module()
        self(["warm up"])  # the device's tables (on a GPU, the kernels too) now, not at the first request

    @classmethod
    def from_folder(
        cls, folder: str, device: Device | str | None = None, manifest: Manifest | None = None
    ) -> "FeatureRunner":
        """`vocabulary.json` in `folder`; when the folder has a manifest (`manifest`, where
        the caller read it already), its feature count must be the vocabulary's."""
        vocabulary = Vocabulary.load(os.path.join(folder, VOCABULARY))
        if manifest is None and os.path.isfile(os.path.join(folder, MANIFEST)):
            manifest = load_manifest(folder)
        if manifest is not None:
            recorded = manifest.n_features
            if recorded != vocabulary.n_features:
                raise ValueError(
                    f"manifest.json in {folder} says {recorded} features but {VOCABULARY} gives "
                    f"{vocabulary.n_features}; the forest and the vocabulary must come from the "
                    "same training run"
                )
        return cls(vocabulary, device)

    @property
    def n_features(self) -> int:
        return self.vocabulary.n_features

    def describe(self) -> str:
        how = f"{self.xp.__name__}, CUDA kernels" if self.device.is_gpu else self.xp.__name__
        return f"{self.n_features} features on {self.device} ({how})"

    def __call__(self, texts):
        return featurize(texts, self.vocabulary, xp=self.xp)


class FeaturizeRunner(FeatureRunner):
    """What the `featurize` step answers: FEATURES; each text's word count as WORDS
    (postprocess's length band; the first column of FEATURES, not counted again); and the
    seven classic formulas (contracts.FORMULAS, `formulas.Formulas`), each a `[n, 1]`
    column, computed in the same pass from the same spec words (counted as the formulas
    count words and sentences: docs/formulas.md)."""

    def __init__(self, vocabulary: Vocabulary, device: Device | str | None = None):
        self.formulas = Formulas.load(as_device(device))
        super().__init__(vocabulary, device)  # (its warm-up builds this runner's tables: features and lexicon)

    def describe(self) -> str:
        return f"{super().describe()}; WORDS and {len(FORMULAS)} formulas ({', '.join(FORMULAS)})"

    def __call__(self, texts):
        return served_outputs(texts, self.vocabulary, self.formulas, xp=self.xp)
