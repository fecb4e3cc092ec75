"""The feature vocabulary of `docs/features.md`: the n most frequent words (top),
the n least frequent others (bottom) and the stop words, fitted on training texts and
saved as `vocabulary.json`; and the names of the 7 + 2n features.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Iterable, Sequence

import numpy as np

from ..contracts import VOCABULARY_SIZE
from ..errors import VocabularyError
from ..texts import as_utf8
from . import charclass, words

BASE_FEATURES = (
    "word_count",
    "unique_word_count",
    "punctuation_count",
    "sentence_count",
    "words_per_sentence",
    "stopword_count",
    "stopwords_per_sentence",
)
N_BASE = len(BASE_FEATURES)


def feature_names(n: int = VOCABULARY_SIZE) -> tuple[str, ...]:
    """Names of the 7 + 2n features, in order."""
    return BASE_FEATURES + tuple(f"top_freq_{i}" for i in range(n)) + tuple(f"bottom_freq_{i}" for i in range(n))


#: The names of the 207 features (n = 100).
FEATURE_NAMES = feature_names(VOCABULARY_SIZE)


VOCABULARY_KEYS = ("top", "bottom", "stopwords")


# --------------------------------------------------------------------------- words


def normal_form(word: str) -> str:
    """ASCII A-Z to a-z and U+2019 to U+0027; every other code point unchanged."""
    return word.translate(_NORMAL_FORM)


_NORMAL_FORM = {**{c: c + 32 for c in range(ord("A"), ord("Z") + 1)}, 0x2019: 0x27}


def _check_word(entry, where: str) -> str:
    """`entry` must be one word of the spec, in normal form."""
    if not isinstance(entry, str):
        raise VocabularyError(f"{where} must be a string, got {type(entry).__name__}")
    if entry == "" or normal_form(entry) != entry:
        raise VocabularyError(f"{where} = {entry!r} is not a word in normal form")
    flags = [charclass.codepoint_flags(ord(c)) for c in entry]
    for i, f in enumerate(flags):
        inside = (
            f & charclass.APOSTROPHE
            and 0 < i < len(flags) - 1
            and flags[i - 1] & charclass.WORD
            and flags[i + 1] & charclass.WORD
        )
        if not (f & charclass.WORD or inside):
            raise VocabularyError(
                f"{where} = {entry!r} is not a single word (code point U+{ord(entry[i]):04X} at {i} splits it)"
            )
    try:
        entry.encode("utf-8")
    except UnicodeEncodeError:
        raise VocabularyError(f"{where} = {entry!r} holds a lone surrogate") from None
    return entry


# ---------------------------------------------------------------------- vocabulary


class Vocabulary:
    """The fitted word lists: `top` and `bottom` (n words each) and `stopwords`.

    All entries are single words in normal form; `top` and `bottom` hold no duplicates
    and share no word; `stopwords` is kept sorted and without duplicates.
    """

    def __init__(self, top: Sequence[str], bottom: Sequence[str], stopwords: Iterable[str]):
        for name, value in (("top", top), ("bottom", bottom), ("stopwords", stopwords)):
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                raise VocabularyError(f"{name} must be a list of strings, got {type(value).__name__}")
        top, bottom, stopwords = list(top), list(bottom), list(stopwords)
        for name, entries in (("top", top), ("bottom", bottom), ("stopwords", stopwords)):
            for i, word in enumerate(entries):
                _check_word(word, f"{name}[{i}]")
        if len(top) != len(bottom):
            raise VocabularyError(f"top and bottom must have the same length n, got {len(top)} and {len(bottom)}")
        for name, entries in (("top", top), ("bottom", bottom)):
            if len(set(entries)) != len(entries):
                dup = next(w for w, c in Counter(entries).items() if c > 1)
                raise VocabularyError(f"{name} lists {dup!r} more than once")
        shared = set(top) & set(bottom)
        if shared:
            raise VocabularyError(f"top and bottom share {sorted(shared)[0]!r} (bottom leaves out the words of top)")
        self._top = tuple(top)
        self._bottom = tuple(bottom)
        self._stopwords = tuple(sorted(set(stopwords)))
        #: featurize's tables of these words, per device (filled by `extract`)
        self.tables: dict = {}

    @property
    def top(self) -> list[str]:
        return list(self._top)

    @property
    def bottom(self) -> list[str]:
        return list(self._bottom)

    @property
    def stopwords(self) -> list[str]:
        return list(self._stopwords)

    @property
    def n(self) -> int:
        return len(self._top)

    @property
    def n_features(self) -> int:
        return N_BASE + 2 * self.n

    @property
    def feature_names(self) -> tuple[str, ...]:
        return feature_names(self.n)

    def to_dict(self) -> dict:
        return {"top": self.top, "bottom": self.bottom, "stopwords": self.stopwords}

    @classmethod
    def from_dict(cls, data, source: str = "vocabulary") -> "Vocabulary":
        if not isinstance(data, dict):
            raise VocabularyError(
                f"{source}: expected a JSON object with keys {', '.join(VOCABULARY_KEYS)}, got {type(data).__name__}"
            )
        unknown = [k for k in data if k not in VOCABULARY_KEYS]
        if unknown:
            raise VocabularyError(
                f"{source}: unknown key {unknown[0]!r} (a vocabulary has exactly the keys {', '.join(VOCABULARY_KEYS)})"
            )
        missing = [k for k in VOCABULARY_KEYS if k not in data]
        if missing:
            raise VocabularyError(
                f"{source}: missing key {missing[0]!r} (a vocabulary has exactly the keys {', '.join(VOCABULARY_KEYS)})"
            )
        for key in VOCABULARY_KEYS:
            if not isinstance(data[key], list):
                raise VocabularyError(f"{source}: {key!r} must be a list of strings, got {type(data[key]).__name__}")
        try:
            return cls(data["top"], data["bottom"], data["stopwords"])
        except VocabularyError as err:
            raise VocabularyError(f"{source}: {err}") from None

    def save(self, path: str) -> None:
        """Write the spec's JSON (keys top, bottom, stopwords; UTF-8; deterministic)."""
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(self.to_dict(), handle, ensure_ascii=False, indent=1)
            handle.write("\n")

    @classmethod
    def load(cls, path: str) -> "Vocabulary":
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except FileNotFoundError:
            raise VocabularyError(f"{path}: no such vocabulary file") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise VocabularyError(f"{path}: not a JSON vocabulary ({err})") from None
        return cls.from_dict(data, source=path)

    def __eq__(self, other) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return (self._top, self._bottom, self._stopwords) == (other._top, other._bottom, other._stopwords)

    def __repr__(self) -> str:
        return f"Vocabulary(n={self.n}, stopwords={len(self._stopwords)})"


