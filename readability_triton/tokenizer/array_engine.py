"""A WordPiece engine in array code (CuPy on a GPU, NumPy as its twin on the CPU): the GPU
tokenization path where cuDF is not installed.

It provides what `routing.DevicePath` asks of an engine (`max_word_bytes`,
`normalize_text`, `wordpiece`), so the exactness comes from the same routing as cuDF's:
every code point is checked against Hugging Face once (`routing.calibrate_codepoints`),
and texts with one that this engine does not normalize the same way go to the CPU path.
The engine itself knows ASCII only:

- normalization, one character at a time through a table of the Basic Multilingual Plane
  built from Python's `unicodedata` the way Hugging Face's BertNormalizer and
  BertPreTokenizer treat each code point: control and format characters removed,
  whitespace to ' ', punctuation and CJK ideographs padded with a space on each side,
  letters lowered (when the tokenizer lowercases) and, where that leaves one ASCII letter,
  their accents stripped (É -> e); any other character kept as part of a word. The table
  is a first guess: calibration measures every code point against Hugging Face, and texts
  with one where the guess is wrong (e.g. a letter whose lowercase is not ASCII, Æ -> æ)
  go to the CPU path;
- WordPiece over the words (runs of non-space bytes): greedy longest match, all words
  at once, one step per piece. Candidate pieces are looked up by a 64-bit polynomial hash
  of their bytes (prefix sums of `byte * B**i`, mod 2**64) in the sorted hashes of the
  vocabulary (word-initial pieces and `##` continuations apart), and every chosen piece is
  then compared byte for byte with its vocabulary entry; a text where a hash collided is
  re-done by the CPU path (`take_rerouted`). A word that cannot be covered is `[UNK]`.

Byte-wise matching equals Hugging Face's character-wise matching: vocabulary entries are
whole UTF-8 characters, and a byte string equal to one that starts on a character boundary
also ends on one. Words of more than 100 bytes never get here (routing sends their texts to
the CPU path), so Hugging Face's 100-character limit holds.

The loop runs over WordPiece steps (at most the longest word's number of pieces), never
over texts; each step is a handful of array operations over all words still being matched.
"""

from __future__ import annotations

import numpy as np

#: Hash base: odd, so invertible mod 2**64.
_BASE = 0x100000001B3
_MASK = (1 << 64) - 1
_REMOVE, _SPACE, _PUNCT, _WORD, _REPLACE = 0, 1, 2, 3, 4
#: Words of more than this many bytes: routing sends their texts to the CPU path.
MAX_WORD_BYTES = 101
_BMP = 0x10000


def _is_cjk(cp: int) -> bool:
    return 0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0xF900 <= cp <= 0xFAFF or 0x2E80 <= cp <= 0x2FDF


def character_tables(do_lower: bool) -> tuple[np.ndarray, np.ndarray]:
    """(kind, replacement byte) of each code point below U+10000: what this engine does
    with it (see the module docstring). Characters beyond the BMP are kept in words."""
    import unicodedata

    kind = np.full(_BMP, _WORD, dtype=np.uint8)
    replacement = np.zeros(_BMP, dtype=np.uint8)
    for cp in range(_BMP):
        if 0xD800 <= cp < 0xE000:
            continue  # never in valid UTF-8
        char = chr(cp)
        category = unicodedata.category(char)
        if char in "\t\n\r " or category == "Zs":
            kind[cp] = _SPACE
        elif cp == 0 or cp == 0xFFFD or category in ("Cc", "Cf"):
            kind[cp] = _REMOVE
        elif (
            33 <= cp <= 47
            or 58 <= cp <= 64
            or 91 <= cp <= 96
            or 123 <= cp <= 126
            or category.startswith("P")
            or _is_cjk(cp)
        ):
            kind[cp] = _PUNCT
        elif do_lower and category == "Mn":
            kind[cp] = _REMOVE  # a combining accent on its own: stripped
        elif do_lower:
            folded = "".join(c for c in unicodedata.normalize("NFD", char.lower()) if unicodedata.category(c) != "Mn")
            if folded != char and len(folded) == 1 and ord(folded) < 128:
                kind[cp] = _REPLACE
                replacement[cp] = ord(folded)
    return kind, replacement


