"""The 207 readability features of `docs/features.md`, for NumPy and CuPy.

- `featurize(texts, vocabulary, xp=None)`: a float32 array `(len(texts), 7 + 2n)`; `texts`
  are `str` or UTF-8 `bytes` (invalid UTF-8: ValueError naming the text's index); `xp` is
  `numpy` (default) or `cupy` (the result is then a CuPy array on the current device,
  and only the texts, as one UTF-8 buffer, go there);
- `count_words(texts)`: the number of words of each text (what the first step checks).

A batch is computed at once (see `words.py`): one byte buffer with separators, one
table lookup for the character classes, word boundaries from one mask, word hashes from
8-byte loads, one sort that groups equal words (confirmed byte for byte, so a hash
collision never changes a value), and segment sums per text. There is no Python loop
over texts or words on the way; on a CPU the batch is cut into passes of about 256 KiB of
text, which keeps the working set in the caches. Every count is an exact integer; ratios
are divided in float64 and rounded once to float32.
"""

from __future__ import annotations

import numpy as np

from ..errors import VocabularyError
from ..texts import as_utf8
from . import charclass, cuda_path, words
from .vocabulary import N_BASE, Vocabulary


class _VocabularyTables:
    """The vocabulary's distinct words tokenized and hashed on one device, and where each
    feature column and the stop-word count take them from."""

    def __init__(self, vocabulary: Vocabulary, xp, weak: words.Weakening):
        distinct = list(dict.fromkeys(vocabulary.top + vocabulary.bottom + vocabulary.stopwords))
        index = {w: i for i, w in enumerate(distinct)}
        ops = words.default_ops(xp)
        self.words = words.find_words(xp, ops, charclass.make_buffer([w.encode("utf-8") for w in distinct]), weak=weak)
        if int(self.words.starts.size) != len(distinct):  # guaranteed by Vocabulary's checks
            raise VocabularyError("the vocabulary's words do not tokenize one to one")
        self.size = len(distinct)
        self.n = vocabulary.n
        # Per distinct word: its feature column (top and bottom share no word) or -1, and
        # whether it is a stop word.
        column = np.full(self.size, -1, dtype=np.int64)
        column[[index[w] for w in vocabulary.top]] = N_BASE + np.arange(self.n)
        column[[index[w] for w in vocabulary.bottom]] = N_BASE + self.n + np.arange(self.n)
        is_stop = np.zeros(self.size, dtype=np.float64)
        is_stop[[index[w] for w in vocabulary.stopwords]] = 1.0
        self.column = xp.asarray(column)
        self.is_stop = xp.asarray(is_stop)


def _tables(vocabulary: Vocabulary, xp, weak: words.Weakening = words.NONE) -> _VocabularyTables:
    """The vocabulary's tables on `xp`'s current device (built once per device)."""
    key = charclass.device_key(xp) + (weak.tail_mask,)
    tables = vocabulary.tables.get(key)
    if tables is None:
        tables = _VocabularyTables(vocabulary, xp, weak)
        vocabulary.tables[key] = tables
    return tables


def count_words(texts) -> np.ndarray:
    """The number of words (the spec's words) in each of `texts` (str or UTF-8 bytes), as
    int64: one vectorized pass per chunk of the batch, as `featurize` finds them."""
    pieces = as_utf8(texts)
    counts = np.zeros(len(pieces), dtype=np.int64)
    ops = words.default_ops(np)
    for first, stop in charclass.chunk_bounds(pieces, ops.chunk_bytes):
        tokens = words.find_words(np, ops, charclass.make_buffer(pieces[first:stop]))
        counts[first:stop] = np.diff(np.searchsorted(tokens.starts, tokens.sep))
    return counts


