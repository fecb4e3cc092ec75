"""Every rule of docs/features.md, one test each, against `featurize` (and, where
it helps, against the plain reference in features/reference.py, which the property tests
then compare with `featurize` on random text)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from harness import CupyLikeRules

from readability_triton.contracts import N_FEATURES
from readability_triton.features import (
    BASE_FEATURES,
    FEATURE_NAMES,
    Vocabulary,
    VocabularyError,
    build_vocabulary,
    charclass,
    feature_names,
    featurize,
    normal_form,
    word_counts,
)
from readability_triton.features import reference as ref
from readability_triton.features import words as kernels

WORD_COUNT, UNIQUE, PUNCT, SENTENCES, WPS, STOPS, SPS = range(7)


def vocab(top=("a",), bottom=("b",), stopwords=()):
    return Vocabulary(list(top), list(bottom), list(stopwords))


def row(text, vocabulary=None):
    return featurize([text], vocabulary or vocab())[0]


def words(text):
    """The words of one text, as counted by featurize (through word_counts)."""
    return word_counts([text])


def assert_like_reference(texts, vocabulary):
    got = featurize(texts, vocabulary)
    want = ref.featurize(texts, vocabulary.top, vocabulary.bottom, vocabulary.stopwords)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


# ------------------------------------------------------------------ worked example

EXAMPLE = 'Don\'t panic... "Mr. Smith\u2019s dog-house," she said!'


def test_worked_example():
    v = Vocabulary(["don't", "smith's"], ["house", "panic"], ["she", "mr"])
    f = featurize([EXAMPLE], v)[0]
    assert f[WORD_COUNT] == 8 and f[UNIQUE] == 8
    assert f[SENTENCES] == 3
    assert f[PUNCT] == 11
    assert f[WPS] == np.float32(8 / 3) and f"{f[WPS]:.7f}" == "2.6666667"
    assert f[STOPS] == 2 and f[SPS] == np.float32(2 / 3)
    np.testing.assert_array_equal(f[7:], np.float32([1 / 8, 1 / 8, 1 / 8, 1 / 8]))
    assert sorted(words(EXAMPLE)) == sorted(["don't", "panic", "mr", "smith's", "dog", "house", "she", "said"])
    assert ref.sentence_pieces(EXAMPLE) == ["Don't panic", ' "Mr', ' Smith\u2019s dog-house," she said', ""]
    assert_like_reference([EXAMPLE], v)


# -------------------------------------------------------------- character classes

SPACES = [
    0x09,
    0x0A,
    0x0B,
    0x0C,
    0x0D,
    0x20,
    0x85,
    0xA0,
    0x1680,
    *range(0x2000, 0x200B),
    0x2028,
    0x2029,
    0x202F,
    0x205F,
    0x3000,
]
PUNCTS = (
    [ord(c) for c in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"]
    + [0xA1, 0xAB, 0xBB, 0xBF]
    + list(range(0x2010, 0x2028))
    + list(range(0x2030, 0x205F))
)
CONTROLS = [c for c in [*range(0x00, 0x20), *range(0x7F, 0xA0)] if c not in SPACES]


@pytest.mark.parametrize("cp", SPACES)
def test_space_separates_words_and_is_not_punctuation(cp):
    f = row(f"ab{chr(cp)}cd")
    assert f[WORD_COUNT] == 2 and f[PUNCT] == 0


@pytest.mark.parametrize("cp", PUNCTS)
def test_punct_separates_words_and_counts_once(cp):
    f = row(f"ab{chr(cp)}cd{chr(cp)}")
    # an apostrophe between two WORDCHARs joins them (tested below); anything else splits
    joined = cp in (0x27, 0x2019)
    assert f[WORD_COUNT] == (1 if joined else 2)
    assert f[PUNCT] == 2


@pytest.mark.parametrize("cp", CONTROLS)
def test_control_separates_words_and_is_not_punctuation(cp):
    f = row(f"ab{chr(cp)}cd")
    assert f[WORD_COUNT] == 2 and f[PUNCT] == 0


@pytest.mark.parametrize(
    "text",
    [
        "°",
        "😀",
        "漢字",
        "שלום",
        "مرحبا",
        "é",
        "e\u0301",
        "\u200b",
        "\u00ad",
        "\u2060",
        "\ufeff",
        "\U0010ffff",
        "\u0800",
        "\u0fff",
        "\u3001",
        "\u205f\u2060",
    ],
)
def test_everything_else_is_wordchar(text):
    f = row(f"{text} {text}")
    assert f[WORD_COUNT] == 2 and f[UNIQUE] == 1 and f[PUNCT] == 0


def test_every_codepoint_class_matches_the_spec_lists():
    table = charclass.CODEPOINT_TABLE
    for cp in range(charclass.FIXUP_LIMIT):
        expected = 0
        if ref.is_punct(cp):
            expected = (
                charclass.PUNCT
                | (charclass.TERMINATOR if ref.is_terminator(cp) else 0)
                | (charclass.APOSTROPHE if ref.is_apostrophe(cp) else 0)
            )
        elif ref.is_wordchar(cp):
            expected = charclass.WORD
        assert table[cp] == expected, hex(cp)


def test_every_codepoint_below_the_fixup_limit_and_some_above():
    # One text per code point class boundary region: featurize agrees with the reference.
    cps = [c for c in range(0x0, 0x3100) if not 0xD800 <= c <= 0xDFFF]
    texts = [f"a{chr(c)}b {chr(c)}{chr(c)}x" for c in cps]
    assert_like_reference(texts, vocab(top=["a"], bottom=["x"]))


# --------------------------------------------------------------------------- words


@pytest.mark.parametrize(
    "text, expected",
    [
        ("don't", ["don't"]),
        ("you\u2019re", ["you're"]),
        ("'tis", ["tis"]),
        ("dogs'", ["dogs"]),
        ("middle-sized", ["middle", "sized"]),
        ("a''b", ["a", "b"]),
        ("a'b'c", ["a'b'c"]),
        ("a' b", ["a", "b"]),
        ("'", []),
        ("x'\u2019y", ["x", "y"]),
        ("9'3", ["9'3"]),
        ("é'é", ["é'é"]),
        ("😀'😀", ["😀'😀"]),
        ("a.'b", ["a", "b"]),
        ("l\u2018homme", ["l", "homme"]),  # U+2018 is not an apostrophe
    ],
)
def test_words(text, expected):
    assert ref.words(text) == expected
    assert sorted(words(text).elements()) == sorted(expected)
    assert row(text)[WORD_COUNT] == len(expected)


def test_normal_form():
    assert normal_form("DON\u2019T") == "don't"
    assert normal_form("École") == "École"  # no Unicode case folding
    assert normal_form("ÀÉÎ") == "ÀÉÎ"
    assert normal_form("Straße") == "straße"
    v = Vocabulary(["don't", "école"], ["cafe", "ﬁ"], [])
    f = row("Don't DON\u2019T don\u2019t École école café cafe CAFE ﬁ fi", v)
    assert f[WORD_COUNT] == 10
    assert f[UNIQUE] == 7  # don't, École, école, café, cafe, ﬁ, fi
    np.testing.assert_array_equal(f[7:], np.float32([3 / 10, 1 / 10, 2 / 10, 1 / 10]))


def test_unique_words_are_counted_by_normal_form():
    f = row("The the THE tHe thE. The")
    assert f[WORD_COUNT] == 6 and f[UNIQUE] == 1


# ----------------------------------------------------------------------- sentences


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Wait... what?!", 2),
        ("Mr. Smith left.", 2),
        ("no terminators here", 1),
        ("", 0),
        ("...", 0),
        ("?!", 0),
        ("  ", 0),
        ("Hi\u2026 there", 2),  # U+2026 is a terminator
        ("Hi.\u2026. there", 2),  # one run
        ("Hi. . there", 2),  # two runs; the piece between them has no word
        ("1.5", 2),
        ("a!b?c.d", 4),
        (". a", 1),
        ("a .", 1),
        ("\u3002 a", 1),  # U+3002 ideographic full stop: not a terminator, a WORDCHAR
    ],
)
def test_sentences(text, expected):
    assert ref.sentence_count(text) == expected
    assert row(text)[SENTENCES] == expected


def test_ratios_are_zero_without_sentences_or_words():
    v = vocab(top=["a"], bottom=["b"], stopwords=["a"])
    for text in ["", "...", "  --  ", "\x00"]:
        f = row(text, v)
        assert f[WORD_COUNT] == 0 and f[SENTENCES] == 0
        assert f[WPS] == 0 and f[SPS] == 0 and not f[7:].any()


# --------------------------------------------------------------------- punctuation


def test_punctuation_counts_code_points_including_apostrophes_in_words():
    assert row("don't")[PUNCT] == 1
    assert row("don\u2019t")[PUNCT] == 1
    assert row("\u201cquoted\u201d \u2014 \u00abguillemets\u00bb \u2026")[PUNCT] == 6
    assert row("\u00a1Hola! \u00bfQu\u00e9?")[PUNCT] == 4
    assert row("\u2030\u205e\u2010\u2027")[PUNCT] == 4
    assert row("\u2028\u2029\u202f\u205f")[PUNCT] == 0  # spaces inside the punctuation ranges


# -------------------------------------------------------------------- stop words


def test_stop_words_and_vocabulary_counts():
    v = Vocabulary(["the", "cat"], ["dog", "mat"], ["the", "on", "a"])
    f = row("The cat sat on the mat. The dog!", v)
    assert f[WORD_COUNT] == 8 and f[SENTENCES] == 2
    assert f[STOPS] == 4 and f[SPS] == 2
    np.testing.assert_array_equal(f[7:], np.float32([3 / 8, 1 / 8, 1 / 8, 1 / 8]))


def test_values_are_float64_rounded_once_to_float32():
    v = Vocabulary(["a"], ["b"], [])
    text = " ".join(["a"] * 10 + ["x"] * 21)  # 10/31
    f = row(text, v)
    assert f[7] == np.float32(10 / 31)
    assert f.dtype == np.float32


# --------------------------------------------------------------------------- input


def test_str_and_bytes_agree_and_invalid_utf8_names_the_index():
    v = vocab()
    texts = ["a b", "Ça va? Oui.", ""]
    a = featurize(texts, v)
    b = featurize([t.encode("utf-8") for t in texts], v)
    c = featurize([texts[0], texts[1].encode("utf-8"), texts[2]], v)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    objects = np.empty(3, dtype=object)
    objects[:] = [t.encode("utf-8") for t in texts]
    np.testing.assert_array_equal(a, featurize(objects, v))
    for bad in (b"\xff", b"ab\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80"):
        with pytest.raises(ValueError, match=r"text 2 is not valid UTF-8"):
            featurize([b"ok", "fine", bad, b"also ok"], v)
    with pytest.raises(ValueError, match=r"text 1 is not valid Unicode"):
        featurize(["ok", "lone \ud800 surrogate"], v)
    with pytest.raises(TypeError, match=r"text 1 is a int"):
        featurize(["ok", 3], v)
    with pytest.raises(TypeError):
        featurize("a single string", v)
    with pytest.raises(TypeError):
        featurize(["a"], {"top": []})


def test_shapes():
    v = build_vocabulary(["w%d " % i * (i + 1) for i in range(250)])
    assert v.n == 100
    out = featurize([], v)
    assert out.shape == (0, N_FEATURES) and out.dtype == np.float32
    out = featurize(["x"] * 3, v)
    assert out.shape == (3, N_FEATURES) and out.dtype == np.float32


def test_texts_longer_than_a_pass_are_split_into_passes(monkeypatch):
    v = Vocabulary(["the", "a"], ["zebra", "ant"], ["the"])
    texts = ["The ant. " * k + "A zebra!" for k in range(1, 40)] + ["", "x" * 5000]
    whole = featurize(texts, v)
    monkeypatch.setattr(kernels.NumpyOps, "chunk_bytes", 64)
    np.testing.assert_array_equal(featurize(texts, v), whole)
    assert_like_reference(texts, v)


def test_generic_ops_equal_numpy_ops():
    # GenericOps is what CuPy runs; run it on NumPy and compare.
    from readability_triton.features.extract import _featurize

    v = Vocabulary(["the", "a", "extraordinarily"], ["zebra", "ant", "naïve"], ["the"])
    texts = [
        EXAMPLE,
        "The naïve ant, extraordinarily extraordinarily. " * 3,
        "",
        "\u201cA\u201d \u2014 b\u2026",
        "x" * 100 + " " + "x" * 100,
        "ab\u00a0cd\u2003ef\u3000gh\u1680ij\u0085kl",
    ]
    a = _featurize(texts, v)
    b = _featurize(texts, v, ops=kernels.GenericOps(np))
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
    assert_like_reference(texts, v)


def test_generic_ops_follow_cupy_rules():
    from readability_triton.features.extract import _featurize

    xp = CupyLikeRules()
    v = Vocabulary(["the", "a", "extraordinarily"], ["zebra", "ant", "naïve"], ["the", "zzz"])
    texts = [EXAMPLE, "no vocabulary words here", "", "...", "The naïve ant, extraordinarily!"]
    got = _featurize(texts, v, xp=xp)
    want = _featurize(texts, v)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    got = _featurize(["nothing matches"], v, xp=xp, weak=kernels.Weakening(key_mask=0, tail_mask=0))
    np.testing.assert_array_equal(got, featurize(["nothing matches"], v))


@pytest.mark.parametrize(
    "weak",
    [
        kernels.Weakening(key_mask=0),  # every word in one sorted run
        kernels.Weakening(key_mask=0xF000000000000000),
        kernels.Weakening(tail_mask=0),  # long words with equal first 8 bytes and length: equal hashes
        kernels.Weakening(key_mask=0, tail_mask=0),
    ],
    ids=["key0", "key4bits", "tail0", "both"],
)
def test_hash_collisions_never_change_a_value(weak):
    from readability_triton.features.extract import _featurize

    v = Vocabulary(
        ["the", "a", "extraordinarily", "b", "abcdefghij"],
        ["zebra", "ant", "naïve", "c", "abcdefghiy"],
        ["the", "c", "abcdefghiz"],
    )
    texts = [
        EXAMPLE,
        "The naïve ant, extraordinarily extraordinarily. " * 3,
        "a b c d e f g h a b c",
        "abcdefgh abcdefghi abcdefghij abcdefgh abcdefghi",
        "x" * 100 + " " + "x" * 101,
        "abcdefghij abcdefghiX abcdefghiy abcdefghiz",
        "abcdefghiy abcdefghij",
        "abcdefghij",
    ]
    want = _featurize(texts, v)
    assert_like_reference(texts, v)
    for ops in (kernels.NumpyOps(), kernels.GenericOps(np)):
        stats = {}
        got = _featurize(texts, v, ops=ops, weak=weak, stats=stats)
        assert stats["collisions"] > 0
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


# ----------------------------------------------------------------------- vocabulary


def test_feature_names():
    assert len(FEATURE_NAMES) == N_FEATURES == 207
    assert (
        FEATURE_NAMES[:7]
        == BASE_FEATURES
        == (
            "word_count",
            "unique_word_count",
            "punctuation_count",
            "sentence_count",
            "words_per_sentence",
            "stopword_count",
            "stopwords_per_sentence",
        )
    )
    assert FEATURE_NAMES[7] == "top_freq_0" and FEATURE_NAMES[106] == "top_freq_99"
    assert FEATURE_NAMES[107] == "bottom_freq_0" and FEATURE_NAMES[206] == "bottom_freq_99"
    assert feature_names(2) == BASE_FEATURES + ("top_freq_0", "top_freq_1", "bottom_freq_0", "bottom_freq_1")


def test_build_vocabulary_orders_and_breaks_ties_by_utf8_bytes():
    texts = ["b b b a a a c c é é z Z y x", "Ω ω d d"]
    counts = {"b": 3, "a": 3, "c": 2, "é": 2, "z": 2, "y": 1, "x": 1, "Ω": 1, "ω": 1, "d": 2}
    assert dict(word_counts(texts)) == counts
    v = build_vocabulary(texts, n=3, stopwords=["B", "the"])
    assert v.top == ["a", "b", "c"]  # 3, 3, then 2 by bytes: c < d < z < é
    assert v.bottom == ["x", "y", "Ω"]  # count 1: x < y < Ω (CE A9) < ω (CF 89)
    assert v.stopwords == ["b", "the"]  # normal form, sorted
    assert (v.top, v.bottom) == ref.vocabulary(texts, 3)
    v = build_vocabulary(texts, n=5, stopwords=[])
    assert v.top == ["a", "b", "c", "d", "z"]
    assert v.bottom == ["x", "y", "Ω", "ω", "é"]
    with pytest.raises(ValueError, match="10 distinct words"):
        build_vocabulary(texts, n=6)


def test_build_vocabulary_default_stop_words_are_sklearns():
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    v = build_vocabulary(["w%d" % i for i in range(10)], n=5)
    assert v.stopwords == sorted(ENGLISH_STOP_WORDS) and len(v.stopwords) == 318


def test_serving_side_does_not_need_scikit_learn():
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['sklearn'] = None\n"
        "from readability_triton import features\nfrom readability_triton.stub import runtime\n"
        "v = features.Vocabulary(['a'], ['b'], ['a'])\n"
        "print(features.featurize(['a b'], v).tolist())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("[[2.0, 2.0")


def test_vocabulary_save_load_round_trip(tmp_path):
    v = Vocabulary(["the", "don't", "école"], ["zebra", "naïve", "😀"], ["the", "a"])
    path = tmp_path / "sub" / "vocabulary.json"
    v.save(str(path))
    data = json.loads(path.read_text(encoding="utf-8"))
    assert list(data) == ["top", "bottom", "stopwords"]
    assert data == {"top": v.top, "bottom": v.bottom, "stopwords": ["a", "the"]}
    assert "école" in path.read_text(encoding="utf-8")  # UTF-8, not escaped
    assert Vocabulary.load(str(path)) == v
    first = path.read_bytes()
    Vocabulary.load(str(path)).save(str(path))
    assert path.read_bytes() == first  # deterministic (manifest checksums stay stable)


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"top": [], "bottom": []}', "missing key 'stopwords'"),
        ('{"top": [], "bottom": [], "stopwords": [], "n": 3}', "unknown key 'n'"),
        ('{"top": "abc", "bottom": [], "stopwords": []}', "'top' must be a list of strings"),
        ('{"top": [1], "bottom": ["b"], "stopwords": []}', r"top\[0\] must be a string"),
        ('{"top": ["Abc"], "bottom": ["b"], "stopwords": []}', "not a word in normal form"),
        ('{"top": ["a b"], "bottom": ["c"], "stopwords": []}', "not a single word"),
        ('{"top": ["dog-house"], "bottom": ["c"], "stopwords": []}', "not a single word"),
        ('{"top": ["\'tis"], "bottom": ["c"], "stopwords": []}', "not a single word"),
        ('{"top": [""], "bottom": ["c"], "stopwords": []}', "not a word"),
        ('{"top": ["a", "a"], "bottom": ["b", "c"], "stopwords": []}', "'a' more than once"),
        ('{"top": ["a"], "bottom": ["a"], "stopwords": []}', "share 'a'"),
        ('{"top": ["a"], "bottom": [], "stopwords": []}', "same length"),
        ("[1, 2]", "expected a JSON object"),
        ('{"top": [', "not a JSON vocabulary"),
    ],
)
def test_vocabulary_load_errors_are_clear(tmp_path, content, message):
    path = tmp_path / "vocabulary.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(VocabularyError, match=message) as info:
        Vocabulary.load(str(path))
    assert str(path) in str(info.value)


def test_vocabulary_load_missing_file(tmp_path):
    with pytest.raises(VocabularyError, match="no such vocabulary file"):
        Vocabulary.load(str(tmp_path / "nope.json"))


def test_vocabulary_is_a_value():
    v = Vocabulary(["a"], ["b"], ["z", "y", "z"])
    assert v.stopwords == ["y", "z"] and v.n == 1 and v.n_features == 9
    v.top.append("c")  # a copy: the vocabulary does not change
    assert v.top == ["a"]
    assert v == Vocabulary(["a"], ["b"], ["y", "z"]) and v != Vocabulary(["a"], ["c"], ["y", "z"])
    with pytest.raises(VocabularyError):
        Vocabulary("ab", ["b"], [])
