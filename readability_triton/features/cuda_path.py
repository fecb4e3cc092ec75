"""featurize, WORDS and the seven formulas on a GPU in three CUDA kernels
(`kernels/featurize.cu`), for any array module with CuPy's `RawModule`: CuPy, or the CPU
stand-in that tests and counts them (`kernels/standin.py`).

Per batch (per 8 MiB of text): one upload (the texts' bytes as given, with their separator
positions and the offsets of their hash tables, in one array: the host only joins them; the
kernels read each word in its normal form), one zeroed scratch array (per-text
counters, vocabulary counts and sets of distinct words), one output array, and two
launches (`scan_words`, `finish`): five device calls and no host sync, whatever the batch
size; the vocabulary's and the lexicon's table is built once per device. Every size comes
from the host, which knows the texts' lengths: a text of L bytes has at most (L + 1) / 2
words, so its set of distinct words gets the next power of two above L slots.

Exactness: words are compared byte for byte wherever their hashes agree (`hash_mask`
weakens the hash to force that in tests); counts are integers; the floats follow NumPy's
operations in NumPy's order (no fused multiply-add). The NumPy path (`extract.py`) is the
oracle, and tests/test_kernels.py holds the two equal bit for bit.
"""

from __future__ import annotations

import numpy as np

from ..kernels.source import Kernels, compiled
from . import charclass, formula_words
from .vocabulary import N_BASE, Vocabulary

#: Text per kernel pass. A text of L bytes takes about 17 L bytes of device memory in all.
CHUNK_BYTES = 1 << 23
#: The hash unweakened.
ALL = (1 << 64) - 1
N_COUNTERS = 14
N_PAYLOAD = 6
_LOW = (1 << 32) - 1
_PADDING = bytes(charclass.PAD)


def kernels(xp) -> Kernels:
    """featurize.cu compiled for `xp`'s current device (once per device)."""
    return compiled(xp, "featurize.cu")


class EntryTable:
    """The words the kernels look up, on one device: the vocabulary's (feature column, stop
    word) and, with formulas, the lexicon's (syllables, characters, compound part bits, difficult),
    hashed into an open-addressing table by the `build_table` kernel."""

    def __init__(self, xp, vocabulary: Vocabulary, formulas, hash_mask: int):
        payload: dict[str, list[int]] = {}
        if formulas is not None:
            a, b = formulas.packed
            for word, ai, bi in zip(formulas.entries, a.tolist(), b.tolist()):
                syllables, chars = (-1, 0) if ai < 0 else (ai & _LOW, ai >> 32)
                payload[word] = [-1, 0, syllables, chars, bi & _LOW, bi >> 32]
        for i, word in enumerate(vocabulary.top + vocabulary.bottom):
            payload.setdefault(word, [-1, 0, -1, 0, 0, 1])[0] = i  # top: 0 .. n-1, bottom: n .. 2n-1
        for word in vocabulary.stopwords:
            payload.setdefault(word, [-1, 0, -1, 0, 0, 1])[1] = 1
        words = [w.encode("utf-8") for w in payload]
        count = len(words)
        lengths = np.fromiter(map(len, words), dtype=np.int64, count=count)
        at = np.zeros(count, dtype=np.int64)
        np.cumsum(lengths[:-1], out=at[1:])
        size = 1 << max(1, (2 * count).bit_length())  # at least twice as many slots as entries
        self.count = count
        self.slot_mask = size - 1
        self.bytes = xp.asarray(np.frombuffer(b"".join(words) + b"\0", dtype=np.uint8))
        self.at = xp.asarray(at)
        self.length = xp.asarray(lengths.astype(np.int32))
        self.payload = xp.asarray(np.array(list(payload.values()), dtype=np.int32).reshape(count, N_PAYLOAD))
        # The abbreviations whose dot ends no sentence: always, then before a number only.
        self.abbreviations = xp.asarray(np.concatenate([formula_words.ALWAYS_HEADS, formula_words.NUMBER_HEADS]))
        self.n_always = int(formula_words.ALWAYS_HEADS.size)
        self.hash = xp.zeros(max(count, 1), dtype=xp.uint64)
        self.slots = xp.zeros(size, dtype=xp.int32)
        kernels(xp).launch(
            "build_table", count, self.bytes, self.at, self.length, count, hash_mask, self.hash, self.slots,
            self.slot_mask,
        )  # fmt: skip
        xp.cuda.get_current_stream().synchronize()  # built before any stream uses it (once per device)