def featurize(texts, vocabulary: Vocabulary, xp=None):
    """The features of every text: float32 array of shape (len(texts), 7 + 2n) on `xp`
    (NumPy by default; on CuPy the CUDA kernels of `cuda_path.py`). `texts` are str or UTF-8
    bytes; invalid UTF-8 is a ValueError naming the text's index."""
    if xp is not None and xp is not np:
        return cuda_path.outputs(as_utf8(texts), _checked(vocabulary), None, xp)[0]
    return _featurize(texts, vocabulary, xp)


def featurize_with_formulas(texts, vocabulary: Vocabulary, formulas, xp=None):
    """(features, formulas) of every text in one pass: `featurize`'s array and the classic
    formulas' float32 `(len(texts), 7)` (`formulas.Formulas`, FORMULAS order), from the same
    words and sentences."""
    if xp is not None and xp is not np:
        features, _, block = cuda_path.outputs(as_utf8(texts), _checked(vocabulary), formulas, xp)
        return features, xp.ascontiguousarray(block.T)
    return _featurize_parts(texts, vocabulary, xp, formulas=formulas)


def served_outputs(texts, vocabulary: Vocabulary, formulas, xp=None):
    """What the `featurize` step answers: (features, words `(n, 1)`, the seven formulas as
    `(n, 1)` columns; without `formulas`, features and words only), every array contiguous;
    on a GPU all are views of one output of the CUDA kernels (no copy)."""
    if xp is not None and xp is not np:
        features, words, block = cuda_path.outputs(as_utf8(texts), _checked(vocabulary), formulas, xp)
        if block is None:
            return features, words
        return (features, words, *(block[k].reshape(-1, 1) for k in range(block.shape[0])))
    features, scores = _featurize_parts(texts, vocabulary, np, formulas=formulas)
    words = np.ascontiguousarray(features[:, :1])
    if formulas is None:
        return features, words
    return (features, words, *(np.ascontiguousarray(scores[:, k : k + 1]) for k in range(scores.shape[1])))


def _checked(vocabulary):
    if not isinstance(vocabulary, Vocabulary):
        raise TypeError(f"vocabulary must be a Vocabulary, got {type(vocabulary).__name__}")
    return vocabulary


def _featurize(
    texts, vocabulary: Vocabulary, xp=None, ops=None, weak: words.Weakening = words.NONE, stats: dict | None = None
):
    """`featurize`, with the test hooks: `ops` (the device-specific primitives), `weak`
    (a weakened hash, to force collisions) and `stats` (gets the number of collisions)."""
    return _featurize_parts(texts, vocabulary, xp, ops, weak, stats)[0]


def _featurize_parts(
    texts,
    vocabulary: Vocabulary,
    xp=None,
    ops=None,
    weak: words.Weakening = words.NONE,
    stats: dict | None = None,
    formulas=None,
):
    """(features, formulas): formulas `(n, 0)` without `formulas`."""
    _checked(vocabulary)
    xp = np if xp is None else xp
    ops = words.default_ops(xp) if ops is None else ops
    pieces = as_utf8(texts)
    tables = _tables(vocabulary, xp, weak)
    if not pieces:
        width = formulas.n if formulas is not None else 0
        return xp.zeros((0, N_BASE + 2 * tables.n), dtype=xp.float32), xp.zeros((0, width), dtype=xp.float32)
    if formulas is None:
        pairs = ((buffer, None) for buffer in charclass.buffers(pieces, ops.chunk_bytes))
    else:
        pairs = charclass.buffer_pairs(pieces, ops.chunk_bytes)
    parts = [_features_of_buffer(xp, ops, buffer, tables, weak, stats, formulas, cased) for buffer, cased in pairs]
    if len(parts) == 1:
        return parts[0]
    return xp.concatenate([p[0] for p in parts]), xp.concatenate([p[1] for p in parts])


