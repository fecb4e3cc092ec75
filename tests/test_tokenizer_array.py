"""The GPU WordPiece that needs only CuPy (`tokenizer.array_engine`), through its NumPy twin:
the same array code with NumPy (and with NumPy under CuPy's rules) inside the same
`DevicePath` routing as cuDF's engine, equal to Hugging Face on the CommonLit excerpts, the
edge cases and random text; and on a GPU (marked `gpu`) with CuPy."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from harness import CupyLikeRules, hf_encode
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_tokenization import EDGE_CASES, assert_same, long_texts

from readability_triton.tokenizer import routing
from readability_triton.tokenizer.array_engine import ArrayEngine, character_tables
from readability_triton.tokenizer.wordpiece import WordPieceTokenizer


@functools.lru_cache(maxsize=None)
def _path(directory, max_length, rules="numpy"):
    tok = WordPieceTokenizer.from_directory(directory, max_length)
    xp = np if rules == "numpy" else CupyLikeRules()
    engine = ArrayEngine(routing.device_vocabulary(tok.backend), bool(tok.backend.normalizer.lowercase), xp=xp)
    return routing.DevicePath(tok, engine, xp)


@pytest.mark.parametrize("rules", ["numpy", "cupy-like"])
def test_commonlit_equals_hugging_face(vocab_dir, commonlit, rules):
    path = _path(vocab_dir, 256, rules)
    texts = commonlit.texts
    assert_same(path.encode(texts), hf_encode(vocab_dir, texts, 256))
    # Nearly all on the engine: only texts with a character it does not normalize the
    # way Hugging Face does (e.g. Æ, whose lowercase is not ASCII) go to the CPU path.
    assert path.last_routed.size <= len(texts) // 100, path.last_routed.size


@pytest.mark.parametrize("max_length", (2, 8, 128, 512))
def test_edge_cases_equal_hugging_face(vocab_dir, commonlit, max_length):
    texts = EDGE_CASES + long_texts(commonlit) + commonlit.texts[:40]
    assert_same(_path(vocab_dir, max_length).encode(texts), hf_encode(vocab_dir, texts, max_length))


_ASCII = st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=200)
_ANY = st.text(st.characters(exclude_categories=("Cs",)), max_size=200)
_WORDY = st.lists(
    st.sampled_from(
        [
            "un",
            "##",
            "aff",
            "able",
            "the",
            "reading",
            "é",
            "—",
            ",",
            "x" * 40,
            " ",
            "\t",
            "Ü",
            "[",
            "]",
            "SEP",
            "中",
            "😀",
            "'",
            "s",
            "-",
        ]
    ),
    max_size=60,
).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(_ASCII, _ANY, _WORDY), min_size=1, max_size=8), st.sampled_from((4, 32, 128)))
def test_random_text_equals_hugging_face(vocab_dir, texts, max_length):
    assert_same(_path(vocab_dir, max_length).encode(texts), hf_encode(vocab_dir, texts, max_length))


def test_without_the_routing_the_engine_differs(vocab_dir):
    """The routing is what makes it exact: on texts it routes, the bare engine differs."""
    path = _path(vocab_dir, 64)
    texts = ["Æsop's fables", "[CLS] inside", "y" * 120, "plain ascii text"]
    routed = path.route(*_strings(texts))
    assert routed.tolist() == [True, True, True, False]
    data, starts = _strings(texts)
    values, counts = path.engine.wordpiece(data, starts, 62)
    from readability_triton.tokenizer.arrays import add_special_tokens

    ids, _ = add_special_tokens(values, counts, 64, path.cls_id, path.sep_id, path.tokenizer.pad_id, np)
    want, _ = hf_encode(vocab_dir, texts, 64)
    # Æ and a literal [CLS] come out wrong on the bare engine; a 120-byte ASCII word is
    # routed only because bytes may not be characters (the engine's own [UNK] is right).
    assert (ids[:2] != want[:2]).any(axis=1).all() and (ids[2:] == want[2:]).all()


def _strings(texts):
    rows = [t.encode() for t in texts]
    data = b"\n".join(rows) + b"\n"
    starts = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([len(r) + 1 for r in rows], out=starts[1:])
    return data, starts


def test_a_piece_that_fails_its_byte_check_is_redone_on_the_cpu(vocab_dir):
    """A 64-bit hash collision cannot be ruled out, so each chosen piece is compared with
    its vocabulary entry; a text where one differs is re-done by the CPU path. Simulated by
    corrupting the stored bytes of one token."""
    tok = WordPieceTokenizer.from_directory(vocab_dir, 32)
    engine = ArrayEngine(routing.device_vocabulary(tok.backend), True, xp=np)
    path = routing.DevicePath(tok, engine, np)
    token = tok.backend.token_to_id("reading")
    engine._pieces[token, 0] ^= 0xFF
    texts = ["She likes reading books.", "Nothing to see here."]
    ids, mask = path.encode(texts)
    assert_same((ids, mask), hf_encode(vocab_dir, texts, 32))
    assert path.last_routed.tolist() == [0]


def test_character_tables_follow_unicode():
    kind, replacement = character_tables(do_lower=True)
    word, space, punct, remove, replace = 3, 1, 2, 0, 4
    assert kind[ord("a")] == word and kind[ord("A")] == replace and replacement[ord("A")] == ord("a")
    assert kind[ord(" ")] == kind[ord("\t")] == kind[0x3000] == kind[0xA0] == space
    assert kind[ord(",")] == kind[0x2014] == kind[ord("中")] == punct
    assert kind[0] == kind[0x200B] == kind[0x301] == kind[0x7F] == remove
    assert kind[ord("é")] == replace and replacement[ord("é")] == ord("e")
    assert kind[ord("Æ")] == word  # its lowercase is not ASCII: calibration routes it
    cased, _ = character_tables(do_lower=False)
    assert cased[ord("A")] == cased[ord("é")] == word


def test_tokenizer_uses_the_array_engine_where_cudf_is_missing(vocab_dir, monkeypatch):
    """With CuPy but no cuDF, `device_path` builds the CuPy engine (here NumPy stands in
    for CuPy, so the path runs on the CPU)."""
    from readability_triton.tokenizer import cudf_engine

    tok = WordPieceTokenizer.from_directory(vocab_dir, 16)
    monkeypatch.setattr(cudf_engine, "cudf_support", lambda: (False, "cuDF is not importable (test)"))
    monkeypatch.setattr(cudf_engine, "cupy_module", lambda: np)
    path = tok.device_path(0)
    assert isinstance(path.engine, ArrayEngine)
    ok, reason = tok.gpu_support(0)
    assert ok and "WordPiece on CuPy" in reason and "cuDF is not importable" in reason
    texts = ["A text.", "Another one, longer than the first."]
    assert_same(path.encode(texts), hf_encode(vocab_dir, texts, 16))


@pytest.mark.gpu
@pytest.mark.parametrize("max_length", (8, 256))
def test_cupy_engine_equals_hugging_face(vocab_dir, commonlit, max_length):
    import cupy

    tok = WordPieceTokenizer.from_directory(vocab_dir, max_length)
    engine = ArrayEngine(routing.device_vocabulary(tok.backend), True, xp=cupy)
    path = routing.DevicePath(tok, engine, cupy)
    texts = EDGE_CASES + commonlit.texts
    ids, mask = path.encode(texts)
    assert isinstance(ids, cupy.ndarray) and isinstance(mask, cupy.ndarray)
    assert_same((cupy.asnumpy(ids), cupy.asnumpy(mask)), hf_encode(vocab_dir, texts, max_length))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([b" ", b"\t", b"\n", b"\r", b"\x0b", b"\x00", b"a", b"\xc3\xa9", b"x" * 30]), max_size=40),
    st.integers(0, 40),
)
def test_long_runs_are_the_regex_s(parts, longest):
    # The routing's check of over-long words: gaps between blanks, as the regex found them.
    import re

    data = b"".join(parts)
    want = [m.start() for m in re.finditer(rb"[^ \t\n\r]{%d,}" % (longest + 1), data)]
    assert routing.long_runs(np.frombuffer(data, dtype=np.uint8), longest).tolist() == want
