"""Words of a batch buffer: found, hashed and grouped into classes of equal words, with
one implementation for NumPy and CuPy (the array module `xp` is a parameter).

The steps (`extract.py` drives them), on a buffer from `charclass.make_buffer`:

1. classify: `charclass.BYTE_TABLE` gives every byte its flags; the multi-byte characters
   that are not WORDCHAR are decoded and fixed up;
2. words: an apostrophe between two WORDCHARs joins them; word boundaries are where the
   in-word mask changes;
3. values: every word is read 8 bytes at a time; the first 8 bytes (masked to the word)
   identify a word of up to 8 bytes exactly; longer words add their further chunks into
   a 64-bit hash;
4. classes: sort the words by (hash, position); equal hashes form runs; every word is
   compared, chunk by chunk, with the first word of its run, and words that differ (hash
   collisions) are split off into classes of their own until every class holds exactly
   one word. No collision can ever merge two different words;
5. counts per text by segment sums (in `extract.py`).

Device-specific code is limited to `NumpyOps` (the byte table applied with
`bytes.translate`, unaligned 8-byte loads through a strided view, `np.repeat` with an
array of counts): `GenericOps` builds the same results from gathers, `cumsum` and
`searchsorted`, which CuPy has. The tests run both on NumPy and compare them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .charclass import (  # noqa: F401
    APOSTROPHE,
    BYTE_TABLE,
    BYTE_TRANSLATION,
    CODEPOINT_TABLE,
    LEAD,
    SEPARATOR_FLAG,
    TERMINATOR,
    WORD,
    on_device,
)

# ----------------------------------------------------------------------------- ops

_U64 = np.uint64


class GenericOps:
    """The device-specific primitives, from gathers, cumsum and searchsorted only."""

    #: Bytes of text per pass: a GPU wants the whole batch at once (bounded for memory).
    chunk_bytes = 1 << 24

    def __init__(self, xp):
        self.xp = xp

    def byte_flags(self, data, buffer: bytes):
        """The byte table applied to `data` (the buffer on the device)."""
        return self.xp.take(on_device(self.xp, "byte_table", BYTE_TABLE), data)

    def repeat(self, values, counts, total: int):
        """`values[i]` repeated `counts[i]` times (counts >= 0, total == counts.sum())."""
        xp = self.xp
        if total == 0:
            return values[:0]
        ends = xp.cumsum(counts)
        return values[xp.searchsorted(ends, xp.arange(total, dtype=ends.dtype), side="right")]

    def load8(self, data, positions):
        """The 8 bytes at each position, little-endian, as uint64."""
        xp = self.xp
        out = data[positions].astype(xp.uint64)
        for j in range(1, 8):
            out |= data[positions + j].astype(xp.uint64) << _U64(8 * j)
        return out

    def segment_sum(self, values, starts):
        """Sums (wrapping, in values' dtype) of values[starts[i]:starts[i+1]], the last to
        the end; `starts` strictly increasing and inside `values`."""
        xp = self.xp
        c = xp.concatenate([xp.zeros(1, dtype=values.dtype), xp.cumsum(values, dtype=values.dtype)])
        ends = xp.concatenate([starts[1:], xp.full(1, values.size, dtype=starts.dtype)])
        return c[ends] - c[starts]


class NumpyOps(GenericOps):
    """The same primitives with NumPy's and CPython's single-pass routines."""

    #: On a CPU, passes over about 256 KiB of text keep the working set in the caches
    #: (measured: 2048 CommonLit excerpts in one pass run at about half the speed).
    chunk_bytes = 1 << 18

    def __init__(self):
        super().__init__(np)

    def byte_flags(self, data, buffer: bytes):
        return np.frombuffer(buffer.translate(BYTE_TRANSLATION), dtype=np.uint8).copy()

    def repeat(self, values, counts, total: int):
        return np.repeat(values, counts)

    def load8(self, data, positions):
        # An unaligned, overlapping view: element i is the 8 bytes data[i:i+8].
        view: np.ndarray = np.ndarray(shape=(data.size - 7,), dtype="<u8", buffer=data, strides=(1,))
        return view[positions]

    def segment_sum(self, values, starts):
        if starts.size == 0:
            return np.zeros(0, dtype=values.dtype)
        return np.add.reduceat(values, starts, dtype=values.dtype)


def default_ops(xp):
    return NumpyOps() if xp is np else GenericOps(xp)


# ---------------------------------------------------------------------------- words


def _mix(xp, z):
    """A bijective 64-bit mixer (odd multiply, xor-shift) that moves every input bit
    into the high bits, which the sort keys keep."""
    z = z * _U64(0x9E3779B97F4A7C15)
    return z ^ (z >> _U64(32))


#: MASKS[k] keeps the first k bytes of a little-endian 8-byte load (k = 0..8).
MASKS = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)


def _masks(xp, lengths):
    """uint64 masks keeping the first min(length, 8) bytes of a little-endian load."""
    return on_device(xp, "masks", MASKS)[xp.minimum(lengths, 8)]


class Tokens:
    """The words of one batch buffer, all arrays on the device:

    `data` (uint8 buffer), `flags` (uint8 per byte), `sep` (separator positions, n + 1),
    `starts`/`ends` (byte offsets of each word, end exclusive), `lengths` (bytes),
    `head` (the word's first 8 bytes, masked: the word itself when it has <= 8 bytes),
    `hashes` (uint64; equal words have equal hashes)."""

    __slots__ = ("data", "flags", "sep", "starts", "ends", "lengths", "head", "hashes")
    data: Any
    flags: Any
    sep: Any
    starts: Any
    ends: Any
    lengths: Any
    head: Any
    hashes: Any


class Weakening:
    """Test hooks that force the two kinds of hash collision the code must survive:
    `key_mask` is applied to the hashes before they are sorted (words with different
    hashes land in one run), `tail_mask` to what the chunks after the first 8 bytes add to
    a long word's hash (long words with equal first 8 bytes and length get equal hashes).
    Words of up to 8 bytes cannot collide: their hash is a bijection of their bytes."""

    __slots__ = ("key_mask", "tail_mask")

    def __init__(self, key_mask: int = 0xFFFFFFFFFFFFFFFF, tail_mask: int = 0xFFFFFFFFFFFFFFFF):
        self.key_mask, self.tail_mask = key_mask, tail_mask


NONE = Weakening()


def find_words(xp, ops, buffer: bytes, data=None, weak: Weakening = NONE) -> Tokens:
    """Classify a batch buffer (`charclass.make_buffer`) and find and hash its words.

    `data` is the buffer already on the device (copied from `buffer` if None)."""
    if data is None:
        data = xp.asarray(np.frombuffer(buffer, dtype=np.uint8))
    flags = ops.byte_flags(data, buffer)
    tokens = Tokens()
    tokens.data, tokens.flags = data, flags
    tokens.sep = xp.flatnonzero(flags == SEPARATOR_FLAG)
    _fix_up_multibyte(xp, data, flags)
    word = flags & WORD
    in_word = word.copy()
    # An apostrophe whose previous and next code points are both WORDCHAR is inside a word
    # (the neighbours' flags are on every byte of a character, so the adjacent bytes tell;
    # bit 0 of flags >> 1 is APOSTROPHE, and word is 0 or 1).
    in_word[1:-1] |= (flags[1:-1] >> 1) & word[:-2] & word[2:]
    edges = xp.flatnonzero((in_word[1:] ^ in_word[:-1]).view(bool)) + 1
    tokens.starts, tokens.ends = edges[0::2], edges[1::2]
    tokens.lengths = tokens.ends - tokens.starts
    tokens.head, tokens.hashes = span_hashes(xp, ops, data, tokens.starts, tokens.lengths, weak)
    return tokens


def span_hashes(xp, ops, data, starts, lengths, weak: Weakening = NONE):
    """(head, hash) of the byte spans `data[starts[i]:starts[i] + lengths[i]]` (lengths >= 1):
    a word's, where the span is one word of `find_words`; any other span gets the hash that
    word would have (the formulas look up parts of words with it)."""
    head = ops.load8(data, starts) & _masks(xp, lengths)
    acc = head.copy()
    long_words = xp.flatnonzero(lengths > 8)
    if long_words.size:
        owner, offset, remaining, counts = _chunks_of(xp, ops, lengths[long_words])
        chunks = ops.load8(data, starts[long_words][owner] + offset) & _masks(xp, remaining)
        mixed = _mix(xp, chunks ^ (offset.astype(xp.uint64) * _U64(0x9E3779B97F4A7C15)))
        tail = ops.segment_sum(mixed, xp.cumsum(counts) - counts)
        if weak.tail_mask != NONE.tail_mask:
            tail &= _U64(weak.tail_mask)
        acc[long_words] += tail
    return head, _mix(xp, acc)


def _fix_up_multibyte(xp, data, flags):
    """Flags of the multi-byte characters that are not WORDCHAR (leads C2, E0-E3)."""
    lead = xp.flatnonzero((flags & LEAD) != 0)
    if not lead.size:
        return
    b0 = data[lead].astype(xp.int64)
    b1 = data[lead + 1].astype(xp.int64) & 0x3F
    b2 = data[lead + 2].astype(xp.int64) & 0x3F
    two = b0 == 0xC2
    cp = xp.where(two, ((b0 & 0x1F) << 6) | b1, ((b0 & 0x0F) << 12) | (b1 << 6) | b2)
    f = on_device(xp, "codepoint_table", CODEPOINT_TABLE)[cp]
    rest = f & (WORD | TERMINATOR)  # PUNCT only on the first byte: one count per code point
    flags[lead] = f  # (also clears LEAD)
    flags[lead + 1] = rest
    three = xp.flatnonzero(~two)
    flags[lead[three] + 2] = rest[three]


def _chunks_of(xp, ops, lengths):
    """The 8-byte chunks after the first of words longer than 8 bytes: for each chunk its
    word (index into `lengths`), its offset in the word (8, 16, ...) and the bytes from it
    to the end of the word; and the number of such chunks per word."""
    counts = (lengths - 1) // 8
    total = int(counts.sum())
    owner = ops.repeat(xp.arange(counts.size, dtype=xp.int64), counts, total)
    chunk_no = xp.arange(1, total + 1, dtype=xp.int64) - ops.repeat(xp.cumsum(counts) - counts, counts, total)
    offset = 8 * chunk_no
    return owner, offset, lengths[owner] - offset, counts


# --------------------------------------------------------------- exact comparisons


def words_equal(xp, ops, a: Tokens, ia, b: Tokens, ib):
    """Exact equality of word `ia[i]` of `a` and word `ib[i]` of `b`, byte for byte."""
    lengths = a.lengths[ia]
    same = (lengths == b.lengths[ib]) & (a.head[ia] == b.head[ib])
    check = xp.flatnonzero(same & (lengths > 8))
    if check.size:
        owner, offset, remaining, counts = _chunks_of(xp, ops, lengths[check])
        pos_a = a.starts[ia[check]][owner] + offset
        pos_b = b.starts[ib[check]][owner] + offset
        masks = _masks(xp, remaining)
        differ = xp.flatnonzero((ops.load8(a.data, pos_a) & masks) != (ops.load8(b.data, pos_b) & masks))
        if differ.size:
            ends = xp.cumsum(counts)
            same[check[xp.searchsorted(ends, differ, side="right")]] = False
    return same


# ------------------------------------------------------------------------- classes


class Classes:
    """The words of a batch grouped into classes of exactly equal words.

    `order[k]` is the word at sorted position k; the words of class c are
    `order[first[c]:first[c+1]]`, in text order; `key[c]` is the class' hash key
    (non-decreasing in c); `new_run[k]` is True where a class starts; `key_bits`
    the number of low hash bits the keys leave out; `collisions` the number of words that
    had to be split off their hash run."""

    __slots__ = ("order", "first", "new_run", "key", "key_bits", "key_mask", "collisions")
    order: Any
    first: Any
    new_run: Any
    key: Any
    key_bits: int
    key_mask: int
    collisions: int


def runs(xp, values):
    """True where a run of equal values starts."""
    new = xp.empty(values.size, dtype=bool)
    new[:1] = True
    new[1:] = values[1:] != values[:-1]
    return new


def classes(xp, ops, tokens: Tokens, weak: Weakening = NONE) -> Classes:
    """Group the words into classes of exactly equal words (see the module doc).

    Words are sorted by (the hash's high bits, position). Within a run of equal keys it is
    enough that each word equals the word before it. For words of up to 8 bytes the
    64-bit hash is a bijection of the word, so equal hashes are equal words; longer words
    are also compared chunk by chunk. Any mismatch (a collision) is peeled off exactly."""
    W = int(tokens.starts.size)
    wbits = max(1, W.bit_length())
    low = _U64((1 << wbits) - 1)
    keys = tokens.hashes if weak.key_mask == NONE.key_mask else tokens.hashes & _U64(weak.key_mask)
    packed = (keys & ~low) | xp.arange(W, dtype=xp.uint64)
    packed.sort()
    order = (packed & low).view(xp.int64)
    sorted_keys = packed >> _U64(wbits)
    same_key = sorted_keys[1:] == sorted_keys[:-1]
    new_run = xp.concatenate([xp.ones(1, dtype=bool), ~same_key])
    hashes = tokens.hashes[order]
    lengths = tokens.lengths[order]
    same = (hashes[1:] == hashes[:-1]) & (lengths[1:] == lengths[:-1])  # implies same_key
    long_pairs = xp.flatnonzero(same & (lengths[1:] > 8))
    if long_pairs.size:
        same[long_pairs] = words_equal(xp, ops, tokens, order[long_pairs], tokens, order[long_pairs + 1])
    pending = xp.flatnonzero(same ^ same_key) + 1  # same key, but not the word before it
    collisions = int(pending.size)
    first = xp.flatnonzero(new_run)
    if collisions:
        # Peel the collisions off: compare every member of an affected run with the run's
        # first word; each round, the first pending word of each run starts a new class,
        # and the pending words equal to it join that class.
        run_id = xp.cumsum(new_run, dtype=xp.int64) - 1
        rep = first[run_id]
        touched = xp.zeros(int(first.size), dtype=bool)
        touched[run_id[pending]] = True
        members = xp.flatnonzero(touched[run_id] & ~new_run)
        same = words_equal(xp, ops, tokens, order[members], tokens, order[rep[members]])
        pending = members[~same]
        while pending.size:
            head = runs(xp, run_id[pending])
            new_rep = pending[xp.flatnonzero(head)][xp.cumsum(head, dtype=xp.int64) - 1]
            rep[pending] = new_rep
            others = xp.flatnonzero(~head)
            same = words_equal(xp, ops, tokens, order[pending[others]], tokens, order[new_rep[others]])
            pending = pending[others[~same]]
        # Sort by (representative, position): classes become contiguous and stay in key order.
        packed = (rep.astype(xp.uint64) << _U64(wbits)) | order.astype(xp.uint64)
        packed.sort()
        reps = (packed >> _U64(wbits)).astype(xp.int64)
        order = (packed & low).view(xp.int64)
        sorted_keys = sorted_keys[reps]
        new_run = runs(xp, reps)
        first = xp.flatnonzero(new_run)
    cls = Classes()
    cls.order, cls.first, cls.new_run = order, first, new_run
    cls.key, cls.key_bits, cls.key_mask, cls.collisions = sorted_keys[first], wbits, weak.key_mask, collisions
    return cls


def match_words(xp, ops, tokens: Tokens, cls: Classes, words: Tokens):
    """For each word of `words`, the class of `tokens` holding exactly that word, or -1."""
    D = int(words.starts.size)
    found = xp.full(D, -1, dtype=xp.int64)
    C = int(cls.first.size)
    if D == 0 or C == 0:
        return found
    keys = (words.hashes & _U64(cls.key_mask)) >> _U64(cls.key_bits)
    lo = xp.searchsorted(cls.key, keys, side="left")
    active = xp.arange(D, dtype=xp.int64)
    step = 0
    while active.size:  # more than one round only where several classes share a key
        cand = lo[active] + step
        keep = xp.flatnonzero(cand < C)
        active, cand = active[keep], cand[keep]
        keep = xp.flatnonzero(cls.key[cand] == keys[active])
        active, cand = active[keep], cand[keep]
        if not active.size:
            break
        same = words_equal(xp, ops, words, active, tokens, cls.order[cls.first[cand]])
        hit = xp.flatnonzero(same)
        found[active[hit]] = cand[hit]
        active = active[xp.flatnonzero(~same)]
        step += 1
    return found
