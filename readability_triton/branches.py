"""The runners of the fused repository (`assemble --fused`, `contracts.FUSED_INTO`): one
branch of the ensemble in one Python model, so that its tensors never leave the stub.

- `BertBranch`, served by a fused `preprocess`: texts -> token ids and mask (the tokenizer
  runner) -> BERT_OUTPUT (the BERT runner);
- `ForestBranch`, served by a fused `featurize`: texts -> the features, the word counts
  and the formulas (the featurize runner) -> FOREST_OUTPUT (the forest runner) in place of
  FEATURES, then the rest as the featurize runner answers them.

Each composes the runners the separate models serve, on the same device, so a fused
repository answers exactly what the separate one does.
"""

from __future__ import annotations

from typing import Any


class BertBranch:
    """texts -> BERT_OUTPUT `[n, 1]`: `tokenizer` then `bert`."""

    def __init__(self, tokenizer: Any, bert: Any):
        self.tokenizer = tokenizer
        self.bert = bert

    def describe(self) -> str:
        return f"{self.tokenizer.describe()}; then, in the same model, {self.bert.describe()}"

    def __call__(self, texts):
        ids, mask = self.tokenizer(texts)
        return self.bert(ids, mask)


class ForestBranch:
    """texts -> (FOREST_OUTPUT `[n, 1]`, the featurize runner's other outputs): `features`
    (a `FeaturizeRunner`: FEATURES first) then `forest` on FEATURES."""

    def __init__(self, features: Any, forest: Any):
        if getattr(forest, "n_features", features.n_features) != features.n_features:
            raise ValueError(
                f"the forest takes {forest.n_features} features but vocabulary.json gives "
                f"{features.n_features}: the two files come from different artifact sets"
            )
        self.features = features
        self.forest = forest
        self.n_features = features.n_features

    def describe(self) -> str:
        return f"{self.features.describe()}; then, in the same model, {self.forest.describe()}"

    def __call__(self, texts):
        features, *rest = self.features(texts)
        return (self.forest(features), *rest)
