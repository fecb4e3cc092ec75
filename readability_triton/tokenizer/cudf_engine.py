"""The cuDF engine of the GPU tokenization path: the only code here that imports cuDF.

cuDF facts this relies on (cuDF >= 25.04; the old `SubwordTokenizer` was deprecated in
25.06 and removed in 25.10):

- `cudf.core.character_normalizer.CharacterNormalizer(do_lower, special_tokens=None)`;
  `.normalize(series) -> series`. A per-code-point table: tab, newline, carriage
  return, space and Unicode spaces (e.g. U+00A0) become ' ', other control and format
  characters (Cc, Cf; e.g. U+000B, U+00AD) are removed, punctuation (categories P*, plus
  ASCII symbols such as '$', '^', '`') and CJK ideographs get a space on each side, and
  with `do_lower` upper case is lowered and accents are stripped (one code point may become up to three). Spaces are not
  collapsed. Newer releases add `flags` (default PAD_PUNCTUATION, the same result).
- `cudf.core.wordpiece_tokenize.WordPieceVocabulary(series_of_tokens)`; token id = row
  number; `[UNK]` (else `[unk]`) is the unknown token. `.tokenize(series,
  max_words_per_row=0) -> list series` of int32 ids: words are split on ' ' only, each
  is matched greedily longest-prefix-first ('##' pieces after the first), a word that
  cannot be covered becomes [UNK], and so does any word of 200 bytes or more.
  `max_words_per_row` stops after that many words (each gives at least one token).
- Neither adds [CLS]/[SEP], truncates, pads or builds the mask: `add_special_tokens`
  in `wordpiece.py` does that in CuPy.

Sources: the cuDF API pages (docs.rapids.ai/api/cudf: `WordPieceVocabulary`,
`CharacterNormalizer`, `StringMethods.normalize_characters`), libcudf's
`nvtext/wordpiece_tokenize.hpp` and `nvtext/normalize.hpp`, their implementation in
rapidsai/cudf `cpp/src/text/wordpiece_tokenize.cu` (the 200-byte word limit, [UNK]
lookup, split on ' ') and `cpp/src/text/normalize.cu` + `detail/codepoint_metadata.ah`
(the per-code-point table), rapidsai/cudf PR 17600 (new WordPiece API), PR 18334
(SubwordTokenizer deprecated) and PR 19498 (removed in 25.10).
"""

from __future__ import annotations

import re

import numpy as np

#: First cuDF release with CharacterNormalizer and WordPieceVocabulary.
MIN_CUDF = (25, 4)


def cupy_module():
    import cupy

    return cupy


def _version(text: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def cudf_support() -> tuple[bool, str]:
    """(usable, reason): whether cuDF's WordPiece tokenizer can be used here."""
    try:
        import cupy  # noqa: F401
    except ImportError as exc:
        return False, f"CuPy is not importable ({exc})"
    try:
        import cudf
    except Exception as exc:  # noqa: BLE001 - a broken CUDA install raises anything
        return False, f"cuDF is not importable ({type(exc).__name__}: {exc}); install cudf-cu12>=25.04"
    version = getattr(cudf, "__version__", "?")
    if _version(version) < MIN_CUDF:
        return False, f"cuDF {version} is older than 25.04 (no WordPieceVocabulary / CharacterNormalizer)"
    try:
        from cudf.core.character_normalizer import CharacterNormalizer  # noqa: F401
        from cudf.core.wordpiece_tokenize import WordPieceVocabulary  # noqa: F401
    except ImportError as exc:
        return False, f"cuDF {version} has no WordPieceVocabulary / CharacterNormalizer ({exc})"
    return True, f"cuDF {version}"


class CudfEngine:
    """cuDF's CharacterNormalizer + WordPieceVocabulary on one GPU."""

    #: Words of this many bytes or more become [UNK] (nvtext wordpiece_tokenize).
    max_word_bytes = 200

    def __init__(self, vocabulary: list[str], do_lower: bool, device_id: int = 0):
        import cudf
        import cupy
        from cudf.core.character_normalizer import CharacterNormalizer
        from cudf.core.wordpiece_tokenize import WordPieceVocabulary

        self.device_id = int(device_id)
        self._cudf = cudf
        with cupy.cuda.Device(self.device_id):
            self._vocabulary = WordPieceVocabulary(cudf.Series(vocabulary, dtype="str"))
            self._normalizer = CharacterNormalizer(do_lower=bool(do_lower))

    def normalize_text(self, text: str) -> str:
        import cupy

        with cupy.cuda.Device(self.device_id):
            series = self._normalizer.normalize(self._cudf.Series([text], dtype="str"))
            return series.to_arrow().to_pylist()[0]

    def _strings(self, data: bytes, starts: np.ndarray):
        import pyarrow as pa

        n = int(starts.shape[0]) - 1
        if int(starts[-1]) < 2**31 - 1:
            array = pa.StringArray.from_buffers(n, pa.py_buffer(starts.astype(np.int32)), pa.py_buffer(data))
        else:
            array = pa.LargeStringArray.from_buffers(n, pa.py_buffer(starts.astype(np.int64)), pa.py_buffer(data))
        return self._cudf.Series.from_arrow(array)  # the one upload of the text

    def wordpiece(self, data: bytes, starts: np.ndarray, max_words: int):
        """Token ids of each string `data[starts[i]:starts[i+1]]`: (values, counts) CuPy arrays."""
        import cupy

        with cupy.cuda.Device(self.device_id):
            normalized = self._normalizer.normalize(self._strings(data, starts))
            tokens = self._vocabulary.tokenize(normalized, max_words_per_row=max(int(max_words), 1))
            counts = cupy.asarray(tokens.list.len().values)
            values = cupy.asarray(tokens.list.leaves.values)
            if max_words <= 0:  # max_length 2: no room for any token
                counts = cupy.zeros_like(counts)
            return values, counts
