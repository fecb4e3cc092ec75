"""The GPU kernels (readability_triton/kernels), checked on machines without a GPU:

- every `.cu` file compiles for sm_90 with NVRTC (the nvidia-cuda-nvrtc wheel, no GPU);
- the same source compiled as C++ for the CPU, driven by the very code that drives it on
  CuPy (`features/cuda_path.py`, through the counting stand-in), equals the NumPy path bit for
  bit: features, WORDS and the seven formulas, on the CommonLit excerpts, on edge cases
  (empty texts and words, 100,000-byte texts, multi-byte UTF-8, terminator runs,
  apostrophes) and on random text, also with a weakened hash that makes words collide; the
  WordPiece kernel against Hugging Face (rows routed to the CPU path included); the forest
  kernel against the array walk;
- what a batch costs (benchmarks/device_ops.py): featurize with the formulas at most 16
  device calls, no host sync and one upload; WordPiece at most 12 calls and one sync; the
  forest at most 2 calls and no sync; at 1, 64 and 2,048 texts.
"""

from __future__ import annotations

import functools
import json
import re

import numpy as np
import pytest
from harness import CupyLikeRules, hf_encode, host_kernels, load_benchmark, write_csv
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_features_properties import GLUE, NASTY, VOCABULARY, WORDS, texts
from test_formulas import FORMULA_PIECES, WORDS_AND_SENTENCES
from test_tokenization import EDGE_CASES, assert_same, long_texts

from readability_triton.features import build_vocabulary, featurize, formula_words
from readability_triton.features import cuda_path as F
from readability_triton.features.extract import featurize_with_formulas, served_outputs
from readability_triton.features.formulas import Formulas
from readability_triton.kernels import host, nvrtc, source, standin

#: Weakened hashes: all words in one run of slots with one tag; 16 values; only high bits.
MASKS = (0, 0xF, 0xFFFF_0000_0000_0000)


@pytest.fixture(scope="module")
def xp():
    return standin.StandIn(host_kernels())  # (skips, saying why, without a C++ compiler)


@pytest.fixture(scope="module")
def formulas():
    return Formulas.load()


def same_bits(got, want):
    got = np.asarray(got)
    assert got.dtype == np.float32 and got.shape == want.shape
    differs = got.view(np.uint32) != want.view(np.uint32)
    bad = np.flatnonzero(differs.any(axis=tuple(range(1, differs.ndim))))
    assert not bad.size, f"{bad.size} texts differ, first {bad[:5].tolist()}"


def assert_served_equal(texts_, vocabulary, formulas, xp, hash_mask=F.ALL):
    want = served_outputs(texts_, vocabulary, formulas, np)
    features, words, block = F.outputs([t.encode("utf-8") for t in texts_], vocabulary, formulas, xp, hash_mask)
    got = (features, words, *(block[k].reshape(-1, 1) for k in range(7)))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        same_bits(g, w)


def test_every_kernel_file_compiles_for_sm_90_with_nvrtc():
    if nvrtc.find_library() is None:
        pytest.skip("libnvrtc not found: pip install nvidia-cuda-nvrtc (the test extra installs it)")
    sizes = nvrtc.compile_check("sm_90")
    assert set(sizes) == set(source.SOURCES) and all(size > 1000 for size in sizes.values())


def test_a_compile_error_comes_back_with_its_line():
    if nvrtc.find_library() is None:
        pytest.skip("libnvrtc not found")
    with pytest.raises(nvrtc.NvrtcError, match=r"bad\.cu\(2\)"):
        nvrtc.compile_source('extern "C" __global__ void k(int* x) {\n  x[0] = undeclared;\n}\n', "bad.cu")


def test_kernel_files_are_self_contained_and_their_signatures_read():
    for name in source.SOURCES:
        text = source.read(name)
        assert not re.search(r"^\s*#\s*include", text, re.M), f"{name} includes a header"
        # Threads meet only through integer atomics (docs/development.md, "GPU kernels").
        for word in ("__syncthreads", "__shared__", "__shfl", "__ballot", "__any_sync", "__all_sync"):
            assert word not in text, f"{name} uses {word}: its CPU build could not test it"
        kernels = source.signatures(name)
        assert set(kernels) == set(re.findall(r"__global__\s+void\s+(\w+)", text))
    assert [p.name for p in source.signatures("featurize.cu")["finish"]][:2] == ["counters", "occurrences"]


