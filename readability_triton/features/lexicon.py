"""The formulas' lexicon on one device: the CMU dictionary's words and the familiar words,
looked up by hash and confirmed byte for byte (`formulas.Formulas` builds and uses it)."""

from __future__ import annotations

import numpy as np

from . import charclass, words

HALF = 32
LOW = (1 << HALF) - 1


def on(xp, name: str, host: np.ndarray):
    """`host` on `xp`'s current device, copied once (`charclass.on_device`)."""
    return charclass.on_device(xp, name, host)


#: Per word, two packed int64 columns (summed per formula word, then per text):
#: `syllables | characters << 32` (-1: the fallback rule decides) and `compound part bits
#: (formula_words.FIRST_PART, SECOND_PART) | difficult (not familiar) << 32`.
#: Each half stays below 2**32 for any buffer under 300 MB (syllables <= 13 per byte).
MISS_B = 1 << HALF  # a word not in the lexicon is difficult (unless a numeral: the rule says)


class Lexicon:
    """The dictionary's words and the familiar words (all distinct, all single words) on one
    device, in the order of their hashes: `hashes`, `bucket[s]` (the first entry whose hash
    has high bits >= s), `a` and `b` (their packed columns, then at index `size` those of a
    word not in the lexicon: -1 and MISS_B)."""

    def __init__(self, xp, entries: list[str], a: np.ndarray, b: np.ndarray):
        host = words.find_words(np, words.default_ops(np), charclass.make_buffer([e.encode("utf-8") for e in entries]))
        size = len(entries)
        if int(host.starts.size) != size or int(np.unique(host.hashes).size) != size:
            raise ValueError("the lexicon's entries must be distinct single words with distinct hashes")
        bits = max(1, (4 * size - 1).bit_length())  # at least four times as many buckets as entries
        self.shift = np.uint64(64 - bits)
        order = np.argsort(host.hashes)
        bucket = np.searchsorted(host.hashes[order] >> self.shift, np.arange((1 << bits) + 1, dtype=np.uint64))
        self.size = size
        self.tokens = words.Tokens()
        self.tokens.data = xp.asarray(np.append(host.data, np.zeros(16, dtype=np.uint8)))  # see `same`
        self.tokens.starts, self.tokens.lengths, self.tokens.head = (
            xp.asarray(getattr(host, name)[order]) for name in ("starts", "lengths", "head")
        )
        # After the last entry: a hash no word whose bucket starts there can have (slot 0).
        self.hashes = xp.asarray(np.append(host.hashes[order], np.uint64(0)))
        self.bucket = xp.asarray(bucket.astype(np.int32))
        self.lengths = xp.asarray(np.append(host.lengths[order], 0))
        ab = np.stack([np.append(a[order], -1), np.append(b[order], MISS_B)], axis=1)
        self.ab = xp.asarray(np.ascontiguousarray(ab).view(np.complex128).ravel())  # (bits only: no arithmetic)

    def find(self, xp, ops, tokens: words.Tokens):
        """The entry of each word of `tokens` (`size`: none): the first entry of the word's
        bucket if its hash is the word's, else, where the bucket holds 2 entries or more, a
        binary search of the hashes. Equal hashes and lengths are equal words up to 8 bytes (the
        hash is a bijection of the word there); longer ones are compared byte for byte.
        (An empty bucket's start is the next bucket's first entry, or `size`: neither has
        the word's hash.)"""
        q = tokens.hashes
        key = (q >> self.shift).astype(xp.int64)
        lo = self.bucket[key]
        found = xp.where(self.hashes[lo] == q, lo, self.size)
        more = xp.flatnonzero((found == self.size) & (self.bucket[key + 1] - lo > 1))  # (else: not there)
        if more.size:
            at = xp.searchsorted(self.hashes[:-1], q[more])
            hit = self.hashes[at] == q[more]
            found[more[hit]] = at[hit]
        same = self.lengths[found] == tokens.lengths  # (never for `size`: its length is 0)
        check = xp.flatnonzero(same & (tokens.lengths > 8))
        if check.size:
            same[check] = self.same(xp, ops, tokens, check, found[check])
        return xp.where(same, found, self.size)

    def same(self, xp, ops, tokens: words.Tokens, index, entry):
        """Word `index[i]` of `tokens` (9 bytes or more) equals entry `entry[i]` of the same
        length and hash, byte for byte: the first 16 bytes here, longer words by
        `words.words_equal`."""
        lengths = tokens.lengths[index]
        same = tokens.head[index] == self.tokens.head[entry]
        mine = ops.load8(tokens.data, tokens.starts[index] + 8)  # (a buffer ends 9 bytes after a word)
        theirs = ops.load8(self.tokens.data, self.tokens.starts[entry] + 8)
        same &= ((mine ^ theirs) & on(xp, "masks", words.MASKS)[xp.minimum(lengths - 8, 8)]) == 0
        longer = xp.flatnonzero(same & (lengths > 16))
        if longer.size:
            same[longer] = words.words_equal(xp, ops, tokens, index[longer], self.tokens, entry[longer])
        return same

    def columns(self, xp, found):
        """The packed columns (a, b) of `find`'s entries, as two int64 arrays."""
        both = self.ab[found].view(xp.int64)  # one gather of both (16 bytes per entry)
        return both[0::2], both[1::2]