def _hash_bytes(data: bytes) -> int:
    value, power = 0, 1
    for byte in data:
        value = (value + byte * power) & _MASK
        power = (power * _BASE) & _MASK
    return value


def vocabulary_pieces(vocabulary: list[str]) -> list[tuple[int, bytes, bool]]:
    """(token id, piece bytes, continuation) of every token with a piece: `##x` is the
    continuation piece `x`, anything else (`##` itself too) a word-initial piece."""
    out = []
    for token_id, token in enumerate(vocabulary):
        continuation = token.startswith("##") and len(token) > 2
        piece = (token[2:] if continuation else token).encode("utf-8")
        if piece:
            out.append((token_id, piece, continuation))
    return out


class ArrayEngine:
    """WordPiece for `routing.DevicePath` on array module `xp` (cupy or numpy)."""

    max_word_bytes = MAX_WORD_BYTES

    def __init__(self, vocabulary: list[str], do_lower: bool, unk_token: str = "[UNK]", xp=np):
        self.xp = xp
        self.do_lower = bool(do_lower)
        self.host_tables = character_tables(self.do_lower)  # (kind, replacement) on the host
        self._tables_on = {np: self.host_tables}
        self._tables_on[xp] = tuple(xp.asarray(t) for t in self.host_tables)
        if unk_token not in vocabulary:
            raise ValueError(f"the vocabulary has no unknown token {unk_token!r}")
        self.unk_id = vocabulary.index(unk_token)
        entries: dict[bool, list[tuple[int, int, bytes]]] = {False: [], True: []}
        for token_id, piece, continuation in vocabulary_pieces(vocabulary):
            entries[continuation].append((_hash_bytes(piece), token_id, piece))
        self.max_piece = max(len(p) for group in entries.values() for _, _, p in group)
        self._tables = {}
        for continuation, group in entries.items():
            group.sort()
            hashes = np.array([h for h, _, _ in group], dtype=np.uint64)
            if np.unique(hashes).size != hashes.size:
                raise ValueError("two vocabulary pieces share a 64-bit hash")  # the CPU path then
            self._tables[continuation] = (
                xp.asarray(hashes),
                xp.asarray(np.array([i for _, i, _ in group], dtype=np.int64)),
            )
        # Every entry's bytes, padded, by token id: the check of each chosen piece.
        pieces = np.zeros((len(vocabulary), self.max_piece), dtype=np.uint8)
        lengths = np.zeros(len(vocabulary), dtype=np.int64)
        for group in entries.values():
            for _, token_id, piece in group:
                pieces[token_id, : len(piece)] = np.frombuffer(piece, dtype=np.uint8)
                lengths[token_id] = len(piece)
        self._pieces, self._piece_lengths = xp.asarray(pieces), xp.asarray(lengths)
        self._rerouted = np.zeros(0, dtype=np.int64)

    # ------------------------------------------------------------ normalization

    def _normalize(self, buf, xp):
        """Normalized bytes of UTF-8 `buf` (uint8) and, per input byte, where its output
        starts. Each character's bytes emit themselves (a word character), themselves
        between two spaces (punctuation), one space, one ASCII byte, or nothing."""
        kinds, replacements = self._tables_on[xp]
        n = int(buf.shape[0])
        if n == 0:
            return xp.zeros(0, dtype=xp.uint8), xp.zeros(0, dtype=xp.int64)
        b = buf.astype(xp.int64)
        lead = xp.flatnonzero((b & 0xC0) != 0x80)
        b0 = b[lead]
        size = xp.where(b0 < 0x80, 1, xp.where(b0 < 0xE0, 2, xp.where(b0 < 0xF0, 3, 4)))
        b1 = b[xp.clip(lead + 1, 0, n - 1)] & 0x3F
        b2 = b[xp.clip(lead + 2, 0, n - 1)] & 0x3F
        cp = xp.where(
            size == 1,
            b0,
            xp.where(
                size == 2, ((b0 & 0x1F) << 6) | b1, xp.where(size == 3, ((b0 & 0x0F) << 12) | (b1 << 6) | b2, _BMP)
            ),
        )
        inside = cp < _BMP
        kind = xp.where(inside, kinds[xp.where(inside, cp, 0)], _WORD).astype(xp.uint8)
        # Per byte: the kind of its character; whether it is the character's first / last byte.
        byte_kind = xp.empty(n, dtype=xp.uint8)
        for k in range(4):  # a character's k-th byte (UTF-8: at most 4)
            has = xp.flatnonzero(size > k)
            byte_kind[lead[has] + k] = kind[has]
        first = xp.zeros(n, dtype=bool)
        first[lead] = True
        last = xp.zeros(n, dtype=bool)
        last[lead + size - 1] = True
        punct = byte_kind == _PUNCT
        emits = (byte_kind == _WORD) | punct | (first & ((byte_kind == _SPACE) | (byte_kind == _REPLACE)))
        pre = (punct & first).astype(xp.int64)
        emit = pre + emits.astype(xp.int64) + (punct & last).astype(xp.int64)
        ends = xp.cumsum(emit)
        starts = ends - emit
        out = xp.full(int(ends[-1]), 32, dtype=xp.uint8)
        value = buf.copy()
        value[byte_kind == _SPACE] = 32
        replace = kind == _REPLACE
        value[lead[replace]] = replacements[cp[replace]]
        out[(starts + pre)[emits]] = value[emits]
        return out, starts

    def normalize_text(self, text: str) -> str:
        """What this engine makes of `text` before splitting it at ' ' (NumPy, on the host)."""
        buf = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
        out, _ = self._normalize(buf, np)
        return out.tobytes().decode("utf-8", errors="replace")

    # ------------------------------------------------------------------ wordpiece

    def take_rerouted(self) -> np.ndarray:
        """Strings of the last `wordpiece` call whose ids may be wrong (a hash collision):
        `DevicePath` re-does them on the CPU path."""
        rerouted, self._rerouted = self._rerouted, np.zeros(0, dtype=np.int64)
        return rerouted

    def wordpiece(self, data: bytes, starts: np.ndarray, max_words: int = 0):
        """Token ids of each string `data[starts[i]:starts[i+1]]`: (values, counts) `xp` arrays,
        the ids of all strings back to back."""
        xp = self.xp
        n_rows = int(starts.shape[0]) - 1
        buf = xp.asarray(np.frombuffer(data, dtype=np.uint8))
        text, position = self._normalize(buf, xp)
        n = int(text.shape[0])
        row_starts = xp.concatenate([position, xp.asarray([n], dtype=xp.int64)])[xp.asarray(starts[:-1])]
        # Words: runs of non-space bytes.
        word = text != 32
        previous = xp.concatenate([xp.zeros(1, dtype=bool), word[:-1]])
        following = xp.concatenate([word[1:], xp.zeros(1, dtype=bool)])
        word_start = xp.flatnonzero(word & ~previous)
        word_end = xp.flatnonzero(word & ~following) + 1
        n_words = int(word_start.shape[0])
        if n_words == 0:
            return xp.zeros(0, dtype=xp.int64), xp.zeros(n_rows, dtype=xp.int64)
        row = xp.searchsorted(row_starts, word_start, side="right") - 1
        # Prefix sums of byte * B**i (mod 2**64): hash(s, l) = (S[s+l] - S[s]) * B**-s.
        one = xp.ones(1, dtype=xp.uint64)
        powers = xp.concatenate([one, xp.cumprod(xp.full(n, _BASE, dtype=xp.uint64))])  # B**i, wrapping
        inverses = xp.concatenate([one, xp.cumprod(xp.full(n, pow(_BASE, -1, 1 << 64), dtype=xp.uint64))])
        prefix = xp.concatenate([xp.zeros(1, dtype=xp.uint64), xp.cumsum(text.astype(xp.uint64) * powers[:n])])
        lengths = xp.arange(1, self.max_piece + 1, dtype=xp.int64)
        pos = word_start.copy()
        failed = (word_end - word_start) > 100  # Hugging Face: [UNK]; routing keeps these away
        active = xp.flatnonzero(~failed)
        piece_word, piece_step, piece_id, piece_pos = [], [], [], []
        step = 0
        while active.shape[0]:
            start = pos[active]
            left = word_end[active] - start
            ends = start[:, None] + lengths[None, :]
            valid = lengths[None, :] <= left[:, None]
            ends = xp.where(valid, ends, start[:, None])
            hashes = (prefix[ends] - prefix[start][:, None]) * inverses[start][:, None]
            table, ids = self._tables[step > 0]
            found = xp.clip(xp.searchsorted(table, hashes), 0, table.shape[0] - 1)
            hit = valid & (table[found] == hashes)
            best = xp.where(hit, lengths[None, :], 0).max(axis=1)
            matched = best > 0
            failed[active[~matched]] = True
            take = xp.flatnonzero(matched)
            chosen = ids[found[take, best[take] - 1]]
            piece_word.append(active[take])
            piece_step.append(xp.full(take.shape[0], step, dtype=xp.int64))
            piece_id.append(chosen)
            piece_pos.append(start[take])
            pos[active[take]] = start[take] + best[take]
            still = active[take]
            active = still[pos[still] < word_end[still]]
            step += 1
        words = xp.concatenate(piece_word) if piece_word else xp.zeros(0, dtype=xp.int64)
        steps = xp.concatenate(piece_step) if piece_step else xp.zeros(0, dtype=xp.int64)
        token_ids = xp.concatenate(piece_id) if piece_id else xp.zeros(0, dtype=xp.int64)
        at = xp.concatenate(piece_pos) if piece_pos else xp.zeros(0, dtype=xp.int64)
        self._check(text, at, token_ids, row[words])
        # A word that failed anywhere is one [UNK]; else its pieces in order.
        pieces_per_word = (
            xp.bincount(words, minlength=n_words).astype(xp.int64)
            if words.shape[0]
            else xp.zeros(n_words, dtype=xp.int64)
        )
        count = xp.where(failed, 1, pieces_per_word)
        offset = xp.cumsum(count) - count
        values = xp.full(int(count.sum()), self.unk_id, dtype=xp.int64)
        keep = ~failed[words]
        values[offset[words[keep]] + steps[keep]] = token_ids[keep]
        counts = xp.bincount(row, weights=count.astype(xp.float64), minlength=n_rows).astype(xp.int64)
        return values, counts

    def _check(self, text, at, token_ids, rows) -> None:
        """Each chosen piece's bytes against its vocabulary entry: strings where a hash
        collided are noted for `take_rerouted`."""
        xp = self.xp
        if not token_ids.shape[0]:
            self._rerouted = np.zeros(0, dtype=np.int64)
            return
        cols = xp.arange(self.max_piece, dtype=xp.int64)[None, :]
        length = self._piece_lengths[token_ids][:, None]
        got = text[xp.clip(at[:, None] + cols, 0, text.shape[0] - 1)]
        want = self._pieces[token_ids]
        wrong = ((got != want) & (cols < length)).any(axis=1)
        bad = rows[wrong]
        self._rerouted = np.unique(bad.get() if hasattr(bad, "get") else np.asarray(bad)).astype(np.int64)