def test_the_kernel_s_constants_are_the_array_code_s():
    text = source.read("featurize.cu")
    for name in ("PART_MIN", "COMPOUND_MAX", "FIRST_PART", "SECOND_PART"):
        assert re.search(rf"#define {name} (\d+)", text).group(1) == str(getattr(formula_words, name))
    assert F.N_COUNTERS == int(re.search(r"#define N_COUNTERS (\d+)", text).group(1))


def test_cpu_build_equals_numpy_on_commonlit(xp, formulas, commonlit):
    vocabulary = build_vocabulary(commonlit.texts)
    assert_served_equal(commonlit.texts, vocabulary, formulas, xp)
    got = featurize(commonlit.texts[:500], vocabulary, xp=xp)  # the features-only table
    same_bits(got, featurize(commonlit.texts[:500], vocabulary))


def edge_cases() -> list[str]:
    rng = np.random.default_rng(7)
    pool = NASTY + WORDS + GLUE + FORMULA_PIECES + ["x" * 40, "é" * 9, "Mr. Smith\u2019s dog-house"]
    made = ["".join(rng.choice(pool, size=rng.integers(0, 60))) for _ in range(300)]
    return [
        "",
        " ",
        "...",
        "'",
        "a",
        'Don\'t panic... "Mr. Smith\u2019s dog-house," she said!',
        "Wait... what?! \u2026 and\u2026then",
        "'tis the dogs' bone ' x '",
        "a" * 100_000,
        ("word " * 20_000).strip(),
        ". " * 50_000,
        "é" * 50_000,
        "naïve café über Zoë crème brûlée 1234 3.14 don't rhythm hmm queue",
        *(text for text, _, _ in WORDS_AND_SENTENCES),
        "We met Amelia today. She repeated a beautiful song. The bookkeeper's make-believe trespasses.",
        "://a -b .c ,5 @d /e &f a- b. c, d@ e/ f& g:// 5,",
        "😀🎉 我们今天 2024. \u00d7\u00f7 \u0100\u024f",
        ". " * 30_000 + "Then it ended.",  # a gap of 30,000 runs before a word, the last one an end
        "x" + "... " * 30_000 + "then",  # 30,000 runs that end nothing, read by one word's thread
        "a-" * 30_000 + "b",  # one formula word of 30,001 parts
        "1," * 30_000 + "2",
        "",
        *made,
    ]


@pytest.mark.parametrize("hash_mask", (F.ALL, *MASKS))
def test_cpu_build_equals_numpy_on_edge_cases(xp, formulas, hash_mask):
    cases = edge_cases()
    if hash_mask != F.ALL:  # long chains of equal hashes: the short texts only
        cases = [t for t in cases if len(t) < 1000]
    assert_served_equal(cases, VOCABULARY, formulas, xp, hash_mask)


@pytest.mark.parametrize("hash_mask", (F.ALL, 0xF))
def test_features_only_equal_numpy(xp, hash_mask):
    cases = [t for t in edge_cases() if len(t) < 1000]
    features, words, block = F.outputs([t.encode() for t in cases], VOCABULARY, None, xp, hash_mask)
    assert block is None
    same_bits(features, featurize(cases, VOCABULARY))
    same_bits(words, featurize(cases, VOCABULARY)[:, :1].copy())


def test_rule_words_one_per_text(xp, formulas):
    # Words outside the dictionary: letters, accented vowels, other letters, digits, inner
    # apostrophes; each text one word, so each formula shows its syllables and letters.
    rng = np.random.default_rng(3)
    alphabet = list("abcdefghijklmnopqrstuvwxyz") * 3 + ["é", "à", "ï", "ÿ", "ñ", "ç", "1", "7", "'"]
    made = ["".join(rng.choice(alphabet, size=rng.integers(1, 14))).strip("'") or "x" for _ in range(3000)]
    assert_served_equal(made, VOCABULARY, formulas, xp)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_cpu_build_equals_numpy_on_random_text(xp, formulas, batch):
    assert_served_equal(batch, VOCABULARY, formulas, xp)
    assert_served_equal(batch, VOCABULARY, formulas, xp, hash_mask=0xF)


def test_public_functions_on_the_stand_in(xp, formulas):
    batch = ["The cat sat on the mat.", "", "A cat! Two cats."]
    features, scores = featurize_with_formulas(batch, VOCABULARY, formulas, xp=xp)
    want_features, want_scores = featurize_with_formulas(batch, VOCABULARY, formulas)
    same_bits(features, want_features)
    same_bits(np.ascontiguousarray(np.asarray(scores)), want_scores)
    empty = served_outputs([], VOCABULARY, formulas, xp)
    assert [tuple(a.shape) for a in empty] == [(0, 7 + 2 * VOCABULARY.n)] + [(0, 1)] * 8


