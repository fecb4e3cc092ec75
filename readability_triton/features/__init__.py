"""The 207 readability features of `docs/features.md`: the vocabulary, one
vectorized featurizer for NumPy and CuPy, and its runner.

- `vocabulary.py`: `Vocabulary`, `build_vocabulary`, `word_counts`, feature names;
- `extract.py`: `featurize`, `count_words`;
- `charclass.py`, `words.py`: the array kernels (character classes, words, classes of
  equal words);
- `runner.py`: `FeatureRunner`, what the `featurize` model and the in-process pipeline run.
"""

from ..errors import VocabularyError
from .extract import count_words, featurize
from .vocabulary import (
    BASE_FEATURES,
    FEATURE_NAMES,
    N_BASE,
    VOCABULARY_KEYS,
    Vocabulary,
    build_vocabulary,
    feature_names,
    normal_form,
    word_counts,
)

__all__ = [
    "BASE_FEATURES",
    "FEATURE_NAMES",
    "N_BASE",
    "VOCABULARY_KEYS",
    "Vocabulary",
    "VocabularyError",
    "build_vocabulary",
    "count_words",
    "feature_names",
    "featurize",
    "normal_form",
    "word_counts",
]
