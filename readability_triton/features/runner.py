"""`FeatureRunner`: the features of a batch of texts with an artifact set's vocabulary."""

from __future__ import annotations

import os

from ..device import Device, as_device
from ..layout import MANIFEST, VOCABULARY, Manifest, load_manifest
from .extract import featurize
from .vocabulary import Vocabulary


class FeatureRunner:
    """texts -> float32 features `(len(texts), 7 + 2n)` on the runner's device."""

    FILES = (VOCABULARY,)

    def __init__(self, vocabulary: Vocabulary, device: Device | str | None = None):
        self.vocabulary = vocabulary
        self.device = as_device(device)
        self.xp = self.device.array_module()
        featurize(["warm up"], self.vocabulary, xp=self.xp)  # build the device tables now

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
        return f"{self.n_features} features on {self.device} ({self.xp.__name__})"

    def __call__(self, texts):
        return featurize(texts, self.vocabulary, xp=self.xp)