@pytest.mark.parametrize("size", (1, 64, 2048))
def test_a_batch_costs_few_device_calls_no_sync_and_one_upload(xp, formulas, size):
    batch = (edge_cases()[13:] * 40)[:size]
    served_outputs(batch, VOCABULARY, formulas, xp)  # the tables, once per device
    xp.tally.reset()
    served_outputs(batch, VOCABULARY, formulas, xp)
    counts = xp.tally.as_dict()
    assert counts["calls"] <= 16 and counts["syncs"] == 0 and counts["uploads"] == 1, counts


def test_device_ops_benchmark_holds_the_bounds(vocab_dir, commonlit, tmp_path):
    if host.compiler() is None:
        pytest.skip("no C++ compiler for the kernels' CPU build")
    bench = load_benchmark("device_ops")
    data = tmp_path / "texts.csv"
    write_csv(data, [[t] for t in commonlit.texts[:300]], header=("excerpt",))
    out = tmp_path / "counts.json"
    assert bench.main(["--data", str(data), "--tokenizer", vocab_dir, "--json", str(out)]) == 0
    counts = json.loads(out.read_text())
    assert set(counts) == {"featurize", "featurize_array", "tokenize", "tokenize_array", "forest"}
    for size in ("1", "64", "2048"):
        featurize_ = counts["featurize"][size]
        assert featurize_["calls"] <= 16 and featurize_["syncs"] == 0 and featurize_["uploads"] == 1, featurize_
        tokenize = counts["tokenize"][size]  # (texts the routing sends to the CPU path included)
        assert tokenize["calls"] <= 12 and tokenize["syncs"] <= 1, tokenize
        forest = counts["forest"][size]
        assert forest["calls"] <= 2 and forest["syncs"] == 0 and forest["uploads"] == 0, forest
        # The array paths, for comparison: counted, not bounded.
        assert all(counts[step][size]["calls"] > 16 for step in ("featurize_array", "tokenize_array"))


def random_forest(rng, trees=30, depth=7, n_features=12):
    """Random trees in `forest_arrays.npz`'s layout: mixed comparisons and default
    directions, some thresholds that the features hit exactly."""
    fields: dict = {k: [] for k in ("feature", "threshold", "less_equal", "default_left", "left", "right", "leaf")}
    fields["value"], roots = [], []

    def grow(level):
        node = len(fields["leaf"])
        for key in fields:
            fields[key].append(0)
        if level == depth or (level > 1 and rng.random() < 0.25):
            fields["leaf"][node], fields["value"][node] = True, float(rng.normal())
            fields["left"][node] = fields["right"][node] = node
            return node
        fields["feature"][node] = int(rng.integers(n_features))
        fields["threshold"][node] = float(rng.integers(-2, 3)) / 2
        fields["less_equal"][node], fields["default_left"][node] = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
        fields["leaf"][node], fields["value"][node] = False, 0.0
        fields["left"][node] = grow(level + 1)
        fields["right"][node] = grow(level + 1)
        return node

    for _ in range(trees):
        roots.append(grow(0))
    types = {"threshold": np.float64, "value": np.float64, "less_equal": bool, "default_left": bool, "leaf": bool}
    arrays = {k: np.asarray(v, dtype=types.get(k, np.int64)) for k, v in fields.items()}
    arrays["roots"] = np.asarray(roots, dtype=np.int64)
    return arrays, {"n_features": n_features, "n_trees": trees, "depth": depth}


@pytest.mark.parametrize("average, base_score", ((True, 0.0), (False, 0.5)))
def test_forest_kernel_equals_the_array_walk(xp, average, base_score):
    from readability_triton.forest.arrays import ArrayForestRunner

    rng = np.random.default_rng(11)
    arrays, meta = random_forest(rng)
    meta.update(average=average, base_score=base_score)
    features = (rng.integers(-3, 4, size=(500, meta["n_features"])) / 2).astype(np.float32)
    features[rng.random(features.shape) < 0.1] = np.nan
    features[rng.random(features.shape) < 0.05] = np.float32(1e-40)  # subnormal: against threshold 0
    features[rng.random(features.shape) < 0.05] = np.float32(-1e-40)
    want = ArrayForestRunner(arrays, meta)(features)
    runner = ArrayForestRunner(arrays, meta)
    runner.xp, runner.arrays = xp, {k: xp.asarray(v) for k, v in arrays.items()}
    device_features = xp.asarray(features)
    xp.tally.reset()
    got = runner(device_features)
    assert xp.tally.as_dict() == {"calls": 2, "syncs": 0, "uploads": 0}
    same_bits(got, want)
    same_bits(runner(xp.asarray(features.astype(np.float64))), want)  # converted first
    assert runner(xp.asarray(features[:0])).shape == (0, 1)