def entry_table(xp, vocabulary: Vocabulary, formulas, hash_mask: int = ALL) -> EntryTable:
    key = ("cuda_path", id(xp), *charclass.device_key(xp), formulas, hash_mask)
    table = vocabulary.tables.get(key)
    if table is None:
        table = EntryTable(xp, vocabulary, formulas, hash_mask)
        vocabulary.tables[key] = table
    return table


def outputs(pieces: list[bytes], vocabulary: Vocabulary, formulas, xp, hash_mask: int = ALL):
    """(features `(n, 7 + 2N)`, words `(n, 1)`, formulas `(7, n)` or None) of valid UTF-8
    texts on `xp`; each formula's row is contiguous (`block[k].reshape(-1, 1)` is a view)."""
    table = entry_table(xp, vocabulary, formulas, hash_mask)
    parts = [
        _chunk(xp, pieces[a:b], vocabulary, table, formulas is not None, hash_mask)
        for a, b in charclass.chunk_bounds(pieces, CHUNK_BYTES)
    ]
    if not parts:
        width = N_BASE + 2 * vocabulary.n
        empty = xp.zeros((0, width), dtype=xp.float32)
        return empty, empty[:, :1], (xp.zeros((7, 0), dtype=xp.float32) if formulas is not None else None)
    if len(parts) == 1:
        return parts[0]
    features = xp.concatenate([p[0] for p in parts])
    words = xp.concatenate([p[1] for p in parts])
    block = xp.concatenate([p[2] for p in parts], axis=1) if formulas is not None else None
    return features, words, block


def _chunk(xp, pieces: list[bytes], vocabulary: Vocabulary, table: EntryTable, with_formulas: bool, hash_mask: int):
    n = len(pieces)
    lengths = np.fromiter(map(len, pieces), dtype=np.int64, count=n)
    sep = np.zeros(n + 1, dtype=np.int64)  # the separator before each text, and the last one
    np.cumsum(lengths + 1, out=sep[1:])
    if sep[-1] >= (1 << 31) - charclass.PAD:
        raise ValueError("a text of 2 GiB or more cannot be featurized on the GPU")
    slots = np.left_shift(1, np.frexp(lengths.astype(np.float64))[1].astype(np.int64))  # 2**e > length
    table_at = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(slots, out=table_at[1:])
    head = table_at.tobytes() + sep.astype(np.int32).tobytes()
    head += bytes(-len(head) % 8)
    # [table_at, sep, padding] FF text_0 FF ... FF text_{n-1} FF 00*8, made in one join: the
    # texts as given (the kernels read words in their normal form).
    blob = xp.asarray(np.frombuffer(b"\xff".join([head, *pieces, _PADDING]), dtype=np.uint8))  # the only upload
    table_at_d = blob[: 8 * (n + 1)].view(xp.int64)
    sep_d = blob[8 * (n + 1) : 12 * (n + 1)].view(xp.int32)
    data = blob[len(head) :]

    columns = 2 * vocabulary.n
    width = N_BASE + columns
    distinct_slots = int(table_at[-1])
    scratch = xp.zeros(2 * distinct_slots + n * (N_COUNTERS + columns), dtype=xp.uint32)
    distinct = scratch[: 2 * distinct_slots].view(xp.uint64)
    counters = scratch[2 * distinct_slots : 2 * distinct_slots + n * N_COUNTERS]
    occurrences = scratch[2 * distinct_slots + n * N_COUNTERS :]
    out = xp.empty(n * width + n + (7 * n if with_formulas else 0), dtype=xp.float32)
    features = out[: n * width].reshape(n, width)
    words = out[n * width : n * width + n].reshape(n, 1)
    block = out[n * width + n :].reshape(7, n) if with_formulas else None

    ks = kernels(xp)
    ks.launch(
        "scan_words", int(sep[-1]) - 1, data, sep_d, n, table_at_d, distinct, counters, occurrences, columns,
        table.slots, table.slot_mask, table.bytes, table.at, table.length, table.hash, table.payload,
        hash_mask, int(with_formulas), table.abbreviations, table.n_always, int(table.abbreviations.size),
    )  # fmt: skip
    formulas_out = block if with_formulas else words  # (never written without formulas)
    ks.launch("finish", n * width, counters, occurrences, n, columns, int(with_formulas), features, words, formulas_out)
    return features, words, block