def build_vocabulary(texts, n: int = VOCABULARY_SIZE, stopwords: Iterable[str] | None = None) -> Vocabulary:
    """Fit the spec's vocabulary on `texts` (str or UTF-8 bytes).

    `top`: the n most frequent words, `bottom`: the n least frequent of the others (ties:
    UTF-8 bytes ascending); `stopwords`: scikit-learn's ENGLISH_STOP_WORDS by default, or
    the given words in normal form. Raises ValueError if the texts have fewer than 2n
    distinct words.
    """
    if isinstance(n, bool) or int(n) != n or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}")
    n = int(n)
    if stopwords is None:
        try:
            from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "the default stop words are scikit-learn's ENGLISH_STOP_WORDS: install "
                "scikit-learn (readability-triton[train]) or pass stopwords="
            ) from exc
        stopwords = ENGLISH_STOP_WORDS
    if isinstance(stopwords, (str, bytes)):
        raise ValueError("stopwords must be a collection of words, not one string")
    stops = sorted({normal_form(w) for w in stopwords})
    for w in stops:
        _check_word(w, f"stop word {w!r}")
    counts = word_counts(texts)
    if len(counts) < 2 * n:
        raise ValueError(
            f"the texts have {len(counts)} distinct words; a vocabulary with n={n} "
            f"needs at least {2 * n} (the n most and the n least frequent)"
        )
    # Python orders str by code point, which is the order of their UTF-8 bytes.
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    top = [w for w, _ in ranked[:n]]
    rest = sorted(ranked[n:], key=lambda item: (item[1], item[0]))
    bottom = [w for w, _ in rest[:n]]
    return Vocabulary(top, bottom, stops)


def word_counts(texts) -> Counter:
    """How often each word (normal form) occurs in `texts` (str or UTF-8 bytes)."""
    counts: Counter = Counter()
    ops = words.default_ops(np)
    for buffer in charclass.buffers(as_utf8(texts), ops.chunk_bytes):
        tokens = words.find_words(np, ops, buffer)
        if not tokens.starts.size:
            continue
        cls = words.classes(np, ops, tokens)
        sizes = np.diff(np.append(cls.first, cls.order.size))
        rep_start = tokens.starts[cls.order[cls.first]]
        rep_end = tokens.ends[cls.order[cls.first]]
        for a, b, c in zip(rep_start.tolist(), rep_end.tolist(), sizes.tolist()):
            counts[buffer[a:b].decode("utf-8")] += c
    return counts