# ------------------------------------------------------------------- the WordPiece kernel


@functools.lru_cache(maxsize=None)
def _wordpiece_path(vocab_dir, max_length, hash_mask=F.ALL):
    from readability_triton.tokenizer import WordPieceTokenizer, routing
    from readability_triton.tokenizer.kernel_engine import KernelEngine

    xp = standin.StandIn(host_kernels())
    tok = WordPieceTokenizer.from_directory(vocab_dir, max_length)
    vocabulary = routing.device_vocabulary(tok.backend)
    engine = KernelEngine(vocabulary, True, tok.backend.model.unk_token, xp=xp, hash_mask=hash_mask)
    return routing.DevicePath(tok, engine, xp)


def assert_tokens_equal(path, vocab_dir, texts, max_length):
    ids, mask = path.encode(texts)
    assert_same((np.asarray(ids), np.asarray(mask)), hf_encode(vocab_dir, texts, max_length))


def test_wordpiece_kernel_equals_hugging_face_on_commonlit(vocab_dir, commonlit):
    path = _wordpiece_path(vocab_dir, 256)
    assert_tokens_equal(path, vocab_dir, commonlit.texts, 256)
    assert 0 < path.last_routed.size <= len(commonlit.texts) // 100  # Æ: the CPU path's rows, scattered in


@pytest.mark.parametrize("max_length", (2, 8, 128, 512))
def test_wordpiece_kernel_edge_cases(vocab_dir, commonlit, max_length):
    texts = EDGE_CASES + long_texts(commonlit) + commonlit.texts[:40] + ["x" * 101, "Æsop [CLS] y", "a\u200bb é ﬁ 中文"]
    assert_tokens_equal(_wordpiece_path(vocab_dir, max_length), vocab_dir, texts, max_length)


@pytest.mark.parametrize("hash_mask", (0, 0xF))
def test_wordpiece_kernel_with_colliding_hashes(vocab_dir, commonlit, hash_mask):
    texts = EDGE_CASES + commonlit.texts[:30]
    assert_tokens_equal(_wordpiece_path(vocab_dir, 128, hash_mask), vocab_dir, texts, 128)


_PIECES = st.sampled_from(
    ["un", "##", "aff", "able", "the", "reading", "é", "—", ",", "x" * 40, " ", "\t", "Ü", "[", "]", "中", "😀", "'"]
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(
            st.text(st.characters(max_codepoint=127), max_size=120),
            st.text(st.characters(exclude_categories=("Cs",)), max_size=80),
            st.lists(_PIECES, max_size=40).map("".join),
        ),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from((4, 32, 128)),
)
def test_wordpiece_kernel_on_random_text(vocab_dir, texts, max_length):
    assert_tokens_equal(_wordpiece_path(vocab_dir, max_length), vocab_dir, texts, max_length)


def test_the_tokenizer_takes_the_kernel_where_cupy_compiles(vocab_dir, monkeypatch):
    from readability_triton.tokenizer import WordPieceTokenizer, cudf_engine
    from readability_triton.tokenizer.kernel_engine import KernelEngine

    tok = WordPieceTokenizer.from_directory(vocab_dir, 16)
    monkeypatch.setattr(cudf_engine, "cudf_support", lambda: (False, "cuDF is not importable (test)"))
    monkeypatch.setattr(cudf_engine, "cupy_module", lambda: CupyLikeRules())
    path = tok.device_path(0)
    assert isinstance(path.engine, KernelEngine)
    ok, reason = tok.gpu_support(0)
    assert ok and "a CUDA kernel" in reason
    texts = ["A text.", "Another one, longer than the first."]
    assert_tokens_equal(path, vocab_dir, texts, 16)


def test_a_vocabulary_with_a_piece_twice_is_refused():
    from readability_triton.tokenizer.kernel_engine import KernelEngine

    with pytest.raises(ValueError, match="a piece twice"):
        KernelEngine(["[UNK]", "a", "##b", "a"], True, xp=standin.StandIn(host_kernels()))
