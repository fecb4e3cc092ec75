"""Property tests: `featurize` equals the plain per-text reference (features/reference.py)
bit for bit on random Unicode text, and so does the vocabulary; plus deterministic
stress cases (very long words and texts, 8-byte chunk boundaries, hash collisions)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from readability_triton.features import Vocabulary, build_vocabulary, featurize
from readability_triton.features import reference as ref
from readability_triton.features import words as kernels
from readability_triton.features.extract import _featurize

# Characters that exercise every rule: quotes, apostrophes, dashes, ellipses, terminators,
# every kind of space, controls and NUL, the multi-byte fix-up ranges and their
# neighbours, combining marks, CJK, RTL, emoji (also ZWJ sequences), the last code point.
NASTY = [
    "a",
    "B",
    "z",
    "Z",
    "0",
    "9",
    "'",
    "\u2019",
    "\u2018",
    '"',
    "\u201c",
    "\u201d",
    "\u00ab",
    "\u00bb",
    "-",
    "\u2010",
    "\u2013",
    "\u2014",
    "\u2027",
    "\u2030",
    "\u205e",
    ".",
    "\u2026",
    "!",
    "?",
    ",",
    ";",
    ":",
    "(",
    ")",
    "[",
    "_",
    "~",
    "\u00a1",
    "\u00bf",
    " ",
    "\t",
    "\n",
    "\r",
    "\x0b",
    "\x0c",
    "\x85",
    "\xa0",
    "\u1680",
    "\u2000",
    "\u2007",
    "\u200a",
    "\u2028",
    "\u2029",
    "\u202f",
    "\u205f",
    "\u3000",
    "\x00",
    "\x01",
    "\x1f",
    "\x7f",
    "\x80",
    "\x9f",
    "\xa2",
    "\xbe",
    "\xc0",
    "\u200b",
    "\u200f",
    "\u202e",
    "\u2060",
    "\u206f",
    "\ufeff",
    "\u0800",
    "\u0fff",
    "\u1000",
    "\u167f",
    "\u1681",
    "\u1fff",
    "\u2fff",
    "\u3001",
    "\u3002",
    "\u3fff",
    "\u4000",
    "é",
    "É",
    "e\u0301",
    "ß",
    "ﬁ",
    "İ",
    "ı",
    "Ω",
    "ω",
    "漢",
    "字",
    "ｶ",
    "한",
    "ש",
    "ל",
    "م",
    "ر",
    "😀",
    "👍🏽",
    "\U0001f468\u200d\U0001f469",
    "\U00020000",
    "\U0010ffff",
    "°",
    "€",
]
WORDS = [
    "the",
    "The",
    "THE",
    "a",
    "A",
    "and",
    "don't",
    "DON\u2019T",
    "it's",
    "O'Neil",
    "naïve",
    "École",
    "école",
    "abcdefg",
    "abcdefgh",
    "abcdefghi",
    "abcdefghij",
    "ABCDEFGHIJKLMNOPQ",
    "x" * 16,
    "x" * 17,
    "日本語",
    "😀😀",
    "über",
    "aé",
    "aaaaaaaé",
    "aaaaaaaéb",
    "\u00e9" * 4,
    "\u00e9" * 5,
]
VOCABULARY = Vocabulary(
    top=["the", "a", "don't", "naïve", "abcdefgh", "abcdefghijklmnopq", "日本語"],
    bottom=["it's", "o'neil", "école", "abcdefghi", "x" * 17, "😀😀", "aaaaaaaéb"],
    stopwords=["the", "a", "and", "über", "école"],
)

# The structure around words matters most: apostrophes next to words, terminator runs,
# spaces; so those come often, next to the words and the other nasty characters.
GLUE = ["'", "\u2019", " ", " ", ".", "...", "\u2026", "!?", "-", ",", "'s", "s'", "' ", " '", "\n"]
token = st.one_of(
    st.sampled_from(WORDS),
    st.sampled_from(GLUE),
    st.sampled_from(WORDS),
    st.sampled_from(GLUE),
    st.sampled_from(NASTY),
    st.text(max_size=4),  # any code point but lone surrogates
    st.text(alphabet=st.characters(max_codepoint=0x3100), max_size=4),
)
text = st.lists(token, max_size=30).map("".join)
texts = st.lists(text, max_size=8)

PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference(batch, vocabulary=VOCABULARY):
    return ref.featurize(batch, vocabulary.top, vocabulary.bottom, vocabulary.stopwords)


def same_bits(a, b):
    assert a.dtype == np.float32 and a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


@PROPERTY
@given(texts)
def test_featurize_equals_reference(batch):
    want = reference(batch)
    same_bits(featurize(batch, VOCABULARY), want)
    same_bits(featurize([t.encode("utf-8") for t in batch], VOCABULARY), want)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_generic_ops_equal_reference(batch):
    # The primitives CuPy runs, here on NumPy.
    same_bits(_featurize(batch, VOCABULARY, ops=kernels.GenericOps(np)), reference(batch))


WEAKENINGS = [
    kernels.Weakening(key_mask=0),
    kernels.Weakening(key_mask=0xFF00000000000000),
    kernels.Weakening(tail_mask=0),
    kernels.Weakening(key_mask=0xC000000000000003, tail_mask=0),
]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts, st.sampled_from(WEAKENINGS))
def test_hash_collisions_never_change_a_value(batch, weak):
    same_bits(_featurize(batch, VOCABULARY, weak=weak), reference(batch))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(text, min_size=1, max_size=12), st.integers(1, 6))
def test_vocabulary_equals_reference(batch, n):
    distinct = {w for t in batch for w in ref.words(t)}
    if len(distinct) < 2 * n:
        with pytest.raises(ValueError, match="distinct words"):
            build_vocabulary(batch, n=n, stopwords=[])
        return
    v = build_vocabulary(batch, n=n, stopwords=[])
    assert (v.top, v.bottom) == ref.vocabulary(batch, n)
    same_bits(featurize(batch, v), reference(batch, v))


# ------------------------------------------------------------ deterministic stress


def test_words_around_the_8_byte_chunks():
    # Words of every length from 1 to 40 bytes, ASCII and with multi-byte code points
    # straddling the 8-byte chunk boundaries; pairs that differ only in their last byte
    # or only after the first 8 bytes.
    base = "abcdefghijklmnopqrstuvwxyz0123456789ABCD"
    words = [base[:k] for k in range(1, 41)]
    words += ["é" * k for k in range(1, 12)] + ["a" + "é" * k for k in range(1, 12)]
    words += ["漢" * k for k in range(1, 8)] + ["a" + "😀" * k for k in range(1, 6)]
    words += [base[: k - 1] + "Z" for k in range(2, 41)]  # differs in the last byte
    words += [base[:8] + "é" + base[8:k] for k in range(8, 30)]
    batch = [
        " ".join(words),
        " ".join(reversed(words)) + ". " + " ".join(words[::3]),
        "\n".join(w.upper() for w in words),
    ]
    v = Vocabulary(
        [words[7].lower(), words[8].lower(), "é" * 3], [words[16].lower(), "a" + "😀" * 2, "漢" * 7], [words[0], "é"]
    )
    want = reference(batch, v)
    same_bits(featurize(batch, v), want)
    same_bits(_featurize(batch, v, ops=kernels.GenericOps(np)), want)
    for weak in WEAKENINGS:
        same_bits(_featurize(batch, v, weak=weak), want)


def test_very_long_words_and_texts():
    long_word = "supercalifragilistic" * 5000  # 100000 code points
    other = long_word[:-1] + "X"  # the same except the last byte
    text = f"{long_word} {other.lower()} {long_word.upper()}. " * 3 + "Short words end it!"
    many = ("The cat sat on the mat. Did it? Yes\u2026 it did! " * 4000)[:150_000]
    emoji = "😀" * 30_000 + " 😀"
    batch = [text, many, emoji, "", long_word]
    v = Vocabulary([long_word, "the", "😀"], ["cat", other.lower(), "yes"], ["the", "on", "it"])
    want = reference(batch, v)
    same_bits(featurize(batch, v), want)
    same_bits(_featurize(batch, v, ops=kernels.GenericOps(np)), want)
    same_bits(_featurize(batch, v, weak=kernels.Weakening(key_mask=0, tail_mask=0)), want)
    f = featurize([text], v)[0]
    assert f[0] == 3 * 3 + 4  # 3 long words per repeat (the upper-case one is long_word), 4 short
    assert f[1] == 2 + 4  # long_word and the variant, plus the 4 short words
