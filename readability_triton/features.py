"""The 207 readability features of `../shared/spec/features.md`, for NumPy and CuPy.

Public API:

- `featurize(texts, vocabulary, xp=None)`: a float32 array `(len(texts), 7 + 2n)`; `texts`
  are `str` or UTF-8 `bytes` (invalid UTF-8: ValueError naming the text's index); `xp` is
  `numpy` (default) or `cupy` (the result is then a CuPy array on the current device,
  and only the texts, as one UTF-8 buffer, go there);
- `Vocabulary(top, bottom, stopwords)`, `Vocabulary.save(path)`, `Vocabulary.load(path)`;
- `build_vocabulary(texts, n=100, stopwords=None)`, `word_counts(texts)` (over the corpus),
  `count_words(texts)` (per text);
- `FEATURE_NAMES` (n = 100), `feature_names(n)`, `normal_form(word)`.

A batch is computed at once (see `_textops.py`): one byte buffer with separators, one
table lookup for the character classes, word boundaries from one mask, word hashes from
8-byte loads, one sort that groups equal words (confirmed byte for byte, so a hash
collision never changes a value), and segment sums per text. There is no Python loop
over texts or words on the way; on a CPU the batch is cut into passes of about 256 KiB of
text, which keeps the working set in the caches. Every count is an exact integer; ratios
are divided in float64 and rounded once to float32.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from typing import Iterable, Sequence

import numpy as np

from . import _textops as ops_
from .contracts import VOCABULARY_SIZE

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
    return (BASE_FEATURES + tuple(f"top_freq_{i}" for i in range(n))
            + tuple(f"bottom_freq_{i}" for i in range(n)))


#: The names of the 207 features (n = 100).
FEATURE_NAMES = feature_names(VOCABULARY_SIZE)


VOCABULARY_KEYS = ("top", "bottom", "stopwords")


class VocabularyError(ValueError):
    """A vocabulary (or vocabulary file) that does not follow the spec."""


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
    flags = [ops_.codepoint_flags(ord(c)) for c in entry]
    for i, f in enumerate(flags):
        inside = (f & ops_.APOSTROPHE and 0 < i < len(flags) - 1
                  and flags[i - 1] & ops_.WORD and flags[i + 1] & ops_.WORD)
        if not (f & ops_.WORD or inside):
            raise VocabularyError(f"{where} = {entry!r} is not a single word (code point "
                                  f"U+{ord(entry[i]):04X} at {i} splits it)")
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
        for name, words in (("top", top), ("bottom", bottom), ("stopwords", stopwords)):
            for i, word in enumerate(words):
                _check_word(word, f"{name}[{i}]")
        if len(top) != len(bottom):
            raise VocabularyError(f"top and bottom must have the same length n, got {len(top)} "
                                  f"and {len(bottom)}")
        for name, words in (("top", top), ("bottom", bottom)):
            if len(set(words)) != len(words):
                dup = next(w for w, c in Counter(words).items() if c > 1)
                raise VocabularyError(f"{name} lists {dup!r} more than once")
        shared = set(top) & set(bottom)
        if shared:
            raise VocabularyError(f"top and bottom share {sorted(shared)[0]!r} (bottom leaves out "
                                  "the words of top)")
        self._top = tuple(top)
        self._bottom = tuple(bottom)
        self._stopwords = tuple(sorted(set(stopwords)))
        self._compiled: dict = {}

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
            raise VocabularyError(f"{source}: expected a JSON object with keys "
                                  f"{', '.join(VOCABULARY_KEYS)}, got {type(data).__name__}")
        unknown = [k for k in data if k not in VOCABULARY_KEYS]
        if unknown:
            raise VocabularyError(f"{source}: unknown key {unknown[0]!r} (a vocabulary has exactly "
                                  f"the keys {', '.join(VOCABULARY_KEYS)})")
        missing = [k for k in VOCABULARY_KEYS if k not in data]
        if missing:
            raise VocabularyError(f"{source}: missing key {missing[0]!r} (a vocabulary has exactly "
                                  f"the keys {', '.join(VOCABULARY_KEYS)})")
        for key in VOCABULARY_KEYS:
            if not isinstance(data[key], list):
                raise VocabularyError(f"{source}: {key!r} must be a list of strings, got "
                                      f"{type(data[key]).__name__}")
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

    # -- the compiled form used by featurize -----------------------------------
    def _tables(self, xp, weak: ops_.Weakening = ops_.NONE) -> "_VocabularyTables":
        key = ops_.device_key(xp) + (weak.tail_mask,)
        tables = self._compiled.get(key)
        if tables is None:
            tables = _VocabularyTables(self, xp, weak)
            self._compiled[key] = tables
        return tables


class _VocabularyTables:
    """The vocabulary's distinct words tokenized and hashed on one device, and where each
    feature column and the stop-word count take them from."""

    def __init__(self, vocabulary: Vocabulary, xp, weak: ops_.Weakening):
        distinct = list(dict.fromkeys(vocabulary._top + vocabulary._bottom + vocabulary._stopwords))
        index = {w: i for i, w in enumerate(distinct)}
        ops = ops_.default_ops(xp)
        self.words = ops_.tokenize(xp, ops, ops_.make_buffer([w.encode("utf-8") for w in distinct]),
                                   weak=weak)
        if int(self.words.starts.size) != len(distinct):  # guaranteed by Vocabulary's checks
            raise VocabularyError("the vocabulary's words do not tokenize one to one")
        self.size = len(distinct)
        self.n = vocabulary.n
        # Per distinct word: its feature column (top and bottom share no word) or -1, and
        # whether it is a stop word.
        column = np.full(self.size, -1, dtype=np.int64)
        column[[index[w] for w in vocabulary._top]] = N_BASE + np.arange(self.n)
        column[[index[w] for w in vocabulary._bottom]] = N_BASE + self.n + np.arange(self.n)
        is_stop = np.zeros(self.size, dtype=np.float64)
        is_stop[[index[w] for w in vocabulary._stopwords]] = 1.0
        self.column = xp.asarray(column)
        self.is_stop = xp.asarray(is_stop)


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
            raise ImportError("the default stop words are scikit-learn's ENGLISH_STOP_WORDS: install "
                              "scikit-learn (readability-triton[train]) or pass stopwords=") from exc
        stopwords = ENGLISH_STOP_WORDS
    if isinstance(stopwords, (str, bytes)):
        raise ValueError("stopwords must be a collection of words, not one string")
    stops = sorted({normal_form(w) for w in stopwords})
    for i, w in enumerate(stops):
        _check_word(w, f"stop word {w!r}")
    counts = word_counts(texts)
    if len(counts) < 2 * n:
        raise ValueError(f"the texts have {len(counts)} distinct words; a vocabulary with n={n} "
                         f"needs at least {2 * n} (the n most and the n least frequent)")
    # Python orders str by code point, which is the order of their UTF-8 bytes.
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    top = [w for w, _ in ranked[:n]]
    rest = sorted(ranked[n:], key=lambda item: (item[1], item[0]))
    bottom = [w for w, _ in rest[:n]]
    return Vocabulary(top, bottom, stops)


def word_counts(texts) -> Counter:
    """How often each word (normal form) occurs in `texts` (str or UTF-8 bytes)."""
    counts: Counter = Counter()
    ops = ops_.default_ops(np)
    for buffer in _buffers(_pieces(texts), ops.chunk_bytes):
        tokens = ops_.tokenize(np, ops, buffer)
        if not tokens.starts.size:
            continue
        cls = ops_.classes(np, ops, tokens)
        sizes = np.diff(np.append(cls.first, cls.order.size))
        rep_start = tokens.starts[cls.order[cls.first]]
        rep_end = tokens.ends[cls.order[cls.first]]
        for a, b, c in zip(rep_start.tolist(), rep_end.tolist(), sizes.tolist()):
            counts[buffer[a:b].decode("utf-8")] += c
    return counts


def count_words(texts) -> np.ndarray:
    """The number of words (the spec's words) in each of `texts` (str or UTF-8 bytes), as
    int64: one vectorized pass per chunk of the batch, as `featurize` finds them."""
    pieces = _pieces(texts)
    counts = np.zeros(len(pieces), dtype=np.int64)
    ops = ops_.default_ops(np)
    for first, stop in _chunk_bounds(pieces, ops.chunk_bytes):
        tokens = ops_.tokenize(np, ops, ops_.make_buffer(pieces[first:stop]))
        counts[first:stop] = np.diff(np.searchsorted(tokens.starts, tokens.sep))
    return counts


# -------------------------------------------------------------------------- input


def _pieces(texts) -> list[bytes]:
    """The texts as valid UTF-8 bytes; a text that is not (bytes that are not valid UTF-8,
    a str holding a lone surrogate) is a ValueError naming its index."""
    if isinstance(texts, (str, bytes)):
        raise TypeError("texts must be a sequence of texts, not a single str or bytes")
    texts = list(texts)
    kinds = set(map(type, texts))
    try:
        if kinds <= {str}:
            return list(map(str.encode, texts))
        if kinds <= {bytes}:
            for _ in map(bytes.decode, texts):  # validation only (strict UTF-8)
                pass
            return texts
    except UnicodeError:
        pass  # find the culprit below
    out = []
    for index, text in enumerate(texts):
        if isinstance(text, str):
            try:
                out.append(text.encode("utf-8"))
            except UnicodeEncodeError as err:
                raise ValueError(f"text {index} is not valid Unicode: it holds the lone surrogate "
                                 f"U+{ord(text[err.start]):04X} at {err.start}, which has no UTF-8 "
                                 "form") from None
        elif isinstance(text, (bytes, bytearray, memoryview)):
            text = bytes(text)
            try:
                text.decode("utf-8")
            except UnicodeDecodeError as err:
                raise ValueError(f"text {index} is not valid UTF-8 ({err.reason} at byte "
                                 f"{err.start})") from None
            out.append(text)
        else:
            raise TypeError(f"text {index} is a {type(text).__name__}; expected str or UTF-8 bytes")
    return out


def _chunk_bounds(pieces: list[bytes], chunk_bytes: int) -> list[tuple[int, int]]:
    """(first, stop) text ranges of at most about `chunk_bytes` bytes each (at least one
    text each): a batch is processed in passes of that size (a loop over chunks, each
    fully vectorized; one pass on a GPU)."""
    n = len(pieces)
    if n == 0:
        return []
    ends = np.cumsum(np.fromiter(map(len, pieces), dtype=np.int64, count=n) + 1)
    if int(ends[-1]) <= chunk_bytes:
        return [(0, n)]
    bounds, a = [], 0
    while a < n:
        base = int(ends[a - 1]) if a else 0
        b = max(int(np.searchsorted(ends, base + chunk_bytes, side="right")), a + 1)
        bounds.append((a, b))
        a = b
    return bounds


def _buffers(pieces: list[bytes], chunk_bytes: int):
    for a, b in _chunk_bounds(pieces, chunk_bytes):
        yield ops_.make_buffer(pieces[a:b])


# ------------------------------------------------------------------------ features


def featurize(texts, vocabulary: Vocabulary, xp=None):
    """The features of every text: float32 array of shape (len(texts), 7 + 2n) on `xp`
    (NumPy by default). `texts` are str or UTF-8 bytes; invalid UTF-8 is a ValueError
    naming the text's index."""
    return _featurize(texts, vocabulary, xp)


def _featurize(texts, vocabulary: Vocabulary, xp=None, ops=None, weak: ops_.Weakening = ops_.NONE,
               stats: dict | None = None):
    """`featurize`, with the test hooks: `ops` (the device-specific primitives), `weak`
    (a weakened hash, to force collisions) and `stats` (gets the number of collisions)."""
    if not isinstance(vocabulary, Vocabulary):
        raise TypeError(f"vocabulary must be a Vocabulary, got {type(vocabulary).__name__}")
    xp = np if xp is None else xp
    ops = ops_.default_ops(xp) if ops is None else ops
    pieces = _pieces(texts)
    tables = vocabulary._tables(xp, weak)
    if not pieces:
        return xp.zeros((0, N_BASE + 2 * tables.n), dtype=xp.float32)
    parts = [_features_of_buffer(xp, ops, buffer, tables, weak, stats) for buffer in _buffers(pieces, ops.chunk_bytes)]
    return parts[0] if len(parts) == 1 else xp.concatenate(parts)


def _features_of_buffer(xp, ops, buffer: bytes, tables: _VocabularyTables, weak, stats):
    # The only host-to-device copy: the batch's text (UTF-8 bytes and separators).
    data = xp.asarray(np.frombuffer(buffer, dtype=np.uint8))
    tokens = ops_.tokenize(xp, ops, buffer, data, weak)
    sep = tokens.sep
    n = int(sep.size) - 1
    W = int(tokens.starts.size)

    # PUNCT code points (flagged on their first byte) between consecutive separators.
    punct_at = xp.flatnonzero((tokens.flags & ops_.PUNCT) != 0)
    punct = xp.diff(xp.searchsorted(punct_at, sep))

    # Words per text: text i holds words word_bound[i]:word_bound[i+1].
    word_bound = xp.searchsorted(tokens.starts, sep)
    word_count = xp.diff(word_bound)
    out = xp.zeros((n, N_BASE + 2 * tables.n), dtype=xp.float64)
    out[:, 2] = punct
    if W == 0:
        return out.astype(xp.float32)
    text_of = ops.repeat(xp.arange(n, dtype=xp.int64), word_count, W)

    # Sentences: the text splits at each maximal run of terminators. The first word after
    # the start of a run, and the first word of each text, open a new non-empty piece.
    flags = tokens.flags
    run_start = punct_at[xp.flatnonzero(((flags[punct_at] & ~flags[punct_at - 1]) & ops_.TERMINATOR) != 0)]
    opens = xp.zeros(W + 1, dtype=bool)
    opens[xp.searchsorted(tokens.starts, run_start)] = True
    opens[word_bound[:-1]] = True  # (for an empty text: the next text's first word, marked anyway)
    sentences = xp.diff(xp.searchsorted(xp.flatnonzero(opens[:W]), word_bound))

    # Classes of exactly equal words; distinct (word, text) pairs; vocabulary counts.
    cls = ops_.classes(xp, ops, tokens, weak)
    if stats is not None:
        stats["collisions"] = stats.get("collisions", 0) + cls.collisions
    text_sorted = text_of[cls.order]
    new_pair = ops_.runs(xp, text_sorted)
    new_pair[cls.first] = True
    pair_start = xp.flatnonzero(new_pair)
    pair_text = text_sorted[pair_start]
    unique = _bincount(xp, pair_text, n)

    # Each (text, vocabulary word) pair occurs once: its count goes straight to its column.
    vocab_class = ops_.match_words(xp, ops, tokens, cls, tables.words)
    vocab_of_class = xp.full(int(cls.first.size), -1, dtype=xp.int64)
    hit = xp.flatnonzero(vocab_class >= 0)
    vocab_of_class[vocab_class[hit]] = hit
    pair_class = xp.cumsum(cls.new_run[pair_start], dtype=xp.int64) - 1  # a class starts with a pair
    pair_vocab = vocab_of_class[pair_class]
    sel = xp.flatnonzero(pair_vocab >= 0)
    pair_end = xp.concatenate([pair_start[1:], xp.full(1, W, dtype=pair_start.dtype)])
    text, word = pair_text[sel], pair_vocab[sel]
    occurrences = (pair_end - pair_start)[sel]
    stop_count = _bincount(xp, text, n, weights=tables.is_stop[word] * occurrences)

    # Ratios in float64 (every count is an exact integer), rounded once to float32. A text
    # without sentences has no words, so x / max(d, 1) is 0 exactly where the spec says 0.
    per_sentence = xp.maximum(sentences, 1).astype(xp.float64)
    out[:, 0] = word_count
    out[:, 1] = unique
    out[:, 3] = sentences
    out[:, 4] = word_count / per_sentence
    out[:, 5] = stop_count
    out[:, 6] = stop_count / per_sentence
    column = tables.column[word]
    has = xp.flatnonzero(column >= 0)
    text, column, occurrences = text[has], column[has], occurrences[has]
    out.reshape(-1)[text * out.shape[1] + column] = occurrences / word_count[text].astype(xp.float64)
    return out.astype(xp.float32)


def _bincount(xp, index, n: int, weights=None):
    """`bincount` with n bins, also for no input (CuPy's takes max() of its input)."""
    if not index.size:
        return xp.zeros(n, dtype=xp.int64 if weights is None else xp.float64)
    return xp.bincount(index, weights=weights, minlength=n)
