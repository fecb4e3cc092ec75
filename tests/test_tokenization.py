"""WordPiece tokenization: equal to Hugging Face's BertTokenizerFast, on CPU and GPU."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil

import numpy as np
import pytest
from harness import hf_encode, hf_tokenizer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from readability_triton.tokenizer import WordPieceTokenizer, files, routing, wordpiece

MAX_LENGTHS = (2, 3, 5, 16, 64, 256, 512)

EDGE_CASES = [
    "",
    " ",
    "   \t\n\r  ",
    "\n",
    "Hello, world!",
    "héllo wörld Ça ÉTÉ naïve café résumé",
    "e\u0301 a\u0301\u0302\u0303 combining marks",
    "中文字符测试 mixed中文text",
    "日本語のテキスト、句読点。",
    "한국어 텍스트",
    "emoji 😀🎉 👍🏽 text 🙂",
    "control\x01\x02\x7f chars\x0b\x0c\x1c\x1f\x85 here",
    "nul\x00inside",
    "\x00",
    "zero\u200bwidth\u200djoiner\ufeffbom",
    "soft\u00adhyphen",
    "nbsp\u00a0here\u2009thin\u3000ideographic",
    "\ufffd replacement \ufffd",
    "x" * 100,
    "y" * 101,
    "z" * 150,
    "w" * 250,
    "é" * 60,
    "aé" * 80,
    "a" * 99 + "é",
    "[CLS] [SEP] [PAD] [UNK] [MASK]",
    "text[SEP]glued[CLS]",
    "[sep] [Sep] [cls] lowercase specials",
    "[unused0] [unused999]",
    "##ing ## un##affable",
    "'quotes' “curly” ‘single’ — dashes – and… «guillemets»",
    "$100 ^caret `tick` ~tilde |pipe| \\backslash @at #hash %pct &amp *star",
    "İstanbul ΣΟΦΟΣ ß ﬁ ligature Ω Å Ⅻ ① ² ½ µ",
    "mixed\r\nline\rendings\n\n",
    "tab\tseparated\tvalues",
    "a" + "\u0301" * 5,
    "Ⱥ ⱥ Ȿ ǅ ǈ",
    "\U0001f600" * 120,
    "word " * 1000,
]


@pytest.fixture(scope="session")
def vocab_only_dir(vocab_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab_only")
    shutil.copyfile(os.path.join(vocab_dir, "vocab.txt"), path / "vocab.txt")
    return str(path)


@functools.lru_cache(maxsize=None)
def _tokenizer(directory, max_length):
    return WordPieceTokenizer.from_directory(directory, max_length)


def assert_same(got, expected):
    ids, mask = got
    want_ids, want_mask = expected
    assert ids.dtype == np.int64 and mask.dtype == np.int64
    assert ids.shape == want_ids.shape and mask.shape == want_mask.shape
    bad = np.flatnonzero((ids != want_ids).any(axis=1) | (mask != want_mask).any(axis=1))
    assert bad.size == 0, f"{bad.size} rows differ, first {bad[:5].tolist()}"


def long_texts(commonlit):
    return [" ".join(commonlit.texts[:60]), commonlit.texts[0] * 30]


# ----------------------------------------------------------------- CPU == HF


def test_commonlit_equals_hugging_face(vocab_dir, commonlit):
    tok = _tokenizer(vocab_dir, 256)
    assert_same(tok.encode(commonlit.texts), hf_encode(vocab_dir, commonlit.texts, 256))


@pytest.mark.parametrize("max_length", MAX_LENGTHS)
def test_edge_cases_equal_hugging_face(vocab_dir, commonlit, max_length):
    texts = EDGE_CASES + long_texts(commonlit) + commonlit.texts[:50]
    tok = _tokenizer(vocab_dir, max_length)
    got = tok.encode(texts)
    assert got[0].shape == (len(texts), max_length)
    assert_same(got, hf_encode(vocab_dir, texts, max_length))


@pytest.mark.parametrize("max_length", (8, 256))
def test_vocab_txt_alone_equals_hugging_face(vocab_only_dir, commonlit, max_length):
    texts = EDGE_CASES + commonlit.texts[:200]
    assert_same(_tokenizer(vocab_only_dir, max_length).encode(texts), hf_encode(vocab_only_dir, texts, max_length))


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.text(st.characters(exclude_categories=("Cs",)), max_size=300), min_size=1, max_size=8),
    st.sampled_from((4, 32, 128)),
)
def test_random_unicode_equals_hugging_face(vocab_dir, texts, max_length):
    assert_same(_tokenizer(vocab_dir, max_length).encode(texts), hf_encode(vocab_dir, texts, max_length))


def test_layout(vocab_dir):
    tok = _tokenizer(vocab_dir, 8)
    ids, mask = tok.encode(["hello", "", "one two three four five six seven"])
    cls, sep, pad = tok.backend.token_to_id("[CLS]"), tok.backend.token_to_id("[SEP]"), tok.pad_id
    assert ids[0, 0] == cls and ids[0, 2] == sep and (ids[0, 3:] == pad).all()
    assert mask[0].tolist() == [1, 1, 1, 0, 0, 0, 0, 0]
    assert ids[1, :2].tolist() == [cls, sep] and mask[1].sum() == 2
    assert ids[2, -1] == sep and mask[2].all()


def test_bytes_and_str_give_the_same(vocab_dir):
    tok = _tokenizer(vocab_dir, 32)
    texts = ["héllo", "中文", "😀 ok", ""]
    as_bytes = tok.encode([t.encode("utf-8") for t in texts])
    mixed = tok.encode([texts[0], texts[1].encode("utf-8"), bytearray(texts[2].encode("utf-8")), texts[3]])
    assert_same(as_bytes, tok.encode(texts))
    assert_same(mixed, tok.encode(texts))
    obj = np.empty(2, dtype=object)
    obj[:] = [b"a b", b"c"]
    assert_same(tok.encode(obj), tok.encode(["a b", "c"]))


def test_empty_batch(vocab_dir):
    ids, mask = _tokenizer(vocab_dir, 16).encode([])
    assert ids.shape == (0, 16) and mask.shape == (0, 16) and ids.dtype == np.int64


@pytest.mark.parametrize(
    "texts, index",
    [
        ([b"ok", "fine", b"\xff\xfe", b"x"], 2),
        ([b"ok", b"abc\xe2\x82"], 1),
        ([b"\xe2\x82", b"\xacabc"], 0),
        (["fine", "lone \ud800 surrogate"], 1),
    ],
)
def test_invalid_text_names_its_index(vocab_dir, texts, index):
    with pytest.raises(ValueError, match=rf"^text {index} "):
        _tokenizer(vocab_dir, 16).encode(texts)


def test_wrong_types(vocab_dir):
    tok = _tokenizer(vocab_dir, 16)
    with pytest.raises(TypeError, match="text 1 is a int"):
        tok.encode(["ok", 3])
    with pytest.raises(TypeError, match="sequence of texts"):
        tok.encode("just one string")


@pytest.mark.parametrize("max_length", (0, 1, -5, 2.5, True))
def test_bad_max_length(vocab_dir, max_length):
    with pytest.raises(ValueError, match="max_length"):
        WordPieceTokenizer.from_directory(vocab_dir, max_length)


def test_device_arguments(vocab_dir):
    tok = _tokenizer(vocab_dir, 16)
    assert isinstance(tok.encode(["a"], xp=np)[0], np.ndarray)
    assert isinstance(tok.encode(["a"], device="cpu")[0], np.ndarray)
    with pytest.raises(ValueError, match="device must be"):
        tok.encode(["a"], device="tpu")
    with pytest.raises(ValueError, match="contradicts"):
        tok.encode(["a"], xp=np, device="cuda:0")


def test_gpu_request_without_cupy_is_clear(vocab_dir):
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed here")
    with pytest.raises(RuntimeError, match="CuPy"):
        _tokenizer(vocab_dir, 16).encode(["a"], device="gpu")


def test_missing_and_inconsistent_files(vocab_dir, tmp_path):
    with pytest.raises(ValueError, match="no vocab.txt"):
        WordPieceTokenizer.from_directory(str(tmp_path))
    with pytest.raises(ValueError, match="no such tokenizer folder"):
        WordPieceTokenizer.from_directory(str(tmp_path / "absent"))
    bad = tmp_path / "bad"
    bad.mkdir()
    shutil.copyfile(os.path.join(vocab_dir, "tokenizer.json"), bad / "tokenizer.json")
    lines = open(os.path.join(vocab_dir, "vocab.txt"), encoding="utf-8").read().splitlines()
    (bad / "vocab.txt").write_text("\n".join(lines[:-1] + ["extra", lines[-1]]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="different vocabularies"):
        WordPieceTokenizer.from_directory(str(bad))
    (bad / "vocab.txt").unlink()
    (bad / "tokenizer_config.json").write_text('{"do_lower_case": false}', encoding="utf-8")
    with pytest.raises(ValueError, match="do_lower_case=False but tokenizer.json's normalizer has lowercase=True"):
        WordPieceTokenizer.from_directory(str(bad))
    # a cased tokenizer.json without a tokenizer_config.json: Hugging Face would lowercase anyway
    (bad / "tokenizer_config.json").unlink()
    data = json.loads((bad / "tokenizer.json").read_text(encoding="utf-8"))
    data["normalizer"]["lowercase"] = False
    (bad / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match="default .* do_lower_case=True"):
        WordPieceTokenizer.from_directory(str(bad))


def test_save_tokenizer_files(vocab_dir, tmp_path, commonlit):
    copied = files.save_tokenizer_files(vocab_dir, str(tmp_path / "copied"))
    assert "vocab.txt" in copied and "tokenizer.json" in copied
    # transformers 5 writes no vocab.txt
    saved = files.save_tokenizer_files(hf_tokenizer(vocab_dir), str(tmp_path / "saved"))
    assert "vocab.txt" in saved
    assert (
        open(tmp_path / "saved" / "vocab.txt", encoding="utf-8").read()
        == open(os.path.join(vocab_dir, "vocab.txt"), encoding="utf-8").read()
    )
    texts = EDGE_CASES[:20] + commonlit.texts[:20]
    for folder in ("copied", "saved"):
        got = WordPieceTokenizer.from_directory(str(tmp_path / folder), 64).encode(texts)
        assert_same(got, hf_encode(vocab_dir, texts, 64))
    with pytest.raises(ValueError, match="no vocab.txt or tokenizer.json"):
        files.save_tokenizer_files(str(tmp_path / "copied" / "nothing"), str(tmp_path / "x"))


# ------------------------------------------------- GPU-path logic, on the CPU


def test_add_special_tokens_matches_hugging_face(vocab_dir, commonlit):
    texts = EDGE_CASES + commonlit.texts[:30]
    from tokenizers import Tokenizer

    plain = Tokenizer.from_file(os.path.join(vocab_dir, "tokenizer.json"))
    plain.no_truncation()
    plain.no_padding()
    rows = [e.ids for e in plain.encode_batch(texts, add_special_tokens=False)]
    counts = np.array([len(r) for r in rows], dtype=np.int32)
    values = np.array([i for r in rows for i in r], dtype=np.int32)
    for max_length in MAX_LENGTHS:
        tok = _tokenizer(vocab_dir, max_length)
        got = wordpiece.add_special_tokens(values, counts, max_length, 101, 102, tok.pad_id, np)
        assert_same(got, hf_encode(vocab_dir, texts, max_length))
    ids, mask = wordpiece.add_special_tokens(np.zeros(0, np.int32), np.zeros(3, np.int32), 4, 101, 102, 0, np)
    assert ids.tolist() == [[101, 102, 0, 0]] * 3 and mask.tolist() == [[1, 1, 0, 0]] * 3


def test_decode_non_ascii():
    text = "aé中😀\n\x7fß\U0010ffff"
    cps, positions = routing.decode_non_ascii(np.frombuffer(text.encode("utf-8"), dtype=np.uint8))
    assert cps.tolist() == [ord(c) for c in text if ord(c) > 127]
    encoded = text.encode("utf-8")
    assert all(encoded[p] >= 0xC0 for p in positions)


class EmulatedCudf:
    """A CPU stand-in for cuDF, as documented: a per-code-point normalizer (Hugging Face's
    own mapping of each character, except for `broken` ones), words split on ' ', greedy
    WordPiece with no 100-character limit but [UNK] for words of 200 bytes or more."""

    max_word_bytes = 200

    def __init__(self, backend, broken: dict[str, str]):
        from tokenizers.models import WordPiece

        self.backend = backend
        self.broken = broken
        self._cache: dict[str, str] = {}
        vocab = backend.get_vocab(with_added_tokens=False)
        self.model = WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=10**9)
        self.unk = vocab["[UNK]"]

    def _char(self, ch: str) -> str:
        if ch in self.broken:
            return self.broken[ch]
        if ch not in self._cache:
            normalized = self.backend.normalizer.normalize_str(f"x{ch}x")
            words = [w for w, _ in self.backend.pre_tokenizer.pre_tokenize_str(normalized)]
            self._cache[ch] = " ".join(words)[1:-1]
        return self._cache[ch]

    def normalize_text(self, text: str) -> str:
        return "".join(map(self._char, text))

    def wordpiece(self, data: bytes, starts, max_words: int):
        values, counts = [], []
        for i in range(len(starts) - 1):
            text = data[starts[i] : starts[i + 1]].decode("utf-8")
            words = [w for w in self.normalize_text(text).split(" ") if w][: max(max_words, 1)]
            ids = []
            for word in words:
                if len(word.encode("utf-8")) >= self.max_word_bytes:
                    ids.append(self.unk)
                else:
                    ids.extend(t.id for t in self.model.tokenize(word))
            values.extend(ids)
            counts.append(len(ids))
        return np.array(values, dtype=np.int32), np.array(counts, dtype=np.int32)


BROKEN = {"\u2014": "\u2014", "é": "é", "\x0b": " ", "中": "中"}  # attached dash, kept accent, ...


def test_calibration_finds_the_differences(vocab_dir):
    tok = _tokenizer(vocab_dir, 64)
    engine = EmulatedCudf(tok.backend, BROKEN)
    cps = np.array([ord(c) for c in "aZ09 \t\n\r.,;[]#$^`~" + "".join(BROKEN) + "ÀÆß\u0301\u2013\u2019\u00ad"])
    words = routing.reference_words(tok.backend)
    safe = routing.calibrate_codepoints(cps, words, engine.normalize_text)
    result = dict(zip(map(chr, cps.tolist()), safe.tolist()))
    assert not any(result[c] for c in BROKEN)
    assert all(ok for c, ok in result.items() if c not in BROKEN)
    # the normalized form takes more bytes than the original: unsafe even though equal
    ok = routing.calibrate_codepoints(np.array([0x23A]), words, EmulatedCudf(tok.backend, {}).normalize_text)
    assert not ok[0]


@pytest.mark.parametrize("max_length", (2, 9, 64, 256))
def test_device_path_with_emulated_cudf_equals_hugging_face(vocab_dir, commonlit, max_length):
    tok = _tokenizer(vocab_dir, max_length)
    engine = EmulatedCudf(tok.backend, BROKEN)
    path = routing.DevicePath(tok, engine, np)
    texts = EDGE_CASES + long_texts(commonlit) + commonlit.texts[:40]
    got = path.encode(texts)
    assert_same(got, hf_encode(vocab_dir, texts, max_length))
    routed = set(path.last_routed.tolist())
    assert 0 < len(routed) < len(texts)
    for i, text in enumerate(texts):
        needs_cpu = (
            any(c in text for c in BROKEN)
            or "[SEP]" in text
            or "[CLS]" in text
            or any(len(w.encode()) > 100 for w in text.split())
        )
        if needs_cpu:
            assert i in routed, repr(text[:40])
    # without routing the emulated engine really differs on those texts
    assert path.unsafe_codepoints().size >= len(BROKEN)
    if max_length >= 64:
        data = b"\n".join(t.encode() for t in texts) + b"\n"
        sizes = np.array([len(t.encode()) + 1 for t in texts])
        starts = np.concatenate([[0], np.cumsum(sizes)])
        values, counts = engine.wordpiece(data, starts, max_length - 2)
        raw = wordpiece.add_special_tokens(values, counts, max_length, path.cls_id, path.sep_id, tok.pad_id)
        want = hf_encode(vocab_dir, texts, max_length)
        differs = set(np.flatnonzero((raw[0] != want[0]).any(axis=1)).tolist())
        assert differs and differs <= routed


def test_device_path_all_routed_and_empty(vocab_dir):
    tok = _tokenizer(vocab_dir, 16)
    path = routing.DevicePath(tok, EmulatedCudf(tok.backend, BROKEN), np)
    texts = ["[SEP]", "—", "y" * 300]
    assert_same(path.encode(texts), hf_encode(vocab_dir, texts, 16))
    assert path.last_routed.tolist() == [0, 1, 2]
    ids, mask = path.encode([])
    assert ids.shape == (0, 16)


def test_device_incompatibility(vocab_dir):
    from tokenizers import Tokenizer, pre_tokenizers

    tok = _tokenizer(vocab_dir, 16)
    assert routing.device_incompatibility(tok.backend) is None
    other = Tokenizer.from_str(tok.backend.to_str())
    other.pre_tokenizer = pre_tokenizers.Whitespace()
    assert "pre-tokenizer" in routing.device_incompatibility(other)


@pytest.mark.parametrize("max_length", (2, 3, 512))
def test_a_short_max_length_is_no_incompatibility(vocab_dir, max_length):
    """The post-processor is judged without the tokenizer's truncation and padding: with
    max_length 2 the probe "hello world" came back as [CLS] [SEP] and the GPU path was
    refused (the GPU kit's first run, on an H200, test_gpu_equals_cpu[2])."""
    tok = WordPieceTokenizer.from_directory(vocab_dir, max_length)
    assert routing.device_incompatibility(tok.backend) is None
    assert tok.backend.truncation is not None  # the tokenizer itself still truncates


def test_a_required_gpu_tokenizer_raises_instead_of_falling_back(vocab_dir, monkeypatch):
    """READABILITY_TRITON_REQUIRE_GPU_TOKENIZER=1 (the GPU kit sets it): where the GPU path
    would hand a GPU request to the CPU path, it raises, saying why."""
    from tokenizers import pre_tokenizers

    def unfit():  # a pre-tokenizer the GPU path cannot reproduce: it falls back on any machine
        tok = WordPieceTokenizer.from_directory(vocab_dir, 16)  # its own: _tokenizer's are shared
        tok.backend.pre_tokenizer = pre_tokenizers.Whitespace()
        return tok

    monkeypatch.delenv(wordpiece.REQUIRE_GPU_ENV, raising=False)
    assert unfit().device_path(0) is None  # the CPU path, with a warning
    monkeypatch.setenv(wordpiece.REQUIRE_GPU_ENV, "1")
    with pytest.raises(RuntimeError, match="WordPiece would run on the CPU.*pre-tokenizer"):
        unfit().gpu_support(0)


# ------------------------------------------------------------- GPU == CPU


@pytest.mark.gpu
@pytest.mark.parametrize("max_length", (2, 16, 256, 512))
def test_gpu_equals_cpu(vocab_dir, commonlit, max_length):
    import cupy

    tok = WordPieceTokenizer.from_directory(vocab_dir, max_length)
    ok, reason = tok.gpu_support(cupy.cuda.Device().id)
    assert ok, f"the GPU path fell back to the CPU: {reason}"
    texts = EDGE_CASES + long_texts(commonlit) + commonlit.texts
    ids, mask = tok.encode(texts, xp=cupy)
    assert isinstance(ids, cupy.ndarray) and isinstance(mask, cupy.ndarray)
    got = (cupy.asnumpy(ids), cupy.asnumpy(mask))
    want = tok.encode(texts)
    bad = np.flatnonzero((got[0] != want[0]).any(axis=1) | (got[1] != want[1]).any(axis=1))
    path = tok.device_path(cupy.cuda.Device().id)
    print(
        f"\nmax_length {max_length}: {reason}; mismatches {bad.size}; "
        f"routed to CPU {0 if path is None else path.last_routed.size} of {len(texts)}"
    )
    assert bad.size == 0, [texts[i][:60] for i in bad[:5]]
    assert_same(got, hf_encode(vocab_dir, texts, max_length))


@pytest.mark.gpu
def test_gpu_path_is_used_when_cudf_is_there(vocab_dir, commonlit):
    import cupy

    from readability_triton.tokenizer import cudf_engine

    ok, why = cudf_engine.cudf_support()
    if not ok:
        pytest.skip(f"no usable cuDF: {why}")
    tok = WordPieceTokenizer.from_directory(vocab_dir, 256)
    on_gpu, reason = tok.gpu_support(cupy.cuda.Device().id)
    assert on_gpu, reason
    path = tok.device_path(cupy.cuda.Device().id)
    tok.encode(commonlit.texts, xp=cupy)
    # plain English prose stays on the GPU
    assert path.last_routed.size < len(commonlit.texts) * 0.05, path.describe()