def _features_of_buffer(
    xp, ops, buffer: bytes, tables: _VocabularyTables, weak, stats, formulas=None, cased: bytes | None = None
):
    """(features, formulas) of one buffer's texts; formulas `(n, 0)` without `formulas`
    (`cased`: the buffer before lower-casing, for them)."""
    # The host-to-device copy: the batch's text (UTF-8 bytes and separators); with the
    # formulas, also the same before lower-casing (their capitals, formulas.of_words).
    data = xp.asarray(np.frombuffer(buffer, dtype=np.uint8))
    tokens = words.find_words(xp, ops, buffer, data, weak)
    sep = tokens.sep
    n = int(sep.size) - 1
    W = int(tokens.starts.size)

    # PUNCT code points (flagged on their first byte) between consecutive separators.
    punct_at = xp.flatnonzero((tokens.flags & charclass.PUNCT) != 0)
    punct = xp.diff(xp.searchsorted(punct_at, sep))

    # Words per text: text i holds words word_bound[i]:word_bound[i+1].
    word_bound = xp.searchsorted(tokens.starts, sep)
    word_count = xp.diff(word_bound)
    out = xp.zeros((n, N_BASE + 2 * tables.n), dtype=xp.float64)
    out[:, 2] = punct
    if W == 0:  # no words in any text: every formula is NaN (see formulas.scores)
        nothing = xp.full((n, formulas.n if formulas is not None else 0), xp.nan, dtype=xp.float32)
        return out.astype(xp.float32), nothing
    text_of = ops.repeat(xp.arange(n, dtype=xp.int64), word_count, W)

    sentences = sentence_counts(xp, tokens, word_bound, punct_at)
    if formulas is not None:
        if cased is None:
            raise ValueError("the formulas need the buffer before lower-casing (charclass.buffer_pairs)")
        scores = formulas.of_words(xp, ops, tokens, word_bound, cased)

    # Classes of exactly equal words; distinct (word, text) pairs; vocabulary counts.
    cls = words.classes(xp, ops, tokens, weak)
    if stats is not None:
        stats["collisions"] = stats.get("collisions", 0) + cls.collisions
    text_sorted = text_of[cls.order]
    new_pair = words.runs(xp, text_sorted)
    new_pair[cls.first] = True
    pair_start = xp.flatnonzero(new_pair)
    pair_text = text_sorted[pair_start]
    unique = _bincount(xp, pair_text, n)

    # Each (text, vocabulary word) pair occurs once: its count goes straight to its column.
    vocab_class = words.match_words(xp, ops, tokens, cls, tables.words)
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
    return out.astype(xp.float32), scores if formulas is not None else xp.zeros((n, 0), dtype=xp.float32)


def sentence_counts(xp, tokens: words.Tokens, word_bound, punct_at=None):
    """Sentences per text (docs/features.md section 4): the text splits at each maximal run
    of terminators; the first word after the start of a run, and the first word of each
    text, open a new non-empty piece. `punct_at`: the PUNCT positions, where the caller has
    them already."""
    w = int(tokens.starts.size)
    if w == 0:
        return xp.zeros(int(word_bound.size) - 1, dtype=xp.int64)
    flags = tokens.flags
    if punct_at is None:
        punct_at = xp.flatnonzero((flags & charclass.PUNCT) != 0)
    run_start = punct_at[xp.flatnonzero(((flags[punct_at] & ~flags[punct_at - 1]) & charclass.TERMINATOR) != 0)]
    opens = xp.zeros(w + 1, dtype=bool)
    opens[xp.searchsorted(tokens.starts, run_start)] = True
    opens[word_bound[:-1]] = True  # (for an empty text: the next text's first word, marked anyway)
    return xp.diff(xp.searchsorted(xp.flatnonzero(opens[:w]), word_bound))


def _bincount(xp, index, n: int, weights=None):
    """`bincount` with n bins, also for no input (CuPy's takes max() of its input)."""
    if not index.size:
        return xp.zeros(n, dtype=xp.int64 if weights is None else xp.float64)
    return xp.bincount(index, weights=weights, minlength=n)
