"""A plain, per-text reference of the readability features, written from the spec only.

`docs/features.md` is the single definition; this module follows it sentence by
sentence, one code point at a time, with no cleverness and no NumPy in the logic (NumPy
only builds the final float32 row). The vectorized `readability_triton.features` must
equal it bit for bit; the benchmark measures it as the "plain per-text implementation".

It deliberately shares no code with the rest of the package (it imports none of it).
"""

from __future__ import annotations

import numpy as np

# ---------------------------------------------------------------- character classes

_SPACE = {
    0x0009,
    0x000A,
    0x000B,
    0x000C,
    0x000D,
    0x0020,
    0x0085,
    0x00A0,
    0x1680,
    0x2028,
    0x2029,
    0x202F,
    0x205F,
    0x3000,
} | set(range(0x2000, 0x200A + 1))
_ASCII_PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
_PUNCT = (
    {ord(c) for c in _ASCII_PUNCT}
    | {0x00A1, 0x00AB, 0x00BB, 0x00BF}
    | set(range(0x2010, 0x2027 + 1))
    | set(range(0x2030, 0x205E + 1))
)
_CONTROL = (set(range(0x0000, 0x001F + 1)) | set(range(0x007F, 0x009F + 1))) - _SPACE
_TERMINATOR = {ord("."), ord("!"), ord("?"), 0x2026}
_APOSTROPHE = {0x0027, 0x2019}


def is_space(cp: int) -> bool:
    return cp in _SPACE


def is_punct(cp: int) -> bool:
    return cp in _PUNCT


def is_control(cp: int) -> bool:
    return cp in _CONTROL


def is_wordchar(cp: int) -> bool:
    return not (is_space(cp) or is_punct(cp) or is_control(cp))


def is_terminator(cp: int) -> bool:
    return cp in _TERMINATOR


def is_apostrophe(cp: int) -> bool:
    return cp in _APOSTROPHE


# ---------------------------------------------------------------------------- words


def normal_form(word: str) -> str:
    out = []
    for ch in word:
        cp = ord(ch)
        if ord("A") <= cp <= ord("Z"):
            out.append(chr(cp + 32))
        elif cp == 0x2019:
            out.append("'")
        else:
            out.append(ch)
    return "".join(out)


def _in_word(cps: list[int], i: int) -> bool:
    if is_wordchar(cps[i]):
        return True
    if is_apostrophe(cps[i]) and 0 < i < len(cps) - 1:
        return is_wordchar(cps[i - 1]) and is_wordchar(cps[i + 1])
    return False


def words(text: str) -> list[str]:
    """The words of `text`, in normal form, in order."""
    cps = [ord(ch) for ch in text]
    out: list[str] = []
    current: list[str] = []
    for i in range(len(cps)):
        if _in_word(cps, i):
            current.append(text[i])
        elif current:
            out.append(normal_form("".join(current)))
            current = []
    if current:
        out.append(normal_form("".join(current)))
    return out


def sentence_pieces(text: str) -> list[str]:
    """`text` split at every maximal run of terminators."""
    pieces: list[str] = []
    current: list[str] = []
    previous_was_terminator = False
    for ch in text:
        if is_terminator(ord(ch)):
            if not previous_was_terminator:
                pieces.append("".join(current))
                current = []
            previous_was_terminator = True
        else:
            current.append(ch)
            previous_was_terminator = False
    pieces.append("".join(current))
    return pieces


def sentence_count(text: str) -> int:
    """The number of pieces that contain at least one word (the spec's definition)."""
    return sum(1 for piece in sentence_pieces(text) if words(piece))


def scan(text: str) -> tuple[list[str], int]:
    """Words and sentence count in one pass (what a plain implementation would do):
    a piece ends at the first terminator of a run; count the pieces in which a word ends."""
    cps = [ord(ch) for ch in text]
    out: list[str] = []
    current: list[str] = []
    piece = 0
    pieces_with_words = set()
    for i in range(len(cps)):
        if _in_word(cps, i):
            current.append(text[i])
            continue
        if current:
            out.append(normal_form("".join(current)))
            pieces_with_words.add(piece)
            current = []
        if is_terminator(cps[i]) and not (i > 0 and is_terminator(cps[i - 1])):
            piece += 1
    if current:
        out.append(normal_form("".join(current)))
        pieces_with_words.add(piece)
    return out, len(pieces_with_words)


def punctuation_count(text: str) -> int:
    return sum(1 for ch in text if is_punct(ord(ch)))


# ------------------------------------------------------------------------ features


def features(text, top, bottom, stopwords) -> np.ndarray:
    """The 7 + len(top) + len(bottom) features of one text (str or UTF-8 bytes)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")  # strict
    ws, sentences = scan(text)
    word_count = len(ws)
    stops = set(stopwords)
    stop_count = sum(1 for w in ws if w in stops)
    row = [
        float(word_count),
        float(len(set(ws))),
        float(punctuation_count(text)),
        float(sentences),
        word_count / sentences if sentences else 0.0,
        float(stop_count),
        stop_count / sentences if sentences else 0.0,
    ]
    occurrences: dict[str, int] = {}
    for w in ws:
        occurrences[w] = occurrences.get(w, 0) + 1
    for vocabulary_word in list(top) + list(bottom):
        row.append(occurrences.get(vocabulary_word, 0) / word_count if word_count else 0.0)
    return np.array(row, dtype=np.float64).astype(np.float32)


def featurize(texts, top, bottom, stopwords) -> np.ndarray:
    rows = [features(t, top, bottom, stopwords) for t in texts]
    if not rows:
        return np.zeros((0, 7 + len(top) + len(bottom)), dtype=np.float32)
    return np.stack(rows)


def vocabulary(texts, n: int) -> tuple[list[str], list[str]]:
    """The spec's `top` and `bottom` lists (ties: UTF-8 bytes ascending)."""
    counts: dict[str, int] = {}
    for text in texts:
        for w in words(text):
            counts[w] = counts.get(w, 0) + 1
    by_high = sorted(counts, key=lambda w: (-counts[w], w.encode("utf-8")))
    top = by_high[:n]
    chosen = set(top)
    by_low = sorted((w for w in counts if w not in chosen), key=lambda w: (counts[w], w.encode("utf-8")))
    return top, by_low[:n]
