"""Character classes of the readability features and the batch byte buffer (NumPy/CuPy).

A batch is one UTF-8 byte buffer,

    FF text_0 FF text_1 FF ... FF text_{n-1} FF 00*8

(0xFF never occurs in UTF-8, so the separators are found again on the device; the eight
zero bytes let 8-byte loads run past the end.) Before the buffer is made, two rewrites
that change no feature are applied to the bytes: ASCII `A`-`Z` become `a`-`z`, and U+2019
becomes U+0027 (both are PUNCT and APOSTROPHE and neither is a TERMINATOR; inside a word
the normal form maps one to the other). After them, two words have the same normal form
exactly when their bytes are equal.

A 256-entry table gives each byte the flags of its character (WORD and TERMINATOR on every
byte of the character, PUNCT on its first byte only, so that PUNCT flags count code
points); the few multi-byte characters that are not WORDCHAR (U+0080 to U+00BF, U+1680,
U+2000 to U+205F, U+3000: leads C2 and E0 to E3) are decoded and fixed up (`words.py`).
The code point sets here are the single source for the tables and for the vocabulary's
checks.
"""

from __future__ import annotations

import numpy as np

# Flags per byte.
WORD = 1
APOSTROPHE = 2
PUNCT = 4
TERMINATOR = 8
LEAD = 16  # the first byte of a multi-byte character that may need a fix-up (C2, E0-E3)
SEPARATOR_FLAG = 32  # the separator byte 0xFF (and nothing else)

#: Separator between texts in the byte buffer (never part of valid UTF-8).
SEPARATOR = 0xFF
#: Zero bytes after the last separator, so that 8-byte loads stay inside the buffer.
PAD = 8

# ---------------------------------------------------------------- character classes
# The spec's classes, as code point lists (the single source for the tables below and
# for the vocabulary's checks).
SPACE_CODEPOINTS = frozenset(
    [
        *range(0x09, 0x0D + 1),
        0x20,
        0x85,
        0xA0,
        0x1680,
        *range(0x2000, 0x200A + 1),
        0x2028,
        0x2029,
        0x202F,
        0x205F,
        0x3000,
    ]
)
ASCII_PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
PUNCT_CODEPOINTS = frozenset(
    [ord(c) for c in ASCII_PUNCTUATION]
    + [0xA1, 0xAB, 0xBB, 0xBF]
    + [*range(0x2010, 0x2027 + 1)]
    + [*range(0x2030, 0x205E + 1)]
)
CONTROL_CODEPOINTS = frozenset([*range(0x00, 0x1F + 1), *range(0x7F, 0x9F + 1)]) - SPACE_CODEPOINTS
TERMINATOR_CODEPOINTS = frozenset([ord("."), ord("!"), ord("?"), 0x2026])
APOSTROPHE_CODEPOINTS = frozenset([0x27, 0x2019])


def codepoint_flags(cp: int) -> int:
    """WORD / PUNCT / TERMINATOR / APOSTROPHE flags of one code point."""
    if cp in SPACE_CODEPOINTS or cp in CONTROL_CODEPOINTS:
        return 0
    if cp in PUNCT_CODEPOINTS:
        flags = PUNCT
        if cp in TERMINATOR_CODEPOINTS:
            flags |= TERMINATOR
        if cp in APOSTROPHE_CODEPOINTS:
            flags |= APOSTROPHE
        return flags
    return WORD


#: Every non-WORDCHAR code point beyond ASCII is below this bound (U+3000 is the last).
FIXUP_LIMIT = 0x4000


def _build_tables():
    # Per byte: ASCII bytes get their character's flags; bytes of multi-byte characters
    # are WORD (the exceptions are fixed up from CODEPOINT_TABLE); 0xFF (the separator)
    # and the bytes that never occur in UTF-8 get nothing.
    byte_table = np.zeros(256, dtype=np.uint8)
    for b in range(0x80):
        byte_table[b] = codepoint_flags(b)
    byte_table[0x80:0xF8] = WORD
    byte_table[[0xC2, 0xE0, 0xE1, 0xE2, 0xE3]] |= LEAD
    byte_table[SEPARATOR] = SEPARATOR_FLAG
    codepoint_table = np.array([codepoint_flags(cp) for cp in range(FIXUP_LIMIT)], dtype=np.uint8)
    for table in (byte_table, codepoint_table):
        table.setflags(write=False)
    return byte_table, codepoint_table


BYTE_TABLE, CODEPOINT_TABLE = _build_tables()
BYTE_TRANSLATION = BYTE_TABLE.tobytes()

# ------------------------------------------------------------------- host buffers

_RSQUO = "\u2019".encode("utf-8")
_PADDING = b"\x00" * PAD


def make_buffer(pieces: list[bytes]) -> bytes:
    """The batch buffer of valid UTF-8 texts (see the module doc)."""
    return cased_buffer(pieces).lower()  # bytes.lower(): ASCII A-Z only


def cased_buffer(pieces: list[bytes]) -> bytes:
    """The batch buffer before lower-casing: its bytes at the same positions, `A`-`Z` kept
    (the formulas' proper nouns and sentence ends read them)."""
    return b"\xff".join([b"", *pieces, _PADDING]).replace(_RSQUO, b"'")


def chunk_bounds(pieces: list[bytes], chunk_bytes: int) -> list[tuple[int, int]]:
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


def buffers(pieces: list[bytes], chunk_bytes: int):
    for a, b in chunk_bounds(pieces, chunk_bytes):
        yield make_buffer(pieces[a:b])


def buffer_pairs(pieces: list[bytes], chunk_bytes: int):
    """(buffer, the same before lower-casing) per chunk of texts."""
    for a, b in chunk_bounds(pieces, chunk_bytes):
        cased = cased_buffer(pieces[a:b])
        yield cased.lower(), cased


# ------------------------------------------------------------- device-level caches

_DEVICE_CACHE: dict = {}


def device_key(xp) -> tuple:
    if xp is np:
        return ("numpy",)
    return (xp.__name__, int(xp.cuda.runtime.getDevice()))


def on_device(xp, name: str, host_array: np.ndarray):
    """`host_array` on `xp`'s current device (copied there once per device)."""
    if xp is np:
        return host_array
    key = device_key(xp) + (name,)
    if key not in _DEVICE_CACHE:
        _DEVICE_CACHE[key] = xp.asarray(host_array)
    return _DEVICE_CACHE[key]
